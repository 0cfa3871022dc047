"""CUDA tensor-core intrinsics under TVM's names: ldmatrix + mma.sync (sm_80), per-lane fragments.

TVM's ``tvm.tir.tensor_intrin.cuda`` family, each on a 16 x 16 tile (16 x 32 for int8) of a
fragment buffer in a warp-fragment scope, run by the 32 lanes of a warp together:

==================================  ===========================================  =======================
name                                description                                  instruction(s)
==================================  ===========================================  =======================
``mma_ldmatrix_f16_a``              ``Af[i, k] = A[i, k]`` (shared, 16 x 16)     ldmatrix.x4
``mma_ldmatrix_f16_b``              ``Bf[k, j] = B[k, j]`` (B stored k-major)    ldmatrix.x4.trans
``mma_ldmatrix_f16_b_trans``        ``Bf[j, k] = B[j, k]`` (B stored n-major)    ldmatrix.x4
``mma_ldmatrix_bf16_{a,b,b_trans}`` the same for bfloat16
``mma_ldmatrix_i8_a``               ``Af[i, k] = A[i, k]`` (16 x 32 int8)        ldmatrix.x4
``mma_ldmatrix_i8_b_trans``         ``Bf[j, k] = B[j, k]`` (16 x 32 int8)        ldmatrix.x4
``mma_f16f16f32``                   ``C[i, j] += f32(A[i, k]) * f32(B[k, j])``   2 x mma.m16n8k16
``mma_f16f16f32_trans``             ``C[i, j] += f32(A[i, k]) * f32(B[j, k])``   2 x mma.m16n8k16
``mma_bf16bf16f32[_trans]``         the same for bfloat16                        2 x mma.m16n8k16.bf16
``mma_i8i8i32_trans``               ``C[i, j] += i32(A[i, k]) * i32(B[j, k])``   2 x mma.m16n8k32.s8
``mma_ldmatrix_u8_{a,b_trans}``     the same for uint8 (tdsl's names: TVM has no u8 mma)
``mma_u8u8i32_trans``               the same for uint8                           2 x mma.m16n8k32.u8
``mma_fill_16x16_{f32,i32}``        ``C[i, j] = 0``
``mma_store_16x16_{f32,i32}_{global,shared}_`` ``D[i, j] = C[i, j]``             per-lane st.v2 (8 B)
==================================  ===========================================  =======================

(``mma_f16f16f32_trans_b`` is also accepted for ``mma_f16f16f32_trans``, as newer TVM spells it.)

Fragment scopes: ``m16n8k16.matrixA`` / ``m16n8k16.matrixB`` / ``m16n8k16.accumulator`` for
fp16 and bf16, ``m16n8k32.matrixA`` / ``m16n8k32.matrixB`` / ``m16n8k32.accumulator`` for int8.
A fragment buffer keeps its logical shape in the schedule (``cache_read(block, "A_shared",
"m16n8k16.matrixA")``); on CUDA it becomes per-lane registers holding exactly that lane's
elements: each 16 x 16 tile (16 x 32 int8) is tile_size / 32 elements per lane, in the order the
PTX ISA's mma fragment layouts give (``tdsl.lower.gpu_lane_fragments``). A warp tile of 64 x 64
fp32 accumulators is 128 floats per lane, not 4096.

TVM's own form of these intrinsics, with fragments in scope ``"warp"`` as (lane, register)
tiles, is `tdsl.intrinsics.cuda_mma_warp` (same names; its layouts and ``LDMATRIX_*`` /
``MMA_*`` constants can be imported from here too); ``sch.tensorize`` picks the form whose
scopes the code uses.

Memory operands are passed as two elements, ``A[0, 0]`` and ``A[1, 0]``: the device function
takes the row pitch from their distance, so the tile's buffer may be compacted (a shared tile
sized to the block) and each lane computes its own ldmatrix row address (lane 8m + r gives row
r of matrix m). Built for the CPU, the blocks compute through their descriptions.
"""
from __future__ import annotations

from ..ir import PrimFunc
from .registry import TensorIntrin

F16_SCOPES = ("m16n8k16.matrixA", "m16n8k16.matrixB", "m16n8k16.accumulator")
I8_SCOPES = ("m16n8k32.matrixA", "m16n8k32.matrixB", "m16n8k32.accumulator")
FRAGMENT_SCOPES = F16_SCOPES + I8_SCOPES

