"""Tensor intrinsics: their registry, the matcher that binds them, and the built-in ones.

* `tdsl.intrinsics.registry`: `TensorIntrin` (register, get, list), exported as `tdsl.TensorIntrin`.
* `tdsl.intrinsics.match`: does a block compute an intrinsic's description (`match`), and the
  implementation bound to the matched regions (`instantiate_impl`); used by the `tensorize`
  primitive and by the lowering pass `tdsl.lower.tensorize`.
* `tdsl.intrinsics.x86`: fp32 register-tile micro-kernels (AVX-512, AVX2) and the int8
  u8 x s8 -> s32 dot product (AVX512-VNNI, AVX-VNNI); `x86.fp32_microkernel(kc)` and
  `x86.int8_dot()` pick the variant the CPU of a target runs (`target="llvm -mcpu=x86-64-v3"`: AVX2).
* `tdsl.intrinsics.x86_lowp`: low-precision register-tile micro-kernels: int8 u8 x s8 -> s32 on
  vpdpbusd (AVX512-VNNI, AVX-VNNI) with an exact AVX2 fallback, bf16 -> fp32 on vdpbf16ps
  (AVX512-BF16), fp16 -> fp32 on FMA after vcvtph2ps; `x86_lowp.int8_microkernel(features)`
  picks the int8 one for a CPU's features (`tdsl.target.cpu_features(target)`).
* `tdsl.intrinsics.x86_amx`: Intel AMX tile micro-kernels: int8 u8 x s8 -> s32 (`tdpbusd`) and
  bf16 -> fp32 (`tdpbf16ps`) on the same packed B as the VNNI kernels.
* `tdsl.intrinsics.cuda`: WMMA m16n16k16 fp16 -> fp32 (fill, load_a, load_b, mma, store).
* `tdsl.intrinsics.cuda_mma`: TVM's ldmatrix + mma.sync family (`mma_ldmatrix_f16_a`,
  `mma_f16f16f32`, bf16, int8, fill, store) with per-lane fragments, and `swizzle` for shared tiles.
* `tdsl.intrinsics.blas`: library GEMM (`blas.sgemm`, `blas.dgemm`) through the BLAS numpy loads;
  `tdsl.schedule.library` makes the generic names concrete per block, and
  `tdsl.auto.candidates` offers a block's library and auto-tensorized schedules.

Importing this package is light: the built-in intrinsics (`tdsl.intrinsics.builtins`) register
themselves the first time the registry is asked for a name.
"""
