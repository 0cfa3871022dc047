"""Lookup primitives: get_block, get_loops, get_child_blocks, get_producers, get_consumers."""
from __future__ import annotations

from sched_check import THREE_BLOCKS, check, expect_error, kernel

import tdsl


def test_get_block_and_loops_outer_to_inner():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    b = sch.get_block("C")
    assert repr(b) == 'Block("C")'
    loops = sch.get_loops(b)
    assert repr(loops) == "[Loop(i), Loop(j), Loop(k)]"
    assert sch.func is f  # lookups change nothing
    check(sch, f)


def test_get_loops_after_split_and_in_second_nest():
    sch = tdsl.Schedule(kernel("elemwise"))
    assert [lp.name for lp in sch.get_loops(sch.get_block("C"))] == ["i_1", "j_1"]
    _i, j = sch.get_loops(sch.get_block("B"))
    sch.split(j, factors=[None, 5])
    assert [lp.name for lp in sch.get_loops(sch.get_block("B"))] == ["i", "j_0", "j_1_1"]  # j_1 is C's loop


def test_get_block_unknown_name_suggests():
    sch = tdsl.Schedule(kernel(THREE_BLOCKS))
    msg = expect_error(sch, lambda: sch.get_block("EE"), 'name: EE', '"C"', '"E"', '"D"', 'did you mean "E"')
    assert "mlp" in msg


def test_get_block_refuses_non_string():
    sch = tdsl.Schedule(kernel("matmul"))
    expect_error(sch, lambda: sch.get_block(3), "block name")


def test_get_loops_refuses_loop_handle():
    sch = tdsl.Schedule(kernel("matmul"))
    i, _, _ = sch.get_loops(sch.get_block("C"))
    expect_error(sch, lambda: sch.get_loops(i), "Loop(i)", "block handle")


def test_get_child_blocks_of_root_and_loop():
    sch = tdsl.Schedule(kernel(THREE_BLOCKS))
    root = sch.get_block("root")
    assert [b.name for b in sch.get_child_blocks(root)] == ["C", "E", "D"]
    i, _j = sch.get_loops(sch.get_block("E"))
    assert [b.name for b in sch.get_child_blocks(i)] == ["E"]
    assert sch.get_loops(root) == []


def test_get_child_blocks_of_a_loop_with_two_blocks():
    two = '''
@T.prim_func
def two(A: T.Buffer((8, 4), "float32"), B: T.Buffer((8, 4), "float32"), C: T.Buffer((8, 4), "float32")):
    for i in range(8):
        for j in range(4):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] + T.float32(1)
        for j in range(4):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = B[vi, vj] * T.float32(2)
'''
    f = kernel(two)
    sch = tdsl.Schedule(f)
    loops = sch.get_loops(sch.get_block("C"))
    assert [lp.name for lp in loops] == ["i", "j_1"]
    assert [b.name for b in sch.get_child_blocks(loops[0])] == ["B", "C"]
    assert [b.name for b in sch.get_producers(sch.get_block("C"))] == ["B"]
    assert [b.name for b in sch.get_consumers(sch.get_block("B"))] == ["C"]
    check(sch, f)


def test_producers_and_consumers():
    sch = tdsl.Schedule(kernel(THREE_BLOCKS))
    c, e, d = (sch.get_block(n) for n in "CED")
    assert sch.get_producers(c) == []
    assert [b.name for b in sch.get_producers(e)] == ["C"]
    assert [b.name for b in sch.get_producers(d)] == ["E"]
    assert [b.name for b in sch.get_consumers(c)] == ["E"]
    assert [b.name for b in sch.get_consumers(e)] == ["D"]
    assert sch.get_consumers(d) == []


def test_producers_of_dead_block_handle():
    sch = tdsl.Schedule(kernel("matmul"))
    i, j, _k = sch.get_loops(sch.get_block("C"))
    sch.fuse(i, j)
    b = sch.get_block("C")
    sch.undo()
    expect_error(sch, lambda: sch.get_producers(b), 'Block("C")', "undone")
