# %% [markdown]
# # 08 · Fast CPU kernels: from a naive loop to OpenBLAS-class code
#
# [02](02_cpu_matmul.py) tiled, vectorized and tensorized a matmul; [03](03_fusion.py) fused
# a softmax into one loop over rows. This tutorial goes the rest of the way, the way a
# performance engineer reads a kernel: what each step does to the IR, what lowering adds on
# its own, and how to measure the result without fooling yourself.
#
# 1. GEMM the GotoBLAS way: B packed into NR-wide panels, one KC slab per pass of the k loop;
#    A packed per block of rows into MR-interleaved micro-panels; an MR x NR tile of C held in
#    vector registers by the x86 micro-kernel (`tensorize`).
# 2. What lowering does for you: `compact_buffers` shrinks intermediates to what one
#    iteration touches; the `tdsl.nontemporal` annotation asks for streaming stores.
# 3. Measuring honestly: interleaved timings, minimum over repeats, ratios to numpy.
#
# Every kernel is checked against numpy. The tuned schedules that `python bench/run.py`
# measures are in `bench/schedules.py`; `docs/performance.md` says where each one stands.

# %%
import math
import os
import time
from contextlib import nullcontext

import numpy as np

import tdsl
from tdsl import T
from tdsl.intrinsics import x86

SMALL = bool(os.environ.get("TDSL_TUTORIAL_SMALL"))
SKIPPED: list[str] = []  # what this machine cannot run, said at the end
REPEATS = 3 if SMALL else 15
rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. GEMM, GotoBLAS style
#
# The blocking of GotoBLAS (and of BLIS, and OpenBLAS's kernels) in one picture:
#
# ```
# for k0 in K / KC:                     # one KC-deep slab of A and B per pass
#     pack B[k0 slab] -> KC x N, NR-wide panels          (shared, lives in L3/L2)
#     for io in M / MC:   (parallel)
#         pack A[io block, k0 slab] -> MC x KC, MR-interleaved   (per thread, L2)
#         for j0 in N / NR:             # one KC x NR sliver of B: stays in L1
#             for i0 in MC / MR:
#                 C[MR x NR tile] += A micro-panel @ B sliver   (registers: micro-kernel)
# ```
#
# The micro-kernel is where the FLOPs happen: MR x NR accumulators in vector registers, per
# step of k one broadcast of each A element, one vector load per NR/lanes of B, MR * NR /
# lanes FMAs. Everything else exists to feed it contiguous, cache-resident operands.
#
# The tile sizes: NR two AVX2 vectors (16 floats), MR = 4, so 8 accumulators: as many as
# Zen 3's FMA latency (4 cycles) x throughput (2 per cycle) needs to stay busy (on AVX-512,
# 8 x 32: 16 zmm accumulators). KC = 256
# makes a KC x NR sliver of B 16 KiB (half of L1); MC = 128 makes the MC x KC block of A
# 128 KiB (a quarter of L2). (bench/schedules.py's `gemm_tiles` also wants at least 8 row
# blocks per core, MC = 64 on 2 cores: a core slowed by another process then holds the call
# up by a smaller block.)

# %%
N = 64 if SMALL else 1024
ISA = "avx512" if "avx512" in x86.available() else "avx2"
MICRO_KERNEL = ISA in x86.available()   # False on a CPU without AVX2+FMA (or not x86)
MR, NR = (8, 32) if ISA == "avx512" else (4, 16)
KC = 32 if SMALL else 256     # small: two passes of k0, so that packing per pass shows
MC = 16 if SMALL else 128
print(f"GEMM {N}^3, ISAs of this CPU: {x86.available()}; MR={MR} NR={NR} KC={KC} MC={MC}")


@T.prim_func
def gemm(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
         C: T.Buffer((N, N), "float32")):
    for i, j, k in T.grid(N, N, N):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


a = rng.standard_normal((N, N), dtype=np.float32)
b = rng.standard_normal((N, N), dtype=np.float32)
c_want = a @ b


def check_gemm(sch: tdsl.Schedule) -> tdsl.Kernel:
    """Build the schedule as it is now and check it against numpy."""
    kernel = tdsl.build(sch, target="cpu")
    np.testing.assert_allclose(kernel(a, b), c_want, rtol=1e-4, atol=1e-3)
    return kernel


