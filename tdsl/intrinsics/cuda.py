"""CUDA tensor-core intrinsics: WMMA m16n16k16, fp16 inputs, fp32 accumulation.

Five intrinsics, TensorIR style, each on 16 x 16 tiles of fragment buffers, whose scopes
(``wmma.matrix_a``, ``wmma.matrix_b``, ``wmma.accumulator``) are allocated with
``T.alloc_buffer(..., scope=...)``:

* ``cuda.wmma.fill_16x16_f32``                      ``Cf[i, j] = 0``
* ``cuda.wmma.load_a_16x16_f16_<shared|global>``    ``Af[i, k] = A[i, k]``
* ``cuda.wmma.load_b_16x16_f16_<shared|global>``    ``Bf[k, j] = B[k, j]``
* ``cuda.wmma.mma_16x16x16_f16f32``                 ``Cf[i, j] += f32(Af[i, k]) * f32(Bf[k, j])``
* ``cuda.wmma.store_16x16_f32_<shared|global>``     ``C[i, j] = Cf[i, j]``

Every thread of a warp calls them together (a warp-level operation): on CUDA a tensorized
block runs on the 32 lanes of a warp, an implicit threadIdx.x of extent 32 (TVM's rule; see
tdsl.backends.cuda.lower_gpu). Schedule it under blockIdx loops with the warps on threadIdx.y/z
(or inside an explicit threadIdx.x loop of 32 lanes it does not use); each lane holds its own
part of each fragment, and the CUDA lowering shrinks fragment buffers to one warp's tiles.

How the implementation reaches CUDA C++: each is one extern call of a device function of
`PRELUDE` (``tdsl_wmma_fill_f32(Cf[...], 0.0f)``, ...) whose fragment and pointer arguments are
buffer elements passed by reference, so the generated code needs no pointer syntax. A
fragment buffer is a per-thread ``local`` array in which the fragment starting at element
(16a, 16b) keeps its ``num_elements`` (<= 16) registers at that element. The lowering pass puts
the prelude in the function attribute ``"tdsl.cuda_prelude"`` (the CUDA codegen must emit it
at the top of the source) and gives fragment buffers the scope ``local`` on CUDA. Built for
the CPU, the blocks compute through their descriptions.
"""
from __future__ import annotations

from ..ir.attrs import CUDA_PRELUDE
from .registry import TensorIntrin

PRELUDE_ATTR = CUDA_PRELUDE  # the function attribute lowering puts PRELUDE in (tdsl.ir.attrs)

FRAGMENT_SCOPES = ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator")

PRELUDE = r"""#include <mma.h>
#include <cuda_fp16.h>
namespace tdsl_wmma {
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, half, nvcuda::wmma::row_major> FragA;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, half, nvcuda::wmma::row_major> FragB;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> FragC;
template <typename F, typename T> __device__ __forceinline__ void get(F& f, const T& src) {
#pragma unroll
  for (int t = 0; t < f.num_elements; ++t) f.x[t] = (&src)[t];
}
template <typename F, typename T> __device__ __forceinline__ void put(const F& f, T& dst) {
#pragma unroll
  for (int t = 0; t < f.num_elements; ++t) (&dst)[t] = f.x[t];
}
}  // namespace tdsl_wmma
__device__ __forceinline__ int tdsl_wmma_fill_f32(float& c, float value) {
  tdsl_wmma::FragC f; nvcuda::wmma::fill_fragment(f, value); tdsl_wmma::put(f, c); return 0;
}
__device__ __forceinline__ int tdsl_wmma_load_a(half& a, const half& src, int ldm) {
  tdsl_wmma::FragA f; nvcuda::wmma::load_matrix_sync(f, &src, ldm); tdsl_wmma::put(f, a); return 0;
}
__device__ __forceinline__ int tdsl_wmma_load_b(half& b, const half& src, int ldm) {
  tdsl_wmma::FragB f; nvcuda::wmma::load_matrix_sync(f, &src, ldm); tdsl_wmma::put(f, b); return 0;
}
__device__ __forceinline__ int tdsl_wmma_mma_f16f32(float& c, const half& a, const half& b) {
  tdsl_wmma::FragA fa; tdsl_wmma::FragB fb; tdsl_wmma::FragC fc;
  tdsl_wmma::get(fa, a); tdsl_wmma::get(fb, b); tdsl_wmma::get(fc, c);
  nvcuda::wmma::mma_sync(fc, fa, fb, fc); tdsl_wmma::put(fc, c); return 0;
}
// `dst` is taken as const because a code generator may declare an output that is only written
// through this call as a const pointer; the memory itself is writable.
__device__ __forceinline__ int tdsl_wmma_store_f32(const float& dst, const float& c, int ldm) {
  tdsl_wmma::FragC f; tdsl_wmma::get(f, c);
  nvcuda::wmma::store_matrix_sync(const_cast<float*>(&dst), f, ldm, nvcuda::wmma::mem_row_major); return 0;
}
"""

_FILL = '''
@T.prim_func
def fill_desc(C: T.Buffer((16, 16), "float32", strides=("c_s", 1), scope="wmma.accumulator")):
    for i, j in T.grid(16, 16):
        with T.block("fill"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = T.float32(0)

@T.prim_func
def fill_impl(C: T.Buffer((16, 16), "float32", strides=("c_s", 1), scope="wmma.accumulator")):
    T.evaluate(T.call_extern("int32", "tdsl_wmma_fill_f32", C[0, 0], T.float32(0)))
'''

