"""TVM's trace API (test_tir_schedule_trace.py) in tdsl's words: traces made by hand from
Instructions, append / pop / get_decision / simplified, and JSON replay; every replayed schedule
is checked against the interpreter."""
import json

import pytest
from sched_check import check

import tdsl
from tdsl import T
from tdsl.ir import Var
from tdsl.schedule.handles import BlockRV, LoopRV
from tdsl.schedule.trace import Instruction, Trace


@T.prim_func(s_tir=True)
def elementwise(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")) -> None:
    B = T.sblock_alloc_buffer((16, 16))
    for i, j in T.grid(16, 16):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j in T.grid(16, 16):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] + 1.0


def _inline_b():
    b0 = BlockRV("", 0)
    return Trace(insts=[Instruction("get_block", ("B",), outputs=[b0]), Instruction("compute_inline", (b0,))],
                 decisions={})


def test_a_trace_made_by_hand_prints_and_replays():
    # test_trace_construct_1 / test_trace_apply_to_schedule
    b0, l1, l2 = BlockRV("", 0), LoopRV(Var("l"), 0), LoopRV(Var("l"), 0)
    trace = Trace(insts=[Instruction("get_block", ("B",), outputs=[b0]),
                         Instruction("get_loops", (b0,), outputs=[l1, l2])])
    assert str(trace) == 'b0 = sch.get_block("B")\nl1, l2 = sch.get_loops(b0)'
    assert len(trace.insts) == 2 and trace.decisions == {}
    assert trace.get_decision(trace.insts[0]) is None
    sch = tdsl.Schedule(elementwise)
    _inline_b().apply(sch)
    assert [b.name for b in sch.get_child_blocks(sch.get_block("root"))] == ["C"]
    check(sch, elementwise)


def test_append_pop_and_simplified():
    # test_trace_construct_append_1 / _pop_1 / _pop_2 / test_trace_simplified_3
    trace = _inline_b()
    trace.append(Instruction("get_block", ("C",), outputs=[BlockRV("", 0)]))
    assert str(trace).splitlines()[-1] == 'b1 = sch.get_block("C")'
    assert trace.simplified(remove_postproc=True).as_python() == trace.as_python()[:2]
    last = trace.insts[-1]
    assert trace.pop().same_as(last) and len(trace) == 2
    assert Trace([], {}).pop() is None and str(Trace([], {})) == ""
    b0, l1, l2, l3 = BlockRV("", 0), LoopRV(Var("l"), 0), LoopRV(Var("l"), 0), LoopRV(Var("l"), 0)
    split = Trace(insts=[Instruction("get_block", ("B",), outputs=[b0]),
                         Instruction("get_loops", (b0,), outputs=[l1]),
                         Instruction("split", (l1,), {"factors": [None, 4]}, outputs=[l2, l3])])
    assert split.simplified(remove_postproc=False).as_python() == split.as_python()


def test_json_of_a_hand_made_trace_replays():
    # test_apply_json_to_schedule_1 / test_apply_annotation_from_json (awkward strings included)
    data = json.dumps(_inline_b().as_json())
    sch = tdsl.Schedule(elementwise)
    Trace.apply_json_to_schedule(data, sch)
    check(sch, elementwise)
    for value in ("SSRSSR", "", '""', '"'):
        b0 = BlockRV("", 0)
        trace = Trace(insts=[Instruction("get_block", ("B",), outputs=[b0]),
                             Instruction("annotate", (b0, "meta_schedule.auto_tensorize", value))])
        sch = tdsl.Schedule(elementwise)
        Trace.apply_json_to_schedule(json.dumps(trace.as_json()), sch)
        assert dict(sch.get(sch.get_block("B")).annotations)["meta_schedule.auto_tensorize"] == value


def test_sampling_step_made_by_hand_keeps_its_decision():
    # test_apply_json_to_schedule_sample_categorical
    from tdsl.schedule.sampling import IntRV

    v0 = IntRV(0, 0)
    step = Instruction("sample_categorical", (), {"candidates": [3], "probs": [1.0]}, outputs=[v0])
    trace = Trace(insts=[step], decisions={step: 0})
    assert trace.get_decision(trace.insts[0]) == 0
    sch = tdsl.Schedule(elementwise)
    Trace.apply_json_to_schedule(trace.as_json(), sch)
    assert sch.trace.as_python() == ["v0 = sch.sample_categorical(candidates=[3], probs=[1.0], decision=0)"]


def test_bad_trace_parts_are_refused():
    with pytest.raises(TypeError, match="Instruction"):
        Trace(["get_block"])
    with pytest.raises(tdsl.ScheduleError, match="not a step"):
        _inline_b().get_decision(Instruction("get_block", ("B",), outputs=[BlockRV("", 0)]))
