"""The LLVM backend: CPU lowering, LLVM IR codegen, llvmlite JIT (machine code), the Kernel.

`build_llvm(func, target="cpu", bounds_check=False)` is what `tdsl.build(func, target="cpu", ...)`
calls, the twin of `tdsl.backends.cuda.build_cuda`. Nothing here imports llvmlite at import
time: LLVM loads when a kernel is compiled.
"""
from __future__ import annotations

from ...errors import TargetError
from ...ir import as_prim_func
from ...target import Target, check_host_target, cpu_target, parse_target

__all__ = ["build", "build_llvm", "lower_llvm"]


def lower_llvm(func_or_schedule, target: str | Target = "cpu", bounds_check: bool = False):
    """The lowered function `build_llvm` compiles (with its static bounds check)."""
    from .lower_cpu import lower_for_llvm

    return lower_for_llvm(as_prim_func(func_or_schedule, "build_llvm"), target, bounds_check)


def build_llvm(func_or_schedule, target: str | Target = "cpu", **options):
    """Compile for the CPU of `target`: CPU lowering -> LLVM IR -> machine code -> Kernel.

    Options: bounds_check=False (True adds run-time bounds checks: a bad index raises
    tdsl.BoundsError naming the buffer). A CPU target needing features this CPU lacks is refused.
    The kernel's notes (a `vectorize` left scalar, and why) warn once with tdsl.PerformanceWarning.
    """
    from ...deep import DEEP_LIMIT, run_deep
    from ...target import check_cpu_options
    from ..notes import warn_notes
    from .compile import compile_func
    from .kernel import Kernel
    from .lower_cpu import lower_for_llvm

    func = as_prim_func(func_or_schedule, "build_llvm")
    tgt = cpu_target(parse_target(target))
    check_host_target(tgt)
    opts = check_cpu_options(options)

    def build_it():
        compiled = compile_func(func, lambda f: lower_for_llvm(f, tgt, opts["bounds_check"]),
                                bounds_check=opts["bounds_check"], target=tgt)
        return Kernel(func, compiled, opts, tgt), compiled

    try:
        kernel, compiled = run_deep(build_it)
    except RecursionError:
        raise TargetError(f"function {func.name!r} nests too deeply to build (more than about {DEEP_LIMIT} "
                          "levels of expressions or statements); split it into smaller steps") from None
    if compiled.notes:
        warn_notes(func.name, compiled.notes)
    return kernel


build = build_llvm