_LOAD = '''
@T.prim_func
def load_desc(A: T.Buffer((16, 16), "float16", strides=("a_s", 1), scope="{src}"),
              F: T.Buffer((16, 16), "float16", strides=("f_s", 1), scope="wmma.matrix_{ab}")):
    for i, j in T.grid(16, 16):
        with T.block("load"):
            vi, vj = T.axis.remap("SS", [i, j])
            F[vi, vj] = A[vi, vj]

@T.prim_func
def load_impl(A: T.Buffer((16, 16), "float16", strides=("a_s", 1), scope="{src}"),
              F: T.Buffer((16, 16), "float16", strides=("f_s", 1), scope="wmma.matrix_{ab}")):
    T.evaluate(T.call_extern("int32", "tdsl_wmma_load_{ab}", F[0, 0], A[0, 0], a_s))
'''

_MMA = '''
@T.prim_func
def mma_desc(A: T.Buffer((16, 16), "float16", strides=("a_s", 1), scope="wmma.matrix_a"),
             B: T.Buffer((16, 16), "float16", strides=("b_s", 1), scope="wmma.matrix_b"),
             C: T.Buffer((16, 16), "float32", strides=("c_s", 1), scope="wmma.accumulator")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("mma"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")

@T.prim_func
def mma_impl(A: T.Buffer((16, 16), "float16", strides=("a_s", 1), scope="wmma.matrix_a"),
             B: T.Buffer((16, 16), "float16", strides=("b_s", 1), scope="wmma.matrix_b"),
             C: T.Buffer((16, 16), "float32", strides=("c_s", 1), scope="wmma.accumulator")):
    T.evaluate(T.call_extern("int32", "tdsl_wmma_mma_f16f32", C[0, 0], A[0, 0], B[0, 0]))
'''

_STORE = '''
@T.prim_func
def store_desc(C: T.Buffer((16, 16), "float32", strides=("c_s", 1), scope="wmma.accumulator"),
               D: T.Buffer((16, 16), "float32", strides=("d_s", 1), scope="{dst}")):
    for i, j in T.grid(16, 16):
        with T.block("store"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = C[vi, vj]

@T.prim_func
def store_impl(C: T.Buffer((16, 16), "float32", strides=("c_s", 1), scope="wmma.accumulator"),
               D: T.Buffer((16, 16), "float32", strides=("d_s", 1), scope="{dst}")):
    T.evaluate(T.call_extern("int32", "tdsl_wmma_store_f32", D[0, 0], C[0, 0], d_s))
'''

# For the CUDA lowering's buffer compaction: which arguments of each device function are
# fragments, and the tile (rows, columns) a fragment argument stands for. A fragment argument
# carries no leading dimension (its registers are contiguous from the element passed), so its
# buffer may be shrunk to the tiles a warp touches; the memory arguments (with `ldm`) may not.
FRAGMENT_TILE = (16, 16)
FRAGMENT_ARGS: dict[str, tuple[int, ...]] = {
    "tdsl_wmma_fill_f32": (0,),
    "tdsl_wmma_load_a": (0,),
    "tdsl_wmma_load_b": (0,),
    "tdsl_wmma_mma_f16f32": (0, 1, 2),
    "tdsl_wmma_store_f32": (1,),
}

FILL = "cuda.wmma.fill_16x16_f32"
MMA = "cuda.wmma.mma_16x16x16_f16f32"


def load_a(scope: str = "shared") -> str:
    return f"cuda.wmma.load_a_16x16_f16_{scope}"


def load_b(scope: str = "shared") -> str:
    return f"cuda.wmma.load_b_16x16_f16_{scope}"


def store(scope: str = "global") -> str:
    return f"cuda.wmma.store_16x16_f32_{scope}"


def _pair(text: str) -> tuple:
    """The two prim_funcs of a template (desc first, impl second)."""
    from ..script import parse

    head, rest = text.split("\n@T.prim_func", 2)[1:]
    return parse("@T.prim_func" + head), parse("@T.prim_func" + rest)


def _register_builtins() -> None:
    kw = {"target": "cuda", "prelude": PRELUDE}
    TensorIntrin.register(FILL, *_pair(_FILL), doc="wmma::fill_fragment(acc, 0)", **kw)
    TensorIntrin.register(MMA, *_pair(_MMA), doc="wmma::mma_sync, fp16 x fp16 + fp32", **kw)
    for scope in ("shared", "global"):
        TensorIntrin.register(load_a(scope), *_pair(_LOAD.format(src=scope, ab="a")),
                              doc=f"wmma::load_matrix_sync(matrix_a) from {scope}", **kw)
        TensorIntrin.register(load_b(scope), *_pair(_LOAD.format(src=scope, ab="b")),
                              doc=f"wmma::load_matrix_sync(matrix_b) from {scope}", **kw)
        TensorIntrin.register(store(scope), *_pair(_STORE.format(dst=scope)),
                              doc=f"wmma::store_matrix_sync to {scope}", **kw)
