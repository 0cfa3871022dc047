"""The CUDA emulator: `tdsl.build(f, target="cuda", emulate=True)` runs the generated CUDA C++ on the CPU.

`kernel.source` is compiled with the host C++ compiler against `include/cuda_emu.h`, tdsl's
own model of the CUDA execution model (see that header for what it models and what it does
not), and loaded with ctypes. `translate` makes the translation unit, `compiler` compiles and
caches it, `kernel.EmulatedKernel` runs the launches under several thread orders and reports
races and out-of-bounds accesses as `TargetError`.
"""
from __future__ import annotations

from .compiler import INCLUDE_DIR, find_compiler

__all__ = ["INCLUDE_DIR", "build_emulated", "find_compiler"]


def build_emulated(func, plan, source: str, vector_params, options: dict, cubin=None, arch=None,
                   checked_plan=None):
    """An `EmulatedKernel` for the lowered `plan` whose CUDA C++ is `source`. `checked_plan`
    (`lower_for_cuda(func, checked=True)`) adds the per-axis checked variant, compiled and run
    beside it when it checks anything (`checked_variant`)."""
    from .compiler import load
    from .kernel import EmulatedKernel
    from .translate import translate

    kernel = EmulatedKernel.compile(func, plan, source, vector_params, options, cubin=cubin, arch=arch)
    use_cache = options.get("use_cache", True)
    checked_source = checked_variant(checked_plan) if checked_plan is not None else None
    if checked_source is not None:
        checked_unit, checked_kernels = translate(checked_source)
        kernel.add_checked_variant(checked_plan, checked_source, checked_kernels, load(checked_unit, use_cache))
    return kernel


def checked_variant(checked_plan) -> str | None:
    """The CUDA C++ of the checked plan, its kernels renamed `<name>_checked`; None when it
    checks nothing (every access proven in bounds at build time: the kernel itself is enough)."""
    from ....ir import Call, collect
    from ....lower.index_checks import INDEX_CHECK
    from ..codegen import generate
    from .kernel import CHECKED_SUFFIX

    if not any(c.op == INDEX_CHECK for spec in checked_plan.kernels for c in collect(spec.body, Call)):
        return None
    for spec in checked_plan.kernels:
        if not spec.name.endswith(CHECKED_SUFFIX):
            spec.name += CHECKED_SUFFIX
    return generate(checked_plan)[0]
