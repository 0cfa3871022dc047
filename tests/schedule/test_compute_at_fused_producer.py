"""Issue 22: reverse_compute_at under a loop that fuses a producer's loops and splits them by a
non-multiple of the row length was accepted, and the consumer read elements the producer had
not written yet (apache/tvm#15911's class). The region check now enumerates what the producer
writes per iteration instead of trusting its relaxed box of rows."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl

TWO_STAGE = '''
@T.prim_func
def f(A: T.Buffer((3, 13), "float32"), C: T.Buffer((3, 13), "float32")):
    B = T.alloc_buffer((3, 13), "float32")
    for i, j in T.grid(3, 13):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(3, 13):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] + T.float32(1)
'''


def _fused_split(factor: int):
    sch = tdsl.Schedule(tdsl.parse(TWO_STAGE))
    i, j = sch.get_loops(sch.get_block("B"))
    outer, _ = sch.split(sch.fuse(i, j), factors=[None, factor])
    return sch, outer


@pytest.mark.parametrize("factor", [16, 5, 20])
def test_consumer_under_a_partial_row_split_is_refused(factor):
    sch, outer = _fused_split(factor)
    before = sch.func
    with pytest.raises(tdsl.ScheduleError, match='block "C" would read elements of B that block "B" has not '
                                                 'written yet'):
        sch.reverse_compute_at(sch.get_block("C"), outer)
    assert sch.func is before


@pytest.mark.parametrize("factor", [13, 26, 39])
def test_consumer_under_a_whole_row_split_is_still_accepted(factor):
    sch, outer = _fused_split(factor)
    sch.reverse_compute_at(sch.get_block("C"), outer)
    a = np.random.default_rng(0).random((3, 13), dtype=np.float32)
    np.testing.assert_array_equal(tdsl.interpret(sch.func, a), a * 2 + 1)
    np.testing.assert_array_equal(tdsl.build(sch)(a), a * 2 + 1)
