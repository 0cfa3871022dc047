"""The integer analyzer behind `simplify`, `const_bound` and `prove`.

Signed integer scalar expressions are kept in a canonical linear form: a constant plus
coefficient * term, where a term is `(x // lower) % upper` of a source expression `x` (plain
atoms are the term `x` itself: lower 1, no upper). Floor division and modulo by constants
produce such terms, and the merge rules below let the usual split/fuse index patterns cancel
(`x // 32 * 32 + x % 32 // 4 * 4 + x % 4 -> x`), much like TVM's canonical simplifier.

Bounds of a form with a min/max term and other terms are also taken case by case:
`rest + c*max(x, y)` is `max(rest + c*x, rest + c*y)` (min for c < 0, and the other way round
for min), so the other terms may cancel inside each case (max(4*i - 1, 0) - 4*i <= 0,
min(5*i + 4, 15) - 5*i + 1 <= 5); at most _CASE_DEPTH nested splits per bound.

Bounds reasoning assumes index arithmetic does not overflow (as TVM does); constant folding
wraps around per dtype, so folded constants mean exactly what the machine computes.
"""
from __future__ import annotations

import math

from ..ir.expr import (
    Binary,
    Call,
    IntImm,
    PrimExpr,
    Select,
    Var,
)
from .bounds import (
    _UNBOUNDED,
    Bound,
    _floordiv_bound,
    dtype_bound,  # noqa: F401 (imported from here by other rooms)
    is_index,
    wrap,
)
from .fold import fold_binary  # noqa: F401 (imported from here by other rooms)
from .int_bound import BoundRules
from .linear import _KEYERS, Lin, Term, _lin_const, _lin_term, _maybe_same, _scale_lin
from .rewrite import RewriteRules


