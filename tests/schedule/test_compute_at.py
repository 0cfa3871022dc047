"""compute_at and reverse_compute_at (compute_inline and its reverse: test_compute_inline.py).
Legal cases: `check` (round trip + same results); refusals:
`expect_error` (names, schedule untouched)."""
from __future__ import annotations

import pytest
from dataflow_helpers import CHAIN, ROWSUM_THEN_SCALE, STENCIL, SYMBOLIC_CHAIN, loops, parse, run_docstring_example
from sched_check import check, expect_error

import tdsl

REVERSED = '''
@T.prim_func
def reversed_read(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    B = T.alloc_buffer((16,), "float32")
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            B[vi] = A[vi] * T.float32(2)
    for i in range(16):
        with T.block("C"):
            vi = T.axis.spatial(16, i)
            C[vi] = B[15 - vi]
'''

TWO_OUTPUTS = '''
@T.prim_func
def two_outputs(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32"), C: T.Buffer((8,), "float32")):
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            B[vi] = A[vi] * T.float32(2)
    for i in range(8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            C[vi] = B[vi] + T.float32(1)
'''


# compute_at ----------------------------------------------------------------------------------

def test_compute_at_elementwise_tile():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    i, _j = loops(sch, "C")
    i0, _i1 = sch.split(i, factors=[None, 4])
    sch.compute_at(sch.get_block("B"), i0)
    assert [lp.name for lp in loops(sch, "B")] == [i0.name, "ax0", "ax1"]
    check(sch, f)


def test_compute_at_stencil_recomputes_the_halo():
    f = parse(STENCIL)
    sch = tdsl.Schedule(f)
    (i,) = loops(sch, "C")
    i0, _ = sch.split(i, factors=[None, 4])
    sch.compute_at(sch.get_block("B"), i0)
    # 4 outputs need 5 inputs per tile; the last tile is clipped by a predicate
    assert "for ax0 in range(5)" in sch.func.script()
    check(sch, f)


def test_compute_at_symbolic_extent():
    f = parse(SYMBOLIC_CHAIN)
    sch = tdsl.Schedule(f)
    _i, j = loops(sch, "C")
    sch.compute_at(sch.get_block("B"), j)
    check(sch, f, dims={"n": 7})


def test_compute_at_reduction_producer_into_row_loop():
    f = parse(ROWSUM_THEN_SCALE)
    sch = tdsl.Schedule(f)
    i, _j = loops(sch, "C")
    sch.compute_at(sch.get_block("S"), i)
    check(sch, f)


def test_compute_at_chain_consumer_first():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    i, _ = loops(sch, "D")
    sch.compute_at(sch.get_block("C"), i)
    sch.compute_at(sch.get_block("B"), i)
    text = sch.func.script()
    assert text.index('T.block("B")') < text.index('T.block("C")') < text.index('T.block("D")')
    check(sch, f)


def test_compute_at_refusals():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    b, c, d = (sch.get_block(n) for n in "BCD")
    bi, _ = sch.get_loops(b)
    di, _ = sch.get_loops(d)
    # no consumer of B under D's loop
    expect_error(sch, lambda: sch.compute_at(b, di), 'block "B"', f"loop {di.name}", "reads")
    # a producer cannot move into an earlier nest
    expect_error(sch, lambda: sch.compute_at(c, bi), 'block "C"', "reverse_compute_at")
    # the block's own loop
    expect_error(sch, lambda: sch.compute_at(b, bi), 'block "B"', "already under")
    # a parameter written only partly by the moved producer
    g = parse(TWO_OUTPUTS)
    sch = tdsl.Schedule(g)
    b = sch.get_block("B")
    (ci,) = sch.get_loops(sch.get_block("C"))
    expect_error(sch, lambda: sch.compute_at(b, ci), 'block "B"', "parameter")


# reverse_compute_at --------------------------------------------------------------------------

def test_reverse_compute_at_elementwise():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    i, j = loops(sch, "B")
    sch.reverse_compute_at(sch.get_block("C"), j)
    sch.reverse_compute_at(sch.get_block("D"), i)
    check(sch, f)


