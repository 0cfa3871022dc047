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


def build_emulated(func, plan, source: str, vector_params, options: dict, cubin=None, arch=None):
    """An `EmulatedKernel` for the lowered `plan` whose CUDA C++ is `source`."""
    from .compiler import load
    from .kernel import EmulatedKernel
    from .translate import translate

    find_compiler()
    unit, kernels = translate(source)
    lib = load(unit, use_cache=options.get("use_cache", True))
    return EmulatedKernel(func, plan, source, vector_params, unit, kernels, lib, options, cubin=cubin, arch=arch)