PRELUDE = r"""#include <cuda_fp16.h>
#include <cuda_bf16.h>
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "tdsl's mma intrinsics (mma_ldmatrix_*, mma_f16f16f32, ...: mma.sync m16n8k16, bf16 and s8 shapes) need sm_80 or newer; build with arch=\"sm_80\" or use the WMMA intrinsics (cuda.wmma.*)"
#endif
#ifndef TDSL_CUDA_EMU_H  // the emulator's ptx_mma.h models these instructions lane by lane
template <int X, bool TRANS> __device__ __forceinline__ void tdsl_ptx_ldmatrix(unsigned* d, const void* row);
#define TDSL_LDSM(X, TRANS, SUFFIX, REGS, ...)                                                             \
  template <> __device__ __forceinline__ void tdsl_ptx_ldmatrix<X, TRANS>(unsigned* d, const void* row) {  \
    unsigned a = (unsigned)__cvta_generic_to_shared(row);                                                  \
    asm volatile("ldmatrix.sync.aligned.m8n8.x" #X SUFFIX ".shared.b16 " REGS ", [%" #X "];\n" : __VA_ARGS__ : "r"(a)); \
  }
TDSL_LDSM(1, false, "", "{%0}", "=r"(d[0]))
TDSL_LDSM(2, false, "", "{%0, %1}", "=r"(d[0]), "=r"(d[1]))
TDSL_LDSM(4, false, "", "{%0, %1, %2, %3}", "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]))
TDSL_LDSM(1, true, ".trans", "{%0}", "=r"(d[0]))
TDSL_LDSM(2, true, ".trans", "{%0, %1}", "=r"(d[0]), "=r"(d[1]))
TDSL_LDSM(4, true, ".trans", "{%0, %1, %2, %3}", "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]))
#undef TDSL_LDSM
template <class T>
__device__ __forceinline__ void tdsl_ptx_mma_m16n8k16_f32(float* d, const unsigned* a, const unsigned* b, const float* c);
#define TDSL_MMA16(T, NAME)                                                                                        \
  template <> __device__ __forceinline__ void tdsl_ptx_mma_m16n8k16_f32<T>(float* d, const unsigned* a,          \
                                                                         const unsigned* b, const float* c) {     \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." NAME "." NAME ".f32 {%0, %1, %2, %3}, "                 \
                 "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"                                            \
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                                 \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),                              \
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));                                                   \
  }
TDSL_MMA16(half, "f16")
TDSL_MMA16(nv_bfloat16, "bf16")
#undef TDSL_MMA16
#define TDSL_MMA32(NAME, T)                                                                                      \
  __device__ __forceinline__ void tdsl_ptx_mma_m16n8k32_s32_##NAME(int* d, const unsigned* a, const unsigned* b,   \
                                                                  const int* c) {                                  \
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." T "." T ".s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "      \
                 "{%8, %9}, {%10, %11, %12, %13};\n"                                                               \
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])                                                 \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),                              \
                   "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));                                                   \
  }
TDSL_MMA32(s8, "s8")
TDSL_MMA32(u8, "u8")
#undef TDSL_MMA32
#define TDSL_MMA_CHECK(p, bytes, what)
#define TDSL_MMA_UNCOUNT(n)
#define TDSL_MMA_ALIGNED(p, bytes)
#else
#define TDSL_MMA_CHECK(p, bytes, what) (::tdsl_emu::check_addr(p, bytes, what), ::tdsl_emu::count_global_ptr(p, bytes))
#define TDSL_MMA_UNCOUNT(n) ::tdsl_emu::uncount_global(n)  // the emulator's coalescing counters
#define TDSL_MMA_ALIGNED(p, bytes)                                                                         \
  if ((unsigned long long)(p) % (bytes))                                                                   \
  ::tdsl_emu::fail("misaligned %d-byte store by mma_store (address 0x%llx): the GPU faults on it", (int)(bytes), \
                   (unsigned long long)(p))
#endif
// Tile-level device functions of tdsl.intrinsics.cuda_mma. `row0` and `row1` are elements (0, 0)
// and (1, 0) of a tile in memory: their distance is its row pitch. A fragment is the lane's
// registers of one tile (8 elements; 16 for int8), contiguous from the element passed.
__device__ __forceinline__ const char* tdsl_mma_row(const void* row0, const void* row1, int r, int col_bytes) {
  return (const char*)row0 + (long long)r * ((const char*)row1 - (const char*)row0) + col_bytes;
}
template <class T> __device__ __forceinline__ int tdsl_mma_ldmatrix_a(T& frag, const T& row0, const T& row1) {
  int lane = threadIdx.x & 31;   // matrices: rows 0-7 | rows 8-15 of the left half, then of the right half
  tdsl_ptx_ldmatrix<4, false>((unsigned*)&frag, tdsl_mma_row(&row0, &row1, lane % 16, 16 * (lane / 16)));
  return 0;
}
template <class T> __device__ __forceinline__ int tdsl_mma_ldmatrix_b(T& frag, const T& row0, const T& row1) {
  int lane = threadIdx.x & 31, m = lane / 8;   // B[k][n]: k 0-7 | 8-15 of n 0-7, then of n 8-15, transposed
  tdsl_ptx_ldmatrix<4, true>((unsigned*)&frag, tdsl_mma_row(&row0, &row1, lane % 8 + 8 * (m % 2), 16 * (m / 2)));
  return 0;
}
template <class T> __device__ __forceinline__ int tdsl_mma_ldmatrix_b_trans(T& frag, const T& row0, const T& row1) {
  int lane = threadIdx.x & 31, m = lane / 8;   // B[n][k]: k-halves 0 | 1 of n 0-7, then of n 8-15
  tdsl_ptx_ldmatrix<4, false>((unsigned*)&frag, tdsl_mma_row(&row0, &row1, lane % 8 + 8 * (m / 2), 16 * (m % 2)));
  return 0;
}
// The same for a shared tile whose 16-byte chunks are XOR-swizzled by row (tdsl.lower.gpu_swizzle):
// chunk c of row r is stored at c ^ ((r / rpl) % n). `row0` / `row1` are elements (r0, 0) and
// (r0 + 1, 0); the tile starts at row r0, column c0.
template <class T> __device__ __forceinline__ const char* tdsl_mma_xor_row(const T& row0, const T& row1, int r0, int c0,
                                                                            int r, int chunk, int rpl, int n) {
  int c = (c0 * (int)sizeof(T)) / 16 + chunk;
  return tdsl_mma_row(&row0, &row1, r, 16 * (c ^ (((r0 + r) / rpl) % n)));
}
template <class T> __device__ __forceinline__ int tdsl_mma_ldmatrix_a_xor(T& frag, const T& row0, const T& row1, int r0,
                                                                          int c0, int rpl, int n) {
  int lane = threadIdx.x & 31;
  tdsl_ptx_ldmatrix<4, false>((unsigned*)&frag, tdsl_mma_xor_row(row0, row1, r0, c0, lane % 16, lane / 16, rpl, n));
  return 0;
}
template <class T> __device__ __forceinline__ int tdsl_mma_ldmatrix_b_xor(T& frag, const T& row0, const T& row1, int r0,
                                                                          int c0, int rpl, int n) {
  int lane = threadIdx.x & 31, m = lane / 8;
  tdsl_ptx_ldmatrix<4, true>((unsigned*)&frag,
                             tdsl_mma_xor_row(row0, row1, r0, c0, lane % 8 + 8 * (m % 2), m / 2, rpl, n));
  return 0;
}
template <class T> __device__ __forceinline__ int tdsl_mma_ldmatrix_b_trans_xor(T& frag, const T& row0, const T& row1,
                                                                                int r0, int c0, int rpl, int n) {
  int lane = threadIdx.x & 31, m = lane / 8;
  tdsl_ptx_ldmatrix<4, false>((unsigned*)&frag,
                              tdsl_mma_xor_row(row0, row1, r0, c0, lane % 8 + 8 * (m / 2), m % 2, rpl, n));
  return 0;
}
template <class T> __device__ __forceinline__ int tdsl_mma_16x16x16_f32(float& c, const T& a, const T& b) {
  const unsigned* A = (const unsigned*)&a;
  const unsigned* B = (const unsigned*)&b;
  tdsl_ptx_mma_m16n8k16_f32<T>(&c, A, B, &c);            // columns 0-7
  tdsl_ptx_mma_m16n8k16_f32<T>(&c + 4, A, B + 2, &c + 4);  // columns 8-15
  return 0;
}
__device__ __forceinline__ int tdsl_mma_16x16x32_s32(int& c, const signed char& a, const signed char& b) {
  const unsigned* A = (const unsigned*)&a;
  const unsigned* B = (const unsigned*)&b;
  tdsl_ptx_mma_m16n8k32_s32_s8(&c, A, B, &c);
  tdsl_ptx_mma_m16n8k32_s32_s8(&c + 4, A, B + 2, &c + 4);
  return 0;
}
__device__ __forceinline__ int tdsl_mma_16x16x32_s32(int& c, const unsigned char& a, const unsigned char& b) {
  const unsigned* A = (const unsigned*)&a;
  const unsigned* B = (const unsigned*)&b;
  tdsl_ptx_mma_m16n8k32_s32_u8(&c, A, B, &c);
  tdsl_ptx_mma_m16n8k32_s32_u8(&c + 4, A, B + 2, &c + 4);
  return 0;
}
template <class T> __device__ __forceinline__ int tdsl_mma_fill(T& c, T value) {
#pragma unroll
  for (int t = 0; t < 8; ++t) (&c)[t] = value;
  return 0;
}
// `row0` / `row1` are taken as const because a code generator may declare an output that is only
// written through this call as a const pointer; the memory itself is writable.
// Each lane stores 2 consecutive elements per row; where the tile's start and row pitch are
// multiples of their size, as one 8-byte store (STG.E.64 / STS.64: float2, int2).
template <class T> struct alignas(2 * sizeof(T)) tdsl_mma_pair { T x, y; };
template <class T> __device__ __forceinline__ int tdsl_mma_store(const T& row0, const T& row1, const T& c) {
  int lane = threadIdx.x & 31, g = lane >> 2, t = lane % 4;
  TDSL_MMA_UNCOUNT(2);   // row0 and row1 name the tile; the stores below are the accesses
  bool paired = (((unsigned long long)&row0 | (unsigned long long)((const char*)&row1 - (const char*)&row0)) &
                 (2 * sizeof(T) - 1)) == 0;
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      T* p = (T*)tdsl_mma_row(&row0, &row1, g + 8 * h, (int)sizeof(T) * (8 * j + 2 * t));
      TDSL_MMA_CHECK(p, 2 * sizeof(T), "mma_store");
      if (paired) {
        TDSL_MMA_ALIGNED(p, 2 * sizeof(T));
        *(tdsl_mma_pair<T>*)p = tdsl_mma_pair<T>{(&c)[4 * j + 2 * h], (&c)[4 * j + 2 * h + 1]};
      } else {
        p[0] = (&c)[4 * j + 2 * h];
        p[1] = (&c)[4 * j + 2 * h + 1];
      }
    }
  return 0;
}
"""

