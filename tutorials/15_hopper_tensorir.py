# %% [markdown]
# # 15 · The warp-specialized Hopper GEMM, written in TensorIR
#
# Tutorial 14 wrote the producer/consumer GEMM as CUDA C++. Here the same kernel is a TensorIR
# function: TVM's mbarrier builtins (`T.ptx_init_barrier_thread_count`, `T.ptx_arrive_barrier`,
# `T.ptx_arrive_barrier_expect_tx`, `T.ptx_wait_barrier`) and tdsl's `T.ptx_tma_load` and
# `T.ptx_wgmma` are statements of the function, so it prints, parses back, runs in the
# interpreter and builds for the GPU like any other.
#
# The threads of a block are two warpgroups (`threadIdx.y`): `ty == 0` is the producer (one
# thread issues the TMA loads of each K stage into a ring of two shared stages), `ty == 1` the
# consumers (wait on the stage's "full" barrier, four k16 wgmmas, arrive on its "empty" barrier).
# The K loop is outside the thread loops, so a run one statement after another (the
# interpreter) keeps the meaning: barrier waits have nothing to wait for, a TMA load is a copy, a
# wgmma adds the thread's own accumulators of A B^T. On the GPU the producer runs ahead by up to
# two stages; the CUDA backend places no `__syncthreads()` in the K loop, because the stages are
# written only by TMA and ordered by the mbarriers.
# %%
import importlib.util
import shutil

import numpy as np

import tdsl
from tdsl import T
from tdsl.backends.cuda import sm90

M, N, K = 128, 64, 256
BM, BN, BK, S = 64, 32, 64, 2          # 64 halves = 128-byte rows: the TMA and wgmma 128B swizzle
KT, TX_BYTES = K // BK, (BM * BK + BN * BK) * 2


