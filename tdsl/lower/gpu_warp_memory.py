"""`lower_warp_memory` (listed in `lower(f, "cuda")`, after ``convert_blocks``): TVM's scope "warp".

A buffer in scope ``"warp"`` holds one warp's mma tiles as (lane, register) pairs in its last
two axes, laid out by ``sch.transform_layout`` with an index map such as
``shared_16x16_to_ldmatrix_32x8_layout`` (`tdsl.intrinsics.cuda_mma_warp`). Each lane keeps
only its own registers, so the lane axis goes and the buffer becomes the lane's `local` array::

    float C_warp[4, 4, 32, 8]  (warp)    tdsl_warp_mma(C_warp[i, j, 0, 0], ...)
                                         C[..] = C_warp[i, j, tx, e]      (tx: threadIdx.x, 32)
    ->
    float C_warp[4, 4, 8]      (local)   tdsl_warp_mma(C_warp[i, j, 0], ...)
                                         C[..] = C_warp[i, j, e]

An intrinsic's device function receives a whole tile (lane index 0: the calling lane's
registers); any other read or write must be at the thread's own lane: the variable of the
enclosing loop bound to ``threadIdx.x`` with extent 32. Refused, with the buffer and the
reason: a "warp" buffer whose second-last axis is not the 32 lanes (no transform_layout), an
access at another lane index (a lane cannot see another lane's registers), an mma B tile
(whose registers are not placed as the description says) also read or written by code, and a
"warp" buffer given to any other call.
"""
from __future__ import annotations

from ..errors import TargetError
from ..ir import Allocate, Buffer, BufferLoad, BufferStore, Call, For, IntImm, IRMutator, IRVisitor, PrimFunc, Stmt, Var
from ..script.printer import message_text

_HOW = ("lay it out with sch.transform_layout(block, ('write', 0), lambda i, j: (i // 16, j // 16, "
        "*shared_16x16_to_ldmatrix_32x8_layout(i % 16, j % 16))) (tdsl.intrinsics.cuda_mma_warp; "
        "('read', 0) for an accumulator's store block)")


def _lane_loop(stack: list[For], var) -> bool:
    return isinstance(var, Var) and any(
        f.loop_var is var and f.kind == "thread_binding" and f.thread_tag == "threadIdx.x"
        and isinstance(f.min, IntImm) and f.min.value == 0 and isinstance(f.extent, IntImm) and f.extent.value == 32
        for f in stack)


class _Uses(IRVisitor):
    """Checks every access of the warp buffers (module docs)."""

    def __init__(self, warp: set[Buffer]):
        self.warp = warp
        self.stack: list[For] = []
        self.plain: set[Buffer] = set()
        self.b_tiles: dict[Buffer, str] = {}

    def visit_For(self, op: For) -> None:
        self.visit(op.min)
        self.visit(op.extent)
        self.stack.append(op)
        self.visit(op.body)
        self.stack.pop()

    def visit_Call(self, op: Call) -> None:
        from ..intrinsics.cuda_mma import B_FRAGMENT_ARGS, WARP_FRAGMENT_ARGS

        slots = WARP_FRAGMENT_ARGS.get(op.op, ())
        for i, arg in enumerate(op.args):
            if isinstance(arg, BufferLoad) and arg.buffer in self.warp:
                if i not in slots:
                    raise TargetError(f"the 'warp' buffer {arg.buffer.name} is passed to {op.op}(...), which does not "
                                      "take a warp tile; only the mma intrinsics of tdsl.intrinsics.cuda_mma_warp "
                                      "(and code at the thread's own lane) may touch it")
                lane = arg.indices[-2]
                if not (isinstance(lane, IntImm) and lane.value == 0):
                    raise TargetError(f"{op.op}(...) is given the 'warp' buffer {arg.buffer.name} at lane {message_text(lane)}; "
                                      "a tile starts at lane 0")
                if i in B_FRAGMENT_ARGS.get(op.op, ()):
                    self.b_tiles[arg.buffer] = op.op
                for idx in arg.indices:
                    self.visit(idx)
            else:
                self.visit(arg)

    def _plain(self, buf: Buffer, indices, what: str) -> None:
        if buf not in self.warp:
            return
        lane = indices[-2]
        if not _lane_loop(self.stack, lane):
            raise TargetError(f"the 'warp' buffer {buf.name} is {what} at lane index {message_text(lane)}; each lane holds only its "
                              "own elements, so code may read and write it only at the thread's own lane: the "
                              "variable of the enclosing loop bound to threadIdx.x with extent 32 (or through the "
                              "mma intrinsics)")
        self.plain.add(buf)

    def visit_BufferLoad(self, op: BufferLoad) -> None:
        self._plain(op.buffer, op.indices, "read")
        self.generic_visit(op)

    def visit_BufferStore(self, op: BufferStore) -> None:
        self._plain(op.buffer, op.indices, "written")
        self.generic_visit(op)


