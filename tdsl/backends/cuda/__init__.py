"""The CUDA backend: GPU lowering, CUDA C++ codegen, NVRTC (CUBIN), driver runtime, DLPack.

`build_cuda(func, arch=None, ptx=False)` is what `tdsl.build(func, target="cuda", ...)` calls.
Nothing here imports cuda-python at import time: NVRTC and the driver load on first use.
"""
from __future__ import annotations

from ...errors import TargetError
from ...ir import as_prim_func

__all__ = ["build", "build_cuda", "cuda_source", "lower_cuda"]

_OPTIONS = ("arch", "emulate", "ptx", "thread_orders", "use_cache")


def lower_cuda(func_or_schedule):
    """The GPU lowering of a function: a HostPlan (kernels with barriers, launch dimensions)."""
    from .lower_gpu import lower_for_cuda

    return lower_for_cuda(as_prim_func(func_or_schedule, "build_cuda"))


def cuda_source(func_or_schedule) -> str:
    """The CUDA C++ `build_cuda` would compile (no NVRTC, no GPU needed)."""
    from .codegen import generate

    return generate(lower_cuda(func_or_schedule))[0]


def build_cuda(func_or_schedule, *, arch: str | None = None, ptx: bool = False, use_cache: bool = True,
               emulate: bool = False, thread_orders: int = 3, **options):
    """Compile for CUDA: GPU lowering -> CUDA C++ -> NVRTC CUBIN -> CudaKernel.

    arch: "sm_80", "sm_90", ... (compile only; no GPU needed); None means the GPU present
    (TargetError without one). ptx=True also keeps the PTX as `kernel.ptx`.
    emulate=True: run the same CUDA C++ on the CPU (`tdsl.backends.cuda.emulator`; needs a host
    C++ compiler, no GPU, no cuda-python); each block runs under `thread_orders` (1-3) thread
    orders whose results are compared (a race raises TargetError); where the build cannot prove
    an access inside its buffer on every axis, a variant of the kernel with per-axis index checks
    runs once before it (`kernel.checked_source`). With `arch` as well, the
    source is also compiled with NVRTC for that architecture (`kernel.cubin`).
    """
    if options:
        raise TargetError(f"unknown option(s) for target 'cuda': {', '.join(sorted(options))}; "
                          f"known: {', '.join(_OPTIONS)}")
    from .codegen import generate
    from .kernel import CudaKernel
    from .nvrtc import check_arch, compile_cuda

    func = as_prim_func(func_or_schedule, "build_cuda")
    if emulate not in (True, False) or thread_orders not in (1, 2, 3):
        raise TargetError(f"emulate must be True or False and thread_orders 1, 2 or 3 (got emulate={emulate!r}, "
                          f"thread_orders={thread_orders!r})")
    plan = lower_cuda(func)
    source, vector_params = generate(plan)
    if emulate:
        from .emulator import build_emulated

        cubin = None
        _check_shared(plan, arch)
        if arch is not None:
            check_arch(arch)
            cubin = compile_cuda(source, arch, want_ptx=ptx, name=f"{func.name}.cu", use_cache=use_cache).cubin
        from .lower_gpu import lower_for_cuda

        return build_emulated(func, plan, source, vector_params,
                              {"emulate": True, "thread_orders": thread_orders, "use_cache": use_cache, "arch": arch},
                              cubin=cubin, arch=arch, checked_plan=lower_for_cuda(func, checked=True))
    if arch is None:
        from .runtime import device_info

        arch = device_info().arch
        from .sm90 import needs_sm90a

        if arch == "sm_90" and needs_sm90a(source):   # a Hopper GPU: wgmma needs the sm_90a target
            arch = "sm_90a"
    check_arch(arch)
    _check_shared(plan, arch)
    compiled = compile_cuda(source, arch, want_ptx=ptx, name=f"{func.name}.cu", use_cache=use_cache)
    return CudaKernel(func, plan, source, compiled.cubin, compiled.ptx, arch, vector_params,
                      {"arch": arch, "ptx": ptx})


def _check_shared(plan, arch: str | None) -> None:
    """Each kernel's shared memory within what `arch` allows a block (any GPU's most without one), and
    each host step's kernel made for `arch`."""
    from .shared_memory import check_limit

    for spec in plan.kernels:
        check_limit(spec.name, max(spec.shared_bytes, spec.dynamic_shared_bytes), arch, spec.shared)
    for _, step in plan.steps:   # a fused kernel made for one architecture (the Hopper attention)
        if hasattr(step, "check_arch"):
            step.check_arch(arch)


build = build_cuda
