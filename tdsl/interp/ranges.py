"""Value ranges of the interpreter's integer arithmetic (`Rng`: (lo, hi), None when unknown):
what decides that an index needs no wrap-around or bounds check in the generated Python."""
from __future__ import annotations

from ..dtypes import DataType

Rng = tuple[int, int] | None


def _dtype_range(dt: DataType) -> tuple[int, int]:
    if dt.is_bool:
        return 0, 1
    if dt.is_uint:
        return 0, (1 << dt.bits) - 1
    return -(1 << (dt.bits - 1)), (1 << (dt.bits - 1)) - 1


def _fits(rng: Rng, dt: DataType) -> bool:
    if rng is None:
        return False
    lo, hi = _dtype_range(dt)
    return lo <= rng[0] and rng[1] <= hi


def _corners(f, a: Rng, b: Rng) -> Rng:
    if a is None or b is None:
        return None
    vals = [f(x, y) for x in a for y in b]
    return min(vals), max(vals)


def _int_binary_range(op: str, a: Rng, b: Rng) -> Rng:
    if a is None or b is None:
        return None
    if op == "add":
        return a[0] + b[0], a[1] + b[1]
    if op == "sub":
        return a[0] - b[1], a[1] - b[0]
    if op == "mul":
        return _corners(lambda x, y: x * y, a, b)
    if op == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    if op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    if op in ("floordiv", "floormod", "div") and (b[0] > 0 or b[1] < 0):
        if op == "floordiv":
            return _corners(lambda x, y: x // y, a, b)
        if op == "div":
            return _corners(lambda x, y: int(x / y), a, b)
        if b[0] > 0:
            if 0 <= a[0] and a[1] < b[0]:
                return a
            return 0, b[1] - 1
    return None


def _union(a: Rng, b: Rng) -> Rng:
    if a is None or b is None:
        return None
    return min(a[0], b[0]), max(a[1], b[1])
