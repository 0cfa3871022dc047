"""GPU-scheduled kernels run correctly on the CPU: thread-bound loops are serial there, shared
and local buffers ordinary memory. Checked through the interpreter and the CPU backend."""
import cuda_kernels as ck
import numpy as np
import pytest

import tdsl

CASES = [
    (ck.elementwise, {"n": 3}, 1e-6),
    (ck.elementwise_fp16, {}, 1e-3),
    (ck.softmax, {}, 1e-6),
    (ck.matmul, {}, 1e-4),
]


def _close(out, expected, tol):
    out, expected = np.asarray(out, np.float64), np.asarray(expected, np.float64)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("maker,dims,tol", CASES, ids=[c[0].__name__ for c in CASES])
def test_interpreter_matches_numpy(maker, dims, tol):
    func, ref = maker()
    inputs = ck.random_inputs(func, dims=dims)
    _close(tdsl.interpret(func, *inputs), ref(*inputs), tol)


@pytest.mark.parametrize("maker,dims,tol", CASES, ids=[c[0].__name__ for c in CASES])
def test_cpu_backend_matches_numpy(maker, dims, tol):
    pytest.importorskip("llvmlite")
    func, ref = maker()
    inputs = ck.random_inputs(func, seed=1, dims=dims)
    _close(tdsl.build(func, target="cpu")(*inputs), ref(*inputs), tol)


def test_larger_matmul_tiles_on_cpu():
    pytest.importorskip("llvmlite")
    func, ref = ck.matmul(128, 64, 32, bm=64, bn=32, bk=16, tm=8, tn=4)
    a, b = ck.random_inputs(func, seed=2)
    _close(tdsl.build(func, target="cpu")(a, b), ref(a, b), 1e-4)


def test_wmma_gemm_on_cpu_computes_its_descriptions():
    pytest.importorskip("llvmlite")
    sch, ref = ck.wmma_gemm()
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((64, 64)).astype("float16"), rng.standard_normal((64, 32)).astype("float16")
    _close(tdsl.build(sch, target="cpu")(a, b), ref(a, b), 1e-3)
