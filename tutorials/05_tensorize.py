# %% [markdown]
# # 05 · Tensorize: micro-kernels and dot products
#
# A tensor intrinsic is a pair of prim_funcs: a *description* (what a small tile computes, in
# plain tdsl) and an *implementation* (how the hardware does it: vector types and LLVM
# intrinsics). `sch.tensorize(loop, name)` checks that the tile under `loop` computes exactly
# the description, and lowering swaps in the implementation. Here we register our own
# intrinsic, tensorize a matmul with it, read a refused tensorize, then use the built-in x86
# intrinsics for this machine: the fp32 register-tile micro-kernel and the int8 dot product.

# %%
import os

import numpy as np

import tdsl
from tdsl import T
from tdsl.intrinsics import x86

SMALL = bool(os.environ.get("TDSL_TUTORIAL_SMALL"))
SKIPPED: list[str] = []  # what this machine cannot run, said at the end
M = N = K = 64 if SMALL else 256


@T.prim_func
def matmul(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"),
           C: T.Buffer((M, N), "float32")):
    for i, j, k in T.grid(M, N, K):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


rng = np.random.default_rng(0)
a = rng.standard_normal((M, K), dtype=np.float32)
b = rng.standard_normal((K, N), dtype=np.float32)
want = a @ b

# %% [markdown]
# ## Our own intrinsic: a 1x8 broadcast-FMA over 4 steps of k
# The description is a tiny matmul, one row of C: `C[1, 8] += A[1, 4] @ B[4, 8]`. Its buffers are *views*
# into the caller's buffers: `strides=("a_s", "a_t")` names strides that are bound to those of
# the matched region, and a constant stride (`1`) is a requirement (rows of B and C must be
# contiguous for a vector load). The implementation broadcasts `A[0, k]` into eight lanes and
# does one `llvm.fma.v8f32` (one AVX2 `vfmadd`) per step of k.

# %%
@T.prim_func
def fma_desc(A: T.Buffer((1, 4), "float32", strides=("a_s", "a_t")),
             B: T.Buffer((4, 8), "float32", strides=("b_s", 1)),
             C: T.Buffer((1, 8), "float32", strides=("c_s", 1))):
    for j, k in T.grid(8, 4):
        with T.block("update"):
            vj, vk = T.axis.remap("SR", [j, k])
            C[0, vj] = C[0, vj] + A[0, vk] * B[vk, vj]


@T.prim_func
def fma_impl(A: T.Buffer((1, 4), "float32", strides=("a_s", "a_t")),
             B: T.Buffer((4, 8), "float32", strides=("b_s", 1)),
             C: T.Buffer((1, 8), "float32", strides=("c_s", 1))):
    for k in T.unroll(4):
        C[0, T.Ramp(0, 1, 8)] = T.call_extern("float32x8", "llvm.fma.v8f32", T.Broadcast(A[0, k], 8),
                                              B[k, T.Ramp(0, 1, 8)], C[0, T.Ramp(0, 1, 8)])


FMA = "tutorial.fma_1x8x4"
if not tdsl.TensorIntrin.exists(FMA):
    tdsl.TensorIntrin.register(FMA, fma_desc, fma_impl, features=("avx2", "fma"))

# %% [markdown]
# ## Tile the matmul to the intrinsic's shape
# Split j and k so that the innermost two loops are an 8 x 4 tile (one row of C), in the
# description's order (j, k). First a mistake: we split j by 16, not 8. tensorize compares
# the tile with the description, says exactly what differs, names our loop and suggests the
# split that fits; the schedule is left as it was.

# %%
sch = tdsl.Schedule(matmul)
c_block = sch.get_block("C")
i, j, k = sch.get_loops(c_block)
j0, j1 = sch.split(j, factors=[None, 16])
k0, k1 = sch.split(k, factors=[None, 4])
sch.reorder(i, j0, k0, j1, k1)
before = sch.func
try:
    sch.tensorize(j1, FMA)
    raise AssertionError("a 16x4 tile must not match an 8x4 intrinsic")
except tdsl.ScheduleError as err:
    print(err)
assert tdsl.structural_equal(sch.func, before)

# %% [markdown]
# The fix: undo the reorder and the splits of k and j, split j by 8, and reorder again.

# %%
sch.undo()   # the reorder
sch.undo()   # the split of k
sch.undo()   # the split of j
i, j, k = sch.get_loops(c_block)
j0, j1 = sch.split(j, factors=[None, 8])
k0, k1 = sch.split(k, factors=[None, 4])
sch.reorder(i, j0, k0, j1, k1)
sch.show()

# %% [markdown]
# ## blockize, then tensorize
# `blockize(j1)` turns the tile under `j1` into an inner block of a new outer block `C_o`
# whose iterators step over tiles; the outer block keeps the reduction's `T.init`. Then
# `tensorize` checks the inner tile against the description and marks the block.

