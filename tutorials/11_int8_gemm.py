# %% [markdown]
# # 11 · An int8 GEMM by hand: packing, the VNNI micro-kernel, a requantize epilogue
#
# Quantized inference multiplies uint8 activations by int8 weights, accumulates in int32 and
# requantizes the result to int8. x86 CPUs with AVX512-VNNI (or AVX-VNNI) do 4 of those
# multiply-adds per 32-bit lane in one instruction, `vpdpbusd`: each lane takes 4 consecutive
# bytes of A (broadcast) and the 4 bytes of B for the same k and column. Here we write the GEMM
# as a user would, then schedule it step by step the way `tdsl.auto_schedule` does, printing the
# IR between the steps:
#
# 1. pack B so that each column's 4 consecutive k are adjacent (`cache_read` + `transform_layout`);
# 2. tile the loops to the micro-kernel's MR x NR x KC tile and split off the init;
# 3. `tensorize` the tile with the int8 micro-kernel this CPU runs;
# 4. compute the requantize epilogue per block of rows, right after its GEMM rows.
#
# Every step keeps the meaning: the result is checked bit for bit against numpy.

# %%
import os

import numpy as np

import tdsl
from tdsl import T
from tdsl.intrinsics import x86_lowp
from tdsl.target import cpu_features

SMALL = bool(os.environ.get("TDSL_TUTORIAL_SMALL"))
SKIPPED: list[str] = []  # what this machine cannot run, said at the end
M, N, K = (32, 64, 64) if SMALL else (256, 256, 512)
ZA, ZY = 3, -4     # zero points of A and of the output (B is symmetric: zero point 0)
MR, NR, KC = 4, 32, 64


def show(title: str, sch: tdsl.Schedule, lines: int = 40) -> None:
    """The function's IR after a step (its first `lines` lines)."""
    text = sch.func.script().splitlines()
    print(f"--- {title} ---", *text[:lines], "    ..." if len(text) > lines else "", sep="\n")


@T.prim_func
def qgemm(A: T.Buffer((M, K), "uint8"), B: T.Buffer((K, N), "int8"), scale: T.Buffer((N,), "float32"),
          Y: T.Buffer((M, N), "int8")):
    acc = T.alloc_buffer((M, N), "int32")
    colsum = T.alloc_buffer((N,), "int32")
    for j, k in T.grid(N, K):   # sum_k (A - ZA) * B = sum_k A * B - ZA * colsum(B)
        with T.block("colsum"):
            vj, vk = T.axis.remap("SR", [j, k])
            with T.init():
                colsum[vj] = 0
            colsum[vj] = colsum[vj] + T.cast(B[vk, vj], "int32")
    for i, j, k in T.grid(M, N, K):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                acc[vi, vj] = 0
            acc[vi, vj] = acc[vi, vj] + T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
    for i, j in T.grid(M, N):   # round half to even, add the zero point, saturate to int8
        with T.block("requantize"):
            vi, vj = T.axis.remap("SS", [i, j])
            Y[vi, vj] = T.cast(T.max(T.min(T.cast(T.round(T.cast(acc[vi, vj] - ZA * colsum[vj], "float32")
                                                        * scale[vj]), "int32") + ZY, 127), -128), "int8")


rng = np.random.default_rng(0)
a = rng.integers(0, 256, (M, K)).astype(np.uint8)
b = rng.integers(-128, 128, (K, N)).astype(np.int8)
scale = rng.uniform(1e-4, 3e-4, N).astype(np.float32)
exact = (a.astype(np.int64) - ZA) @ b.astype(np.int64)
want = np.clip(np.rint(exact.astype(np.float32) * scale).astype(np.int32) + ZY, -128, 127).astype(np.int8)


def check(sch: tdsl.Schedule, what: str) -> None:
    """Build and run `sch`, compare with numpy bit for bit."""
    y = np.zeros((M, N), np.int8)
    tdsl.build(sch, target="cpu")(a, b, scale, y)
    np.testing.assert_array_equal(y, want)
    print(f"{what}: built, run, bit-exact")


sch = tdsl.Schedule(qgemm)
check(sch, "as written")

# %% [markdown]
# ## 1. Pack B: k-by-4 interleaved NR-wide panels
# `cache_read` makes a copy block of B; `transform_layout` stores the copy as
# `B_global[j // NR, k // 4, j % NR, k % 4]`: a panel of NR columns, and in it, for each group
# of 4 k, the 4 bytes of column j side by side. One 64-byte load then holds 16 columns x 4 k,
# what one zmm `vpdpbusd` multiplies with 4 bytes of A broadcast to every lane.

