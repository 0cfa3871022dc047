"""Registers the built-in intrinsics (x86, x86 low precision, CUDA, BLAS, cuBLAS) on import; `TensorIntrin.get` imports it once."""
from __future__ import annotations

from . import blas, cublas, cuda, cuda_mma, cuda_mma_warp, x86, x86_amx, x86_lowp

x86._register_builtins()
x86_lowp.register_families()
x86_amx.register_families()
cuda._register_builtins()
cuda_mma._register_builtins()
cuda_mma_warp._register_builtins()   # after cuda_mma: TVM's warp forms of its names
blas._register_builtins()
cublas._register_builtins()
