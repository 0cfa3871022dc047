"""The library rule of the design space: a matmul block as a BLAS call beside the generated
sketches (tdsl.space, tdsl.tune), auto_schedule's heuristic choice, the epilogue generated."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tdsl
from tdsl.auto.rules.library import LIBRARY_MIN_FLOP, prefer_library
from tdsl.intrinsics import blas
from tdsl.schedule import Trace

pytestmark = pytest.mark.skipif(not blas.available(), reason="this process has no BLAS")

GEMM = '''
@T.prim_func
def gemm(A: T.Buffer(({m}, {k}), "{dt}"), B: T.Buffer(({k}, {n}), "{dt}"), C: T.Buffer(({m}, {n}), "{dt}")):
    for i, j, k in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.{dt}(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''

GEMM_RELU = '''
@T.prim_func
def gemm_relu(A: T.Buffer((48, 40), "float32"), B: T.Buffer((40, 20), "float32"),
              bias: T.Buffer((20,), "float32"), D: T.Buffer((48, 20), "float32")):
    C = T.alloc_buffer((48, 20), "float32")
    for i, j, k in T.grid(48, 20, 40):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
    for i, j in T.grid(48, 20):
        with T.block("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = T.max(C[vi, vj] + bias[vj], T.float32(0))
'''


def gemm(m, n, k, dt="float32"):
    return tdsl.parse(GEMM.format(m=m, n=n, k=k, dt=dt))


def is_library(sch_or_trace) -> bool:
    trace = getattr(sch_or_trace, "trace", sch_or_trace)
    return any(ins.kind == "tensorize" and "blas." in str(ins.attrs) for ins in trace.instructions)


def _inputs(func, rng):
    return [rng.standard_normal([int(s.value) for s in p.shape]).astype(str(p.dtype)) for p in func.params]


# shapes whose n no vector width divides: their generated sketches (register tiling) are quick to make

def test_space_holds_the_library_call_beside_generated_sketches(rng):
    func = gemm(40, 20, 24)
    sketches = list(tdsl.space(func, "cpu"))
    library = [s for s in sketches if is_library(s)]
    generated = [s for s in sketches if not is_library(s)]
    assert len(library) == 1 and generated
    assert str(library[0].trace).splitlines()[1] == 'sch.tensorize(b0, intrin_name="blas.sgemm")'
    a, b, c = _inputs(func, rng)
    for sch in (library[0], generated[0]):
        out = np.zeros_like(c)
        tdsl.build(sch, target="cpu")(a, b, out)
        np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_float64_gets_dgemm_and_other_dtypes_none():
    assert any("blas.dgemm" in str(s.trace) for s in tdsl.space(gemm(24, 20, 12, "float64"), "cpu"))
    assert not any(is_library(s) for s in tdsl.space(gemm(24, 20, 12, "int32"), "cpu"))


def test_the_epilogue_stays_generated_and_the_call_is_left_alone(rng):
    """The library sketch: the GEMM is one call, the ReLU is scheduled by the later rules
    (parallel), and no rule schedules the block inside the call (it is the description)."""
    func = tdsl.parse(GEMM_RELU)
    library = [s for s in tdsl.space(func, "cpu") if is_library(s)]
    assert len(library) == 1
    kinds = [ins.kind for ins in library[0].trace.instructions]
    assert kinds[:2] == ["get_block", "tensorize"] and "parallel" in kinds
    assert kinds.count("tensorize") == 1 and "cache_read" not in kinds
    a, b, bias, d = _inputs(func, rng)
    tdsl.build(library[0], target="cpu")(a, b, bias, d)
    np.testing.assert_allclose(d, np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)


def test_generated_sketches_never_call_a_concrete_library_intrinsic():
    """A concrete library intrinsic registered by an earlier tensorize has this block's shape;
    TensorizeMatching leaves it to the library rule (one library sketch, by the generic name)."""
    func = gemm(30, 20, 10)
    sch = tdsl.Schedule(func)
    sch.tensorize(sch.get_block("C"), "blas.sgemm")        # registers blas.sgemm_nn_30x20x10_init
    sketches = list(tdsl.space(func, "cpu"))
    assert sum(is_library(s) for s in sketches) == 1 and len(sketches) >= 2


def test_auto_schedule_chooses_without_measuring():
    """The micro-kernel where one tiles the block; the library where none does (odd columns)."""
    assert not is_library(tdsl.auto_schedule(gemm(64, 64, 64), "cpu"))
    assert not is_library(tdsl.auto_schedule(gemm(16, 20, 16), "cpu"))     # a call costs more than it saves
    assert is_library(tdsl.auto_schedule(gemm(100, 100, 100), "cpu"))      # no vector width divides 100
    assert is_library(tdsl.auto_schedule(gemm(100, 20, 24), "cpu"))
    assert prefer_library(64, 60, 64, 8) and 2 * 32 ** 3 == LIBRARY_MIN_FLOP
    assert not prefer_library(256, 256, 256, 8) and not prefer_library(16, 20, 16, 8)


def test_no_blas_no_library_sketch(monkeypatch):
    monkeypatch.setenv("TDSL_BLAS", "none")
    assert not any(is_library(s) for s in tdsl.space(gemm(40, 20, 24), "cpu"))
    assert not is_library(tdsl.auto_schedule(gemm(100, 20, 24), "cpu"))   # the library otherwise


def test_tune_measures_library_and_generated_and_keeps_the_faster(rng):
    func = gemm(40, 20, 24)                 # two sketches: the library call and register tiling
    with ThreadPoolExecutor(2) as pool:
        result = tdsl.tune(func, trials=4, batch=4, verbose=0, seed=0, executor=pool)
    ok = [r for r in result.records if r.ok]
    assert {is_library(Trace.from_json(r.trace)) for r in ok} == {True, False}
    # whichever kind was faster: the best is a passing record, chosen by the end-of-run re-timing
    assert result.best.record in ok and result.best.time > 0
    a, b, c = _inputs(func, rng)
    result.best.build()(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
