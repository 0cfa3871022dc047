# %% [markdown]
# # 01 · A first kernel
#
# Write a kernel, print it, run it with the reference interpreter, build it for the CPU, call it
# like a numpy function, and see what an error looks like.

# %%
import os

import numpy as np

import tdsl
from tdsl import T

N = 64 if os.environ.get("TDSL_TUTORIAL_SMALL") else 256

# %% [markdown]
# A kernel is a Python function decorated with `@T.prim_func`. Its body is never executed by
# Python: tdsl reads the source and builds block-based TensorIR. `N` is captured from the
# enclosing scope. Each `T.block` is a unit of computation with its own iterators: `S` is a
# spatial (data-parallel) axis, `R` a reduction axis.

# %%
@T.prim_func
def scaled_add(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
               C: T.Buffer((N, N), "float32"), alpha: T.float32):
    for i, j in T.grid(N, N):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] + alpha * B[vi, vj]


print(scaled_add)        # the function as tdsl script: T.reads / T.writes were inferred

# %% [markdown]
# The printed text is valid tdsl: parsing it gives back the same function.

# %%
again = tdsl.parse(scaled_add.script())
assert tdsl.structural_equal(again, scaled_add)

# %% [markdown]
# `tdsl.interpret` runs any function without compiling it: it is the reference semantics.
# Outputs left out of the call are allocated and returned.

# %%
rng = np.random.default_rng(0)
a = rng.standard_normal((N, N), dtype=np.float32)
b = rng.standard_normal((N, N), dtype=np.float32)
c_ref = tdsl.interpret(scaled_add, a, b, alpha=2.0)
np.testing.assert_allclose(c_ref, a + 2 * b, rtol=1e-6)

# %% [markdown]
# `tdsl.build` compiles for the CPU through LLVM. The kernel takes numpy arrays (or any
# DLPack tensor) in parameter order, destination-passing like TVM, or returns the outputs it
# allocated when they are left out.

# %%
kernel = tdsl.build(scaled_add, target="cpu")
c = np.empty((N, N), "float32")
kernel(a, b, c, 2.0)                       # destination passing
np.testing.assert_allclose(c, a + 2 * b, rtol=1e-6)
c2 = kernel(a, b, alpha=2.0)               # C left out: allocated and returned
np.testing.assert_allclose(c2, a + 2 * b, rtol=1e-6)
print(kernel.source[:400], "...")          # the LLVM IR

# %% [markdown]
# A reduction: the `with T.init()` section runs when the reduction iterators start.

# %%
@T.prim_func
def row_sum(A: T.Buffer((N, N), "float32"), S: T.Buffer((N,), "float32")):
    for i, k in T.grid(N, N):
        with T.block("S"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                S[vi] = T.float32(0)
            S[vi] += A[vi, vk]


s = tdsl.build(row_sum)(a)
np.testing.assert_allclose(s, a.sum(axis=1), rtol=1e-4, atol=1e-4)

# %% [markdown]
# Errors point at your code. A script error names the file and line with a caret; a wrong
# argument names the parameter and what was expected.

# %%
try:
    tdsl.parse('''
@T.prim_func
def bad(A: T.Buffer((8, 8), "float32")):
    for i in range(8):
        A[i] = T.float32(0)
''')
except tdsl.ScriptError as err:
    print(err)

try:
    kernel(a, b.astype("float64"), c, 2.0)
except tdsl.ArgumentError as err:
    print(err)
print("01_first_kernel: all checks passed")
