# %% [markdown]
# # 13 · Where kernels are used: a PyTorch custom op under torch.compile, then C with no Python
#
# A kernel is written to be used. This tutorial takes one fused kernel -- a GEMM, plus a bias,
# through GELU, in one pass over the output -- to the two places kernels end up:
#
# 1. The kernel, scheduled by `tdsl.auto_schedule`, checked against numpy.
# 2. `tdsl.torch.custom_op`: a `torch.library` custom op inside a `torch.nn.Module`, compiled
#    by `torch.compile(fullgraph=True)` with no graph break (its fake implementation comes from
#    the IR), giving the same numbers as eager PyTorch.
# 3. `kernel.export(dir)`: a shared library and a C header. A C program includes the header,
#    links the library and runs it in an empty environment -- no Python, no llvmlite, no tdsl.
#    `tdsl.load` gives the same kernel back in Python without compiling.
#
# Without torch (`pip install -e ".[torch]"`) or a C compiler the steps that need them are
# skipped, and the last line says so.

# %%
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np

import tdsl

SMALL = bool(os.environ.get("TDSL_TUTORIAL_SMALL"))
M, K, N = (32, 128, 128) if SMALL else (128, 512, 512)
rng = np.random.default_rng(0)
skipped = []

# %% [markdown]
# ## 1. The fused kernel
#
# `Y = gelu(X @ W + b)` with the exact GELU, `0.5 * y * (1 + erf(y / sqrt(2)))`. Two blocks: the
# GEMM accumulates into `C` (an intermediate, never seen by the caller), and the epilogue reads
# each element of `C` once. `auto_schedule` tiles the GEMM onto the register micro-kernel and
# fuses the epilogue into it, so `C` never makes a round trip through memory.

# %%
gemm_gelu = tdsl.parse(f'''
@T.prim_func
def gemm_gelu(X: T.Buffer(({M}, {K}), "float32"), W: T.Buffer(({K}, {N}), "float32"),
              bias: T.Buffer(({N},), "float32"), Y: T.Buffer(({M}, {N}), "float32")):
    C = T.alloc_buffer(({M}, {N}), "float32")
    for i, j, k in T.grid({M}, {N}, {K}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + X[vi, vk] * W[vk, vj]
    for i, j in T.grid({M}, {N}):
        with T.block("Y"):
            vi, vj = T.axis.remap("SS", [i, j])
            y = C[vi, vj] + bias[vj]
            Y[vi, vj] = T.float32(0.5) * y * (T.float32(1) + T.erf(y * T.float32(0.7071067811865476)))
''')


def reference(x, w, b):
    from math import erf, sqrt

    y = x.astype(np.float64) @ w + b
    return (0.5 * y * (1 + np.vectorize(erf)(y / sqrt(2)))).astype(np.float32)


start = time.perf_counter()
sch = tdsl.auto_schedule(gemm_gelu, "cpu")
kernel = tdsl.build(sch)
print(f"auto_schedule + build: {time.perf_counter() - start:.2f} s, {len(sch.trace)} schedule steps")

x = rng.standard_normal((M, K), dtype=np.float32)
w = (rng.standard_normal((K, N), dtype=np.float32) / np.sqrt(K)).astype(np.float32)
b = rng.standard_normal(N, dtype=np.float32)
y = kernel(x, w, b)                       # Y is left out: the kernel allocates it
np.testing.assert_allclose(y, reference(x, w, b), rtol=1e-4, atol=1e-5)

# %% [markdown]
# ## 2. A custom op that torch.compile keeps whole
#
# `tdsl.torch.custom_op("namespace::name", kernel)` registers a `torch.library` custom op. Its
# arguments are the kernel's inputs in order (`X, W, bias`); it returns what the kernel would
# allocate (`Y`). Its fake implementation computes `Y`'s shape and dtype from the IR, so
# `torch.compile` traces through it without running it, and `fullgraph=True` proves there is no
# graph break. `torch.library.opcheck` runs torch's own consistency tests on the op.

# %%
try:
    import torch
except ImportError:
    torch = None
    skipped.append("the torch steps (torch is not installed)")

if torch is not None:
    import tdsl.torch

    op = tdsl.torch.custom_op("tutorial::gemm_gelu", kernel)

    class FusedMLP(torch.nn.Module):
        """A linear layer and GELU as one tdsl kernel, then a residual add done by PyTorch."""

        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.from_numpy(w.copy()), requires_grad=False)
            self.bias = torch.nn.Parameter(torch.from_numpy(b.copy()), requires_grad=False)

        def forward(self, x):
            return op(x, self.weight, self.bias) + x[:, :N]

    model = FusedMLP()
    xt = torch.from_numpy(x)
    eager = model(xt)
    expected = torch.nn.functional.gelu(xt @ model.weight + model.bias) + xt[:, :N]
    torch.testing.assert_close(eager, expected, rtol=1e-4, atol=1e-4)

    compiled = torch.compile(model, fullgraph=True)     # a graph break would raise here
    start = time.perf_counter()
    torch.testing.assert_close(compiled(xt), eager)
    print(f"torch.compile(fullgraph=True): same numbers as eager (first call {time.perf_counter() - start:.1f} s)")
    result = torch.library.opcheck(op, (xt, model.weight.detach(), model.bias.detach()))
    assert set(result.values()) == {"SUCCESS"}, result
    print("opcheck:", ", ".join(result))

