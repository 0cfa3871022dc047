"""Bounds and proofs through min/max: a form with a min/max term is bounded case by case."""
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tdsl.arith import const_bound, prove, simplify
from tdsl.ir import IntImm, Range, Var, max_, min_, substitute

i, j = Var("i"), Var("j")
R4 = {i: Range.from_extent(4)}


def values(expr, ranges):
    """Every value of `expr` over the (constant) ranges, by evaluating the simplified constant."""
    vs = list(ranges)
    out = []
    for point in itertools.product(*(range(r.min.value, r.min.value + r.extent.value) for r in ranges.values())):
        v = simplify(substitute(expr, {var: IntImm(p) for var, p in zip(vs, point)}))
        assert isinstance(v, IntImm), v
        out.append(v.value)
    return out


def test_max_below_a_bound_of_each_case():
    assert prove(max_(i * 4 - 1, 0) <= i * 4, R4)
    assert not prove(max_(i * 4 + 1, 0) <= i * 4, R4)
    assert const_bound(max_(i * 4 - 1, 0) - i * 4, R4) == (-1, 0)


def test_min_minus_a_term_of_it():
    assert const_bound(min_(i * 5 + 4, 15) - i * 5 + 1, R4) == (1, 5)
    assert prove(min_(i * 5 + 4, 15) - i * 5 + 1 <= 5, R4)


def test_negative_coefficient_flips_the_case_split():
    # -max(a, b) = min(-a, -b)
    assert const_bound(i * 4 - max_(i * 4 - 1, 0), R4) == (0, 1)
    assert prove(i * 4 - min_(i * 4, 7) >= 0, R4)


def test_nested_min_max_and_two_terms():
    e = min_(max_(i * 4 - 1, 0), i * 3) - i * 4 + min_(i, 2)
    lo, hi = const_bound(e, R4)
    got = values(e, R4)
    assert lo <= min(got) and max(got) <= hi
    assert (lo, hi) == (-1, 0)


def test_split_tile_extent_pattern():
    # the extent of the last tile of a split: min(16, n - 16*o) stays within [1, 16] for o < n/16
    o = Var("o")
    ranges = {o: Range.from_extent(3)}
    assert const_bound(min_(o * 16 + 16, 40) - o * 16, ranges) == (8, 16)


_small = st.integers(-6, 6)


@settings(max_examples=150, deadline=None)
@given(a=_small, b=_small, c=_small, d=_small, e=_small, op=st.sampled_from([min_, max_]),
       sign=st.sampled_from([1, -1]), ext=st.integers(1, 6))
def test_case_split_bounds_are_sound(a, b, c, d, e, op, sign, ext):
    ranges = {i: Range.from_extent(ext), j: Range.from_extent(3)}
    expr = op(i * a + j + b, i * c - j + d) * sign + i * e - j * sign
    lo, hi = const_bound(expr, ranges)
    got = values(expr, ranges)
    assert lo is not None and hi is not None
    assert lo <= min(got) and max(got) <= hi
    assert prove(expr <= hi, ranges) and prove(expr >= lo, ranges)
