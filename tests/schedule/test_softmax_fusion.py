"""compute_at / reverse_compute_at between loop nests that already share a loop (nests computed
at a row loop, as in softmax_schedule): the block and the target loop are ordered in the
innermost sequence holding both, and what is crossed or read later inside that loop is checked."""
import numpy as np
import pytest
from sched_check import check

import tdsl
from tdsl.errors import ScheduleError

RNG = np.random.default_rng(11)

# three stages computed at the row loop of the last one
ROW_STAGES = '''
@T.prim_func
def f(A: T.Buffer((4, 64), "float32"), B: T.Buffer((4, 64), "float32")):
    E = T.alloc_buffer((4, 64), "float32")
    F = T.alloc_buffer((4, 64), "float32")
    for i, j in T.grid(4, 64):
        with T.block("e"):
            vi, vj = T.axis.remap("SS", [i, j])
            E[vi, vj] = T.exp(A[vi, vj])
    for i, j in T.grid(4, 64):
        with T.block("f"):
            vi, vj = T.axis.remap("SS", [i, j])
            F[vi, vj] = E[vi, vj] * T.float32(2)
    for i, j in T.grid(4, 64):
        with T.block("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = F[vi, vj] + E[vi, vj]
'''


def _row_fused() -> tuple[tdsl.PrimFunc, tdsl.Schedule]:
    func = tdsl.parse(ROW_STAGES)
    sch = tdsl.Schedule(func)
    row, _ = sch.get_loops(sch.get_block("b"))
    sch.compute_at(sch.get_block("f"), row)
    sch.compute_at(sch.get_block("e"), row)
    return func, sch


def test_reverse_compute_at_into_a_sibling_nest_under_the_row_loop():
    func, sch = _row_fused()
    _, j = sch.get_loops(sch.get_block("e"))
    j0, _ = sch.split(j, factors=[None, 16])
    sch.reverse_compute_at(sch.get_block("f"), j0)
    # f now runs 16 columns at a time right after e computed them, both under j0
    assert [str(loop) for loop in sch.get_loops(sch.get_block("f"))[:2]] == \
        [str(loop) for loop in sch.get_loops(sch.get_block("e"))[:2]]
    a = RNG.standard_normal((4, 64)).astype(np.float32)
    np.testing.assert_allclose(tdsl.build(sch)(a), tdsl.interpret(func, a), rtol=1e-6)


def test_compute_at_into_a_sibling_nest_under_the_row_loop():
    func, sch = _row_fused()
    _, j = sch.get_loops(sch.get_block("f"))
    j0, _ = sch.split(j, factors=[None, 16])
    sch.compute_at(sch.get_block("e"), j0)   # b still reads all of E after the loop: j0 covers it
    a = RNG.standard_normal((4, 64)).astype(np.float32)
    np.testing.assert_allclose(tdsl.build(sch)(a), tdsl.interpret(func, a), rtol=1e-6)


PARTIAL = '''
@T.prim_func
def f(A: T.Buffer((4, 64), "float32"), C: T.Buffer((4, 32), "float32"), D: T.Buffer((4, 64), "float32")):
    P = T.alloc_buffer((4, 64), "float32")
    for i in range(4):
        for j in range(64):
            with T.block("p"):
                vi, vj = T.axis.remap("SS", [i, j])
                P[vi, vj] = A[vi, vj] * T.float32(2)
        for j in range(32):
            with T.block("c"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = P[vi, vj] + T.float32(1)
        for j in range(64):
            with T.block("d"):
                vi, vj = T.axis.remap("SS", [i, j])
                D[vi, vj] = P[vi, vj] * T.float32(3)
'''


def test_compute_at_refuses_to_drop_what_a_later_sibling_reads():
    """c needs half of each row of P, but d reads all of it later in the same row loop."""
    sch = tdsl.Schedule(tdsl.parse(PARTIAL))
    _, j = sch.get_loops(sch.get_block("c"))
    j0, _ = sch.split(j, factors=[None, 16])
    with pytest.raises(ScheduleError, match='block "d" reads it after the loop'):
        sch.compute_at(sch.get_block("p"), j0)


CROSSING = '''
@T.prim_func
def f(A: T.Buffer((4, 64), "float32"), B: T.Buffer((4, 64), "float32")):
    E = T.alloc_buffer((4, 64), "float32")
    G = T.alloc_buffer((4, 64), "float32")
    for i in range(4):
        for j in range(64):
            with T.block("e"):
                vi, vj = T.axis.remap("SS", [i, j])
                E[vi, vj] = T.exp(A[vi, vj])
        for j in range(64):
            with T.block("g"):
                vi, vj = T.axis.remap("SS", [i, j])
                G[vi, vj] = A[vi, vj] + T.float32(1)
        for j in range(64):
            with T.block("f"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = E[vi, vj] * G[vi, vj]
'''


def test_reverse_compute_at_refuses_to_cross_a_sibling_it_reads_from():
    sch = tdsl.Schedule(tdsl.parse(CROSSING))
    _, j = sch.get_loops(sch.get_block("e"))
    with pytest.raises(ScheduleError, match='block "g" uses G between'):
        sch.reverse_compute_at(sch.get_block("f"), j)


def test_softmax_sum_partials_follow_exp_step_by_step():
    """softmax's sum rfactor block reads E[vi, k0 * 32 + k1] with its reduction index k0:
    reverse_compute_at under exp's step loop binds k0 to the step (the index inverted as a
    mixed-radix number), each step adding the 32 partials exp has just produced, in the original
    order. (Fusing it measured no faster than a separate pass over E in L1, docs/performance.md.)"""
    import pathlib
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
    import schedules

    original = schedules.softmax_func(8, 64)
    sch = tdsl.Schedule(original)
    row, _ = sch.get_loops(sch.get_block("norm"))
    for name in ("sum", "exp", "max"):
        sch.compute_at(sch.get_block(name), row)
    step, _ = sch.split(sch.get_loops(sch.get_block("exp"))[-1], factors=[None, 32])
    loops = sch.get_loops(sch.get_block("sum"))
    _, inner = sch.split(loops[-1], factors=[None, 32])
    rf = sch.rfactor(inner, len(loops) - 1)
    sch.reverse_compute_at(rf, step)
    assert sch.get_loops(rf)[-2].name == step.name
    check(sch, original)
