"""argmax / argmin rfactor (tdsl/schedule/primitives/arg_reduction.py): exact against the
interpreter, ties included, or refused."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl

ARGMAX = '''
@T.prim_func
def argmax(idx: T.Buffer((4, 32), "int32"), val: T.Buffer((4, 32), "int32"),
           I: T.Buffer((4,), "int32"), V: T.Buffer((4,), "int32")):
    for i0, k0, k1 in T.grid(4, 4, 8):
        with T.block("argmax"):
            i = T.axis.spatial(4, i0)
            k = T.axis.reduce(32, k0 * 8 + k1)
            with T.init():
                I[i] = -1
                V[i] = {init}
            a: T.let[T.int32] = T.Select(V[i] {cmp} val[i, k], I[i], idx[i, k])
            b: T.let[T.int32] = T.Select(V[i] {cmp} val[i, k], V[i], val[i, k])
            I[i] = a
            V[i] = b
'''


def _inputs():
    idx = np.arange(4 * 32, dtype="int32").reshape(4, 32)
    val = np.full((4, 32), -5, "int32")
    val[:, 3] = 0   # ties the init value 0 in the first k0 chunk; the other chunks stay below it
    val[1, 20] = 7
    val[2, :] = np.iinfo("int32").min   # every value ties T.min_value
    return idx, val


def _run(func, idx, val):
    out = [np.zeros(4, "int32"), np.zeros(4, "int32")]
    tdsl.interpret(func, idx, val, *out)
    return out


@pytest.mark.parametrize("cmp", [">=", ">"])
@pytest.mark.parametrize("init", ['T.min_value("int32")', "0"])
def test_rfactor_of_the_outer_loop_is_exact_or_refused(cmp, init):
    func = tdsl.parse(ARGMAX.format(cmp=cmp, init=init))
    idx, val = _inputs()
    want = _run(func, idx, val)
    sch = tdsl.Schedule(func)
    _, k0, _ = sch.get_loops(sch.get_block("argmax"))
    if cmp == ">" and init == "0":  # ties take the new index: a partial result still at the
        with pytest.raises(tdsl.ScheduleError, match=r">= instead of >"):  # init would replace an earlier tie
            sch.rfactor(k0, 0)
        assert tdsl.structural_equal(sch.func, func)
        return
    sch.rfactor(k0, 0)
    got = _run(sch.func, idx, val)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_strict_comparison_with_one_candidate_per_partial_is_exact():
    # fusing the reduction loops first leaves the rfactor block no reduction: no partial keeps the init
    func = tdsl.parse(ARGMAX.format(cmp=">", init="0"))
    idx, val = _inputs()
    want = _run(func, idx, val)
    sch = tdsl.Schedule(func)
    _, k0, k1 = sch.get_loops(sch.get_block("argmax"))
    sch.rfactor(sch.fuse(k0, k1), 0)
    got = _run(sch.func, idx, val)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


TWO_SUMS = '''
@T.prim_func
def two_sums(X: T.Buffer((4, 32), "float32"), S: T.Buffer((4,), "float32"), Q: T.Buffer((4,), "float32")):
    for i, k in T.grid(4, 32):
        with T.block("sums"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                S[vi] = T.float32(0)
                Q[vi] = T.float32(0)
            S[vi] = S[vi] + X[vi, vk]
            Q[vi] = Q[vi] + X[vi, vk] * X[vi, vk]
'''


def test_a_two_store_reduction_is_refused_naming_both_forms_rfactor_takes():
    sch = tdsl.Schedule(tdsl.parse(TWO_SUMS))
    before = sch.func.script()
    _, k = sch.get_loops(sch.get_block("sums"))
    with pytest.raises(tdsl.ScheduleError) as info:
        sch.rfactor(k, 0)
    text = str(info.value)
    assert 'block "sums"' in text and "one reduction store" in text and "argmax/argmin" in text
    assert sch.func.script() == before