_TYPES = {"f16": "float16", "bf16": "bfloat16", "i8": "int8", "u8": "uint8", "f32": "float32", "i32": "int32"}

_COPY = '''
@T.prim_func
def copy_desc(A: T.Buffer(({r}, {c}), "{dtype}", strides=("a_s", 1), scope="{src}"),
              F: T.Buffer(({r}, {c}), "{dtype}", strides=("f_s", 1), scope="{dst}")):
    for i, j in T.grid({r}, {c}):
        with T.block("copy"):
            vi, vj = T.axis.remap("SS", [i, j])
            F[vi, vj] = A[vi, vj]

@T.prim_func
def copy_impl(A: T.Buffer(({r}, {c}), "{dtype}", strides=("a_s", 1), scope="{src}"),
              F: T.Buffer(({r}, {c}), "{dtype}", strides=("f_s", 1), scope="{dst}")):
    T.evaluate(T.call_extern("int32", "{fn}", {call}))
'''

_MMA = '''
@T.prim_func
def mma_desc(A: T.Buffer((16, {k}), "{ab}", strides=("a_s", 1), scope="{sa}"),
             B: T.Buffer(({bshape}), "{ab}", strides=("b_s", 1), scope="{sb}"),
             C: T.Buffer((16, 16), "{acc}", strides=("c_s", 1), scope="{sc}")):
    for i, j, k in T.grid(16, 16, {k}):
        with T.block("mma"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "{acc}") * T.cast(B[{bidx}], "{acc}")

@T.prim_func
def mma_impl(A: T.Buffer((16, {k}), "{ab}", strides=("a_s", 1), scope="{sa}"),
             B: T.Buffer(({bshape}), "{ab}", strides=("b_s", 1), scope="{sb}"),
             C: T.Buffer((16, 16), "{acc}", strides=("c_s", 1), scope="{sc}")):
    T.evaluate(T.call_extern("int32", "{fn}", C[0, 0], A[0, 0], B[0, 0]))
'''

