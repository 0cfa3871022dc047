"""Issue 22's size classes, fuzzed: very large functions (hundreds of small blocks, split into
several LLVM functions by backends/llvm/split.py) and long expressions (deep operand chains),
built and compared with numpy / the interpreter. Deeper and bigger with TDSL_FUZZ_DEEP."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
from fuzz.fuzz_common import deep_factor, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

import tdsl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent.parent / "bench"))

from bench_big_function import blocks_program, blocks_reference  # noqa: E402

DEEP = deep_factor() > 1
MAX_BLOCKS = 1500 if DEEP else 300
MAX_TERMS = 3000 if DEEP else 600


@fuzz_settings(1)
@given(data=st.data())
def test_very_large_functions_match_numpy(data):
    n = data.draw(st.integers(260, MAX_BLOCKS), label="blocks")
    pattern = data.draw(st.lists(st.tuples(st.sampled_from("+-*"), st.integers(1, 6)), min_size=n, max_size=n),
                        label="pattern")
    kernel = tdsl.build(tdsl.parse(blocks_program(n, pattern)))
    assert "_part" in kernel.source            # split: 260 blocks are past split.HUGE_BODY
    a = ((np.arange(n * 16).reshape(n, 16) % 5 + 4) / 6).astype("float32")
    want = blocks_reference(n, a, pattern)
    np.testing.assert_allclose(kernel(a), want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max() + 1))


@fuzz_settings(4)
@given(data=st.data())
def test_long_expressions_match_the_interpreter(data):
    n = data.draw(st.integers(50, MAX_TERMS), label="terms")
    ops = data.draw(st.lists(st.sampled_from(["+", "-", "*", "+", "-"]), min_size=n - 1, max_size=n - 1), label="ops")
    loads = data.draw(st.lists(st.integers(0, 7), min_size=n, max_size=n), label="loads")
    expr = f"A[{loads[0]}]" + "".join(f" {op} A[{i}]" for op, i in zip(ops, loads[1:]))
    func = tdsl.parse(f'''
@T.prim_func
def long_expr(A: T.Buffer((8,), "int32"), B: T.Buffer((1,), "int32")):
    with T.block("B"):
        B[0] = {expr}
''')
    a = np.array([3, -7, 2**30, -1, 5, 2**31 - 1, -(2**31), 11], dtype="int32")   # int32 wraps alike
    want = tdsl.interpret(func, a)
    got = tdsl.build(func)(a)
    assert got.tobytes() == np.asarray(want).tobytes(), (got, want)
    text = func.script()
    assert tdsl.parse(text).script() == text
