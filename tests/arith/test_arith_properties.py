"""Property tests: simplify, const_bound, prove and relax against brute-force evaluation."""
import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tdsl.arith import const_bound, prove, relax, simplify
from tdsl.ir import Binary, IntImm, Range, Select, Var

X, Y, Z = Var("x"), Var("y"), Var("z")
VARS = (X, Y, Z)


def ev(e, env):
    """Reference semantics of the integer expressions generated here (Python floor ops)."""
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Select):
        return ev(e.true_value, env) if ev(e.condition, env) else ev(e.false_value, env)
    a, b = ev(e.a, env), ev(e.b, env)
    return {
        "add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
        "floordiv": lambda: a // b, "floormod": lambda: a % b, "min": lambda: min(a, b),
        "max": lambda: max(a, b), "lt": lambda: int(a < b), "le": lambda: int(a <= b),
        "gt": lambda: int(a > b), "ge": lambda: int(a >= b), "eq": lambda: int(a == b),
        "ne": lambda: int(a != b), "and": lambda: int(bool(a) and bool(b)),
        "or": lambda: int(bool(a) or bool(b)),
    }[e.op]()


consts = st.integers(-9, 40).map(IntImm)
divisors = st.sampled_from([1, 2, 3, 4, 8, 16, 32, -4, -3]).map(IntImm)
leaves = st.one_of(st.sampled_from(VARS), consts)


def _extend(children):
    arith = st.tuples(st.sampled_from(["add", "sub", "min", "max"]), children, children)
    scaled = st.tuples(st.just("mul"), children, st.one_of(consts, children))
    divmod_ = st.tuples(st.sampled_from(["floordiv", "floormod"]), children, divisors)
    select = st.tuples(st.just("select"), st.tuples(st.sampled_from(["lt", "le", "eq"]), children, children),
                       children, children)

    def build(t):
        if t[0] == "select":
            (cop, ca, cb), tv, fv = t[1:]
            return Select(Binary(cop, ca, cb), tv, fv)
        return Binary(t[0], t[1], t[2])

    return st.one_of(arith, scaled, divmod_, select).map(build)


exprs = st.recursive(leaves, _extend, max_leaves=10)
var_ranges = st.lists(st.tuples(st.integers(-6, 40), st.integers(1, 9)), min_size=3, max_size=3)


def _ranges(spec):
    return {v: Range(IntImm(lo), IntImm(ext)) for v, (lo, ext) in zip(VARS, spec)}


def _assignments(spec):
    for values in itertools.product(*[range(lo, lo + ext) for lo, ext in spec]):
        yield dict(zip(VARS, values))


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(exprs, var_ranges)
def test_simplify_agrees_with_brute_force(e, spec):
    ranges = _ranges(spec)
    s = simplify(e, ranges)
    s_free = simplify(e)
    assert s.dtype == e.dtype
    for env in _assignments(spec):
        want = ev(e, env)
        assert ev(s, env) == want, (e, s, env)
        assert ev(s_free, env) == want, (e, s_free, env)


@SETTINGS
@given(exprs)
def test_simplify_is_idempotent_in_meaning(e):
    once = simplify(e)
    twice = simplify(once)
    # both canonical: simplifying again changes nothing structurally
    from tdsl.ir import structural_equal
    assert structural_equal(once, twice), (once, twice)


@SETTINGS
@given(exprs, var_ranges)
def test_const_bound_contains_every_value(e, spec):
    lo, hi = const_bound(e, _ranges(spec))
    for env in _assignments(spec):
        v = ev(e, env)
        assert lo is None or lo <= v, (e, lo, v)
        assert hi is None or v <= hi, (e, hi, v)


@SETTINGS
@given(exprs, exprs, st.sampled_from(["lt", "le", "eq", "ne", "ge", "gt"]), var_ranges)
def test_prove_never_claims_a_false_statement(a, b, op, spec):
    cond = Binary(op, a, b)
    if prove(cond, _ranges(spec)):
        for env in _assignments(spec):
            assert ev(cond, env), (cond, env)


@SETTINGS
@given(exprs, var_ranges, st.integers(1, 2))
def test_relax_bounds_every_value(e, spec, n_relaxed):
    ranges = _ranges(spec)
    relaxed = {v: ranges[v] for v in VARS[:n_relaxed]}
    lo, hi = relax(e, relaxed)
    for env in _assignments(spec):
        v = ev(e, env)
        assert ev(lo, env) <= v <= ev(hi, env), (e, lo, hi, env)