_FILL = '''
@T.prim_func
def fill_desc(C: T.Buffer((16, 16), "{acc}", strides=("c_s", 1), scope="{sc}")):
    for i, j in T.grid(16, 16):
        with T.block("fill"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = T.{acc}(0)

@T.prim_func
def fill_impl(C: T.Buffer((16, 16), "{acc}", strides=("c_s", 1), scope="{sc}")):
    T.evaluate(T.call_extern("int32", "tdsl_mma_fill", C[0, 0], T.{acc}(0)))
'''

# Which arguments of each device function stand for a tile: a fragment (the calling lane's
# registers of the tile; `tdsl.lower.gpu_lane_fragments` gives each tile its registers) or the
# first of two memory elements (row0 / row1). A tile is 16 x 16, or 16 x 32 of 8-bit elements
# (`tile_shape`). For buffer compaction (`tdsl.lower.gpu_compact`) a tile argument touches the
# whole tile at the element passed.
TILE_ARGS: dict[str, tuple[int, ...]] = {
    "tdsl_mma_ldmatrix_a": (0, 1), "tdsl_mma_ldmatrix_b": (0, 1), "tdsl_mma_ldmatrix_b_trans": (0, 1),
    "tdsl_mma_16x16x16_f32": (0, 1, 2), "tdsl_mma_16x16x32_s32": (0, 1, 2), "tdsl_mma_fill": (0,),
    "tdsl_mma_store": (0, 2)}
