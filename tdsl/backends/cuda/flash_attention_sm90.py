"""tdsl's fused attention forward for Hopper (sm_90a): wgmma + TMA + warp specialization (FlashAttention-3 style).

The kernel computes what `flash_attention` computes (``O = softmax(scale * Q K^T [causal mask]) V``
per (batch, head), the score matrix never stored), with Hopper's instructions. A block of 384
threads owns 128 query rows of one (batch, head):

* warpgroup 0, the producer, gives registers back (``setmaxnreg.dec``); its thread 0 loads the Q
  tile once (TMA, completing on ``qbar``), then the K and V tiles of 128 keys into a ring of
  `STAGES` stages, each guarded by a "full" mbarrier (one arrival announcing the bytes, completed
  by the copies) and an "empty" one (256 arrivals: each consumer thread once its last wgmma
  reading the stage is complete);
* warpgroups 1 and 2, the consumers (``setmaxnreg.inc``), own 64 query rows each. Per key tile j:
  S = Q K^T by wgmma m64n128k16 (both operands K-major, from the 128B-swizzled TMA tiles) is
  issued, then O += P V of tile j - 1 (wgmma m64n{D}k16 in its RS form: P, the A operand, from
  registers; V's tile [keys, D] as an MN-major B operand, d contiguous as TMA wrote it); the
  thread waits for S only, so the online softmax of tile j (base 2, the scale folded into the
  exponent, the row maximum across the 4 threads of a quad by ``__shfl_xor_sync``, the causal mask
  on tiles crossing the diagonal, tiles after it skipped) runs while the tensor cores do P V. Then
  the thread waits for P V, releases the previous stage, rescales O to the new row maximum and
  rounds P to the input type into `pr`: for 16-bit inputs the accumulators of S's columns
  16 kk .. 16 kk + 15 are, register for register, the A fragment of P's k16 slice kk, so P never
  leaves the registers (no shared tile, no fence.proxy.async, no warpgroup sync; the registers
  are not written again before the P V reading them is complete, as the PTX ISA requires). The
  first tile is peeled off the loop (no wgmma in a branch: ptxas would serialize them). At the
  end O is divided by the row sum and stored from the accumulators.
* ping-pong (`PINGPONG`, FA3's inter-warpgroup overlap): the two consumers take turns issuing
  their wgmma on named barriers `TURN_BARRIER + w` of 256 threads (warpgroup w's 128 wait with
  ``bar.sync``, the other's 128 give the turn with ``bar.arrive``), so that the tensor cores
  alternate between them and one's softmax runs under the other's GEMMs.

    src = kernel_source(AttentionShape(bh=2, seq=256, dim=128, dtype="float16", out="float32", causal=True))

Q, K and V are read through 3-D tensor maps over (bh, seq, dim) with boxes of 128 rows x 64
columns, so a tile past the sequence (seq a multiple of 64 but not of 128) is zero-filled and
its keys masked, its rows not stored. Shared memory (dynamic): Q and three stages of K and V:
224 KiB at head dim 128, 112 KiB at 64 (sm_90 allows 227 KiB).
"""
from __future__ import annotations

from .flash_attention import CTYPES, AttentionShape

BLOCK_M = 128        # query rows per block: 2 consumer warpgroups of 64
BLOCK_N = 128        # keys per K/V tile
STAGES = 3           # K/V stages (P stays in registers: 224 KiB of shared memory at head dim 128)
THREADS = 384        # producer + 2 consumers
BOX_COLS = 64        # a TMA box row: 64 halves = 128 bytes, the 128B swizzle's span
PRODUCER_REGS, CONSUMER_REGS = 24, 240
PINGPONG = True      # the consumers take turns issuing wgmma (one's softmax under the other's GEMMs)
TURN_BARRIER = 1     # named barriers TURN_BARRIER + w: warpgroup w's turn (0 is __syncthreads')


def kernel_name(shape: AttentionShape) -> str:
    kind = {"float16": "f16", "bfloat16": "bf16"}[shape.dtype]
    return f"tdsl_flash_attention_fwd_sm90a_{kind}_d{shape.dim}" + ("_causal" if shape.causal else "")


