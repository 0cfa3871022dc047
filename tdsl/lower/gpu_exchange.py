"""`check_thread_exchange` (listed in `lower(f, "cuda")`): GPU data exchanges that cannot be correct.

On a GPU a ``local`` buffer is private to each thread, and the threads (and blocks) of one
kernel are not ordered with respect to each other except by ``__syncthreads()`` on ``shared``
memory, which the CUDA lowering inserts. So, within one kernel:

* a block that reads elements of a ``local`` buffer that another thread wrote reads its own,
  never written copy: refused, with ``set_scope(..., "shared")`` as the fix;
* a block that reads elements of a ``global`` buffer that other threads or blocks of the same
  kernel write races with them: refused, with ``set_scope(..., "shared")`` (an exchange inside
  a thread block) or separate kernels as the fix.

A read is accepted when, for every thread, the region it reads is inside the region that one
writing block writes in that same thread (threadIdx/blockIdx loops are the thread's identity;
loops bound to the same tag in sibling nests are the same index); the result of a cross-thread
reduction (a reduction driven by a threadIdx loop) is written by the first of those threads only,
so other threads must read it through shared memory. Regions are the blocks' declared read/write regions relaxed over their other loops; where a region cannot be bounded
the read is not judged here (the emulator still checks it when run). Regions are cut to the
buffer's extent (a declared `B[vi - 1]` at vi = 0 names no element), and a kernel of one thread
(every thread-bound loop of extent 1) exchanges nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import int32
from ..errors import ScheduleError
from ..ir import (
    BlockRealize,
    Buffer,
    BufferRegion,
    For,
    IntImm,
    PrimExpr,
    PrimFunc,
    Range,
    Stmt,
    Var,
    collect,
    free_vars,
)

_SCOPES = ("local", "global")


@dataclass
class _Access:
    block: str
    region: list[tuple[PrimExpr, PrimExpr]]   # per dimension inclusive (lo, hi), thread tags symbolic
    text: str                                 # the region as the user wrote it (block's own vars)
    kernel: For | None                        # the outermost thread-bound loop (None: outside kernels)
    write: bool
    one_thread: frozenset = frozenset()       # tags of a cross-thread reduction: only their first thread writes


def _is_thread(loop: For) -> str | None:
    if loop.kind == "thread_binding" and (loop.thread_tag or "").startswith(("threadIdx", "blockIdx")):
        return loop.thread_tag
    return None


def _leaves(stmt: Stmt, loops: tuple[For, ...], out: list) -> None:
    from .gpu_bindings import stmt_children

    if isinstance(stmt, For):
        _leaves(stmt.body, loops + (stmt,), out)
        return
    if isinstance(stmt, BlockRealize):
        inner = collect(stmt.block.body, BlockRealize)
        if not inner:
            out.append((stmt, loops))
            return
        _leaves(stmt.block.body, loops, out)
        return
    for child in stmt_children(stmt):
        _leaves(child, loops, out)


def _tag_vars(loops: tuple[For, ...], tags: dict[str, Var]) -> dict[Var, PrimExpr] | None:
    out: dict[Var, PrimExpr] = {}
    seen = set()
    for f in loops:
        tag = _is_thread(f)
        if tag is None:
            continue
        if tag in seen:
            return None
        seen.add(tag)
        var = tags.setdefault(tag, Var("tdsl_" + tag.replace(".", "_"), int32))
        value = var if var.dtype == f.loop_var.dtype else _cast(f.loop_var.dtype, var)
        out[f.loop_var] = value if isinstance(f.min, IntImm) and f.min.value == 0 else value + f.min
    return out


def _cast(dtype, e):
    from ._util import cast_to

    return cast_to(dtype, e)


def _region(realize: BlockRealize, loops: tuple[For, ...], br: BufferRegion,
            tags: dict[str, Var]) -> list[tuple[PrimExpr, PrimExpr]] | None:
    from ..arith import relax, simplify
    from ..ir import substitute

    fixed = _tag_vars(loops, tags)
    if fixed is None:
        return None
    block = realize.block
    binding = {iv.var: v for iv, v in zip(block.iter_vars, realize.iter_values)}
    ranges = {f.loop_var: Range(f.min, f.extent) for f in loops if _is_thread(f) is None}
    out = []
    for r, extent in zip(br.region, br.buffer.shape):
        lo_e = substitute(substitute(r.min, binding), fixed)
        hi_e = substitute(substitute(simplify(r.min + r.extent - 1), binding), fixed)
        lo, _ = relax(lo_e, ranges)
        _, hi = relax(hi_e, ranges)
        if _unbounded(lo) or _unbounded(hi):
            return None
        out.append(_clip(simplify(lo), simplify(hi), extent))
    return out


def _clip(lo: PrimExpr, hi: PrimExpr, extent: PrimExpr) -> tuple[PrimExpr, PrimExpr]:
    """A region's bounds cut to the buffer: a declared region may reach past it (a scan's
    `T.reads(B[vi - 1])` names B[-1] at vi = 0, which its `if vi == 0` never reads); no thread
    exchanges elements that do not exist (an access past the buffer is the bounds checks' business)."""
    if isinstance(lo, IntImm) and lo.value < 0:
        lo = IntImm(0, lo.dtype)
    if isinstance(hi, IntImm) and isinstance(extent, IntImm) and hi.value > extent.value - 1:
        hi = IntImm(extent.value - 1, hi.dtype)
    return lo, hi


def _unbounded(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and abs(e.value) >= (1 << 30)


def _contained(inner, outer) -> bool:
    from ..arith import simplify

    for (lo_i, hi_i), (lo_o, hi_o) in zip(inner, outer):
        d_lo = simplify(lo_i - lo_o)
        d_hi = simplify(hi_o - hi_i)
        if not (isinstance(d_lo, IntImm) and d_lo.value >= 0 and isinstance(d_hi, IntImm) and d_hi.value >= 0):
            return False
    return True


def _region_text(br: BufferRegion) -> str:
    from ..script.printer import message_text

    parts = []
    for r in br.region:
        if isinstance(r.extent, IntImm) and r.extent.value == 1:
            parts.append(message_text(r.min))
        else:
            parts.append(f"{message_text(r.min)}:{message_text(r.min + r.extent)}")
    return f"{br.buffer.name}[{', '.join(parts)}]"


def check_thread_exchange(func: PrimFunc) -> PrimFunc:
    """Raise ScheduleError for the first read of a local/global buffer that gets its data from
    another thread (or block) of the same kernel (see the module docs); returns `func` unchanged."""
    from .gpu_bindings import _warp_intrin

    leaves: list = []
    _leaves(func.body, (), leaves)
    tags: dict[str, Var] = {}
    accesses: dict[Buffer, list[_Access]] = {}
    skip: set[Buffer] = set()
    for realize, loops in leaves:
        block = realize.block
        kernel = next((f for f in loops if _is_thread(f)), None)
        warp = _warp_intrin(block) is not None
        # a reduction driven by threadIdx loops (a cross-thread reduction): after the all-reduce
        # only the first thread of those loops stores the result
        reduce_vars = set()
        for iv, v in zip(block.iter_vars, realize.iter_values):
            if iv.kind == "R":
                reduce_vars |= free_vars(v)
        one = frozenset(f.thread_tag for f in loops if _is_thread(f) and f.thread_tag.startswith("threadIdx")
                        and f.loop_var in reduce_vars)
        for write, regions in ((False, block.reads), (True, block.writes)):
            for br in regions:
                buf = br.buffer
                if buf.scope not in _SCOPES:
                    continue
                if warp:
                    skip.add(buf)   # warp-wide tensor-core blocks: lanes share fragments by design
                    continue
                region = _region(realize, loops, br, tags)
                if region is None:
                    skip.add(buf)
                    continue
                accesses.setdefault(buf, []).append(_Access(block.name, region, _region_text(br), kernel, write,
                                                            one if write else frozenset()))
    for buf, accs in accesses.items():
        if buf in skip:
            continue
        for read in accs:
            if read.write or read.kernel is None or _one_thread(read.kernel):
                continue
            writers = [w for w in accs if w.write and w.kernel is read.kernel]
            if not writers or any(_contained(read.region, w.region) and (not w.one_thread or w.block == read.block)
                                  for w in writers):
                continue
            other = next((w for w in writers if w.block != read.block), writers[0])
            raise ScheduleError(_message(buf, read, other))
    return func


def _one_thread(kernel: For) -> bool:
    """The kernel runs one thread in one block (every thread-bound loop has extent 1): nothing
    in it runs concurrently (GPUBind gives a scan such a kernel)."""
    return all(isinstance(f.extent, IntImm) and f.extent.value == 1
               for f in collect(kernel, For) if _is_thread(f))


def _message(buf: Buffer, read: _Access, writer: _Access) -> str:
    fix_shared = f'sch.set_scope(sch.get_block("{writer.block}"), "{buf.name}", "shared")'
    if buf.scope == "local":
        return (f'block "{read.block}" reads {read.text} of the local buffer "{buf.name}", but those elements are '
                f'written by other threads (block "{writer.block}" writes {writer.text} in each thread); a local buffer '
                f"is private to each GPU thread, so the reader would see its own copy, which nobody wrote. Share it "
                f"within the thread block with {fix_shared} (tdsl inserts the barrier), or let each thread read only "
                "what it wrote")
    return (f'block "{read.block}" reads {read.text} of the global buffer "{buf.name}", which other threads or blocks '
            f'of the same kernel write (block "{writer.block}" writes {writer.text}); the threads and blocks of one '
            "CUDA kernel are not ordered, so this is a race. Exchange the data within a thread block through shared "
            f"memory with {fix_shared} (tdsl inserts the barrier), or compute writer and reader in separate kernels "
            "(separate outermost thread-bound loop nests)")
