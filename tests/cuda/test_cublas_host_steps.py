"""cuBLAS for target="cuda": `sch.tensorize(block, "cublas.sgemm")` becomes a host step between
the kernel launches; checked at build time, printed as the call plan, emulated with numpy's BLAS
(no GPU), and the wheel's symbols resolved where nvidia-cublas is installed."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tdsl
from tdsl.intrinsics import cublas

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="the CUDA emulator needs a host C++ compiler")

GEMM_RELU = '''
@T.prim_func
def mm(A: T.Buffer(({ashape}), "{dt}"), B: T.Buffer(({bshape}), "{dt}"), bias: T.Buffer((48,), "{dt}"),
       D: T.Buffer((40, 48), "{dt}")):
    C = T.alloc_buffer((40, 48), "{dt}")
    for i, j, k in T.grid(40, 48, 24):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.{dt}(0)
            C[vi, vj] = C[vi, vj] + A[{aidx}] * B[{bidx}]
    for i, j in T.grid(40, 48):
        with T.block("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = T.max(C[vi, vj] + bias[vj], T.{dt}(0))
'''

BATCHED = '''
@T.prim_func
def bmm(A: T.Buffer((3, 16, 8), "float32"), B: T.Buffer((3, 8, 24), "float32"), C: T.Buffer((3, 16, 24), "float32")):
    for b, i, j, k in T.grid(3, 16, 24, 8):
        with T.block("C"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            with T.init():
                C[vb, vi, vj] = T.float32(0)
            C[vb, vi, vj] = C[vb, vi, vj] + A[vb, vi, vk] * B[vb, vk, vj]
'''


def gemm_relu(ta=False, tb=False, dt="float32"):
    return tdsl.parse(GEMM_RELU.format(ashape="24, 40" if ta else "40, 24", bshape="48, 24" if tb else "24, 48",
                                       aidx="vk, vi" if ta else "vi, vk", bidx="vj, vk" if tb else "vk, vj", dt=dt))


def scheduled(func):
    sch = tdsl.Schedule(func)
    sch.tensorize(sch.get_block("C"), "cublas.sgemm" if "float32" in func.script() else "cublas.dgemm")
    i, j = sch.get_loops(sch.get_block("D"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    return sch


@needs_cxx
@pytest.mark.parametrize("ta,tb,dt", [(False, False, "float32"), (True, False, "float32"), (False, True, "float32"),
                                       (True, True, "float64")])
def test_library_step_then_generated_epilogue_matches_numpy(ta, tb, dt, rng):
    sch = scheduled(gemm_relu(ta, tb, dt))
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    assert len(kernel.plan.steps) == 1 and len(kernel.kernels) == 1      # the call, then the epilogue
    routine = "cublasSgemm_v2" if dt == "float32" else "cublasDgemm_v2"
    assert f"before launch 0: {routine}(handle, {'T' if tb else 'N'}, {'T' if ta else 'N'}, n=48, m=40, k=24" \
        in kernel.source
    a = rng.standard_normal((24, 40) if ta else (40, 24)).astype(dt)
    b = rng.standard_normal((48, 24) if tb else (24, 48)).astype(dt)
    bias = rng.standard_normal(48).astype(dt)
    want = np.maximum((a.T if ta else a) @ (b.T if tb else b) + bias, 0)
    np.testing.assert_allclose(kernel(a, b, bias), want, rtol=1e-5, atol=1e-5)
    d = np.zeros((40, 48), dt)                                         # and the interpreter agrees
    tdsl.interpret(sch.func, a, b, bias, d)
    np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-5)


@needs_cxx
def test_a_batch_loop_stays_a_host_loop_around_the_call(rng):
    sch = tdsl.Schedule(tdsl.parse(BATCHED))
    sch.tensorize(sch.get_block("C"), "cublas.sgemm")
    kernel = tdsl.build(sch, target="cuda", emulate=True)       # no kernel at all: three library calls
    assert kernel.kernels == [] and "for b in range(3): cublasSgemm_v2" in kernel.source
    a, b = rng.standard_normal((3, 16, 8)).astype("float32"), rng.standard_normal((3, 8, 24)).astype("float32")
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_nvrtc_compiles_the_kernels_around_the_call_without_a_gpu():
    pytest.importorskip("cuda.bindings.nvrtc")
    kernel = tdsl.build(scheduled(gemm_relu()), target="cuda", arch="sm_80")
    assert kernel.cubin and len(kernel.kernels) == 1 and kernel.plan.steps[0][0] == 0


def test_a_call_under_a_bound_loop_is_refused():
    sch = tdsl.Schedule(tdsl.parse(BATCHED))
    sch.tensorize(sch.get_block("C"), "cublas.sgemm")
    sch.bind(sch.get_loops(sch.get_block("C_o"))[0], "blockIdx.x")
    with pytest.raises(tdsl.TargetError, match=r'block "C_o" is a cuBLAS call .* inside a loop bound to blockIdx.x'):
        tdsl.build(sch, target="cuda", emulate=True)


def test_a_cpu_build_computes_the_description_and_a_non_gemm_is_refused(rng):
    sch = scheduled(gemm_relu())
    a, b = rng.standard_normal((40, 24)).astype("float32"), rng.standard_normal((24, 48)).astype("float32")
    bias = rng.standard_normal(48).astype("float32")
    d = np.zeros((40, 48), "float32")
    tdsl.build(sch, target="cpu")(a, b, bias, d)
    np.testing.assert_allclose(d, np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)
    with pytest.raises(tdsl.ScheduleError, match="three loops"):
        sch.tensorize(sch.get_block("D"), "cublas.sgemm")


@pytest.mark.skipif(not cublas.available(), reason="the nvidia-cublas wheel is not installed (pip install tdsl[cublas])")
def test_the_wheel_resolves_every_cublas_symbol():
    path, lib = cublas.find_library()          # dlopen needs no GPU
    assert "libcublas" in path
    for name in (*cublas.SYMBOLS.values(), *cublas.HANDLE_SYMBOLS):
        assert getattr(lib, name) is not None


def test_without_the_wheel_the_error_says_how_to_install(monkeypatch):
    cublas.find_library.cache_clear()
    monkeypatch.setattr(cublas, "_candidates", lambda: ["/nonexistent/libcublas.so.13"])
    try:
        with pytest.raises(tdsl.TargetError, match=r"tdsl\[cublas\]"):
            cublas.find_library()
    finally:
        cublas.find_library.cache_clear()
