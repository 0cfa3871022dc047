"""Random schedule sequences (legal and illegal) over generated programs and corpus kernels.

Every sequence checks: a refused step raises ScheduleError and changes nothing; the final
function round-trips through print/parse, replays from its trace, and computes what the
unscheduled function computes (interpreter vs interpreter; a sample also through
`tdsl.build(..., target="cpu")`).
"""
from __future__ import annotations

import numpy as np
from corpus import CORPUS, check_case
from fuzz.fuzz_common import assert_close, assert_roundtrip, fuzz_settings, run_interpreter
from fuzz.gen_programs import programs
from fuzz.gen_schedules import run_sequence
from hypothesis import given
from hypothesis import strategies as st

import tdsl

CHEAP_CORPUS = [c for c in CORPUS if not c.symbolic and c.name in {
    "add_broadcast", "relu", "scale", "matmul", "transpose", "row_sum", "row_max", "row_argmax", "softmax",
    "layernorm", "gather_rows", "matmul_i8", "fma_f16", "axpy_f64", "clip_scalars", "let_poly", "leaky_relu_if",
    "matvec_accumulate", "predicated_split", "floor_div_mod", "two_stage_root_alloc", "nested_blocks",
    "prefix_sum", "dense_bias_relu", "loop_kinds", "fused_axes", "explicit_regions", "max_pool2d"}]


def _check_same_meaning(prog, original, scheduled, seed: int) -> None:
    sizes = [None] if not prog.symbolic else [prog.d0, prog.d0 + 3]
    for n in sizes:
        args = prog.args(np.random.default_rng(seed), n)
        want = run_interpreter(original, args)[prog.output_index]
        got = run_interpreter(scheduled, args)[prog.output_index]
        assert_close(got, want, *prog.tolerance(), what=f"scheduled vs original (n={n})")


@fuzz_settings(600)
@given(prog=programs(), data=st.data())
def test_schedules_on_generated_programs(prog, data):
    original = tdsl.parse(prog.text)
    sch = tdsl.Schedule(original)
    pool = run_sequence(sch, data, data.draw(st.integers(1, 8), label="steps"))
    assert_roundtrip(sch.func)
    replayed = sch.trace.apply_to(original)
    assert tdsl.structural_diff(replayed.func, sch.func) is None, f"trace replay differs after {pool.applied}"
    _check_same_meaning(prog, original, sch.func, seed=len(pool.applied))


@fuzz_settings(500)
@given(case=st.sampled_from(CHEAP_CORPUS), data=st.data())
def test_schedules_on_corpus(case, data):
    sch = tdsl.Schedule(case.func)
    pool = run_sequence(sch, data, data.draw(st.integers(1, 6), label="steps"))
    assert_roundtrip(sch.func)
    check_case(case, lambda _f, *args: tdsl.interpret(sch.func, *args))
    replayed = sch.trace.apply_to(case.func)
    assert tdsl.structural_diff(replayed.func, sch.func) is None, f"trace replay differs after {pool.applied}"


@fuzz_settings(40)
@given(prog=programs(max_stages=2), data=st.data())
def test_scheduled_build_matches_interpreter(prog, data):
    original = tdsl.parse(prog.text)
    sch = tdsl.Schedule(original)
    pool = run_sequence(sch, data, data.draw(st.integers(1, 6), label="steps"))
    kernel = tdsl.build(sch, target="cpu")
    sizes = [None] if not prog.symbolic else [prog.d0, prog.d0 + 5]
    for n in sizes:
        args = prog.args(np.random.default_rng(1), n)
        want = run_interpreter(original, args)[prog.output_index]
        kernel(*args)
        assert_close(args[prog.output_index], want, *prog.tolerance(),
                     what=f"built kernel vs interpreter after {pool.applied} (n={n})\n{sch.func.script()}")
