"""tdsl.config: switches a user may flip while debugging.

    tdsl.config.full_traceback = True     # or TDSL_FULL_TRACEBACK=1 in the environment

`full_traceback`: errors raised by tdsl's public entry points (Schedule methods, build, lower,
parse, kernel calls) normally show the user's frames and the message only, like Numba and
Triton; True shows every tdsl frame and the exception chain as raised (for a bug report).
"""
from __future__ import annotations

import os


class Config:
    """Process-wide settings; each reads its environment variable until set explicitly."""

    def __init__(self):
        self._full_traceback: bool | None = None

    @property
    def full_traceback(self) -> bool:
        if self._full_traceback is not None:
            return self._full_traceback
        return os.environ.get("TDSL_FULL_TRACEBACK", "").strip().lower() not in ("", "0", "false", "no", "off")

    @full_traceback.setter
    def full_traceback(self, value: bool | None) -> None:
        """True/False, or None to follow TDSL_FULL_TRACEBACK again."""
        self._full_traceback = None if value is None else bool(value)

    def __repr__(self) -> str:
        return f"tdsl.config(full_traceback={self.full_traceback})"


config = Config()
