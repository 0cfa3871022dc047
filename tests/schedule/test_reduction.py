"""Reduction primitives: decompose_reduction, rfactor (and reducer recognition).
Legal cases: `check` (round trip + same results); refusals: `expect_error`."""
from __future__ import annotations

import pytest
from dataflow_helpers import ROWMAX, ROWSUM_THEN_SCALE, loops, parse, run_docstring_example
from sched_check import check, expect_error, kernel

import tdsl

REDUCERS = {
    "sum": ("T.float32(0)", "B[vi] + A[vi, vk]"),
    "sum_swapped": ("T.float32(0.5)", "A[vi, vk] + B[vi]"),
    "product": ("T.float32(1)", "B[vi] * (A[vi, vk] * T.float32(0.1) + T.float32(1))"),
    "min_inf": ('T.float32("inf")', "T.min(B[vi], A[vi, vk])"),
    "max_literal": ("T.float32(-3.4e38)", "T.max(B[vi], A[vi, vk])"),
    "max_min_value": ('T.min_value("float32")', "T.max(A[vi, vk], B[vi])"),
}


def reduction(init: str, update: str) -> tdsl.PrimFunc:
    return parse(f'''
@T.prim_func
def red(A: T.Buffer((5, 12), "float32"), B: T.Buffer((5,), "float32")):
    for i, k in T.grid(5, 12):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = {init}
            B[vi] = {update}
''')


# decompose_reduction -------------------------------------------------------------------------

def test_decompose_reduction_at_reduction_loop():
    f = kernel("rowsum")
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    i, k = sch.get_loops(b)
    init = sch.decompose_reduction(b, k)
    assert init.name == "B_init"
    assert [lp.name for lp in sch.get_loops(init)] == [i.name]
    check(sch, f)


def test_decompose_reduction_at_outer_loop_copies_spatial_loops():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    i, _j, _k = sch.get_loops(c)
    init = sch.decompose_reduction(c, i)
    assert len(sch.get_loops(init)) == 2
    check(sch, f)


def test_decompose_reduction_then_parallel_and_vectorize_spatial_loops():
    # TVM refuses parallel/vectorize here after decompose_reduction; tdsl allows it
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    j0, j1 = sch.split(j, factors=[None, 8])
    sch.reorder(i, j0, k, j1)
    sch.decompose_reduction(c, k)
    sch.parallel(i)
    sch.vectorize(j1)
    init_loops = sch.get_loops(sch.get_block("C_init"))
    sch.vectorize(init_loops[-1])
    assert "T.parallel" in sch.func.script() and sch.func.script().count("T.vectorized") == 2
    check(sch, f)


def test_decompose_reduction_max():
    f = parse(ROWMAX)
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    _i, k = sch.get_loops(b)
    k0, _k1 = sch.split(k, factors=[None, 6])
    sch.decompose_reduction(b, k0)
    check(sch, f)


def test_decompose_reduction_refusals():
    f = kernel("rowsum")
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    i, k = sch.get_loops(b)
    fused = sch.fuse(i, k)
    expect_error(sch, lambda: sch.decompose_reduction(b, fused), 'block "B"', f"loop {fused.name}", "spatial")
    g = parse(ROWSUM_THEN_SCALE)
    sch = tdsl.Schedule(g)
    s, c = sch.get_block("S"), sch.get_block("C")
    ci, _ = sch.get_loops(c)
    expect_error(sch, lambda: sch.decompose_reduction(s, ci), 'block "S"', f"loop {ci.name}", "not a loop around")
    expect_error(sch, lambda: sch.decompose_reduction(c, ci), 'block "C"', "no T.init")
    _si, sk = sch.get_loops(s)
    sch.decompose_reduction(s, sk)
    expect_error(sch, lambda: sch.decompose_reduction(s, sk), 'block "S"', "no T.init")
    sch = tdsl.Schedule(kernel("matmul"))
    c = sch.get_block("C")
    _i, _j, k = sch.get_loops(c)
    k0, k1 = sch.split(k, factors=[None, 4])
    expect_error(sch, lambda: sch.decompose_reduction(c, k1), 'block "C"', f"loop {k0.name}", "reduction")