# %%
c = sch.get_block("C")
pack = sch.cache_read(c, "B", "global")
sch.transform_layout(pack, "B_global", lambda k, j: (j // NR, k // 4, j % NR, k % 4))
pk, pj = sch.get_loops(pack)        # copy in the packed order: contiguous writes
pjo, pji = sch.split(pj, [None, NR])
pko, pki = sch.split(pk, [None, 4])
sch.reorder(pjo, pko, pji, pki)
sch.parallel(sch.fuse(pjo, pko))
show("after packing B", sch, 30)
check(sch, "packed")

# %% [markdown]
# ## 2. Tile to the micro-kernel
# Rows of C in blocks of MR, columns in NR-wide panels, k in steps of KC; the MR x NR x KC tile
# innermost. The init (`acc = 0`) moves to its own block so that the tile is a pure update.

# %%
i, j, k = sch.get_loops(c)
io, ii = sch.split(i, [None, MR])
jo, ji = sch.split(j, [None, NR])
ko, ki = sch.split(k, [None, KC])
sch.reorder(io, jo, ko, ii, ji, ki)
sch.parallel(io)
init = sch.decompose_reduction(c, ko)
sch.vectorize(sch.get_loops(init)[-1])
check(sch, "tiled")

# %% [markdown]
# ## 3. Tensorize with the int8 micro-kernel
# `x86_lowp.int8_microkernel(features, kc)` names the best kernel for a CPU with those features:
# AVX512-VNNI (zmm), AVX-VNNI (ymm), or, without a dot-product unit, an exact AVX2 kernel
# (bytes widened to int16 and multiplied with `vpmaddwd`: no saturation). `tdsl.target.
# cpu_features(target)` says what a target may use; "llvm -mattr=-avx512vnni,-avxvnni" would
# choose the AVX2 kernel on this machine too. The kernel's description is the tile's code, so
# tensorize checks that the tile computes exactly it, packing included.

# %%
features = cpu_features("cpu")
try:
    isa = x86_lowp.int8_isa(features)
    if isa is None:
        raise tdsl.TargetError("this CPU has no AVX2")
    lanes, _, _ = x86_lowp.INT8_ISAS[isa]
    name = x86_lowp.register_int8(isa, MR, NR, KC) if NR % lanes == 0 else x86_lowp.int8_microkernel(features, KC)
except tdsl.TargetError as err:
    name = ""
    SKIPPED.append(f"the int8 micro-kernel ({err})")
if name:
    print("micro-kernel:", name, "-", tdsl.TensorIntrin.get(name).doc)
    sch.tensorize(ii, name)
    show("after tensorize", sch, 45)
    check(sch, f"tensorized with {name}")

# %% [markdown]
# ## 4. The epilogue next to its rows
# `reverse_compute_at` moves the requantize block under the row-block loop: each block of MR rows
# is requantized right after its GEMM, while its int32 results are still in cache.

# %%
sch.reverse_compute_at(sch.get_block("requantize"), io)
sch.vectorize(sch.get_loops(sch.get_block("requantize"))[-1])
show("after moving the epilogue", sch, 60)
check(sch, "with the epilogue per row block")
print("the lowered micro-kernel:")
print("\n".join(line for line in tdsl.lower(sch, target="cpu").script().splitlines()
                if "vpdpbusd" in line or "pmadd" in line)[:600] or "(not tensorized here)")

# %% [markdown]
# `tdsl.auto_schedule(qgemm)` makes the same choices on its own (its trace shows the same
# packing and micro-kernel), and `bench/bench_lowp.py` times it against numpy's fp32 GEMM and
# onnxruntime's MatMulInteger. On a CPU with Intel AMX (amx-int8) it picks the AMX kernel
# `x86.amx.u8s8s32_32x32x<KC>` instead: the same packed B (the k-by-4 layout is what an AMX B tile
# holds), C in 16 x 16 int32 tiles, `tdpbusd` on 16 x 64-byte tiles of A and B.

# %%
auto = tdsl.auto_schedule(qgemm, "cpu")
print("auto_schedule's micro-kernel:", next((w for w in str(auto.trace).split('"') if w.startswith("x86.")), "none"))
check(auto, "auto_schedule")
if name:
    assert "u8s8s32" in str(auto.trace)
if SKIPPED:  # say what did not run here rather than "all checks passed"
    print(f"11_int8_gemm: the checks that ran passed; skipped here: {'; '.join(SKIPPED)}")
else:
    print("11_int8_gemm: all checks passed")
