"""`compact_gpu_buffers` (listed in `lower(f, "cuda")`, after ``convert_blocks``).

Shrinks each ``local`` buffer to what one thread touches (``shared``: one block) and allocates
it at the innermost loop whose iterations cannot pass values through it, so a schedule's
``cache_write(..., "local")`` accumulator becomes the thread's register tile. For a ``local``
buffer every blockIdx/threadIdx loop is the thread's own index, so sibling nests bound to the
same tags (compute, then write back) agree on one per-thread tile; a fragment passed to a WMMA
device function (`tdsl.intrinsics.cuda.FRAGMENT_ARGS`) touches the 16 x 16 tile at the element
passed (per thread = per warp, the lanes being implicit), a T.ptx_wgmma accumulator its n / 2
elements. Buffers passed to other extern calls,
or whose per-thread region is not a constant-size box at a common corner, keep their size (a
symbolic-size one then fails in the CUDA backend with its size named).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..dtypes import int32
from ..ir import (
    Allocate,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    For,
    IntImm,
    IRMutator,
    IRVisitor,
    PrimExpr,
    PrimFunc,
    Stmt,
    Var,
    substitute,
)
from ..ir.opaque_calls import WGMMA
from .gpu_bindings import per_thread_tag


def _cast(dtype, e: PrimExpr) -> PrimExpr:
    from ._util import cast_to

    return cast_to(dtype, e)

SYNC = "__syncthreads"


@dataclass
class _Use:
    indices: tuple[PrimExpr, ...]
    loops: tuple[For, ...]
    tile: tuple[int, ...] = ()     # a fragment argument: the tile (last dims) it stands for


class _UseCollector(IRVisitor):
    """Accesses of every local/shared buffer with their enclosing loops, where each is allocated,
    and the buffers passed to extern calls other than as WMMA fragments (`opaque`)."""

    def __init__(self):
        self.stack: list[For] = []
        self.uses: dict[Buffer, list[_Use]] = {}
        self.allocs: dict[Buffer, tuple[Allocate, tuple[For, ...]]] = {}
        self.opaque: set[Buffer] = set()

    def visit_For(self, op: For) -> None:
        self.visit(op.min)
        self.visit(op.extent)
        self.stack.append(op)
        self.visit(op.body)
        self.stack.pop()

    def visit_Allocate(self, op: Allocate) -> None:
        if op.buffer.scope in ("local", "shared"):
            self.allocs[op.buffer] = (op, tuple(self.stack))
        self.visit(op.body)

    def _use(self, buf: Buffer, indices, tile: tuple[int, ...] = ()) -> None:
        self.uses.setdefault(buf, []).append(_Use(tuple(indices), tuple(self.stack), tile))

    def visit_Call(self, op: Call) -> None:
        from ..intrinsics import cuda_mma
        from ..intrinsics.cuda import FRAGMENT_ARGS, FRAGMENT_TILE
        from ..ir import MATH_CALLS

        if op.op not in MATH_CALLS and op.op not in ("if_then_else", SYNC):
            fragments = FRAGMENT_ARGS.get(op.op, ())
            tiles = cuda_mma.TILE_ARGS.get(op.op, ())
            warp_regs, warp_mem = cuda_mma.WARP_FRAGMENT_ARGS.get(op.op, ()), cuda_mma.WARP_MEMORY_ARGS.get(op.op, ())
            for i, arg in enumerate(op.args):
                if not isinstance(arg, BufferLoad):
                    continue
                if i in warp_regs and isinstance(arg.buffer.shape[-1], IntImm):   # a lane's registers of a tile
                    self._use(arg.buffer, arg.indices, (arg.buffer.shape[-1].value,))
                elif i in warp_mem and len(arg.indices) >= 2:
                    self._use(arg.buffer, arg.indices, cuda_mma.memory_tile(op.op, arg.buffer.dtype.bits))
                elif op.op in cuda_mma.WARP_FRAGMENT_ARGS:
                    pass   # row 1 of a memory tile
                elif op.op == WGMMA and i == 0 and isinstance(op.args[3], IntImm):   # the thread's n / 2 accumulators
                    self._use(arg.buffer, arg.indices, (op.args[3].value // 2,))
                elif i in fragments and arg.buffer.scope == "local" and len(arg.indices) >= len(FRAGMENT_TILE):
                    self._use(arg.buffer, arg.indices, FRAGMENT_TILE)
                elif i in tiles and len(arg.indices) >= 2:   # an mma tile (a fragment or memory row 0)
                    self._use(arg.buffer, arg.indices, cuda_mma.tile_shape(arg.buffer.dtype.bits))
                elif op.op in cuda_mma.TILE_ARGS:
                    pass   # row 1 of a memory tile: an element like any other
                else:
                    # an element standing for a tile of unknown size (and maybe a leading dimension)
                    self.opaque.add(arg.buffer)
        self.generic_visit(op)

    def visit_BufferLoad(self, op: BufferLoad) -> None:
        self._use(op.buffer, op.indices)
        self.generic_visit(op)

    def visit_BufferStore(self, op: BufferStore) -> None:
        self._use(op.buffer, op.indices)
        self.generic_visit(op)


def _thread_vars(buf: Buffer, use: _Use, kept: set[For], lanes: dict[str, Var]) -> dict[Var, PrimExpr] | None:
    """For a local buffer, the use's per-thread loops outside `kept` as the thread's own index
    (`lanes[tag]` + start), so that sibling nests bound to the same tags agree on one thread's
    region; None when a tag is bound twice on the way (no single index per thread)."""
    if buf.scope != "local":
        return {}
    kept_tags = {per_thread_tag(f) for f in kept} - {None}
    out: dict[Var, PrimExpr] = {}
    seen: set[str] = set()
    for f in use.loops:
        tag = per_thread_tag(f)
        if tag is None or f in kept:
            continue
        if tag in seen or tag in kept_tags:
            return None
        seen.add(tag)
        lane = lanes.setdefault(tag, Var(f"tdsl_{tag.replace('.', '_')}", int32))
        start = lane if lane.dtype == f.loop_var.dtype else _cast(f.loop_var.dtype, lane)
        out[f.loop_var] = start if isinstance(f.min, IntImm) and f.min.value == 0 else start + f.min
    return out


def _region(buf: Buffer, uses: list[_Use], keep: tuple[For, ...],
            lanes: dict[str, Var]) -> list[tuple[PrimExpr, int]] | None:
    """Per dimension (min, constant extent) of what `uses` touch with the loops in `keep` fixed
    (local buffers: every thread-bound loop is fixed, written with the `lanes` Vars; shared
    buffers: threadIdx loops always vary, a block's threads share them); None if unknown."""
    from ..arith import relax, simplify
    from ..ir import Range

    kept = set(keep)
    lows: list[list[PrimExpr]] = [[] for _ in buf.shape]
    highs: list[list[PrimExpr]] = [[] for _ in buf.shape]
    for use in uses:
        fixed = _thread_vars(buf, use, kept, lanes)
        if fixed is None:
            return None
        ranges = {}
        for f in use.loops:
            shared_thread = buf.scope == "shared" and f.kind == "thread_binding" and (f.thread_tag or "").startswith("threadIdx")
            if (f not in kept and f.loop_var not in fixed) or shared_thread:
                ranges[f.loop_var] = Range(f.min, f.extent)
        tile = (1,) * (len(use.indices) - len(use.tile)) + use.tile
        for d, (idx, extra) in enumerate(zip(use.indices, tile)):
            if idx.dtype.lanes != 1:
                return None
            lo, hi = relax(substitute(idx, fixed), ranges)
            if lo is None or hi is None:
                return None
            lows[d].append(lo)
            highs[d].append(hi + (extra - 1) if extra > 1 else hi)
    out = []
    for lo_list, hi_list in zip(lows, highs):
        base = lo_list[0]
        offs = [o for o in (simplify(x - base) for x in lo_list + hi_list) if isinstance(o, IntImm)]
        if len(offs) != len(lo_list) + len(hi_list):
            return None
        lo_off = min(o.value for o in offs[:len(lo_list)])
        hi_off = max(o.value for o in offs[len(lo_list):])
        out.append((simplify(base + lo_off) if lo_off else base, hi_off - lo_off + 1))
    return out


def _disjoint_iterations(region: list[tuple[PrimExpr, int]], loop: For) -> bool:
    """Different iterations of `loop` touch different elements (so no value flows between them)."""
    from ..arith import linear_form

    for lo, extent in region:
        form = linear_form(lo, [loop.loop_var])
        if form is not None and abs(form[0][loop.loop_var]) >= extent:
            return True
    return False


class _Compactor(IRMutator):
    """Moves the accesses of `old` to `new`, shifted by `mins`; a `lanes` Var in a min stands for
    the thread index of that tag, i.e. the enclosing loop bound to it (minus its start)."""

    def __init__(self, old: Allocate, new: Buffer, mins: list[PrimExpr], anchor: For | None,
                 lanes: dict[str, Var]):
        self.old, self.new, self.mins, self.anchor = old, new, mins, anchor
        self.lane_tags = {v: t for t, v in lanes.items()}
        self.stack: list[For] = []

    def _lane_values(self) -> dict[Var, PrimExpr]:
        out: dict[Var, PrimExpr] = {}
        for f in self.stack:
            for lane, tag in self.lane_tags.items():
                if per_thread_tag(f) == tag:
                    value = f.loop_var if isinstance(f.min, IntImm) and f.min.value == 0 else f.loop_var - f.min
                    out[lane] = value if value.dtype == lane.dtype else _cast(lane.dtype, value)
        return out

    def _shift(self, indices) -> tuple[PrimExpr, ...]:
        from ._util import arith

        lanes = self._lane_values() if self.lane_tags else {}
        return tuple(arith("sub", self.visit(i), substitute(m, lanes)) if not (isinstance(m, IntImm) and m.value == 0)
                     else self.visit(i) for i, m in zip(indices, self.mins))

    def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
        if op.buffer is self.old.buffer:
            return BufferLoad(self.new, self._shift(op.indices), span=op.span)
        return self.generic_visit(op)

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        if op.buffer is self.old.buffer:
            return BufferStore(self.new, self.visit(op.value), self._shift(op.indices), span=op.span)
        return self.generic_visit(op)

    def visit_Allocate(self, op: Allocate) -> Stmt:
        body = self.visit(op.body)
        if op is self.old:
            return body if self.anchor is not None else Allocate(self.new, body)
        return op if body is op.body else replace(op, body=body)

    def visit_For(self, op: For) -> Stmt:
        self.stack.append(op)
        try:
            new = self.generic_visit(op)
        finally:
            self.stack.pop()
        if op is self.anchor:
            new = replace(new, body=Allocate(self.new, new.body))
        return new


def _keep_padding(old: Buffer, new: Buffer) -> tuple[PrimExpr, ...]:
    """Strides for the compacted `new` that keep the padding `storage_align` gave `old`'s rows
    (each dimension's stride exceeds the next one's extent x stride by the same number of
    elements), so a row pitch padded against bank conflicts stays padded."""
    from ..arith import simplify

    strides: list[PrimExpr] = [old.strides[-1]]
    for d in range(len(old.shape) - 2, -1, -1):
        pad = simplify(old.strides[d] - old.shape[d + 1] * old.strides[d + 1])
        strides.insert(0, simplify(new.shape[d + 1] * strides[0] + pad))
    return tuple(strides)


def compact_gpu_buffers(func: PrimFunc) -> PrimFunc:
    """Shrink each local/shared buffer to the region one thread (local) or one block (shared)
    touches, allocated at the innermost loop around all its uses whose iterations cannot pass
    values through it (thread-bound loops, loops touching disjoint parts); indices are shifted.

    A local buffer's region is taken per thread even across sibling loop nests: loops bound to
    the same thread tag are the same thread index in a kernel. A local buffer passed to the
    WMMA device functions as a fragment (`tdsl.intrinsics.cuda.FRAGMENT_ARGS`) touches the
    16 x 16 tile at the element passed; a warp's lanes are implicit, so the thread's region is
    the warp's. Buffers passed to other extern calls keep their size.

    So a `cache_write(..., "local")` accumulator of a 128x128 result becomes the thread's 4x4
    tile (registers) instead of a private copy of the whole 128x128 array."""
    from math import prod

    from ._util import common_prefix

    done: set[str] = set()
    while True:
        collector = _UseCollector()
        collector.visit(func.body)
        for buf, (alloc, alloc_loops) in collector.allocs.items():
            uses = collector.uses.get(buf)
            if buf.name in done or buf in collector.opaque or not uses:
                continue
            done.add(buf.name)
            lanes: dict[str, Var] = {}
            common = common_prefix([u.loops for u in uses])
            depth = len(common)
            region = _region(buf, uses, common[:depth], lanes)
            while depth > len(alloc_loops):
                loop = common[depth - 1]
                if region is not None and (loop.kind == "thread_binding" or _disjoint_iterations(region, loop)):
                    break
                depth -= 1
                region = _region(buf, uses, common[:depth], lanes)
            sizes = [s.value for s in buf.shape if isinstance(s, IntImm)]
            constant = len(sizes) == len(buf.shape)
            if region is None or (constant and prod(e for _, e in region) >= prod(sizes)):
                continue   # (a buffer of symbolic size always shrinks to a constant region)
            new = Buffer(buf.name, tuple(IntImm(e, s.dtype) for (_, e), s in zip(region, buf.shape)), buf.dtype,
                         scope=buf.scope, span=buf.span)
            if buf.strides:
                new = new.with_(strides=_keep_padding(buf, new))
            anchor = common[depth - 1] if depth > len(alloc_loops) else None
            func = func.with_body(_Compactor(alloc, new, [m for m, _ in region], anchor, lanes).visit(func.body))
            break
        else:
            return func