class Analyzer(RewriteRules, BoundRules):
    """Simplification and bounds under `ranges` (Var -> Range), memoized per instance.

    Vars in `keep` are never replaced by their range's min, even when its extent is 1.
    """

    def __init__(self, ranges: dict | None = None, keep=(), keys: dict | None = None):
        # kept by reference: a caller may add the ranges of Vars not met yet (lower.simplify)
        self.ranges: dict = ranges if ranges is not None else {}
        self.keep = set(keep)
        # memo tables key on id(); each value keeps its node alive so ids are not reused.
        # Structural keys depend on nothing but the node, so analyzers may share `keys`.
        self._keys: dict[int, tuple] = keys if keys is not None else {}
        self._lins: dict[int, tuple] = {}
        self._simps: dict[int, tuple] = {}
        # structural key -> (expression, simplified): structurally equal expressions (unrolled
        # copies, the same index in a load and a store) simplify alike; a Var's key is its identity
        self._simps_by_key: dict[tuple, tuple] = {}
        self._term_bounds: dict = {}
        self._var_bounds: dict[int, Bound] = {}
        self._points: dict[int, PrimExpr | None] = {}
        self._shifting: set[int] = set()
        self._inlining: set[int] = set()
        self._range_var_sets: dict[int, set] = {}
        self._case_depth = 0  # nesting of min/max case splits in bound_lin (see _bound_by_cases)

    def has_seen(self, v: Var) -> bool:
        """Whether any memo entry may depend on `v`'s range (or on its having none): every use
        of a Var's range starts from its linear form, simplification, key or point."""
        i = id(v)
        return i in self._keys or i in self._lins or i in self._simps or i in self._points

    # keys -------------------------------------------------------------------------------
    def key(self, e: PrimExpr):
        hit = self._keys.get(id(e))
        if hit is not None:
            return hit[1]
        keyer = _KEYERS.get(type(e))
        k = keyer(e, self.key) if keyer is not None else ("obj", id(e))
        self._keys[id(e)] = (e, k)
        return k

    def same(self, a: PrimExpr, b: PrimExpr) -> bool:
        return a is b or self.key(a) == self.key(b)

    # public entry points ----------------------------------------------------------------
    def simplify(self, e: PrimExpr) -> PrimExpr:
        hit = self._simps.get(id(e))
        if hit is not None:
            return hit[1]
        k = self.key(e)
        twin = self._simps_by_key.get(k)
        if twin is not None:
            # a structurally equal expression was simplified: the same answer, or this very
            # node where that one came back unchanged
            r = e if twin[1] is twin[0] else twin[1]
        else:
            r = self.emit(self.lin(e)) if is_index(e.dtype) else self._simp_other(e)
            if r is not e and _maybe_same(r, e) and self.same(r, e):
                r = e  # unchanged: keep the caller's node (and its source span)
            self._simps_by_key[k] = (e, r)
        self._simps[id(e)] = (e, r)
        return r

    def bound(self, e: PrimExpr) -> Bound:
        """Inclusive integer bounds of `e`."""
        if is_index(e.dtype):
            return self.bound_lin(self.lin(e))
        s = self.simplify(e)
        if isinstance(s, IntImm):
            return s.value, s.value
        if e.dtype.lanes == 1 and (e.dtype.is_integer or e.dtype.is_bool):
            return self._atom_bound(s)
        return _UNBOUNDED

    def prove(self, cond: PrimExpr) -> bool:
        s = self.simplify(cond)
        return isinstance(s, IntImm) and s.value != 0

    # linear forms -------------------------------------------------------------------------
    def lin(self, e: PrimExpr) -> Lin:
        hit = self._lins.get(id(e))
        if hit is not None:
            return hit[1]
        r = self._lin(e)
        self._lins[id(e)] = (e, r)
        return r

    def _lin(self, e: PrimExpr) -> Lin:
        # a Binary's dtype is a property that walks down its operands: asked only where needed
        if isinstance(e, IntImm):
            return _lin_const(e.value, e.dtype)
        if isinstance(e, Var):
            point = self._point(e)
            if point is not None and id(e) not in self._inlining:
                # a range that mentions its own Var must not inline forever
                self._inlining.add(id(e))
                try:
                    return self.lin(point)
                finally:
                    self._inlining.discard(id(e))
            return self._plain(e)
        if isinstance(e, Binary):
            op = e.op
            if op == "add":
                return self.add(self.lin(e.a), self.lin(e.b))
            if op == "sub":
                return self.add(self.lin(e.a), _scale_lin(self.lin(e.b), -1))
            if op == "mul":
                a, b = self.lin(e.a), self.lin(e.b)
                if a.is_const:
                    return _scale_lin(b, a.const)
                if b.is_const:
                    return _scale_lin(a, b.const)
                return self._lin_mul(a, b)
            if op in ("floordiv", "floormod"):
                return self._lin_divmod(op, self.lin(e.a), self.lin(e.b))
            if op in ("min", "max"):
                return self._lin_minmax(op, self.lin(e.a), self.lin(e.b))
        if isinstance(e, Select) or (isinstance(e, Call) and e.op == "if_then_else"):
            cond, t, f = (e.condition, e.true_value, e.false_value) if isinstance(e, Select) else e.args
            c = self.simplify(cond)
            if isinstance(c, IntImm):
                return self.lin(t if c.value else f)
        s = self._simp_other(e)
        if isinstance(s, IntImm):
            return _lin_const(s.value, e.dtype)
        return self._plain(s)

    def _plain(self, e: PrimExpr) -> Lin:
        return _lin_term(Term(e, self.key(e)), e.dtype)

    def add(self, a: Lin, b: Lin) -> Lin:
        if not b.terms:
            return a if b.const == 0 else Lin(a.terms, a.const + b.const, a.dtype)
        terms = dict(a.terms)
        touched = False
        for k, (t, c) in b.terms.items():
            old = terms.get(k)
            if old is None:
                terms[k] = (t, c)
                touched = touched or any(o.skey == t.skey for o, _ in a.terms.values())
            elif old[1] + c == 0:
                del terms[k]
            else:
                terms[k] = (old[0], old[1] + c)
        out = Lin(terms, a.const + b.const, a.dtype)
        return self._merge(out) if touched else out

    def _merge(self, a: Lin) -> Lin:
        """Apply the split-merge rules until none fires.

        Rule 1: (x//l2 % u2)*c + (x//(l2*u2) % u1)*(c*u2)  ->  (x//l2 % (u2*u1))*c
        Rule 2: (x//l % (m*u))*c - (x//(l*m) % u)*(c*m)      ->  (x//l % m)*c
        (an absent upper is infinite on both sides.)
        """
        while True:
            items = list(a.terms.values())
            found = None
            for i, (ta, ca) in enumerate(items):
                for tb, cb in items[i + 1:]:
                    if ta.skey != tb.skey:
                        continue
                    found = self._merge_pair(ta, ca, tb, cb) or self._merge_pair(tb, cb, ta, ca)
                    if found:
                        break
                if found:
                    break
            if not found:
                return a
            (ta, tb), (src, lower, upper, coeff) = found
            terms = {k: v for k, v in a.terms.items() if k not in (ta.key, tb.key)}
            rest = Lin(terms, a.const, a.dtype)
            a = self.add(rest, _scale_lin(self.make_split(src, lower, upper), coeff))

    @staticmethod
    def _merge_pair(ta: Term, ca: int, tb: Term, cb: int):
        # rule 1: tb is the lower digit of ta
        if tb.upper is not None and ta.lower == tb.lower * tb.upper and ca == cb * tb.upper:
            upper = None if ta.upper is None else ta.upper * tb.upper
            return (ta, tb), (ta.src, tb.lower, upper, cb)
        # rule 2: tb is ta's high part, subtracted
        if tb.lower % ta.lower == 0 and tb.lower > ta.lower:
            m = tb.lower // ta.lower
            same_upper = (ta.upper is None and tb.upper is None) or (
                ta.upper is not None and tb.upper is not None and ta.upper == m * tb.upper)
            if same_upper and cb == -ca * m:
                return (ta, tb), (ta.src, ta.lower, m, ca)
        return None

    def make_split(self, src: PrimExpr, lower: int, upper: int | None) -> Lin:
        """The linear form of (src // lower) % upper, folded where bounds decide it."""
        dt = src.dtype
        xl = self.lin(src)
        lo, hi = _floordiv_bound(self.bound_lin(xl), lower)
        if upper is None:
            if lo is not None and lo == hi:
                return _lin_const(lo, dt)
            if lower == 1:
                return xl
            return _lin_term(Term(src, self.key(src), lower, None), dt)
        if lo is not None and hi is not None and lo // upper == hi // upper:
            return self.add(self.make_split(src, lower, None), _lin_const(-(lo // upper) * upper, dt))
        return _lin_term(Term(src, self.key(src), lower, upper), dt)

    def _split_off(self, a: Lin, c: int) -> tuple[Lin, Lin]:
        """a == c * q + r where q collects the terms whose coefficients c divides."""
        qt, rt = {}, {}
        for k, (t, v) in a.terms.items():
            if v % c == 0:
                qt[k] = (t, v // c)
            else:
                rt[k] = (t, v)
        return Lin(qt, 0, a.dtype), Lin(rt, a.const, a.dtype)

    def _gcd_reduce(self, r: Lin, c: int):
        """r == g * r2 + kr with 0 <= kr < g, g = gcd(c, coefficients) > 1; else None."""
        g = c
        for _, v in r.terms.values():
            g = math.gcd(g, v)
            if g == 1:
                return None
        k0, kr = divmod(r.const, g)
        r2 = Lin({k: (t, v // g) for k, (t, v) in r.terms.items()}, k0, r.dtype)
        return g, r2, kr

    def div_lin(self, a: Lin, c: int) -> Lin:
        """a // c for c > 0."""
        q, r = self._split_off(a, c)
        lo, hi = self.bound_lin(r)
        if lo is not None and hi is not None and lo // c == hi // c:
            return self.add(q, _lin_const(lo // c, a.dtype))
        red = self._gcd_reduce(r, c)
        if red is not None:
            g, r2, _ = red
            return self.add(q, self.div_lin(r2, c // g))
        t = r.single()
        if t is not None and not t.plain:
            return self.add(q, self._split_div(t, c))
        return self.add(q, self.make_split(self.emit(r), c, None))

    def mod_lin(self, a: Lin, c: int) -> Lin:
        """a % c for c > 0."""
        _, r = self._split_off(a, c)
        lo, hi = self.bound_lin(r)
        if lo is not None and hi is not None and lo // c == hi // c:
            return self.add(r, _lin_const(-(lo // c) * c, a.dtype))
        red = self._gcd_reduce(r, c)
        if red is not None:
            g, r2, kr = red
            return self.add(_scale_lin(self.mod_lin(r2, c // g), g), _lin_const(kr, a.dtype))
        t = r.single()
        if t is not None and not t.plain:
            return self._split_mod(t, c)
        return self.make_split(self.emit(r), 1, c)

    def _split_div(self, t: Term, c: int) -> Lin:
        if t.upper is None:
            return self.make_split(t.src, t.lower * c, None)
        if t.upper % c == 0:
            return self.make_split(t.src, t.lower * c, t.upper // c)
        return self.make_split(t.expr(), c, None)

    def _split_mod(self, t: Term, c: int) -> Lin:
        if t.upper is None or t.upper % c == 0:
            return self.make_split(t.src, t.lower, c)
        if c % t.upper == 0:
            return _lin_term(t, t.src.dtype)
        return self.make_split(t.expr(), 1, c)

    def _lin_divmod(self, op: str, a: Lin, b: Lin) -> Lin:
        dt = a.dtype
        if b.is_const and b.const != 0:
            c = b.const
            if op == "floordiv":
                # x // -c == (-x) // c
                return self.div_lin(a, c) if c > 0 else self.div_lin(_scale_lin(a, -1), -c)
            # x % -c == -((-x) % c)
            return self.mod_lin(a, c) if c > 0 else _scale_lin(self.mod_lin(_scale_lin(a, -1), -c), -1)
        if a.is_const and b.is_const:  # division by zero stays for run time
            return self._plain(Binary(op, IntImm(wrap(a.const, dt), dt), IntImm(0, dt)))
        alo, ahi = self.bound_lin(a)
        blo, _ = self.bound_lin(b)
        if alo is not None and ahi is not None and blo is not None and alo >= 0 and ahi < blo:
            return _lin_const(0, dt) if op == "floordiv" else a
        if b.is_const:  # a constant divided by zero
            return self._plain(Binary(op, self.emit(a), self.emit(b)))
        return self._lin_symbolic_divmod(op, a, b)

    def _lin_mul(self, a: Lin, b: Lin) -> Lin:
        """A product of two non-constant forms. (x // d) * d with a symbolic d becomes
        x - x % d, so that it cancels against x % d as the constant-divisor terms do."""
        for x, y in ((a, b), (b, a)):
            if x.const == 0 and len(x.terms) == 1:
                (t, c), = x.terms.values()
                src = t.src
                if (t.plain and isinstance(src, Binary) and src.op == "floordiv" and not isinstance(src.b, IntImm)
                        and self.same(src.b, self.emit(y))):
                    rem = self.lin(Binary("floormod", src.a, src.b))
                    return _scale_lin(self.add(self.lin(src.a), _scale_lin(rem, -1)), c)
        return self._plain(Binary("mul", self.emit(a), self.emit(b)))

    def _lin_symbolic_divmod(self, op: str, a: Lin, b: Lin) -> Lin:
        """a // b and a % b for a non-constant b: the terms q * b of a come out of the division
        ((q*b + r) // b == q + r // b, (q*b + r) % b == r % b), and r // b is 0 (r % b is r)
        when 0 <= r < b."""
        dt = a.dtype
        bkey = self.key(self.emit(b))
        q = _lin_const(0, dt)
        r_terms = {}
        for k, (t, c) in a.terms.items():
            src = t.src
            factor = None
            if t.plain and isinstance(src, Binary) and src.op == "mul":
                if self.key(src.b) == bkey:
                    factor = src.a
                elif self.key(src.a) == bkey:
                    factor = src.b
            if factor is None:
                r_terms[k] = (t, c)
            else:
                q = self.add(q, _scale_lin(self.lin(factor), c))
        r = Lin(r_terms, a.const, dt)
        rlo = self.bound_lin(r)[0]
        below = self.bound_lin(self.add(r, _scale_lin(b, -1)))[1]
        if rlo is not None and rlo >= 0 and below is not None and below < 0:
            return q if op == "floordiv" else r
        rest = self._plain(Binary(op, self.emit(r), self.emit(b)))
        return self.add(q, rest) if op == "floordiv" else rest

    def _lin_minmax(self, op: str, a: Lin, b: Lin) -> Lin:
        lo, hi = self.bound_lin(self.add(a, _scale_lin(b, -1)))
        a_le_b = hi is not None and hi <= 0
        a_ge_b = lo is not None and lo >= 0
        if a_le_b or a_ge_b:
            return a if (a_le_b == (op == "min")) else b
        return self._plain(Binary(op, self.emit(a), self.emit(b)))

    # emitting -----------------------------------------------------------------------------
    def emit(self, a: Lin) -> PrimExpr:
        """The expression of a linear form: positive terms first, then subtracted ones, then
        the constant, each group in first-seen order."""
        dt = a.dtype
        if not a.terms:
            return IntImm(wrap(a.const, dt), dt)
        pos, neg = [], []
        for t, c in a.terms.values():
            c = wrap(c, dt)
            if c > 0:
                pos.append((t, c))
            elif c < 0:
                neg.append((t, c))
        const = wrap(a.const, dt)
        out: PrimExpr | None = None
        for t, c in pos:
            te = t.expr() if c == 1 else Binary("mul", t.expr(), IntImm(c, dt))
            out = te if out is None else Binary("add", out, te)
        if out is None and const != 0:
            out, const = IntImm(const, dt), 0
        for t, c in neg:
            if out is None:
                out = Binary("mul", t.expr(), IntImm(c, dt))
                continue
            m = wrap(-c, dt)
            out = Binary("sub", out, t.expr() if m == 1 else Binary("mul", t.expr(), IntImm(m, dt)))
        if out is None:
            out = IntImm(const, dt)
        elif const > 0:
            out = Binary("add", out, IntImm(const, dt))
        elif const < 0:
            out = Binary("sub", out, IntImm(wrap(-const, dt), dt))
        self._lins.setdefault(id(out), (out, a))
        return out
