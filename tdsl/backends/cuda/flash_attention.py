"""tdsl's fused attention forward kernel (FlashAttention-2 style) and the host step that runs it.

One CUDA kernel computes ``O = softmax(scale * Q K^T [causal mask]) V`` for every (batch, head)
without writing the score matrix anywhere: a block of 4 warps owns 64 query rows (16 per warp);
it walks the key/value sequence in tiles of `BLOCK_N` rows, staged in shared memory by cp.async in
two buffers (the next tile loads while this one is used), computes the 16 x BLOCK_N scores of each
warp on mma.sync m16n8k16 (operands by ldmatrix from XOR-swizzled tiles, so the 8 rows of an 8 x 8
matrix fall in 8 different bank groups), keeps a running row maximum and row sum in registers
(online softmax: when the maximum grows, the sum and the output accumulator are rescaled by
``exp2(m_old - m_new)``), rounds the probabilities to the input type and multiplies them by the
value tile (ldmatrix.trans) on the tensor cores again. The output is divided by the row sum at
the end. Causal: key tiles after the block's last row are skipped, the tile on the diagonal masked.

    src = kernel_source(AttentionShape(bh=2, seq=128, dim=64, dtype="float16", out="float32", causal=True))

Head dims 64 (BLOCK_N = 64, 40 KiB shared) and 128 (BLOCK_N = 32, 48 KiB: static shared memory's
limit); the sequence a multiple of 64. For sm_90a, `flash_attention_sm90` is the wgmma + TMA kernel
(a schedule made for arch sm_90a asks for it); the host step below runs either.

The host step (`attention_step.AttentionStep`) launches it between tdsl's generated kernels: on a GPU through
the driver (its own NVRTC CUBIN for the device's architecture), emulated through
`emulator.raw.run_source` (the same CUDA C++, every thread order checked for races).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import TargetError

BLOCK_M = 64
THREADS = 128
CTYPES = {"float16": "half", "bfloat16": "nv_bfloat16", "float32": "float"}
KERNEL_PREFIX = "tdsl_flash_attention_fwd"


@dataclass(frozen=True)
class AttentionShape:
    """What one fused kernel is made for: `bh` (batch x heads) sequences of `seq` rows of `dim`
    elements of `dtype` (float16/bfloat16), output `out` (float32 or the input type)."""

    bh: int
    seq: int
    dim: int
    dtype: str
    out: str
    causal: bool

    @property
    def block_n(self) -> int:
        return 64 if self.dim == 64 else 32

    @property
    def name(self) -> str:
        kind = {"float16": "f16", "bfloat16": "bf16"}[self.dtype]
        return f"{KERNEL_PREFIX}_{kind}_d{self.dim}" + ("_causal" if self.causal else "")

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.seq // BLOCK_M, self.bh, 1)

    @property
    def shared_bytes(self) -> int:
        return (BLOCK_M + 4 * self.block_n) * self.dim * 2

    def check(self) -> None:
        """TargetError unless the kernel is made for this shape (the matcher only offers these)."""
        if self.dtype not in ("float16", "bfloat16") or self.out not in ("float32", self.dtype):
            raise TargetError(f"the fused attention kernel takes float16/bfloat16 Q, K, V and a float32 or "
                              f"same-type output, not {self.dtype} -> {self.out}")
        if self.dim not in (64, 128) or self.seq % BLOCK_M or self.seq <= 0 or self.bh <= 0:
            raise TargetError(f"the fused attention kernel takes head dim 64 or 128 and a sequence that is a "
                              f"multiple of {BLOCK_M}, not dim {self.dim}, sequence {self.seq}")


# minus infinity; two floats rounded to a packed pair (both kernels)
DEVICE_HELPERS = r"""
__device__ __forceinline__ float tdsl_fa_neg_inf() { return __int_as_float((int)0xff800000u); }
#ifdef TDSL_CUDA_EMU_H
template <class T> inline unsigned tdsl_fa_pack(float lo, float hi) {
  T a(lo), b(hi);
  return (unsigned)a.bits | ((unsigned)b.bits << 16);
}
#else
template <class T> __device__ __forceinline__ unsigned tdsl_fa_pack(float lo, float hi);
template <> __device__ __forceinline__ unsigned tdsl_fa_pack<half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&h);
}
template <> __device__ __forceinline__ unsigned tdsl_fa_pack<nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&h);
}
#endif
"""

_KERNEL = r"""
// {name}: FlashAttention-2 forward, {dtype} in, {out} out, head dim {D}, {causal_text}
// grid ({grid_x}, {bh}), {threads} threads; a block: {BM} query rows, key/value tiles of {BN} rows
extern "C" __global__ void __launch_bounds__({threads}) {name}(const {T}* __restrict__ Q, const {T}* __restrict__ K, const {T}* __restrict__ V, {OUT}* __restrict__ O, float scale_log2) {{
  __shared__ __align__(128) {T} Qs[{q_elems}];
  __shared__ __align__(128) {T} Ks[{kv_elems}];
  __shared__ __align__(128) {T} Vs[{kv_elems}];
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int qb = blockIdx.x;
  const long long base = (long long)blockIdx.y * {S} * {D};
  const long long q0 = base + (long long)qb * {BM} * {D};
  // the key tiles this block needs (causal: none after its last row)
  const int ntiles = {causal} ? ((qb + 1) * {BM}) / {BN} : {S} / {BN};
  for (int c = tid; c < {BM} * {CH}; c += {threads}) {{
    const int r = c / {CH}, ch = c % {CH};
    tdsl_cp_async_cg16(&Qs[r * {D} + ((ch ^ (r & 7)) << 3)], &Q[q0 + r * {D} + ch * 8]);
  }}
  for (int c = tid; c < {BN} * {CH}; c += {threads}) {{
    const int r = c / {CH}, ch = c % {CH};
    tdsl_cp_async_cg16(&Ks[r * {D} + ((ch ^ (r & 7)) << 3)], &K[base + r * {D} + ch * 8]);
    tdsl_cp_async_cg16(&Vs[r * {D} + ((ch ^ (r & 7)) << 3)], &V[base + r * {D} + ch * 8]);
  }}
  tdsl_cp_async_commit();
  unsigned qf[{KD}][4];
  float acc[{ND}][4];
  float s[{NN}][4];
  unsigned pf[4];
  unsigned bf[4];
  float row_max[2] = {{tdsl_fa_neg_inf(), tdsl_fa_neg_inf()}};
  float row_sum[2] = {{0.0f, 0.0f}};
#pragma unroll
  for (int n = 0; n < {ND}; ++n) {{
    acc[n][0] = 0.0f; acc[n][1] = 0.0f; acc[n][2] = 0.0f; acc[n][3] = 0.0f;
  }}
  const int g = lane >> 2, t = lane & 3, m8 = lane >> 3, r8 = lane & 7;
  const int row0 = qb * {BM} + warp * 16 + g;   // this lane's rows: row0 and row0 + 8
  for (int j = 0; j < ntiles; ++j) {{
    const int cur = (j & 1) * {BN} * {D};
    if (j + 1 < ntiles) {{   // the next tile loads while this one is used
      const int nxt = ((j + 1) & 1) * {BN} * {D};
      const long long k0 = base + (long long)(j + 1) * {BN} * {D};
      for (int c = tid; c < {BN} * {CH}; c += {threads}) {{
        const int r = c / {CH}, ch = c % {CH};
        tdsl_cp_async_cg16(&Ks[nxt + r * {D} + ((ch ^ (r & 7)) << 3)], &K[k0 + r * {D} + ch * 8]);
        tdsl_cp_async_cg16(&Vs[nxt + r * {D} + ((ch ^ (r & 7)) << 3)], &V[k0 + r * {D} + ch * 8]);
      }}
      tdsl_cp_async_commit();
      tdsl_cp_async_wait<1>();
    }} else {{
      tdsl_cp_async_wait<0>();
    }}
    __syncthreads();
    if (j == 0) {{   // this warp's 16 query rows as mma A fragments, once
#pragma unroll
      for (int kk = 0; kk < {KD}; ++kk) {{
        const int r = warp * 16 + (m8 & 1) * 8 + r8, ch = kk * 2 + (m8 >> 1);
        tdsl_ptx_ldmatrix<4, false>(qf[kk], &Qs[r * {D} + ((ch ^ (r & 7)) << 3)]);
      }}
    }}
    // S = Q K^T for this warp's 16 rows and the tile's {BN} keys
#pragma unroll
    for (int n = 0; n < {NN}; ++n) {{
      s[n][0] = 0.0f; s[n][1] = 0.0f; s[n][2] = 0.0f; s[n][3] = 0.0f;
    }}
#pragma unroll
    for (int kk = 0; kk < {KD}; ++kk) {{
#pragma unroll
      for (int np = 0; np < {NN} / 2; ++np) {{
        const int r = np * 16 + (m8 >> 1) * 8 + r8, ch = kk * 2 + (m8 & 1);
        tdsl_ptx_ldmatrix<4, false>(bf, &Ks[cur + r * {D} + ((ch ^ (r & 7)) << 3)]);
        tdsl_ptx_mma_m16n8k16_f32<{T}>(s[2 * np], qf[kk], &bf[0], s[2 * np]);
        tdsl_ptx_mma_m16n8k16_f32<{T}>(s[2 * np + 1], qf[kk], &bf[2], s[2 * np + 1]);
      }}
    }}
    // online softmax (base 2: scale_log2 = scale * log2(e)); a lane holds rows row0 and row0 + 8
    const bool diagonal = {causal} && (j + 1) * {BN} > qb * {BM};
#pragma unroll
    for (int h = 0; h < 2; ++h) {{
      float mx = row_max[h];
#pragma unroll
      for (int n = 0; n < {NN}; ++n) {{
#pragma unroll
        for (int e = 0; e < 2; ++e) {{
          float x = s[n][2 * h + e] * scale_log2;
          if (diagonal && j * {BN} + n * 8 + 2 * t + e > row0 + 8 * h) x = tdsl_fa_neg_inf();
          s[n][2 * h + e] = x;
          mx = fmaxf(mx, x);
        }}
      }}
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float alpha = exp2f(row_max[h] - mx);
      row_max[h] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < {NN}; ++n) {{
#pragma unroll
        for (int e = 0; e < 2; ++e) {{
          const float p = exp2f(s[n][2 * h + e] - mx);
          s[n][2 * h + e] = p;
          sum += p;
        }}
      }}
      row_sum[h] = row_sum[h] * alpha + sum;
#pragma unroll
      for (int n = 0; n < {ND}; ++n) {{
        acc[n][2 * h] *= alpha;
        acc[n][2 * h + 1] *= alpha;
      }}
    }}
    // O += P V: the score accumulators are the A fragments of P (rounded to {dtype})
#pragma unroll
    for (int kk = 0; kk < {NN} / 2; ++kk) {{
      pf[0] = tdsl_fa_pack<{T}>(s[2 * kk][0], s[2 * kk][1]);
      pf[1] = tdsl_fa_pack<{T}>(s[2 * kk][2], s[2 * kk][3]);
      pf[2] = tdsl_fa_pack<{T}>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pf[3] = tdsl_fa_pack<{T}>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dn = 0; dn < {ND} / 2; ++dn) {{
        const int r = kk * 16 + (m8 & 1) * 8 + r8, ch = dn * 2 + (m8 >> 1);
        tdsl_ptx_ldmatrix<4, true>(bf, &Vs[cur + r * {D} + ((ch ^ (r & 7)) << 3)]);
        tdsl_ptx_mma_m16n8k16_f32<{T}>(acc[2 * dn], pf, &bf[0], acc[2 * dn]);
        tdsl_ptx_mma_m16n8k16_f32<{T}>(acc[2 * dn + 1], pf, &bf[2], acc[2 * dn + 1]);
      }}
    }}
    __syncthreads();   // every warp is done with this buffer before it is loaded again
  }}
