"""relax (symbolic bounds of an expression over ranges of some of its Vars) and linear_form."""
from __future__ import annotations

from ..ir.expr import Binary, Call, Cast, IntImm, PrimExpr, Select, Var, as_expr, shift_in_range
from .analyzer import Analyzer, dtype_bound, is_index

# None marks a side with no bound
SymBound = tuple[PrimExpr | None, PrimExpr | None]


class Relaxer:
    """Symbolic interval evaluation: Vars in `ranges` vary, every other Var stays symbolic.

    `keep` lists Vars that take part in proofs (their ranges are known) but are never relaxed,
    e.g. the block iterators during region inference.
    """

    def __init__(self, ranges: dict, keep=(), keys: dict | None = None):
        self.keep = frozenset(keep)
        self.ranges = {v: r for v, r in ranges.items() if v not in self.keep}
        self.an = Analyzer(ranges, keep=keep, keys=keys)
        self._vars: dict[int, tuple] = {}
        self._active: set[int] = set()
        # id(e) -> (e, bounds) of _relax calls made outside any range expansion (the answer
        # then depends on nothing else): indices share subexpressions (x // 16 and x % 16)
        self._relaxed: dict[int, tuple] = {}

    def relax(self, e: PrimExpr) -> SymBound:
        """Inclusive symbolic (lo, hi) of `e` (simplified), None where unbounded."""
        s = self.an.simplify(e)
        lo, hi = self._relax(s)
        return (None if lo is None else self.an.simplify(lo)), (None if hi is None else self.an.simplify(hi))

    def _depends(self, e: PrimExpr) -> bool:
        """Whether `e` mentions a relaxed Var."""
        hit = self._vars.get(id(e))
        if hit is not None:
            return hit[1]
        if isinstance(e, Var):
            r = e in self.ranges
        elif isinstance(e, IntImm):
            r = False
        elif isinstance(e, Binary):
            # from the operands' (memoized) answers: free_vars of every subexpression walked
            # each subtree again, quadratic in the depth (~1/3 of relax's time in lowering)
            r = self._depends(e.a) or self._depends(e.b)
        elif isinstance(e, Cast):
            r = self._depends(e.value)
        else:
            from ..ir.functor import free_vars

            r = any(v in self.ranges for v in free_vars(e))
        self._vars[id(e)] = (e, r)
        return r

    def _relax(self, e: PrimExpr) -> SymBound:
        if not self._depends(e):
            return e, e
        if self._active:
            return self._relax_uncached(e)
        hit = self._relaxed.get(id(e))
        if hit is None:
            hit = self._relaxed[id(e)] = (e, self._relax_uncached(e))
        return hit[1]

    def _relax_uncached(self, e: PrimExpr) -> SymBound:
        if not is_index(e.dtype):
            return self._fallback(e)
        if isinstance(e, Var):
            return self._relax_var(e)
        if isinstance(e, Binary):
            r = self._relax_binary(e)
            if r is not None:
                return r
        if isinstance(e, Select) or (isinstance(e, Call) and e.op == "if_then_else"):
            t, f = (e.true_value, e.false_value) if isinstance(e, Select) else e.args[1:]
            (tl, th), (fl, fh) = self._relax(t), self._relax(f)
            return _combine("min", tl, fl, lo_side=True), _combine("max", th, fh, lo_side=False)
        if isinstance(e, Cast) and is_index(e.value.dtype) and e.value.dtype.bits <= e.dtype.bits:
            lo, hi = self._relax(e.value)
            return (None if lo is None else Cast(e.dtype, lo)), (None if hi is None else Cast(e.dtype, hi))
        return self._fallback(e)

    def _relax_var(self, v: Var) -> SymBound:
        if id(v) in self._active:  # a range that refers to itself: give up on it
            return self._fallback(v)
        r = self.ranges[v]
        if r.min.dtype != v.dtype or r.extent.dtype != v.dtype:
            return self._fallback(v)
        self._active.add(id(v))
        try:
            lo = self._relax(self.an.simplify(r.min))[0]
            hi = self._relax(self.an.simplify(r.min + r.extent - 1))[1]
        finally:
            self._active.discard(id(v))
        return lo, hi

    def _relax_binary(self, e: Binary) -> SymBound | None:
        op = e.op
        if op in ("add", "sub"):
            (al, ah), (bl, bh) = self._relax(e.a), self._relax(e.b)
            if op == "add":
                return _arith("add", al, bl), _arith("add", ah, bh)
            return _arith("sub", al, bh), _arith("sub", ah, bl)
        if op == "mul":
            for x, c in ((e.a, e.b), (e.b, e.a)):
                if isinstance(c, IntImm):
                    lo, hi = self._relax(x)
                    if c.value < 0:
                        lo, hi = hi, lo
                    return _arith("mul", lo, c), _arith("mul", hi, c)
            return None
        if op in ("min", "max"):
            (al, ah), (bl, bh) = self._relax(e.a), self._relax(e.b)
            return _combine(op, al, bl, lo_side=True), _combine(op, ah, bh, lo_side=False)
        if op in ("floordiv", "floormod") and isinstance(e.b, IntImm) and e.b.value > 0:
            lo, hi = self._relax(e.a)
            if op == "floordiv":
                return _arith("floordiv", lo, e.b), _arith("floordiv", hi, e.b)
            return self._relax_mod(e, lo, hi)
        if op in ("shift_left", "shift_right") and isinstance(e.b, IntImm) and shift_in_range(e.b.value, e.b.dtype) \
                and (op == "shift_right" or is_index(e.dtype)):
            lo, hi = self._relax(e.a)     # monotone in e.a (a signed shift left assumed not to wrap, as mul)
            return _arith(op, lo, e.b), _arith(op, hi, e.b)
        if op in ("bitwise_and", "bitwise_or", "bitwise_xor") and is_index(e.dtype):
            return self._relax_bits(e)
        return None

    def _relax_bits(self, e: Binary) -> SymBound | None:
        """x & y, x | y, x ^ y of operands with constant bounds in [0, hi]: & is at most the smaller
        hi, | and ^ set no bit above the larger hi's top bit (an XOR swizzle (j // 8) ^ (i % 8))."""
        his = []
        for x in (e.a, e.b):
            lo, hi = (None if b is None else self.an.simplify(b) for b in self._relax(x))
            if not (isinstance(lo, IntImm) and isinstance(hi, IntImm)) or lo.value < 0:
                return None
            his.append(hi.value)
        top = min(his) if e.op == "bitwise_and" else (1 << max(his).bit_length()) - 1
        return IntImm(0, e.dtype), IntImm(top, e.dtype)

    def _relax_mod(self, e: Binary, lo, hi) -> SymBound:
        """x % c is monotone only while x stays in one period of c."""
        c = e.b
        if lo is not None and hi is not None:
            same = self.an.simplify(Binary("floordiv", hi, c) - Binary("floordiv", lo, c))
            if isinstance(same, IntImm) and same.value == 0:
                return Binary("floormod", lo, c), Binary("floormod", hi, c)
        return IntImm(0, c.dtype), IntImm(c.value - 1, c.dtype)  # type: ignore[attr-defined]

    def _fallback(self, e: PrimExpr) -> SymBound:
        lo, hi = self.an.bound(e) if e.dtype.lanes == 1 and e.dtype.is_integer else (None, None)
        dt = e.dtype
        return (None if lo is None else IntImm(lo, dt)), (None if hi is None else IntImm(hi, dt))