def lowered_lines(sch: tdsl.Schedule, *words: str) -> list[str]:
    """The lines of the lowered function that mention any of `words`."""
    return [line for line in tdsl.lower(sch).script().splitlines() if any(w in line for w in words)]


def excerpt(text: str, keep: int = 2) -> str:
    """`text` with each run of similar lines (same text up to the first `[`) cut to `keep`."""
    out: list[str] = []
    run_key, skipped = None, 0
    for line in text.splitlines() + [""]:
        key = line.split("[", 1)[0] if "[" in line else None
        if key is not None and key == run_key:
            if len(out) >= keep and all(prev.split("[", 1)[0] == key for prev in out[-keep:]):
                skipped += 1
                continue
        elif skipped:
            out.append(f"{run_key[:len(run_key) - len(run_key.lstrip())]}... {skipped} more like the line above")
            skipped = 0
        run_key = key
        out.append(line)
    return "\n".join(out).rstrip()


# %% [markdown]
# ### Step 1: pack B into NR-wide panels
#
# `cache_read` copies B into a new buffer `B_global` read by the matmul instead of B;
# `transform_layout` stores it as `(j // NR, k, j % NR)`: panel, row, column in the panel.
# The micro-kernel then reads one contiguous KC x NR sliver per panel, instead of KC pieces
# of rows a row stride (4 KiB at N = 1024) apart, which would all fall into the same few L1
# sets.

