"""`swizzle_shared` (listed in `lower(f, "cuda")`, after ``lane_fragments``).

A shared buffer written by a block annotated ``tdsl.swizzle`` (`tdsl.intrinsics.cuda_mma.swizzle`)
keeps its shape, but each row's 16-byte chunks are permuted: chunk c of row r is stored at
chunk ``c ^ ((r // rows_per_line) % n)``, n = min(chunks per row, 8), rows_per_line = 8 // n
(the rows that share a 128-byte line). The 8 rows one ldmatrix phase reads then hit 8
different 16-byte bank groups::

    A_shared[i, j]  ->  A_shared[i, ((j // 8) ^ ((i // 2) % 4)) * 8 + j % 8]     (64-byte fp16 rows)

Plain loads and stores are rewritten so; the mma ldmatrix calls become their ``_xor`` variants,
which compute each lane's row address with the same permutation. The last two axes are the
rows and columns; leading axes (a batch of 1 in a batched GEMM's tile) are kept as they are.
Rows must be a power of two of >= 2 chunks; a padded (storage_align) or otherwise used buffer is
refused.
"""
from __future__ import annotations

from ..errors import TargetError
from ..ir import Allocate, Buffer, BufferLoad, BufferStore, Call, IntImm, IRMutator, PrimExpr, PrimFunc, Stmt
from ..ir.attrs import SWIZZLED_BUFFERS, get_attr
from ..ir.expr import binary


def swizzle_params(buf: Buffer) -> tuple[int, int, int]:
    """(elements per 16-byte chunk, rows per 128-byte line, n) of a shared buffer whose last two
    axes are rows and columns."""
    if len(buf.shape) < 2 or not all(isinstance(s, IntImm) for s in buf.shape):
        from ..script.printer import message_text as expr_text

        raise TargetError(f"the swizzled shared buffer {buf.name} has shape "
                          f"({', '.join(expr_text(s) for s in buf.shape)}); the XOR swizzle needs a buffer of "
                          "constant shape of at least 2 axes (..., rows, columns) after compaction")
    if buf.strides:
        raise TargetError(f"the shared buffer {buf.name} is both padded (storage_align) and swizzled: choose one")
    itemsize = buf.dtype.bits // 8
    cols = buf.shape[-1].value if isinstance(buf.shape[-1], IntImm) else 0
    per_chunk = 16 // max(1, itemsize)
    chunks = cols // per_chunk if cols % per_chunk == 0 else 0
    if chunks < 2 or chunks & (chunks - 1):
        raise TargetError(f"the swizzled shared buffer {buf.name} has rows of {cols} {buf.dtype} elements; the XOR "
                          "swizzle needs rows of a power of two (>= 2) of 16-byte chunks")
    n = min(chunks, 8)
    return per_chunk, 8 // n, n


class _Swizzle(IRMutator):
    def __init__(self, buf: Buffer):
        from ..intrinsics.cuda_mma import LDMATRIX_XOR

        self.buf = buf
        self.per_chunk, self.rows_per_line, self.n = swizzle_params(buf)
        self.xor_fns = LDMATRIX_XOR

    def _index(self, indices) -> tuple[PrimExpr, ...]:
        *lead, i, j = (self.visit(x) for x in indices)
        dt = j.dtype
        c = IntImm(self.per_chunk, dt)
        key: PrimExpr = binary("floormod", binary("floordiv", i, IntImm(self.rows_per_line, i.dtype)),
                               IntImm(self.n, i.dtype))
        if key.dtype != dt:
            from ._util import cast_to
            key = cast_to(dt, key)
        chunk = binary("bitwise_xor", binary("floordiv", j, c), key)
        return (*lead, i, chunk * c + binary("floormod", j, c))

    def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
        if op.buffer is not self.buf:
            return self.generic_visit(op)
        return BufferLoad(op.buffer, self._index(op.indices), span=op.span)

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        if op.buffer is not self.buf:
            return self.generic_visit(op)
        return BufferStore(op.buffer, self.visit(op.value), self._index(op.indices), span=op.span)

    def visit_Call(self, op: Call) -> PrimExpr:
        uses = [k for k, a in enumerate(op.args) if isinstance(a, BufferLoad) and a.buffer is self.buf]
        if not uses:
            return self.generic_visit(op)
        if op.op not in self.xor_fns or uses != [1, 2]:
            raise TargetError(f"the swizzled shared buffer {self.buf.name} is passed to {op.op}, which does not know "
                              "its XOR layout; only ldmatrix (mma_ldmatrix_*) and plain loads and stores can read a "
                              "swizzled buffer")
        frag, row0, row1 = op.args
        assert isinstance(row0, BufferLoad) and isinstance(row1, BufferLoad)
        *lead, r0, c0 = (self.visit(x) for x in row0.indices)
        *lead1, r1, _ = (self.visit(x) for x in row1.indices)
        zero = IntImm(0, c0.dtype)
        args = (self.visit(frag), BufferLoad(self.buf, (*lead, r0, zero)),
                BufferLoad(self.buf, (*lead1, r1, zero)), r0, c0,
                IntImm(self.rows_per_line, c0.dtype), IntImm(self.n, c0.dtype))
        return Call(op.dtype, self.xor_fns[op.op], args, span=op.span)


def swizzle_shared(func: PrimFunc) -> PrimFunc:
    """XOR-swizzle the 16-byte chunks of the shared buffers named in `tdsl.swizzled_buffers`."""
    names = set(get_attr(func, SWIZZLED_BUFFERS, ()))
    if not names:
        return func
    from ..ir import collect

    shared = [a.buffer for a in collect(func.body, Allocate) if a.buffer.name in names and a.buffer.scope == "shared"]
    missing = sorted(names - {b.name for b in shared})
    if missing:
        raise TargetError(f"{missing[0]} is written by a block annotated tdsl.swizzle but is not a shared buffer the "
                          "function allocates; the XOR swizzle lays out shared memory (annotate the block of a "
                          "cache_read(..., \"shared\") stage)")
    for buf in shared:
        func = func.with_body(_Swizzle(buf).visit(func.body))
    return func
