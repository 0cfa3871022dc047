# mypy: disable-error-code="valid-type"
# (mypy reads the T.Buffer(...) parameter annotations of the TVMScript intrinsics below as types)
"""TVM's mma tensor intrinsics in TVM's own form: fragments in scope "warp", (lane, element).

TVM's schedules (``tvm.tir.tensor_intrin.cuda``) keep each mma fragment tile as a ``(32, n)``
buffer in scope ``"warp"``: row = the lane that holds an element, column = its place among
the lane's registers. A schedule gets there with ``sch.cache_read(block, 0, "warp")`` and
``sch.transform_layout(block, ("write", 0), index_map)``, ``index_map`` built from the layouts
below; these intrinsics' descriptions say the same with ``T.meta_var``::

    thread_id, local_id = T.meta_var(shared_16x16_to_ldmatrix_32x8_layout(v0, v1))
    warp[thread_id, local_id] = shared[v0, v1]

The names are TVM's (``LDMATRIX_f16_A_INTRIN == "mma_ldmatrix_f16_a"``, ...). Where tdsl's own
fragment-scope intrinsic (`tdsl.intrinsics.cuda_mma`, scopes ``m16n8k16.*``) has the same name,
this one is registered as ``name + ".warp"`` and ``sch.tensorize(loop, name)`` takes the form
whose scopes the code uses. Built for CUDA, the pass ``lower_warp_memory``
(`tdsl.lower.gpu_warp_memory`) drops the lane axis: each lane keeps its own n registers per tile,
and the implementations below call the device functions of `tdsl.intrinsics.cuda_mma` on them.

A layout is the lane/register placement of the PTX ISA's mma fragments for A (16 x 16 f16,
16 x 32 s8), the k-major int8 B (32 x 16) and the accumulator (16 x 16). For the B operand of
f16 (and the n-major int8 B) TVM's description places the elements differently from the
registers ldmatrix fills; as in TVM that is invisible while only the intrinsics touch the
tile (each computes its description), and ``lower_warp_memory`` refuses a kernel whose code
reads or writes such a B tile itself.
"""
from __future__ import annotations

from ..ir import PrimFunc
from ..script import T
from .cuda_mma import PRELUDE
from .registry import TensorIntrin

WARP_SUFFIX = ".warp"


