"""The trace: printed as replayable Python, replayed on other functions and sizes."""
from __future__ import annotations

import pytest
from sched_check import MATMUL, SYMBOLIC, check, kernel

import tdsl
from tdsl import T


def _tiled(sch: tdsl.Schedule) -> None:
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 8])
    sch.reorder(i0, j0, k, i1, j1)
    sch.vectorize(j1)
    sch.parallel(sch.fuse(i0, j0))
    sch.annotate(b, "note", "tiled")


EXPECTED = '''\
b0 = sch.get_block("C")
l1, l2, l3 = sch.get_loops(b0)
l4, l5 = sch.split(l1, factors=[None, 4])
l6, l7 = sch.split(l2, factors=[None, 8])
sch.reorder(l4, l6, l3, l5, l7)
sch.vectorize(l7)
l8 = sch.fuse(l4, l6)
sch.parallel(l8)
sch.annotate(b0, key="note", value="tiled")'''


def test_trace_prints_python():
    sch = tdsl.Schedule(kernel("matmul"))
    _tiled(sch)
    assert str(sch.trace) == EXPECTED


def test_printed_trace_replays_as_python():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    _tiled(sch)
    fresh = tdsl.Schedule(f)
    exec(str(sch.trace), {"sch": fresh})
    assert tdsl.structural_equal(fresh.func, sch.func)


def test_trace_apply_and_apply_to():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    _tiled(sch)
    other = tdsl.Schedule(f)
    sch.trace.apply(other)
    assert tdsl.structural_equal(other.func, sch.func)
    assert str(other.trace) == str(sch.trace)
    replayed = sch.trace.apply_to(f)
    assert tdsl.structural_equal(replayed.func, sch.func)
    check(replayed, f)


@pytest.mark.parametrize("size", [32, 20])
def test_trace_replays_on_another_size(size):
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    _tiled(sch)
    big = tdsl.parse(MATMUL.replace("16", str(size)))
    replayed = sch.trace.apply_to(big)
    outer = -(-size // 4) * -(-size // 8)
    assert f"T.parallel({outer})" in replayed.func.script()
    assert [lp.name for lp in replayed.get_loops(replayed.get_block("C"))] == ["i_0_j_0_fused", "k", "i_1", "j_1"]
    check(replayed, big)


def test_trace_replay_reports_the_failing_step():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    b = sch.get_block("C")
    i, _, _ = sch.get_loops(b)
    sch.split(i, factors=[2, 8])
    other = tdsl.parse(MATMUL.replace("16", "32"))
    with pytest.raises(tdsl.ScheduleError, match=r"replaying step 2 \(l4, l5 = sch.split\(l1, factors=\[2, 8\]\)\)"):
        sch.trace.apply_to(other)


def test_trace_replay_on_a_different_kernel_says_what_differs():
    sch = tdsl.Schedule(kernel("rowsum"))
    sch.get_loops(sch.get_block("B"))
    sch.parallel(sch.get_loops(sch.get_block("B"))[0])
    with pytest.raises(tdsl.ScheduleError, match="Cannot find a block with the name: B "):
        sch.trace.apply_to(kernel("matmul"))


def test_trace_after_undo_drops_the_step():
    sch = tdsl.Schedule(kernel("matmul"))
    i, _j, _k = sch.get_loops(sch.get_block("C"))
    sch.split(i, factors=[None, 4])
    sch.undo()
    assert str(sch.trace) == 'b0 = sch.get_block("C")\nl1, l2, l3 = sch.get_loops(b0)'


def test_single_output_list_prints_as_tuple():
    @T.prim_func
    def copy(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                B[vi] = A[vi]

    sch = tdsl.Schedule(copy)
    sch.get_loops(sch.get_block("B"))
    assert str(sch.trace).splitlines()[1] == "(l1,) = sch.get_loops(b0)"


def test_symbolic_factor_replays_on_a_fresh_parse():
    f = kernel(SYMBOLIC)
    n = f.params[0].shape[0]
    sch = tdsl.Schedule(f)
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.split(i, factors=[1, n])
    assert "sch.split(l1, factors=[1, n])" in str(sch.trace)
    again = tdsl.parse(SYMBOLIC)  # new Var objects for n
    replayed = sch.trace.apply_to(again)
    check(replayed, again, dims={"n": 6})
