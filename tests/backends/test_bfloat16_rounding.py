"""Issue 22: casts to bfloat16 (from int32/int64/uint32/uint64/float64) and bfloat16 constants
and scalars round once, bit-exactly as ml_dtypes (and the interpreter) do, not twice through
float32."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tdsl

BF16 = np.dtype(ml_dtypes.bfloat16)
HALFWAY_PLUS = 1 + 2**-8 + 2**-30   # just above a bfloat16 tie; float32 rounds it onto the tie


def _crafted(dt: np.dtype) -> np.ndarray:
    """Integers just above a bfloat16 tie: rounding through float32 lands on the tie."""
    info = np.iinfo(dt)
    vals = [(1 << k) + (1 << (k - 8)) + 1 for k in range(24, info.bits - (1 if info.min < 0 else 0))]
    vals += [-v for v in vals] if info.min < 0 else []
    return np.array(vals + [info.min, info.max, 0, 1], dt)


def _cast_kernel(src: str, n: int, vectorized: bool):
    loop = "T.vectorized" if vectorized else "range"
    text = f'''
@T.prim_func
def f(A: T.Buffer(({n},), "{src}"), B: T.Buffer(({n},), "bfloat16")):
    for i in {loop}({n}):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = T.cast(A[vi], "bfloat16")
'''
    return tdsl.parse(text)


@pytest.mark.parametrize("vectorized", [False, True])
@pytest.mark.parametrize("src", ["int32", "int64", "uint32", "uint64", "float64"])
def test_cast_to_bfloat16_rounds_once(src, vectorized):
    if src == "float64":
        a = np.array([HALFWAY_PLUS, -HALFWAY_PLUS, 3 * HALFWAY_PLUS, 1e-40, 3.0e38, 1.0, 0.0, -0.0])
    else:
        a = _crafted(np.dtype(src))
    if vectorized:
        a = np.resize(a, -(-len(a) // 8) * 8)
    func = _cast_kernel(src, len(a), vectorized)
    got = np.zeros(len(a), BF16)
    tdsl.build(func)(a, got)
    want = a.astype(BF16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    interp = np.zeros(len(a), BF16)
    tdsl.interpret(func, a, interp)
    np.testing.assert_array_equal(interp.view(np.uint16), want.view(np.uint16))


def test_bfloat16_constant_and_scalar_round_once():
    text = f'''
@T.prim_func
def f(A: T.Buffer((2,), "bfloat16"), B: T.Buffer((2,), "bfloat16"), s: T.bfloat16):
    for i in range(2):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = T.Select(vi == 0, A[vi] * {HALFWAY_PLUS!r}, s)
'''
    func = tdsl.parse(text)
    a = np.ones(2, BF16)
    got = np.zeros(2, BF16)
    tdsl.build(func)(a, got, HALFWAY_PLUS)
    want = np.full(2, HALFWAY_PLUS).astype(BF16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
