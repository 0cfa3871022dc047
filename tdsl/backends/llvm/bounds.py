"""Build-time bounds check: an access provably outside its buffer is an error, not a crash.

Only what can be proven is reported: the index is affine in loop variables whose ranges are
known (constant, or expressions of the function's symbolic sizes), so its interval is exact,
and no condition guards the access (an `if`, `T.if_then_else` or `T.Select` may keep it from
running). With symbolic sizes the interval and the buffer's extent are evaluated over a grid of
sizes (each >= 1, every parameter's dimension >= 0, every enclosing loop running at least once):
the first size that puts the access outside its buffer is named in the error, e.g.
`B[i] = A[i + 1]` over `A: T.Buffer(("n",))`, `for i in range(n)` fails for n = 1.
"""
from __future__ import annotations

import numpy as np

from ...arith.affine import Bound, affine_bounds, over_sizes
from ...arith.evaluate import eval_array, eval_int
from ...errors import BoundsError
from ...ir import (
    Allocate,
    Binary,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    For,
    IfThenElse,
    IntImm,
    LetStmt,
    PrimFunc,
    Select,
    Var,
)
from ...ir.functor import IRVisitor, free_vars
from .codegen import expr_text

_CANDIDATES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256,
               1000, 1024, 4096, 65536, 1 << 20)
_FEW = (1, 2, 3, 4, 7, 8, 16, 17, 64, 1000, 1 << 20)


class _Sizes:
    """The function's symbolic sizes and what a valid call implies about them: each is >= 1 and
    each parameter buffer's dimension is >= 0."""

    def __init__(self, func: PrimFunc):
        self.domain: list = []
        found: set = set()
        for p in func.params:
            if isinstance(p, Buffer):
                for dim in p.shape:
                    if not isinstance(dim, IntImm):
                        used = free_vars(dim)
                        found |= used
                        if not isinstance(dim, Var):
                            self.domain.append((dim, used))
        self.vars = frozenset(found)

    def first_failure(self, fails, conditions: list) -> dict | None:
        """The smallest sizes (in the order of _CANDIDATES) where `fails` (a function of an
        environment of size arrays) holds while every condition (expression, its variables,
        minimum) does; None when no tried size fails."""
        wanted: set = set()
        for _, used, _ in conditions:
            wanted |= used
        wanted |= fails.vars
        for dim, used in self.domain:
            if used & wanted:
                conditions = [*conditions, (dim, used, 0)]
                wanted |= used
        names = sorted(wanted, key=lambda v: v.name)
        if not names:
            return None
        values = _CANDIDATES if len(names) <= 2 else _FEW if len(names) <= 4 else _FEW[:4]
        grid = np.meshgrid(*([np.array(values, dtype=np.int64)] * len(names)), indexing="ij")
        env = {v: g.ravel() for v, g in zip(names, grid)}
        with np.errstate(all="ignore"):
            ok = np.asarray(fails(env), dtype=bool)
            for expr, _, minimum in conditions:
                ok = ok & (np.asarray(eval_array(expr, env)) >= minimum)
        if not ok.any():
            return None
        order = np.lexsort([env[v] for v in reversed(names)] + [np.max(np.stack(list(env.values())), axis=0)])
        for point in order[ok[order]][:64]:
            # the grid computes in int64, which large products could wrap: confirm exactly
            sizes = {v: int(env[v][point]) for v in names}
            if fails.exact(sizes) and all(eval_int(expr, sizes) >= minimum for expr, _, minimum in conditions):
                return {v.name: value for v, value in sizes.items()}
        return None


def _value(bound: Bound, env: dict, evaluate=eval_array):
    const, terms = bound
    total = const
    for c, expr in terms:
        total = total + c * evaluate(expr, env)
    return total


def _bound_vars(bound: Bound) -> set:
    used: set = set()
    for _, expr in bound[1]:
        used |= free_vars(expr)
    return used


class _Failure:
    """Whether an index's interval leaves [0, extent) for an environment of sizes."""

    def __init__(self, lo: Bound, hi: Bound, extent):
        self.lo, self.hi, self.extent = lo, hi, extent
        self.vars = _bound_vars(lo) | _bound_vars(hi) | free_vars(extent)

    def __call__(self, env: dict):
        return (_value(self.lo, env) < 0) | (_value(self.hi, env) >= eval_array(self.extent, env))

    def exact(self, sizes: dict) -> bool:
        """The same test in Python's integers, for one size of each variable."""
        return _value(self.lo, sizes, eval_int) < 0 or _value(self.hi, sizes, eval_int) >= eval_int(self.extent, sizes)


