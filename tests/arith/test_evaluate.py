"""tdsl.arith.eval_int / eval_array: the one integer evaluator (shapes, launch sizes, the exact
checks of compute_at and transform_layout), checked against Python's own arithmetic."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tdsl.arith import EvalError, eval_array, eval_int
from tdsl.dtypes import DataType
from tdsl.ir import Binary, Buffer, BufferLoad, Cast, IntImm, Not, Select, Var

x, y = Var("x"), Var("y")

PY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
      "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b, "min": min, "max": max,
      "lt": lambda a, b: int(a < b), "ge": lambda a, b: int(a >= b), "eq": lambda a, b: int(a == b)}


@given(op=st.sampled_from(sorted(PY)), a=st.integers(-1000, 1000), b=st.integers(-1000, 1000).filter(bool))
def test_binary_ops_match_python(op, a, b):
    e = Binary(op, x, y)
    assert eval_int(e, {x: a, y: b}) == PY[op](a, b)
    assert int(eval_array(e, {x: np.array([a]), y: np.array([b])})[0]) == PY[op](a, b)


@pytest.mark.parametrize("a, b, want", [(7, 2, 3), (-7, 2, -3), (7, -2, -3), (-7, -2, 3)])
def test_div_truncates_like_c(a, b, want):
    assert eval_int(Binary("div", IntImm(a), IntImm(b)), {}) == want


def test_select_not_cast_and_no_wrapping():
    e = Select(x.eq(IntImm(0)), IntImm(7), y * 2)
    assert eval_int(e, {x: 0, y: 5}) == 7 and eval_int(e, {x: 1, y: 5}) == 10
    assert eval_int(Not(Binary("lt", x, y)), {x: 1, y: 2}) == 0
    big = Binary("mul", Cast(x.dtype, x), IntImm(2 ** 20))
    assert eval_int(big, {x: 2 ** 20}) == 2 ** 40  # shapes are Python ints: no int32 wrap-around
    grid = np.arange(6)
    np.testing.assert_array_equal(eval_array(Binary("floormod", x, IntImm(4)), {x: grid}), grid % 4)


def test_unbound_and_unevaluable():
    with pytest.raises(KeyError):
        eval_int(x + 1, {})
    load = BufferLoad(Buffer("A", (IntImm(4),), DataType.parse("int32")), (IntImm(0),))
    with pytest.raises(EvalError) as info:
        eval_int(load + 1, {})
    assert info.value.node is load and isinstance(info.value, ValueError)