# the fragment (per-lane register) arguments among them
FRAGMENT_ARGS: dict[str, tuple[int, ...]] = {
    "tdsl_mma_ldmatrix_a": (0,), "tdsl_mma_ldmatrix_b": (0,), "tdsl_mma_ldmatrix_b_trans": (0,),
    "tdsl_mma_16x16x16_f32": (0, 1, 2), "tdsl_mma_16x16x32_s32": (0, 1, 2), "tdsl_mma_fill": (0,),
    "tdsl_mma_store": (2,)}

# TVM's warp-tile intrinsics (tdsl.intrinsics.cuda_mma_warp): device function -> its arguments
# that are a lane's registers of a warp tile (a (32, n)
# "warp" region; `lower_warp_memory` passes the lane's n registers), and -> its arguments that
# stand for a memory tile (elements (0, 0) / (1, 0), as in cuda_mma.TILE_ARGS)
WARP_FRAGMENT_ARGS: dict[str, tuple[int, ...]] = {
    "tdsl_warp_ldmatrix_a": (0,), "tdsl_warp_ldmatrix_b": (0,), "tdsl_warp_ldmatrix_b_trans": (0,),
    "tdsl_warp_load_b_i8": (0,), "tdsl_warp_mma": (0, 1, 2), "tdsl_warp_mma_i8": (0, 1, 2),
    "tdsl_warp_mma_f16acc": (0, 1, 2), "tdsl_warp_fill": (0,), "tdsl_warp_store": (2,)}
WARP_MEMORY_ARGS: dict[str, tuple[int, ...]] = {
    "tdsl_warp_ldmatrix_a": (1,), "tdsl_warp_ldmatrix_b": (1,), "tdsl_warp_ldmatrix_b_trans": (1,),
    "tdsl_warp_load_b_i8": (1,), "tdsl_warp_store": (0,)}
WARP_READ_ONLY_ARGS: dict[str, tuple[int, ...]] = {
    "tdsl_warp_ldmatrix_a": (1, 2), "tdsl_warp_ldmatrix_b": (1, 2), "tdsl_warp_ldmatrix_b_trans": (1, 2),
    "tdsl_warp_load_b_i8": (1, 2), "tdsl_warp_mma": (1, 2), "tdsl_warp_mma_i8": (1, 2),
    "tdsl_warp_mma_f16acc": (1, 2), "tdsl_warp_store": (2,)}
