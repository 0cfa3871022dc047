"""auto_schedule on what users write beyond the corpus: a stencil with clamped borders and an
attention chain (GEMM -> softmax -> GEMM), at small sizes; and that its own vectorize choices
always vectorize (no PerformanceWarning for any corpus function). Speed: bench/bench_auto.py
(--only blur --only attention --tune 32), never here."""
from __future__ import annotations

import pathlib
import sys
import warnings

import numpy as np
import pytest
from auto_check import same_meaning
from corpus import CORPUS

import tdsl
from tdsl.auto.analysis import block_info, vector_obstacle
from tdsl.auto.rules.cpu_loops import SCALAR_TILE, UNROLL_STEPS
from tdsl.intrinsics import blas

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))

from bench_auto import attention_func, attention_ref, blur_func, blur_ref  # noqa: E402


def _annotations(func, block: str) -> dict:
    return dict(block_info(func, block).block.annotations)


def test_vector_obstacle_names_what_lowering_cannot_vectorize():
    info = block_info(blur_func(8, 8), "B")
    by_name = {it.var.name: it.var for it in info.iters}
    assert vector_obstacle(info.block, by_name["vj"]) == "the load from 'A' is not contiguous in vj"
    assert "outer index" in vector_obstacle(info.block, by_name["vi"])
    qk = block_info(attention_func(1, 8, 4), "qk")
    vj = next(it.var for it in qk.iters if it.var.name == "vj")
    assert "'K' is not contiguous in vj" in vector_obstacle(qk.block, vj)
    pv = block_info(attention_func(1, 8, 4), "pv")
    vj = next(it.var for it in pv.iters if it.var.name == "vj")
    assert vector_obstacle(pv.block, vj) is None


def test_clamped_blur_gets_a_scalar_register_tile_unrolled_whole_and_is_correct():
    func = blur_func(8, 40)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tdsl.PerformanceWarning)
        sch = tdsl.auto_schedule(func, "cpu")
        kernel = tdsl.build(sch)
    assert _annotations(sch.func, "B").get(SCALAR_TILE) is True
    assert "sch.vectorize" in str(sch.trace) and not kernel.notes
    assert f"decision={len(UNROLL_STEPS) - 1})" in str(sch.trace)   # the largest unroll depth by default
    same_meaning(sch, func)
    a = np.random.default_rng(0).standard_normal((8, 40)).astype("float32")
    np.testing.assert_allclose(kernel(a), blur_ref(a.astype("float64")), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("b,s,d", [(2, 8, 4), (2, 32, 32)])
def test_attention_chain_is_correct(b, s, d):
    func = attention_func(b, s, d)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tdsl.PerformanceWarning)
        sch = tdsl.auto_schedule(func, "cpu")
        kernel = tdsl.build(sch)
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((b, s, d)).astype("float32") for _ in range(3))
    np.testing.assert_allclose(kernel(q, k, v), attention_ref(*(x.astype("float64") for x in (q, k, v))),
                               rtol=1e-4, atol=1e-5)
    if s == 8:
        same_meaning(sch, func)


@pytest.mark.skipif(not blas.available(), reason="this process has no BLAS")
def test_attention_qk_with_k_stored_by_rows_goes_to_the_library():
    """Q K^T reads K[b, j, k]: no generated tile vectorizes its columns, so the library's GEMM is
    auto_schedule's first choice (from LIBRARY_MIN_FLOP); P V stays generated code."""
    trace = str(tdsl.auto_schedule(attention_func(2, 32, 32), "cpu").trace)
    assert 'sch.tensorize(b' in trace and 'intrin_name="blas.sgemm"' in trace
    qk_line = next(line for line in trace.splitlines() if 'get_block("qk")' in line)
    handle = qk_line.split(" = ")[0]
    assert f'sch.tensorize({handle}, intrin_name="blas.sgemm")' in trace


def test_prefer_library():
    from tdsl.auto.rules.library import LIBRARY_BATCHED_MAX_FLOP, LIBRARY_MIN_FLOP, prefer_library

    assert not prefer_library(512, 512, 512, 16)                          # a micro-kernel tile fits
    assert prefer_library(100, 100, 100, 16)                              # no vector width divides n
    assert prefer_library(128, 128, 64, 16, columns_contiguous=False)     # B stored transposed
    assert not prefer_library(8, 8, 8, 16, columns_contiguous=False)      # too small for a call
    assert prefer_library(128, 64, 128, 16, batched=True)                 # a batch of small GEMMs
    assert 2 * 128 * 64 * 128 == LIBRARY_BATCHED_MAX_FLOP >= LIBRARY_MIN_FLOP
    assert not prefer_library(128, 128, 128, 16, batched=True)            # big enough to tile


@pytest.mark.skipif(not blas.available(), reason="this process has no BLAS")
def test_attention_softmax_rows_stay_out_of_the_packing_copy():
    """The softmax blocks are not computed inside a micro-kernel's packing copy: with P V
    generated (a batch too large for the library rule), `norm` stays a root pass of its own."""
    from tdsl.auto.analysis import blocks_in_nest

    sch = tdsl.auto_schedule(attention_func(2, 256, 64), "cpu")
    assert "x86." in str(sch.trace)   # P V is the generated micro-kernel here (2 x 256x64x256 per GEMM)
    assert "P_global" in blocks_in_nest(sch.func, "pv_o")
    assert "norm" not in blocks_in_nest(sch.func, "P_global")


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_auto_schedule_never_asks_for_a_vectorize_that_stays_scalar(case):
    with warnings.catch_warnings():
        warnings.simplefilter("error", tdsl.PerformanceWarning)
        tdsl.build(tdsl.auto_schedule(case.func, "cpu"))
