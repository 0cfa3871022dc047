"""The analyzer's rewrite rules for what is not a signed index scalar: comparisons, logic,
identities, casts and nots (TVM's rewrite_simplify)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..dtypes import bool_
from ..ir.expr import (
    Binary,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Not,
    PrimExpr,
    Ramp,
    Select,
    StringImm,
    Var,
)
from .bounds import (
    _FLIP,
    _decide,
    is_index,
)
from .fold import _is_one, _is_zero, fold_binary, fold_cast
from .linear import Lin, _scale_lin


class RewriteRules:
    """The analyzer's rewrite rules for what is not a signed index scalar: comparisons, logic, (a part of `analyzer.Analyzer`)."""

    if TYPE_CHECKING:  # the other parts of the Analyzer (analyzer.py joins them)
        def __getattr__(self, name: str) -> Any: ...

    # everything that is not a signed index scalar ---------------------------------------------
    def _simp_other(self, e: PrimExpr) -> PrimExpr:
        if isinstance(e, (IntImm, FloatImm, StringImm)):
            return e
        if isinstance(e, Var):
            point = self._point(e)
            if point is None or id(e) in self._inlining:
                return e
            self._inlining.add(id(e))
            try:
                return self.simplify(point)
            finally:
                self._inlining.discard(id(e))
        if isinstance(e, Binary):
            return self._simp_binary(e)
        if isinstance(e, Not):
            return self._simp_not(e)
        if isinstance(e, Select):
            c = self.simplify(e.condition)
            t, f = self.simplify(e.true_value), self.simplify(e.false_value)
            if isinstance(c, IntImm) and c.dtype.lanes == 1:
                return t if c.value else f
            if self.same(t, f):
                return t
            return _rebuild(e, Select, (e.condition, e.true_value, e.false_value), (c, t, f))
        if isinstance(e, Cast):
            return self._simp_cast(e)
        if isinstance(e, Call):
            args = tuple(self.simplify(a) for a in e.args)
            if e.op == "if_then_else":
                c, t, f = args
                if isinstance(c, IntImm) and c.dtype.lanes == 1:
                    return t if c.value else f
                if self.same(t, f):
                    return t
            if all(a is b for a, b in zip(args, e.args)):
                return e
            return Call(e.dtype, e.op, args, span=e.span)
        if isinstance(e, BufferLoad):
            idx = tuple(self.simplify(i) for i in e.indices)
            if all(a is b for a, b in zip(idx, e.indices)):
                return e
            return BufferLoad(e.buffer, idx, span=e.span)
        if isinstance(e, Ramp):
            base, stride = self.simplify(e.base), self.simplify(e.stride)
            return e if base is e.base and stride is e.stride else Ramp(base, stride, e.lanes, span=e.span)
        if isinstance(e, Broadcast):
            v = self.simplify(e.value)
            return e if v is e.value else Broadcast(v, e.lanes, span=e.span)
        return e

    def _simp_binary(self, e: Binary) -> PrimExpr:
        op = e.op
        adt = e.a.dtype
        if op in _FLIP and is_index(adt):
            return self._compare(op, self.lin(e.a), self.lin(e.b))
        a, b = self.simplify(e.a), self.simplify(e.b)
        if op in ("and", "or"):
            return self._logic(e, op, a, b)
        if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)) and adt.lanes == 1:
            folded = fold_binary(op, a, b)
            if folded is not None:
                return folded
        ident = self._identity(op, a, b)
        if ident is not None:
            return ident
        return _rebuild(e, lambda x, y, span=None: Binary(op, x, y, span=span), (e.a, e.b), (a, b))

    def _identity(self, op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
        """Identities exact for every value (IEEE floats included)."""
        dt = a.dtype
        if op == "mul":
            if _is_one(b):
                return a
            if _is_one(a):
                return b
            if dt.is_integer and (_is_zero(a) or _is_zero(b)):
                return IntImm(0, dt)
        elif op == "div" and dt.is_float and _is_one(b):
            return a
        elif op == "add" and dt.is_integer:
            if _is_zero(b):
                return a
            if _is_zero(a):
                return b
        elif op == "sub":
            if _is_zero(b) and (dt.is_integer or (isinstance(b, FloatImm) and math.copysign(1, b.value) > 0)):
                return a
            if dt.is_integer and self.same(a, b):
                return IntImm(0, dt)
        elif op in ("min", "max") and self.same(a, b):
            return a
        elif op in ("floordiv", "floormod") and dt.is_integer and _is_one(b):
            return a if op == "floordiv" else IntImm(0, dt)
        elif op in ("bitwise_or", "bitwise_xor", "shift_left", "shift_right") and _is_zero(b):
            return a
        elif op == "bitwise_and" and (_is_zero(a) or _is_zero(b)):
            return IntImm(0, dt)
        return None

    def _compare(self, op: str, a: Lin, b: Lin) -> PrimExpr:
        lo, hi = self.bound_lin(self.add(a, _scale_lin(b, -1)))
        truth = _decide(op, lo, hi)
        if truth is not None:
            return IntImm(int(truth), bool_)
        return Binary(op, self.emit(a), self.emit(b))

    def _logic(self, e: Binary, op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr:
        absorbing = 0 if op == "and" else 1
        for x, y in ((a, b), (b, a)):
            if isinstance(x, IntImm) and x.dtype.lanes == 1:
                if bool(x.value) == bool(absorbing):
                    return IntImm(absorbing, x.dtype)
                return y
        if self.same(a, b):
            return a
        return _rebuild(e, lambda x, y, span=None: Binary(op, x, y, span=span), (e.a, e.b), (a, b))

    def _simp_not(self, e: Not) -> PrimExpr:
        a = e.a
        if isinstance(a, Not):
            return self.simplify(a.a)
        if isinstance(a, Binary) and a.op in _FLIP and is_index(a.a.dtype):
            return self.simplify(Binary(_FLIP[a.op], a.a, a.b))
        s = self.simplify(a)
        if isinstance(s, IntImm) and s.dtype.lanes == 1:
            return IntImm(int(not s.value), s.dtype)
        if isinstance(s, Not):
            return s.a
        return e if s is a else Not(s, span=e.span)

    def _simp_cast(self, e: Cast) -> PrimExpr:
        v = self.simplify(e.value)
        if v.dtype == e.dtype:
            return v
        if isinstance(v, (IntImm, FloatImm)):
            folded = fold_cast(e.dtype, v)
            if folded is not None:
                return folded
        return e if v is e.value else Cast(e.dtype, v, span=e.span)


# helpers --------------------------------------------------------------------------------


def _rebuild(e, ctor, old: tuple, new: tuple):
    if all(a is b for a, b in zip(old, new)):
        return e
    return ctor(*new, span=e.span)
