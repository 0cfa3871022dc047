"""tdsl: block-based tensor programs in Python, scheduled step by step, JIT-compiled for CPU and CUDA.

Only the public API lives here; heavy modules (llvmlite, cuda-python, rich) load on first use.
"""
from __future__ import annotations

from .errors import ArgumentError, BoundsError, ScheduleError, ScriptError, TargetError
from .ir import PrimFunc, assert_structural_equal, structural_diff, structural_equal, structural_hash
from .script import T, parse, prim_func
from .version import __version__ as __version__

_LAZY = {
    "Schedule": ("tdsl.schedule", "Schedule"),
    "TensorIntrin": ("tdsl.intrinsics.registry", "TensorIntrin"),
    "interpret": ("tdsl.interpreter", "interpret"),
    "lower": ("tdsl.lower", "lower"),
    "build": ("tdsl.backends", "build"),
    "Kernel": ("tdsl.backends.llvm.kernel", "Kernel"),
    "device_array": ("tdsl.backends.cuda.runtime", "device_array"),
    "to_device": ("tdsl.backends.cuda.runtime", "to_device"),
    "auto_schedule": ("tdsl.auto", "auto_schedule"),
    "space": ("tdsl.auto", "space"),
    "tune": ("tdsl.tuner.api", "tune"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tdsl' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))


__all__ = ["T", "prim_func", "parse", "PrimFunc", "Schedule", "TensorIntrin", "interpret", "lower", "build",
           "Kernel", "device_array", "to_device", "structural_equal", "structural_hash", "structural_diff",
           "assert_structural_equal", "ScriptError", "ScheduleError", "TargetError", "ArgumentError",
           "BoundsError", "auto_schedule", "space", "tune"]
