"""tdsl: block-based tensor programs in Python, scheduled step by step, JIT-compiled for CPU and CUDA.

Only the public API lives here; heavy modules (llvmlite, cuda-python, rich) load on first use.
"""
from __future__ import annotations

from .backends import forksafe as _forksafe  # noqa: F401 - a child forked mid-import can import tdsl
from .config import config
from .errors import ArgumentError, BoundsError, PerformanceWarning, ScheduleError, ScriptError, TargetError
from .ir import PrimFunc, assert_structural_equal, structural_diff, structural_equal, structural_hash
from .script import T, parse, prim_func
from .tracebacks import public_entry
from .version import __version__ as __version__

_LAZY = {
    "Schedule": ("tdsl.schedule", "Schedule"),
    "TensorIntrin": ("tdsl.intrinsics.registry", "TensorIntrin"),
    "interpret": ("tdsl.interpreter", "interpret"),
    "lower": ("tdsl.lower", "lower"),
    "Kernel": ("tdsl.backends.llvm.kernel", "Kernel"),
    "device_array": ("tdsl.backends.cuda.runtime", "device_array"),
    "to_device": ("tdsl.backends.cuda.runtime", "to_device"),
    "auto_schedule": ("tdsl.auto", "auto_schedule"),
    "space": ("tdsl.auto", "space"),
    "tune": ("tdsl.tuner.api", "tune"),
    "IRModule": ("tdsl.ir.module", "IRModule"),
    "load": ("tdsl.backends.llvm.load", "load"),
}


@public_entry
def build(func_or_schedule, target="cpu", *, database=None, **options):
    """Compile a PrimFunc (or a Schedule's current function) into a callable Kernel
    (tdsl.backends.build: `target` "cpu" or "cuda", CPU option `bounds_check=True`).

    `database="tuning.db"` (a path or a tdsl.tuner.Database) builds the function with the
    schedule of its best tuning record on this machine (tdsl.tune), or auto-scheduled with a
    NoTuningRecord warning when there is none; a function with symbolic dimensions tuned at
    several sizes (tune(sizes=)) gives a kernel that runs each call with the nearest size's
    schedule (tdsl.tuner.dispatch)."""
    import warnings

    from .backends import build as _build

    if database is None:
        return _build(func_or_schedule, target, **options)
    from .tuner.apply import lookup_target, schedule_from_database

    func = getattr(func_or_schedule, "func", func_or_schedule)
    where = lookup_target(target, options)      # for CUDA: the architecture built for selects the records
    if isinstance(func, PrimFunc) and _symbolic(func):
        from .tuner.dispatch import dispatch_from_database

        dispatch = dispatch_from_database(func, where, database, options)
        if dispatch is not None:
            return dispatch
    scheduled = schedule_from_database(func, where, database)
    with warnings.catch_warnings():
        # the tuner measured the schedule as it builds; a vectorize left scalar stays in kernel.notes
        warnings.simplefilter("ignore", PerformanceWarning)
        return _build(scheduled, target, **options)


def _symbolic(func) -> bool:
    from .ir.specialize import shape_vars

    return bool(shape_vars(func))


def _build_doc() -> str:
    from .backends import build as _build

    return (_build.__doc__ or "") + """
    Option for every target:
      database=None        "tuning.db" (a path or a tdsl.tuner.Database): build with the
                           schedule of the function's best tuning record on this machine
                           (tdsl.tune); with none, auto-scheduled, and a NoTuningRecord warning.
"""


build.__doc__ = _build_doc()


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tdsl' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))  # a lazy name, once loaded, is in both


__all__ = ["T", "prim_func", "parse", "PrimFunc", "Schedule", "TensorIntrin", "interpret", "lower", "build",
           "Kernel", "device_array", "to_device", "structural_equal", "structural_hash", "structural_diff",
           "assert_structural_equal", "ScriptError", "ScheduleError", "TargetError", "ArgumentError",
           "BoundsError", "PerformanceWarning", "config", "auto_schedule", "space", "tune", "IRModule", "load"]
