"""build(): dispatch a function to its target's backend, which lowers it, generates code,
compiles it and wraps it in a Kernel: `llvm.build_llvm` for "cpu", `cuda.build_cuda` for "cuda".

Importing this package is light: llvmlite is imported only when a CPU kernel is built, and
cuda-python only when a CUDA one is.
"""
from __future__ import annotations

from ..errors import TargetError
from ..ir import as_prim_func
from ..target import KNOWN_TARGETS, Target, parse_target
from ..tracebacks import public_entry
from .notes import warn_notes


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
    from .llvm import build_llvm

    return build_llvm(func, tgt, **options)


def _cuda_options(tgt: Target, options: dict) -> dict:
    """The build options with the target string's -arch as `arch` (they must agree)."""
    arch = tgt.get("arch")
    if arch is None:
        return options
    if options.get("arch") not in (None, arch):
        raise TargetError(f"target {str(tgt)!r} says -arch={arch} but the build options say arch={options['arch']!r}; "
                          "give the architecture once")
    return {**options, "arch": arch}


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