# device functions whose fragment (the argument given) is a B tile placed as the registers say,
# not as the description does: code of the kernel itself must not read or write that tile
B_FRAGMENT_ARGS: dict[str, tuple[int, ...]] = {
    "tdsl_warp_ldmatrix_b": (0,), "tdsl_warp_ldmatrix_b_trans": (0,), "tdsl_warp_mma": (2,),
    "tdsl_warp_mma_f16acc": (2,), "tdsl_warp_mma_i8": (2,)}



def memory_tile(fn: str, bits: int) -> tuple[int, int]:
    """The memory tile a tile argument of device function `fn` stands for (`tile_shape`; the
    k-major int8 B tile that `tdsl_warp_load_b_i8` reads is 32 x 16)."""
    return (32, 16) if fn == "tdsl_warp_load_b_i8" else tile_shape(bits)


# ldmatrix device functions -> their variants for an XOR-swizzled shared tile (tdsl.lower.gpu_swizzle)
LDMATRIX_XOR = {"tdsl_mma_ldmatrix_a": "tdsl_mma_ldmatrix_a_xor", "tdsl_mma_ldmatrix_b": "tdsl_mma_ldmatrix_b_xor",
                "tdsl_mma_ldmatrix_b_trans": "tdsl_mma_ldmatrix_b_trans_xor"}

# the arguments each device function only reads (for barrier planning: a read of a shared tile)
READ_ONLY_ARGS: dict[str, tuple[int, ...]] = {
    "tdsl_mma_ldmatrix_a": (1, 2), "tdsl_mma_ldmatrix_b": (1, 2), "tdsl_mma_ldmatrix_b_trans": (1, 2),
    "tdsl_mma_16x16x16_f32": (1, 2), "tdsl_mma_16x16x32_s32": (1, 2), "tdsl_mma_store": (2,),
    **{fn: (1, 2) for fn in LDMATRIX_XOR.values()}, **WARP_READ_ONLY_ARGS}


def swizzle(sch, block) -> None:
    """Lay the shared buffer that `block` writes (a `cache_read(..., "shared")` stage) out with its
    16-byte chunks XOR-swizzled by row, so that ldmatrix reads it free of bank conflicts; the
    same as ``sch.annotate(block, "tdsl.swizzle", True)``. Values and indices in the schedule
    are unchanged; on CUDA, chunk c of row r is stored at c ^ ((r // rows_per_line) % n)
    (`tdsl.lower.gpu_swizzle`)::

        a_sh = sch.cache_read(c, "A", "shared")
        cuda_mma.swizzle(sch, a_sh)        # instead of sch.storage_align(a_sh, 0, 0, 32, 8)
    """
    from ..ir.attrs import SWIZZLE

    sch.annotate(block, SWIZZLE, True)


def tile_shape(bits: int) -> tuple[int, int]:
    """The tile a tile argument of `bits`-bit elements stands for: 16 rows of 32 bytes (int8:
    16 x 32), except 32-bit accumulators, 16 x 16."""
    return (16, 32) if bits == 8 else (16, 16)


def _pair(text: str) -> tuple[PrimFunc, PrimFunc]:
    from ..script import parse

    head, rest = text.split("\n@T.prim_func", 2)[1:]
    return parse("@T.prim_func" + head), parse("@T.prim_func" + rest)


def ldmatrix_name(dtype: str, operand: str) -> str:
    """TVM's name of an ldmatrix intrinsic: ``ldmatrix_name("f16", "a") == "mma_ldmatrix_f16_a"``
    (operand "a", "b" or "b_trans"; dtype "f16", "bf16" or "i8")."""
    return f"mma_ldmatrix_{dtype}_{operand}"


def mma_name(dtype: str, trans_b: bool = False) -> str:
    """``mma_name("f16") == "mma_f16f16f32"``, ``mma_name("i8", True) == "mma_i8i8i32_trans"``."""
    acc = "i32" if dtype in ("i8", "u8") else "f32"
    return f"mma_{dtype}{dtype}{acc}" + ("_trans" if trans_b else "")


def fill_name(acc: str = "f32") -> str:
    return f"mma_fill_16x16_{acc}"