# %%
tile = sch.blockize(j1)
sch.show(diff=True)
sch.tensorize(tile, FMA)
sch.show(diff=True)

# %% [markdown]
# The block still holds the description's code, so the interpreter (and any target that
# cannot run the implementation) computes through it; lowering for this CPU swaps in the
# FMA. Both agree with numpy.

# %%
np.testing.assert_allclose(tdsl.interpret(sch.func, a, b), want, rtol=1e-4, atol=1e-4)
have_avx2 = "avx2" in x86.available()
if have_avx2:
    lowered = tdsl.lower(sch, target="cpu").script()
    assert "llvm.fma.v8f32" in lowered
    mine = tdsl.build(sch, target="cpu")
    np.testing.assert_allclose(mine(a, b), want, rtol=1e-4, atol=1e-4)
    print("\n".join([line for line in lowered.splitlines() if "llvm.fma" in line][:2]))
else:
    print("this CPU has no AVX2+FMA: building with the FMA intrinsic is skipped (the interpreter check ran)")
    SKIPPED.append("building the FMA-intrinsic kernel (no AVX2+FMA)")

# %% [markdown]
# ## The built-in AVX2 fp32 micro-kernel
# `x86.fp32_microkernel(kc)` registers and names the register-tile micro-kernel this CPU runs
# (`x86.avx512.fp32_8x32x<kc>` with AVX-512, `x86.avx2.fp32_4x16x<kc>` with AVX2): it keeps
# a 4 x 16 tile of C in registers across `kc` steps of k (8 ymm accumulators), so C is loaded
# and stored once per tile instead of once per step. The outer loops run in parallel over
# rows of tiles.

# %%
print("x86 ISAs this CPU runs:", x86.available())
try:
    micro = x86.fp32_microkernel(kc=16)
except tdsl.TargetError as err:
    micro = None
    print(f"fp32 micro-kernel skipped: {err}")
    SKIPPED.append("the fp32 micro-kernel (no AVX2/AVX-512)")
if micro is not None:
    mr, nr = (8, 32) if ".avx512." in micro else (4, 16)
    print("using", micro, "-", tdsl.TensorIntrin.get(micro).doc)
    sch2 = tdsl.Schedule(matmul)
    i, j, k = sch2.get_loops(sch2.get_block("C"))
    i0, i1 = sch2.split(i, factors=[None, mr])
    j0, j1 = sch2.split(j, factors=[None, nr])
    k0, k1 = sch2.split(k, factors=[None, 16])
    sch2.reorder(i0, j0, k0, i1, j1, k1)
    sch2.parallel(i0)
    sch2.tensorize(i1, micro)
    sch2.show()
    fast = tdsl.build(sch2, target="cpu")
    np.testing.assert_allclose(fast(a, b), want, rtol=1e-4, atol=1e-4)
    c = np.empty((M, N), "float32")
    naive = tdsl.build(matmul, target="cpu")
    t_naive, t_fast = naive.time(a, b, c), fast.time(a, b, c)
    flops = 2 * M * N * K
    print(f"matmul {M}x{N}x{K}: naive {flops / t_naive / 1e9:.2f} GFLOP/s, "
          f"micro-kernel {flops / t_fast / 1e9:.2f} GFLOP/s (depends on the machine and its load)")

# %% [markdown]
# ## int8: u8 x s8 -> s32 dot products
# The int8 intrinsic computes `C[n] += sum_k u8(A[k]) * s8(B[n, k])` for n lanes and 4 values of
# k, one `vpdpbusd` instruction. It needs VNNI (AVX512-VNNI or AVX-VNNI). B is packed so
# each lane's 4 bytes are contiguous: `Bp[n // L, k // 4, n % L, k % 4]`. The description
# is plain tdsl, so the tensorized schedule is checked by the interpreter on any machine; it
# is built and run only where the CPU has the instruction.

# %%
try:
    dot = x86.int8_dot()
    host_has_vnni = True
except tdsl.TargetError as err:
    host_has_vnni = False
    dot = x86.dot_name("avxvnni")
    print(f"int8 build skipped: {err}")
    SKIPPED.append("running the VNNI int8 kernel (no VNNI; a plain version ran)")
    print(f"(the schedule below is still tensorized with {dot} and checked with the interpreter)")
L = 16 if dot == x86.dot_name("avx512vnni") else 8  # int32 lanes of one vpdpbusd
M8, N8, K8 = 8, 4 * L, 32


