"""Lowering's index arithmetic folds constants with the one constant folder of tdsl.arith
(`fold_binary`): integers wrap around in their dtype as the machine computes them (issue 15)."""
import pytest

from tdsl.arith.analyzer import fold_binary
from tdsl.dtypes import DataType
from tdsl.ir import Binary, IntImm, Var
from tdsl.lower._util import arith


def imm(v, dt="int32"):
    return IntImm(v, DataType.parse(dt))


@pytest.mark.parametrize("op, a, b, dt, want", [
    ("mul", 2 ** 20, 2 ** 12, "int32", 0),                       # 2**32 wraps to 0 in int32
    ("mul", 2 ** 20, 2 ** 12, "int64", 2 ** 32),                 # fits in int64
    ("add", 2 ** 31 - 1, 1, "int32", -2 ** 31),
    ("sub", -2 ** 31, 1, "int32", 2 ** 31 - 1),
    ("add", 250, 10, "uint8", 4),
    ("mul", 3, 4, "int32", 12),
])
def test_constant_folding_wraps_like_the_machine(op, a, b, dt, want):
    x, y = imm(a, dt), imm(b, dt)
    got = arith(op, x, y)
    assert isinstance(got, IntImm) and got.value == want and str(got.dtype) == dt
    ref = fold_binary(op, x, y)
    assert ref.value == got.value and ref.dtype == got.dtype  # one folder, one answer


def test_identities_still_fold_and_variables_stay():
    v = Var("v", imm(0).dtype)
    assert arith("add", v, imm(0)) is v and arith("mul", imm(1), v) is v
    assert arith("mul", v, imm(0)).value == 0
    assert isinstance(arith("add", v, imm(2)), Binary)
