"""tdsl.auto_schedule and tdsl.space: correct on the whole corpus, readable, replayable, editable."""
from __future__ import annotations

import json

import numpy as np
import pytest
from auto_check import CONV, CONV_NARROW, MATMUL_SYMBOLIC, SOFTMAX, gemm, same_meaning
from corpus import CORPUS, SYMBOLIC_SIZES, check_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tdsl
from tdsl.schedule import Trace


def _check_on_interpreter(case, sch):
    def run(_func, *args):
        tdsl.interpret(sch.func, *args)

    if case.symbolic:
        for n in SYMBOLIC_SIZES:
            check_case(case, run, args=case.sizes(n)(np.random.default_rng(n)))
    else:
        check_case(case, run)


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_auto_schedule_of_every_corpus_function_is_correct(case):
    sch = tdsl.auto_schedule(case.func, "cpu")
    _check_on_interpreter(case, sch)
    assert tdsl.structural_diff(tdsl.parse(sch.func.script()), sch.func) is None


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_gpu_auto_schedule_of_every_corpus_function_is_correct_and_compiles(case):
    sch = tdsl.auto_schedule(case.func, "cuda")
    _check_on_interpreter(case, sch)
    pytest.importorskip("cuda.bindings")
    for arch in ("sm_80",) if case.name not in ("matmul", "softmax", "conv2d_nchw", "row_sum") else ("sm_80", "sm_90"):
        kernel = tdsl.build(sch, target="cuda", arch=arch)
        assert kernel.cubin


