"""Sampling primitives, decisions in the trace, replay with other decisions, trace JSON."""
from __future__ import annotations

import json
import pickle
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_check import ELEMWISE2, MATMUL, ROWSUM, SYMBOLIC, THREE_BLOCKS, check, expect_error, kernel

import tdsl
from tdsl.schedule import Trace
from tdsl.schedule.sampling import IntRV, random_perfect_tile


def _tiled_space(sch: tdsl.Schedule) -> None:
    """A small design space: sampled tiles, a sampled unroll depth, a sampled compute location."""
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, sch.sample_perfect_tile(i, 2, max_innermost_factor=8))
    j0, j1 = sch.split(j, sch.sample_perfect_tile(j, 2))
    sch.reorder(i0, j0, k, i1, j1)
    depth = sch.sample_categorical([0, 16, 64], [0.25, 0.5, 0.25])
    sch.annotate(i0, "pragma_auto_unroll_max_step", depth)


def test_perfect_tile_multiplies_to_extent_and_respects_innermost():
    sch = tdsl.Schedule(kernel("matmul"), seed=3)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    for n in (1, 2, 3, 4):
        factors = sch.sample_perfect_tile(i, n, max_innermost_factor=4)
        assert len(factors) == n and all(isinstance(f, IntRV) for f in factors)
        prod = 1
        for f in factors:
            prod *= f
        assert prod == 16 and (n == 1 or factors[-1] <= 4)


def test_random_perfect_tile_covers_the_factorisations():
    import random

    rng = random.Random(0)
    seen = {tuple(random_perfect_tile(rng, 12, 2, 16)) for _ in range(200)}
    assert seen == {(12, 1), (6, 2), (4, 3), (3, 4), (2, 6), (1, 12)}


def test_same_seed_same_decisions_and_different_seeds_differ():
    f = kernel("matmul")
    traces = []
    for seed in (0, 0, 1, 2, 3):
        sch = tdsl.Schedule(f, seed=seed)
        _tiled_space(sch)
        traces.append(str(sch.trace))
    assert traces[0] == traces[1]
    assert len(set(traces[1:])) > 1


def test_trace_prints_decisions_and_replays_exactly():
    f = kernel("matmul")
    sch = tdsl.Schedule(f, seed=5)
    _tiled_space(sch)
    text = str(sch.trace)
    assert "sch.sample_perfect_tile(l1, n=2, max_innermost_factor=8, decision=[" in text
    assert "factors=[v" in text and "decision=" in text.splitlines()[-2]
    replayed = sch.trace.apply(f)
    assert isinstance(replayed, tdsl.Schedule)
    assert tdsl.structural_equal(replayed.func, sch.func)
    assert str(replayed.trace) == text
    fresh = tdsl.Schedule(f)  # the printed Python replays too
    exec(text, {"sch": fresh})  # noqa: S102 - the printed trace is the code under test
    assert tdsl.structural_equal(fresh.func, sch.func)
    check(replayed, f)


def test_with_decisions_changes_only_the_decision():
    f = kernel("matmul")
    sch = tdsl.Schedule(f, seed=0)
    _tiled_space(sch)
    steps = sorted(sch.trace.decisions)
    assert [sch.trace.instructions[k].kind for k in steps] == [
        "sample_perfect_tile", "sample_perfect_tile", "sample_categorical"]
    changed = sch.trace.with_decisions({steps[0]: [2, 8], steps[2]: 2})
    assert changed.decisions[steps[0]] == [2, 8]
    assert [ins.kind for ins in changed] == [ins.kind for ins in sch.trace]
    other = changed.apply(f)
    assert other.trace.decisions[steps[0]] == [2, 8]
    assert "for i_0 in T.serial(2, annotations={'pragma_auto_unroll_max_step': 64})" in other.func.script()
    check(other, f)
    # keys may also be the Instruction objects; None samples anew
    ins = sch.trace.instructions[steps[1]]
    resampled = sch.trace.with_decisions({ins: None}).apply(f, seed=11)
    assert resampled.trace.decisions[steps[1]] is not None
    check(resampled, f)


@pytest.mark.parametrize("decision, words", [
    ([3, 8], ("multiplies to 24", "extent 16")),
    ([1, 16], ("innermost factor 16", "max_innermost_factor=8")),
    ([16], ("2 positive integers",)),
    ("x", ("not a list",)),
])
def test_replay_with_a_bad_perfect_tile_decision_is_a_clean_error(decision, words):
    f = kernel("matmul")
    sch = tdsl.Schedule(f, seed=0)
    _tiled_space(sch)
    first = min(sch.trace.decisions)
    with pytest.raises(tdsl.ScheduleError) as info:
        sch.trace.with_decisions({first: decision}).apply(f)
    for w in words + ("replaying step",):
        assert w in str(info.value)


