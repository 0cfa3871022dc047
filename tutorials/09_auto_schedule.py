# %% [markdown]
# # 09 · Auto-scheduling: a good schedule with no measurement, as a trace you can edit
#
# [08](08_performance.py) wrote a GotoBLAS GEMM by hand: 30 schedule steps, each chosen by
# someone who knows the cache sizes. `tdsl.auto_schedule(func, target)` writes such a schedule
# for you from a set of rules (inline elementwise blocks, tile multiply-accumulates onto the
# register micro-kernel, fuse row reductions, vectorize, parallelize...), with every tile size
# and unroll depth chosen for this machine -- and without running anything. What you get back
# is an ordinary `Schedule`: its trace is Python you can read, edit and replay.
#
# 1. A plain kernel -> `auto_schedule` -> build, check, time.
# 2. Reading the trace: the steps, and the *decisions* of its sampling steps.
# 3. Changing one decision by hand, replaying, comparing speeds.
# 4. A multi-block kernel (softmax), and the design space a search would explore.

# %%
import os
import time

import numpy as np

import tdsl

SMALL = bool(os.environ.get("TDSL_TUTORIAL_SMALL"))
N = 128 if SMALL else 512
REPEATS = 3 if SMALL else 10
rng = np.random.default_rng(0)


def best_time(fn, repeats=REPEATS):
    """The fastest of `repeats` calls (the least disturbed one on a shared machine)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


# %% [markdown]
# ## 1. From a plain kernel to a schedule
#
# The kernel is the matmul every tutorial starts from, written without any schedule.

# %%
matmul = tdsl.parse(f'''
@T.prim_func
def matmul(A: T.Buffer(({N}, {N}), "float32"), B: T.Buffer(({N}, {N}), "float32"),
           C: T.Buffer(({N}, {N}), "float32")):
    for i, j, k in T.grid({N}, {N}, {N}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
''')

start = time.perf_counter()
sch = tdsl.auto_schedule(matmul, "cpu")
print(f"auto_schedule took {time.perf_counter() - start:.2f} s and wrote {len(sch.trace)} steps")

a = rng.standard_normal((N, N), dtype=np.float32)
b = rng.standard_normal((N, N), dtype=np.float32)
c = np.empty((N, N), np.float32)
auto_kernel = tdsl.build(sch)
auto_kernel(a, b, c)
np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)

naive_kernel = tdsl.build(matmul)
t_naive = best_time(lambda: naive_kernel(a, b, c), repeats=1)
t_auto = best_time(lambda: auto_kernel(a, b, c))
t_numpy = best_time(lambda: np.matmul(a, b, out=c))
print(f"naive {t_naive * 1e3:.1f} ms, auto {t_auto * 1e3:.2f} ms, numpy {t_numpy * 1e3:.2f} ms "
      f"(auto is {t_naive / t_auto:.0f}x the naive loop, {t_numpy / t_auto:.2f}x numpy)")

# %% [markdown]
# ## 2. Reading the trace
#
# `print(sch.trace)` shows every step as Python. Look for the same structure as 08's hand
# schedule: B packed into NR-wide panels (`cache_read` + `transform_layout`), A packed per
# block of rows, C computed in micro-tiles, the loops split, reordered and parallelized, and
# the micro-kernel `tensorize`d. The tile counts are `sample_categorical` steps: each records
# its candidates and its `decision` (the index of the one taken), here the rules' defaults.

# %%
print(sch.trace)
decisions = sch.trace.decisions       # {step index: decision} of the sampling steps
for step, decision in decisions.items():
    print(f"step {step}: {sch.trace.as_python()[step]}")
assert any(ins.kind == "tensorize" for ins in sch.trace)

# %% [markdown]
# The trace replays: on the same function it gives the same schedule, and its JSON form (what
# a tuning database stores) round-trips.

# %%
replayed = sch.trace.apply(matmul)
assert tdsl.structural_equal(replayed.func, sch.func)
stored = sch.trace.as_json()
assert tdsl.structural_equal(tdsl.schedule.Trace.from_json(stored).apply(matmul).func, sch.func)

# %% [markdown]
# ## 3. Changing one decision by hand
#
# The first categorical decision is NC / NR, how many NR-wide panels of C one pass over k
# covers. Take the smallest instead: each pass then works on a narrow slab of B, so packed A
# is re-read from L2 for every panel. `with_decisions` changes only that decision; replaying
# gives a new schedule (a decision that does not fit raises a ScheduleError instead).

# %%
first = min(step for step in decisions if sch.trace.instructions[step].kind == "sample_categorical")
candidates = dict(sch.trace.instructions[first].attrs)["candidates"]
print(f"step {first} chose {candidates[decisions[first]]} of {candidates}; trying {candidates[0]}")
edited = sch.trace.with_decisions({first: 0}).apply(matmul)
edited_kernel = tdsl.build(edited)
edited_kernel(a, b, c)
np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
t_edited = best_time(lambda: edited_kernel(a, b, c))
t_auto = best_time(lambda: auto_kernel(a, b, c))
print(f"default {t_auto * 1e3:.2f} ms, edited {t_edited * 1e3:.2f} ms "
      f"({t_edited / t_auto:.2f}x the default's time)")

# %% [markdown]
# ## 4. Many blocks: softmax, and the design space
#
# A softmax is four blocks (row max, exp, row sum, normalise). The rules compute the three
# producers inside the row loop of the last one (`compute_at`, so each row is read from memory
# once), turn the two reductions into vector partial sums (`rfactor`), vectorize and
# parallelize -- the shape of the hand schedule in `bench/schedules.py`.

# %%
rows, cols = (64, 256) if SMALL else (2048, 1024)
softmax = tdsl.parse(f'''
@T.prim_func
def softmax(A: T.Buffer(({rows}, {cols}), "float32"), B: T.Buffer(({rows}, {cols}), "float32")):
    row_max = T.alloc_buffer(({rows},), "float32")
    row_sum = T.alloc_buffer(({rows},), "float32")
    E = T.alloc_buffer(({rows}, {cols}), "float32")
    for i, j in T.grid({rows}, {cols}):
        with T.block("max"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                row_max[vi] = T.min_value("float32")
            row_max[vi] = T.max(row_max[vi], A[vi, vj])
    for i, j in T.grid({rows}, {cols}):
        with T.block("exp"):
            vi, vj = T.axis.remap("SS", [i, j])
            E[vi, vj] = T.exp(A[vi, vj] - row_max[vi])
    for i, j in T.grid({rows}, {cols}):
        with T.block("sum"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                row_sum[vi] = T.float32(0)
            row_sum[vi] = row_sum[vi] + E[vi, vj]
    for i, j in T.grid({rows}, {cols}):
        with T.block("norm"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = E[vi, vj] / row_sum[vi]
''')
sm = tdsl.auto_schedule(softmax, "cpu")
sm.show()
x = rng.standard_normal((rows, cols), dtype=np.float32)
y = tdsl.build(sm)(x)
e = np.exp(x - x.max(axis=1, keepdims=True))
np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)

# %% [markdown]
# `tdsl.space(func, target)` lists the design space's *sketches*: the rules' alternatives
# (another micro-kernel tile, padding inlined or not, ...) with their choices sampled at random
# instead of the defaults. A tuning search (`tdsl.tune`) starts from these and changes their
# decisions. The same target string "cuda" gives thread-bound schedules for a GPU.

# %%
space = tdsl.space(matmul, "cpu", seed=0)
print(f"{len(space)} sketches; the first one's decisions: {space[0].trace.decisions}")
gpu = tdsl.auto_schedule(matmul, "cuda")
assert "threadIdx.x" in gpu.func.script()
print("all checks passed")
