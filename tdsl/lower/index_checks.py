"""`index_checks`: run-time checks of indices, per axis, before buffers are flattened.

Two kinds of access get a check (a `tdsl.index_check(index, extent, "buffer", axis)` call
that evaluates to `index` and fails the kernel with tdsl.BoundsError when the index is outside
[0, extent)):

* by default, an index that reads data (a gather, `out[i] = data[index[i]]`): its value is
  not known at build time, and a bad one would read or write anywhere. One compare per access.
* with `tdsl.build(..., bounds_check=True)` (the function attribute `tdsl.bounds_check`),
  every axis of every multi-dimensional access: `A[vi + 1, vj - 1]` at vj = 0 lands inside the
  flat buffer (one row back) but outside axis 1, which the flat check after flattening misses.

Before/after (gather):  B[i] = A[I[i]]   ->   B[i] = A[T.tdsl.index_check(I[i], 100, "A", 0)]
"""
from __future__ import annotations

from ..ir import Buffer, BufferLoad, BufferStore, Call, IntImm, IRMutator, PrimExpr, PrimFunc, StringImm
from ._util import get_attr

INDEX_CHECK = "tdsl.index_check"
BOUNDS_CHECK_ATTR = "tdsl.bounds_check"


def _reads_data(e: PrimExpr) -> bool:
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, BufferLoad):
            return True
        for name in ("a", "b", "value", "condition", "true_value", "false_value", "base", "stride"):
            child = getattr(n, name, None)
            if isinstance(child, PrimExpr):
                stack.append(child)
        args = getattr(n, "args", None)
        if isinstance(args, tuple):
            stack.extend(a for a in args if isinstance(a, PrimExpr))
    return False


class _Checks(IRMutator):
    def __init__(self, every_axis: bool):
        self.every_axis = every_axis

    def _indices(self, buf: Buffer, indices: tuple) -> tuple:
        indices = tuple(self.visit(i) for i in indices)
        if len(indices) != len(buf.shape):
            return indices
        out = []
        for axis, (idx, extent) in enumerate(zip(indices, buf.shape)):
            if idx.dtype.lanes == 1 and (_reads_data(idx) or (self.every_axis and len(buf.shape) > 1)):
                ext = extent if extent.dtype == idx.dtype else _cast(extent, idx.dtype)
                idx = Call(idx.dtype, INDEX_CHECK, (idx, ext, StringImm(buf.name), IntImm(axis)))
            out.append(idx)
        return tuple(out)

    def visit_BufferLoad(self, e: BufferLoad) -> PrimExpr:
        return BufferLoad(e.buffer, self._indices(e.buffer, e.indices), span=e.span)

    def visit_BufferStore(self, s: BufferStore):
        return BufferStore(s.buffer, self.visit(s.value), self._indices(s.buffer, s.indices), span=s.span)

    def visit_Call(self, e: Call) -> PrimExpr:
        if e.op == "address_of" or e.op.startswith("llvm.prefetch"):
            return e   # addresses are not accesses (a prefetch may name an element past the buffer)
        return self.generic_visit(e)


def _cast(e: PrimExpr, dt) -> PrimExpr:
    from ..ir import Cast

    return IntImm(e.value, dt) if isinstance(e, IntImm) else Cast(dt, e)


def index_checks(func: PrimFunc) -> PrimFunc:
    """Add `tdsl.index_check` to data-dependent indices, and to every axis of multi-dimensional
    accesses when the function asks for bounds checks (see the module docs)."""
    every = bool(get_attr(func, BOUNDS_CHECK_ATTR, False))
    return func.with_body(_Checks(every).visit(func.body))
