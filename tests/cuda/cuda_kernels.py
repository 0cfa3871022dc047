"""GPU-scheduled kernels written directly in script (T.thread_binding, shared/local buffers),
shared by the tests in tests/cuda and bench/gpu_check.py. Each maker returns (func, reference)
where reference(*inputs) computes the expected outputs with numpy."""
from __future__ import annotations

import numpy as np

import tdsl
from tdsl import T


def elementwise(n_cols: int = 1024):
    """B = exp(A) * 0.5 + 1 over rows of a symbolic count; 4-wide vectorized (float4)."""
    threads = n_cols // 4

    @T.prim_func
    def ew(A: T.Buffer(("n", n_cols), "float32"), B: T.Buffer(("n", n_cols), "float32")):
        for bx in T.thread_binding(n, thread="blockIdx.x"):
            for tx in T.thread_binding(threads, thread="threadIdx.x"):
                for v in T.vectorized(4):
                    with T.block("B"):
                        vi = T.axis.spatial(n, bx)
                        vj = T.axis.spatial(n_cols, tx * 4 + v)
                        B[vi, vj] = T.exp(A[vi, vj]) * T.float32(0.5) + T.float32(1)

    return ew, lambda a: np.exp(a) * np.float32(0.5) + np.float32(1)


def elementwise_fp16(n: int = 4096):
    """fp16 and bf16 in, float32 math, fp16 out: exercises cuda_fp16.h / cuda_bf16.h."""
    blocks = n // 128

    @T.prim_func
    def ew16(A: T.Buffer((n,), "float16"), W: T.Buffer((n,), "bfloat16"), B: T.Buffer((n,), "float16")):
        for bx in T.thread_binding(blocks, thread="blockIdx.x"):
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                with T.block("B"):
                    vi = T.axis.spatial(n, bx * 128 + tx)
                    B[vi] = T.cast(T.tanh(T.cast(A[vi], "float32")) * T.cast(W[vi], "float32"), "float16")

    def ref(a, w):
        return (np.tanh(a.astype(np.float32)) * w.astype(np.float32)).astype(np.float16)

    return ew16, ref


