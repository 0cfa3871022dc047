"""Integer intervals (`Bound`: (lo, hi), None for unbounded): the bounds of a dtype and of
+, *, min/max, floor division, bitwise operations and shifts over intervals, and deciding a
comparison from a bound. The interval arithmetic of the analyzer (analyzer.py)."""
from __future__ import annotations

import math

from ..dtypes import DataType

Bound = tuple[int | None, int | None]
_UNBOUNDED: Bound = (None, None)
_CASE_DEPTH = 3  # at most 2**3 case combinations per bound: min/max splits multiply
_FLIP = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


def is_index(dt: DataType) -> bool:
    """Signed integer scalars get the canonical (linear) treatment."""
    return dt.code == "int" and dt.lanes == 1


def wrap(value: int, dt: DataType) -> int:
    """`value` as the machine holds it in `dt` (two's complement wrap-around)."""
    if dt.code == "bool":
        return int(value != 0)
    span = 1 << dt.bits
    if dt.code == "uint":
        return value % span
    half = span >> 1
    return (value + half) % span - half


def dtype_bound(dt: DataType) -> Bound:
    """Bounds a value of `dt` can take; int32/int64 count as unbounded (no-overflow assumption)."""
    if dt.code == "bool":
        return 0, 1
    if dt.code == "uint":
        return 0, ((1 << dt.bits) - 1 if dt.bits < 32 else None)
    if dt.code == "int" and dt.bits < 32:
        return -(1 << (dt.bits - 1)), (1 << (dt.bits - 1)) - 1
    return _UNBOUNDED


# interval helpers (None = unbounded) ------------------------------------------------

def _add(a: Bound, b: Bound) -> Bound:
    lo = None if a[0] is None or b[0] is None else a[0] + b[0]
    hi = None if a[1] is None or b[1] is None else a[1] + b[1]
    return lo, hi


def _scale(a: Bound, c: int) -> Bound:
    lo = None if a[0] is None else a[0] * c
    hi = None if a[1] is None else a[1] * c
    return (lo, hi) if c >= 0 else (hi, lo)


def _mul(a: Bound, b: Bound) -> Bound:
    def ends(x: Bound) -> tuple:
        return (-math.inf if x[0] is None else x[0]), (math.inf if x[1] is None else x[1])

    # 0 * inf is 0 here: an unbounded factor times zero is zero
    prods = [0 if x == 0 or y == 0 else x * y for x in ends(a) for y in ends(b)]
    lo, hi = min(prods), max(prods)
    return (None if lo == -math.inf else lo), (None if hi == math.inf else hi)


def _union(a: Bound, b: Bound) -> Bound:
    lo = None if a[0] is None or b[0] is None else min(a[0], b[0])
    hi = None if a[1] is None or b[1] is None else max(a[1], b[1])
    return lo, hi


def _minmax(op: str, a: Bound, b: Bound) -> Bound:
    """Bounds of min(a, b) / max(a, b)."""
    if op == "min":
        lo = None if a[0] is None or b[0] is None else min(a[0], b[0])
        hi = _tighter(min, a[1], b[1])
    else:
        lo = _tighter(max, a[0], b[0])
        hi = None if a[1] is None or b[1] is None else max(a[1], b[1])
    return lo, hi


def _tighter(pick, a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return pick(a, b)


def _floordiv_bound(a: Bound, c: int) -> Bound:
    """Bounds of a // c for a constant c > 0."""
    return (None if a[0] is None else a[0] // c), (None if a[1] is None else a[1] // c)


# terms and linear forms ------------------------------------------------------------


def _decide(op: str, lo: int | None, hi: int | None) -> bool | None:
    """Truth of `d op 0` for d in [lo, hi], or None when the bounds do not decide it."""
    lt0 = hi is not None and hi < 0
    le0 = hi is not None and hi <= 0
    gt0 = lo is not None and lo > 0
    ge0 = lo is not None and lo >= 0
    if op == "lt":
        return True if lt0 else False if ge0 else None
    if op == "le":
        return True if le0 else False if gt0 else None
    if op == "gt":
        return True if gt0 else False if le0 else None
    if op == "ge":
        return True if ge0 else False if lt0 else None
    if op == "eq":
        return True if (le0 and ge0) else False if (lt0 or gt0) else None
    return False if (le0 and ge0) else True if (lt0 or gt0) else None


def _bit_bound(op: str, a: Bound, b: Bound, dt: DataType) -> Bound:
    """Bounds of a & b (in [0, b] when b >= 0, or [0, a]) and of shifts by an amount in
    [0, bits); anything else: the dtype's bounds. A small type's shift left may wrap."""
    whole = dtype_bound(dt)
    (alo, ahi), (blo, bhi) = a, b
    if op == "bitwise_and":
        his = [hi for lo, hi in (a, b) if lo is not None and lo >= 0 and hi is not None]
        return (0, min(his)) if his else whole
    if blo is None or bhi is None or blo < 0 or bhi >= dt.bits or alo is None or ahi is None:
        return whole
    if op == "shift_right":
        return min(alo >> blo, alo >> bhi), max(ahi >> blo, ahi >> bhi)
    lo, hi = min(alo << blo, alo << bhi), max(ahi << blo, ahi << bhi)
    if (whole[0] is not None and lo < whole[0]) or (whole[1] is not None and hi > whole[1]):
        return whole
    return lo, hi