def _arith(op: str, a, b):
    if a is None or b is None:
        return None
    return Binary(op, a, b)


def _combine(op: str, a, b, lo_side: bool):
    """min/max of two sides where None is -inf on the low side and +inf on the high side."""
    if a is None or b is None:
        unbounded_wins = (op == "min") == lo_side
        if unbounded_wins:
            return None
        return b if a is None else a
    return Binary(op, a, b)


def relax(expr: PrimExpr, ranges: dict) -> tuple[PrimExpr, PrimExpr]:
    """Inclusive symbolic (lo, hi) of `expr` as the Vars in `ranges` vary over their Ranges and
    every other Var stays symbolic. A side with no bound is the dtype's min / max value."""
    expr = as_expr(expr)
    lo, hi = Relaxer(ranges).relax(expr)
    dt = expr.dtype
    dlo, dhi = dtype_bound(dt)
    if lo is None:
        lo = IntImm(dlo if dlo is not None else -(1 << (dt.bits - 1)), dt)
    if hi is None:
        hi = IntImm(dhi if dhi is not None else (1 << (dt.bits - 1)) - 1, dt)
    return lo, hi


def linear_form(expr: PrimExpr, vars) -> tuple[dict[Var, int], PrimExpr] | None:
    """(coeffs, rest) with expr == sum(coeffs[v] * v) + rest and no `vars` in rest; every Var of
    `vars` is a key (coefficient 0 when absent). None when expr is not affine in `vars`."""
    from ..ir.functor import free_vars

    expr = as_expr(expr)
    if not is_index(expr.dtype):
        return None
    an = Analyzer()
    form = an.lin(expr)
    wanted = {id(v): v for v in vars}
    coeffs = {v: 0 for v in vars}
    rest_terms = {}
    for k, (t, c) in form.terms.items():
        if t.plain and isinstance(t.src, Var) and id(t.src) in wanted:
            coeffs[t.src] += c
        elif any(id(v) in wanted for v in free_vars(t.src)):
            return None
        else:
            rest_terms[k] = (t, c)
    from .analyzer import Lin

    return coeffs, an.emit(Lin(rest_terms, form.const, form.dtype))
