"""Fuzzing the classes of issue 22's adversarial probes (docs/reliability.md, "Issue 22"):
casts to every dtype bit-exactly against numpy/ml_dtypes, integer edge values (INT_MIN, INT_MAX,
-1 divisors) through the simplifier's rules, int64 loop bounds, scalar/dimension parameters,
data-dependent indices, and huge or overflowing buffer sizes. CI runs few examples; deep mode
(TDSL_FUZZ_DEEP) many more."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from backends.subproc import run_probe
from fuzz.fuzz_common import deep_factor, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

import tdsl

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
          "float32", "float64"]
_KERNELS: dict = {}


def _np(d: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if d == "bfloat16" else np.dtype(d)


def _is_float(d: str) -> bool:
    return d in ("float16", "bfloat16", "float32", "float64")


def _cast_kernel(src: str, dst: str, n: int):
    key = ("cast", src, dst, n)
    if key not in _KERNELS:
        _KERNELS[key] = tdsl.build(tdsl.parse(f'''
@T.prim_func
def f(A: T.Buffer(({n},), "{src}"), B: T.Buffer(({n},), "{dst}")):
    for i in range({n}):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = T.cast(A[vi], "{dst}")
'''))
    return _KERNELS[key]


def _values(src: str, draw_ints, draw_floats) -> np.ndarray:
    t = _np(src)
    if not _is_float(src):
        info = np.iinfo(t)
        return np.array([max(info.min, min(info.max, v)) for v in draw_ints], t)
    return np.array(draw_floats, np.float64).astype(t)


@fuzz_settings(12)
@given(src=st.sampled_from(DTYPES), dst=st.sampled_from(DTYPES),
       ints=st.lists(st.one_of(st.integers(-2**63, 2**64 - 1),
                               st.integers(9, 62).map(lambda k: (1 << k) + (1 << (k - 8)) + 1)),
                     min_size=8, max_size=8),
       floats=st.lists(st.floats(-3e38, 3e38, allow_nan=False, width=64), min_size=8, max_size=8))
def test_casts_are_bit_exact(src, dst, ints, floats):
    a = _values(src, ints, floats)
    if _is_float(src) and not _is_float(dst):
        info = np.iinfo(_np(dst))   # out-of-range float -> int is undefined, as in C
        f = a.astype(np.float64)
        a = np.where((f > info.min) & (f < info.max), a, np.zeros_like(a))
    with np.errstate(all="ignore"):
        want = a.astype(_np(dst))
    got = np.zeros(8, _np(dst))
    _cast_kernel(src, dst, 8)(a, got)
    width = f"u{_np(dst).itemsize}"
    same = got.view(width) == want.view(width)
    if _is_float(dst):
        same |= np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
    assert same.all(), f"{src} -> {dst}: {a[~same]} gave {got[~same]}, numpy/ml_dtypes {want[~same]}"


EDGES = np.array([-2**31, -2**31 + 1, 2**31 - 1, 2**31 - 2, -7, -1, 0, 5], "int32")
_CONSTS = st.sampled_from([-3, -2, -1, 1, 2, 3, 7, 2**31 - 1, -2**31 + 1])


def _expr(depth: int):
    leaf = st.one_of(st.just("X"), _CONSTS.map(lambda c: f"T.int32({c})"))
    if depth == 0:
        return leaf
    sub = _expr(depth - 1)
    binop = st.tuples(st.sampled_from(["+", "-", "*", "//", "%"]), sub, sub).map(
        lambda t: f"({t[1]} {t[0]} {t[2]})" if t[0] not in ("//", "%") else f"({t[1]} {t[0]} {{c}})")
    minmax = st.tuples(st.sampled_from(["T.max", "T.min"]), sub, sub).map(lambda t: f"{t[0]}({t[1]}, {t[2]})")
    return st.one_of(leaf, binop, minmax)


@fuzz_settings(15)
@given(shape=_expr(3), divisors=st.lists(st.sampled_from([-3, -2, -1, 1, 2, 3, 7]), min_size=8, max_size=8))
def test_integer_edge_values_through_the_simplifier(shape, divisors):
    expr = shape
    for d in divisors:
        expr = expr.replace("{c}", f"T.int32({d})", 1)
    expr = expr.replace("{c}", "T.int32(3)").replace("X", "A[vi]")
    func = tdsl.parse(f'''
@T.prim_func
def f(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = {expr}
''')
    want = np.zeros(8, "int32")
    tdsl.interpret(func, EDGES, want)
    got = np.zeros(8, "int32")
    tdsl.build(func)(EDGES, got)
    np.testing.assert_array_equal(got, want, err_msg=expr)


@fuzz_settings(6)
@given(start=st.integers(2**31, 2**62), trips=st.integers(1, 5))
def test_int64_loop_bounds(start, trips):
    func = tdsl.parse(f'''
@T.prim_func
def f(B: T.Buffer((1,), "int64")):
    for i in range({start}, {start + trips}):
        with T.block("B"):
            vi = T.axis.reduce({start + trips}, i)
            with T.init():
                B[0] = T.int64(0)
            B[0] = B[0] + (vi - {start - 1})
''')
    got = np.zeros(1, "int64")
    tdsl.build(func)(got)
    assert got[0] == trips * (trips + 1) // 2


@fuzz_settings(6)
@given(shape=st.lists(st.sampled_from([1, 3, 1024, 4096, 32768, 65536, 2**20]), min_size=1, max_size=4))
def test_huge_constant_buffer_sizes_are_refused_or_fine(shape):
    rank = len(shape)
    func = tdsl.parse(f'''
@T.prim_func
def f(A: T.Buffer((4,), "int32"), B: T.Buffer((4,), "float32")):
    X = T.alloc_buffer({tuple(shape)}, "float32")
    for i in range(4):
        with T.block("X"):
            vi = T.axis.remap("S", [i])
            X[{", ".join(["A[vi]"] * rank)}] = T.float32(1)
    for i in range(4):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = X[{", ".join(["A[vi]"] * rank)}]
''')
    if int(np.prod(shape, dtype=object)) >= 2**31:
        with pytest.raises(tdsl.TargetError, match="more than int32 indices address"):
            tdsl.build(func)
    else:
        tdsl.lower(func)


_ARG_PROBE = """
import numpy as np, tdsl
rng = np.random.default_rng({seed})
scalar = tdsl.build(tdsl.parse('''
@T.prim_func
def f(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32"), n: T.int32):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi] + T.float32(1)
'''))
gather = tdsl.build(tdsl.parse('''
@T.prim_func
def g(D: T.Buffer((16, 8), "float32"), I: T.Buffer((4,), "int64"), O: T.Buffer((4, 8), "float32")):
    for i, j in T.grid(4, 8):
        with T.block("O"):
            vi, vj = T.axis.remap("SS", [i, j])
            O[vi, vj] = D[I[vi], vj]
'''))
bad = 0
for _ in range({calls}):
    size = int(rng.integers(0, 9))
    n = int(rng.choice([size, size + 1, size - 1, 10**8, 2**31 - 1, -1, 0]))
    a, b = np.ones(size, "float32"), np.zeros(size, "float32")
    try:
        scalar(a, b, n)
        ok = n == size and (b == 2).all()
    except tdsl.ArgumentError:
        ok = n != size
    bad += not ok
    idx = rng.choice([0, 5, 15, 16, -1, 2**31, -2**40, 10**12], 4)
    d = np.arange(128, dtype="float32").reshape(16, 8)
    try:
        out = gather(d, idx)
        ok = ((0 <= idx) & (idx < 16)).all() and (out == d[idx]).all()
    except tdsl.BoundsError:
        ok = not ((0 <= idx) & (idx < 16)).all()
    bad += not ok
print("BAD", bad)
"""


def test_scalar_dimensions_and_data_dependent_indices():
    """In a child process (a regression would segfault): random scalar sizes against arrays and
    random gather indices, each refused or computed right."""
    calls = 60 * deep_factor()
    seed = 0 if deep_factor() == 1 else int(np.random.SeedSequence().entropy % 2**32)
    out = run_probe(_ARG_PROBE.format(seed=seed, calls=calls), timeout=600)
    assert "BAD 0" in out, f"seed {seed}: {out}"