def store_name(acc: str = "f32", scope: str = "global") -> str:
    """TVM's name (with its trailing underscore): ``"mma_store_16x16_f32_global_"``."""
    return f"mma_store_16x16_{acc}_{scope}_"


def _reg(name: str, desc, impl, doc: str) -> None:
    TensorIntrin.register(name, desc, impl, target="cuda", prelude=PRELUDE, doc=doc)


def _register_builtins() -> None:
    for dt in ("f16", "bf16"):
        sa, sb, sc = F16_SCOPES
        for operand, fn in (("a", "tdsl_mma_ldmatrix_a"), ("b", "tdsl_mma_ldmatrix_b"),
                            ("b_trans", "tdsl_mma_ldmatrix_b_trans")):
            dst = sa if operand == "a" else sb
            text = _COPY.format(r=16, c=16, dtype=_TYPES[dt], src="shared", dst=dst, fn=fn,
                                call="F[0, 0], A[0, 0], A[1, 0]")
            _reg(ldmatrix_name(dt, operand), *_pair(text),
                 doc=f"ldmatrix.x4{'.trans' if operand == 'b' else ''} of a 16 x 16 {dt} tile")
        for trans in (False, True):
            text = _MMA.format(k=16, ab=_TYPES[dt], acc="float32", sa=sa, sb=sb, sc=sc, fn="tdsl_mma_16x16x16_f32",
                               bshape="16, 16", bidx="vj, vk" if trans else "vk, vj")
            desc, impl = _pair(text)
            doc = f"2 x mma.sync.m16n8k16 {dt} x {dt} + f32" + (" (B stored n-major)" if trans else "")
            _reg(mma_name(dt, trans), desc, impl, doc=doc)
            if trans:
                _reg(mma_name(dt) + "_trans_b", desc, impl, doc=doc)
    sa, sb, sc = I8_SCOPES
    for dt, ptx in (("i8", "s8"), ("u8", "u8")):
        for operand, fn, dst in (("a", "tdsl_mma_ldmatrix_a", sa), ("b_trans", "tdsl_mma_ldmatrix_b_trans", sb)):
            text = _COPY.format(r=16, c=32, dtype=_TYPES[dt], src="shared", dst=dst, fn=fn,
                                call="F[0, 0], A[0, 0], A[1, 0]")
            _reg(ldmatrix_name(dt, operand), *_pair(text), doc=f"ldmatrix.x4 of a 16 x 32 {_TYPES[dt]} tile")
        text = _MMA.format(k=32, ab=_TYPES[dt], acc="int32", sa=sa, sb=sb, sc=sc, fn="tdsl_mma_16x16x32_s32",
                           bshape="16, 32", bidx="vj, vk")
        desc, impl = _pair(text)
        _reg(mma_name(dt, True), desc, impl, doc=f"2 x mma.sync.m16n8k32 {ptx} x {ptx} + s32")
        _reg(mma_name(dt) + "_trans_b", desc, impl, doc=f"2 x mma.sync.m16n8k32 {ptx} x {ptx} + s32")
    for acc, scope in (("f32", F16_SCOPES[2]), ("i32", I8_SCOPES[2])):
        _reg(fill_name(acc), *_pair(_FILL.format(acc=_TYPES[acc], sc=scope)),
             doc=f"zero a 16 x 16 {acc} accumulator")
        for mem in ("global", "shared"):
            text = _COPY.format(r=16, c=16, dtype=_TYPES[acc], src=scope, dst=mem, fn="tdsl_mma_store",
                                call="F[0, 0], F[1, 0], A[0, 0]")
            _reg(store_name(acc, mem), *_pair(text), doc=f"accumulator tile -> {mem}")


def __getattr__(name: str):
    """TVM's names of `tdsl.intrinsics.cuda_mma_warp` (``LDMATRIX_f16_A_INTRIN``,
    ``shared_16x16_to_ldmatrix_32x8_layout``, ...), as TVM's ``tensor_intrin.cuda`` has them."""
    from . import cuda_mma_warp

    if name.startswith("_") or not hasattr(cuda_mma_warp, name):
        raise AttributeError(f"module 'tdsl.intrinsics.cuda_mma' has no attribute {name!r}")
    return getattr(cuda_mma_warp, name)