class _DropLane(IRMutator):
    def __init__(self, bmap: dict[Buffer, Buffer]):
        self.bmap = bmap

    def _indices(self, indices):
        return tuple(self.visit(i) for i in indices[:-2]) + (self.visit(indices[-1]),)

    def visit_BufferLoad(self, op: BufferLoad):
        new = self.bmap.get(op.buffer)
        if new is None:
            return self.generic_visit(op)
        return BufferLoad(new, self._indices(op.indices), span=op.span)

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        new = self.bmap.get(op.buffer)
        if new is None:
            return self.generic_visit(op)
        return BufferStore(new, self.visit(op.value), self._indices(op.indices), span=op.span)

    def visit_Allocate(self, op: Allocate) -> Stmt:
        body = self.visit(op.body)
        new = self.bmap.get(op.buffer)
        if new is not None:
            return Allocate(new, body)
        return op if body is op.body else Allocate(op.buffer, body)


class _Allocs(IRVisitor):
    def __init__(self):
        self.found: list[Buffer] = []

    def visit_Allocate(self, op: Allocate) -> None:
        if op.buffer.scope == "warp":
            self.found.append(op.buffer)
        self.visit(op.body)


def lower_warp_memory(func: PrimFunc) -> PrimFunc:
    """Each "warp" buffer -> the lane's own registers (module docs)."""
    for p in func.params:
        if isinstance(p, Buffer) and p.scope == "warp":
            raise TargetError(f"the parameter {p.name} is in scope 'warp'; a kernel's parameters are in global "
                              "memory (a 'warp' buffer is an intermediate: sch.cache_read(block, 0, 'warp'))")
    finder = _Allocs()
    finder.visit(func.body)
    if not finder.found:
        return func
    bmap: dict[Buffer, Buffer] = {}
    for buf in finder.found:
        lane = buf.shape[-2] if len(buf.shape) >= 2 else None
        if not (isinstance(lane, IntImm) and lane.value == 32) or buf.strides:
            raise TargetError(f"the 'warp' buffer {buf.name} has shape ({', '.join(message_text(e) for e in buf.shape)}), without the 32 "
                              "lanes as its second-last axis: a 'warp' buffer holds (lane, register) pairs; " + _HOW)
        bmap[buf] = Buffer(buf.name, buf.shape[:-2] + buf.shape[-1:], buf.dtype, scope="local", span=buf.span)
    uses = _Uses(set(bmap))
    uses.visit(func.body)
    for buf, fn in uses.b_tiles.items():
        if buf in uses.plain:
            raise TargetError(f"the 'warp' buffer {buf.name} is an mma B tile ({fn}) and is also read or written by "
                              "the kernel's own code; its registers hold B as the mma instruction wants it, not in "
                              "the layout the intrinsics' descriptions give, so only the intrinsics may touch it")
    return func.with_body(_DropLane(bmap).visit(func.body))
