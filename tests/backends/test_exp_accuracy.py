"""Accuracy of the CPU backend's float32 exp (generated in IR: range reduction, minimax
polynomial, two-factor scaling) and of tanh / erf / sigmoid built on it, scalar and vector,
against float64 references over the whole float32 range and the special values."""
import math

import numpy as np
import pytest

import tdsl

TINY = np.finfo(np.float32).tiny          # smallest normal float32
SUBNORMAL_ULP = 2.0 ** -149
SPECIALS = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 88.72283, 88.72284, 88.7229, 89.0, 89.5, 1e10,
            -87.33654, -87.33655, -103.27893, -103.97207, -103.98, -104.0, -104.5, -200.0, -1e10,
            np.finfo(np.float32).max, -np.finfo(np.float32).max, 1e-45, -1e-45, 1e-30, -1e-30]


def _unary_kernel(op: str, lanes: int):
    func = tdsl.parse(f'''
@T.prim_func
def f(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("b"):
            vi = T.axis.spatial(n, i)
            B[vi] = T.{op}(A[vi])
''')
    if lanes == 1:
        return tdsl.build(func)
    sch = tdsl.Schedule(func)
    (loop,) = sch.get_loops(sch.get_block("b"))
    _, vec = sch.split(loop, factors=[None, lanes])
    sch.vectorize(vec)
    return tdsl.build(sch)


def _sweep(rng) -> np.ndarray:
    """Every region of exp's domain: a dense grid over the finite, non-trivial part, random
    values, the neighbourhood of the reduction's breakpoints (n ln2 / 2), and the specials.
    A multiple of 16 long, so the vector loops have no tail."""
    grid = np.linspace(-110, 95, 400_000)
    near_zero = rng.standard_normal(50_000) * 1e-3
    half_steps = np.log(2) / 2 * np.arange(-300, 260)
    steps32 = half_steps.astype(np.float32)
    breakpoints = np.concatenate([np.nextafter(steps32, np.float32(k)) for k in (-np.inf, np.inf)])
    x = np.concatenate([grid, rng.uniform(-30, 30, 100_000), near_zero, breakpoints, SPECIALS]).astype(np.float32)
    return np.concatenate([x, np.zeros(-len(x) % 16, np.float32)])


@pytest.fixture(scope="module")
def sweep():
    return _sweep(np.random.default_rng(7))


@pytest.mark.parametrize("lanes", [1, 8, 16])
def test_exp_within_one_and_a_half_ulp_of_the_correctly_rounded_result(lanes, sweep):
    x = sweep
    got = _unary_kernel("exp", lanes)(x)
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(np.float64))
        rounded = exact.astype(np.float32)
    normal = np.isfinite(rounded) & (rounded >= TINY)
    ulps = np.abs(got[normal] - exact[normal]) / np.spacing(rounded[normal]).astype(np.float64)
    assert ulps.max() <= 1.5, f"worst at x = {x[normal][np.argmax(ulps)]!r}: {ulps.max():.2f} ulp"
    assert np.max(np.abs(got[normal] / exact[normal] - 1)) < 2e-7
    subnormal = (rounded > 0) & (rounded < TINY)
    assert subnormal.any()
    assert np.max(np.abs(got[subnormal] - exact[subnormal])) <= 2 * SUBNORMAL_ULP
    # overflow to inf and underflow to 0 exactly where the correctly rounded result does
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(rounded) & ~np.isnan(x))
    np.testing.assert_array_equal(got == 0, rounded == 0)


@pytest.mark.parametrize("lanes", [1, 16])
def test_exp_matches_numpy_within_two_ulp_and_on_special_values(lanes, sweep):
    x = sweep
    got = _unary_kernel("exp", lanes)(x)
    with np.errstate(over="ignore"):
        want = np.exp(x)
    np.testing.assert_array_max_ulp(got, want, maxulp=2)
    # results that are exactly representable: any error is a bug in the range handling
    exact = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 89.5, 1e10, -104.5, -200.0, -1e10,
                      np.finfo(np.float32).max, -np.finfo(np.float32).max], np.float32)
    padded = np.concatenate([exact, np.zeros(-len(exact) % 16, np.float32)])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(_unary_kernel("exp", lanes)(padded)[:len(exact)], np.exp(exact))


def _reference(op: str, x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    if op == "tanh":
        return np.tanh(x64)
    if op == "sigmoid":
        with np.errstate(over="ignore"):
            return 1 / (1 + np.exp(-x64))
    return np.vectorize(math.erf, otypes=[np.float64])(x64)


@pytest.mark.parametrize("lanes", [1, 16])
@pytest.mark.parametrize("op", ["tanh", "sigmoid", "erf"])
def test_functions_built_on_exp_stay_accurate(op, lanes, rng):
    x = np.concatenate([np.linspace(-120, 120, 40_000), rng.standard_normal(20_000) * 3,
                        rng.standard_normal(4_000) * 1e-3, SPECIALS]).astype(np.float32)
    x = np.concatenate([x, np.zeros(-len(x) % 16, np.float32)])
    got = _unary_kernel(op, lanes)(x).astype(np.float64)
    want = _reference(op, x)
    finite = ~np.isnan(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
    big = np.abs(want) >= 1e-30
    rel = np.abs(got[finite & big] - want[finite & big]) / np.abs(want[finite & big])
    # tanh/sigmoid: ~2 ulp; erf: the erfc fit's 1.2e-7 plus rounding
    assert rel.max() < (4e-7 if op == "erf" else 3e-7), f"{op}: worst relative error {rel.max():.3g}"
    assert np.all(np.abs(got[finite & ~big] - want[finite & ~big]) <= 1e-37)
    for v, w in ((np.inf, _reference(op, np.array([np.inf], np.float32))[0]),
                 (-np.inf, _reference(op, np.array([-np.inf], np.float32))[0])):
        assert got[list(x).index(np.float32(v))] == w
