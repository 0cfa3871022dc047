"""Timing that two threaded libraries in one process cannot skew: `interleaved`.

Its one home is tdsl/tuner/timing.py (the tuner re-times its best candidates with it). The file
is loaded by path, not as `tdsl.tuner.timing`, so that a numpy-only subprocess of a benchmark
can time numpy without importing tdsl."""
from __future__ import annotations

import importlib.util
import os

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tdsl", "tuner", "timing.py")
_spec = importlib.util.spec_from_file_location("_tdsl_timing", _PATH)
assert _spec is not None and _spec.loader is not None
_timing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_timing)
interleaved = _timing.interleaved

__all__ = ["interleaved"]
