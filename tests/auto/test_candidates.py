"""The library-or-generated hook: candidates(sch, block) offers the BLAS call and the
auto-tensorized micro-kernels for a matmul block; fastest() builds, checks and ranks them;
schedule_rule is the same hook as an auto-scheduler rule."""
import numpy as np
import pytest

import tdsl
from tdsl.auto import candidates
from tdsl.backends.choose import fastest
from tdsl.intrinsics import blas, x86

pytestmark = pytest.mark.skipif("avx2" not in x86.available(), reason="needs AVX2")

GEMM_RELU = '''
@T.prim_func
def f(A: T.Buffer((20, 12), "float32"), B: T.Buffer((12, 24), "float32"), bias: T.Buffer((24,), "float32"),
      D: T.Buffer((20, 24), "float32")):
    C = T.alloc_buffer((20, 24), "float32")
    for i, j, k in T.grid(20, 24, 12):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
    for i, j in T.grid(20, 24):
        with T.block("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = T.max(C[vi, vj] + bias[vj], T.float32(0))
'''


def test_candidates_for_a_matmul_block():
    sch = tdsl.Schedule(tdsl.parse(GEMM_RELU))
    found, _ = candidates.candidates(sch, "C")
    labels = [c.label for c in found]
    if blas.available():
        assert labels[0] == "library:blas.sgemm"
    assert any(label.startswith("tensorized:x86.") for label in labels)
    assert len(sch.trace.instructions) == 0      # the schedule itself is untouched
    for c in found:                               # each records its step in its own trace
        assert c.schedule.trace.instructions[-1].kind in ("tensorize", "auto_tensorize")
    # the epilogue block is not a GEMM: nothing fits, and each skip says why
    none, why = candidates.candidates(sch, "D")
    assert none == [] and all(":" in w for w in why)


def test_fastest_ranks_checked_candidates(rng):
    sch = tdsl.Schedule(tdsl.parse(GEMM_RELU))
    a, b = rng.standard_normal((20, 12)).astype("float32"), rng.standard_normal((12, 24)).astype("float32")
    bias = rng.standard_normal(24).astype("float32")
    ranked = fastest(sch, "C", (a, b, bias))
    assert {c.kind for c in ranked} >= {"generated", "tensorized"}
    assert [c.seconds for c in ranked] == sorted(c.seconds for c in ranked)
    best = tdsl.build(ranked[0].schedule, target="cpu")(a, b, bias)
    np.testing.assert_allclose(best, np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)


def test_schedule_rule_for_the_auto_scheduler(rng):
    """The rule contract of tdsl.auto (rule(sch, block) -> list of schedules, [sch] when nothing
    fits, sch itself untouched)."""
    class CPU:
        is_gpu = False

    rule = candidates.schedule_rule(CPU())
    sch = tdsl.Schedule(tdsl.parse(GEMM_RELU))
    made = rule(sch, "C")
    assert len(made) >= 2 and all(m is not sch for m in made) and not sch.trace.instructions
    a, b = rng.standard_normal((20, 12)).astype("float32"), rng.standard_normal((12, 24)).astype("float32")
    bias = rng.standard_normal(24).astype("float32")
    for m in made:
        np.testing.assert_allclose(tdsl.build(m, target="cpu")(a, b, bias), np.maximum(a @ b + bias, 0),
                                   rtol=1e-4, atol=1e-4)
    assert rule(sch, "D") == [sch]       # the epilogue: nothing fits, the schedule stays
    assert rule(sch, "gone") == [sch]    # a block another rule removed