# %% [markdown]
# ## 3. Ahead of time: a library, a header, and C
#
# `kernel.export(dir)` writes `dir/gemm_gelu.so` and `dir/gemm_gelu.h`. The library holds the
# kernel's machine code and the parallel runtime (its own thread pool); it needs only libc,
# libm and libpthread. The header declares `int gemm_gelu(const float *X, const float *W, const
# float *bias, float *Y)` -- one pointer per buffer parameter, then one `int64_t` per symbolic
# dimension (none here), then scalars -- and the codes it returns when a check fails.

# %%
out_dir = tempfile.mkdtemp(prefix="tdsl-tutorial-13-")
library = kernel.export(os.path.join(out_dir, "gemm_gelu"))
header = os.path.join(out_dir, "gemm_gelu", "gemm_gelu.h")
with open(header) as f:
    header_text = f.read()
print(header_text.split("#ifndef")[0].strip())
print("\n".join(line for line in header_text.splitlines(keepends=True) if line.startswith("int ")))

# %% [markdown]
# The C program reads the inputs numpy wrote, calls the kernel, writes `Y`, and is run with
# `env -i`: an empty environment, so nothing of Python can be found.

# %%
C_PROGRAM = f"""
#include <stdio.h>
#include <stdlib.h>
#include "gemm_gelu.h"

static void read_all(const char *path, float *dst, size_t count) {{
    FILE *f = fopen(path, "rb");
    if (!f || fread(dst, sizeof(float), count, f) != count) {{ perror(path); exit(2); }}
    fclose(f);
}}

int main(void) {{
    static float x[{M} * {K}], w[{K} * {N}], bias[{N}], y[{M} * {N}];
    read_all("x.bin", x, {M} * {K});
    read_all("w.bin", w, {K} * {N});
    read_all("b.bin", bias, {N});
    int rc = gemm_gelu(x, w, bias, y);
    if (rc != GEMM_GELU_OK) {{ fprintf(stderr, "gemm_gelu returned %d\\n", rc); return 1; }}
    FILE *f = fopen("y.bin", "wb");
    fwrite(y, sizeof(float), {M} * {N}, f);
    fclose(f);
    printf("C: gemm_gelu returned %d\\n", rc);
    return 0;
}}
"""

cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
if cc is None:
    skipped.append("the C program (no C compiler: apt-get install gcc)")
else:
    work = os.path.join(out_dir, "c")
    os.makedirs(work)
    with open(os.path.join(work, "main.c"), "w") as fh:
        fh.write(C_PROGRAM)
    lib_dir = os.path.dirname(library)
    subprocess.run([cc, "-O2", "-o", "main", "main.c", f"-I{lib_dir}", f"-L{lib_dir}", "-l:gemm_gelu.so",
                    f"-Wl,-rpath,{lib_dir}"], cwd=work, check=True)
    x.tofile(os.path.join(work, "x.bin"))
    w.tofile(os.path.join(work, "w.bin"))
    b.tofile(os.path.join(work, "b.bin"))
    proc = subprocess.run(["env", "-i", "./main"], cwd=work, check=True, capture_output=True, text=True)
    print(proc.stdout.strip())
    y_c = np.fromfile(os.path.join(work, "y.bin"), np.float32).reshape(M, N)
    np.testing.assert_array_equal(y_c, y)             # the same machine code as the built kernel
    print("C result equals the Python kernel's")
    if shutil.which("readelf"):
        dyn = subprocess.run(["readelf", "-d", library], capture_output=True, text=True).stdout
        needed = [line.split("[")[1].rstrip("]") for line in dyn.splitlines() if "(NEEDED)" in line]
        print("the library needs:", ", ".join(needed))
        assert not any("python" in n or "LLVM" in n or "llvmlite" in n for n in needed)

# %% [markdown]
# `tdsl.load` gives the library back to Python as a Kernel -- no lowering, no LLVM -- with the
# same argument checks and the same left-out outputs as the built kernel.

# %%
if cc is not None:
    start = time.perf_counter()
    loaded = tdsl.load(library)
    print(f"tdsl.load: {(time.perf_counter() - start) * 1e3:.1f} ms -> {loaded}")
    np.testing.assert_array_equal(loaded(x, w, b), y)

if skipped:
    print(f"13_torch_and_aot: the checks that ran passed; skipped here: {'; '.join(skipped)}")
else:
    print("13_torch_and_aot: all checks passed")
