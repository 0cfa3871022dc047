"""Property: random sequences of loop primitives on a few kernels keep the meaning and the
print/parse round trip, and replaying the trace on a fresh schedule gives the same function.

Steps are drawn against the current loops; a step the schedule refuses must leave it
untouched (and is then simply not part of the sequence).
"""
from __future__ import annotations

import numpy as np
import pytest
from corpus import CORPUS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_check import check, kernel

import tdsl

KINDS = ["split", "fuse", "reorder", "parallel", "vectorize", "unroll", "bind", "annotate"]
AXES = ["blockIdx.x", "threadIdx.x", "vthread.y", "threadIdx.y"]
BLOCKS = {"matmul": ["C"], "elemwise": ["B", "C"], "rowsum": ["B"]}


def _step(sch: tdsl.Schedule, data, blocks: list[str]) -> None:
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    block = data.draw(st.sampled_from(blocks), label="block")
    loops = sch.get_loops(sch.get_block(block))
    at = data.draw(st.integers(0, len(loops) - 1), label="loop")
    if kind == "split":
        factor = data.draw(st.integers(1, 9), label="factor")
        where = data.draw(st.booleans(), label="None first")
        sch.split(loops[at], factors=[None, factor] if where else [factor, None])
    elif kind == "fuse":
        n = data.draw(st.integers(2, 3), label="count")
        sch.fuse(*loops[at: at + n])
    elif kind == "reorder":
        order = data.draw(st.permutations(loops), label="order")
        count = data.draw(st.integers(2, max(2, len(loops))), label="count")
        sch.reorder(*order[:count])
    elif kind == "bind":
        sch.bind(loops[at], data.draw(st.sampled_from(AXES), label="axis"))
    elif kind == "annotate":
        sch.annotate(loops[at], "pragma", data.draw(st.integers(0, 3), label="value"))
    else:
        getattr(sch, kind)(loops[at])


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(BLOCKS)), data=st.data())
def test_random_schedules_preserve_meaning(name, data):
    original = kernel(name)
    sch = tdsl.Schedule(original)
    for _ in range(data.draw(st.integers(1, 6), label="steps")):
        before, trace_len = sch.func, len(sch.trace)
        try:
            _step(sch, data, BLOCKS[name])
        except tdsl.ScheduleError as err:
            assert sch.func is before, f"refused step changed the function: {err}"
            # the lookups of a refused step were recorded; the refused step itself was not
            assert all(ins.kind.startswith("get_") for ins in list(sch.trace)[trace_len:])
    check(sch, original)
    replayed = sch.trace.apply_to(original)
    assert tdsl.structural_diff(replayed.func, sch.func) is None


def _try(step) -> bool:
    try:
        step()
        return True
    except tdsl.ScheduleError:
        return False


def _tile_block(sch: tdsl.Schedule, name: str) -> None:
    loops = sch.get_loops(sch.get_block(name))
    if not loops:
        return
    if not _try(lambda: sch.split(loops[-1], factors=[None, 3])):
        return  # a loop bound to a thread axis is not split (its binding would be lost)
    loops = sch.get_loops(sch.get_block(name))
    before = sch.func
    if len(loops) >= 3 and not _try(lambda: sch.reorder(loops[-1], loops[0])):
        assert sch.func is before
    _try(lambda: sch.parallel(sch.get_loops(sch.get_block(name))[0]))
    _try(lambda: sch.fuse(*sch.get_loops(sch.get_block(name))[-2:]))
    _try(lambda: sch.unroll(sch.get_loops(sch.get_block(name))[-1]))


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_generic_schedule_on_corpus(case):
    """Tile every block of every corpus kernel; steps the schedule refuses must leave it intact."""
    sch = tdsl.Schedule(case.func)
    names = [b.name for b in sch.get_child_blocks(sch.get_block("root"))]
    for name in names:
        _tile_block(sch, name)
    assert len(sch.trace) > 0
    inputs = case.sizes(7) if case.symbolic else case.inputs
    check(sch, case.func, args=inputs(np.random.default_rng(0)), tol=max(case.rtol, 1e-5))
    assert tdsl.structural_equal(sch.trace.apply_to(case.func).func, sch.func)
