# %% [markdown]
# # 04 · Symbolic shapes
#
# A dimension written as a string in a buffer annotation is symbolic: one compiled kernel
# serves every size, and the size is bound from the arrays at call time. In the body the
# dimension is referred to by its bare name.

# %%
import numpy as np

import tdsl
from tdsl import T


@T.prim_func
def rowwise_scale(A: T.Buffer(("n", "m"), "float32"), s: T.Buffer(("n",), "float32"),
                  B: T.Buffer(("n", "m"), "float32")):
    for i, j in T.grid(n, m):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * s[vi]


print(rowwise_scale)

# %% [markdown]
# Schedules work on symbolic loops too. A split by a constant factor of a symbolic extent
# cannot know whether the factor divides it, so it adds a predicate (`T.where`) that keeps the
# meaning for every size.

# %%
sch = tdsl.Schedule(rowwise_scale)
i, j = sch.get_loops(sch.get_block("B"))
j0, j1 = sch.split(j, factors=[None, 8])
sch.parallel(i)
sch.show()

# %% [markdown]
# One build; any size. Shapes are checked for consistency: `n` must be the same in `A`, `s`
# and `B`.

# %%
kernel = tdsl.build(sch, target="cpu")
rng = np.random.default_rng(0)
for n, m in [(3, 5), (17, 64), (128, 100)]:
    a = rng.standard_normal((n, m), dtype=np.float32)
    s = rng.standard_normal(n, dtype=np.float32)
    b = kernel(a, s)
    np.testing.assert_allclose(b, a * s[:, None], rtol=1e-6)
    print(f"n={n:4d} m={m:4d}: ok")

try:
    kernel(np.zeros((4, 8), "float32"), np.zeros(5, "float32"))
except tdsl.ArgumentError as err:
    print("inconsistent sizes ->", err)

# %% [markdown]
# The interpreter binds the same dimensions, so it checks any schedule at any size.

# %%
a = rng.standard_normal((5, 7), dtype=np.float32)
s = rng.standard_normal(5, dtype=np.float32)
np.testing.assert_allclose(tdsl.interpret(sch.func, a, s), a * s[:, None], rtol=1e-6)
print("04_symbolic_shapes: all checks passed")
