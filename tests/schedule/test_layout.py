"""Layout primitives: transform_layout, storage_align.
Legal cases: `check` (round trip + same results); refusals: `expect_error`."""
from __future__ import annotations

import pytest
from dataflow_helpers import CHAIN, SYMBOLIC_CHAIN, parse, run_docstring_example
from sched_check import check, expect_error, kernel

import tdsl

CUBE = '''
@T.prim_func
def cube(A: T.Buffer((4, 6, 8), "float32"), C: T.Buffer((4, 6, 8), "float32")):
    B = T.alloc_buffer((4, 6, 8), "float32", scope="shared")
    for i, j, k in T.grid(4, 6, 8):
        with T.block("B"):
            vi, vj, vk = T.axis.remap("SSS", [i, j, k])
            B[vi, vj, vk] = A[vi, vj, vk] + T.float32(1)
    for i, j, k in T.grid(4, 6, 8):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSS", [i, j, k])
            C[vi, vj, vk] = B[vi, vj, vk] * T.float32(2)
'''


def _buf(sch: tdsl.Schedule, name: str):
    return next(b for b in sch.func.root_block.alloc_buffers if b.name == name)


def _ints(exprs) -> list[int]:
    return [int(e.value) for e in exprs]


# transform_layout ----------------------------------------------------------------------------

def test_transform_layout_tiles_a_dimension():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    sch.transform_layout(sch.get_block("B"), "B", lambda i, j: (i // 4, j, i % 4))
    assert _ints(_buf(sch, "B").shape) == [4, 8, 4]
    check(sch, f)


def test_transform_layout_with_padding():
    # 16 rows in tiles of 6: the last tile is partly padding nobody reads
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    sch.transform_layout(sch.get_block("C"), "C", lambda i, j: (i // 6, j, i % 6))
    assert _ints(_buf(sch, "C").shape) == [3, 8, 6]
    check(sch, f)


def test_transform_layout_symbolic_permutation():
    f = parse(SYMBOLIC_CHAIN)
    sch = tdsl.Schedule(f)
    sch.transform_layout(sch.get_block("C"), 0, lambda i, j: (j, i))  # C reads B first
    check(sch, f, dims={"n": 5})


def test_transform_layout_packs_a_cache_read_and_prints_in_trace():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    bp = sch.cache_read(c, "B", "global")
    sch.transform_layout(bp, "B_global", lambda k, j: (j // 4, k, j % 4))
    assert "lambda k, j: (j // 4, k, j % 4)" in str(sch.trace)
    check(sch, f)
    replay = sch.trace.apply_to(f)
    assert tdsl.structural_equal(replay.func, sch.func)


def test_transform_layout_refusals():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    expect_error(sch, lambda: sch.transform_layout(b, "A", lambda i, j: (i, j // 3, j % 3), pad_value=0.0),
                 "A", "input parameter", "cache_read")
    expect_error(sch, lambda: sch.transform_layout(b, "B", lambda i, j: (i // 2, j)), "B", "same place")
    expect_error(sch, lambda: sch.transform_layout(b, "B", lambda i, j: (i - 1, j)), "i - 1", "negative")
    expect_error(sch, lambda: sch.transform_layout(b, "B", lambda i: (i,)), "B", "2 dimensions")
    g = parse(SYMBOLIC_CHAIN)
    sch = tdsl.Schedule(g)
    b = sch.get_block("B")
    expect_error(sch, lambda: sch.transform_layout(b, "B", lambda i, j: (i * 8 + j,)), "B", "symbolic")


# storage_align -------------------------------------------------------------------------------

def test_storage_align_two_dims():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    sch.storage_align(sch.get_block("B"), "B", 0, 16, 4)
    assert _ints(_buf(sch, "B").strides) == [20, 1]
    check(sch, f)


def test_storage_align_middle_axis_of_3d_shared():
    f = parse(CUBE)
    sch = tdsl.Schedule(f)
    sch.storage_align(sch.get_block("C"), "B", 1, 32, 4)
    assert _ints(_buf(sch, "B").strides) == [216, 36, 1]  # 8 -> 36 = 32 + 4; 36 * 6
    check(sch, f)


def test_storage_align_twice_keeps_both():
    f = parse(CUBE)
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    sch.storage_align(b, "B", 0, 64, 1)
    sch.storage_align(b, "B", 1, 16, 2)
    assert _ints(_buf(sch, "B").strides) == [129, 18, 1]  # 18 % 16 == 2; 18 * 6 = 108 -> 129 % 64 == 1
    check(sch, f)


def test_storage_align_refusals():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    expect_error(sch, lambda: sch.storage_align(b, "A", 0, 16, 1), "A", "parameter")
    expect_error(sch, lambda: sch.storage_align(b, "B", 1, 16, 1), "B", "innermost")
    expect_error(sch, lambda: sch.storage_align(b, "B", 0, 8, 8), "offset 8", "factor 8")
    expect_error(sch, lambda: sch.storage_align(b, "B", 5, 8, 1), "axis 5", "B")


@pytest.mark.parametrize("name", ["transform_layout", "storage_align"])
def test_docstring_example(name):
    run_docstring_example(name)