def test_with_decisions_refuses_non_sampling_steps_and_bad_categorical_decisions():
    f = kernel("matmul")
    sch = tdsl.Schedule(f, seed=0)
    _tiled_space(sch)
    with pytest.raises(tdsl.ScheduleError, match="not a sampling step"):
        sch.trace.with_decisions({0: 1})
    with pytest.raises(tdsl.ScheduleError, match="not a step"):
        sch.trace.with_decisions({99: 1})
    last = max(sch.trace.decisions)
    with pytest.raises(tdsl.ScheduleError, match="not the index of one of the 3 candidates"):
        sch.trace.with_decisions({last: 3}).apply(f)


def test_sampling_refuses_bad_arguments_and_leaves_the_schedule_alone():
    sch = tdsl.Schedule(kernel(SYMBOLIC), seed=0)
    b = sch.get_block("B")
    i, j = sch.get_loops(b)
    expect_error(sch, lambda: sch.sample_perfect_tile(i, 2), "symbolic extent", "loop i")
    expect_error(sch, lambda: sch.sample_perfect_tile(j, 0), "positive int")
    expect_error(sch, lambda: sch.sample_categorical([], []), "non-empty")
    expect_error(sch, lambda: sch.sample_categorical([1, 2], [1.0]), "2 non-negative weights")
    expect_error(sch, lambda: sch.sample_categorical([1, [2]], [1, 1]), "not an int, float or string")
    expect_error(sch, lambda: sch.sample_perfect_tile(b, 2), "a loop handle")


def test_sampled_inner_factor_on_a_symbolic_loop_gives_a_predicate():
    f = kernel(SYMBOLIC)
    sch = tdsl.Schedule(f, seed=1)
    i, _ = sch.get_loops(sch.get_block("B"))
    v = sch.sample_categorical([2, 4, 8], [1, 1, 1])
    sch.split(i, [None, v])
    assert "T.where" in sch.func.script()
    for n in (1, 5, 9):
        check(sch, f, dims={"n": n})
    for decision in (0, 1, 2):
        k = max(sch.trace.decisions)
        check(sch.trace.with_decisions({k: decision}).apply(f), f, dims={"n": 7})


def test_compute_location_root_inline_and_loops():
    f = kernel(ELEMWISE2)
    seen = set()
    for decision in (-1, -2, 0, 1):
        sch = tdsl.Schedule(f)
        b = sch.get_block("B")
        loc = sch.sample_compute_location(b, decision=decision)
        sch.compute_at(b, loc)
        seen.add(decision)
        script = sch.func.script()
        if decision == -2:
            assert 'T.block("B")' not in script
        elif decision == -1:
            assert tdsl.structural_equal(sch.func, tdsl.Schedule(f).func)
        else:
            assert 'T.block("B")' in script and script.index('T.block("C")') > 0
        check(sch, f)
        replayed = sch.trace.apply(f)
        assert tdsl.structural_equal(replayed.func, sch.func)
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    expect_error(sch, lambda: sch.sample_compute_location(b, decision=5), "not one of", "root", "inline")


def test_compute_location_of_an_output_block_is_root_only():
    sch = tdsl.Schedule(kernel(ROWSUM), seed=0)
    b = sch.get_block("B")
    assert sch.sample_compute_location(b).var.name == "root"
    expect_error(sch, lambda: sch.sample_compute_location(b, decision=0), "not one of [-1]")


def test_trace_json_round_trip_prints_and_replays_the_same():
    f = kernel(THREE_BLOCKS)
    sch = tdsl.Schedule(f, seed=2)
    c, e, d = sch.get_block("C"), sch.get_block("E"), sch.get_block("D")
    sch.compute_inline(e)
    i, _j = sch.get_loops(d)
    io, _ii = sch.split(i, sch.sample_perfect_tile(i, 2))
    sch.compute_at(c, sch.sample_compute_location(c))
    cc = sch.cache_write(sch.get_block("C"), "C", "local")
    sch.annotate(io, "note", "a \"quoted\" string")
    sch.transform_layout(sch.get_block("C"), "C_local", lambda a, b: (b, a))
    del cc
    data = sch.trace.as_json()
    text = json.dumps(data)
    back = Trace.from_json(text)
    assert str(back) == str(sch.trace)
    assert back.as_json() == data
    assert Trace.from_json(data).decisions == sch.trace.decisions
    replayed = back.apply(f)
    assert tdsl.structural_equal(replayed.func, sch.func)
    check(replayed, f)


