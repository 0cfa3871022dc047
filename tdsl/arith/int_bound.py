"""The analyzer's bounds of linear forms: terms, variables over their ranges, min/max taken
case by case, division and modulo (TVM's const_int_bound)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..ir.expr import (
    Binary,
    Call,
    Cast,
    IntImm,
    PrimExpr,
    Select,
    Var,
)
from .bounds import (
    _CASE_DEPTH,
    _UNBOUNDED,
    Bound,
    _bit_bound,
    _floordiv_bound,
    _minmax,
    _mul,
    _scale,
    _tighter,
    _union,
    dtype_bound,
    is_index,
)
from .linear import Lin, Term, _int_scalar, _lin_const, _scale_lin


class BoundRules:
    """The analyzer's bounds of linear forms: terms, variables over their ranges, min/max taken (a part of `analyzer.Analyzer`)."""

    if TYPE_CHECKING:  # the other parts of the Analyzer (analyzer.py joins them)
        _case_depth: int

        def __getattr__(self, name: str) -> Any: ...

    # bounds -------------------------------------------------------------------------------
    def bound_lin(self, a: Lin) -> Bound:
        b = self._bound_terms(a)
        move = self._symbolic_range_term(a)
        if move is not None:
            # Replace a Var whose range is symbolic by the end of its range that bounds its
            # term (then the next such Var, recursively); exact when the ends cancel against
            # other terms (j - i*4 for j in [i*4, i*4 + 4), or v - n for v in [0, n)).
            # Keep the tighter of both bounds.
            key = id(move[1].src)
            self._shifting.add(key)
            try:
                lo_form, hi_form = self._range_ends(a, move)
                alt = (self.bound_lin(lo_form)[0], self.bound_lin(hi_form)[1])
            finally:
                self._shifting.discard(key)
            b = (_tighter(max, b[0], alt[0]), _tighter(min, b[1], alt[1]))
        if len(a.terms) > 1 and self._case_depth < _CASE_DEPTH:
            split = self._minmax_term(a)
            if split is not None:
                alt = self._bound_by_cases(a, split)
                b = (_tighter(max, b[0], alt[0]), _tighter(min, b[1], alt[1]))
        return b

    def _minmax_term(self, a: Lin):
        """(key, term, coeff) of a min/max term of `a` sharing a variable with the other terms
        (otherwise nothing can cancel and the split gains nothing), or None."""
        from ..ir.functor import free_vars  # the IR imports the analyzer: import late

        for k, (t, c) in a.terms.items():
            src = t.src
            if t.plain and isinstance(src, Binary) and src.op in ("min", "max") and is_index(src.dtype):
                others = set().union(*(free_vars(o.src) for key, (o, _) in a.terms.items() if key != k))
                if others & free_vars(src):
                    return k, t, c
        return None

    def _bound_by_cases(self, a: Lin, split) -> Bound:
        """Bounds of `rest + c * op(x, y)` as op'(rest + c*x, rest + c*y) (op' = op for c > 0,
        the other one for c < 0): the other terms may cancel against each case, where they
        cannot against the opaque min/max (max(4*i - 1, 0) - 4*i is max(-1, -4*i) <= 0)."""
        key, t, c = split
        rest = Lin({k: v for k, v in a.terms.items() if k != key}, a.const, a.dtype)
        op = t.src.op if c > 0 else ("max" if t.src.op == "min" else "min")
        self._case_depth += 1
        try:
            cases = [self.bound_lin(self.add(rest, _scale_lin(self.lin(x), c))) for x in (t.src.a, t.src.b)]
        finally:
            self._case_depth -= 1
        return _minmax(op, cases[0], cases[1])

    def _bound_terms(self, a: Lin) -> Bound:
        lo: int | None = a.const
        hi: int | None = a.const
        for t, c in a.terms.values():
            tlo, thi = _scale(self._term_bound(t), c)
            lo = None if lo is None or tlo is None else lo + tlo
            hi = None if hi is None or thi is None else hi + thi
            if lo is None and hi is None:
                break
        return lo, hi

    def _symbolic_range_term(self, a: Lin):
        """(key, term, coeff) of a plain Var term whose range has a non-constant end, preferring
        a Var that the other such ranges do not mention (substituted first, it lets theirs
        cancel later); None when there is none."""
        moves = []
        for k, (t, c) in a.terms.items():
            v = t.src
            if not (t.plain and isinstance(v, Var)) or id(v) in self._shifting:
                continue
            r = self.ranges.get(v)
            if r is None or (isinstance(r.min, IntImm) and isinstance(r.extent, IntImm)):
                continue
            if is_index(r.min.dtype) and is_index(r.extent.dtype):
                moves.append((k, t, c))
        if len(moves) <= 1:
            return moves[0] if moves else None
        for move in moves:
            v = move[1].src
            if not any(v in self._range_vars(other[1].src) for other in moves if other is not move):
                return move
        return moves[0]

    def _range_vars(self, v: Var) -> set:
        hit = self._range_var_sets.get(id(v))
        if hit is None:
            from ..ir.functor import free_vars

            r = self.ranges[v]
            hit = free_vars(r.min) | free_vars(r.extent)
            self._range_var_sets[id(v)] = hit
        return hit

    def _range_ends(self, a: Lin, move) -> tuple[Lin, Lin]:
        """`a` with the moved Var replaced by its range end that minimizes (first) and
        maximizes (second) its term."""
        k, t, c = move
        rest = Lin({kk: tc for kk, tc in a.terms.items() if kk != k}, a.const, a.dtype)
        r = self.ranges[t.src]
        first = self.lin(r.min)
        last = self.add(first, self.add(self.lin(r.extent), _lin_const(-1, a.dtype)))
        small, large = (first, last) if c > 0 else (last, first)
        return self.add(rest, _scale_lin(small, c)), self.add(rest, _scale_lin(large, c))

    def _term_bound(self, t: Term) -> Bound:
        hit = self._term_bounds.get(t.key)
        if hit is not None:
            return hit
        if t.plain:
            b = self._atom_bound(t.src)
        else:
            b = _floordiv_bound(self.bound(t.src), t.lower)
            if t.upper is not None:
                u = t.upper
                if b[0] is not None and b[1] is not None and b[0] // u == b[1] // u:
                    k = (b[0] // u) * u
                    b = (b[0] - k, b[1] - k)
                else:
                    b = (0, u - 1)
        self._term_bounds[t.key] = b
        return b

    def _var_bound(self, v: Var) -> Bound:
        hit = self._var_bounds.get(id(v))
        if hit is not None:
            return hit
        r = self.ranges.get(v)
        if r is None:
            return dtype_bound(v.dtype)
        self._var_bounds[id(v)] = dtype_bound(v.dtype)  # cycle guard while computing
        lo = self.bound(r.min)[0] if _int_scalar(r.min) else None
        hi = None
        if _int_scalar(r.min) and _int_scalar(r.extent):
            hi = self.bound_lin(self.add(self.lin(r.min), self.add(self.lin(r.extent), _lin_const(-1, v.dtype))))[1]
        b = (lo, hi)
        self._var_bounds[id(v)] = b
        return b

    def _point(self, v: Var) -> PrimExpr | None:
        """The single value of `v` when its range has extent 1 (and it may be inlined)."""
        if id(v) in self._points:
            return self._points[id(v)]
        self._points[id(v)] = None  # cycle guard
        r = self.ranges.get(v)
        point = None
        if r is not None and v not in self.keep and r.min.dtype == v.dtype and _int_scalar(r.extent):
            ext = r.extent if isinstance(r.extent, IntImm) else self.simplify(r.extent)
            if isinstance(ext, IntImm) and ext.value == 1:
                point = r.min
        self._points[id(v)] = point
        return point

    def _atom_bound(self, e: PrimExpr) -> Bound:
        dt = e.dtype
        if isinstance(e, IntImm):
            return e.value, e.value
        if isinstance(e, Var):
            return self._var_bound(e)
        if isinstance(e, Binary) and is_index(dt):
            if e.op == "mul":
                return _mul(self.bound(e.a), self.bound(e.b))
            if e.op in ("min", "max"):
                return _minmax(e.op, self.bound(e.a), self.bound(e.b))
            if e.op in ("floordiv", "floormod"):
                return self._divmod_bound(e.op, self.bound(e.a), self.bound(e.b))
            if e.op in ("bitwise_and", "shift_left", "shift_right"):
                return _bit_bound(e.op, self.bound(e.a), self.bound(e.b), dt)
        if isinstance(e, Select):
            return _union(self.bound(e.true_value), self.bound(e.false_value))
        if isinstance(e, Call) and e.op == "if_then_else":
            return _union(self.bound(e.args[1]), self.bound(e.args[2]))
        if isinstance(e, Cast) and (dt.is_integer or dt.is_bool):
            src = e.value.dtype
            if src.lanes == 1 and (src.is_integer or src.is_bool) and dt.is_int:
                inner = self.bound(e.value)
                dlo, dhi = dtype_bound(dt)
                fits = ((dlo is None or (inner[0] is not None and inner[0] >= dlo)) and
                        (dhi is None or (inner[1] is not None and inner[1] <= dhi)))
                if fits and (src.bits <= dt.bits or dlo is not None):
                    return inner
        if dt.lanes == 1 and (dt.is_integer or dt.is_bool):
            return dtype_bound(dt)
        return _UNBOUNDED

    @staticmethod
    def _divmod_bound(op: str, a: Bound, b: Bound) -> Bound:
        """Bounds of a // b or a % b when b > 0 (else unbounded)."""
        blo, bhi = b
        if blo is None or blo <= 0:
            return _UNBOUNDED
        alo, ahi = a
        if op == "floormod":
            hi = None if bhi is None else bhi - 1
            if alo is not None and alo >= 0 and ahi is not None:
                hi = ahi if hi is None else min(hi, ahi)
            return 0, hi

        def corners(x: int) -> list[int]:
            # x // y is monotone in y; as y grows without bound it tends to 0 or -1
            far = x // bhi if bhi is not None else (0 if x >= 0 else -1)
            return [x // blo, far]

        lo = None if alo is None else min(corners(alo))
        hi = None if ahi is None else max(corners(ahi))
        return lo, hi
