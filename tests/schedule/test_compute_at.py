"""compute_at and reverse_compute_at (compute_inline and its reverse: test_compute_inline.py).
Legal cases: `check` (round trip + same results); refusals:
`expect_error` (names, schedule untouched)."""
from __future__ import annotations

import pytest
from dataflow_helpers import CHAIN, ROWSUM_THEN_SCALE, STENCIL, SYMBOLIC_CHAIN, loops, parse, run_docstring_example
from sched_check import check, expect_error, same_on_cpu

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


# loops bound to threads (TVM's mma schedule) ----------------------------------------------------

THREAD_TILES = '''
@T.prim_func
def tiles(A: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    B = T.alloc_buffer((64, 64), "float32")
    for t in T.thread_binding(4, thread="threadIdx.y"):
        for x, y in T.grid(32, 32):
            with T.block("B"):
                vi = T.axis.spatial(64, t % 2 * 32 + x)
                vj = T.axis.spatial(64, t // 2 * 32 + y)
                B[vi, vj] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(64, 64):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] + T.float32(1)
'''


def test_reverse_compute_at_a_thread_loop_computes_what_that_thread_produced():
    # the thread's tile is t % 2 * 32 + [0, 32) x t // 2 * 32 + [0, 32): not a window that slides
    # with t (threads run side by side), so the consumer takes the whole tile of each thread
    f = parse(THREAD_TILES)
    sch = tdsl.Schedule(f)
    t = sch.get_loops(sch.get_block("B"))[0]
    sch.reverse_compute_at(sch.get_block("C"), t)
    assert "for ax0, ax1 in T.grid(32, 32):" in sch.func.script()
    check(sch, f)


def test_compute_at_of_a_copy_that_its_loops_run_several_times_over():
    # a copy under a loop of which only a digit moves it (r // 2: each pair of blocks re-reads the
    # same rows, as TVM's cache_read under fused blockIdx loops): running it again writes the same
    # values. Large enough that tdsl counts instances instead of running the loops.
    f = parse('''
@T.prim_func
def twice(A: T.Buffer((512, 256), "float32"), C: T.Buffer((512, 256), "float32")):
    B = T.alloc_buffer((512, 256), "float32")
    for r in range(4):
        for i, j in T.grid(256, 256):
            with T.block("B"):
                vi = T.axis.spatial(512, r // 2 * 256 + i)
                vj = T.axis.spatial(256, j)
                B[vi, vj] = A[vi, vj]
    for i, j in T.grid(512, 256):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] * T.float32(3)
''')
    sch = tdsl.Schedule(f)
    sch.compute_at(sch.get_block("B"), sch.get_loops(sch.get_block("C"))[0])
    assert tdsl.structural_diff(tdsl.parse(sch.func.script()), sch.func) is None
    same_on_cpu(sch, f)
