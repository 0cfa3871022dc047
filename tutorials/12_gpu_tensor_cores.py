# %% [markdown]
# # 12 · Tensor cores the way fast GEMMs use them: shared tiles, ldmatrix, mma.sync
#
# We build, step by step, the fp16 GEMM kernel that `tdsl.auto_schedule` makes for CUDA
# (sm_80): a thread block stages tiles of A and B in shared memory, each warp loads its
# fragments with `ldmatrix` and multiplies them with `mma.sync.m16n8k16`, accumulating in
# registers, and stores the result. The intrinsics carry TVM's names (`mma_ldmatrix_f16_a`,
# `mma_f16f16f32`, `mma_fill_16x16_f32`, `mma_store_16x16_f32_global_`), so TVM tensorize
# schedules port. No GPU is needed: the emulator (`emulate=True`) runs the generated CUDA
# C++ on the CPU, modelling ldmatrix and mma.sync lane by lane as the PTX ISA defines them,
# and counts shared-memory bank conflicts; NVRTC and cuobjdump show the SASS.

# %%
import importlib.util
import os
import shutil

import numpy as np

import tdsl
from tdsl import T
from tdsl.intrinsics import cuda_mma as mma

SMALL = bool(os.environ.get("TDSL_TUTORIAL_SMALL"))
N = 64 if SMALL else 128
HAVE_CXX = any(shutil.which(c) for c in ("g++", "clang++", "c++"))
HAVE_NVRTC = importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.bindings") is not None
SKIPPED: list[str] = []


@T.prim_func
def hgemm(A: T.Buffer((N, N), "float16"), B: T.Buffer((N, N), "float16"), C: T.Buffer((N, N), "float32")):
    for i, j, k in T.grid(N, N, N):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")


def show(sch, title):
    print(f"---- {title}")
    print(sch.func.script())


# %% [markdown]
# ## Step 1: block tile and warp tile
# A 64 x 64 tile of C per thread block (blockIdx.y / blockIdx.x), 2 x 2 warps of 32 x 32
# (threadIdx.z / threadIdx.y; the 32 lanes of each warp are the implicit threadIdx.x of the
# tensor intrinsics), and k in steps of 32.

# %%
sch = tdsl.Schedule(hgemm)
c = sch.get_block("C")
i, j, k = sch.get_loops(c)
bi, wi, ii = sch.split(i, factors=[None, 2, 32])
bj, wj, jj = sch.split(j, factors=[None, 2, 32])
ko, ki = sch.split(k, factors=[None, 32])
sch.reorder(bi, bj, wi, wj, ko, ii, jj, ki)
sch.bind(bi, "blockIdx.y")
sch.bind(bj, "blockIdx.x")
sch.bind(wi, "threadIdx.z")
sch.bind(wj, "threadIdx.y")
show(sch, "step 1: tiles")

# %% [markdown]
# ## Step 2: accumulators, shared tiles and fragments
# `cache_write` into the accumulator scope keeps each warp's 32 x 32 results in registers;
# `cache_read` stages A and B in shared memory, then into the ldmatrix fragment scopes. The
# whole block copies the shared tiles together (all its threads, bound to threadIdx.z/y/x).

# %%
acc = sch.cache_write(c, 0, "m16n8k16.accumulator")
sch.reverse_compute_at(acc, wj)
a_sh = sch.cache_read(c, "A", "shared")
b_sh = sch.cache_read(c, "B", "shared")
fa = sch.cache_read(c, "A_shared", "m16n8k16.matrixA")
fb = sch.cache_read(c, "B_shared", "m16n8k16.matrixB")
sch.compute_at(fa, ko)
sch.compute_at(fb, ko)
for stage in (a_sh, b_sh):
    sch.compute_at(stage, ko)
    rows, cols = sch.get_loops(stage)[-2:]
    cols, vec = sch.split(cols, factors=[None, 8])
    _, tz, ty, tx = sch.split(sch.fuse(rows, cols), factors=[None, 2, 2, 32])
    sch.bind(tz, "threadIdx.z")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.unroll(vec)