def test_trace_json_with_symbolic_factors_replays_on_other_sizes():
    f = kernel(SYMBOLIC)
    sch = tdsl.Schedule(f)
    i, _ = sch.get_loops(sch.get_block("B"))
    n = f.params[0].shape[0]
    sch.split(i, [None, (n + 3) // 4])
    back = Trace.from_json(json.dumps(sch.trace.as_json()))
    assert tdsl.structural_equal(back.apply(f).func, sch.func)
    check(back.apply(f), f, dims={"n": 10})


def test_trace_from_json_refuses_garbage():
    for bad in ("[1, 2, 3]", [[["split", ["l9"], [], []]], []], "nope"):
        with pytest.raises((tdsl.ScheduleError, json.JSONDecodeError)):
            Trace.from_json(bad)


def test_copy_keeps_the_random_state_and_sampled_values_pickle():
    sch = tdsl.Schedule(kernel("matmul"), seed=9)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    other = sch.copy()
    a = sch.sample_perfect_tile(i, 3)
    b = other.sample_perfect_tile(i, 3)
    assert [int(x) for x in a] == [int(x) for x in b]
    back = pickle.loads(pickle.dumps(a[0]))
    assert back == a[0] and back.serial == a[0].serial


_SPACES = {
    "matmul": (re.sub(r"\b16\b", "12", MATMUL), "C"),
    "three": (re.sub(r"\b32\b", "12", THREE_BLOCKS), "D"),
    "elemwise": (ELEMWISE2, "C"),
}


def _space(sch: tdsl.Schedule, last: str) -> None:
    """Tile the last block with sampled factors, sample every other block's compute location."""
    blocks = [b for b in ("C", "E", "B") if b != last and b in sch.func.script()]
    out = sch.get_block(last)
    loops = sch.get_loops(out)
    outer = []
    for loop in loops[:2]:
        o, i = sch.split(loop, sch.sample_perfect_tile(loop, 2))
        outer.append((o, i))
    sch.reorder(outer[0][0], outer[1][0], outer[0][1], outer[1][1])
    for name in reversed(blocks):
        try:
            b = sch.get_block(name)
        except tdsl.ScheduleError:
            continue
        sch.compute_at(b, sch.sample_compute_location(b))
    sch.annotate(outer[0][0], "pragma_auto_unroll_max_step", sch.sample_categorical([0, 16], [1, 1]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(_SPACES)), seed=st.integers(0, 10_000),
       changes=st.lists(st.tuples(st.integers(0, 40), st.one_of(
           st.integers(-3, 6), st.lists(st.integers(1, 32), min_size=1, max_size=3), st.none())), max_size=3))
def test_random_decisions_never_give_a_wrong_program(name, seed, changes):
    """Sample a schedule, then replay it with random decisions (many invalid): the replay either
    refuses with a ScheduleError or computes what the unscheduled function computes."""
    text, last = _SPACES[name]
    f = kernel(text)
    sch = tdsl.Schedule(f, seed=seed)
    _space(sch, last)
    check(sch, f)
    steps = sorted(sch.trace.decisions)
    new = {steps[k % len(steps)]: d for k, d in changes}
    try:
        trace = sch.trace.with_decisions(new)
        other = trace.apply(f, seed=seed + 1)
    except tdsl.ScheduleError:
        return
    check(other, f)
    back = Trace.from_json(json.dumps(other.trace.as_json())).apply(f)
    assert tdsl.structural_equal(back.func, other.func)


def test_a_given_compute_location_is_the_loop_the_full_search_lists():
    from tdsl.schedule.sampling import compute_location_candidates

    func = tdsl.Schedule(kernel(ELEMWISE2)).func
    inlinable, loops = compute_location_candidates(func, "B")
    assert inlinable and len(loops) >= 2
    for k, var in enumerate(loops):
        sch = tdsl.Schedule(func)
        assert compute_location_candidates(sch.func, "B", stop_after=k)[1] == loops[: k + 1]
        assert sch.sample_compute_location(sch.get_block("B"), decision=k).var is var
    sch = tdsl.Schedule(func)
    b = sch.get_block("B")
    expect_error(sch, lambda: sch.sample_compute_location(b, decision=len(loops)), "not one of", "inline",
                 loops[-1].name)
