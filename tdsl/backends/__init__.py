"""build(): lower a function, generate code for the target, compile it, and wrap it in a Kernel.

Importing this package is light: llvmlite is imported only when a CPU kernel is built, and
cuda-python only when a CUDA one is.
"""
from __future__ import annotations

from ..errors import TargetError
from ..ir import as_prim_func
from ..target import KNOWN_TARGETS, Target, check_host_target, cpu_target, parse_target
from ..tracebacks import public_entry


def _lower(func, target, bounds_check: bool = False):
    from ..lower import lower

    if parse_target(target).kind != "cpu":
        return lower(func, target=target)
    from ..lower._util import set_attr
    from ..lower.index_checks import BOUNDS_CHECK_ATTR
    from .llvm.bounds import check_static_bounds

    def per_axis_static_check(name: str, stage) -> None:
        if name == "compact_buffers":   # buffers still have their axes (and compacted shapes)
            check_static_bounds(stage, scalar_only=True)

    if bounds_check:
        func = set_attr(func, BOUNDS_CHECK_ATTR, True)
    return lower(func, target=target, trace=per_axis_static_check)


@public_entry
def build(func_or_schedule, target="cpu", **options):
    """Compile a PrimFunc (or a Schedule's current function) into a callable Kernel.

    target: "cpu" (LLVM for the host CPU, every feature it has), "cuda" (NVRTC; needs
    ``pip install "tdsl[cuda]"``), or a TVM target string ("llvm", "cuda -arch=sm_90";
    "llvm -mcpu=x86-64-v3" or "cpu -mattr=-avx512f" build for that CPU: its vector width,
    micro-kernels and instructions; see `tdsl.target`). The kernel runs here, so a CPU target
    needing features this CPU lacks is refused. An unknown target or option is a tdsl.TargetError.

    Options for "cpu":
      bounds_check=False   True adds run-time bounds checks: a bad index raises
                           tdsl.BoundsError naming the buffer instead of crashing.

    Options for "cuda":
      arch=None            "sm_80", "sm_90", ...: compile for that GPU (no GPU needed; the
                           kernel has `source` and `cubin`); None: the GPU present
                           (tdsl.TargetError without one).
      ptx=False            True also keeps the PTX as `kernel.ptx`.
      use_cache=True       False compiles again instead of reading the disk cache.
      emulate=False        True runs the exact CUDA C++ on the CPU (host C++ compiler, no GPU):
                           several thread orders compared, every access bounds-checked.
      thread_orders=3      with emulate=True: 1-3 thread orders per block (ascending, descending,
                           a seeded shuffle) whose results must agree.

    A CPU kernel's `notes` say what the build could not do as the schedule asked (a
    `vectorize` left scalar, and why); building warns once with tdsl.PerformanceWarning then.
    Errors show the user's frame only (tdsl.config.full_traceback = True shows all).
    (`tdsl.build(..., database=)`, the public facade, first applies the best tuning record:
    tdsl.tuner.apply.)
    """
    func = as_prim_func(func_or_schedule, "tdsl.build")
    tgt = parse_target(target)
    if tgt.kind == "cuda":
        return _build_cuda(func_or_schedule, func, _cuda_options(tgt, options))
    tgt = cpu_target(tgt)
    check_host_target(tgt)
    return _build_cpu(func, options, tgt)


def _cuda_options(tgt: Target, options: dict) -> dict:
    """The build options with the target string's -arch as `arch` (they must agree)."""
    arch = tgt.get("arch")
    if arch is None:
        return options
    if options.get("arch") not in (None, arch):
        raise TargetError(f"target {str(tgt)!r} says -arch={arch} but the build options say arch={options['arch']!r}; "
                          "give the architecture once")
    return {**options, "arch": arch}


def _build_cpu(func, options: dict, target: Target = Target("cpu")):
    from ..deep import DEEP_LIMIT, run_deep
    from ..target import check_cpu_options
    from .llvm.compile import compile_func
    from .llvm.kernel import Kernel

    opts = check_cpu_options(options)

    def build_it():
        compiled = compile_func(func, lambda f: _lower(f, target, opts["bounds_check"]),
                                bounds_check=opts["bounds_check"], target=target)
        return Kernel(func, compiled, opts, target), compiled

    try:
        kernel, compiled = run_deep(build_it)
    except RecursionError:
        raise TargetError(f"function {func.name!r} nests too deeply to build (more than about {DEEP_LIMIT} "
                          "levels of expressions or statements); split it into smaller steps") from None
    if compiled.notes:
        warn_notes(func.name, compiled.notes)
    return kernel


def warn_notes(name: str, notes) -> None:
    """One tdsl.PerformanceWarning for a kernel's notes, attributed to the user's build call."""
    import sys
    import types
    import warnings

    from ..errors import PerformanceWarning

    level = 2   # stacklevel 2 is the frame that called this one
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).partition(".")[0] == "tdsl":
        level, frame = level + 1, frame.f_back
    text = "; ".join(notes)
    warnings.warn(f"kernel {name!r} is slower than its schedule asks: {text} (kernel.notes lists this)",
                  PerformanceWarning, stacklevel=level)


def _build_cuda(func_or_schedule, func, options: dict):
    try:
        from . import cuda
    except ImportError as exc:
        raise TargetError(f"target 'cuda' is not available in this installation ({exc}); "
                          "build for target='cpu' instead") from None
    build_cuda = getattr(cuda, "build", None)
    if build_cuda is None:
        raise TargetError("target 'cuda' is not available in this installation (tdsl.backends.cuda has no "
                          "build()); build for target='cpu' instead")
    kernel = build_cuda(func, **options)
    notes = getattr(kernel, "notes", None)
    if notes:
        warn_notes(func.name, notes)
    return kernel


__all__ = ["KNOWN_TARGETS", "Target", "TargetError", "build"]
