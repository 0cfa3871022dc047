"""A built kernel's notes (what the build could not do as the schedule asked) as one warning."""
from __future__ import annotations

import sys
import types
import warnings

from ..errors import PerformanceWarning


def warn_notes(name: str, notes) -> None:
    """One tdsl.PerformanceWarning for a kernel's notes, attributed to the user's build call."""
    level = 2   # stacklevel 2 is the frame that called this one
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).partition(".")[0] == "tdsl":
        level, frame = level + 1, frame.f_back
    text = "; ".join(notes)
    warnings.warn(f"kernel {name!r} is slower than its schedule asks: {text} (kernel.notes lists this)",
                  PerformanceWarning, stacklevel=level)