def shared_16x16_to_ldmatrix_32x8_layout(i, j):
    """(row, column) of a 16 x 16 tile -> (lane, register): the mma A / accumulator layout."""
    thread_id = 4 * (i % 8) + (j % 8) // 2
    return thread_id, 4 * (j // 8) + (i // 8) * 2 + (j % 2)


def shared_16x32_to_ldmatrix_32x16_layout(i, j):
    """(row, column) of a 16 x 32 int8 tile -> (lane, register): the m16n8k32 A layout."""
    thread_id = 4 * (i % 8) + (j % 16) // 4
    return thread_id, 8 * (j // 16) + (i // 8) * 4 + j % 4


def shared_32x16_to_ldmatrix_32x16_layout(i, j):
    """(k, n) of a 32 x 16 int8 tile -> (lane, register): the m16n8k32 B layout."""
    thread_id = (i % 16) // 4 + 4 * (j % 8)
    return thread_id, 8 * (j // 8) + (i // 16) * 4 + i % 4


def ldmatrix_32x8_to_shared_16x16_layout(thread_id, local_id):
    """The inverse of shared_16x16_to_ldmatrix_32x8_layout."""
    row = 8 * (local_id % 4 // 2) + (thread_id // 4)
    col = 8 * (local_id // 4) + (thread_id % 4) * 2 + (local_id % 2)
    return row, col


LDMATRIX_f16_A_INTRIN = "mma_ldmatrix_f16_a"
LDMATRIX_f16_B_INTRIN = "mma_ldmatrix_f16_b"
LDMATRIX_f16_B_TRANS_INTRIN = "mma_ldmatrix_f16_b_trans"
LDMATRIX_i8_A_INTRIN = "mma_ldmatrix_i8_a"
LDMATRIX_i8_B_INTRIN = "mma_ldmatrix_i8_b"
LDMATRIX_i8_B_TRANS_INTRIN = "mma_ldmatrix_i8_b_trans"
MMA_f16f16f32_INTRIN = "mma_f16f16f32"
MMA_f16f16f32_TRANS_B_INTRIN = "mma_f16f16f32_trans_b"
MMA_f16f16f16_INTRIN = "mma_f16f16f16"
MMA_f16f16f16_TRANS_B_INTRIN = "mma_f16f16f16_trans_b"
MMA_i8i8i32_INTRIN = "mma_i8i8i32"
MMA_i8i8i32_TRANS_B_INTRIN = "mma_i8i8i32_trans_b"
MMA_fill_16x16_f32_INTRIN = "mma_fill_16x16_f32"
MMA_fill_16x16_f16_INTRIN = "mma_fill_16x16_f16"
MMA_fill_16x16_i32_INTRIN = "mma_fill_16x16_i32"
MMA_store_16x16_f32_global_INTRIN = "mma_store_16x16_f32_global_"
MMA_store_16x16_f16_global_INTRIN = "mma_store_16x16_f16_global_"
MMA_store_16x16_i32_global_INTRIN = "mma_store_16x16_i32_global_"

# Device functions over one lane's registers of a tile (`frag`, the first of them) and a memory
# tile given by elements (0, 0) and (1, 0) (see tdsl.intrinsics.cuda_mma). ldmatrix, mma and the
# store are cuda_mma's own; int8 B stored k-major cannot be read by ldmatrix (8-bit elements
# cannot be transposed by it), so each lane loads its 16 bytes itself.
WARP_PRELUDE = PRELUDE + r"""
#define tdsl_warp_ldmatrix_a tdsl_mma_ldmatrix_a
#define tdsl_warp_ldmatrix_b tdsl_mma_ldmatrix_b
#define tdsl_warp_ldmatrix_b_trans tdsl_mma_ldmatrix_b_trans
#define tdsl_warp_mma tdsl_mma_16x16x16_f32
#define tdsl_warp_mma_i8 tdsl_mma_16x16x32_s32
#define tdsl_warp_fill tdsl_mma_fill
#define tdsl_warp_store tdsl_mma_store
__device__ __forceinline__ int tdsl_warp_load_b_i8(signed char& frag, const signed char& row0, const signed char& row1) {
  int lane = threadIdx.x & 31, g = lane >> 2, t = lane % 4;   // register 8h + i: k = 4t + i % 4 + 16 (i / 4), n = 8h + g
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 8; ++i) (&frag)[8 * h + i] = *(const signed char*)tdsl_mma_row(&row0, &row1, 4 * t + i % 4 + 16 * (i / 4), 8 * h + g);
  return 0;
}
#if !defined(TDSL_CUDA_EMU_H)
__device__ __forceinline__ int tdsl_warp_mma_f16acc(half& c, const half& a, const half& b) {
  const unsigned* A = (const unsigned*)&a;
  const unsigned* B = (const unsigned*)&b;
  unsigned* C = (unsigned*)&c;
#pragma unroll
  for (int h = 0; h < 2; ++h)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%8, %9};\n"
                 : "=r"(C[2 * h]), "=r"(C[2 * h + 1])
                 : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[2 * h]), "r"(B[2 * h + 1]),
                   "r"(C[2 * h]), "r"(C[2 * h + 1]));
  return 0;
}
#else
__device__ __forceinline__ int tdsl_warp_mma_f16acc(half& c, const half& a, const half& b) {
  const unsigned* B = (const unsigned*)&b;
  unsigned* C = (unsigned*)&c;
#pragma unroll
  for (int h = 0; h < 2; ++h) tdsl_ptx_mma_m16n8k16_f16((const unsigned*)&a, B + 2 * h, C + 2 * h);
  return 0;
}
#endif
"""

_DTYPES = {"f16": "float16", "i8": "int8", "f32": "float32", "i32": "int32"}


def warp_name(name: str) -> str:
    """The name the warp form of TVM's intrinsic `name` is registered under: `name` itself, or
    ``name + ".warp"`` where tdsl's fragment-scope intrinsic holds `name`."""
    return name + WARP_SUFFIX if name in _TAKEN else name


_TAKEN: set[str] = set()


def _reg(name: str, desc, impl, doc: str) -> None:
    from .registry import _REGISTRY

    if name in _REGISTRY:
        _TAKEN.add(name)
    TensorIntrin.register(warp_name(name), desc, impl, target="cuda", prelude=WARP_PRELUDE, doc=doc,
                          form_of=name if name in _TAKEN else None)


def get_ldmatrix_intrin(k_dim: int, dtype: str, matrix_name: str, transposed: bool) -> tuple[PrimFunc, PrimFunc]:
    """(desc, impl) of loading a shared tile into a warp tile: A (16 x k_dim), B (k_dim x 16, or
    16 x k_dim with `transposed`)."""
    local_size = 16 * k_dim // 32
    if matrix_name == "A":
        rows, cols = 16, k_dim
        index_map = shared_16x16_to_ldmatrix_32x8_layout if k_dim == 16 else shared_16x32_to_ldmatrix_32x16_layout
        fn = "tdsl_warp_ldmatrix_a"
    elif transposed:
        rows, cols = 16, k_dim
        index_map = shared_16x16_to_ldmatrix_32x8_layout if k_dim == 16 else shared_16x32_to_ldmatrix_32x16_layout
        fn = "tdsl_warp_ldmatrix_b_trans"
    else:
        rows, cols = k_dim, 16
        index_map = shared_16x16_to_ldmatrix_32x8_layout if k_dim == 16 else shared_32x16_to_ldmatrix_32x16_layout
        fn = "tdsl_warp_ldmatrix_b" if k_dim == 16 else "tdsl_warp_load_b_i8"

    @T.prim_func
    def ldmatrix_desc(shared: T.Buffer((rows, cols), dtype, strides=("s0", 1), scope="shared"),
                      warp: T.Buffer((32, local_size), dtype, scope="warp")):
        for ax0, ax1 in T.grid(rows, cols):
            with T.block("shared_warp"):
                v0, v1 = T.axis.remap("SS", [ax0, ax1])
                thread_id, local_id = T.meta_var(index_map(v0, v1))
                warp[thread_id, local_id] = shared[v0, v1]

    @T.prim_func
    def ldmatrix_impl(shared: T.Buffer((rows, cols), dtype, strides=("s0", 1), scope="shared"),
                      warp: T.Buffer((32, local_size), dtype, scope="warp")):
        T.evaluate(T.call_extern("int32", fn, warp[0, 0], shared[0, 0], shared[1, 0]))

    return ldmatrix_desc, ldmatrix_impl


def _swap(i, j, flag: bool):
    return (j, i) if flag else (i, j)


def get_mma_intrin(k_dim: int, in_dtype: str, out_dtype: str, b_transposed: bool) -> tuple[PrimFunc, PrimFunc]:
    """(desc, impl) of C[16 x 16] += A[16 x k_dim] B[k_dim x 16] (B[16 x k_dim] transposed) on
    warp tiles, as two mma.sync m16n8k{k_dim}."""
    local_size = 16 * k_dim // 32
    index_map_c = shared_16x16_to_ldmatrix_32x8_layout
    if k_dim == 16:
        index_map_a = index_map_b = shared_16x16_to_ldmatrix_32x8_layout
        fn = "tdsl_warp_mma" if out_dtype == "float32" else "tdsl_warp_mma_f16acc"
    else:
        index_map_a = shared_16x32_to_ldmatrix_32x16_layout
        index_map_b = shared_16x32_to_ldmatrix_32x16_layout if b_transposed else shared_32x16_to_ldmatrix_32x16_layout
        fn = "tdsl_warp_mma_i8"
    cast = in_dtype != out_dtype

    @T.prim_func
    def mma_desc(A: T.Buffer((32, local_size), in_dtype, scope="warp"),
                 B: T.Buffer((32, local_size), in_dtype, scope="warp"),
                 C: T.Buffer((32, 8), out_dtype, scope="warp")):
        for i, j, k in T.grid(16, 16, k_dim):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                b_row, b_col = T.meta_var(_swap(vk, vj, b_transposed))
                thread_id_c, local_id_c = T.meta_var(index_map_c(vi, vj))
                thread_id_a, local_id_a = T.meta_var(index_map_a(vi, vk))
                thread_id_b, local_id_b = T.meta_var(index_map_b(b_row, b_col))
                if cast:
                    C[thread_id_c, local_id_c] = C[thread_id_c, local_id_c] + T.cast(
                        A[thread_id_a, local_id_a], out_dtype) * T.cast(B[thread_id_b, local_id_b], out_dtype)
                else:
                    C[thread_id_c, local_id_c] = C[thread_id_c, local_id_c] + \
                        A[thread_id_a, local_id_a] * B[thread_id_b, local_id_b]

    @T.prim_func
    def mma_impl(A: T.Buffer((32, local_size), in_dtype, scope="warp"),
                 B: T.Buffer((32, local_size), in_dtype, scope="warp"),
                 C: T.Buffer((32, 8), out_dtype, scope="warp")):
        T.evaluate(T.call_extern("int32", fn, C[0, 0], A[0, 0], B[0, 0]))

    return mma_desc, mma_impl


def get_mma_fill_intrin(dtype: str) -> tuple[PrimFunc, PrimFunc]:
    """(desc, impl) of zeroing a 16 x 16 accumulator warp tile."""
    index_map = shared_16x16_to_ldmatrix_32x8_layout

    @T.prim_func
    def mma_fill_desc(C_warp: T.Buffer((32, 8), dtype, scope="warp")):
        for i0, i1 in T.grid(16, 16):
            with T.block("C_warp"):
                i, j = T.axis.remap("SS", [i0, i1])
                thread_id, local_id = T.meta_var(index_map(i, j))
                C_warp[thread_id, local_id] = T.cast(0, dtype)

    @T.prim_func
    def mma_fill_impl(C_warp: T.Buffer((32, 8), dtype, scope="warp")):
        T.evaluate(T.call_extern("int32", "tdsl_warp_fill", C_warp[0, 0], T.cast(0, dtype)))

    return mma_fill_desc, mma_fill_impl


def get_mma_store_intrin(dtype: str, scope: str = "global") -> tuple[PrimFunc, PrimFunc]:
    """(desc, impl) of storing a 16 x 16 accumulator warp tile to memory."""
    index_map = shared_16x16_to_ldmatrix_32x8_layout

    @T.prim_func
    def mma_store_desc(C_warp: T.Buffer((32, 8), dtype, scope="warp"),
                       C: T.Buffer((16, 16), dtype, strides=("s0", 1), scope=scope)):
        for i0, i1 in T.grid(16, 16):
            with T.block("C_warp"):
                v0, v1 = T.axis.remap("SS", [i0, i1])
                thread_id, local_id = T.meta_var(index_map(v0, v1))
                C[v0, v1] = C_warp[thread_id, local_id]

    @T.prim_func
    def mma_store_impl(C_warp: T.Buffer((32, 8), dtype, scope="warp"),
                       C: T.Buffer((16, 16), dtype, strides=("s0", 1), scope=scope)):
        T.evaluate(T.call_extern("int32", "tdsl_warp_store", C[0, 0], C[1, 0], C_warp[0, 0]))

    return mma_store_desc, mma_store_impl


def _register_builtins() -> None:
    for dt, k in (("f16", 16), ("i8", 32)):
        _reg(f"mma_ldmatrix_{dt}_a", *get_ldmatrix_intrin(k, _DTYPES[dt], "A", False),
             doc=f"warp tile <- shared 16 x {k} {_DTYPES[dt]} A tile (ldmatrix.x4)")
        _reg(f"mma_ldmatrix_{dt}_b", *get_ldmatrix_intrin(k, _DTYPES[dt], "B", False),
             doc=f"warp tile <- shared {k} x 16 {_DTYPES[dt]} B tile, k-major")
        _reg(f"mma_ldmatrix_{dt}_b_trans", *get_ldmatrix_intrin(k, _DTYPES[dt], "B", True),
             doc=f"warp tile <- shared 16 x {k} {_DTYPES[dt]} B tile, n-major (ldmatrix.x4)")
    for name, k, ab, acc in (("f16f16f32", 16, "float16", "float32"), ("f16f16f16", 16, "float16", "float16"),
                             ("i8i8i32", 32, "int8", "int32")):
        for trans in (False, True):
            _reg(f"mma_{name}" + ("_trans_b" if trans else ""), *get_mma_intrin(k, ab, acc, trans),
                 doc=f"2 x mma.sync.m16n8k{k} {ab} -> {acc} on warp tiles" + (" (B n-major)" if trans else ""))
    for acc in ("f32", "f16", "i32"):
        dtype = {"f32": "float32", "f16": "float16", "i32": "int32"}[acc]
        _reg(f"mma_fill_16x16_{acc}", *get_mma_fill_intrin(dtype), doc=f"zero a 16 x 16 {dtype} warp tile")
        _reg(f"mma_store_16x16_{acc}_global_", *get_mma_store_intrin(dtype),
             doc=f"16 x 16 {dtype} warp tile -> global")
