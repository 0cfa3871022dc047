"""The LLVM pipeline chosen per kernel, and index arithmetic in 64 bits.

Kernels whose schedule made register tiles (loops with 4+ vector statements per iteration, as
in the GEMM micro-kernel) get O1's function simplification pipeline, without LLVM's unrolling
(`jit.SIMPLIFY`); loops that already store 1024+ bits per iteration get O3 without unrolling;
all others the full O3 (`compile.pipeline_for`; tests/backends/test_llvm_pipeline.py).
Indices and int32 loop variables are computed in i64 with `nsw` (no sign extension in inner
loops), while int32 values the program computes keep their wrap-around, as in the interpreter.
"""
import re

import numpy as np
import pytest

import tdsl
from tdsl.backends.llvm.compile import register_tiled
from tdsl.intrinsics import x86

ELEMENTWISE = '''
@T.prim_func
def axpy(A: T.Buffer((64, 96), "float32"), B: T.Buffer((64, 96), "float32"), C: T.Buffer((64, 96), "float32")):
    for i, j in T.grid(64, 96):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] * T.float32(2) + B[63 - vi, vj]
'''

# vector accumulations over a serial loop the schedule did not unroll: one vector, or a tile of 4
ROWSUM = '''
@T.prim_func
def rowsum(A: T.Buffer((64, {w}), "float32"), S: T.Buffer(({w},), "float32")):
    acc = T.alloc_buffer(({w},), "float32", scope="local")
    for v in T.unroll({w} // 8):
        acc[T.Ramp(v * 8, 1, 8)] = T.Broadcast(T.float32(0), 8)
    for k in range(64):
        for v in T.unroll({w} // 8):
            acc[T.Ramp(v * 8, 1, 8)] = acc[T.Ramp(v * 8, 1, 8)] + A[k, T.Ramp(v * 8, 1, 8)]
    for v in T.unroll({w} // 8):
        S[T.Ramp(v * 8, 1, 8)] = acc[T.Ramp(v * 8, 1, 8)]
'''

ROWSUM_SCALAR = '''
@T.prim_func
def rowsum(A: T.Buffer((64, 8), "float32"), S: T.Buffer((8,), "float32")):
    for j in range(8):
        S[j] = T.float32(0)
        for k in range(64):
            S[j] = S[j] + A[k, j]
'''

# an int32 loop variable near the top of its range: indices computed in 64 bits, values wrap
WRAP = '''
@T.prim_func
def wrap(B: T.Buffer((7,), "int32"), C: T.Buffer((7,), "int32")):
    for i in range(2147483640, 2147483647):
        B[i - 2147483640] = i + 10
        C[i - 2147483640] = i * 3
'''

INDEX_OPS = '''
@T.prim_func
def shuffle(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for i in T.parallel(4, 60):
        for j in range(4):
            B[(i * 4 + j) // 8 * 8 + (7 - (i * 4 + j) % 8)] = A[T.max(i * 4 + j - 16, 0) + T.min(j, 2)]
'''


def vectorized_elementwise() -> tdsl.Schedule:
    sch = tdsl.Schedule(tdsl.parse(ELEMENTWISE))
    i, j = sch.get_loops(sch.get_block("C"))
    _, inner = sch.split(j, factors=[None, 8])
    sch.vectorize(inner)
    sch.parallel(i)
    return sch


def kernel_ir(kernel) -> str:
    """The optimized IR of the kernel's own functions (not the argument-checking entries)."""
    parts = kernel.optimized_ir.split("\ndefine ")
    return "\n".join(p for p in parts[1:] if re.match(r"[^(]*_(raw|par\d+\w*)\(", p))


def rowsum(width: int) -> tdsl.PrimFunc:
    return tdsl.parse(ROWSUM.format(w=width))


