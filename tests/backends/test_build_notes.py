"""Build notes: kernel.notes and one tdsl.PerformanceWarning when the schedule's request was not
honoured; unroll no longer switches a kernel to the pipeline without LLVM's vectorizer; inlined
padding leaves no T.if_then_else(True, ...)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends import cache
from tdsl.backends.llvm import compile as cpu_compile
from tdsl.backends.llvm import jit

C, H, W = 4, 10, 16


@T.prim_func
def dwconv(X: T.Buffer((C, H, W), "float32"), Wt: T.Buffer((C, 3, 3), "float32"),
           Y: T.Buffer((C, H, W), "float32")):
    P = T.alloc_buffer((C, H + 2, W + 2), "float32")
    for c, y, x in T.grid(C, H + 2, W + 2):
        with T.block("pad"):
            vc, vy, vx = T.axis.remap("SSS", [c, y, x])
            P[vc, vy, vx] = T.if_then_else(1 <= vy and vy < H + 1 and 1 <= vx and vx < W + 1,
                                           X[vc, vy - 1, vx - 1], T.float32(0))
    for c, y, x, r, s in T.grid(C, H, W, 3, 3):
        with T.block("dw"):
            vc, vy, vx, vr, vs = T.axis.remap("SSSRR", [c, y, x, r, s])
            with T.init():
                Y[vc, vy, vx] = T.float32(0)
            Y[vc, vy, vx] = Y[vc, vy, vx] + P[vc, vy + vr, vx + vs] * Wt[vc, vr, vs]


def schedule(inline: bool, unroll: bool) -> tdsl.Schedule:
    sch = tdsl.Schedule(dwconv)
    if inline:
        sch.compute_inline(sch.get_block("pad"))
    c, y, x, r, s = sch.get_loops(sch.get_block("dw"))
    x0, x1 = sch.split(x, factors=[None, 8])
    sch.reorder(c, y, x0, r, s, x1)
    sch.vectorize(x1)
    if unroll:
        sch.unroll(r)
        sch.unroll(s)
    return sch


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x, w = rng.random((C, H, W), np.float32), rng.random((C, 3, 3), np.float32)
    return x, w, tdsl.interpret(dwconv, x, w)


def test_a_vectorize_left_scalar_is_a_note_and_one_warning(data):
    x, w, want = data
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = tdsl.build(schedule(inline=True, unroll=False))
    perf = [c for c in caught if issubclass(c.category, tdsl.PerformanceWarning)]
    assert len(perf) == 1 and perf[0].filename == __file__          # points at the build call
    assert "kernel 'dwconv' is slower than its schedule asks" in str(perf[0].message)
    assert len(kernel.notes) == 1 and "was not vectorized" in kernel.notes[0]
    assert kernel.notes[0] in str(perf[0].message)
    np.testing.assert_allclose(kernel(x, w), want, rtol=1e-5)
    # the disk cache keeps the notes: a new process (memory cache cleared) still says them
    cache.clear_memory()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = tdsl.build(schedule(inline=True, unroll=False))
    assert again.from_cache and again.notes == kernel.notes
    assert sum(issubclass(c.category, tdsl.PerformanceWarning) for c in caught) == 1


def test_a_kernel_that_does_what_it_was_asked_does_not_warn(data):
    x, w, want = data
    with warnings.catch_warnings():
        warnings.simplefilter("error", tdsl.PerformanceWarning)
        kernel = tdsl.build(schedule(inline=False, unroll=False))
    assert not [n for n in kernel.notes if "not vectorized" in n]
    np.testing.assert_allclose(kernel(x, w), want, rtol=1e-5)


def test_unroll_does_not_choose_the_pipeline_without_a_vectorizer(data):
    x, w, want = data
    lowered = tdsl.lower(schedule(inline=False, unroll=True)).body
    # the unrolled r, s make a register tile (9 vector stores a trip) next to the scalar pad
    # loop: 3.5x slower with jit.SIMPLIFY, which does not vectorize that loop
    assert cpu_compile.register_tiled(lowered)
    assert cpu_compile.scalar_store_share(lowered) >= cpu_compile.SCALAR_SHARE_FOR_SIMPLIFY
    assert cpu_compile.pipeline_for(lowered) != jit.SIMPLIFY
    kernel = tdsl.build(schedule(inline=False, unroll=True))
    assert kernel._compiled.pipeline == cpu_compile.pipeline_for(lowered)
    np.testing.assert_allclose(kernel(x, w), want, rtol=1e-5)


def test_element_store_counts():
    lowered = tdsl.lower(schedule(inline=False, unroll=True)).body
    scalar, vector = cpu_compile.element_stores(lowered)
    assert scalar == C * (H + 2) * (W + 2)                 # the pad loop
    assert vector == C * H * W * (1 + 9)                   # init + 9 taps, 8 lanes at a time
    assert cpu_compile.scalar_loops(lowered) == ["x"]


def test_inlined_padding_leaves_no_constant_if_then_else(data):
    x, w, want = data
    sch = schedule(inline=True, unroll=True)
    text = tdsl.lower(sch).script()
    assert "T.if_then_else(True" not in text and "T.if_then_else(False" not in text
    assert text.count("T.if_then_else(") == 8          # the centre tap needs no guard
    with pytest.warns(tdsl.PerformanceWarning, match="not vectorized"):   # the guarded taps
        kernel = tdsl.build(sch)
    np.testing.assert_allclose(kernel(x, w), want, rtol=1e-5)
    np.testing.assert_allclose(tdsl.interpret(tdsl.lower(sch), x, w), want, rtol=1e-5)