def grid(shape: AttentionShape) -> tuple[int, int, int]:
    return (-(-shape.seq // BLOCK_M), shape.bh, 1)


def _layout(shape: AttentionShape) -> dict[str, int]:
    """Byte offsets of the shared views in the dynamic array (tiles at multiples of 1024)."""
    d = shape.dim
    q = BLOCK_M * d * 2
    kv = STAGES * BLOCK_N * d * 2
    out = {"Qs": 0, "Ks": q, "Vs": q + kv}
    out["bars"] = q + 2 * kv
    out["total"] = out["bars"] + 8 * (2 * STAGES + 1)
    return out


def dynamic_shared_bytes(shape: AttentionShape) -> int:
    return _layout(shape)["total"]


def tensor_box() -> tuple[int, int, int]:
    """The TMA box of Q, K and V, in the tensors' (bh, seq, dim) order."""
    return (1, BLOCK_N, BOX_COLS)


_DEVICE = r"""
// 2^x: ex2.approx.ftz on the GPU (MUFU.EX2 alone; exp2f adds a range check and two multiplies),
// the library's exp2f in the emulator (the PTX ISA: within 2 ulp; results below 2^-126 flushed to 0)
#ifdef TDSL_CUDA_EMU_H
__device__ __forceinline__ float tdsl_fa3_exp2(float x) { return exp2f(x); }
#else
__device__ __forceinline__ float tdsl_fa3_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
#endif
// two outputs, rounded, into adjacent elements (one 32-bit store on the GPU)
#ifdef TDSL_CUDA_EMU_H
#define TDSL_FA3_STORE_PAIR(T, arr, at, lo, hi) do { arr[at] = (T)(lo); arr[(at) + 1] = (T)(hi); } while (0)
#else
#define TDSL_FA3_STORE_PAIR(T, arr, at, lo, hi) (*reinterpret_cast<unsigned*>(&arr[at]) = tdsl_fa_pack<T>(lo, hi))
#endif
"""

# the online softmax of tile j on the S accumulators (text put in the first tile's code and in the loop's)
_SOFTMAX = r"""      // online softmax in base 2 (scale_log2 = scale * log2(e), folded into one fma per score;
      // the row maximum kept scaled); masked: the tile crosses the diagonal (causal) or the end
      // of the sequence
      const bool masked = ({causal} && (j + 1) * {BN} - 1 > qb * {BM} + w * 64) || (j + 1) * {BN} > {S};
#pragma unroll
      for (int h = 0; h < 2; ++h) {{
        const int row = row0 + 8 * h;
        float mx = tdsl_fa_neg_inf();
#pragma unroll
        for (int q = 0; q < {BN8}; ++q) {{
#pragma unroll
          for (int e = 0; e < 2; ++e) {{
            const int col = j * {BN} + 8 * q + c0 + e;
            if (masked && (({causal} && col > row) || col >= {S})) sc[4 * q + 2 * h + e] = tdsl_fa_neg_inf();
            mx = fmaxf(mx, sc[4 * q + 2 * h + e]);
          }}
        }}
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mx = fmaxf(row_max[h], mx * scale_log2);   // (the scale is positive)
        alpha[h] = tdsl_fa3_exp2(row_max[h] - mx);
        row_max[h] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int q = 0; q < {BN8}; ++q) {{
#pragma unroll
          for (int e = 0; e < 2; ++e) {{
            const float p = tdsl_fa3_exp2(fmaf(sc[4 * q + 2 * h + e], scale_log2, -mx));
            sc[4 * q + 2 * h + e] = p;
            sum += p;
          }}
        }}
        row_sum[h] = row_sum[h] * alpha[h] + sum;
      }}
"""

# P (rounded to the input type) into the A fragments of the P V wgmma: the accumulators of S's
# columns 16 kk .. 16 kk + 15 (registers 8 kk .. 8 kk + 7: rows r0, r0 + 8, columns c0 + {{0, 1}} and
# + 8) are the m64nNk16 A fragment of k-slice kk (a0: row r0, a1: row r0 + 8, a2 / a3: 8 columns on)
_TO_P = r"""{ind}#pragma unroll
{ind}for (int kk = 0; kk < {NK}; ++kk)
{ind}#pragma unroll
{ind}  for (int r = 0; r < 4; ++r) pr[kk][r] = tdsl_fa_pack<{T}>(sc[8 * kk + 2 * r], sc[8 * kk + 2 * r + 1]);
"""

_KERNEL = r"""
// {name}: FlashAttention-3 style forward (wgmma + TMA, warp-specialized), {dtype} in, {out} out,
// head dim {D}, {causal_text}; grid ({grid_x}, {bh}), {threads} threads: warpgroup 0 loads (TMA),
// warpgroups 1-2 compute 64 query rows each; K/V tiles of {BN} keys in {ST} stages; P in registers
extern "C" __global__ void __launch_bounds__({threads}) {name}(const unsigned char* __restrict__ tmap_q, const unsigned char* __restrict__ tmap_k, const unsigned char* __restrict__ tmap_v, {OUT}* __restrict__ O, float scale_log2) {{
  extern __shared__ __align__(1024) unsigned char tdsl_smem[];
  {T} (&Qs)[{q_elems}] = *reinterpret_cast<{T} (*)[{q_elems}]>(tdsl_smem + {off_q});
  {T} (&Ks)[{kv_elems}] = *reinterpret_cast<{T} (*)[{kv_elems}]>(tdsl_smem + {off_k});
  {T} (&Vs)[{kv_elems}] = *reinterpret_cast<{T} (*)[{kv_elems}]>(tdsl_smem + {off_v});
  unsigned long long (&full)[{ST}] = *reinterpret_cast<unsigned long long (*)[{ST}]>(tdsl_smem + {off_full});
  unsigned long long (&empty)[{ST}] = *reinterpret_cast<unsigned long long (*)[{ST}]>(tdsl_smem + {off_empty});
  unsigned long long (&qbar)[1] = *reinterpret_cast<unsigned long long (*)[1]>(tdsl_smem + {off_qbar});
  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  // (causal: the blocks with the most key tiles first, so that the short ones fill the tail)
  const int qb = {causal} ? {grid_x} - 1 - (int)blockIdx.x : (int)blockIdx.x, bh = blockIdx.y;
  // the key tiles this block needs (causal: none after its last row)
  const int last = {causal} ? min((qb + 1) * {BM}, {S}) : {S};
  const int ntiles = (last + {BN} - 1) / {BN};
  if (tid == 0) {{
    for (int s = 0; s < {ST}; ++s) {{
      tdsl_ptx_mbarrier_init(&full[s], 1);
      tdsl_ptx_mbarrier_init(&empty[s], 256);
    }}
    tdsl_ptx_mbarrier_init(&qbar[0], 1);
    tdsl_ptx_fence_mbarrier_init();
  }}
  __syncthreads();
  if (wg == 0) {{   // the producer
    tdsl_ptx_setmaxnreg_dec<{producer_regs}>();
    if (tid == 0) {{
      tdsl_ptx_mbarrier_arrive_expect_tx(&qbar[0], {q_bytes});
      for (int c = 0; c < {CB}; ++c) tdsl_ptx_tma_load_3d(&Qs[c * {BM} * 64], tmap_q, c * 64, qb * {BM}, bh, &qbar[0]);
      for (int j = 0; j < ntiles; ++j) {{
        const int s = j % {ST};
        if (j >= {ST}) tdsl_ptx_mbarrier_wait(&empty[s], (j / {ST} - 1) & 1);
        tdsl_ptx_mbarrier_arrive_expect_tx(&full[s], {kv_bytes});
        for (int c = 0; c < {CB}; ++c) {{
          tdsl_ptx_tma_load_3d(&Ks[s * {BN} * {D} + c * {BN} * 64], tmap_k, c * 64, j * {BN}, bh, &full[s]);
          tdsl_ptx_tma_load_3d(&Vs[s * {BN} * {D} + c * {BN} * 64], tmap_v, c * 64, j * {BN}, bh, &full[s]);
        }}
      }}
    }}
  }} else {{   // a consumer: 64 query rows
    tdsl_ptx_setmaxnreg_inc<{consumer_regs}>();
    const int w = wg - 1, t = tid & 127;
    float o[{D2}];
    float sc[{BN2}];
    unsigned pr[{NK}][4];   // P of the previous tile: the A fragments of its {NK} k16 slices
    float row_max[2] = {{tdsl_fa_neg_inf(), tdsl_fa_neg_inf()}};
    float row_sum[2] = {{0.0f, 0.0f}};
    float alpha[2];
#pragma unroll
    for (int i = 0; i < {D2}; ++i) o[i] = 0.0f;
    // this thread's rows (wgmma's accumulator layout): r0 and r0 + 8; its columns 8 q + c0 + e
    const int r0 = 16 * (t >> 5) + ((t & 31) >> 2), c0 = 2 * (t & 3);
    const int row0 = qb * {BM} + w * 64 + r0;
    tdsl_ptx_mbarrier_wait(&qbar[0], 0);
{turn_first}    // the first tile: S = Q K^T ({KD} k16 steps over the head dim), its softmax, P
    tdsl_ptx_mbarrier_wait(&full[0], 0);
{turn_wait}    tdsl_ptx_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < {KD}; ++kk)
      tdsl_ptx_wgmma_m64n{BN}k16_f32_{wt}(&sc[0],
          tdsl_ptx_wgmma_desc(&Qs[(kk >> 2) * {BM} * 64 + w * 64 * 64 + (kk & 3) * 16], 16, 1024, 1),
          tdsl_ptx_wgmma_desc(&Ks[(kk >> 2) * {BN} * 64 + (kk & 3) * 16], 16, 1024, 1), kk > 0);
    tdsl_ptx_wgmma_commit_group();
{turn_pass}    tdsl_ptx_wgmma_wait_group<0>();
    {{
      const int j = 0;
{softmax0}    }}
{to_p0}    for (int j = 1; j < ntiles; ++j) {{
      const int s = j % {ST}, sp = (j + {ST} - 1) % {ST};
      tdsl_ptx_mbarrier_wait(&full[s], (j / {ST}) & 1);
{turn_wait_loop}      // S = Q K^T, then O += P V of the previous tile (P from registers): this tile's softmax runs
      // while the tensor cores do the previous tile's P V
      tdsl_ptx_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < {KD}; ++kk)
        tdsl_ptx_wgmma_m64n{BN}k16_f32_{wt}(&sc[0],
            tdsl_ptx_wgmma_desc(&Qs[(kk >> 2) * {BM} * 64 + w * 64 * 64 + (kk & 3) * 16], 16, 1024, 1),
            tdsl_ptx_wgmma_desc(&Ks[s * {BN} * {D} + (kk >> 2) * {BN} * 64 + (kk & 3) * 16], 16, 1024, 1), kk > 0);
      tdsl_ptx_wgmma_commit_group();
#pragma unroll
      for (int kk = 0; kk < {NK}; ++kk)
        tdsl_ptx_wgmma_m64n{D}k16_f32_{wt}_rs_bmn(&o[0], &pr[kk][0],
            tdsl_ptx_wgmma_desc(&Vs[sp * {BN} * {D} + kk * 16 * 64], {v_lbo}, 1024, 1), 1);
      tdsl_ptx_wgmma_commit_group();
{turn_pass_loop}      tdsl_ptx_wgmma_wait_group<1>();   // S is ready; P V may still run (and read pr)
{softmax}      tdsl_ptx_wgmma_wait_group<0>();   // P V done: o and pr free
      tdsl_ptx_mbarrier_arrive(&empty[sp]);   // this thread is done with the previous stage's K and V
#pragma unroll
      for (int q = 0; q < {D8}; ++q) {{   // the output so far, to the new row maximum
        o[4 * q] *= alpha[0];
        o[4 * q + 1] *= alpha[0];
        o[4 * q + 2] *= alpha[1];
        o[4 * q + 3] *= alpha[1];
      }}
{to_p}    }}
    // the last tile's O += P V
{turn_wait}    tdsl_ptx_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < {NK}; ++kk)
      tdsl_ptx_wgmma_m64n{D}k16_f32_{wt}_rs_bmn(&o[0], &pr[kk][0],
          tdsl_ptx_wgmma_desc(&Vs[((ntiles - 1) % {ST}) * {BN} * {D} + kk * 16 * 64], {v_lbo}, 1024, 1), 1);
    tdsl_ptx_wgmma_commit_group();
{turn_pass}    tdsl_ptx_wgmma_wait_group<0>();
    tdsl_ptx_mbarrier_arrive(&empty[(ntiles - 1) % {ST}]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {{
      float sum = row_sum[h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = 1.0f / sum;
      const int row = row0 + 8 * h;
      if (row < {S}) {{
        const long long at = ((long long)bh * {S} + row) * {D} + c0;
#pragma unroll
        for (int q = 0; q < {D8}; ++q) {{
{store}
        }}
      }}
    }}
  }}
}}
"""


def kernel_source(shape: AttentionShape, pingpong: bool = PINGPONG) -> str:
    """The whole CUDA C++ translation unit of the sm_90a fused kernel for `shape` (NVRTC or the
    emulator); `pingpong`: the two consumer warpgroups take turns issuing their wgmma."""
    from .flash_attention import DEVICE_HELPERS
    from .sm90 import device_functions

    shape.check()
    d, bn = shape.dim, BLOCK_N
    wt = {"float16": "f16", "bfloat16": "bf16"}[shape.dtype]
    lay = _layout(shape)
    params = dict(
        name=kernel_name(shape), dtype=shape.dtype, out=shape.out, D=d, BM=BLOCK_M, BN=bn, ST=STAGES, S=shape.seq,
        bh=shape.bh, T=CTYPES[shape.dtype], OUT=CTYPES[shape.out], threads=THREADS, grid_x=grid(shape)[0],
        causal="true" if shape.causal else "false", causal_text="causal" if shape.causal else "not causal",
        q_elems=BLOCK_M * d, kv_elems=STAGES * bn * d, off_q=lay["Qs"], off_k=lay["Ks"],
        off_v=lay["Vs"], off_full=lay["bars"], off_empty=lay["bars"] + 8 * STAGES, off_qbar=lay["bars"] + 16 * STAGES,
        producer_regs=PRODUCER_REGS, consumer_regs=CONSUMER_REGS, q_bytes=BLOCK_M * d * 2,
        kv_bytes=2 * bn * d * 2, CB=d // BOX_COLS, D2=d // 2, BN2=bn // 2, BN8=bn // 8, D8=d // 8, KD=d // 16,
        NK=bn // 16, wt=wt, v_lbo=bn * BOX_COLS * 2)
    softmax = _SOFTMAX.format(**params)
    pair = ("o[4 * q + 2 * h] * inv", "o[4 * q + 2 * h + 1] * inv")
    if shape.out == "float32":
        store = (f"          O[at + 8 * q] = {pair[0]};\n"
                 f"          O[at + 8 * q + 1] = {pair[1]};")
    else:   # two 16-bit outputs: one 32-bit store on the GPU
        store = f"          TDSL_FA3_STORE_PAIR({CTYPES[shape.out]}, O, at + 8 * q, {pair[0]}, {pair[1]});"
    turns = dict(turn_first="", turn_wait="", turn_pass="", turn_wait_loop="", turn_pass_loop="")
    if pingpong:   # named barrier TURN_BARRIER + w: warpgroup w's 128 threads wait (bar.sync), the other's arrive
        mine, other = f"{TURN_BARRIER} + w", f"{TURN_BARRIER} + 1 - w"
        turns = dict(
            turn_first=f"    if (w == 1) tdsl_ptx_bar_arrive({TURN_BARRIER}, 256);   // warpgroup 1 gives the first turn\n",
            turn_wait=f"    tdsl_ptx_bar_sync({mine}, 256);\n",
            turn_pass=f"    tdsl_ptx_bar_arrive({other}, 256);\n",
            turn_wait_loop=f"      tdsl_ptx_bar_sync({mine}, 256);   // this warpgroup's turn to issue wgmma\n",
            turn_pass_loop=f"      tdsl_ptx_bar_arrive({other}, 256);   // the other's turn\n")
    to_p = dict(to_p=_TO_P.format(ind="      ", **params), to_p0=_TO_P.format(ind="    ", **params))
    body = _KERNEL.format(**params, **turns, **to_p, store=store, softmax=softmax,
                          softmax0=softmax.replace("\n      ", "\n        "))
    prelude = device_functions(wgmma=((bn, wt), (d, wt, "mn", "rs")))
    return "\n".join([prelude, DEVICE_HELPERS, _DEVICE, body])
