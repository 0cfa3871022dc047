# %% [markdown]
# # 07 · Interop: DLPack tensors and tdsl kernels inside numpy code
#
# A compiled kernel takes numpy arrays or any object with `__dlpack__` (PyTorch, JAX, CuPy)
# without copying. Here: a fused GELU written once, called from numpy, and from PyTorch and
# JAX when they are installed.

# %%
import importlib.util

import numpy as np

import tdsl
from tdsl import T


@T.prim_func
def gelu(X: T.Buffer(("n",), "float32"), Y: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("Y"):
            vi = T.axis.spatial(n, i)
            x = X[vi]
            Y[vi] = T.float32(0.5) * x * (T.float32(1) + T.erf(x * T.float32(0.7071067811865476)))


sch = tdsl.Schedule(gelu)
(i,) = sch.get_loops(sch.get_block("Y"))
io, ii = sch.split(i, factors=[None, 16])
sch.vectorize(ii)
kernel = tdsl.build(sch, target="cpu")


def reference(x):
    from math import erf

    return np.array([0.5 * v * (1 + erf(v / np.sqrt(2))) for v in x.astype(np.float64)], np.float32)


# %% [markdown]
# ## Inside ordinary numpy code
# The kernel is a function of arrays: it composes with numpy like any ufunc-style helper.

# %%
rng = np.random.default_rng(0)
x = rng.standard_normal(1000, dtype=np.float32)
y = kernel(x)
np.testing.assert_allclose(y, reference(x), rtol=1e-5, atol=1e-6)
z = np.tanh(kernel(x * 2)) + 1          # mixes freely with numpy
assert z.shape == x.shape

# non-contiguous inputs are copied to a contiguous array; outputs must be writable and contiguous
y2 = kernel(x[::2])
np.testing.assert_allclose(y2, reference(x[::2]), rtol=1e-5, atol=1e-6)

# %% [markdown]
# ## PyTorch (CPU tensors, in place through DLPack)

# %%
SKIPPED: list[str] = []  # what this machine cannot run, said at the end
if importlib.util.find_spec("torch"):
    import torch

    tx = torch.from_numpy(x.copy())
    ty = torch.empty_like(tx)
    kernel(tx, ty)                       # writes into the torch tensor's memory
    np.testing.assert_allclose(ty.numpy(), torch.nn.functional.gelu(tx).numpy(), rtol=1e-5, atol=1e-6)
    print("torch: ok")
else:
    print("torch is not installed: skipped")
    SKIPPED.append("PyTorch (not installed)")

# %% [markdown]
# ## JAX (inputs through DLPack; JAX arrays are immutable, so let tdsl allocate the output)

# %%
if importlib.util.find_spec("jax"):
    import jax.numpy as jnp

    jx = jnp.asarray(x)
    np.testing.assert_allclose(kernel(jx), reference(x), rtol=1e-5, atol=1e-6)
    print("jax: ok")
else:
    print("jax is not installed: skipped")
    SKIPPED.append("JAX (not installed)")

if SKIPPED:  # say what did not run here rather than "all checks passed"
    print(f"07_interop: the checks that ran passed; skipped here: {'; '.join(SKIPPED)}")
else:
    print("07_interop: all checks passed")
