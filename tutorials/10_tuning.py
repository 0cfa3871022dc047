# %% [markdown]
# # 10 · Tuning: measure, learn, search, remember
#
# [09](09_auto_schedule.py) gave a good schedule with no measurement at all. `tdsl.tune`
# goes further by measuring: it samples candidates from a design space, builds them in
# parallel, times each one in an isolated process (checking its results against the
# unscheduled function first), learns a cost model from the times, and searches where the
# model expects fast code. Everything it measures goes into a SQLite database, so a later
# `tdsl.build(..., database=...)` (in another process, another day) uses the best schedule.
#
# 1. A design space of your own: ordinary primitives plus sampling primitives.
# 2. `tdsl.tune` with a small budget; the result, its table and its trace.
# 3. `tdsl.build(func, database=...)`: the best record, applied.
# 4. tdsl's rules as the design space, resuming from the database.
# 5. Best time so far against trials (a plot, if matplotlib is installed).
# 6. On a cluster: the same call with a Dask executor.

# %%
import os
import tempfile

import numpy as np

import tdsl

SMALL = bool(os.environ.get("TDSL_TUTORIAL_SMALL"))
N = 128 if SMALL else 512
TRIALS = 4 if SMALL else 32

GEMM = f'''
@T.prim_func
def gemm(A: T.Buffer(({N}, {N}), "float32"), B: T.Buffer(({N}, {N}), "float32"),
         C: T.Buffer(({N}, {N}), "float32")):
    for i, j, k in T.grid({N}, {N}, {N}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''
gemm = tdsl.parse(GEMM)

# %% [markdown]
# ## 1. A design space
#
# A design space is a function that schedules `sch` with ordinary primitives, taking the
# numbers it is unsure of from sampling primitives. Each sampling step records its
# *decision* in the trace; the tuner replays the trace with other decisions (mutating one
# tile size, one vector width, one unroll depth at a time, or crossing two good candidates)
# and never has to understand the schedule itself.
#
# * `sch.sample_perfect_tile(loop, n)`: n factors whose product is the loop's extent;
# * `sch.sample_categorical(candidates, probs)`: one of a few values;
# * `sch.sample_compute_location(block)`: where a producer is computed.
#
# Below, a register tile of C in a local buffer (`cache_write`), of sampled height and a
# sampled number of vectors wide, with a sampled k step, the outer loops fused and parallel.

# %%
def gemm_space(sch):
    c = sch.get_block("C")
    acc = sch.cache_write(c, 0, "local")
    i, j, k = sch.get_loops(c)
    ti = sch.sample_perfect_tile(i, n=3, max_innermost_factor=8)      # rows: outer, middle, register tile
    lanes = sch.sample_categorical([8, 16, 32], [0.25, 0.5, 0.25])    # the register tile's width
    tk = sch.sample_perfect_tile(k, n=2, max_innermost_factor=64)
    i0, i1, i2 = sch.split(i, factors=ti)
    j0, j1 = sch.split(j, factors=[None, lanes])
    k0, k1 = sch.split(k, factors=tk)
    sch.reorder(i0, j0, i1, k0, k1, i2, j1)
    sch.reverse_compute_at(acc, i1)
    sch.parallel(sch.fuse(i0, j0))
    sch.vectorize(j1)


# %% [markdown]
# ## 2. Tuning
#
# `trials` counts measured candidates; `time_budget=` (seconds) stops it earlier. In a
# terminal a live bar shows trials, the best time and GFLOP/s, failures, candidates per minute
# and the ETA (`verbose=0` silences it, `verbose=2` prints every candidate); elsewhere only the
# summary is printed. Ctrl-C stops cleanly and returns the best so far. The default executor
# is a pool of fresh local processes, one per core; measurements run one at a time per machine.
# On a shared machine one measurement can be lucky, so the best few are timed again against
# each other, taking turns, at the end (`retime=5`): `best.time` is that re-timed figure,
# `best.record.time` the trial's, and the database remembers the re-timing for `build`.

# %%
workdir = tempfile.mkdtemp(prefix="tdsl-tuning-")
db_path = os.path.join(workdir, "tuning.db")
result = tdsl.tune(gemm, target="cpu", trials=TRIALS, space=gemm_space, database=db_path, seed=0, batch=4 if SMALL else 8)
print(result)                          # the summary table
best = result.best
print(f"best: {best.time * 1e3:.3f} ms re-timed ({best.record.time * 1e3:.3f} ms in its trial), "
      f"{best.gflops:.1f} GFLOP/s, decisions {best.decisions}")
print(best.trace)                      # Python that replays it; edit a decision and replay by hand

# %% [markdown]
# Every candidate is checked against the unscheduled function on random inputs before it is
# timed: one that computes something else, crashes or hangs is recorded as failed, with its
# reason, and is never chosen.

# %%
failed = [r.error for r in result.records if not r.ok]
print(f"{len(result.records)} records, {len(failed)} failed", failed[:2])
a = np.random.rand(N, N).astype("float32")
b = np.random.rand(N, N).astype("float32")
kernel = tdsl.build(best.schedule)     # best.schedule: a Schedule, ready for more hand steps
np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-3)

# %% [markdown]
# ## 3. Remembered: build from the database
#
# The workload key is the function's structural hash, the target and this machine's
# fingerprint (CPU and cores): records measured elsewhere never mix with these. A later
# `tune` with the same database resumes (its records count towards `trials`), and `build`
# applies the best record; a function the database does not know is auto-scheduled, with a
# warning that says so.

# %%
from_db = tdsl.build(gemm, target="cpu", database=db_path)
assert tdsl.structural_equal(from_db.func, best.schedule.func)
np.testing.assert_allclose(from_db(a, b), a @ b, rtol=1e-4, atol=1e-3)
with open(db_path + ".log") as log:
    print("the log beside the database:", *log.read().splitlines()[:3], sep="\n  ")

# %% [markdown]
# ## 4. tdsl's rules as the design space
#
# Without `space=`, the design space is tdsl's rules (`tdsl.space(gemm)` lists its sketches:
# packing, register tiles tensorized with the x86 micro-kernel, parallel loops), the space that
# `tdsl.auto_schedule` takes its defaults from. With the same database the run below resumes:
# the records above count towards its `trials`, and its best is the best of both spaces.

# %%
print(f"the rules give {len(tdsl.space(gemm))} sketches")
rules = tdsl.tune(gemm, target="cpu", trials=2 * TRIALS, database=db_path, seed=1, batch=4 if SMALL else 8)
print(f"best of both spaces: {rules.best.time * 1e3:.3f} ms, {rules.best.gflops:.1f} GFLOP/s")
assert len(rules.records) == 2 * TRIALS
# the best of both spaces is the fastest of the latest re-timing, which timed the fastest few
# of both runs side by side (two timings at different moments, such as best.time above, need
# not agree on a shared machine)
assert rules.best.time == min(rules.tasks[0].retimed.values())
np.testing.assert_allclose(tdsl.build(gemm, database=db_path)(a, b), a @ b, rtol=1e-4, atol=1e-3)

# %% [markdown]
# ## 5. Best so far against trials
#
# `result.plot()` draws it with matplotlib (`pip install matplotlib`); without matplotlib it
# raises an ImportError that says so, and `print(result)` shows the same figures.

# %%
try:
    result.plot(path=os.path.join(workdir, "tuning.png"))
    print("plot saved to", os.path.join(workdir, "tuning.png"))
except ImportError as exc:
    print(exc)

# %% [markdown]
# ## 6. On a cluster
#
# Any `concurrent.futures.Executor` builds (and then measures) the candidates; a Dask
# cluster's executor spreads them over its workers, each measuring on its own hardware
# (records carry the machine that measured them):
#
# ```python
# from dask.distributed import Client
# client = Client("scheduler-address:8786")
# result = tdsl.tune(gemm, trials=256, database="tuning.db", executor=client.get_executor())
# ```

# %%
print("10_tuning: all checks passed")