def test_gpu_auto_schedule_runs_on_the_cpu_build():
    f = gemm(64, 64, 32)
    sch = tdsl.auto_schedule(f, "cuda")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 32), dtype=np.float32), rng.standard_normal((32, 64), dtype=np.float32)
    np.testing.assert_allclose(tdsl.build(sch, target="cpu")(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_the_trace_reads_as_python_and_replays():
    f = tdsl.parse(SOFTMAX)
    sch = tdsl.auto_schedule(f, "cpu")
    text = str(sch.trace)
    assert "sch.compute_at(" in text and "sch.rfactor(" in text and "sch.parallel(" in text and "decision=" in text
    fresh = tdsl.Schedule(f)
    exec(text, {"sch": fresh})  # noqa: S102 - the printed trace is the code under test
    assert tdsl.structural_equal(fresh.func, sch.func)
    back = Trace.from_json(json.dumps(sch.trace.as_json())).apply(f)
    assert tdsl.structural_equal(back.func, sch.func)


@pytest.mark.parametrize("target", ["cpu", "llvm -mcpu=x86-64-v3"])
def test_changing_one_decision_by_hand_gives_another_correct_schedule(target):
    # 64 columns: two tiles of columns to choose from with AVX-512's 32-wide register tile too
    f = gemm(32, 64, 32)
    sch = tdsl.auto_schedule(f, target)
    decisions = sch.trace.decisions
    assert decisions, "auto_schedule records its choices as decisions"
    changed = 0
    for step, decision in decisions.items():
        ins = sch.trace.instructions[step]
        if ins.kind != "sample_categorical":
            continue
        n = len(dict(ins.attrs)["candidates"])
        other = (decision + 1) % n
        if other == decision:
            continue
        try:
            new = sch.trace.with_decisions({step: other}).apply(f)
        except tdsl.ScheduleError:
            continue
        same_meaning(new, f)
        changed += 1
        if changed == 3:
            break
    assert changed >= 2


def test_auto_schedule_is_deterministic_and_takes_schedules():
    f = tdsl.parse(CONV)
    a, b = tdsl.auto_schedule(f), tdsl.auto_schedule(tdsl.Schedule(f))
    assert str(a.trace) == str(b.trace)
    with pytest.raises(TypeError, match="PrimFunc"):
        tdsl.auto_schedule("not a function")
    with pytest.raises(tdsl.TargetError):
        tdsl.auto_schedule(f, "tpu")


def test_symbolic_matmul_gets_predicated_tiles():
    f = tdsl.parse(MATMUL_SYMBOLIC)
    sch = tdsl.auto_schedule(f, "cpu")
    for m in (1, 7, 20):
        same_meaning(sch, f, {"m": m})
    sch = tdsl.auto_schedule(f, "cuda")
    for m in (3, 17):
        same_meaning(sch, f, {"m": m})


def test_space_lists_printable_sketches_that_are_all_correct():
    f = tdsl.parse(CONV)
    space = tdsl.space(f, "cpu", seed=1)
    assert len(space) >= 2
    text = str(space)
    assert text.count("# sketch ") == len(space) and "sample_categorical" in text
    for sketch in space:
        same_meaning(sketch, f)
        # every sketch replays from its JSON with its sampled decisions
        back = Trace.from_json(sketch.trace.as_json()).apply(f)
        assert tdsl.structural_equal(back.func, sketch.func)
    assert "Space(conv2d" in repr(space)


_RANDOM_CASES = [c for c in CORPUS if c.name in ("matmul", "batch_matmul", "softmax", "layernorm", "conv2d_nchw",
                                                 "depthwise_conv2d", "row_sum_symbolic", "dense_bias_relu",
                                                 "avg_pool2d", "add_symbolic")]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(_RANDOM_CASES), target=st.sampled_from(["cpu", "cuda"]), seed=st.integers(0, 1000),
       picks=st.lists(st.tuples(st.integers(0, 50), st.integers(-2, 40)), max_size=3))
def test_random_decisions_on_random_functions_never_give_a_wrong_program(case, target, seed, picks):
    """A random sketch of a corpus function, then random decisions: each replay either refuses
    with a ScheduleError or computes the reference."""
    sketches = tdsl.space(case.func, target, seed=seed, limit=4)
    sketch = sketches[seed % len(sketches)]
    _check_on_interpreter(case, sketch)
    steps = sorted(sketch.trace.decisions)
    if not steps:
        return
    new = {}
    for k, value in picks:
        step = steps[k % len(steps)]
        old = sketch.trace.decisions[step]
        new[step] = [max(1, value)] * len(old) if isinstance(old, list) else value
    try:
        replayed = sketch.trace.with_decisions(new).apply(case.func, seed=seed)
    except tdsl.ScheduleError:
        return
    _check_on_interpreter(case, replayed)


def test_gpu_tiling_with_a_one_element_shared_copy_is_refused_not_crashed():
    """Seed 440 samples tiles whose shared copy of A is one element (no copy loop to bind): that
    sketch is dropped with a ScheduleError; the space still holds correct sketches."""
    case = next(c for c in CORPUS if c.name == "batch_matmul")
    sketches = tdsl.space(case.func, "cuda", seed=440, limit=4)
    assert len(sketches) >= 1
    for sketch in sketches:
        _check_on_interpreter(case, sketch)


_BUILT = ("matmul", "batch_matmul", "softmax", "layernorm", "conv2d_nchw", "depthwise_conv2d", "row_sum_symbolic",
          "dense_bias_relu")


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("case", [c for c in CORPUS if c.name in _BUILT], ids=lambda c: c.name)
def test_auto_schedules_build_and_run_on_the_cpu(case, target):
    """The interpreter computes tensorized blocks through their descriptions; the build runs the
    implementations (micro-kernels, generated prefetching steps) for real. GPU schedules run
    on the CPU build (thread loops become serial loops)."""
    kernel = tdsl.build(tdsl.auto_schedule(case.func, target), target="cpu")

    def run(_func, *args):
        kernel(*args)

    if case.symbolic:
        for n in SYMBOLIC_SIZES:
            check_case(case, run, args=case.sizes(n)(np.random.default_rng(n)))
    else:
        check_case(case, run)


_LIVE = ("matmul", "softmax", "layernorm", "conv2d_nchw", "depthwise_conv2d", "dense_bias_relu", "add_broadcast")


@pytest.mark.parametrize("func", [c.func for c in CORPUS if c.name in _LIVE] + [tdsl.parse(CONV_NARROW)],
                         ids=[*(c.name for c in CORPUS if c.name in _LIVE), "conv2d_narrow"])
def test_every_decision_of_every_sketch_is_live(func):
    """Any other value of any decision of a sketch replays and gives another program. A decision
    that the trace does not follow (a count that sliced a list of loops, a yes / no that decided
    whether a step was recorded) makes a search measure one program many times and never the
    alternative: the sketches' random pick of it is then fixed."""
    for target in ("cpu", "cuda"):
        for sketch in tdsl.space(func, target, limit=16):
            base = tdsl.structural_hash(sketch.func)
            for step, decision in sketch.trace.decisions.items():
                ins = sketch.trace.instructions[step]
                if ins.kind == "sample_categorical":
                    others = [k for k in range(len(dict(ins.attrs)["candidates"])) if k != decision]
                else:  # a perfect tile: the factors rotated (refused where the innermost limit forbids it)
                    others = [list(decision[k:]) + list(decision[:k]) for k in range(1, len(decision))]
                    others = [o for o in others if o != list(decision)]
                for other in others:
                    try:
                        changed = sketch.trace.with_decisions({step: other}).apply(func)
                    except tdsl.ScheduleError:
                        assert ins.kind == "sample_perfect_tile", f"{target}: decision {step} -> {other} refused"
                        continue
                    assert tdsl.structural_hash(changed.func) != base, \
                        f"{target}: decision {step} ({sketch.trace.as_python()[step]}) -> {other} changes nothing"