class _Checker(IRVisitor):
    def __init__(self, scalar_only: bool = False, sizes: _Sizes | None = None):
        self.scalar_only = scalar_only
        self.sizes = sizes
        self.size_vars = sizes.vars if sizes is not None else frozenset()
        self.ranges: dict = {}
        self.running: list = []     # (extent, its sizes, 1): enclosing symbolic loops run at least once
        self.guarded = 0

    def visit_For(self, s: For):
        pushed = False
        if isinstance(s.min, IntImm) and isinstance(s.extent, IntImm):
            if s.extent.value > 0:
                self.ranges[s.loop_var] = (s.min.value, s.min.value + s.extent.value - 1)
        elif self.size_vars and _over_or_const(s.min, self.size_vars) and over_sizes(s.extent, self.size_vars):
            lo = s.min.value if isinstance(s.min, IntImm) else s.min
            self.ranges[s.loop_var] = (lo, s.min + s.extent - 1)
            self.running.append((s.extent, free_vars(s.extent), 1))
            pushed = True
        self.generic_visit(s)
        self.ranges.pop(s.loop_var, None)
        if pushed:
            self.running.pop()

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
        axes = [(axis, idx, extent) for axis, (idx, extent) in enumerate(zip(indices, buf.shape))
                if not (self.scalar_only and idx.dtype.lanes > 1)]
        later = []
        for axis, idx, extent in axes:   # what fails for every size first
            where = f" (axis {axis})" if len(indices) > 1 else ""
            bound = affine_bounds(idx, self.ranges) if isinstance(extent, IntImm) else None
            if bound is None or bound[0][1] or bound[1][1]:
                later.append((where, idx, extent))
                continue
            lo, hi = bound[0][0], bound[1][0]
            if lo < 0 or hi >= extent.value:
                raise BoundsError(f"buffer {buf.name!r} is {verb} at index {expr_text(idx)}{where}, which "
                                  f"ranges over [{lo}, {hi}] but the buffer has {extent.value} elements "
                                  f"there: the access is out of bounds")
        if self.sizes is None:
            return
        for where, idx, extent in later:
            if not (isinstance(extent, IntImm) or over_sizes(extent, self.size_vars)):
                continue
            bound = affine_bounds(idx, self.ranges, self.size_vars)
            if bound is None:
                continue
            fails = _Failure(bound[0], bound[1], extent)
            sizes = self.sizes.first_failure(fails, self.running)
            if sizes is not None:
                self._report(buf, idx, extent, verb, where, fails, sizes)

    def _report(self, buf, idx, extent, verb: str, where: str, fails: _Failure, sizes: dict):
        env = {v: sizes[v.name] for v in fails.vars}
        lo, hi, n = _value(fails.lo, env, eval_int), _value(fails.hi, env, eval_int), eval_int(extent, env)
        at = ", ".join(f"{k} = {v}" for k, v in sizes.items())
        size = str(n) if isinstance(extent, IntImm) else f"{expr_text(extent)} = {n}"
        raise BoundsError(f"buffer {buf.name!r} is {verb} at index {expr_text(idx)}{where}, which ranges over "
                          f"[{lo}, {hi}] when {at} but the buffer has {size} elements there: "
                          f"the access is out of bounds for valid sizes (first failing size: {at}). Guard it "
                          f"with an `if` or T.if_then_else, or, when the sizes are related, say so in the "
                          f"buffer shapes (e.g. (\"n + 1\",) instead of a second name; the CPU backend and the "
                          f"interpreter take such shapes)")


def _over_or_const(e, sizes: frozenset) -> bool:
    return isinstance(e, IntImm) or over_sizes(e, sizes)


def check_static_bounds(func: PrimFunc, scalar_only: bool = False) -> None:
    """Raise BoundsError for an unguarded access whose exact index range leaves its buffer (on
    each axis, when run before flattening), for constant sizes or for some valid value of the
    function's symbolic sizes. `scalar_only` skips vector indices: before flattening only tensor
    intrinsics' implementations have them, and their vectors may run across rows on purpose."""
    sizes = _Sizes(func)
    _Checker(scalar_only, sizes if sizes.vars else None).visit(func.body)
