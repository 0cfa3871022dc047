"""Property: random sequences of loop and dataflow primitives (caching, compute location,
reduction, layout) keep the meaning and the print/parse round trip of a few kernels, and the
trace replays to the same function. A refused step must raise ScheduleError and change nothing."""
from __future__ import annotations

from dataflow_helpers import CHAIN, ROWMAX, ROWSUM_THEN_SCALE, STENCIL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_check import MATMUL, check

import tdsl

KERNELS = {"chain": CHAIN, "rowsum_scale": ROWSUM_THEN_SCALE, "stencil": STENCIL, "matmul": MATMUL, "rowmax": ROWMAX}
KINDS = ["split", "fuse", "reorder", "parallel", "vectorize", "cache_read", "cache_write", "set_scope",
         "compute_at", "reverse_compute_at", "compute_inline", "reverse_compute_inline", "decompose_reduction",
         "rfactor", "transform_layout", "storage_align"]
MAPS = [lambda *ix: tuple(reversed(ix)), lambda i, *rest: (i // 2, *rest, i % 2), lambda *ix: ix]
SCOPES = ["shared", "local", "global"]


def _blocks(sch: tdsl.Schedule) -> list[str]:
    out, todo = [], [sch.get_block("root")]
    while todo:
        for b in sch.get_child_blocks(todo.pop()):
            out.append(b.name)
            todo.append(b)
    return out


def _step(sch: tdsl.Schedule, data) -> None:
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    names = _blocks(sch)
    block = sch.get_block(data.draw(st.sampled_from(names), label="block"))
    loops = sch.get_loops(block)
    others = [n for n in names if n != block.name] or names
    other = sch.get_block(data.draw(st.sampled_from(others), label="other"))
    other_loops = sch.get_loops(other)
    pick = data.draw(st.integers(0, 5), label="pick")
    loop = loops[pick % len(loops)] if loops else None
    if kind in ("split", "fuse", "reorder", "parallel", "vectorize", "decompose_reduction", "rfactor") and loop is None:
        return
    if kind == "split":
        sch.split(loop, factors=[None, data.draw(st.integers(2, 5), label="factor")])
    elif kind == "fuse":
        sch.fuse(*loops[pick % len(loops): pick % len(loops) + 2])
    elif kind == "reorder":
        sch.reorder(*data.draw(st.permutations(loops), label="order"))
    elif kind in ("parallel", "vectorize"):
        getattr(sch, kind)(loop)
    elif kind == "cache_read":
        sch.cache_read(block, pick % 3, data.draw(st.sampled_from(SCOPES), label="scope"))
    elif kind == "cache_write":
        sch.cache_write(block, 0, data.draw(st.sampled_from(SCOPES), label="scope"))
    elif kind in ("set_scope", "storage_align", "transform_layout"):
        idx = pick % 3
        if kind == "set_scope":
            sch.set_scope(block, idx, data.draw(st.sampled_from(SCOPES), label="scope"))
        elif kind == "storage_align":
            sch.storage_align(block, idx, 0, data.draw(st.sampled_from([4, 16]), label="factor"), 1)
        else:
            params = sch.func.params
            sch.transform_layout(block, idx, data.draw(st.sampled_from(MAPS), label="map"))
            if any(a is not b for a, b in zip(params, sch.func.params)):
                sch.undo()  # a parameter's new layout changes the signature (tests/tvm_compat/*_s4.py)
    elif kind in ("compute_at", "reverse_compute_at"):
        if other_loops:
            getattr(sch, kind)(block, other_loops[pick % len(other_loops)])
    elif kind in ("compute_inline", "reverse_compute_inline"):
        getattr(sch, kind)(block)
    elif kind == "decompose_reduction":
        sch.decompose_reduction(block, loop)
    else:
        sch.rfactor(loop, data.draw(st.integers(0, 1), label="axis"))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(KERNELS)), data=st.data())
def test_random_dataflow_schedules_preserve_meaning(name, data):
    original = tdsl.parse(KERNELS[name])
    sch = tdsl.Schedule(original)
    for _ in range(data.draw(st.integers(1, 6), label="steps")):
        before, trace_len = sch.func, len(sch.trace)
        try:
            _step(sch, data)
        except tdsl.ScheduleError as err:
            assert sch.func is before, f"a refused step changed the function: {err}"
            assert all(ins.kind.startswith("get_") for ins in list(sch.trace)[trace_len:]), err
    check(sch, original)
    replayed = sch.trace.apply_to(original)
    assert tdsl.structural_diff(replayed.func, sch.func) is None
