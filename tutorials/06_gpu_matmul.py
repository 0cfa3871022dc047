# %% [markdown]
# # 06 · A GPU matmul
#
# We schedule a plain matmul for an NVIDIA GPU: bind loops to `blockIdx`/`threadIdx`, stage
# tiles of A and B through shared memory with `cache_read(..., "shared")` + `compute_at`,
# accumulate in per-thread storage with `cache_write(..., "local")`, and finally use tensor
# cores through the WMMA intrinsics. CUDA C++ is compiled by NVRTC for sm_80/sm_90 even on a
# machine without a GPU; the same scheduled function also runs on the CPU (compiled, or in the
# interpreter), so its meaning is checked against numpy anywhere. On a machine with a GPU it
# runs there too.

# %%
import importlib.util
import os

import numpy as np

import tdsl
from tdsl import T
from tdsl.intrinsics import cuda as wmma

SMALL = bool(os.environ.get("TDSL_TUTORIAL_SMALL"))
SKIPPED: list[str] = []  # what this machine cannot run, said at the end
SIZE = 64 if SMALL else 512
HAVE_NVRTC = importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.bindings") is not None

# %% [markdown]
# ## Is there a GPU?
# A tiny kernel built for `"cuda"` without an `arch` targets the GPU present; with no GPU (or
# no cuda-python) tdsl raises `TargetError` and says what still works.

# %%
@T.prim_func
def add_one(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    for t in T.thread_binding(32, thread="threadIdx.x"):
        with T.block("B"):
            v = T.axis.spatial(32, t)
            B[v] = A[v] + T.float32(1)


try:
    np.testing.assert_array_equal(tdsl.build(add_one, target="cuda")(np.zeros(32, "float32")), np.ones(32, "float32"))
    HAVE_GPU = True
    print("a GPU is present: kernels below also run on it")
except tdsl.TargetError as err:
    HAVE_GPU = False
    print(f"no GPU run here: {err}")
    SKIPPED.append("running on a GPU (none here)")

# %% [markdown]
# ## The matmul and its GPU schedule
# The schedule is a function of the problem size, so we can check it in the interpreter at a
# small size and run it at a larger one. Each thread block computes a `BM x BN` tile of C;
# each of its `TY x TX` threads computes `TM x TN` elements of that tile.

# %%
BM = BN = 32          # tile of C per thread block
TM = TN = 4           # elements of C per thread
BK = 8                # step of k staged through shared memory
TY, TX = BM // TM, BN // TN


def make_matmul(n: int) -> tdsl.PrimFunc:
    @T.prim_func
    def matmul(A: T.Buffer((n, n), "float32"), B: T.Buffer((n, n), "float32"),
               C: T.Buffer((n, n), "float32")):
        for i, j, k in T.grid(n, n, n):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    return matmul


def schedule_matmul(n: int, show: bool = False) -> tdsl.Schedule:
    """The GPU schedule, step by step (printing the IR after the main steps when `show`)."""
    sch = tdsl.Schedule(make_matmul(n))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    # 1. Tile: block / thread / per-thread parts of i and j, and BK-sized steps of k. The k
    #    steps go outside the thread loops: each step, the whole block loads a tile together.
    bi, ti, ii = sch.split(i, factors=[None, TY, TM])
    bj, tj, jj = sch.split(j, factors=[None, TX, TN])
    ko, ki = sch.split(k, factors=[None, BK])
    sch.reorder(bi, bj, ko, ti, tj, ki, ii, jj)
    # 2. Bind: tiles of C to thread blocks, their parts to threads.
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ti, "threadIdx.y")
    sch.bind(tj, "threadIdx.x")
    if show:
        sch.show()
    # 3. Accumulate per thread (scope local): the block now updates C_local, and a new block copies the
    #    result to C once per tile; we place the copy at the end of the thread block's work and
    #    give each thread the same elements it computed.
    c_local = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(c_local, bj)
    if show:
        sch.show(diff=True)
    wi, wj = sch.get_loops(c_local)[-2:]
    wy, wi_in = sch.split(wi, factors=[TY, TM])
    wx, wj_in = sch.split(wj, factors=[TX, TN])
    sch.reorder(wy, wx, wi_in, wj_in)
    sch.bind(wy, "threadIdx.y")
    sch.bind(wx, "threadIdx.x")
    # 4. Stage A and B through shared memory: at each step of k the block copies a BM x BK tile
    #    of A and a BK x BN tile of B (compute_at computes just that), all threads of the block
    #    cooperating, neighbouring threads on neighbouring addresses (coalesced loads).
    for name in ("A", "B"):
        shared = sch.cache_read(c, name, "shared")
        sch.compute_at(shared, ko)
        if show and name == "A":
            sch.show(diff=True)
        fused = sch.fuse(*sch.get_loops(shared)[-2:])
        _, fy, fx = sch.split(fused, factors=[None, TY, TX])
        sch.bind(fy, "threadIdx.y")
        sch.bind(fx, "threadIdx.x")
    # 5. Zero the accumulator before the k loop instead of testing for k == 0 inside it.
    sch.decompose_reduction(c, ko)
    return sch