def test_register_tiles_are_recognised():
    assert register_tiled(tdsl.lower(rowsum(32)).body)
    assert not register_tiled(tdsl.lower(rowsum(8)).body)
    assert not register_tiled(tdsl.lower(vectorized_elementwise().func).body)
    assert not register_tiled(tdsl.lower(tdsl.parse(ELEMENTWISE)).body)


@pytest.mark.parametrize("width", [8, 32])
def test_only_register_tiles_escape_llvm_unrolling(width):
    a = np.random.default_rng(0).standard_normal((64, width), dtype=np.float32)
    kernel = tdsl.build(rowsum(width))
    np.testing.assert_allclose(kernel(a), a.sum(axis=0), rtol=1e-5)
    adds = len(re.findall(r"fadd <8 x float>", kernel_ir(kernel)))
    if width == 32:
        assert adds == 4           # the tile, once per iteration
    else:
        assert adds > 1            # LLVM unrolled the one-vector loop


def test_scalar_kernels_keep_o3():
    a = np.random.default_rng(0).standard_normal((64, 8), dtype=np.float32)
    scalar = tdsl.build(tdsl.parse(ROWSUM_SCALAR))
    np.testing.assert_allclose(scalar(a), a.sum(axis=0), rtol=1e-5)
    assert re.search(r"<\d+ x float>", kernel_ir(scalar))      # LLVM vectorized it


@pytest.mark.parametrize("make", [vectorized_elementwise, lambda: tdsl.parse(ELEMENTWISE)], ids=["vector", "scalar"])
def test_no_sign_extension_of_indices(make):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 64, 96), dtype=np.float32)
    kernel = tdsl.build(make())
    np.testing.assert_allclose(kernel(a, b), a * 2 + b[::-1], rtol=1e-6)
    ir = kernel_ir(kernel)
    assert "sext" not in ir
    assert "movslq" not in kernel.asm


def test_index_arithmetic_matches_the_interpreter():
    func = tdsl.parse(INDEX_OPS)
    a = np.arange(256, dtype=np.float32)
    want = np.zeros(256, np.float32)
    tdsl.interpret(func, a, want)
    got = np.zeros(256, np.float32)
    tdsl.build(func)(a, got)
    np.testing.assert_array_equal(got, want)
    checked = np.zeros(256, np.float32)
    tdsl.build(func, bounds_check=True)(a, checked)
    np.testing.assert_array_equal(checked, want)


def test_int32_values_of_loop_variables_wrap():
    func = tdsl.parse(WRAP)
    want_b, want_c = np.zeros(7, np.int32), np.zeros(7, np.int32)
    tdsl.interpret(func, want_b, want_c)
    i = np.arange(2147483640, 2147483647, dtype=np.int64)
    np.testing.assert_array_equal(want_b, ((i + 10 + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32))
    got_b, got_c = tdsl.build(func)()
    np.testing.assert_array_equal(got_b, want_b)
    np.testing.assert_array_equal(got_c, want_c)


@pytest.mark.skipif("avx2" not in x86.available(), reason="needs AVX2")
def test_gemm_micro_kernel_keeps_one_k_step_per_iteration():
    """The tensorized GEMM tile: eight FMAs per k (4 x 16 tile), no LLVM unrolling, no sext."""
    m = n = k = 64
    func = tdsl.parse(f'''
@T.prim_func
def gemm(A: T.Buffer(({m}, {k}), "float32"), B: T.Buffer(({k}, {n}), "float32"), C: T.Buffer(({m}, {n}), "float32")):
    for i, j, kk in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
''')
    sch = tdsl.Schedule(func)
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 16])
    sch.reorder(i0, j0, i1, j1, kk)
    sch.decompose_reduction(c, i1)
    sch.tensorize(i1, x86.register_fp32("avx2", 4, 16, k))
    kernel = tdsl.build(sch)
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 64, 64), dtype=np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    ir = kernel_ir(kernel)
    assert len(re.findall(r"call <8 x float> @llvm\.fma\.v8f32", ir)) == 8
    assert "sext" not in ir
