"""Diffs over several steps: checkpoints, diff(since=...), show(diff=N), text and HTML."""
from __future__ import annotations

import pytest
from sched_check import kernel

import tdsl


def _three_steps():
    sch = tdsl.Schedule(kernel("matmul"))
    mark = sch.checkpoint("tiles")
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, factors=[None, 4])
    sch.reorder(i0, j, k, i1)
    sch.parallel(i0)
    return sch, mark


def test_diff_since_checkpoint_covers_every_step_with_the_printed_names():
    sch, mark = _three_steps()
    text = str(sch.diff(since=mark))
    head = text.split("--- before")[0]
    assert head.splitlines() == ["# matmul: 3 steps", "#   i_0, i_1 = sch.split(i, factors=[None, 4])",
                                 "#   sch.reorder(i_0, j, k, i_1)", "#   sch.parallel(i_0)"]
    assert "-    for i, j, k in T.grid(16, 16, 16):" in text
    assert "+    for i_0 in T.parallel(4):" in text
    # the same as diffing the two scripts by hand
    start = kernel("matmul")
    assert sch.diff(since=mark).before == tdsl.Schedule(start).func.script()
    assert sch.diff(since=mark).after == sch.func.script()


def test_diff_by_number_of_steps_and_default_last_step():
    sch, mark = _three_steps()
    assert sch.diff(since=3).text == sch.diff(since=mark).text
    assert sch.diff().steps == ["sch.parallel(i_0)"]
    assert sch.diff(since=1).text == sch.diff().text
    assert "-    for i_0, j, k, i_1 in T.grid(4, 16, 16, 4):" in sch.diff().text
    assert sch.diff(since=0).text.endswith("(no change)\n")
    assert sch.diff(since=10).text == sch.diff(since=mark).text   # more than were made: all of them


def test_show_diff_n_prints_the_same_diff(capsys):
    sch, mark = _three_steps()
    sch.show(diff=2)
    assert capsys.readouterr().out == sch.diff(since=2).text
    sch.show(diff=mark)
    assert capsys.readouterr().out == sch.diff(since=mark).text
    sch.show(diff=True)
    assert capsys.readouterr().out == sch.diff().text


def test_diff_html_has_the_steps_and_both_sides_highlighted():
    sch, mark = _three_steps()
    page = sch.diff(since=mark)._repr_html_()
    assert "# matmul: 3 steps" in page and "sch.reorder(i_0, j, k, i_1)" in page
    text = sch.diff(since=mark).text.splitlines()
    removed_lines = [x for x in text if x.startswith("-") and not x.startswith("---")]
    added_lines = [x for x in text if x.startswith("+") and not x.startswith("+++")]
    # the same lines as the text diff, each on its bar
    assert page.count('class="tdsl-rem"') == len(removed_lines) == 8
    assert page.count('class="tdsl-add"') == len(added_lines)
    assert page.count('class="tdsl-hunk"') == sum(x.startswith("@@") for x in text)
    removed = page.split('class="tdsl-rem"')[1]
    assert '<span class="tdsl-kw">for</span>' in removed and '<span class="tdsl-ns">T.grid</span>' in removed


def test_checkpoint_after_undo_and_from_another_schedule_are_refused():
    sch, _ = _three_steps()
    late = sch.checkpoint()
    assert repr(late) == "Checkpoint('step 3', after 3 steps)"
    sch.undo()
    with pytest.raises(tdsl.ScheduleError, match="no longer exists: the steps since then were undone"):
        sch.diff(since=late)
    other = sch.copy()
    with pytest.raises(tdsl.ScheduleError, match="belongs to another schedule"):
        other.diff(since=sch.checkpoint())
    with pytest.raises(tdsl.ScheduleError, match="a checkpoint .* or a number of steps"):
        sch.diff(since=-1)
    with pytest.raises(tdsl.ScheduleError, match="name must be a string"):
        sch.checkpoint(3)


def test_checkpoint_survives_undo_and_redo_of_later_steps():
    sch, mark = _three_steps()
    sch.undo()
    i0 = sch.get_loops(sch.get_block("C"))[0]
    sch.parallel(i0)
    assert "3 steps" in sch.diff(since=mark).text


def test_step_titles_name_blocks_strings_and_lambdas():
    sch = tdsl.Schedule(kernel("matmul"))
    c = sch.get_block("C")
    sch.cache_read(c, "A", "global")
    assert sch.diff().steps == ['A_global = sch.cache_read(C, buffer="A", scope="global")']
    sch.transform_layout(sch.get_block("A_global"), "A_global", lambda i, k: (k, i))
    assert sch.diff().steps[0] == 'sch.transform_layout(A_global, buffer="A_global", index_map=lambda i, k: (k, i))'
