# %% [markdown]
# # 03 · Fusion: row softmax and layernorm
#
# A softmax written the obvious way is a loop nest per stage (scale, row max, exponentials,
# row sum, normalize), each streaming the whole matrix through memory. Here we fuse them into one loop
# over rows with `compute_inline` and `compute_at`, split each row reduction with `rfactor` so
# it vectorizes, and run the rows in parallel. Every step is checked by tdsl, and the result is
# checked against numpy through the interpreter and the compiled kernel. Layernorm follows the
# same recipe.

# %%
import os

import numpy as np

import tdsl
from tdsl import T

SMALL = bool(os.environ.get("TDSL_TUTORIAL_SMALL"))
M, N = (16, 64) if SMALL else (256, 1024)
VEC = 8  # AVX2: eight float32 lanes

# %% [markdown]
# ## The multi-block softmax
# An attention-style softmax of `A * scale`, one block per stage: `scale` and `exp` compute
# each element once; `max` and `sum` are reductions (`R` iterator, `T.init`); `norm` divides.
# The intermediates `X`, `mx`, `E` and `den` are ordinary buffers between the stages.

# %%
SCALE = 0.125


@T.prim_func
def softmax(A: T.Buffer((M, N), "float32"), Out: T.Buffer((M, N), "float32")):
    X = T.alloc_buffer((M, N), "float32")
    mx = T.alloc_buffer((M,), "float32")
    E = T.alloc_buffer((M, N), "float32")
    den = T.alloc_buffer((M,), "float32")
    for i, k in T.grid(M, N):
        with T.block("scale"):
            vi, vk = T.axis.remap("SS", [i, k])
            X[vi, vk] = A[vi, vk] * T.float32(SCALE)
    for i, k in T.grid(M, N):
        with T.block("max"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                mx[vi] = T.min_value("float32")
            mx[vi] = T.max(mx[vi], X[vi, vk])
    for i, k in T.grid(M, N):
        with T.block("exp"):
            vi, vk = T.axis.remap("SS", [i, k])
            E[vi, vk] = T.exp(X[vi, vk] - mx[vi])
    for i, k in T.grid(M, N):
        with T.block("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                den[vi] = T.float32(0)
            den[vi] = den[vi] + E[vi, vk]
    for i, k in T.grid(M, N):
        with T.block("norm"):
            vi, vk = T.axis.remap("SS", [i, k])
            Out[vi, vk] = E[vi, vk] / den[vi]


print(softmax)

rng = np.random.default_rng(0)
a = rng.standard_normal((M, N), dtype=np.float32) * 8
x = a * np.float32(SCALE)
e = np.exp(x - x.max(axis=1, keepdims=True))
want = e / e.sum(axis=1, keepdims=True)
np.testing.assert_allclose(tdsl.interpret(softmax, a), want, rtol=1e-5, atol=1e-6)
baseline = tdsl.build(softmax, target="cpu")
np.testing.assert_allclose(baseline(a), want, rtol=1e-5, atol=1e-6)

# %% [markdown]
# ## An illegal step is refused, and changes nothing
# `compute_inline` substitutes a producer's expression into its consumers. That only makes
# sense for a block that computes each element once; `max` is a reduction, so tdsl refuses,
# says why, and suggests the primitive that fits. The schedule is exactly as before the call.

# %%
sch = tdsl.Schedule(softmax)
before = sch.func
try:
    sch.compute_inline(sch.get_block("max"))
    raise AssertionError("inlining a reduction must be refused")
except tdsl.ScheduleError as err:
    print(err)
assert tdsl.structural_equal(sch.func, before)

# %% [markdown]
# ## Step 1: inline the scaling
# `scale` is elementwise and cheap, so we inline it: `max` and `exp` now read
# `A[vi, vk] * 0.125` directly and the `M x N` buffer `X` disappears, with its memory traffic.
# (`exp` could be inlined the same way, but then `sum` and `norm` would each compute the
# exponential: one multiply is worth recomputing, an `exp` is not.)

# %%
sch.compute_inline(sch.get_block("scale"))
sch.show(diff=True)

# %% [markdown]
# ## Step 2: move every stage into the row loop
# `compute_at(block, loop)` places a producer under a loop of its consumer, computing just
# the part the consumer needs at each iteration: the row's sum, exponentials and max. We go
# from the last producer to the first (`sum`, `exp`, `max`), so each lands before its readers.
# Now every stage of row `i` runs back to back, while the row and its exponentials are in cache.

# %%
norm = sch.get_block("norm")
i, j = sch.get_loops(norm)
for name in ("sum", "exp", "max"):
    sch.compute_at(sch.get_block(name), i)
sch.show(diff=True)

# %% [markdown]
# ## Step 3: rfactor the row reductions so they vectorize
# A reduction into one scalar cannot be vectorized directly: every step depends on the last.
# `rfactor` splits it into `VEC` independent partial reductions (a new block `max_rf` over the
# inner split loop, into a new buffer `max_rf`), followed by a short reduction of the partials.
# The partial loop is now spatial, so it vectorizes. `decompose_reduction` moves the
# partials' initialisation out of the loop over `k` so the update has no branch.

# %%
for name in ("max", "sum"):
    _, k = sch.get_loops(sch.get_block(name))
    _, k_inner = sch.split(k, factors=[None, VEC])
    rf = sch.rfactor(k_inner, 1)   # factor_axis=1: partials stored as rf[row, lane], contiguous
    if name == "max":
        sch.show(diff=True)
    _, k_outer, lane = sch.get_loops(rf)
    sch.vectorize(lane)
    sch.decompose_reduction(rf, k_outer)
    if name == "max":
        sch.show(diff=True)

# %% [markdown]
# ## Step 4: vectorize the elementwise stages, parallelise the rows
# Rows are independent, so the row loop runs on all cores.

# %%
_, k = sch.get_loops(sch.get_block("exp"))
_, k_inner = sch.split(k, factors=[None, VEC])
sch.vectorize(k_inner)
_, j_inner = sch.split(j, factors=[None, VEC])
sch.vectorize(j_inner)
sch.parallel(i)
sch.show()

# %% [markdown]
# The same schedule means the same thing: the interpreter and the compiled kernel both match
# numpy. The lowered IR shows the vector loads (`T.Ramp`) that came out of the schedule.

# %%
np.testing.assert_allclose(tdsl.interpret(sch.func, a), want, rtol=1e-5, atol=1e-6)
fused = tdsl.build(sch, target="cpu")
np.testing.assert_allclose(fused(a), want, rtol=1e-5, atol=1e-6)
lowered = tdsl.lower(sch, target="cpu").script()
assert "T.Ramp" in lowered and "T.parallel" in lowered
print(lowered)
out = np.empty_like(a)
t0, t1 = baseline.time(a, out), fused.time(a, out)
print(f"softmax {M}x{N}: five loop nests {t0 * 1e6:.1f} us, fused {t1 * 1e6:.1f} us "
      f"(timings depend on the machine and its load)")

# %% [markdown]
# `print(sch.trace)` replays the whole schedule as Python.

# %%
print(sch.trace)

# %% [markdown]
# ## Layernorm: the same recipe
# Two row reductions (sum and sum of squares) feed the normalisation. We fuse them into the
# row loop, rfactor them, vectorize and parallelise exactly as above.

# %%
@T.prim_func
def layernorm(A: T.Buffer((M, N), "float32"), gamma: T.Buffer((N,), "float32"),
              beta: T.Buffer((N,), "float32"), Out: T.Buffer((M, N), "float32")):
    S = T.alloc_buffer((M,), "float32")
    Q = T.alloc_buffer((M,), "float32")
    for i, k in T.grid(M, N):
        with T.block("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                S[vi] = T.float32(0)
            S[vi] = S[vi] + A[vi, vk]
    for i, k in T.grid(M, N):
        with T.block("sqsum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                Q[vi] = T.float32(0)
            Q[vi] = Q[vi] + A[vi, vk] * A[vi, vk]
    for i, j in T.grid(M, N):
        with T.block("norm"):
            vi, vj = T.axis.remap("SS", [i, j])
            mean = S[vi] / T.float32(N)
            var = Q[vi] / T.float32(N) - mean * mean
            Out[vi, vj] = (A[vi, vj] - mean) * T.rsqrt(var + T.float32(1e-5)) * gamma[vj] + beta[vj]


ln = tdsl.Schedule(layernorm)
i, j = ln.get_loops(ln.get_block("norm"))
for name in ("sqsum", "sum"):
    ln.compute_at(ln.get_block(name), i)
for name in ("sum", "sqsum"):
    _, k = ln.get_loops(ln.get_block(name))
    _, k_inner = ln.split(k, factors=[None, VEC])
    rf = ln.rfactor(k_inner, 1)
    _, k_outer, lane = ln.get_loops(rf)
    ln.vectorize(lane)
    ln.decompose_reduction(rf, k_outer)
_, j_inner = ln.split(j, factors=[None, VEC])
ln.vectorize(j_inner)
ln.parallel(i)
ln.show()

gamma = rng.standard_normal(N, dtype=np.float32)
beta = rng.standard_normal(N, dtype=np.float32)
mean = a.mean(axis=1, keepdims=True)
want_ln = (a - mean) / np.sqrt(a.var(axis=1, keepdims=True) + 1e-5) * gamma + beta
np.testing.assert_allclose(tdsl.interpret(ln.func, a, gamma, beta), want_ln, rtol=1e-4, atol=1e-4)
np.testing.assert_allclose(tdsl.build(ln, target="cpu")(a, gamma, beta), want_ln, rtol=1e-4, atol=1e-4)
print("03_fusion: all checks passed")
