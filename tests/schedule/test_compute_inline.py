"""compute_inline and reverse_compute_inline (compute_at and its reverse: test_compute_at.py).
Legal cases: `check` (round trip + same results); refusals:
`expect_error` (names, schedule untouched)."""
from __future__ import annotations

import pytest
from dataflow_helpers import CHAIN, ROWSUM_THEN_SCALE, STENCIL, SYMBOLIC_CHAIN, parse, run_docstring_example
from sched_check import check, expect_error

import tdsl

TRANSPOSE = '''
@T.prim_func
def transpose(A: T.Buffer((6, 4), "float32"), C: T.Buffer((4, 6), "float32")):
    B = T.alloc_buffer((6, 4), "float32")
    for i, j in T.grid(6, 4):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] + T.float32(1)
    for j, i in T.grid(4, 6):
        with T.block("C"):
            vj, vi = T.axis.remap("SS", [j, i])
            C[vj, vi] = B[vi, vj] * T.float32(3)
'''


# compute_inline ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["B", "C"])
def test_compute_inline_chain(name):
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    sch.compute_inline(sch.get_block(name))
    assert f'T.block("{name}")' not in sch.func.script()
    assert name not in [b.name for b in sch.func.root_block.alloc_buffers]
    check(sch, f)


def test_compute_inline_stencil_and_symbolic():
    f = parse(STENCIL)
    sch = tdsl.Schedule(f)
    sch.compute_inline(sch.get_block("B"))
    check(sch, f)
    g = parse(SYMBOLIC_CHAIN)
    sch = tdsl.Schedule(g)
    sch.compute_inline(sch.get_block("B"))
    check(sch, g, dims={"n": 3})


def test_compute_inline_refusals():
    f = parse(ROWSUM_THEN_SCALE)
    sch = tdsl.Schedule(f)
    s, c = sch.get_block("S"), sch.get_block("C")
    expect_error(sch, lambda: sch.compute_inline(s), 'block "S"', "reduction")
    expect_error(sch, lambda: sch.compute_inline(c), 'block "C"', "parameter", "reverse_compute_inline")
    g = parse(CHAIN)
    sch = tdsl.Schedule(g)
    b = sch.get_block("B")
    sch.compute_inline(b)
    expect_error(sch, lambda: sch.compute_inline(b), 'block "B"', "no longer exists")


# reverse_compute_inline ----------------------------------------------------------------------

def test_reverse_compute_inline_chain_end_and_middle():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    sch.reverse_compute_inline(sch.get_block("D"))
    sch.reverse_compute_inline(sch.get_block("C"))
    assert [b.name for b in sch.func.root_block.alloc_buffers] == []
    check(sch, f)


def test_reverse_compute_inline_transposed_consumer_and_symbolic():
    f = parse(TRANSPOSE)
    sch = tdsl.Schedule(f)
    sch.reverse_compute_inline(sch.get_block("C"))
    assert "C[vj, vi]" in sch.func.script()
    check(sch, f)
    g = parse(SYMBOLIC_CHAIN)
    sch = tdsl.Schedule(g)
    sch.reverse_compute_inline(sch.get_block("C"))
    check(sch, g, dims={"n": 2})


def test_reverse_compute_inline_refusals():
    f = parse(STENCIL)
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.reverse_compute_inline(c), 'block "C"', "B[vi", "same indices")
    g = parse(ROWSUM_THEN_SCALE)
    sch = tdsl.Schedule(g)
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.reverse_compute_inline(c), 'block "C"', "S")
    h = parse(CHAIN)
    sch = tdsl.Schedule(h)
    b = sch.get_block("B")
    expect_error(sch, lambda: sch.reverse_compute_inline(b), 'block "B"', "no buffer written by another block")


# docstrings ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["compute_inline", "reverse_compute_inline"])
def test_docstring_example(name):
    run_docstring_example(name)


def test_compute_inline_refuses_when_an_input_is_overwritten_in_between():
    f = parse('''
@T.prim_func
def overwrite(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
    B = T.alloc_buffer((8,), "float32")
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = A[vi] * T.float32(2)
    for i in range(8):
        with T.block("bump"):
            vi = T.axis.spatial(8, i)
            A[vi] = A[vi] + T.float32(1)
    for i in range(8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            C[vi] = B[vi]
''')
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    expect_error(sch, lambda: sch.compute_inline(b), 'block "B"', 'block "bump"', "A")
