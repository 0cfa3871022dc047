"""Built-in tensor intrinsics, registered on import (tdsl.TensorIntrin.get imports this lazily).

* `tdsl.intrinsics.x86`: fp32 register-tile micro-kernels (AVX-512, AVX2) and the int8
  u8 x s8 -> s32 dot product (AVX512-VNNI, AVX-VNNI); `x86.fp32_microkernel(kc)` and
  `x86.int8_dot()` pick the variant this CPU runs.
* `tdsl.intrinsics.cuda`: WMMA m16n16k16 fp16 -> fp32 (fill, load_a, load_b, mma, store).
* `tdsl.intrinsics.blas`: library GEMM (`blas.sgemm`, `blas.dgemm`) through the BLAS numpy loads;
  `tdsl.intrinsics.library` makes the generic names concrete per block.
"""
from __future__ import annotations

from . import blas, candidates, cuda, library, x86

x86._register_builtins()
cuda._register_builtins()
blas._register_builtins()

__all__ = ["blas", "candidates", "cuda", "library", "x86"]
