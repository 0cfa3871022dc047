"""Build-time bounds check: an access provably outside its buffer is an error, not a crash.

Only what can be proven is reported: the index is affine in loop variables with constant
ranges (so its interval is exact), the buffer's size is constant, and no condition guards the
access (an `if`, `T.if_then_else` or `T.Select` may keep it from running).
"""
from __future__ import annotations

from ...errors import BoundsError
from ...ir import (
    Allocate,
    Binary,
    Broadcast,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    For,
    IfThenElse,
    IntImm,
    LetStmt,
    PrimFunc,
    Ramp,
    Select,
    Var,
)
from ...ir.functor import IRVisitor
from .codegen import expr_text


def _affine(e, ranges: dict) -> tuple[int, int] | None:
    """The exact [lo, hi] of an affine index, or None when it is not affine in known variables."""
    ranges = dict(ranges)
    terms = _linear(e, ranges)
    if terms is None:
        return None
    const, coeffs = terms
    lo = hi = const
    for var, c in coeffs.items():
        if var not in ranges:
            return None
        vlo, vhi = ranges[var]
        lo += min(c * vlo, c * vhi)
        hi += max(c * vlo, c * vhi)
    return lo, hi


def _linear(e, ranges: dict) -> tuple[int, dict] | None:
    """(constant, {var: coefficient}); a Ramp adds a lane variable to `ranges`."""
    if isinstance(e, IntImm):
        return e.value, {}
    if isinstance(e, Var):
        return 0, {e: 1}
    if isinstance(e, Cast) and e.dtype.is_integer and e.value.dtype.is_integer:
        return _linear(e.value, ranges)
    if isinstance(e, Ramp) and isinstance(e.stride, IntImm):
        base = _linear(e.base, ranges)
        if base is None:
            return None
        lane = Var("lane")
        c, co = base
        co = dict(co)
        co[lane] = e.stride.value
        ranges[lane] = (0, e.lanes - 1)
        return c, co
    if isinstance(e, Broadcast):
        return _linear(e.value, ranges)
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul"):
        a, b = _linear(e.a, ranges), _linear(e.b, ranges)
        if a is None or b is None:
            return None
        if e.op == "mul":
            if a[1] and b[1]:
                return None
            k, (c, co) = (a[0], b) if not a[1] else (b[0], a)
            return k * c, {v: k * x for v, x in co.items()}
        sign = 1 if e.op == "add" else -1
        co = dict(a[1])
        for v, x in b[1].items():
            co[v] = co.get(v, 0) + sign * x
        return a[0] + sign * b[0], co
    return None



class _Checker(IRVisitor):
    def __init__(self, scalar_only: bool = False):
        self.scalar_only = scalar_only
        self.ranges: dict = {}
        self.guarded = 0

    def visit_For(self, s: For):
        if isinstance(s.min, IntImm) and isinstance(s.extent, IntImm) and s.extent.value > 0:
            self.ranges[s.loop_var] = (s.min.value, s.min.value + s.extent.value - 1)
        self.generic_visit(s)
        self.ranges.pop(s.loop_var, None)

    def visit_IfThenElse(self, s: IfThenElse):
        self.visit(s.condition)
        self.guarded += 1
        self.visit(s.then_case)
        if s.else_case is not None:
            self.visit(s.else_case)
        self.guarded -= 1

    def _guard(self, node):
        self.guarded += 1
        self.generic_visit(node)
        self.guarded -= 1

    def visit_Select(self, e: Select):
        self._guard(e)

    def visit_Call(self, e: Call):
        if e.op == "if_then_else":
            self._guard(e)
        elif e.op.startswith("llvm.prefetch"):
            # a prefetch never faults: the element it names may lie past the buffer, but what
            # its indices read is checked
            for arg in e.args:
                inner = arg.args[0] if isinstance(arg, Call) and arg.op == "address_of" else None
                if isinstance(inner, BufferLoad):
                    for index in inner.indices:
                        self.visit(index)
                else:
                    self.visit(arg)
        else:
            self.generic_visit(e)

    def visit_Binary(self, e: Binary):
        if e.op in ("and", "or"):
            self._guard(e)
        else:
            self.generic_visit(e)

    def visit_LetStmt(self, s: LetStmt):
        self.generic_visit(s)

    def visit_Allocate(self, s: Allocate):
        self.generic_visit(s)

    def visit_BufferLoad(self, e: BufferLoad):
        self.generic_visit(e)
        self._check(e.buffer, e.indices, "read")

    def visit_BufferStore(self, s: BufferStore):
        self.generic_visit(s)
        self._check(s.buffer, s.indices, "written")

    def _check(self, buf, indices, verb: str):
        if self.guarded or len(indices) != len(buf.shape):
            return
        for axis, (idx, extent) in enumerate(zip(indices, buf.shape)):
            if not isinstance(extent, IntImm) or (self.scalar_only and idx.dtype.lanes > 1):
                continue
            bound = _affine(idx, self.ranges)
            if bound is None:
                continue
            lo, hi = bound
            if lo < 0 or hi >= extent.value:
                where = f" (axis {axis})" if len(indices) > 1 else ""
                raise BoundsError(f"buffer {buf.name!r} is {verb} at index {expr_text(idx)}{where}, which ranges "
                                  f"over [{lo}, {hi}] but the buffer has {extent.value} elements there: "
                                  f"the access is out of bounds")


def check_static_bounds(func: PrimFunc, scalar_only: bool = False) -> None:
    """Raise BoundsError for an unguarded access whose exact index range leaves its buffer (on
    each axis, when run before flattening). `scalar_only` skips vector indices: before
    flattening only tensor intrinsics' implementations have them, and their vectors may run
    across rows on purpose."""
    _Checker(scalar_only).visit(func.body)
