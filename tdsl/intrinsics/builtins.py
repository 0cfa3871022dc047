"""Registers the built-in intrinsics (x86, CUDA, BLAS, cuBLAS) on import; `TensorIntrin.get` imports it once."""
from __future__ import annotations

from . import blas, cublas, cuda, cuda_mma, x86

x86._register_builtins()
cuda._register_builtins()
cuda_mma._register_builtins()
blas._register_builtins()
cublas._register_builtins()
