"""Generated programs: every one parses, round-trips, interprets deterministically without
touching its inputs, and computes the same thing lowered (interpreted) and compiled for the CPU.
"""
from __future__ import annotations

import numpy as np
from fuzz.fuzz_common import assert_close, assert_roundtrip, fuzz_settings, run_interpreter
from fuzz.gen_programs import programs
from hypothesis import given

import tdsl


def _sizes(prog) -> list:
    return [None] if not prog.symbolic else [prog.d0, 1, prog.d0 + 4]


@fuzz_settings(150)
@given(prog=programs())
def test_generated_programs_interpret(prog):
    func = tdsl.parse(prog.text)
    assert_roundtrip(func)
    for n in _sizes(prog):
        args = prog.args(np.random.default_rng(0), n)
        first = run_interpreter(func, args)
        second = run_interpreter(func, args)
        for i, (a, b, orig) in enumerate(zip(first, second, args)):
            if not isinstance(orig, np.ndarray):
                continue
            assert_close(a, b, 0, 0, what=f"interpreting twice differs at argument {i}")
            if i != prog.output_index:
                np.testing.assert_array_equal(a, orig, err_msg=f"input {i} was modified")


@fuzz_settings(120)
@given(prog=programs())
def test_lowered_programs_match(prog):
    """The lowering passes keep the meaning (the interpreter runs lowered IR too)."""
    func = tdsl.parse(prog.text)
    lowered = tdsl.lower(func, target="cpu")
    assert lowered.script()  # lowered IR prints (it need not parse back: it carries flat-parameter attrs)
    for n in _sizes(prog):
        args = prog.args(np.random.default_rng(2), n)
        want = run_interpreter(func, args)[prog.output_index]
        got = run_interpreter(lowered, args)[prog.output_index]
        assert_close(got, want, *prog.tolerance(), what=f"lowered vs original (n={n})")


@fuzz_settings(60)
@given(prog=programs())
def test_compiled_programs_match(prog):
    func = tdsl.parse(prog.text)
    kernel = tdsl.build(func, target="cpu")
    for n in _sizes(prog):
        args = prog.args(np.random.default_rng(3), n)
        want = run_interpreter(func, args)[prog.output_index]
        kernel(*args)
        assert_close(args[prog.output_index], want, *prog.tolerance(), what=f"compiled vs interpreter (n={n})")
