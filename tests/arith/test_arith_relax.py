"""relax and linear_form."""
from tdsl.arith import linear_form, relax
from tdsl.dtypes import float32, int64
from tdsl.ir import Buffer, BufferLoad, IntImm, Range, Select, Var, max_, min_, structural_equal

i, j, k, n = Var("i"), Var("j"), Var("k"), Var("n")


def same(a, b):
    return structural_equal(a, b)


def test_relax_keeps_other_vars_symbolic():
    lo, hi = relax(i * 32 + j, {j: Range.from_extent(32)})
    assert same(lo, i * 32) and same(hi, i * 32 + 31)


def test_relax_monotone_ops():
    r = {j: Range.from_extent(8), k: Range(IntImm(2), IntImm(3))}
    lo, hi = relax(i - j * 2, r)
    assert same(lo, i - 14) and same(hi, i)
    lo, hi = relax((i * 8 + j) // 4, r)
    assert same(lo, i * 2) and same(hi, i * 2 + 1)
    lo, hi = relax(min_(j, k) + max_(j, k), r)
    assert (lo.value, hi.value) == (2, 11)
    lo, hi = relax(Select(i < 3, j, k), r)
    assert (lo.value, hi.value) == (0, 7)


def test_relax_floormod_within_and_across_periods():
    lo, hi = relax((i * 8 + j) % 8, {j: Range.from_extent(8)})
    assert (lo.value, hi.value) == (0, 7)
    lo, hi = relax(j % 16, {j: Range(IntImm(16), IntImm(8))})
    assert (lo.value, hi.value) == (0, 7)
    lo, hi = relax(j % 16, {j: Range(IntImm(12), IntImm(8))})
    assert (lo.value, hi.value) == (0, 15)


def test_relax_symbolic_ranges_and_fallbacks():
    lo, hi = relax(j, {j: Range(i * 4, IntImm(4))})
    assert same(lo, i * 4) and same(hi, i * 4 + 3)
    lo, hi = relax(j, {j: Range(k, IntImm(4)), k: Range.from_extent(n)})
    assert lo.value == 0 and same(hi, n + 2)
    # unknown monotonicity: const bound of the term
    lo, hi = relax(j * k, {j: Range.from_extent(4), k: Range.from_extent(4)})
    assert (lo.value, hi.value) == (0, 9)
    lo, hi = relax(j * i, {j: Range.from_extent(4)})
    assert (lo.value, hi.value) == (-(2**31), 2**31 - 1)
    idx = Buffer("I", (IntImm(8),), Var("x").dtype)
    lo, hi = relax(BufferLoad(idx, (j,)) + i, {j: Range.from_extent(8)})
    assert lo.value == -(2**31)


def test_relax_int64():
    a = Var("a", int64)
    lo, hi = relax(a * 2 + 1, {a: Range.from_extent(10, int64)})
    assert lo.dtype == int64 and (lo.value, hi.value) == (1, 19)


def test_linear_form():
    coeffs, rest = linear_form(i * 4 + j * 3 + k + 7 + i, [i, j])
    assert coeffs == {i: 5, j: 3} and same(rest, k + 7)
    coeffs, rest = linear_form(k * n + 2, [i])
    assert coeffs == {i: 0} and same(rest, k * n + 2)
    coeffs, rest = linear_form((i * 32 + j) // 32 * 32, [i])
    assert coeffs[i] == 32
    assert linear_form(i * j, [i]) is None
    assert linear_form(i // 2, [i]) is None
    assert linear_form(Var("x", float32), [i]) is None
