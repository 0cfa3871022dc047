"""Streaming (non-temporal) stores: `sch.annotate(block, "tdsl.nontemporal", True)` changes how
the block's outputs are stored, never what is stored."""
import numpy as np
import pytest

import tdsl
from tdsl import T


@T.prim_func
def scale(A: T.Buffer((64, 256), "float32"), B: T.Buffer((64, 256), "float32")):
    for i, j in T.grid(64, 256):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(3) + T.float32(1)


@T.prim_func
def widen(A: T.Buffer((1000,), "int32"), B: T.Buffer((1000,), "int64")):
    for i in range(1000):
        with T.block("B"):
            vi = T.axis.spatial(1000, i)
            B[vi] = T.cast(A[vi], "int64") * T.int64(5)


def _streamed(func, vector: bool):
    sch = tdsl.Schedule(func)
    block = sch.get_block("B")
    sch.annotate(block, "tdsl.nontemporal", True)
    if vector:
        i, j = sch.get_loops(block)
        sch.parallel(i)
        _, v = sch.split(j, factors=[None, 8])
        sch.vectorize(v)
    return sch


def test_vector_stream_store_is_in_the_code_and_exact_at_any_alignment():
    kernel = tdsl.build(_streamed(scale, vector=True))
    assert "!nontemporal" in kernel.source
    assert "movnt" in kernel.asm
    a = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    want = a * np.float32(3) + np.float32(1)
    for shift in range(4):   # the output at 0..3 elements past numpy's 16-byte alignment
        raw = np.zeros(64 * 256 + 4, np.float32)
        out = raw[shift:shift + 64 * 256].reshape(64, 256)
        kernel(a, out)
        np.testing.assert_array_equal(out, want)


def test_scalar_stream_store_of_integers():
    kernel = tdsl.build(_streamed(widen, vector=False))
    assert "!nontemporal" in kernel.source
    a = np.arange(-500, 500, dtype=np.int32)
    np.testing.assert_array_equal(kernel(a), a.astype(np.int64) * 5)


def test_annotation_only_marks_the_annotated_block():
    sch = tdsl.Schedule(scale)
    lowered = tdsl.lower(sch)
    assert "tdsl.nontemporal_buffers" not in dict(lowered.attrs)
    assert "!nontemporal" not in tdsl.build(sch).source
    lowered = tdsl.lower(_streamed(scale, vector=True))
    assert dict(lowered.attrs)["tdsl.nontemporal_buffers"] == ("B",)


def test_interpreter_and_round_trip_keep_the_annotation_meaningless():
    sch = _streamed(scale, vector=True)
    assert tdsl.ir.structural_equal(tdsl.parse(sch.func.script()), sch.func)
    a = np.ones((64, 256), np.float32)
    np.testing.assert_array_equal(tdsl.interpret(sch.func, a), np.full((64, 256), 4, np.float32))


@pytest.mark.parametrize("rows", [3, 64])
def test_softmax_with_streamed_output(rows):
    from bench.schedules import softmax_schedule

    sch = softmax_schedule(rows, 128)
    sch.annotate(sch.get_block("norm"), "tdsl.nontemporal", True)
    a = np.random.default_rng(1).standard_normal((rows, 128)).astype(np.float32)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(tdsl.build(sch)(a), e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-8)
