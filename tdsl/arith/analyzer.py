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
    _CASE_DEPTH,
    _FLIP,
    _UNBOUNDED,
    Bound,
    _bit_bound,
    _decide,
    _floordiv_bound,
    _minmax,
    _mul,
    _scale,
    _tighter,
    _union,
    dtype_bound,
    is_index,
    wrap,
)
from .fold import _is_one, _is_zero, fold_binary, fold_cast
from .linear import _KEYERS, Lin, Term, _int_scalar, _lin_const, _lin_term, _maybe_same, _scale_lin


class Analyzer:
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