def test_reverse_compute_at_stencil_is_correct_where_tvm_is_wrong():
    # apache/tvm#15911: a consumer reading B[vi + 1] under the producer's tile loop. TVM computes
    # C[4*i0 .. 4*i0+3] at tile i0, before B[4*i0+4] exists. tdsl runs each C when its inputs are ready.
    f = parse(STENCIL)
    sch = tdsl.Schedule(f)
    (i,) = loops(sch, "B")
    i0, i1 = sch.split(i, factors=[None, 4])
    sch.reverse_compute_at(sch.get_block("C"), i0)
    check(sch, f)
    sch2 = tdsl.Schedule(f)
    (i,) = loops(sch2, "B")
    i0, i1 = sch2.split(i, factors=[None, 4])
    sch2.reverse_compute_at(sch2.get_block("C"), i1)
    check(sch2, f)


def test_reverse_compute_at_symbolic_and_reduction_consumer():
    f = parse(SYMBOLIC_CHAIN)
    sch = tdsl.Schedule(f)
    i, _ = loops(sch, "B")
    sch.reverse_compute_at(sch.get_block("C"), i)
    check(sch, f, dims={"n": 4})
    g = parse(ROWSUM_THEN_SCALE)
    sch = tdsl.Schedule(g)
    i, _k = loops(sch, "S")
    sch.reverse_compute_at(sch.get_block("C"), i)
    check(sch, g)


def test_reverse_compute_at_refuses_reading_what_is_not_produced_yet():
    f = parse(REVERSED)
    sch = tdsl.Schedule(f)
    (i,) = loops(sch, "B")
    c = sch.get_block("C")
    msg = expect_error(sch, lambda: sch.reverse_compute_at(c, i), 'block "C"', 'block "B"', f"loop {i.name}",
                       "not written yet")
    assert "15911" in msg


def test_reverse_compute_at_refusals():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    b, c, d = (sch.get_block(n) for n in "BCD")
    bi, _ = sch.get_loops(b)
    di, _ = sch.get_loops(d)
    # D reads nothing B writes
    expect_error(sch, lambda: sch.reverse_compute_at(d, bi), 'block "D"', f"loop {bi.name}", "writes")
    # a consumer cannot move into a later nest
    expect_error(sch, lambda: sch.reverse_compute_at(b, di), 'block "B"', "compute_at")
    g = parse(SYMBOLIC_CHAIN)
    sch = tdsl.Schedule(g)
    i, _ = loops(sch, "C")
    sch.split(i, factors=[None, 4])  # C now has a predicate tdsl cannot enumerate (n is symbolic)
    bi, _ = loops(sch, "B")
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.reverse_compute_at(c, bi), 'block "C"', "T.where")


def test_order_does_not_matter_split_before_compute_at():
    # the predicate of a non-dividing split is recognised as "the whole domain" and dropped
    f = parse(STENCIL)
    sch = tdsl.Schedule(f)
    (i,) = loops(sch, "C")
    sch.split(i, factors=[None, 4])
    (bi,) = loops(sch, "B")
    bi0, _ = sch.split(bi, factors=[None, 5])
    sch.reverse_compute_at(sch.get_block("C"), bi0)
    check(sch, f)
    sch = tdsl.Schedule(f)
    (bi,) = loops(sch, "B")
    sch.split(bi, factors=[None, 3])
    (ci,) = loops(sch, "C")
    ci0, _ = sch.split(ci, factors=[None, 4])
    sch.compute_at(sch.get_block("B"), ci0)
    check(sch, f)


# docstrings ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["compute_at", "reverse_compute_at"])
def test_docstring_example(name):
    run_docstring_example(name)


def test_reverse_compute_at_refuses_partial_reductions():
    f = parse(ROWSUM_THEN_SCALE)
    sch = tdsl.Schedule(f)
    i, k = loops(sch, "S")
    sch.reorder(k, i)  # the sums are complete only after the last k
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.reverse_compute_at(c, i), 'block "S"', 'block "C"', "partial")
