"""Issue 28: leaving out an output of symbolic shape takes the one-call fast path (its shape is
read from the inputs), with the same results and the same errors as the checked path; a size
expression that is negative for the given sizes is an ArgumentError naming the parameter and
the expression; an intermediate whose element count wraps int64 is refused before any write."""
from __future__ import annotations

import numpy as np
import pytest
from backends.subproc import run_probe

import tdsl

DIFF = '''
@T.prim_func
def diff(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n - 1",), "float32")):
    for i in range(n - 1):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi + 1] - A[vi]
'''

OUTER = '''
@T.prim_func
def outer(x: T.Buffer(("n",), "float32"), y: T.Buffer(("m",), "float32"),
          O: T.Buffer(("n", "m"), "float32"), S: T.Buffer(("n * 2",), "float32")):
    for i, j in T.grid(n, m):
        with T.block("O"):
            vi, vj = T.axis.remap("SS", [i, j])
            O[vi, vj] = x[vi] * y[vj]
    for i in range(n * 2):
        with T.block("S"):
            vi = T.axis.remap("S", [i])
            S[vi] = x[vi // 2]
'''


def _no_slow_path(kernel, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the checked (slow) path was taken")
    monkeypatch.setattr(type(kernel), "_slow_call", refuse)


def test_symbolic_outputs_are_allocated_on_the_fast_path(monkeypatch):
    diff, outer = tdsl.build(tdsl.parse(DIFF)), tdsl.build(tdsl.parse(OUTER))
    a = np.arange(7, dtype=np.float32) ** 2
    x, y = np.arange(3, dtype=np.float32), np.arange(5, dtype=np.float32) + 1
    _no_slow_path(diff, monkeypatch)
    _no_slow_path(outer, monkeypatch)
    np.testing.assert_array_equal(diff(a), np.diff(a))
    o, s = outer(x, y)
    np.testing.assert_array_equal(o, np.outer(x, y))
    np.testing.assert_array_equal(s, np.repeat(x, 2))


def test_unusual_arguments_still_take_the_checked_path():
    diff = tdsl.build(tdsl.parse(DIFF))
    with pytest.raises(tdsl.ArgumentError, match="'A'.*got list"):
        diff([1.0, 4.0, 9.0])
    np.testing.assert_array_equal(diff(np.arange(8, dtype=np.float32)[::2]), np.full(3, 2, np.float32))
    with pytest.raises(tdsl.ArgumentError, match="'A'"):
        diff(np.zeros((2, 3), np.float32))             # wrong rank: named, not an IndexError
    outer = tdsl.build(tdsl.parse(OUTER))
    o, _ = outer(np.ones(2, np.float32), np.ones(0, np.float32))
    assert o.shape == (2, 0)


def test_negative_size_expression_is_an_argument_error_naming_parameter_and_expression():
    func = tdsl.parse(DIFF)
    with pytest.raises(tdsl.ArgumentError, match=r"output 'B' of shape \(n - 1,\).*\(-1,\) with n = 0"):
        tdsl.build(func)(np.zeros(0, np.float32))
    with pytest.raises(tdsl.ArgumentError, match=r"output 'B': its dimension n - 1 = -1 is negative with n = 0"):
        tdsl.interpret(func, np.zeros(0, np.float32))


PROBE_HUGE = '''
import numpy as np, tdsl
for dtype in ("int32", "int64"):
    dims = ", ".join(["n"] * 4) if dtype == "int32" else ", ".join(["T.int64(n)"] * 4)
    f = tdsl.parse(f"""
@T.prim_func
def g(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")):
    tmp = T.alloc_buffer(({dims}), "float32")
    for i in range(n):
        with T.block("t"):
            vi = T.axis.remap("S", [i])
            tmp[vi, vi, vi, vi] = A[vi]
    for i in range(n):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = tmp[vi, vi, vi, vi]
""")
    k = tdsl.build(f)
    print(dtype, "small", (k(np.arange(3, dtype="float32")) == np.arange(3)).all())
    for n in (65536, 1 << 16 | 1, 300):
        try:
            k(np.ones(n, "float32"))
            print(dtype, "ACCEPTED", n)
        except (MemoryError, tdsl.ArgumentError) as e:
            print(dtype, "REFUSED", n, type(e).__name__, e)
'''


def test_intermediate_whose_count_wraps_int64_is_refused_before_any_write():
    """(n, n, n, n) with n = 65536 has 2**64 elements, which int64 arithmetic wraps to 0: the
    default build allocated nothing and wrote through it (SIGSEGV)."""
    out = run_probe(PROBE_HUGE)
    assert "int32 small True" in out and "int64 small True" in out, out
    assert "ACCEPTED" not in out, out
    assert out.count("int32 REFUSED") == 3 and "2**31 elements" in out, out
    assert out.count("int64 REFUSED") == 3, out
