"""Issue 22: data-dependent indices are checked by default (one compare per gather: a bad index
is a BoundsError, not a segfault), and bounds checks are per axis, at build time and with
bounds_check=True (`A[vi + 1, vj - 1]` at vj = 0 stays inside the flat buffer)."""
from __future__ import annotations

import numpy as np
import pytest
from backends.subproc import run_probe

import tdsl

GATHER = '''
@T.prim_func
def f(data: T.Buffer((16, 8), "float32"), index: T.Buffer((4,), "int32"), out: T.Buffer((4, 8), "float32")):
    for i, j in T.grid(4, 8):
        with T.block("out"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = data[index[vi], vj]
'''


def test_bad_gather_index_is_a_bounds_error_by_default():
    out = run_probe(f'''
import numpy as np, tdsl
k = tdsl.build(tdsl.parse({GATHER!r}))
d = np.arange(128, dtype="float32").reshape(16, 8)
assert (k(d, np.array([0, 3, 15, 2], "int32")) == d[[0, 3, 15, 2]]).all()
for bad in (16, -1, 10**8):
    try:
        k(d, np.array([0, bad, 1, 2], "int32"))
        print("ACCEPTED", bad)
    except tdsl.BoundsError as e:
        print("REFUSED", e)
''')
    assert "ACCEPTED" not in out and out.count("index[i] on axis 0 is outside [0, 16)") == 3, out


SHIFT = '''
@T.prim_func
def g(A: T.Buffer(("n", 16), "float32"), B: T.Buffer(("m", 16), "float32")):
    for i, j in T.grid(m, 16):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = {value}
'''


def test_per_axis_out_of_bounds_is_refused_at_build():
    with pytest.raises(tdsl.BoundsError, match=r"index j - 1 \(axis 1\), which ranges over \[-1, 14\]"):
        tdsl.build(tdsl.parse(SHIFT.format(value="A[vi + 1, vj - 1]")))


def test_per_axis_out_of_bounds_is_caught_with_bounds_check():
    # guarded, so the build-time check cannot prove the access runs; the run-time check sees axis 1
    func = tdsl.parse(SHIFT.format(value="T.if_then_else(vi < 100, A[vi + 1, vj - 1], T.float32(0))"))
    with pytest.raises(tdsl.BoundsError, match="index j - 1 on axis 1 is outside"):
        tdsl.build(func, bounds_check=True)(np.ones((16, 16), "float32"), np.ones((15, 16), "float32"))
    with pytest.raises(tdsl.BoundsError):
        tdsl.interpret(func, np.ones((16, 16), "float32"), np.ones((15, 16), "float32"))


def test_interpreting_lowered_gather_checks_the_index():
    lowered = tdsl.lower(tdsl.parse(GATHER))
    assert "tdsl.index_check" in lowered.script()
    d = np.ones((16, 8), "float32")
    with pytest.raises(tdsl.BoundsError, match="axis 0"):
        tdsl.interpret(lowered, d, np.array([0, 16, 1, 2], "int32"), np.zeros((4, 8), "float32"))