@T.prim_func
def ws_gemm(tmap_a: T.Buffer((128,), "uint8"), tmap_b: T.Buffer((128,), "uint8"),  # noqa: C901 (a kernel)
            A: T.Buffer((M, K), "float16"), B: T.Buffer((N, K), "float16"), C: T.Buffer((M, N), "float32")):
    A_sh = T.alloc_buffer((S, BM, BK), "float16", scope="shared")
    B_sh = T.alloc_buffer((S, BN, BK), "float16", scope="shared")
    full = T.alloc_buffer((S,), "uint64", scope="shared")
    empty = T.alloc_buffer((S,), "uint64", scope="shared")
    acc = T.alloc_buffer((128, BN // 2), "float32", scope="local")
    for by in T.thread_binding(M // BM, thread="blockIdx.y"):
        for bx in T.thread_binding(N // BN, thread="blockIdx.x"):
            for ty in T.thread_binding(2, thread="threadIdx.y"):
                for tx in T.thread_binding(128, thread="threadIdx.x"):
                    if ty == 0 and tx == 0:
                        for s in range(S):
                            T.evaluate(T.ptx_init_barrier_thread_count(full[s], 1))
                            T.evaluate(T.ptx_init_barrier_thread_count(empty[s], 128))
                    if ty == 1:
                        for i in T.unroll(BN // 2):
                            acc[tx, i] = T.float32(0)
            for ko in range(KT):
                for ty in T.thread_binding(2, thread="threadIdx.y"):
                    for tx in T.thread_binding(128, thread="threadIdx.x"):
                        if ty == 0:
                            if tx == 0:
                                if ko >= S:
                                    T.evaluate(T.ptx_wait_barrier(empty[ko % S], (ko // S + 1) % 2))
                                T.evaluate(T.ptx_arrive_barrier_expect_tx(full[ko % S], TX_BYTES))
                                T.evaluate(T.ptx_tma_load(A_sh[ko % S, 0, 0], A[by * BM, ko * BK], tmap_a[0],
                                                          full[ko % S]))
                                T.evaluate(T.ptx_tma_load(B_sh[ko % S, 0, 0], B[bx * BN, ko * BK], tmap_b[0],
                                                          full[ko % S]))
                        else:
                            T.evaluate(T.ptx_wait_barrier(full[ko % S], (ko // S) % 2))
                            T.evaluate(T.ptx_wgmma_fence())
                            for j in T.unroll(BK // 16):
                                T.evaluate(T.ptx_wgmma(acc[tx, 0], A_sh[ko % S, 0, 16 * j], B_sh[ko % S, 0, 16 * j],
                                                       BN, tx))
                            T.evaluate(T.ptx_wgmma_commit_group())
                            T.evaluate(T.ptx_wgmma_wait_group(0))
                            T.evaluate(T.ptx_arrive_barrier(empty[ko % S]))
            for ty in T.thread_binding(2, thread="threadIdx.y"):
                for tx in T.thread_binding(128, thread="threadIdx.x"):
                    if ty == 1:   # wgmma's accumulator layout: thread tx, element i -> (row, column)
                        for i in T.unroll(BN // 2):
                            C[by * BM + 16 * (tx // 32) + tx % 32 // 4 + 8 * (i // 2 % 2),
                              bx * BN + 8 * (i // 4) + 2 * (tx % 4) + i % 2] = acc[tx, i]


print(ws_gemm.script())
assert tdsl.parse(ws_gemm.script()).script() == ws_gemm.script()

# %% [markdown]
# The tensor maps: tdsl's own encoding for the interpreter's and the emulator's loads (on a GPU
# the driver's `cuTensorMapEncodeTiled` makes them, with the same box and the 128B swizzle).
# %%
rng = np.random.default_rng(0)
a = rng.integers(-2, 3, (M, K)).astype(np.float16)
b = rng.integers(-2, 3, (N, K)).astype(np.float16)
want = a.astype(np.float32) @ b.astype(np.float32).T
maps = sm90.emulator_tensor_map(a, (BM, BK), "128B"), sm90.emulator_tensor_map(b, (BN, BK), "128B")
np.testing.assert_array_equal(tdsl.interpret(ws_gemm, *maps, a, b), want)
print("interpreter: equal to numpy")
SKIPPED = []
if any(shutil.which(c) for c in ("g++", "clang++", "c++")):
    kernel = tdsl.build(ws_gemm, target="cuda", emulate=True)
    c = np.zeros_like(want)
    kernel(*maps, a, b, c)
    np.testing.assert_array_equal(c, want)
    body = kernel.source[kernel.source.index("__global__"):]
    print(body[body.index("for (int ko"):body.index("  if (ty == 1) {\n    C[")])
    print("emulator: equal to numpy;", body.count("__syncthreads()"), "__syncthreads() (after the barriers' init)")
else:
    SKIPPED.append("the emulator (no host C++ compiler)")

# %% [markdown]
# For an H100/H200: NVRTC builds it for `sm_90a`; the SASS has HGMMA (wgmma), UTMALDG (TMA),
# SYNCS (mbarrier) and no local memory.
# %%
if importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.bindings") is not None:
    from tdsl.backends.cuda import stats

    cubin = tdsl.build(ws_gemm, target="cuda", arch="sm_90a").cubin
    ops = stats.opcodes(cubin) if stats.cuobjdump_path() else None
    if ops is not None:
        counts = {op: sum(n for o, n in ops.items() if o.startswith(op)) for op in ("HGMMA", "UTMALDG", "SYNCS")}
        usage = stats.resource_usage(cubin)["ws_gemm_kernel"]
        print("sm_90a SASS:", counts, "local memory:", usage["local"], "bytes")
        assert all(counts.values()) and usage["local"] == 0
    else:
        SKIPPED.append('the SASS check (cuobjdump comes with the test extra: pip install "tdsl[test]")')
else:
    SKIPPED.append('NVRTC (pip install "tdsl[cuda]")')

# %% [markdown]
# ## The same pipeline from `tdsl.auto_schedule`
#
# Written by hand above; for `arch="sm_90a"` the auto-scheduler writes it from the plain GEMM:
# `sch.wgmma_pipeline` (TMA into a ring of 128B-swizzled stages, mbarriers, wgmma m64nNk16) and
# `sch.warp_specialize` (a producer and a consumer warpgroup). The tensor maps are buffers of the
# scheduled function that the call encodes (the driver's `cuTensorMapEncodeTiled` on a GPU), so
# the kernel takes the arrays alone. Here B is indexed `B[k, j]`: the producer loads it by TMA in
# boxes of [64 rows of K, 64 columns] and the wgmma read it N-major (`b_major="mn"`), no copy;
# the consumer warpgroup writes its tile into shared memory and one thread stores it by TMA
# (`store="tma"`, the fifth decision in the trace).
# %%


@T.prim_func
def gemm(A: T.Buffer((64, 256), "float16"), B: T.Buffer((256, 64), "float16"), C: T.Buffer((64, 64), "float32")):
    for i, j, k in T.grid(64, 64, 256):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")


sch = tdsl.auto_schedule(gemm, target="cuda", arch="sm_90a")
print(sch.trace)
a2 = rng.integers(-2, 3, (64, 256)).astype(np.float16)
b2 = rng.integers(-2, 3, (256, 64)).astype(np.float16)
want2 = a2.astype(np.float32) @ b2.astype(np.float32)
np.testing.assert_array_equal(tdsl.interpret(sch.func, a2, b2), want2)   # the meaning is kept
if "the emulator (no host C++ compiler)" not in SKIPPED:
    np.testing.assert_array_equal(tdsl.build(sch, target="cuda", emulate=True)(a2, b2), want2)
    print("auto-scheduled pipeline, emulator: equal to numpy")
print("15_hopper_tensorir:", "all checks passed" if not SKIPPED else f"skipped here: {'; '.join(SKIPPED)}")