@SETTINGS
@given(exprs, st.integers(-4, 4), st.integers(1, 6), st.tuples(st.integers(-5, 20), st.integers(1, 6)),
       st.sampled_from(["lt", "le", "ge", "gt"]), exprs)
def test_symbolic_range_mins(e, shift, y_ext, x_spec, op, other):
    """y ranges over [x + shift, x + shift + y_ext): simplify, bounds and proofs stay sound."""
    ranges = {X: Range(IntImm(x_spec[0]), IntImm(x_spec[1])), Y: Range(X + shift, IntImm(y_ext)),
              Z: Range(IntImm(0), IntImm(3))}
    s = simplify(e, ranges)
    lo, hi = const_bound(e, ranges)
    cond = Binary(op, e, other)
    proved = prove(cond, ranges)
    for x in range(x_spec[0], x_spec[0] + x_spec[1]):
        for y in range(x + shift, x + shift + y_ext):
            for z in range(3):
                env = {X: x, Y: y, Z: z}
                v = ev(e, env)
                assert ev(s, env) == v, (e, s, env)
                assert (lo is None or lo <= v) and (hi is None or v <= hi), (e, lo, hi, env)
                assert not proved or ev(cond, env), (cond, env)


@SETTINGS
@given(exprs, exprs, st.sampled_from(["lt", "le", "ge", "gt", "eq", "ne"]), st.integers(1, 5),
       st.integers(-2, 3), st.integers(1, 4))
def test_symbolic_range_extents(e, other, op, z_hi, scale, y_ext):
    """z in [1, z_hi], x in [0, z), y in [x * scale, x * scale + y_ext): nested symbolic ranges."""
    ranges = {Z: Range(IntImm(1), IntImm(z_hi)), X: Range(IntImm(0), Z), Y: Range(X * scale, IntImm(y_ext))}
    s = simplify(e, ranges)
    lo, hi = const_bound(e, ranges)
    cond = Binary(op, e, other)
    proved = prove(cond, ranges)
    for z in range(1, z_hi + 1):
        for x in range(z):
            for y in range(x * scale, x * scale + y_ext):
                env = {X: x, Y: y, Z: z}
                v = ev(e, env)
                assert ev(s, env) == v, (e, s, env)
                assert (lo is None or lo <= v) and (hi is None or v <= hi), (e, lo, hi, env)
                assert not proved or ev(cond, env), (cond, env)


def _extend_symbolic(children):
    """Also multiply by and divide by the Var z (never zero in the ranges used)."""
    by_z = st.tuples(st.sampled_from(["mul", "floordiv", "floormod"]), children, st.just(Z))
    return st.one_of(_extend(children), by_z.map(lambda t: Binary(t[0], t[1], t[2])))


sym_exprs = st.recursive(st.one_of(st.sampled_from((X, Y)), consts), _extend_symbolic, max_leaves=10)


@SETTINGS
@given(sym_exprs, st.sampled_from([(1, 4), (-2, 5)]), st.integers(1, 3), st.booleans())
def test_symbolic_divisors(e, z_spec, x_scale, y_below_z):
    """Division by a Var: x in [0, 3 * x_scale), y in [0, z) or [-2, 5)."""
    z_lo, z_ext = z_spec
    ranges = {Z: Range(IntImm(z_lo), IntImm(z_ext)), X: Range(IntImm(0), IntImm(3 * x_scale)),
              Y: Range(IntImm(0), Z) if y_below_z else Range(IntImm(-2), IntImm(7))}
    s = simplify(e, ranges)
    s_free = simplify(e)
    lo, hi = const_bound(e, ranges)
    for z in range(z_lo, z_lo + z_ext):
        for x in range(3 * x_scale):
            for y in (range(z) if y_below_z else range(-2, 5)):
                env = {X: x, Y: y, Z: z}
                try:
                    v = ev(e, env)
                except ZeroDivisionError:
                    continue  # a sub-expression divides by zero: undefined, nothing to compare
                assert ev(s, env) == v, (e, s, env)
                assert ev(s_free, env) == v, (e, s_free, env)
                assert (lo is None or lo <= v) and (hi is None or v <= hi), (e, lo, hi, env)