show(sch, "step 2: staging")

# %% [markdown]
# ## Step 3: tensorize
# Every block now works on whole 16 x 16 tiles: split its loops by 16, the 16-loops innermost,
# and tensorize them with the mma intrinsics. (Each `mma_f16f16f32` is two mma.sync
# m16n8k16; each ldmatrix loads a 16 x 16 tile as four 8 x 8 matrices.)

# %%
def tile16(block, n=2):
    loops = sch.get_loops(block)[-n:]
    outer, inner = [], []
    for lp in loops:
        o, in_ = sch.split(lp, factors=[None, 16])
        outer.append(o)
        inner.append(in_)
    sch.reorder(*outer, *inner)
    return inner[0]


mma_loop = tile16(c, 3)
init = sch.decompose_reduction(c, ko)
sch.tensorize(tile16(init), mma.fill_name("f32"))            # mma_fill_16x16_f32
sch.tensorize(tile16(fa), mma.ldmatrix_name("f16", "a"))     # mma_ldmatrix_f16_a
sch.tensorize(tile16(fb), mma.ldmatrix_name("f16", "b"))     # mma_ldmatrix_f16_b (ldmatrix .trans)
sch.tensorize(mma_loop, mma.mma_name("f16"))                 # mma_f16f16f32
sch.tensorize(tile16(acc), mma.store_name("f32", "global"))  # mma_store_16x16_f32_global_
show(sch, "step 3: tensorized")

# %% [markdown]
# ## The meaning, and the CUDA C++
# The interpreter runs the blocks through the intrinsics' descriptions: the same numbers as
# numpy. The CUDA C++ keeps per-lane fragments (`float C_m16n8k16_accumulator[32]`: a warp's
# 32 x 32 fp32 tile is 1024 values, 32 per lane).

# %%
rng = np.random.default_rng(0)
a = rng.standard_normal((N, N)).astype("float16")
b = rng.standard_normal((N, N)).astype("float16")
want = a.astype("float32") @ b.astype("float32")
np.testing.assert_allclose(tdsl.interpret(sch, a, b), want, rtol=1e-3, atol=1e-3)

from tdsl.backends.cuda import cuda_source  # noqa: E402

source = cuda_source(sch)
kernel_text = source[source.index('extern "C" __global__'):]
print(kernel_text)
assert "float C_m16n8k16_accumulator[32];" in kernel_text

# %% [markdown]
# ## Step 4: run it in the emulator, read its counters
# A_shared's rows are 64 bytes, B_shared's 128: the 8 rows one ldmatrix phase reads share
# banks (4-way and 8-way conflicts). The global loads are counted too: each thread copies its 8
# halves 2 bytes at a time with lanes 16 bytes apart, 16 sectors of 32 bytes per warp load where
# 2 would do (16-byte copies fix that: step 5b). `kernel.stats`
# and `kernel.notes` say so.

# %%
if HAVE_CXX:
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    np.testing.assert_allclose(kernel(a, b), want, rtol=1e-4, atol=1e-4)
    print(kernel.stats)
    for note in kernel.notes:
        print("note:", note)
    worst = {s.buffer: s.worst for s in kernel.stats.shared}
    assert worst == {"A_shared": 4, "B_shared": 8}
    assert any(note.startswith("uncoalesced accesses to A") for note in kernel.notes)
else:
    SKIPPED.append("the emulator (no host C++ compiler)")

# %% [markdown]
# ## Step 5: pad the shared rows, or swizzle them
# `storage_align` pads each row by 16 bytes (8 halves): the 8 rows of a phase now start in 8
# different groups of 4 banks. The other way, what `auto_schedule` does: `cuda_mma.swizzle`
# keeps the rows unpadded but stores 16-byte chunk c of row r at c ^ (r's position in its
# 128-byte line group), so the same 8 rows fall in 8 different bank groups; no extra memory.
# Zero conflicts either way; the numbers are unchanged.

