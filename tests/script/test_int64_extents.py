"""Issue 22: loop extents and bounds past int32 (plain Python ints) widen to int64 as in TVM,
instead of becoming int32 immediates the kernel truncates; past int64 and as split factors of
an int32 loop they are refused."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl
from tdsl.ir import For


def _loops(func):
    out = []
    from tdsl.ir.functor import post_order_visit
    post_order_visit(func.body, lambda n: out.append(n) if isinstance(n, For) else None)
    return out


@pytest.mark.parametrize("ext", [2**31, 2**32 + 1, 2**40])
def test_large_extent_widens_to_int64(ext):
    func = tdsl.parse(f'''
@T.prim_func
def f(B: T.Buffer((1,), "int64")):
    for i in range({ext}):
        with T.block("B"):
            vi = T.axis.reduce({ext}, i)
            with T.init():
                B[0] = T.int64(0)
            B[0] = B[0] + T.int64(1)
''')
    (loop,) = _loops(func)
    assert loop.extent.dtype.bits == 64 and loop.extent.value == ext
    assert tdsl.structural_diff(func, tdsl.parse(func.script())) is None


def test_int64_loop_near_two_to_the_32_runs_its_trips():
    func = tdsl.parse('''
@T.prim_func
def f(B: T.Buffer((1,), "int64")):
    for i in range(4294967293, 4294967297):
        with T.block("B"):
            vi = T.axis.reduce(4294967297, i)
            with T.init():
                B[0] = T.int64(0)
            B[0] = B[0] + (vi - 4294967290)
''')
    got = np.zeros(1, "int64")
    tdsl.build(func)(got)
    assert got[0] == 3 + 4 + 5 + 6
    want = np.zeros(1, "int64")
    tdsl.interpret(func, want)
    assert want[0] == got[0]


def test_extent_past_int64_is_a_script_error():
    with pytest.raises(tdsl.ScriptError, match="does not fit int64") as info:
        tdsl.parse('''
@T.prim_func
def f(B: T.Buffer((1,), "int64")):
    for i in range(2**64):
        B[0] = T.int64(1)
''')
    assert info.value.lineno == 4


def test_split_factor_past_the_loop_dtype_is_refused():
    sch = tdsl.Schedule(tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi]
'''))
    before = sch.func
    loop = sch.get_loops(sch.get_block("B"))[0]
    with pytest.raises(tdsl.ScheduleError, match="does not fit its int32 loop variable"):
        sch.split(loop, factors=[None, 2**32 + 2])
    assert sch.func is before
