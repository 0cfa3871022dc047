"""Helpers of the auto-scheduling tests: kernels and the meaning check against the interpreter."""
from __future__ import annotations

import numpy as np

import tdsl


def inputs(func: tdsl.PrimFunc, dims: dict[str, int] | None = None, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in func.params:
        shape = tuple((dims or {})[s.name] if hasattr(s, "name") else int(s.value) for s in p.shape)
        out.append(rng.standard_normal(shape).astype(str(p.dtype)))
    return out


def same_meaning(sch: tdsl.Schedule, original: tdsl.PrimFunc, dims: dict[str, int] | None = None,
                 tol: float = 1e-4) -> None:
    """The scheduled function prints and parses back, and computes what `original` computes."""
    func = sch.func
    assert tdsl.structural_diff(tdsl.parse(func.script()), func) is None
    args = inputs(original, dims)
    want = [a.copy() for a in args]
    got = [a.copy() for a in args]
    tdsl.interpret(original, *want)
    tdsl.interpret(func, *got)
    for p, w, g in zip(original.params, want, got):
        np.testing.assert_allclose(g.astype("float64"), w.astype("float64"), rtol=tol, atol=tol,
                                   err_msg=f"buffer {p.name} differs\n{func.script()}")


GEMM = '''
@T.prim_func
def gemm(A: T.Buffer(({m}, {k}), "float32"), B: T.Buffer(({k}, {n}), "float32"), C: T.Buffer(({m}, {n}), "float32")):
    for i, j, k in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''

BMM = '''
@T.prim_func
def bmm(A: T.Buffer((2, 16, 24), "float32"), B: T.Buffer((2, 24, 32), "float32"), C: T.Buffer((2, 16, 32), "float32")):
    for b, i, j, k in T.grid(2, 16, 32, 24):
        with T.block("C"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            with T.init():
                C[vb, vi, vj] = T.float32(0)
            C[vb, vi, vj] = C[vb, vi, vj] + A[vb, vi, vk] * B[vb, vk, vj]
'''

CONV = '''
@T.prim_func
def conv2d(X: T.Buffer((1, 4, 6, 16), "float32"), W: T.Buffer((8, 4, 3, 3), "float32"),
           Y: T.Buffer((1, 8, 6, 16), "float32")):
    Xpad = T.alloc_buffer((1, 4, 8, 18), "float32")
    for b, ci, y, x in T.grid(1, 4, 8, 18):
        with T.block("pad"):
            vb, vc, vy, vx = T.axis.remap("SSSS", [b, ci, y, x])
            Xpad[vb, vc, vy, vx] = T.if_then_else(1 <= vy and vy <= 6 and 1 <= vx and vx <= 16,
                                                  X[vb, vc, vy - 1, vx - 1], T.float32(0))
    for b, ko, y, x, ci, r, s in T.grid(1, 8, 6, 16, 4, 3, 3):
        with T.block("conv"):
            vb, vk, vy, vx, vc, vr, vs = T.axis.remap("SSSSRRR", [b, ko, y, x, ci, r, s])
            with T.init():
                Y[vb, vk, vy, vx] = T.float32(0)
            Y[vb, vk, vy, vx] = Y[vb, vk, vy, vx] + Xpad[vb, vc, vy + vr, vx + vs] * W[vk, vc, vr, vs]
'''

# conv2d with 12 columns: no multiple of 8 lanes divides its rows
CONV_NARROW = CONV.replace("(1, 4, 6, 16)", "(1, 4, 6, 12)").replace("(1, 8, 6, 16)", "(1, 8, 6, 12)") \
    .replace("(1, 4, 8, 18)", "(1, 4, 8, 14)").replace("T.grid(1, 4, 8, 18)", "T.grid(1, 4, 8, 14)") \
    .replace("vx <= 16", "vx <= 12").replace("T.grid(1, 8, 6, 16, 4, 3, 3)", "T.grid(1, 8, 6, 12, 4, 3, 3)")

DEPTHWISE = '''
@T.prim_func
def depthwise(X: T.Buffer((3, 10, 18), "float32"), W: T.Buffer((3, 3, 3), "float32"), Y: T.Buffer((3, 8, 16), "float32")):
    for c, y, x, r, s in T.grid(3, 8, 16, 3, 3):
        with T.block("Y"):
            vc, vy, vx, vr, vs = T.axis.remap("SSSRR", [c, y, x, r, s])
            with T.init():
                Y[vc, vy, vx] = T.float32(0)
            Y[vc, vy, vx] = Y[vc, vy, vx] + X[vc, vy + vr, vx + vs] * W[vc, vr, vs]
'''

CHAIN = '''
@T.prim_func
def chain(A: T.Buffer((16, 40), "float32"), D: T.Buffer((16, 40), "float32")):
    T1 = T.alloc_buffer((16, 40), "float32")
    T2 = T.alloc_buffer((16, 40), "float32")
    for i, j in T.grid(16, 40):
        with T.block("mul"):
            vi, vj = T.axis.remap("SS", [i, j])
            T1[vi, vj] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(16, 40):
        with T.block("add"):
            vi, vj = T.axis.remap("SS", [i, j])
            T2[vi, vj] = T1[vi, vj] + T.float32(1)
    for i, j in T.grid(16, 40):
        with T.block("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = T.max(T2[vi, vj], T.float32(0))
'''

SOFTMAX = '''
@T.prim_func
def softmax(A: T.Buffer((8, 64), "float32"), B: T.Buffer((8, 64), "float32")):
    row_max = T.alloc_buffer((8,), "float32")
    row_sum = T.alloc_buffer((8,), "float32")
    E = T.alloc_buffer((8, 64), "float32")
    for i, j in T.grid(8, 64):
        with T.block("max"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                row_max[vi] = T.min_value("float32")
            row_max[vi] = T.max(row_max[vi], A[vi, vj])
    for i, j in T.grid(8, 64):
        with T.block("exp"):
            vi, vj = T.axis.remap("SS", [i, j])
            E[vi, vj] = T.exp(A[vi, vj] - row_max[vi])
    for i, j in T.grid(8, 64):
        with T.block("sum"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                row_sum[vi] = T.float32(0)
            row_sum[vi] = row_sum[vi] + E[vi, vj]
    for i, j in T.grid(8, 64):
        with T.block("norm"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = E[vi, vj] / row_sum[vi]
'''

ROWSUM_SYMBOLIC = '''
@T.prim_func
def rowsum(A: T.Buffer(("n", 48), "float32"), B: T.Buffer(("n",), "float32")):
    for i, j in T.grid(n, 48):
        with T.block("B"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vj]
'''

MATMUL_SYMBOLIC = '''
@T.prim_func
def matmul(A: T.Buffer(("m", 16), "float32"), B: T.Buffer((16, 24), "float32"), C: T.Buffer(("m", 24), "float32")):
    for i, j, k in T.grid(m, 24, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''


def gemm(m: int = 32, n: int = 32, k: int = 32) -> tdsl.PrimFunc:
    return tdsl.parse(GEMM.format(m=m, n=n, k=k))