sch = schedule_matmul(SIZE, show=True)
sch.show()

# %% [markdown]
# ## The same schedule's meaning, on the CPU
# A GPU-bound function is still a tdsl function: the interpreter runs it (thread loops become
# ordinary loops), and it also builds for the CPU. Both agree with numpy.

# %%
rng = np.random.default_rng(0)
small = schedule_matmul(64)
a64 = rng.standard_normal((64, 64), dtype=np.float32)
b64 = rng.standard_normal((64, 64), dtype=np.float32)
np.testing.assert_allclose(tdsl.interpret(small.func, a64, b64), a64 @ b64, rtol=1e-4, atol=1e-4)

a = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
b = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
np.testing.assert_allclose(tdsl.build(sch, target="cpu")(a, b), a @ b, rtol=1e-3, atol=1e-3)

# %% [markdown]
# ## CUDA C++ through NVRTC
# `arch="sm_90"` compiles for a Hopper GPU without needing one. In the source: one kernel, the
# shared tiles, the per-thread accumulator, and the `__syncthreads()` that tdsl placed between
# the shared-memory writes and reads.

# %%
def compile_for(schedule: tdsl.Schedule, archs=("sm_80", "sm_90")):
    """Compile for each arch with NVRTC; None (and a note) when cuda-python is missing."""
    kernel = None
    for arch in archs:
        try:
            kernel = tdsl.build(schedule, target="cuda", arch=arch)
        except tdsl.TargetError as err:
            print(f"CUDA compile for {arch} skipped: {err}")
            return None
        print(f"{arch}: compiled {kernel.name} ({len(kernel.cubin)} bytes of cubin)")
    return kernel


cuda_kernel = compile_for(sch) if HAVE_NVRTC else None
if cuda_kernel is None:
    print('cuda-python is not installed (or NVRTC failed): CUDA compilation skipped (pip install "tdsl[cuda]")')
    SKIPPED.append('compiling CUDA with NVRTC (pip install "tdsl[cuda]")')
else:
    source = cuda_kernel.source
    assert "__shared__" in source and "__syncthreads()" in source and "blockIdx.y" in source
    start = source.index('extern "C"')
    print(source[start:start + 2500])

# %% [markdown]
# ## On a GPU
# With a GPU present, the kernel takes numpy arrays (copied in and out) or device tensors.

# %%
if HAVE_GPU:
    gpu = tdsl.build(sch, target="cuda")
    np.testing.assert_allclose(gpu(a, b), a @ b, rtol=1e-3, atol=1e-3)
    seconds = gpu.time(a, b, np.empty_like(a))
    print(f"GPU matmul {SIZE}^3: {2 * SIZE ** 3 / seconds / 1e9:.1f} GFLOP/s (numpy arrays, copies included)")
else:
    print("no GPU: the CUDA kernel was compiled but not run")

# %% [markdown]
# ## Tensor cores with WMMA
# WMMA instructions are *warp-wide*: the 32 threads of a warp execute one 16 x 16 x 16 fp16
# multiply-accumulate together, with the operands held in opaque *fragments* (scopes
# `wmma.matrix_a`, `wmma.matrix_b`, `wmma.accumulator`). So we write the fp16 matmul with one
# warp per 16 x 16 tile of C: a `threadIdx.x` loop of 32 lanes that the block does not index
# (every lane takes part in the same tile).
#
# The schedule: `cache_write` the result into an accumulator fragment and `cache_read` A and B
# into input fragments at each 16-step of k; split the reduction init out; then `tensorize`
# each 16 x 16 stage with its WMMA intrinsic (fill, load A, load B, mma, store). Each tensorize
# checks the stage computes exactly the intrinsic's description.

