# %% [markdown]
# # 02 · A CPU matmul, from naive to fast
#
# One fp32 matmul, scheduled one step at a time. After each step we print what changed
# (`sch.show(diff=True)`), build it, check it against numpy and time it. The steps are the
# classic ones: tile for the caches, vectorize the innermost loop, run the outer loop on all
# cores, pack B so the inner loop reads it contiguously, and keep a block of C in vector
# registers with the x86 micro-kernel (`tensorize`). `bench/schedules.py` holds the tuned
# version that `bench/run.py` measures.

# %%
import os
import timeit

import numpy as np

import tdsl
from tdsl import T
from tdsl.intrinsics import x86

SMALL = bool(os.environ.get("TDSL_TUTORIAL_SMALL"))
N = 64 if SMALL else 512
KC = 64 if SMALL else 256          # steps of k per pass over a packed panel of B
FLOP = 2.0 * N ** 3

# %% [markdown]
# The kernel as a user writes it: one block, three loops, `k` a reduction.

# %%
@T.prim_func
def matmul(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
           C: T.Buffer((N, N), "float32")):
    for i, j, k in T.grid(N, N, N):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


rng = np.random.default_rng(0)
a = rng.standard_normal((N, N), dtype=np.float32)
b = rng.standard_normal((N, N), dtype=np.float32)
expected = a @ b
results: dict[str, float] = {}


def measure(step: str, sch) -> None:
    """Build the schedule as it is now, check it against numpy, and time it."""
    kernel = tdsl.build(sch, target="cpu")
    c = kernel(a, b)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-3)
    seconds = kernel.time(a, b, c, repeat=3)
    results[step] = seconds
    print(f"{step:<28} {seconds * 1e3:8.2f} ms  {FLOP / seconds / 1e9:6.1f} GFLOP/s")


sch = tdsl.Schedule(matmul)
measure("naive", sch)

# %% [markdown]
# ## 1. Tile for the caches
#
# Split `i` and `j` into blocks and make `k` run inside a block: a tile of C and the rows of
# A and B it needs are reused while they are in cache. `show(diff=True)` prints what the last
# step changed, `show(diff=3)` the last three steps (or `mark = sch.checkpoint()` first, then
# `show(diff=mark)`); in a notebook the diff is highlighted HTML.

# %%
block = sch.get_block("C")
i, j, k = sch.get_loops(block)
i0, i1 = sch.split(i, factors=[None, 4])
j0, j1 = sch.split(j, factors=[None, 16])
sch.reorder(i0, j0, k, i1, j1)
sch.show(diff=3)
measure("tiled", sch)

# %% [markdown]
# `undo` takes back the last step (and kills the handles it made). Here we try another
# order, look at it, and go back.

# %%
before = sch.func
sch.reorder(j0, i0)
sch.show(diff=True)
sch.undo()
assert tdsl.structural_equal(sch.func, before)

# %% [markdown]
# ## 2. Vectorize the innermost loop, unroll the rows of the tile
#
# `j1` walks 16 contiguous floats of C and B: one or two SIMD registers. Unrolling `i1`
# gives the compiler four independent rows. The reduction's init has to leave the loop nest
# first (`decompose_reduction`), so that the update block is a plain vectorizable loop.

# %%
mark = sch.checkpoint("vectorize")
init = sch.decompose_reduction(block, k)
sch.vectorize(j1)
sch.unroll(i1)
sch.vectorize(sch.get_loops(init)[-1])
sch.show(diff=mark)
measure("vectorized", sch)

# %% [markdown]
# ## 3. All cores
#
# Each `i0` iteration writes its own rows of C: the loop can run in parallel.

# %%
sch.parallel(i0)
measure("parallel", sch)
print(tdsl.lower(sch).script()[:1500])

# %% [markdown]
# ## 4. Pack B and use the register micro-kernel
#
# We start again from the plain kernel. B is copied into panels `NR` columns wide
# (`cache_read` + `transform_layout`), so that the inner loop reads one contiguous sliver of
# B per panel. The loops become io / k0 / j0 / i1: a block of A stays in L2 while the panels
# stream through L1. The innermost MR x NR x KC tile is `tensorize`d with the x86
# micro-kernel, which keeps the MR x NR block of C in vector registers and does one FMA per
# broadcast element of A and vector of B.

# %%
name = x86.fp32_microkernel(KC)             # AVX-512 8x32 where present, else AVX2 4x16
desc_c = tdsl.TensorIntrin.get(name).desc.params[2]
MR, NR = (int(s.value) for s in desc_c.shape)
print("micro-kernel:", name, f"MR={MR} NR={NR} KC={KC}")

sch = tdsl.Schedule(matmul)
block = sch.get_block("C")
pack = sch.cache_read(block, "B", "global")
sch.transform_layout(pack, "B_global", lambda kk, jj: (jj // NR, kk, jj % NR))
sch.show(diff=True)

# %%
rows, cols = sch.get_loops(pack)
sch.parallel(rows)
_, vec = sch.split(cols, factors=[None, NR])
sch.vectorize(vec)
i, j, k = sch.get_loops(block)
io, ii = sch.split(i, factors=[None, 16 * MR if N >= 16 * MR else MR])
i0, i1 = sch.split(ii, factors=[None, MR])
j0, j1 = sch.split(j, factors=[None, NR])
k0, k1 = sch.split(k, factors=[None, KC])
sch.reorder(io, k0, j0, i0, i1, j1, k1)
sch.parallel(io)
sch.decompose_reduction(block, k0)
sch.show(diff=True)
measure("packed B, tiled", sch)     # slow: a scalar loop computing vj // NR, vj % NR per element

# %% [markdown]
# Packed but not yet vectorized, the inner loop computes the panel index of every element:
# slower than before. The micro-kernel replaces the whole MR x NR x KC tile by register code.

# %%
sch.tensorize(i1, name)
sch.show(diff=True)
measure("micro-kernel (tensorize)", sch)

# %% [markdown]
# Every step is recorded; `print(sch.trace)` is Python that replays them.

# %%
print(sch.trace)

# %% [markdown]
# ## 5. Against numpy (OpenBLAS)

# %%
c = np.empty((N, N), np.float32)
kernel = tdsl.build(sch)
t_np = min(timeit.repeat(lambda: np.matmul(a, b, out=c), number=3, repeat=3)) / 3
t_tdsl = kernel.time(a, b, c, repeat=3)
print(f"numpy {FLOP / t_np / 1e9:.1f} GFLOP/s, tdsl {FLOP / t_tdsl / 1e9:.1f} GFLOP/s: "
      f"tdsl/numpy = {t_np / t_tdsl:.2f}x (this machine, this moment: see docs/performance.md)")

assert set(results) == {"naive", "tiled", "vectorized", "parallel", "packed B, tiled", "micro-kernel (tensorize)"}
print("02_cpu_matmul: all checks passed")