# %%
sch = tdsl.Schedule(gemm)
c_block = sch.get_block("C")
pack_b = sch.cache_read(c_block, "B", "global")
sch.transform_layout(pack_b, "B_global", lambda kk, jj: (jj // NR, kk, jj % NR))
sch.show(diff=True)

# %% [markdown]
# ### Step 2: the loop nest, and B packed per KC slab inside the k loop
#
# Split i into MC-row blocks and MR-row micro-tiles, j into NR-wide panels, k into KC
# slabs, and order the loops k0 / io / j0 / i0 / (i1, j1, k1): the innermost three are the
# MR x NR x KC micro-tile of C. Then `compute_at(pack_b, k0)` moves the packing under the k0
# loop: each pass packs only the KC rows of B it is about to use. The packing block is
# already in the panel layout; compute_at works out which part of `B_global` the pass
# reads, `(j // NR, k0 * KC : k0 * KC + KC, j % NR)`, and copies just that.

# %%
mark = sch.checkpoint("tiles")   # `sch.show(diff=mark)` shows every step since, together
i, j, k = sch.get_loops(c_block)
io, ii = sch.split(i, factors=[None, MC])
i0, i1 = sch.split(ii, factors=[None, MR])
j0, j1 = sch.split(j, factors=[None, NR])
k0, k1 = sch.split(k, factors=[None, KC])
sch.reorder(k0, io, j0, i0, i1, j1, k1)
sch.compute_at(pack_b, k0)
sch.show(diff=mark)

# %% [markdown]
# The packing copy is a loop over KC rows of N columns: rows in parallel, NR columns per
# vector (two ymm loads and stores on AVX2).

# %%
rows, cols = sch.get_loops(pack_b)[-2:]
sch.parallel(rows)
_, lanes = sch.split(cols, factors=[None, NR])
sch.vectorize(lanes)
check_gemm(sch)

# %% [markdown]
# ### Step 3: pack A per block of rows
#
# The micro-kernel reads its MR x KC piece of A column by column (one broadcast per row per
# step of k). In A's own layout those MR values are a row stride apart; packed as
# `(i // MR, k, i % MR)` they are adjacent, and the whole micro-panel is one contiguous
# MR * KC run. `compute_at(pack_a, io)` packs the MC x KC block that one `io` iteration
# (one thread) uses. compute_at comes before transform_layout here: it needs the copy's
# stores at plain iterators to work out the region.

# %%
mark = sch.checkpoint("pack A")
pack_a = sch.cache_read(c_block, "A", "global")
sch.compute_at(pack_a, io)
sch.transform_layout(pack_a, "A_global", lambda ii_, kk_: (ii_ // MR, kk_, ii_ % MR))
sch.parallel(io)
sch.show(diff=mark)
check_gemm(sch)

# %% [markdown]
# ### Step 4: C in micro-tiles
#
# The micro-kernel loads an MR x NR tile of C into registers, runs KC steps of k, and stores
# it back. With C in place, the MR rows of a tile are N floats apart: at N = 1024 that is
# 4 KiB, and every row of every tile of a panel falls into the same L1 set (and into a new
# page each). `cache_write` makes the matmul accumulate into a new buffer `C_global`, copied
# back to C after the loop nest; `transform_layout` stores it as
# `(j // NR, i // MR, i % MR, j % NR)`: each MR x NR tile one contiguous 256-byte run, the
# tiles of a panel one after the other. The copy back is one more pass over C (rows in
# parallel, NR-wide vectors), cheap next to the 2 N^3 FLOPs.
#
# To see what this is worth, we keep a copy of the schedule without it (`sch.copy()`; the
# handles work on both) and time the two in section 3.

# %%
in_place = sch.copy()
mark = sch.checkpoint("C tiles")
copy_c = sch.cache_write(c_block, "C", "global")
sch.transform_layout(c_block, "C_global", lambda ii_, jj_: (jj_ // NR, ii_ // MR, ii_ % MR, jj_ % NR))
rows, cols = sch.get_loops(copy_c)
sch.parallel(rows)
_, lanes = sch.split(cols, factors=[None, NR])
sch.vectorize(lanes)
sch.show(diff=mark)
check_gemm(sch)

# %% [markdown]
# ### Step 5: the register-tile micro-kernel
#
# The reduction's `T.init` must leave the loop nest before the tile can become straight-line
# register code: `decompose_reduction` at k0 zeroes C in its own loop nest (before the k0
# loop, vectorized), and the update block is left as a pure `C += A @ B` over each
# MR x NR x KC tile.
#
# `x86.register_fp32(isa, MR, NR, KC)` registers (once) a tensor intrinsic whose description
# is exactly that tile, `C[MR, NR] += A[MR, KC] @ B[KC, NR]` with symbolic strides, and whose
# implementation keeps the MR x NR block of C in `MR * NR / lanes` vector registers across
# the k loop. `tensorize(i1, ...)` proves our tile matches the description (A's strides are
# (1, MR) in the packed layout, B's (NR, 1), C's (NR, 1) in micro-tiles, (N, 1) in place)
# and marks it. On a CPU with neither AVX2+FMA nor AVX-512 there is no micro-kernel: the
# tile stays scalar code (slow, but correct).


# %%
def micro_kernel(s: tdsl.Schedule, show: bool = False) -> tdsl.Kernel:
    """Split off C's initialisation, tensorize the MR x NR x KC tile, build and check."""
    init = s.decompose_reduction(c_block, k0)
    s.vectorize(s.get_loops(init)[-1])
    if MICRO_KERNEL:
        s.tensorize(i1, x86.register_fp32(ISA, MR, NR, KC))
        if show:
            s.show(diff=True)
    elif show:
        print("this CPU has neither AVX2+FMA nor AVX-512: no micro-kernel; the tile stays scalar code")
        SKIPPED.append("the register-tile micro-kernel (no AVX2+FMA or AVX-512)")
    return check_gemm(s)


gemm_kernel = micro_kernel(sch, show=True)
gemm_in_place = micro_kernel(in_place)

# %% [markdown]
# The lowered function shows the whole GotoBLAS structure. Look at the allocations:
# `B_global` is KC x N (one slab, not the whole of B), and `A_global` is MC x KC, allocated
# inside the parallel `io` loop, i.e. one per thread. Nobody asked for that: lowering's
# `compact_buffers` shrank both (section 2). `C_global` stays whole: it carries the sums from
# one k0 pass to the next. The micro-kernel is the block with `acc`: MR * NR / lanes vector
# accumulators loaded from C, one FMA each per step of k, stored back (runs of similar lines
# are cut short below).

# %%
print(excerpt(tdsl.lower(sch).script()))

# %% [markdown]
# And on x86, the inner loop of the assembly: per step of k, MR broadcasts of A, NR / lanes
# loads of B, MR * NR / lanes `vfmadd231ps`, nothing else: no spills, no index arithmetic
# beyond one counter. This loop is the kernel's speed limit; with its operands in L1 it runs
# within a few percent of the core's FMA peak (`docs/performance.md`).

# %%
def inner_loop(asm: str, marker: str = "vfmadd231ps") -> list[str]:
    """The assembly of the innermost loop holding `marker`: from the label it jumps back to,
    up to the jump."""
    lines = asm.splitlines()
    first = next((n for n, line in enumerate(lines) if marker in line), None)
    if first is None:
        return []
    start = max(n for n in range(first + 1) if lines[n].startswith(".LBB") and lines[n].endswith(":"))
    label = lines[start][:-1]
    end = next(n for n in range(first, len(lines)) if lines[n].strip().startswith("j") and label in lines[n])
    return lines[start:end + 1]


if MICRO_KERNEL:
    loop = inner_loop(gemm_kernel.asm)
    print("\n".join(loop))
    assert sum("vfmadd231ps" in line for line in loop) == MR * NR // x86.ISAS[ISA][0]

# %% [markdown]
# `print(sch.trace)` is the whole schedule as replayable Python: the recipe to copy.

# %%
print(sch.trace)

# %% [markdown]
# ## 2. What lowering does for you
#
# ### compact_buffers
#
# The softmax of [03](03_fusion.py), with its exponentials `E` as an intermediate: computed
# at the row loop, each row's `E` is produced and consumed inside one iteration. The
# function still declares `E` as rows x cols, and a naive lowering would allocate (and
# stream through memory) all of it. `compact_buffers` (TVM's CompactBufferAllocation) finds
# that no value of `E` crosses from one row to the next and allocates one row per iteration,
# inside the parallel loop, so on each thread's stack: it never leaves L1.

# %%
ROWS, COLS = (64, 256) if SMALL else (4096, 1024)
LANES = 16   # two AVX2 vectors per step of the row reductions


@T.prim_func
def softmax(A: T.Buffer((ROWS, COLS), "float32"), Out: T.Buffer((ROWS, COLS), "float32")):
    mx = T.alloc_buffer((ROWS,), "float32")
    E = T.alloc_buffer((ROWS, COLS), "float32")
    den = T.alloc_buffer((ROWS,), "float32")
    for i, k in T.grid(ROWS, COLS):
        with T.block("max"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                mx[vi] = T.min_value("float32")
            mx[vi] = T.max(mx[vi], A[vi, vk])
    for i, k in T.grid(ROWS, COLS):
        with T.block("exp"):
            vi, vk = T.axis.remap("SS", [i, k])
            E[vi, vk] = T.exp(A[vi, vk] - mx[vi])
    for i, k in T.grid(ROWS, COLS):
        with T.block("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                den[vi] = T.float32(0)
            den[vi] = den[vi] + E[vi, vk]
    for i, k in T.grid(ROWS, COLS):
        with T.block("norm"):
            vi, vk = T.axis.remap("SS", [i, k])
            Out[vi, vk] = E[vi, vk] * (T.float32(1) / den[vi])


def softmax_schedule() -> tdsl.Schedule:
    """03's recipe: every stage at the row loop, reductions rfactor-ed into LANES partials,
    elementwise stages vectorized, rows in parallel."""
    sch = tdsl.Schedule(softmax)
    row, col = sch.get_loops(sch.get_block("norm"))
    for name in ("sum", "exp", "max"):
        sch.compute_at(sch.get_block(name), row)
    for name in ("max", "exp", "sum"):
        block = sch.get_block(name)
        _, inner = sch.split(sch.get_loops(block)[-1], factors=[None, LANES])
        if name == "exp":
            sch.vectorize(inner)
            continue
        rf = sch.rfactor(inner, 1)
        init = sch.decompose_reduction(rf, sch.get_loops(rf)[-2])
        sch.vectorize(sch.get_loops(init)[-1])
        sch.vectorize(sch.get_loops(rf)[-1])
    _, inner = sch.split(col, factors=[None, LANES])
    sch.vectorize(inner)
    sch.parallel(row)
    return sch


x = rng.standard_normal((ROWS, COLS), dtype=np.float32) * 4


def softmax_numpy(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


sm_want = softmax_numpy(x)
sm = softmax_schedule()
sm_kernel = tdsl.build(sm, target="cpu")
np.testing.assert_allclose(sm_kernel(x), sm_want, rtol=1e-5, atol=1e-6)

# %% [markdown]
# The allocations after lowering: `E` is one row (COLS floats) inside `T.parallel`, `mx` and
# `den` one element, the rfactor partials one vector of LANES.

# %%
allocs = lowered_lines(sm, "allocate", "T.parallel")
print("\n".join(allocs))
e_alloc = next(line for line in allocs if line.strip().startswith("E ="))
assert f"({COLS},)" in e_alloc, e_alloc

# %% [markdown]
# ### Streaming stores: `tdsl.nontemporal`
#
# `Out` is written once and not read again by the kernel. An ordinary store first reads the
# cache line it writes into (write-allocate): for a memory-bound kernel that is a third of
# the traffic (read A, read Out's lines, write Out). A non-temporal store (`vmovntps`) writes
# around the caches, with no read. `sch.annotate(block, "tdsl.nontemporal", True)` asks for
# them on every store of that block; the LLVM IR carries `!nontemporal` metadata. x86 needs
# the address of a vector streaming store aligned to 16 bytes and numpy only promises 4, so
# the generated code tests it: aligned, `vmovntps`; otherwise a plain store.
#
# It is a hint, not a semantic change: the results are bit-identical. It pays off only when
# the output does not fit in cache (4096 x 1024 floats are 16 MiB here); for an output that
# the next kernel reads while it is still in L2, streaming it out to memory is a loss.

# %%
sm_nt = softmax_schedule()
sm_nt.annotate(sm_nt.get_block("norm"), "tdsl.nontemporal", True)
sm_nt_kernel = tdsl.build(sm_nt, target="cpu")
nt_lines = [line.strip() for line in sm_nt_kernel.source.splitlines() if "!nontemporal" in line]
print(f"{len(nt_lines)} store(s) with !nontemporal, e.g.\n  {nt_lines[0]}")
assert nt_lines and "!nontemporal" not in sm_kernel.source
np.testing.assert_array_equal(sm_nt_kernel(x), sm_kernel(x))   # identical results
if MICRO_KERNEL:   # on x86: the streaming stores in the assembly
    streaming = [line.strip() for line in sm_nt_kernel.asm.splitlines() if "vmovnt" in line]
    print(f"{len(streaming)} streaming stores in the assembly, e.g. {streaming[0]}")

# %% [markdown]
# ## 3. Measuring honestly
#
# A few rules, each learned the hard way on a shared 2-core machine:
#
# * **Ratios, not absolute times.** The same kernel's time moves by 2x from minute to minute
#   when other processes share the cores (turbo clocks, a neighbour in L3). numpy run in the
#   same process, interleaved call by call, sees the same disturbance: the ratio is stable
#   where the times are not.
# * **Minimum over repeats.** Noise only ever adds time; the minimum is the closest to what
#   the code costs. Warm up first (the first call pages in memory and starts the threads).
# * **One thread or two, on purpose.** `TDSL_NUM_THREADS=1` (read when the first parallel
#   kernel starts its thread pool) runs tdsl's parallel loops on the calling thread; with
#   OpenBLAS limited to one thread too (`threadpoolctl.threadpool_limits(1)`), CPU time
#   (`time.thread_time`) measures per-core efficiency and ignores a neighbour stealing a
#   core. Two threads measure what a user gets, and how each runtime reacts to contention
#   (OpenBLAS's threads spin, tdsl's park).
# * **Know which OpenBLAS you compare to.** `OPENBLAS_CORETYPE` forces a kernel family
#   (e.g. `Haswell` on a Zen CPU), and a wrong one can make numpy look slow. `bench/run.py`
#   times numpy both as the environment has it and with `OPENBLAS_CORETYPE` and
#   `OPENBLAS_L2_SIZE` removed, and compares to the faster.
#
# Full runs: `python bench/run.py` (every kernel, a table of ratios and % of the FMA peak
# measured alongside), `python bench/compare_tvm.py` (the same kernels with Apache TVM, when
# it is installed). The helper below is their core, small enough to paste anywhere. The
# ratios are printed, never asserted: a test that fails when the machine is busy is a test
# of the machine.

# %%
ONE_THREAD = os.environ.get("TDSL_NUM_THREADS", "").strip() == "1"


def blas_threads(n: int):
    """A context limiting OpenBLAS to `n` threads, when threadpoolctl is installed."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return nullcontext()
    return threadpool_limits(n)


def compare(label: str, run_tdsl, run_numpy, work: float, unit: str, repeats: int = REPEATS,
            names: tuple[str, str] = ("tdsl", "numpy")) -> float:
    """Time `run_tdsl` and `run_numpy` alternately, `repeats` times each after one warm-up,
    and print the best of each as `work / time` in `unit` and the ratio numpy time / tdsl
    time (> 1: tdsl is faster). CPU time of this thread when TDSL_NUM_THREADS=1, else wall
    time. `names` label the two in the output. Returns the ratio."""
    clock = time.thread_time if ONE_THREAD else time.perf_counter
    with blas_threads(1) if ONE_THREAD else nullcontext():
        run_tdsl()
        run_numpy()
        best_tdsl = best_numpy = math.inf
        for _ in range(repeats):
            t0 = clock()
            run_tdsl()
            t1 = clock()
            run_numpy()
            t2 = clock()
            best_tdsl, best_numpy = min(best_tdsl, t1 - t0), min(best_numpy, t2 - t1)
    ratio = best_numpy / best_tdsl
    threads = "1 thread, CPU time" if ONE_THREAD else "all threads, wall time"
    print(f"{label:<30} {names[0]:>9} {best_tdsl * 1e3:8.3f} ms {work / best_tdsl:6.1f} {unit}   "
          f"{names[1]:>5} {best_numpy * 1e3:8.3f} ms {work / best_numpy:6.1f} {unit}   "
          f"ratio {ratio:5.2f}x  ({threads})")
    return ratio


# %% [markdown]
# The GEMM against `np.matmul` (OpenBLAS's sgemm), in GFLOP/s, with C in micro-tiles and in
# place. On the Zen 3 this was written on (2 cores, shared with other jobs), one thread, C in
# micro-tiles ran at 0.87x-0.95x numpy and C in place at 0.65x-0.75x (the 4 KiB row stride
# at N = 1024); two threads, wall time, 0.7x-1.1x and 0.55x-0.9x. OpenBLAS runs at ~85% of the core's
# FMA peak here; `docs/performance.md` says what is left and why. The softmax against
# numpy's (several passes over memory, each with a temporary) is a different story: 5x-10x.
# The last line times the two softmax kernels against each other: with 16 MiB of output,
# the streaming stores were 10%-20% faster on one thread (CPU time), while two threads in
# wall time on the shared machine gave anything from 0.6x to 1.2x; in cache (the small
# sizes) they do not pay.

# %%
c_out = np.empty((N, N), np.float32)
gflop = 2.0 * N ** 3 / 1e9
compare(f"GEMM {N}^3, C in micro-tiles", lambda: gemm_kernel(a, b, c_out), lambda: np.matmul(a, b, out=c_out),
        gflop, "GFLOP/s")
compare(f"GEMM {N}^3, C in place", lambda: gemm_in_place(a, b, c_out), lambda: np.matmul(a, b, out=c_out),
        gflop, "GFLOP/s")
sm_out = np.empty_like(x)
sm_bytes = 2.0 * x.nbytes / 1e9   # read A once, write Out once
compare(f"softmax {ROWS}x{COLS}", lambda: sm_kernel(x, sm_out), lambda: softmax_numpy(x), sm_bytes, "GB/s")
compare(f"softmax {ROWS}x{COLS}, nontemporal", lambda: sm_nt_kernel(x, sm_out), lambda: softmax_numpy(x),
        sm_bytes, "GB/s")
compare(f"softmax {ROWS}x{COLS}", lambda: sm_nt_kernel(x, sm_out), lambda: sm_kernel(x, sm_out),
        sm_bytes, "GB/s", names=("streaming", "plain"))
np.testing.assert_allclose(sm_out, sm_want, rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(c_out, c_want, rtol=1e-4, atol=1e-3)

if SKIPPED:  # say what did not run here rather than "all checks passed"
    print(f"08_performance: the checks that ran passed; skipped here: {'; '.join(SKIPPED)}")
else:
    print("08_performance: all checks passed")