@T.prim_func
def matmul_u8s8(A: T.Buffer((M8, K8), "uint8"), Bp: T.Buffer((N8 // L, K8 // 4, L, 4), "int8"),
                C: T.Buffer((M8, N8), "int32")):
    for i, j, k in T.grid(M8, N8, K8):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "int32") * T.cast(Bp[vj // L, vk // 4, vj % L, vk % 4], "int32")


sch3 = tdsl.Schedule(matmul_u8s8)
i, j, k = sch3.get_loops(sch3.get_block("C"))
j0, j1 = sch3.split(j, factors=[None, L])
k0, k1 = sch3.split(k, factors=[None, 4])
sch3.reorder(i, j0, k0, j1, k1)
sch3.tensorize(j1, dot)
sch3.show()

a8 = rng.integers(0, 256, (M8, K8)).astype("uint8")
b8 = rng.integers(-128, 128, (K8, N8)).astype("int8")
packed = np.ascontiguousarray(b8.reshape(K8 // 4, 4, N8 // L, L).transpose(2, 0, 3, 1))
want8 = a8.astype("int32") @ b8.astype("int32")
np.testing.assert_array_equal(tdsl.interpret(sch3.func, a8, packed), want8)
if host_has_vnni:
    got8 = tdsl.build(sch3, target="cpu")(a8, packed)
    np.testing.assert_array_equal(got8, want8)
    print(f"int8 matmul with {dot}: built, run and checked")
else:
    try:
        tdsl.build(sch3, target="cpu")
        raise AssertionError("building a VNNI kernel on a CPU without VNNI must be refused")
    except tdsl.TargetError as err:
        print(f"as expected, building it here is refused: {err}")
    # Without VNNI: the same matmul as plain LLVM code. Asking to vectorize over the L output
    # lanes is not honoured here (the packed Bp is not contiguous in j): the build says so in
    # a tdsl.PerformanceWarning and in kernel.notes, and the kernel stays correct.
    plain = tdsl.Schedule(matmul_u8s8)
    i, j, k = plain.get_loops(plain.get_block("C"))
    j0, j1 = plain.split(j, factors=[None, L])
    plain.reorder(i, j0, k, j1)
    plain.decompose_reduction(plain.get_block("C"), k)
    plain.vectorize(j1)
    plain_kernel = tdsl.build(plain, target="cpu")
    np.testing.assert_array_equal(plain_kernel(a8, packed), want8)
    print("int8 matmul without VNNI: built as plain code and checked; notes:", *plain_kernel.notes, sep="\n  ")

# %% [markdown]
# ## Tensor intrinsics that fit by themselves, and library calls
#
# Tensorize needs whole tiles in the intrinsic's loop order. `sch.auto_tensorize(block, name)`
# does that work: it maps the block's iterators onto the description's, copies operands whose
# layout does not fit (`reindex`, packed with `transform_layout`), pads extents no tile divides
# (`pad_einsum`), splits, reorders and tensorizes, and returns the tensorized block. Odd sizes
# and a transposed B:

# %%
@T.prim_func
def odd(A: T.Buffer((37, 23), "float32"), Bt: T.Buffer((29, 23), "float32"), C: T.Buffer((37, 29), "float32")):
    for i, j, k in T.grid(37, 29, 23):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * Bt[vj, vk]


a_odd = rng.standard_normal((37, 23), dtype=np.float32)
bt_odd = rng.standard_normal((29, 23), dtype=np.float32)
if "avx2" in x86.available():
    sch4 = tdsl.Schedule(odd)
    tile = sch4.auto_tensorize(sch4.get_block("C"), x86.fp32_microkernel(16))
    print("auto_tensorize made", tile, "; the copies it added:",
          [b.name for b in sch4.func.body.block.alloc_buffers])
    np.testing.assert_allclose(tdsl.build(sch4, target="cpu")(a_odd, bt_odd), a_odd @ bt_odd.T, rtol=1e-4, atol=1e-4)
else:
    SKIPPED.append("auto_tensorize onto the fp32 micro-kernel (no AVX2)")

# %% [markdown]
# A library routine is a tensor intrinsic too: `"blas.sgemm"` calls the BLAS numpy already
# loads, for any constant shape and layout; the block's other neighbours (an epilogue) stay generated
# code, and the interpreter still computes through the description.

# %%
sch5 = tdsl.Schedule(odd)
sch5.tensorize(sch5.get_block("C"), "blas.sgemm")
kernel5 = tdsl.build(sch5, target="cpu")
assert "tdsl_blas_" in kernel5.source
np.testing.assert_allclose(kernel5(a_odd, bt_odd), a_odd @ bt_odd.T, rtol=1e-4, atol=1e-4)
np.testing.assert_allclose(tdsl.interpret(sch5, a_odd, bt_odd), a_odd @ bt_odd.T, rtol=1e-4, atol=1e-4)
print("blas.sgemm (layout nt, 37x29x23): built, run and checked")
if SKIPPED:  # say what did not run here rather than "all checks passed"
    print(f"05_tensorize: the checks that ran passed; skipped here: {'; '.join(SKIPPED)}")
else:
    print("05_tensorize: all checks passed")
