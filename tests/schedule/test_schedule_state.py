"""Schedule state: commit-on-success, undo, copy, handle lifetimes, showing and diffs."""
from __future__ import annotations

import pytest
from sched_check import check, expect_error, kernel

import tdsl


def test_schedule_starts_at_the_function():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    assert sch.func is f
    assert len(sch.trace) == 0


def test_schedule_refuses_non_function():
    with pytest.raises(TypeError, match="PrimFunc"):
        tdsl.Schedule("matmul")


def test_duplicate_loop_names_are_told_apart_like_the_printer():
    f = kernel("elemwise")
    sch = tdsl.Schedule(f)
    assert tdsl.structural_equal(sch.func, f)
    assert sch.func.script() == f.script()  # same text: the names are the printed ones
    check(sch, f)


def test_undo_restores_the_exact_function_and_kills_handles():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    i, _j, _k = sch.get_loops(sch.get_block("C"))
    after_lookup = sch.func
    i0, _i1 = sch.split(i, factors=[None, 4])
    assert sch.func is not after_lookup
    sch.undo()
    assert sch.func is after_lookup
    assert [ins.kind for ins in sch.trace] == ["get_block", "get_loops"]
    expect_error(sch, lambda: sch.parallel(i0), "Loop(i_0)", "undone")
    sch.parallel(i)  # handles from before the undone step still work
    check(sch, f)


def test_undo_removes_lookups_made_after_the_step():
    sch = tdsl.Schedule(kernel("matmul"))
    b = sch.get_block("C")
    i, j, _k = sch.get_loops(b)
    sch.fuse(i, j)
    loops = sch.get_loops(b)
    sch.undo()
    assert len(sch.trace) == 2
    expect_error(sch, lambda: sch.unroll(loops[1]), "undone")


def test_undo_without_steps():
    sch = tdsl.Schedule(kernel("matmul"))
    with pytest.raises(tdsl.ScheduleError, match="no step to undo"):
        sch.undo()


def test_failed_step_changes_nothing():
    sch = tdsl.Schedule(kernel("matmul"))
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(j, factors=[None, 4])
    before = sch.func
    expect_error(sch, lambda: sch.fuse(i, k), "loop i", "loop k")
    assert sch.func is before
    sch.undo()  # the refused fuse is not a step: undo reverts the split
    assert [lp.name for lp in sch.get_loops(sch.get_block("C"))] == ["i", "j", "k"]


def test_copy_is_independent_and_shares_handles():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    i, _j, _k = sch.get_loops(sch.get_block("C"))
    other = sch.copy()
    other.split(i, factors=[2, 8])
    assert sch.func is f
    sch.parallel(i)
    assert "T.parallel" not in other.func.script()
    other.undo()
    assert other.func is f
    check(sch, f)


def test_handle_of_another_schedule():
    sch = tdsl.Schedule(kernel("matmul"))
    other = tdsl.Schedule(kernel("matmul"))
    i, _, _ = sch.get_loops(sch.get_block("C"))
    expect_error(other, lambda: other.unroll(i), "Loop(i)", "another schedule")


def test_show_and_diff(capsys):
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    i, _j, _k = sch.get_loops(sch.get_block("C"))
    sch.split(i, factors=[None, 4])
    sch.show()
    out = capsys.readouterr().out
    assert "for i_0, i_1, j, k in T.grid(4, 4, 16, 16):" in out
    diff = sch.diff()
    assert "-    for i, j, k in T.grid(16, 16, 16):" in str(diff)
    assert "+    for i_0, i_1, j, k in T.grid(4, 4, 16, 16):" in str(diff)
    assert "i_0, i_1 = sch.split(i, factors=[None, 4])" in str(diff)   # the names the script prints
    assert "<" in diff._repr_html_() and "i_0" in diff._repr_html_()
    sch.show(diff=True)
    assert "+    for i_0, i_1" in capsys.readouterr().out


def test_repr_and_html():
    sch = tdsl.Schedule(kernel("rowsum"))
    sch.unroll(sch.get_loops(sch.get_block("B"))[1])
    assert "T.unroll(20)" in repr(sch)
    assert "1 step" in repr(sch)
    assert "unroll" in sch._repr_html_()
    assert "unroll" in sch.trace._repr_html_() and "l2" in sch.trace._repr_html_()


def test_new_loop_names_stay_unique():
    sch = tdsl.Schedule(kernel("matmul"))
    i, j, _k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, factors=[4, 4])
    fused = sch.fuse(i0, i1)
    assert fused.name == "i_0_i_1_fused"
    a, b = sch.split(fused, factors=[4, 4])
    assert (a.name, b.name) == ("i_0_i_1_fused_0", "i_0_i_1_fused_1")
    _c, _d = sch.split(j, factors=[2, 8])
    names = [lp.name for lp in sch.get_loops(sch.get_block("C"))]
    assert len(set(names)) == len(names)
    check(sch, kernel("matmul"))