# rfactor -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(REDUCERS))
def test_rfactor_recognises_reducers(name):
    f = reduction(*REDUCERS[name])
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    _i, k = sch.get_loops(b)
    _k0, k1 = sch.split(k, factors=[None, 4])
    rf = sch.rfactor(k1, 0)
    assert rf.name == "B_rf"
    check(sch, f)


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_rfactor_factor_axis(axis):
    f = kernel("rowsum")
    sch = tdsl.Schedule(f)
    _i, k = loops(sch, "B")
    k0, _k1 = sch.split(k, factors=[None, 5])
    sch.rfactor(k0, axis)
    rf_buf = next(b for b in sch.func.root_block.alloc_buffers if b.name == "B_rf")
    shape = [int(s.value) for s in rf_buf.shape]
    assert shape == ([4, 9] if axis in (0, -2) else [9, 4])
    check(sch, f)


def test_rfactor_whole_reduction_loop_of_matmul():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    _i, _j, k = loops(sch, "C")
    sch.rfactor(k, 2)
    check(sch, f)


def test_rfactor_under_compute_at():
    # TVM refuses rfactor once the reduction sits under a compute_at; here the write-back lands
    # in the shared row loop
    f = parse(ROWSUM_THEN_SCALE)
    sch = tdsl.Schedule(f)
    ci, _cj = loops(sch, "C")
    s = sch.get_block("S")
    sch.compute_at(s, ci)
    _, k = sch.get_loops(s)
    _k0, k1 = sch.split(k, factors=[None, 4])
    sch.rfactor(k1, 0)
    assert next(lp.name for lp in sch.get_loops(sch.get_block("S"))) == ci.name
    check(sch, f)


def test_rfactor_then_decompose_and_parallel():
    f = parse(ROWMAX)
    sch = tdsl.Schedule(f)
    _i, k = loops(sch, "B")
    _k0, k1 = sch.split(k, factors=[None, 8])
    rf = sch.rfactor(k1, 1)
    ri, rk0, rk1 = sch.get_loops(rf)
    sch.reorder(ri, rk1, rk0)
    sch.decompose_reduction(rf, rk0)
    sch.parallel(ri)
    sch.vectorize(rk1)
    check(sch, f)


def test_rfactor_refusals():
    f = kernel("rowsum")
    sch = tdsl.Schedule(f)
    i, k = loops(sch, "B")
    expect_error(sch, lambda: sch.rfactor(i, 0), f"loop {i.name}", 'block "B"', "spatial")
    expect_error(sch, lambda: sch.rfactor(k, 3), "factor_axis", "B")
    g = reduction("T.float32(0)", "B[vi] - A[vi, vk]")
    sch = tdsl.Schedule(g)
    i, k = loops(sch, "B")
    expect_error(sch, lambda: sch.rfactor(k, 0), 'block "B"', "not a sum, product, min or max")
    h = parse(ROWSUM_THEN_SCALE)
    sch = tdsl.Schedule(h)
    ci, _ = loops(sch, "C")
    sch.compute_at(sch.get_block("S"), ci)
    expect_error(sch, lambda: sch.rfactor(ci, 0), f"loop {ci.name}", "2 blocks")


def test_rfactor_of_a_non_dividing_split():
    # 20 = 3 * 8 - 4: a tail guard on the reduction; slot j of the partials is used iff j < 20
    f = kernel("rowsum")
    for axis in (0, 1):
        sch = tdsl.Schedule(f)
        _, k = loops(sch, "B")
        _k0, k1 = sch.split(k, factors=[None, 8])
        sch.rfactor(k1, axis)
        assert "T.where(" in sch.func.script()
        check(sch, f)
    sch = tdsl.Schedule(f)
    _, k = loops(sch, "B")
    _k0, k1 = sch.split(k, factors=[None, 32])   # more slots than elements: 12 never used
    sch.rfactor(k1, 0)
    check(sch, f)


@pytest.mark.parametrize("name", ["decompose_reduction", "rfactor"])
def test_docstring_example(name):
    run_docstring_example(name)