#pragma unroll
  for (int h = 0; h < 2; ++h) {{
    float sum = row_sum[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = 1.0f / sum;
    const long long o = base + (long long)(row0 + 8 * h) * {D} + 2 * t;
#pragma unroll
    for (int n = 0; n < {ND}; ++n) {{
      O[o + n * 8] = ({OUT})(acc[n][2 * h] * inv);
      O[o + n * 8 + 1] = ({OUT})(acc[n][2 * h + 1] * inv);
    }}
  }}
}}
"""


def kernel_source(shape: AttentionShape) -> str:
    """The whole CUDA C++ translation unit of the fused kernel for `shape` (NVRTC or the emulator)."""
    from ...intrinsics.cuda_mma import PRELUDE
    from .c_text import HELPERS

    shape.check()
    d, bn = shape.dim, shape.block_n
    body = _KERNEL.format(
        name=shape.name, dtype=shape.dtype, out=shape.out, D=d, BM=BLOCK_M, BN=bn, S=shape.seq, bh=shape.bh,
        T=CTYPES[shape.dtype], OUT=CTYPES[shape.out], threads=THREADS, grid_x=shape.seq // BLOCK_M,
        causal="true" if shape.causal else "false", causal_text="causal" if shape.causal else "not causal",
        q_elems=BLOCK_M * d, kv_elems=2 * bn * d, CH=d // 8, KD=d // 16, ND=d // 8, NN=bn // 8)
    return "\n".join([PRELUDE, HELPERS["cp_async"], DEVICE_HELPERS, body])


def scale_log2(scale: float) -> float:
    """The kernel's score factor: the softmax's scale times log2(e) (it exponentiates in base 2)."""
    return float(np.float32(scale * math.log2(math.e)))