# %%
# The CUDA backend shrinks each fragment to the 16 x 16 tiles one warp touches; the size here
# only keeps the CPU check (which runs the descriptions) quick.
WM = 32 if SMALL else 64


@T.prim_func
def hmatmul(A: T.Buffer((WM, WM), "float16"), B: T.Buffer((WM, WM), "float16"),
            C: T.Buffer((WM, WM), "float32")):
    for bi in T.thread_binding(WM // 16, thread="blockIdx.y"):
        for bj in T.thread_binding(WM // 16, thread="blockIdx.x"):
            for lane in T.thread_binding(32, thread="threadIdx.x"):
                for i, j, k in T.grid(16, 16, WM):
                    with T.block("C"):
                        vi = T.axis.spatial(WM, bi * 16 + i)
                        vj = T.axis.spatial(WM, bj * 16 + j)
                        vk = T.axis.reduce(WM, k)
                        with T.init():
                            C[vi, vj] = T.float32(0)
                        C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")


tc = tdsl.Schedule(hmatmul)
c = tc.get_block("C")
lane, i, j, k = tc.get_loops(c)[-4:]
k0, k1 = tc.split(k, factors=[None, 16])
tc.reorder(k0, i, j, k1)
acc = tc.cache_write(c, 0, "wmma.accumulator")
tc.reverse_compute_at(acc, lane)
frag_a = tc.cache_read(c, "A", "wmma.matrix_a")
tc.compute_at(frag_a, k0)
frag_b = tc.cache_read(c, "B", "wmma.matrix_b")
tc.compute_at(frag_b, k0)
init = tc.decompose_reduction(c, k0)
tc.show()

# %% [markdown]
# A stage given the wrong intrinsic is refused with the difference spelled out: here the copy
# into the `matrix_a` fragment, tensorized with the intrinsic that loads `matrix_b`.

# %%
before = tc.func
try:
    tc.tensorize(tc.get_loops(frag_a)[-2], wmma.load_b("global"))
    raise AssertionError("loading A's fragment with the B loader must be refused")
except tdsl.ScheduleError as err:
    print(err)
assert tdsl.structural_equal(tc.func, before)

tc.tensorize(tc.get_loops(init)[-2], wmma.FILL)
tc.tensorize(tc.get_loops(frag_a)[-2], wmma.load_a("global"))
tc.tensorize(tc.get_loops(frag_b)[-2], wmma.load_b("global"))
tc.tensorize(tc.get_loops(c)[-3], wmma.MMA)
tc.tensorize(tc.get_loops(acc)[-2], wmma.store("global"))
tc.show()

# %% [markdown]
# On the CPU the tensorized blocks compute their descriptions, so the meaning is checked
# against numpy; for CUDA they become calls to `nvcuda::wmma`.

# %%
ah = rng.standard_normal((WM, WM)).astype("float16")
bh = rng.standard_normal((WM, WM)).astype("float16")
want_h = ah.astype("float32") @ bh.astype("float32")
np.testing.assert_allclose(tdsl.build(tc, target="cpu")(ah, bh), want_h, rtol=1e-3, atol=1e-3)
lowered = tdsl.lower(tc, target="cuda").script()
assert "tdsl_wmma_mma_f16f32" in lowered
tc_kernel = compile_for(tc) if HAVE_NVRTC else None
if tc_kernel is not None:
    start = tc_kernel.source.index('extern "C"')
    print(tc_kernel.source[start:])
if HAVE_GPU:
    np.testing.assert_allclose(tdsl.build(tc, target="cuda")(ah, bh), want_h, rtol=1e-2, atol=1e-2)
    print("WMMA kernel: ran on the GPU and matches numpy")
if SKIPPED:  # say what did not run here rather than "all checks passed"
    print(f"06_gpu_matmul: the checks that ran passed; skipped here: {'; '.join(SKIPPED)}")
else:
    print("06_gpu_matmul: all checks passed")