def softmax(rows: int = 64, cols: int = 256):
    """Row softmax, one block of 128 threads per row; block-wide max and sum reductions in
    shared memory as a two-level tree (128 partials -> 16 -> 1)."""
    per = cols // 128

    @T.prim_func
    def row_softmax(A: T.Buffer((rows, cols), "float32"), B: T.Buffer((rows, cols), "float32")):
        part = T.alloc_buffer((128,), "float32", scope="shared")
        part2 = T.alloc_buffer((16,), "float32", scope="shared")
        stat = T.alloc_buffer((2,), "float32", scope="shared")
        for bx in T.thread_binding(rows, thread="blockIdx.x"):
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                for j in range(per):
                    with T.block("max1"):
                        vi, vt, vj = T.axis.remap("SSR", [bx, tx, j])
                        with T.init():
                            part[vt] = T.min_value("float32")
                        part[vt] = T.max(part[vt], A[vi, vj * 128 + vt])
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for k in range(8):
                    with T.block("max2"):
                        vt, vk = T.axis.remap("SR", [tx, k])
                        with T.init():
                            part2[vt] = T.min_value("float32")
                        part2[vt] = T.max(part2[vt], part[vt * 8 + vk])
            for tx in T.thread_binding(1, thread="threadIdx.x"):
                for k in range(16):
                    with T.block("max3"):
                        vk = T.axis.reduce(16, k)
                        with T.init():
                            stat[0] = T.min_value("float32")
                        stat[0] = T.max(stat[0], part2[vk])
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                for j in range(per):
                    with T.block("sum1"):
                        vi, vt, vj = T.axis.remap("SSR", [bx, tx, j])
                        with T.init():
                            part[vt] = T.float32(0)
                        part[vt] = part[vt] + T.exp(A[vi, vj * 128 + vt] - stat[0])
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for k in range(8):
                    with T.block("sum2"):
                        vt, vk = T.axis.remap("SR", [tx, k])
                        with T.init():
                            part2[vt] = T.float32(0)
                        part2[vt] = part2[vt] + part[vt * 8 + vk]
            for tx in T.thread_binding(1, thread="threadIdx.x"):
                for k in range(16):
                    with T.block("sum3"):
                        vk = T.axis.reduce(16, k)
                        with T.init():
                            stat[1] = T.float32(0)
                        stat[1] = stat[1] + part2[vk]
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                for j in range(per):
                    with T.block("norm"):
                        vi = T.axis.spatial(rows, bx)
                        vc = T.axis.spatial(cols, j * 128 + tx)
                        B[vi, vc] = T.exp(A[vi, vc] - stat[0]) / stat[1]

    def ref(a):
        e = np.exp(a - a.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return row_softmax, ref


def matmul(m: int = 64, n: int = 64, k: int = 64, bm: int = 32, bn: int = 32, bk: int = 8, tm: int = 4,
           tn: int = 4):
    """C = A @ B with (bm x bn) block tiles, (tm x tn) register tiles per thread in a local
    accumulator, and (bm x bk) / (bk x bn) tiles of A and B staged through shared memory by all
    threads of the block (loops bound again to the same threadIdx: TensorIR's cooperative fetch)."""
    ty_n, tx_n = bm // tm, bn // tn
    nthreads = ty_n * tx_n
    a_per = bm * bk // nthreads
    b_per = bk * bn // nthreads

    @T.prim_func
    def mm(A: T.Buffer((m, k), "float32"), B: T.Buffer((k, n), "float32"), C: T.Buffer((m, n), "float32")):
        A_sh = T.alloc_buffer((bm, bk), "float32", scope="shared")
        B_sh = T.alloc_buffer((bk, bn), "float32", scope="shared")
        C_loc = T.alloc_buffer((tm, tn), "float32", scope="local")
        for by in T.thread_binding(m // bm, thread="blockIdx.y"):
            for bx in T.thread_binding(n // bn, thread="blockIdx.x"):
                for ty in T.thread_binding(ty_n, thread="threadIdx.y"):
                    for tx in T.thread_binding(tx_n, thread="threadIdx.x"):
                        for i, j in T.grid(tm, tn):
                            with T.block("init"):
                                vi, vj = T.axis.remap("SS", [i, j])
                                C_loc[vi, vj] = T.float32(0)
                        for ko in range(k // bk):
                            for ty2 in T.thread_binding(ty_n, thread="threadIdx.y"):
                                for tx2 in T.thread_binding(tx_n, thread="threadIdx.x"):
                                    for l in range(a_per):
                                        with T.block("A_sh"):
                                            e = T.axis.spatial(bm * bk, (ty2 * tx_n + tx2) * a_per + l)
                                            vko = T.axis.spatial(k // bk, ko)
                                            vby = T.axis.spatial(m // bm, by)
                                            A_sh[e // bk, e % bk] = A[vby * bm + e // bk, vko * bk + e % bk]
                            for ty2 in T.thread_binding(ty_n, thread="threadIdx.y"):
                                for tx2 in T.thread_binding(tx_n, thread="threadIdx.x"):
                                    for l in range(b_per):
                                        with T.block("B_sh"):
                                            e = T.axis.spatial(bk * bn, (ty2 * tx_n + tx2) * b_per + l)
                                            vko = T.axis.spatial(k // bk, ko)
                                            vbx = T.axis.spatial(n // bn, bx)
                                            B_sh[e // bn, e % bn] = B[vko * bk + e // bn, vbx * bn + e % bn]
                            for kk, i, j in T.grid(bk, tm, tn):
                                with T.block("C_loc"):
                                    vk, vi, vj = T.axis.remap("SSS", [kk, i, j])
                                    vty, vtx = T.axis.remap("SS", [ty, tx])
                                    C_loc[vi, vj] = C_loc[vi, vj] + A_sh[vty * tm + vi, vk] * B_sh[vk, vtx * tn + vj]
                        for i, j in T.grid(tm, tn):
                            with T.block("C"):
                                vi = T.axis.spatial(m, by * bm + ty * tm + i)
                                vj = T.axis.spatial(n, bx * bn + tx * tn + j)
                                C[vi, vj] = C_loc[i, j]

    return mm, lambda a, b: a @ b


def unbound():
    """A GPU function whose second block was left on a serial loop."""

    @T.prim_func
    def half_bound(A: T.Buffer((4, 32), "float32"), B: T.Buffer((4, 32), "float32"),
                   C: T.Buffer((4, 32), "float32")):
        for bx in T.thread_binding(4, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [bx, tx])
                    B[vi, vj] = A[vi, vj] + T.float32(1)
        for i, j in T.grid(4, 32):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = B[vi, vj] * T.float32(2)

    return half_bound


def random_inputs(func, seed: int = 0, dims: dict | None = None) -> list[np.ndarray]:
    """Random arrays for the parameters a function reads (symbolic dims from `dims`)."""
    rng = np.random.default_rng(seed)
    out = []
    for p in func.params[:-1]:
        shape = tuple(s.value if hasattr(s, "value") else dims[s.name] for s in p.shape)
        out.append((rng.standard_normal(shape)).astype(p.dtype.numpy))
    return out


__all__ = ["elementwise", "elementwise_fp16", "softmax", "matmul", "unbound", "random_inputs", "tdsl"]
