"""One integer evaluator: the value of an integer (or bool) index expression once its variables
are bound, in Python's unbounded integers (shapes, launch sizes, enumerated iterations).

`eval_int(expr, env)` gives an int; `eval_array(expr, env)` the same over numpy arrays of values
(every iteration of a loop nest at once). Division and modulo floor (`floordiv`, `floormod`),
`div` truncates toward zero (C), bit operations act on two's complement (`<<` does not wrap; a shift
amount is taken modulo the bit width),
comparisons and `and`/`or`/`not` give 0 or 1, casts keep the
value. An unbound variable raises KeyError(var); anything else that is not integer arithmetic
(a load, a call, a float) raises EvalError naming the node.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from ..ir import SHIFT_OPS, Binary, Cast, IntImm, Not, PrimExpr, Select, Var
from ..ir.expr import shift_amount


class EvalError(ValueError):
    """An expression that is not integer arithmetic over bound variables; `node` is the culprit."""

    def __init__(self, node):
        super().__init__(f"cannot evaluate {type(node).__name__}")
        self.node = node


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


_PY_OPS: dict[str, Callable] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b, "div": _trunc_div, "min": min, "max": max,
    "eq": lambda a, b: int(a == b), "ne": lambda a, b: int(a != b), "lt": lambda a, b: int(a < b),
    "le": lambda a, b: int(a <= b), "gt": lambda a, b: int(a > b), "ge": lambda a, b: int(a >= b),
    "and": lambda a, b: int(bool(a) and bool(b)), "or": lambda a, b: int(bool(a) or bool(b)),
    "bitwise_and": lambda a, b: a & b, "bitwise_or": lambda a, b: a | b, "bitwise_xor": lambda a, b: a ^ b,
}


def eval_int(expr: PrimExpr, env: Mapping[Var, int]) -> int:
    """The value of `expr` with its variables bound by `env` (see the module docstring)."""
    if isinstance(expr, IntImm):
        return int(expr.value)
    if isinstance(expr, Var):
        return int(env[expr])
    if isinstance(expr, Cast):
        return eval_int(expr.value, env)
    if isinstance(expr, Not):
        return int(not eval_int(expr.a, env))
    if isinstance(expr, Select):
        return eval_int(expr.true_value if eval_int(expr.condition, env) else expr.false_value, env)
    if isinstance(expr, Binary) and expr.op in _PY_OPS:
        return _PY_OPS[expr.op](eval_int(expr.a, env), eval_int(expr.b, env))
    if isinstance(expr, Binary) and expr.op in SHIFT_OPS:
        a, b = eval_int(expr.a, env), shift_amount(eval_int(expr.b, env), expr.dtype)
        return a << b if expr.op == "shift_left" else a >> b
    raise EvalError(expr)


def eval_array(expr: PrimExpr, env: Mapping[Var, object]):
    """`eval_int` over numpy arrays: `env` maps variables to arrays (or ints) of their values."""
    import numpy as np

    if isinstance(expr, IntImm):
        return expr.value
    if isinstance(expr, Var):
        return env[expr]
    if isinstance(expr, Cast):
        return eval_array(expr.value, env)
    if isinstance(expr, Not):
        return np.logical_not(eval_array(expr.a, env))
    if isinstance(expr, Select):
        return np.where(eval_array(expr.condition, env), eval_array(expr.true_value, env),
                        eval_array(expr.false_value, env))
    ops = _np_ops()
    if isinstance(expr, Binary) and expr.op in ops:
        return ops[expr.op](eval_array(expr.a, env), eval_array(expr.b, env))
    if isinstance(expr, Binary) and expr.op in SHIFT_OPS:
        a, b = eval_array(expr.a, env), np.bitwise_and(eval_array(expr.b, env), expr.dtype.bits - 1)
        return np.left_shift(a, b) if expr.op == "shift_left" else np.right_shift(a, b)
    raise EvalError(expr)


_NP_OPS: dict[str, Callable] = {}


def _np_ops() -> dict[str, Callable]:
    if not _NP_OPS:
        import numpy as np

        _NP_OPS.update(add=np.add, sub=np.subtract, mul=np.multiply, floordiv=np.floor_divide, floormod=np.mod,
                       min=np.minimum, max=np.maximum, eq=np.equal, ne=np.not_equal, lt=np.less,
                       le=np.less_equal, gt=np.greater, ge=np.greater_equal, **{"and": np.logical_and,
                                                                                  "or": np.logical_or},
                       bitwise_and=np.bitwise_and, bitwise_or=np.bitwise_or, bitwise_xor=np.bitwise_xor)
    return _NP_OPS
