"""Constant folding as the machine computes it: `fold_binary` and `fold_cast` of immediates
(integers wrap per dtype, float results rounded to their dtype)."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import DataType, bool_
from ..ir.expr import (
    FloatImm,
    IntImm,
    PrimExpr,
    shift_amount,
)
from .bounds import _FLIP, wrap


def _np_scalar(value, dt: DataType):
    return dt.numpy.type(value)


def _value(e: PrimExpr) -> Any:
    """An immediate's value (IntImm or FloatImm: the callers fold immediates only)."""
    return e.value  # type: ignore[attr-defined]


def fold_binary(op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
    """`a op b` for two scalar immediates, as the machine computes it; None when not foldable
    (integer division by zero, NaN in min/max, integer `div`)."""
    dt = a.dtype
    va, vb = _value(a), _value(b)
    if dt.is_float:
        return _fold_float(op, float(va), float(vb), dt)
    x, y = int(va), int(vb)
    if op in _FLIP:
        return IntImm(int(_CMP[op](x, y)), bool_)
    if op == "and":
        return IntImm(int(bool(x) and bool(y)), dt)
    if op == "or":
        return IntImm(int(bool(x) or bool(y)), dt)
    if op in _BIT_OPS:
        r = _BIT_OPS[op](x, y)
    elif op in ("shift_left", "shift_right"):
        y = shift_amount(y, dt)
        r = x << y if op == "shift_left" else x >> y   # Python's >> is arithmetic; a uint x is >= 0
    elif op in ("floordiv", "floormod"):
        if y == 0:
            return None
        r = x // y if op == "floordiv" else x % y
    elif op in _INT_OPS:
        r = _INT_OPS[op](x, y)
    else:
        return None
    return IntImm(wrap(r, dt), dt)


_CMP = {"lt": lambda x, y: x < y, "le": lambda x, y: x <= y, "gt": lambda x, y: x > y,
        "ge": lambda x, y: x >= y, "eq": lambda x, y: x == y, "ne": lambda x, y: x != y}
_BIT_OPS = {"bitwise_and": lambda x, y: x & y, "bitwise_or": lambda x, y: x | y, "bitwise_xor": lambda x, y: x ^ y}
_INT_OPS: dict[str, Callable[[Any, Any], Any]] = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "min": min, "max": max}


def _fold_float(op: str, x: float, y: float, dt: DataType) -> PrimExpr | None:
    if op in _FLIP:
        return IntImm(int(_CMP[op](x, y)), bool_)
    if op in ("min", "max"):
        if math.isnan(x) or math.isnan(y):
            return None
        return FloatImm(min(x, y) if op == "min" else max(x, y), dt)
    ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
    if op not in ops:
        return None
    with np.errstate(all="ignore"):
        r = ops[op](_np_scalar(x, dt), _np_scalar(y, dt))
    return FloatImm(float(r), dt)


def fold_cast(dt: DataType, v: PrimExpr) -> PrimExpr | None:
    """Cast of a scalar immediate; None where the result is undefined (float -> int overflow)."""
    if dt.lanes != 1 or v.dtype.lanes != 1 or dt.is_handle:
        return None
    value = _value(v)
    if dt.is_bool:
        return IntImm(int(value != 0), dt)
    if dt.is_float:
        with np.errstate(all="ignore"):
            return FloatImm(float(_np_scalar(float(value) if isinstance(v, FloatImm) else int(value), dt)), dt)
    if isinstance(v, IntImm):
        return IntImm(wrap(int(value), dt), dt)
    x = float(value)
    if not math.isfinite(x):
        return None
    t = int(x)  # C casts truncate toward zero
    if wrap(t, dt) != t:
        return None
    return IntImm(t, dt)


def _is_one(e: PrimExpr) -> bool:
    return isinstance(e, (IntImm, FloatImm)) and e.value == 1 and not e.dtype.is_bool


def _is_zero(e: PrimExpr) -> bool:
    return isinstance(e, (IntImm, FloatImm)) and e.value == 0 and not e.dtype.is_bool
