"""`lane_fragments` (listed in `lower(f, "cuda")`, after ``compact_gpu_buffers``).

An mma fragment buffer (scope ``m16n8k16.*`` / ``m16n8k32.*`` in the schedule, ``local`` once
tensorized) keeps its logical shape through compaction: one warp's tiles, e.g. a 64 x 64
accumulator. Only the device functions of `tdsl.intrinsics.cuda_mma` touch it, each on a whole
tile, and each lane holds tile_size / 32 elements of every tile (the PTX ISA's fragment
layout). This pass makes it exactly that: a per-lane array of size / 32 elements, tile t at
register t * tile_size / 32 (tiles numbered row-major over the buffer)::

    float C_acc[64, 64]  ...  tdsl_mma_16x16x16_f32(C_acc[i * 16, j * 16], ...)
    ->
    float C_acc[128]     ...  tdsl_mma_16x16x16_f32(C_acc[(i * 4 + j) * 8], ...)

A fragment buffer read or written any other way (a block left untensorized) is refused: its
elements are spread over the lanes in a layout only the instructions know.
"""
from __future__ import annotations

from math import prod

from ..errors import TargetError
from ..ir import Allocate, Buffer, BufferLoad, BufferStore, Call, IntImm, IRMutator, IRVisitor, PrimFunc, Stmt
from ..ir.expr import binary


def _fragment_uses(func: PrimFunc) -> tuple[set[Buffer], set[Buffer]]:
    """(local buffers passed as mma fragments, buffers also accessed some other way)."""
    from ..intrinsics.cuda_mma import FRAGMENT_ARGS

    frags: set[Buffer] = set()
    other: set[Buffer] = set()

    class V(IRVisitor):
        def visit_Call(self, op: Call) -> None:
            slots = FRAGMENT_ARGS.get(op.op, ())
            for i, arg in enumerate(op.args):
                if isinstance(arg, BufferLoad) and i in slots and arg.buffer.scope == "local":
                    frags.add(arg.buffer)
                    for idx in arg.indices:
                        self.visit(idx)
                else:
                    self.visit(arg)

        def visit_BufferLoad(self, op: BufferLoad) -> None:
            other.add(op.buffer)
            self.generic_visit(op)

        def visit_BufferStore(self, op: BufferStore) -> None:
            other.add(op.buffer)
            self.generic_visit(op)

    V().visit(func.body)
    return frags, other


class _ToLanes(IRMutator):
    def __init__(self, old: Buffer, new: Buffer, tile: tuple[int, int]):
        self.old, self.new, self.tile = old, new, tile

    def visit_BufferLoad(self, op: BufferLoad):
        if op.buffer is not self.old:
            return self.generic_visit(op)
        from ..arith import simplify

        th, tw = self.tile
        shape = [s.value for s in self.old.shape if isinstance(s, IntImm)]
        dims = shape[:-2] + [shape[-2] // th, shape[-1] // tw]
        idx = [self.visit(i) for i in op.indices]
        coords = idx[:-2] + [binary("floordiv", idx[-2], IntImm(th, idx[-2].dtype)),
                             binary("floordiv", idx[-1], IntImm(tw, idx[-1].dtype))]
        flat = coords[0]
        for c, d in zip(coords[1:], dims[1:]):
            flat = flat * IntImm(d, flat.dtype) + c
        return BufferLoad(self.new, (simplify(flat * IntImm(th * tw // 32, flat.dtype)),), span=op.span)

    def visit_Allocate(self, op: Allocate) -> Stmt:
        body = self.visit(op.body)
        if op.buffer is self.old:
            return Allocate(self.new, body)
        return op if body is op.body else Allocate(op.buffer, body)


def lane_fragments(func: PrimFunc) -> PrimFunc:
    """Each mma fragment buffer -> the calling lane's registers (size / 32 elements)."""
    from ..intrinsics.cuda_mma import tile_shape

    frags, other = _fragment_uses(func)
    for buf in sorted(frags, key=lambda b: b.name):
        if buf in other:
            raise TargetError(f"the mma fragment buffer {buf.name} is also read or written outside the mma "
                              "intrinsics; its elements are spread over the 32 lanes of a warp, so every block "
                              "that touches it must be tensorized (mma_ldmatrix_*, mma_*, mma_fill_*, mma_store_*)")
        if not all(isinstance(s, IntImm) for s in buf.shape) or len(buf.shape) < 2:
            raise TargetError(f"the mma fragment buffer {buf.name} has shape {list(map(str, buf.shape))}; after "
                              "compaction it must be a constant n-d array of whole tiles (one warp's)")
        th, tw = tile_shape(buf.dtype.bits)
        shape = [s.value for s in buf.shape if isinstance(s, IntImm)]
        if shape[-2] % th or shape[-1] % tw:
            raise TargetError(f"the mma fragment buffer {buf.name} is {shape[-2]} x {shape[-1]}, not whole "
                              f"{th} x {tw} tiles")
        new = Buffer(buf.name, (IntImm(prod(shape) // 32, buf.shape[0].dtype),), buf.dtype, scope="local",
                     span=buf.span)
        func = func.with_body(_ToLanes(buf, new, (th, tw)).visit(func.body))
    return func
