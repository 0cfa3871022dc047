"""Issue 22: the lowering simplifier keeps wrapping semantics for integer *values*; only index
arithmetic may assume no overflow (docs/script.md)."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl

IMIN, IMAX = -2**31, 2**31 - 1
EDGES = np.array([IMIN, IMIN + 1, IMAX, IMAX - 1, -7, -1, 0, 5], "int32")

VALUES = ["X // -3", "X % -3", "X // -1", "X % -1", "T.max(X, X + 1)", "T.min(X, X + 1)",
          "T.max(X - 1, X)", "X * 2 // 2", "X * -1 // 3", "(X + 1) - 1", "X + 1 > X", "T.min(X, X - 1) < X"]


def _func(expr: str, source: str):
    dt = "bool" if ">" in expr or "<" in expr else "int32"
    x = "A[vi]" if source == "load" else "s"
    text = f'''
@T.prim_func
def f(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "{dt}"), s: T.int32):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = {expr.replace("X", x)}
'''
    return tdsl.parse(text), dt


@pytest.mark.parametrize("expr", VALUES)
def test_loaded_value_wraps_like_the_interpreter(expr):
    func, dt = _func(expr, "load")
    want = np.zeros(8, dt)
    tdsl.interpret(func, EDGES, want, 0)
    got = np.zeros(8, dt)
    tdsl.build(func)(EDGES, got, 0)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("expr", ["X // -3", "X % -3", "T.max(X, X + 1)"])
@pytest.mark.parametrize("s", [IMIN, IMAX])
def test_scalar_value_wraps_like_the_interpreter(expr, s):
    func, dt = _func(expr, "scalar")
    kernel = tdsl.build(func)
    want = np.zeros(8, dt)
    tdsl.interpret(func, EDGES, want, s)
    got = np.zeros(8, dt)
    kernel(EDGES, got, s)
    np.testing.assert_array_equal(got, want)


def test_index_arithmetic_is_still_simplified():
    # loop-bounded value arithmetic cannot wrap, so it is still folded
    text = '''
@T.prim_func
def f(B: T.Buffer((8,), "int32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = T.max(vi, vi + 1) // -1
'''
    lowered = tdsl.lower(tdsl.parse(text))
    assert "T.max" not in lowered.script()
    got = np.zeros(8, "int32")
    tdsl.build(tdsl.parse(text))(got)
    np.testing.assert_array_equal(got, -(np.arange(8) + 1))
