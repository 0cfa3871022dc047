"""The shared kernel corpus: small tdsl kernels, each with inputs and a numpy reference.

Every engineer tests against it: the interpreter (tests/test_corpus_interpret.py), schedule
primitives, lowering and backends. A `Case` carries everything needed to run and check one
kernel; `check_case(case, runner)` runs `runner(func, *args)` (destination passing) and
compares the written arguments with the reference.

    from corpus import CORPUS, check_case   # tests/ is on sys.path (tests/conftest.py)
    for case in CORPUS:
        check_case(case, tdsl.interpret)

Symbolic-shape kernels have `sizes`: `case.sizes(n)` gives an inputs callable at size `n`
(e.g. for n in SYMBOLIC_SIZES) so a backend can check several shapes with one build.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tdsl import T

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - depends on the environment
    ml_dtypes = None

Inputs = Callable[[np.random.Generator], list]

SYMBOLIC_SIZES = (1, 7, 33)


@dataclass(frozen=True)
class Case:
    """One corpus kernel.

    `inputs(rng)` gives every argument in parameter order (outputs as zero arrays);
    `outputs` are the parameter indices the kernel writes; `reference(*args)` returns the
    expected values of those outputs, in that order.
    """

    name: str
    func: object
    inputs: Inputs
    outputs: tuple[int, ...]
    reference: Callable[..., tuple]
    rtol: float = 1e-5
    atol: float = 1e-6
    dtypes: str = "float32"
    sizes: Callable[[int], Inputs] | None = None

    @property
    def symbolic(self) -> bool:
        return self.sizes is not None


def _to_float64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a


def check_case(case: Case, runner: Callable, rng: np.random.Generator | None = None,
               args: list | None = None) -> list:
    """Run `runner(case.func, *args)` and assert its outputs match the reference and that it did
    not modify the inputs. Returns the arguments after the run."""
    if args is None:
        args = case.inputs(rng if rng is not None else np.random.default_rng(0))
    originals = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    expected = case.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    assert len(expected) == len(case.outputs), f"{case.name}: reference returned {len(expected)} outputs"
    runner(case.func, *args)
    for index, want in zip(case.outputs, expected):
        got = args[index]
        if got.dtype.kind in "iub":
            np.testing.assert_array_equal(got, want, err_msg=f"{case.name}: output {index}")
        else:
            np.testing.assert_allclose(_to_float64(got), _to_float64(np.asarray(want)), rtol=case.rtol,
                                       atol=case.atol, err_msg=f"{case.name}: output {index}")
    for index, (before, after) in enumerate(zip(originals, args)):
        if index not in case.outputs and isinstance(before, np.ndarray):
            np.testing.assert_array_equal(after, before, err_msg=f"{case.name}: input {index} was modified")
    return args


# ----------------------------------------------------------------------------- input helpers

def _normal(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


def _ints(rng, lo, hi, shape, dtype):
    return rng.integers(lo, hi, shape).astype(dtype)


def _zeros(shape, dtype="float32"):
    return np.zeros(shape, dtype)


# ----------------------------------------------------------------------------- kernels

@T.prim_func
def add_broadcast(A: T.Buffer((8, 16), "float32"), B: T.Buffer((16,), "float32"),
                  C: T.Buffer((8, 16), "float32")):
    for i, j in T.grid(8, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] + B[vj]


@T.prim_func
def relu(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i in range(64):
        with T.block("B"):
            vi = T.axis.spatial(64, i)
            B[vi] = T.max(A[vi], T.float32(0))


@T.prim_func
def scale(A: T.Buffer((4, 32), "float32"), B: T.Buffer((4, 32), "float32"), alpha: T.float32):
    for i, j in T.grid(4, 32):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * alpha


@T.prim_func
def matmul(A: T.Buffer((32, 24), "float32"), B: T.Buffer((24, 16), "float32"), C: T.Buffer((32, 16), "float32")):
    for i, j, k in T.grid(32, 16, 24):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@T.prim_func
def batch_matmul(A: T.Buffer((3, 8, 12), "float32"), B: T.Buffer((3, 12, 10), "float32"),
                 C: T.Buffer((3, 8, 10), "float32")):
    for b, i, j, k in T.grid(3, 8, 10, 12):
        with T.block("C"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            with T.init():
                C[vb, vi, vj] = T.float32(0)
            C[vb, vi, vj] += A[vb, vi, vk] * B[vb, vk, vj]


@T.prim_func
def matmul_nt(A: T.Buffer((16, 20), "float32"), B: T.Buffer((12, 20), "float32"), C: T.Buffer((16, 12), "float32")):
    for i, j, k in T.grid(16, 12, 20):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] += A[vi, vk] * B[vj, vk]


@T.prim_func
def transpose(A: T.Buffer((12, 20), "float32"), B: T.Buffer((20, 12), "float32")):
    for i, j in T.grid(20, 12):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vj, vi]


@T.prim_func
def row_sum(A: T.Buffer((16, 40), "float32"), B: T.Buffer((16,), "float32")):
    for i, k in T.grid(16, 40):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vk]


@T.prim_func
def row_max(A: T.Buffer((16, 40), "float32"), B: T.Buffer((16,), "float32")):
    for i, k in T.grid(16, 40):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.min_value("float32")
            B[vi] = T.max(B[vi], A[vi, vk])


@T.prim_func
def row_argmax(A: T.Buffer((12, 30), "float32"), idx: T.Buffer((12,), "int32"), val: T.Buffer((12,), "float32")):
    for i, k in T.grid(12, 30):
        with T.block("argmax"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                idx[vi] = -1
                val[vi] = T.min_value("float32")
            new_idx = T.Select(val[vi] < A[vi, vk], vk, idx[vi])
            new_val = T.Select(val[vi] < A[vi, vk], A[vi, vk], val[vi])
            idx[vi] = new_idx
            val[vi] = new_val


@T.prim_func
def softmax(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
    mx = T.alloc_buffer((8,), "float32")
    ex = T.alloc_buffer((8, 32), "float32")
    sm = T.alloc_buffer((8,), "float32")
    for i, k in T.grid(8, 32):
        with T.block("max"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                mx[vi] = T.min_value("float32")
            mx[vi] = T.max(mx[vi], A[vi, vk])
    for i, j in T.grid(8, 32):
        with T.block("exp"):
            vi, vj = T.axis.remap("SS", [i, j])
            ex[vi, vj] = T.exp(A[vi, vj] - mx[vi])
    for i, k in T.grid(8, 32):
        with T.block("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                sm[vi] = T.float32(0)
            sm[vi] += ex[vi, vk]
    for i, j in T.grid(8, 32):
        with T.block("norm"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = ex[vi, vj] / sm[vi]


@T.prim_func
def layernorm(A: T.Buffer((6, 48), "float32"), gamma: T.Buffer((48,), "float32"), beta: T.Buffer((48,), "float32"),
              B: T.Buffer((6, 48), "float32")):
    mean = T.alloc_buffer((6,), "float32")
    sqsum = T.alloc_buffer((6,), "float32")
    for i, k in T.grid(6, 48):
        with T.block("sums"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                mean[vi] = T.float32(0)
                sqsum[vi] = T.float32(0)
            mean[vi] = mean[vi] + A[vi, vk]
            sqsum[vi] = sqsum[vi] + A[vi, vk] * A[vi, vk]
    for i, j in T.grid(6, 48):
        with T.block("norm"):
            vi, vj = T.axis.remap("SS", [i, j])
            mu = mean[vi] / T.float32(48)
            var = sqsum[vi] / T.float32(48) - mu * mu
            B[vi, vj] = (A[vi, vj] - mu) * T.rsqrt(var + T.float32(1e-5)) * gamma[vj] + beta[vj]


@T.prim_func
def conv2d_nchw(X: T.Buffer((1, 3, 8, 8), "float32"), W: T.Buffer((4, 3, 3, 3), "float32"),
                Y: T.Buffer((1, 4, 8, 8), "float32")):
    Xpad = T.alloc_buffer((1, 3, 10, 10), "float32")
    for n, c, h, w in T.grid(1, 3, 10, 10):
        with T.block("pad"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            Xpad[vn, vc, vh, vw] = T.if_then_else(1 <= vh and vh < 9 and 1 <= vw and vw < 9,
                                                  X[vn, vc, vh - 1, vw - 1], T.float32(0))
    for n, f, y, x, c, r, s in T.grid(1, 4, 8, 8, 3, 3, 3):
        with T.block("conv"):
            vn, vf, vy, vx, vc, vr, vs = T.axis.remap("SSSSRRR", [n, f, y, x, c, r, s])
            with T.init():
                Y[vn, vf, vy, vx] = T.float32(0)
            Y[vn, vf, vy, vx] += Xpad[vn, vc, vy + vr, vx + vs] * W[vf, vc, vr, vs]


@T.prim_func
def depthwise_conv2d(X: T.Buffer((4, 9, 9), "float32"), W: T.Buffer((4, 3, 3), "float32"),
                     Y: T.Buffer((4, 9, 9), "float32")):
    for c, y, x, r, s in T.grid(4, 9, 9, 3, 3):
        with T.block("dw"):
            vc, vy, vx, vr, vs = T.axis.remap("SSSRR", [c, y, x, r, s])
            with T.init():
                Y[vc, vy, vx] = T.float32(0)
            Y[vc, vy, vx] += T.if_then_else(
                1 <= vy + vr and vy + vr < 10 and 1 <= vx + vs and vx + vs < 10,
                X[vc, vy + vr - 1, vx + vs - 1], T.float32(0)) * W[vc, vr, vs]


@T.prim_func
def max_pool2d(X: T.Buffer((3, 8, 8), "float32"), Y: T.Buffer((3, 4, 4), "float32")):
    for c, y, x, r, s in T.grid(3, 4, 4, 2, 2):
        with T.block("pool"):
            vc, vy, vx, vr, vs = T.axis.remap("SSSRR", [c, y, x, r, s])
            with T.init():
                Y[vc, vy, vx] = T.min_value("float32")
            Y[vc, vy, vx] = T.max(Y[vc, vy, vx], X[vc, vy * 2 + vr, vx * 2 + vs])


@T.prim_func
def avg_pool2d(X: T.Buffer((3, 9, 9), "float32"), Y: T.Buffer((3, 3, 3), "float32")):
    acc = T.alloc_buffer((3, 3, 3), "float32")
    for c, y, x, r, s in T.grid(3, 3, 3, 3, 3):
        with T.block("sum"):
            vc, vy, vx, vr, vs = T.axis.remap("SSSRR", [c, y, x, r, s])
            with T.init():
                acc[vc, vy, vx] = T.float32(0)
            acc[vc, vy, vx] += X[vc, vy * 3 + vr, vx * 3 + vs]
    for c, y, x in T.grid(3, 3, 3):
        with T.block("avg"):
            vc, vy, vx = T.axis.remap("SSS", [c, y, x])
            Y[vc, vy, vx] = acc[vc, vy, vx] * T.float32(1.0 / 9.0)


@T.prim_func
def im2col(X: T.Buffer((2, 6, 6), "float32"), Y: T.Buffer((18, 16), "float32")):
    for row, col in T.grid(18, 16):
        with T.block("im2col"):
            vrow, vcol = T.axis.remap("SS", [row, col])
            Y[vrow, vcol] = X[vrow // 9, vcol // 4 + vrow % 9 // 3, vcol % 4 + vrow % 3]


@T.prim_func
def gather_rows(data: T.Buffer((10, 8), "float32"), index: T.Buffer((6,), "int32"),
                out: T.Buffer((6, 8), "float32")):
    for i, j in T.grid(6, 8):
        with T.block("gather"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = data[index[vi], vj]


@T.prim_func
def matmul_i8(A: T.Buffer((16, 32), "int8"), B: T.Buffer((32, 8), "int8"), C: T.Buffer((16, 8), "int32")):
    for i, j, k in T.grid(16, 8, 32):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")


@T.prim_func
def matmul_u8i8(A: T.Buffer((8, 16), "uint8"), B: T.Buffer((16, 12), "int8"), C: T.Buffer((8, 12), "int32")):
    for i, j, k in T.grid(8, 12, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")


@T.prim_func
def fma_f16(A: T.Buffer((4, 32), "float16"), B: T.Buffer((4, 32), "float16"), C: T.Buffer((4, 32), "float16")):
    for i, j in T.grid(4, 32):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] * B[vi, vj] + A[vi, vj] * T.float16(0.5)


@T.prim_func
def matmul_f16_f32acc(A: T.Buffer((16, 32), "float16"), B: T.Buffer((32, 16), "float16"),
                      C: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(16, 16, 32):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] += T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")


@T.prim_func
def axpy_f64(x: T.Buffer((50,), "float64"), y: T.Buffer((50,), "float64"), z: T.Buffer((50,), "float64"),
             a: T.float64):
    for i in range(50):
        with T.block("z"):
            vi = T.axis.spatial(50, i)
            z[vi] = a * x[vi] + y[vi]


@T.prim_func
def add_symbolic(A: T.Buffer(("n", 16), "float32"), B: T.Buffer(("n", 16), "float32"),
                 C: T.Buffer(("n", 16), "float32")):
    for i, j in T.grid(n, 16):  # noqa: F821 - the symbolic dimension named in the signature
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] + B[vi, vj]


@T.prim_func
def row_sum_symbolic(A: T.Buffer(("n", 24), "float32"), B: T.Buffer(("n",), "float32")):
    for i in range(n):  # noqa: F821
        for k in range(24):
            with T.block("B"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] += A[vi, vk]


@T.prim_func
def clip_scalars(A: T.Buffer((40,), "float32"), B: T.Buffer((40,), "float32"), lo: T.float32, hi: T.float32):
    for i in range(40):
        with T.block("B"):
            vi = T.axis.spatial(40, i)
            B[vi] = T.min(T.max(A[vi], lo), hi)


@T.prim_func
def roll_int_shift(A: T.Buffer((24,), "int32"), B: T.Buffer((24,), "int32"), shift: T.int32):
    for i in range(24):
        with T.block("B"):
            vi = T.axis.spatial(24, i)
            B[vi] = A[(vi - shift) % 24]


@T.prim_func
def let_poly(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    for i in range(32):
        with T.block("B"):
            vi = T.axis.spatial(32, i)
            x = A[vi] * T.float32(2)
            x2 = x * x
            B[vi] = x2 * x + x2 - x + T.float32(1)


@T.prim_func
def leaky_relu_if(A: T.Buffer((48,), "float32"), B: T.Buffer((48,), "float32")):
    for i in range(48):
        with T.block("B"):
            vi = T.axis.spatial(48, i)
            if A[vi] > T.float32(0):
                B[vi] = A[vi]
            else:
                B[vi] = A[vi] * T.float32(0.1)


@T.prim_func
def matvec_accumulate(A: T.Buffer((20, 24), "float32"), x: T.Buffer((24,), "float32"), y: T.Buffer((20,), "float32")):
    for i, k in T.grid(20, 24):
        with T.block("y"):
            vi, vk = T.axis.remap("SR", [i, k])
            y[vi] += A[vi, vk] * x[vk]


@T.prim_func
def predicated_split(A: T.Buffer((50,), "float32"), B: T.Buffer((50,), "float32")):
    for io, ii in T.grid(4, 16):
        with T.block("B"):
            vi = T.axis.spatial(50, io * 16 + ii)
            T.where(io * 16 + ii < 50)
            B[vi] = A[vi] + T.float32(1)


@T.prim_func
def depth_to_space(A: T.Buffer((8, 3, 3), "float32"), B: T.Buffer((2, 6, 6), "float32")):
    for c, y, x in T.grid(2, 6, 6):
        with T.block("d2s"):
            vc, vy, vx = T.axis.remap("SSS", [c, y, x])
            B[vc, vy, vx] = A[vc * 4 + vy % 2 * 2 + vx % 2, vy // 2, vx // 2]


@T.prim_func
def floor_div_mod(A: T.Buffer((16,), "int32"), Q: T.Buffer((16,), "int32"), R: T.Buffer((16,), "int32")):
    for i in range(16):
        with T.block("qr"):
            vi = T.axis.spatial(16, i)
            Q[vi] = A[vi] // 5
            R[vi] = A[vi] % 5


@T.prim_func
def compare_mask(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32"), M: T.Buffer((32,), "bool"),
                 C: T.Buffer((32,), "float32")):
    for i in range(32):
        with T.block("mask"):
            vi = T.axis.spatial(32, i)
            M[vi] = A[vi] > B[vi] and (A[vi] > T.float32(0) or not B[vi] < T.float32(-0.5))
    for i in range(32):
        with T.block("select"):
            vi = T.axis.spatial(32, i)
            C[vi] = T.Select(M[vi], A[vi], B[vi])


@T.prim_func
def math_funcs(A: T.Buffer((24,), "float32"), Out: T.Buffer((6, 24), "float32")):
    for i in range(24):
        with T.block("math"):
            vi = T.axis.spatial(24, i)
            Out[0, vi] = T.exp(A[vi])
            Out[1, vi] = T.tanh(A[vi])
            Out[2, vi] = T.sigmoid(A[vi])
            Out[3, vi] = T.sqrt(T.abs(A[vi]))
            Out[4, vi] = T.erf(A[vi])
            Out[5, vi] = T.log(T.abs(A[vi]) + T.float32(1)) + T.floor(A[vi]) * T.ceil(A[vi])


@T.prim_func
def gelu(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i in range(64):
        with T.block("gelu"):
            vi = T.axis.spatial(64, i)
            B[vi] = T.float32(0.5) * A[vi] * (T.float32(1) + T.erf(A[vi] * T.float32(0.7071067811865476)))


@T.prim_func
def add_bf16(A: T.Buffer((4, 16), "bfloat16"), B: T.Buffer((4, 16), "bfloat16"), C: T.Buffer((4, 16), "bfloat16"),
             D: T.Buffer((4, 16), "float32")):
    for i, j in T.grid(4, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] + B[vi, vj]
            D[vi, vj] = T.cast(A[vi, vj], "float32") * T.cast(B[vi, vj], "float32")


@T.prim_func
def two_stage_root_alloc(A: T.Buffer((12, 10), "float32"), B: T.Buffer((12, 10), "float32")):
    tmp = T.alloc_buffer((12, 10), "float32")
    for i, j in T.grid(12, 10):
        with T.block("double"):
            vi, vj = T.axis.remap("SS", [i, j])
            tmp[vi, vj] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(12, 10):
        with T.block("add_one"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = tmp[vi, vj] + T.float32(1)


@T.prim_func
def nested_blocks(A: T.Buffer((6, 8), "float32"), B: T.Buffer((6,), "float32")):
    with T.block("outer"):
        for i in range(6):
            with T.block("init"):
                vi = T.axis.spatial(6, i)
                B[vi] = T.float32(0)
        for i, j in T.grid(6, 8):
            with T.block("acc"):
                vi, vj = T.axis.remap("SR", [i, j])
                B[vi] = B[vi] + A[vi, vj] * A[vi, vj]


@T.prim_func
def int32_wraparound(A: T.Buffer((16,), "int32"), B: T.Buffer((16,), "int32")):
    for i in range(16):
        with T.block("hash"):
            vi = T.axis.spatial(16, i)
            B[vi] = A[vi] * 1103515245 + 12345


@T.prim_func
def prefix_sum(A: T.Buffer((20,), "float32"), B: T.Buffer((20,), "float32")):
    for i in range(20):
        with T.block("scan"):
            vi = T.axis.spatial(20, i)
            if vi == 0:
                B[vi] = A[vi]
            else:
                B[vi] = B[vi - 1] + A[vi]


@T.prim_func
def dense_bias_relu(X: T.Buffer((8, 16), "float32"), W: T.Buffer((12, 16), "float32"),
                    bias: T.Buffer((12,), "float32"), Y: T.Buffer((8, 12), "float32")):
    acc = T.alloc_buffer((8, 12), "float32")
    for i, j, k in T.grid(8, 12, 16):
        with T.block("dense"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                acc[vi, vj] = T.float32(0)
            acc[vi, vj] += X[vi, vk] * W[vj, vk]
    for i, j in T.grid(8, 12):
        with T.block("bias_relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            Y[vi, vj] = T.max(acc[vi, vj] + bias[vj], T.float32(0))


@T.prim_func
def cast_float_to_int(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "int32"), C: T.Buffer((32,), "int8")):
    for i in range(32):
        with T.block("cast"):
            vi = T.axis.spatial(32, i)
            B[vi] = T.cast(A[vi] * T.float32(10), "int32")
            C[vi] = T.cast(B[vi] * 7, "int8")


@T.prim_func
def loop_kinds(A: T.Buffer((8, 16), "float32"), B: T.Buffer((8, 16), "float32")):
    for i in T.parallel(8):
        for jo in T.unroll(2):
            for ji in T.vectorized(8):
                with T.block("B"):
                    vi = T.axis.spatial(8, i)
                    vj = T.axis.spatial(16, jo * 8 + ji)
                    B[vi, vj] = A[vi, vj] * T.float32(3) - T.float32(1)


@T.prim_func
def gpu_bound_add(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32"), C: T.Buffer((128,), "float32")):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.block("C"):
                vi = T.axis.spatial(128, bx * 32 + tx)
                C[vi] = A[vi] + B[vi]


@T.prim_func
def fused_axes(A: T.Buffer((12, 8), "float32"), B: T.Buffer((12, 8), "float32")):
    for f in range(96):
        with T.block("B"):
            vi = T.axis.spatial(12, f // 8)
            vj = T.axis.spatial(8, f % 8)
            B[vi, vj] = A[vi, vj] + T.float32(0.5)


@T.prim_func
def explicit_regions(A: T.Buffer((10, 10), "float32"), B: T.Buffer((10,), "float32")):
    for i in range(10):
        with T.block("diag_plus_row0"):
            vi = T.axis.spatial(10, i)
            T.reads(A[vi, vi], A[0, vi])
            T.writes(B[vi])
            T.block_attr({"note": "explicit regions"})
            B[vi] = A[vi, vi] + A[0, vi]


# ----------------------------------------------------------------------------- references

def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x.astype(np.float64))


def _softmax(a):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layernorm(a, gamma, beta):
    mu = a.mean(axis=1, keepdims=True)
    var = (a * a).mean(axis=1, keepdims=True) - mu * mu
    return (a - mu) / np.sqrt(var + 1e-5) * gamma + beta


def _conv2d(x, w, pad):
    n, _, h, wd = x.shape
    f, _, r, s = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - r + 1, wd + 2 * pad - s + 1
    y = np.zeros((n, f, oh, ow))
    for dr in range(r):
        for ds in range(s):
            patch = xp[:, :, dr:dr + oh, ds:ds + ow]
            y += np.einsum("nchw,fc->nfhw", patch, w[:, :, dr, ds].astype(np.float64))
    return y


def _depthwise(x, w):
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    y = np.zeros(x.shape)
    for dr in range(3):
        for ds in range(3):
            y += xp[:, dr:dr + 9, ds:ds + 9] * w[:, dr, ds][:, None, None]
    return y


def _im2col(x):
    out = np.zeros((18, 16), np.float32)
    for c in range(2):
        for r in range(3):
            for s in range(3):
                out[c * 9 + r * 3 + s] = x[c, r:r + 4, s:s + 4].reshape(-1)
    return out


def _depth_to_space(a):
    b = np.zeros((2, 6, 6), np.float32)
    for c in range(2):
        for y in range(6):
            for x in range(6):
                b[c, y, x] = a[c * 4 + (y % 2) * 2 + x % 2, y // 2, x // 2]
    return b


def _mask(a, b):
    return (a > b) & ((a > 0) | ~(b < np.float32(-0.5)))


def _math(a):
    a64 = a.astype(np.float64)
    return np.stack([np.exp(a64), np.tanh(a64), 1 / (1 + np.exp(-a64)), np.sqrt(np.abs(a64)), _erf(a),
                     np.log(np.abs(a64) + 1) + np.floor(a64) * np.ceil(a64)])


def _sym_inputs_add(n):
    return lambda rng: [_normal(rng, (n, 16)), _normal(rng, (n, 16)), _zeros((n, 16))]


def _sym_inputs_sum(n):
    return lambda rng: [_normal(rng, (n, 24)), _zeros((n,))]


def _bf16_inputs(rng):
    bf = ml_dtypes.bfloat16
    return [_normal(rng, (4, 16)).astype(bf), _normal(rng, (4, 16)).astype(bf), np.zeros((4, 16), bf),
            _zeros((4, 16))]


def _bf16_reference(a, b, c, d):
    return (a + b, a.astype(np.float32) * b.astype(np.float32))


def _int_inputs_hash(rng):
    return [_ints(rng, -2**31, 2**31 - 1, (16,), "int32"), np.zeros(16, "int32")]


def _cast_reference(a, b, c):
    b = (a * np.float32(10)).astype(np.int32)  # truncation toward zero
    return b, (b * np.int32(7)).astype(np.int8)  # wrap-around


def _nested_ref(a, b):
    return ((a.astype(np.float64) ** 2).sum(axis=1),)


CORPUS: list[Case] = [
    Case("add_broadcast", add_broadcast, lambda r: [_normal(r, (8, 16)), _normal(r, (16,)), _zeros((8, 16))], (2,),
         lambda a, b, c: (a + b,)),
    Case("relu", relu, lambda r: [_normal(r, (64,)), _zeros((64,))], (1,), lambda a, b: (np.maximum(a, 0),)),
    Case("scale", scale, lambda r: [_normal(r, (4, 32)), _zeros((4, 32)), np.float32(1.75)], (1,),
         lambda a, b, alpha: (a * alpha,)),
    Case("matmul", matmul, lambda r: [_normal(r, (32, 24)), _normal(r, (24, 16)), _zeros((32, 16))], (2,),
         lambda a, b, c: (a.astype(np.float64) @ b,), rtol=1e-4, atol=1e-4),
    Case("batch_matmul", batch_matmul, lambda r: [_normal(r, (3, 8, 12)), _normal(r, (3, 12, 10)),
                                                  _zeros((3, 8, 10))], (2,),
         lambda a, b, c: (a.astype(np.float64) @ b,), rtol=1e-4, atol=1e-4),
    Case("matmul_nt", matmul_nt, lambda r: [_normal(r, (16, 20)), _normal(r, (12, 20)), _zeros((16, 12))], (2,),
         lambda a, b, c: (a.astype(np.float64) @ b.T,), rtol=1e-4, atol=1e-4),
    Case("transpose", transpose, lambda r: [_normal(r, (12, 20)), _zeros((20, 12))], (1,), lambda a, b: (a.T,)),
    Case("row_sum", row_sum, lambda r: [_normal(r, (16, 40)), _zeros((16,))], (1,),
         lambda a, b: (a.astype(np.float64).sum(axis=1),), rtol=1e-4, atol=1e-4),
    Case("row_max", row_max, lambda r: [_normal(r, (16, 40)), _zeros((16,))], (1,), lambda a, b: (a.max(axis=1),)),
    Case("row_argmax", row_argmax, lambda r: [_normal(r, (12, 30)), np.zeros(12, "int32"), _zeros((12,))], (1, 2),
         lambda a, i, v: (a.argmax(axis=1).astype(np.int32), a.max(axis=1)), dtypes="float32, int32"),
    Case("softmax", softmax, lambda r: [_normal(r, (8, 32)), _zeros((8, 32))], (1,),
         lambda a, b: (_softmax(a.astype(np.float64)),), rtol=1e-5, atol=1e-6),
    Case("layernorm", layernorm, lambda r: [_normal(r, (6, 48)), _normal(r, (48,)), _normal(r, (48,)),
                                            _zeros((6, 48))], (3,),
         lambda a, g, b, out: (_layernorm(a.astype(np.float64), g, b),), rtol=1e-4, atol=1e-4),
    Case("conv2d_nchw", conv2d_nchw, lambda r: [_normal(r, (1, 3, 8, 8)), _normal(r, (4, 3, 3, 3)),
                                                _zeros((1, 4, 8, 8))], (2,),
         lambda x, w, y: (_conv2d(x, w, 1),), rtol=1e-4, atol=1e-4),
    Case("depthwise_conv2d", depthwise_conv2d, lambda r: [_normal(r, (4, 9, 9)), _normal(r, (4, 3, 3)),
                                                          _zeros((4, 9, 9))], (2,),
         lambda x, w, y: (_depthwise(x, w),), rtol=1e-4, atol=1e-4),
    Case("max_pool2d", max_pool2d, lambda r: [_normal(r, (3, 8, 8)), _zeros((3, 4, 4))], (1,),
         lambda x, y: (x.reshape(3, 4, 2, 4, 2).max(axis=(2, 4)),)),
    Case("avg_pool2d", avg_pool2d, lambda r: [_normal(r, (3, 9, 9)), _zeros((3, 3, 3))], (1,),
         lambda x, y: (x.astype(np.float64).reshape(3, 3, 3, 3, 3).mean(axis=(2, 4)),), rtol=1e-4, atol=1e-5),
    Case("im2col", im2col, lambda r: [_normal(r, (2, 6, 6)), _zeros((18, 16))], (1,), lambda x, y: (_im2col(x),)),
    Case("gather_rows", gather_rows, lambda r: [_normal(r, (10, 8)), _ints(r, 0, 10, (6,), "int32"),
                                                _zeros((6, 8))], (2,),
         lambda d, i, o: (d[i],), dtypes="float32, int32 index"),
    Case("matmul_i8", matmul_i8, lambda r: [_ints(r, -128, 128, (16, 32), "int8"), _ints(r, -128, 128, (32, 8), "int8"),
                                            np.zeros((16, 8), "int32")], (2,),
         lambda a, b, c: (a.astype(np.int32) @ b.astype(np.int32),), dtypes="int8 x int8 -> int32"),
    Case("matmul_u8i8", matmul_u8i8, lambda r: [_ints(r, 0, 256, (8, 16), "uint8"),
                                                _ints(r, -128, 128, (16, 12), "int8"), np.zeros((8, 12), "int32")],
         (2,),
         lambda a, b, c: (a.astype(np.int32) @ b.astype(np.int32),), dtypes="uint8 x int8 -> int32"),
    Case("fma_f16", fma_f16, lambda r: [_normal(r, (4, 32), "float16"), _normal(r, (4, 32), "float16"),
                                        _zeros((4, 32), "float16")], (2,),
         lambda a, b, c: (a * b + a * np.float16(0.5),), rtol=2e-3, atol=2e-3, dtypes="float16"),
    Case("matmul_f16_f32acc", matmul_f16_f32acc, lambda r: [_normal(r, (16, 32), "float16"),
                                                            _normal(r, (32, 16), "float16"), _zeros((16, 16))], (2,),
         lambda a, b, c: (a.astype(np.float64) @ b.astype(np.float64),), rtol=1e-4, atol=1e-4,
         dtypes="float16 inputs, float32 accumulation"),
    Case("axpy_f64", axpy_f64, lambda r: [_normal(r, (50,), "float64"), _normal(r, (50,), "float64"),
                                          _zeros((50,), "float64"), 0.25], (2,),
         lambda x, y, z, a: (a * x + y,), rtol=1e-12, atol=1e-12, dtypes="float64"),
    Case("add_symbolic", add_symbolic, _sym_inputs_add(5), (2,), lambda a, b, c: (a + b,), sizes=_sym_inputs_add),
    Case("row_sum_symbolic", row_sum_symbolic, _sym_inputs_sum(5), (1,),
         lambda a, b: (a.astype(np.float64).sum(axis=1),), rtol=1e-4, atol=1e-4, sizes=_sym_inputs_sum),
    Case("clip_scalars", clip_scalars, lambda r: [_normal(r, (40,)), _zeros((40,)), np.float32(-0.5), 0.75], (1,),
         lambda a, b, lo, hi: (np.clip(a, lo, hi),)),
    Case("roll_int_shift", roll_int_shift, lambda r: [_ints(r, -1000, 1000, (24,), "int32"), np.zeros(24, "int32"),
                                                      -5], (1,),
         lambda a, b, shift: (np.roll(a, shift),), dtypes="int32"),
    Case("let_poly", let_poly, lambda r: [_normal(r, (32,)), _zeros((32,))], (1,),
         lambda a, b: ((2 * a) ** 3 + (2 * a) ** 2 - 2 * a + 1,), rtol=1e-5, atol=1e-5),
    Case("leaky_relu_if", leaky_relu_if, lambda r: [_normal(r, (48,)), _zeros((48,))], (1,),
         lambda a, b: (np.where(a > 0, a, a * np.float32(0.1)),)),
    Case("matvec_accumulate", matvec_accumulate, lambda r: [_normal(r, (20, 24)), _normal(r, (24,)), _normal(r, (20,))],
         (2,), lambda a, x, y: (y + a.astype(np.float64) @ x,), rtol=1e-4, atol=1e-4),
    Case("predicated_split", predicated_split, lambda r: [_normal(r, (50,)), _zeros((50,))], (1,),
         lambda a, b: (a + 1,)),
    Case("depth_to_space", depth_to_space, lambda r: [_normal(r, (8, 3, 3)), _zeros((2, 6, 6))], (1,),
         lambda a, b: (_depth_to_space(a),)),
    Case("floor_div_mod", floor_div_mod, lambda r: [_ints(r, -40, 40, (16,), "int32"), np.zeros(16, "int32"),
                                                    np.zeros(16, "int32")], (1, 2),
         lambda a, q, m: (a // 5, a % 5), dtypes="int32"),
    Case("compare_mask", compare_mask, lambda r: [_normal(r, (32,)), _normal(r, (32,)), np.zeros(32, bool),
                                                  _zeros((32,))], (2, 3),
         lambda a, b, m, c: (_mask(a, b), np.where(_mask(a, b), a, b)), dtypes="float32, bool"),
    Case("math_funcs", math_funcs, lambda r: [_normal(r, (24,)), _zeros((6, 24))], (1,), lambda a, o: (_math(a),),
         rtol=1e-5, atol=1e-6),
    Case("gelu", gelu, lambda r: [_normal(r, (64,)), _zeros((64,))], (1,),
         lambda a, b: (0.5 * a * (1 + _erf(a / np.sqrt(2.0))),), rtol=1e-5, atol=1e-6),
    Case("two_stage_root_alloc", two_stage_root_alloc, lambda r: [_normal(r, (12, 10)), _zeros((12, 10))], (1,),
         lambda a, b: (a * 2 + 1,)),
    Case("nested_blocks", nested_blocks, lambda r: [_normal(r, (6, 8)), _zeros((6,))], (1,), _nested_ref,
         rtol=1e-5, atol=1e-5),
    Case("int32_wraparound", int32_wraparound, _int_inputs_hash, (1,),
         lambda a, b: (a * np.int32(1103515245) + np.int32(12345),), dtypes="int32 (wraps)"),
    Case("prefix_sum", prefix_sum, lambda r: [_normal(r, (20,)), _zeros((20,))], (1,),
         lambda a, b: (np.cumsum(a.astype(np.float64)),), rtol=1e-5, atol=1e-5),
    Case("dense_bias_relu", dense_bias_relu, lambda r: [_normal(r, (8, 16)), _normal(r, (12, 16)), _normal(r, (12,)),
                                                        _zeros((8, 12))], (3,),
         lambda x, w, b, y: (np.maximum(x.astype(np.float64) @ w.T + b, 0),), rtol=1e-4, atol=1e-4),
    Case("loop_kinds", loop_kinds, lambda r: [_normal(r, (8, 16)), _zeros((8, 16))], (1,),
         lambda a, b: (a * np.float32(3) - np.float32(1),), dtypes="float32; parallel, unrolled, vectorized loops"),
    Case("gpu_bound_add", gpu_bound_add, lambda r: [_normal(r, (128,)), _normal(r, (128,)), _zeros((128,))], (2,),
         lambda a, b, c: (a + b,), dtypes="float32; blockIdx/threadIdx bound loops"),
    Case("fused_axes", fused_axes, lambda r: [_normal(r, (12, 8)), _zeros((12, 8))], (1,),
         lambda a, b: (a + np.float32(0.5),)),
    Case("explicit_regions", explicit_regions, lambda r: [_normal(r, (10, 10)), _zeros((10,))], (1,),
         lambda a, b: (np.diag(a) + a[0],)),
    Case("cast_float_to_int", cast_float_to_int, lambda r: [_normal(r, (32,)) * np.float32(4), np.zeros(32, "int32"),
                                                            np.zeros(32, "int8")], (1, 2), _cast_reference,
         dtypes="float32 -> int32 -> int8"),
]

if ml_dtypes is not None:
    CORPUS.append(Case("add_bf16", add_bf16, _bf16_inputs, (2, 3), _bf16_reference, rtol=1e-2, atol=1e-2,
                       dtypes="bfloat16"))

CASES: dict[str, Case] = {case.name: case for case in CORPUS}


# TVM's int4 dequantisation (test_tir_schedule_tensorize.py): shifts and masks, outside CORPUS
# (the bit-operation tests of the interpreter, the CPU and CUDA share it)
@T.prim_func
def decode_int4(B: T.Buffer((4, 2), "int32"), D: T.Buffer((4, 16), "float16")):
    for i, j in T.grid(4, 16):
        with T.block("decode"):
            v0, v1 = T.axis.remap("SS", [i, j])
            D[v0, v1] = T.Cast("float16", T.shift_right(T.shift_left(T.bitwise_and(
                T.shift_right(B[v0, v1 // 8], v1 % 8 * 4), 15), 28), 28))


def int4_reference(packed: np.ndarray) -> np.ndarray:
    """Each int32 holds eight signed 4-bit values, lowest nibble first."""
    nibbles = (packed[:, :, None] >> (np.arange(8) * 4)) & 15
    signed = np.where(nibbles >= 8, nibbles - 16, nibbles)
    return signed.reshape(packed.shape[0], -1).astype("float16")

