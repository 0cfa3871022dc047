"""A built kernel's notes (what the build could not do as the schedule asked) as one warning.

A note that starts with `INFO` only says what ran (e.g. a fused kernel that replaced blocks): it
stays in `kernel.notes` but is no reason to warn."""
from __future__ import annotations

import sys
import types
import warnings

from ..errors import PerformanceWarning
from ..ir.attrs import INFO_NOTE as INFO


def warn_notes(name: str, notes) -> None:
    """One tdsl.PerformanceWarning for a kernel's notes (those not marked `INFO`), attributed to
    the user's build call."""
    notes = [n for n in notes if not str(n).startswith(INFO)]
    if not notes:
        return
    level = 2   # stacklevel 2 is the frame that called this one
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).partition(".")[0] == "tdsl":
        level, frame = level + 1, frame.f_back
    text = "; ".join(notes)
    warnings.warn(f"kernel {name!r} is slower than its schedule asks: {text} (kernel.notes lists this)",
                  PerformanceWarning, stacklevel=level)
