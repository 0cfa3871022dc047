"""rfactor of the update block decompose_reduction leaves behind (no T.init): the partials start
from the combiner's identity and the write-back folds them into what the init block wrote.
Legal cases: `check` (round trip + same results) plus tdsl.build and trace replay; refusals:
`expect_error`."""
from __future__ import annotations

import numpy as np
import pytest
from dataflow_helpers import ROWMAX, loops, parse
from sched_check import check, expect_error, kernel

import tdsl

INT_ROWMIN = '''
@T.prim_func
def rowmin(A: T.Buffer((6, 24), "int32"), B: T.Buffer((6,), "int32")):
    for i, k in T.grid(6, 24):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = 100
            B[vi] = T.min(B[vi], A[vi, vk])
'''

ACCUMULATE = '''
@T.prim_func
def acc(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8,), "float32")):
    for i, k in T.grid(8, 32):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            B[vi] = B[vi] + A[vi, vk] * T.float32(2)
'''


def _replays(sch: tdsl.Schedule, original: tdsl.PrimFunc) -> None:
    replay = sch.trace.apply_to(original)
    assert tdsl.structural_equal(replay.func, sch.func)
    fresh = tdsl.Schedule(original)
    exec(str(sch.trace), {"sch": fresh})  # noqa: S102  (the printed trace is Python)
    assert tdsl.structural_equal(fresh.func, sch.func)


def _block_text(sch: tdsl.Schedule, name: str) -> str:
    text = sch.func.script()
    start = text.index(f'T.block("{name}")')
    end = text.find("T.block(", start + 1)
    return text[start:end if end >= 0 else len(text)]


# legal ---------------------------------------------------------------------------------------

def test_matmul_decomposed_at_k0_then_rfactor_the_inner_k():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    _i, _j, k = sch.get_loops(c)
    k0, k1 = sch.split(k, factors=[None, 4])
    init = sch.decompose_reduction(c, k0)
    rf = sch.rfactor(k1, 0)
    assert rf.name == "C_rf" and init.name == "C_init"
    assert "T.init()" in _block_text(sch, "C_rf")  # the partials start from 0 ...
    assert "T.init()" not in _block_text(sch, "C")  # ... and C keeps what C_init wrote
    check(sch, f)
    _replays(sch, f)


def test_rowsum_decomposed_at_the_spatial_loop_rfactor_outer_k_then_parallel_vectorize():
    f = kernel("rowsum")
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    i, k = sch.get_loops(b)
    sch.decompose_reduction(b, i)
    k0, _k1 = sch.split(k, factors=[None, 5])
    rf = sch.rfactor(k0, 1)
    ri, _rk0, _rk1 = sch.get_loops(rf)
    sch.parallel(ri)
    wi, _wk = sch.get_loops(sch.get_block("B"))
    sch.parallel(wi)
    rf_init = sch.decompose_reduction(rf, sch.get_loops(rf)[2])
    sch.vectorize(sch.get_loops(rf_init)[-1])
    check(sch, f)
    a = np.random.default_rng(1).standard_normal((9, 20)).astype("float32")
    out = np.zeros(9, "float32")
    tdsl.build(sch)(a, out)
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5, atol=1e-5)
    _replays(sch, f)


def test_max_with_a_literal_init_partials_start_from_minus_inf():
    # the update has no init value to start the partials from: they start from max's identity,
    # and C keeps the -3.4e38 its init block wrote (a row of -inf still gives -3.4e38)
    f = parse(ROWMAX)
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    _i, k = sch.get_loops(b)
    sch.decompose_reduction(b, k)
    _k0, k1 = sch.split(k, factors=[None, 6])
    sch.rfactor(k1, 0)
    assert 'T.float32("-inf")' in _block_text(sch, "B_rf")
    check(sch, f)
    args = [np.full((6, 24), -np.inf, "float32"), np.zeros(6, "float32")]
    check(sch, f, args=args)
    _replays(sch, f)


def test_int_min_every_k_a_partial():
    # rfactor of the whole reduction loop: one term per partial, so the rf block needs no init
    f = parse(INT_ROWMIN)
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    _i, k = sch.get_loops(b)
    sch.decompose_reduction(b, k)
    rf = sch.rfactor(k, 0)
    assert "T.init()" not in _block_text(sch, rf.name)
    a = np.random.default_rng(2).integers(-50, 300, (6, 24)).astype("int32")
    check(sch, f, args=[a, np.zeros(6, "int32")])
    out = np.zeros(6, "int32")
    tdsl.build(sch)(a, out)
    np.testing.assert_array_equal(out, np.minimum(a.min(axis=1), 100))
    _replays(sch, f)


def test_update_without_any_init_accumulates_onto_the_output():
    # no init anywhere: B += sum(2 * A) keeps the caller's B as the start value
    f = parse(ACCUMULATE)
    sch = tdsl.Schedule(f)
    _i, k = loops(sch, "B")
    _k0, k1 = sch.split(k, factors=[None, 8])
    sch.rfactor(k1, -1)
    check(sch, f)
    _replays(sch, f)


# illegal -------------------------------------------------------------------------------------

def test_refuses_a_loop_around_the_init_block_or_a_bad_axis():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    i, _j, k = sch.get_loops(c)
    sch.decompose_reduction(c, k)
    expect_error(sch, lambda: sch.rfactor(i, 0), f"loop {i.name}", '"C_init"', '"C"', "2 blocks")
    expect_error(sch, lambda: sch.rfactor(k, 4), "factor_axis", "C")


def test_refuses_a_spatial_loop_after_decompose():
    f = kernel("rowsum")
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    i, _k = sch.get_loops(b)
    sch.decompose_reduction(b, i)
    i_update = sch.get_loops(b)[0]
    expect_error(sch, lambda: sch.rfactor(i_update, 0), f"loop {i_update.name}", 'block "B"', "spatial")


def test_refuses_an_update_that_is_not_a_reduction():
    # no init and an update that is not C = C op x: nothing tdsl can factor
    g = parse(ACCUMULATE.replace("B[vi] + A[vi, vk] * T.float32(2)", "B[vi] * T.float32(0.5) + A[vi, vk]"))
    sch = tdsl.Schedule(g)
    _i, k = loops(sch, "B")
    expect_error(sch, lambda: sch.rfactor(k, 0), 'block "B"', "not a sum, product, min or max",
                 "decompose_reduction")


def test_refuses_an_update_reading_its_own_output_elsewhere():
    g = parse(ACCUMULATE.replace("A[vi, vk] * T.float32(2)", "A[vi, vk] * B[0]"))
    sch = tdsl.Schedule(g)
    _i, k = loops(sch, "B")
    expect_error(sch, lambda: sch.rfactor(k, 0), 'block "B"', "reads B itself")


@pytest.mark.parametrize("op", ["T.max", "T.min"])
def test_float_min_max_identity_round_trips(op):
    f = parse(ROWMAX.replace("T.max", op))
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    i, k = sch.get_loops(b)
    sch.decompose_reduction(b, i)
    sch.rfactor(k, 0)
    check(sch, f)


def test_a_guard_on_a_loop_that_drives_no_iterator_is_refused():
    # splitting a unit loop by 2 leaves i_0_0_1 (extent 2) in the guard only; the write-back, built
    # over the spatial loops, could not name it (it once printed an undefined name)
    sch = tdsl.Schedule(parse(ROWMAX))
    for factor in (2, 3, 2):
        sch.split(sch.get_loops("B")[0], factors=[None, factor])
    unit = sch.get_loops("B")[0]
    expect_error(sch, lambda: sch.rfactor(unit, 0), "drives no iterator", 'block "B"')
