"""Sampled values: plain ints / floats / strings that remember the sampling step that made them.

`sch.sample_perfect_tile` and `sch.sample_categorical` return them; a later step that takes one as
is (`sch.split(l, factors=[None, v])`) is recorded with the value, so the trace follows it back to
its step and a changed decision flows through. Any arithmetic on one gives a plain number.
"""
from __future__ import annotations

from collections.abc import Callable


class _ValueRV:
    """Mixin of the sampled values: the serial of the step that sampled them."""

    serial: int
    _plain: Callable[[], int | float | str]  # each value type's own

    def __getnewargs__(self):
        return (self._plain(), self.serial)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


class IntRV(_ValueRV, int):
    """A sampled integer: behaves as an int; the trace follows it back to its sampling step."""

    def __new__(cls, value: int, serial: int):
        obj = int.__new__(cls, value)
        obj.serial = serial
        return obj

    def _plain(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return repr(int(self))


class FloatRV(_ValueRV, float):
    """A sampled float (from `sample_categorical`)."""

    def __new__(cls, value: float, serial: int):
        obj = float.__new__(cls, value)
        obj.serial = serial
        return obj

    def _plain(self) -> float:
        return float(self)

    def __repr__(self) -> str:
        return repr(float(self))


class StrRV(_ValueRV, str):
    """A sampled string (from `sample_categorical`, e.g. an intrinsic name)."""

    def __new__(cls, value: str, serial: int):
        obj = str.__new__(cls, value)
        obj.serial = serial
        return obj

    def _plain(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return repr(str.__str__(self))


ValueRV = (IntRV, FloatRV, StrRV)


def plain(x):
    """A sampled value as a plain int / float / str (anything else unchanged)."""
    return x._plain() if isinstance(x, _ValueRV) else x


def value_rv(value, serial: int):
    """Wrap a sampled int / float / str."""
    if isinstance(value, bool):
        raise TypeError("sampled values are ints, floats or strings, not bools (sample 0 / 1 instead)")
    if isinstance(value, int):
        return IntRV(value, serial)
    if isinstance(value, float):
        return FloatRV(value, serial)
    if isinstance(value, str):
        return StrRV(value, serial)
    raise TypeError(f"sampled values are ints, floats or strings, not {type(value).__name__}")

