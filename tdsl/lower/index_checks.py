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

`unproven_index_checks` is the CUDA emulator's variant (the CUDA pipeline runs it when the
function asks for bounds checks): every axis of every access (one-dimensional ones included)
whose index is not proven inside [0, extent) from the enclosing loops' ranges.
"""
from __future__ import annotations

from ..ir import (
    Binary,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    For,
    IfThenElse,
    IntImm,
    IRMutator,
    PrimExpr,
    PrimFunc,
    Range,
    StringImm,
)
from ..ir.functor import expr_children
from ._util import get_attr

INDEX_CHECK = "tdsl.index_check"
BOUNDS_CHECK_ATTR = "tdsl.bounds_check"


def _reads_data(e: PrimExpr) -> bool:
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, BufferLoad):
            return True
        stack.extend(expr_children(n))
    return False


class _Checks(IRMutator):
    def __init__(self, every_axis: bool, unproven_only: bool = False):
        self.every_axis = every_axis
        self.unproven_only = unproven_only   # every axis of every access not proven in bounds
        self.ranges: dict = {}
        self.guards: list[PrimExpr] = []

    def visit_For(self, s: For):
        if not self.unproven_only:
            return self.generic_visit(s)
        self.ranges[s.loop_var] = Range(s.min, s.extent)
        try:
            return self.generic_visit(s)
        finally:
            del self.ranges[s.loop_var]

    def visit_IfThenElse(self, s: IfThenElse):
        if not self.unproven_only:
            return self.generic_visit(s)
        cond = self.visit(s.condition)
        self.guards.append(cond)
        try:
            then = self.visit(s.then_case)
        finally:
            self.guards.pop()
        other = self.visit(s.else_case) if s.else_case is not None else None
        if cond is s.condition and then is s.then_case and other is s.else_case:
            return s
        return IfThenElse(cond, then, other, span=s.span)

    def _wanted(self, idx: PrimExpr, extent: PrimExpr, ndim: int) -> bool:
        if idx.dtype.lanes != 1:
            return False
        if self.unproven_only:
            return _reads_data(idx) or not (self._proven(idx >= 0) and self._below(idx, extent))
        return _reads_data(idx) or (self.every_axis and ndim > 1)

    def _proven(self, cond: PrimExpr) -> bool:
        from ..arith import prove

        return prove(cond, self.ranges)

    def _below(self, idx: PrimExpr, extent: PrimExpr) -> bool:
        """idx < extent, from the loop ranges or from an enclosing `if idx < b` with b <= extent
        (the tail guard of a non-dividing split)."""
        from ._util import same_expr

        if self._proven(idx < extent):
            return True
        for g in self.guards:
            for c in _conjuncts(g):
                if (isinstance(c, Binary) and c.op in ("lt", "le") and same_expr(c.a, idx)
                        and self._proven(c.b <= extent if c.op == "lt" else c.b < extent)):
                    return True
        return False

    def _indices(self, buf: Buffer, indices: tuple) -> tuple:
        indices = tuple(self.visit(i) for i in indices)
        if len(indices) != len(buf.shape):
            return indices
        out = []
        for axis, (idx, extent) in enumerate(zip(indices, buf.shape)):
            if self._wanted(idx, extent, len(buf.shape)):
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


def _conjuncts(e: PrimExpr) -> list[PrimExpr]:
    if isinstance(e, Binary) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _cast(e: PrimExpr, dt) -> PrimExpr:
    from ..ir import Cast

    return IntImm(e.value, dt) if isinstance(e, IntImm) else Cast(dt, e)


def index_checks(func: PrimFunc) -> PrimFunc:
    """Add `tdsl.index_check` to data-dependent indices, and to every axis of multi-dimensional
    accesses when the function asks for bounds checks (see the module docs)."""
    every = bool(get_attr(func, BOUNDS_CHECK_ATTR, False))
    return func.with_body(_Checks(every).visit(func.body))


def unproven_index_checks(func: PrimFunc) -> PrimFunc:
    """When the function asks for bounds checks: `tdsl.index_check` on every axis of every access
    not proven inside its extent by the enclosing loops' ranges (see the module docs); else `func`."""
    if not get_attr(func, BOUNDS_CHECK_ATTR, False):
        return func
    return func.with_body(_Checks(True, unproven_only=True).visit(func.body))