# %%
padded = sch.copy()
padded.storage_align(padded.get_block("A_shared"), 0, axis=0, factor=32, offset=8)
padded.storage_align(padded.get_block("B_shared"), 0, axis=0, factor=64, offset=8)
swizzled = sch.copy()
mma.swizzle(swizzled, swizzled.get_block("A_shared"))
mma.swizzle(swizzled, swizzled.get_block("B_shared"))
if HAVE_CXX:
    for name, variant in (("padded", padded), ("swizzled", swizzled)):
        kernel = tdsl.build(variant, target="cuda", emulate=True)
        np.testing.assert_allclose(kernel(a, b), want, rtol=1e-4, atol=1e-4)
        print(f"---- {name}\n{kernel.stats}")
        assert all(s.worst == 1 and s.wavefronts == s.phases for s in kernel.stats.shared)
        assert not [note for note in kernel.notes if "bank conflicts" in note]
    print([line.strip() for line in kernel.source.splitlines() if "tdsl_mma_ldmatrix_a_xor(A_" in line][0])
sch = swizzled

# %% [markdown]
# ## Step 5b: 16-byte copies
# Each thread still copies its 8 halves 2 bytes at a time. `vectorize` on that loop makes it one
# 16-byte load and one 16-byte store (`tdsl_vec<half, 8>`): every warp load now touches the
# ideal number of sectors, and the note about A is gone.

# %%
for name in ("A_shared", "B_shared"):
    sch.vectorize(sch.get_loops(sch.get_block(name))[-1])
if HAVE_CXX:
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    np.testing.assert_allclose(kernel(a, b), want, rtol=1e-4, atol=1e-4)
    print(kernel.stats)
    assert all(g.sectors == g.ideal for g in kernel.stats.global_)
    assert not [note for note in kernel.notes if note.startswith("uncoalesced")]

# %% [markdown]
# ## Step 6: the SASS
# NVRTC compiles for sm_80 without a GPU; cuobjdump (pip wheel `nvidia-cuda-cuobjdump`) lists
# the instructions and the resources: HMMA (mma.sync), LDSM (ldmatrix, .trans for B), no
# local memory.

# %%
from tdsl.backends.cuda.stats import cuobjdump_path, opcodes  # noqa: E402

if HAVE_NVRTC and cuobjdump_path():
    built = tdsl.build(sch, target="cuda", arch="sm_80")
    ops = opcodes(built.cubin)
    print({op: n for op, n in sorted(ops.items()) if op.startswith(("HMMA", "LDSM", "LDG", "STS", "STG", "LDL", "STL"))})
    print(built.stats)
    assert ops["HMMA.16816.F32"] > 0 and ops["LDSM.16.M88.4"] > 0 and ops["LDSM.16.MT88.4"] > 0
    assert not [op for op in ops if op.startswith(("LDL", "STL"))]
else:
    SKIPPED.append("the SASS (needs cuda-python and nvidia-cuda-cuobjdump)")

# %% [markdown]
# `tdsl.auto_schedule(hgemm, target="cuda")` writes this schedule for you (rule
# `GPUMmaTiling`, with a 128 x 128 block tile where the sizes allow; the tile is written as
# sampling steps, so `tdsl.tune` can try other tiles that fit the sizes). For `arch="sm_90a"` an fp16
# GEMM goes to Hopper's TMA + wgmma pipeline instead (tutorial 15).

# %%
auto = tdsl.auto_schedule(hgemm, target="cuda")
assert "mma_f16f16f32" in str(auto.trace)

if SKIPPED:
    print(f"12_gpu_tensor_cores: the checks that ran passed; skipped here: {', '.join(SKIPPED)}")
else:
    print("12_gpu_tensor_cores: all checks passed")
