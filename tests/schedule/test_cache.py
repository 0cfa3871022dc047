"""Caching primitives: cache_read, cache_write, set_scope.

Legal cases go through `check` (round trip + same results as the unscheduled kernel); refused
ones through `expect_error` (ScheduleError naming the user's things, schedule untouched).
"""
from __future__ import annotations

import pytest
from dataflow_helpers import CHAIN, SYMBOLIC_CHAIN, loops, parse, run_docstring_example
from sched_check import check, expect_error, kernel

import tdsl


def _alloc(sch: tdsl.Schedule, name: str):
    return next(b for b in sch.func.root_block.alloc_buffers if b.name == name)


# cache_read ----------------------------------------------------------------------------------

def test_cache_read_parameter_by_name():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    a_shared = sch.cache_read(sch.get_block("C"), "A", "shared")
    assert a_shared.name == "A_shared"
    assert _alloc(sch, "A_shared").scope == "shared"
    assert "A_shared[vi, vk]" in sch.func.script()
    assert sch.get_consumers(a_shared)[0].name == "C"
    check(sch, f)


def test_cache_read_by_index_and_twice_gives_unique_names():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    b1 = sch.cache_read(c, 2, "local")  # reads are C, A, B
    assert b1.name == "B_local"
    b2 = sch.cache_read(c, "B_local", "local")
    assert b2.name == "B_local_local"
    check(sch, f)


def test_cache_read_intermediate_after_split_copies_the_read_part():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    i, _j = loops(sch, "C")
    sch.split(i, factors=[None, 4])
    cr = sch.cache_read(sch.get_block("C"), "B", "local")
    # the copy sits between the producer and the consumer
    text = sch.func.script()
    assert text.index('T.block("B")') < text.index('T.block("B_local")') < text.index('T.block("C")')
    assert cr.name == "B_local"
    check(sch, f)


def test_cache_read_symbolic_then_compute_at():
    f = parse(SYMBOLIC_CHAIN)
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    cr = sch.cache_read(c, "B", "local")
    i, _ = sch.get_loops(c)
    sch.compute_at(cr, i)
    check(sch, f, dims={"n": 5})


def test_cache_read_refusals():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.cache_read(c, "C", "shared"), 'block "C"', "C", "cache_write")
    expect_error(sch, lambda: sch.cache_read(c, "Q", "shared"), 'block "C"', "Q")
    expect_error(sch, lambda: sch.cache_read(c, 7, "shared"), 'block "C"', "7")
    expect_error(sch, lambda: sch.cache_read(c, "A", "shraed"), "shraed", "shared")


# cache_write ---------------------------------------------------------------------------------

def test_cache_write_reduction_output():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    cw = sch.cache_write(c, 0, "local")
    assert cw.name == "C_local"
    assert sch.get_producers(cw)[0].name == "C"
    check(sch, f)


def test_cache_write_intermediate_then_reverse_compute_at():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    cw = sch.cache_write(b, "B", "local")
    i, _ = sch.get_loops(b)
    sch.reverse_compute_at(cw, i)
    check(sch, f)


def test_cache_write_elementwise_symbolic():
    f = parse(SYMBOLIC_CHAIN)
    sch = tdsl.Schedule(f)
    sch.cache_write(sch.get_block("C"), "C", "local")
    check(sch, f, dims={"n": 3})


def test_cache_write_refusals():
    accumulate = parse('''
@T.prim_func
def acc(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            C[vi] = C[vi] + A[vi]
''')
    sch = tdsl.Schedule(accumulate)
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.cache_write(c, "C", "local"), 'block "C"', "T.init")
    strided = parse('''
@T.prim_func
def strided(A: T.Buffer((8,), "float32"), C: T.Buffer((16,), "float32")):
    for i in range(8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            C[vi * 2] = A[vi]
''')
    sch = tdsl.Schedule(strided)
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.cache_write(c, "C", "local"), 'block "C"', "C")
    sch = tdsl.Schedule(kernel("matmul"))
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.cache_write(c, "A", "local"), 'block "C"', "A")


def test_cache_write_and_read_after_compute_at_work_per_shared_iteration():
    # the order of compute_at and caching does not matter: the copies run once per iteration of
    # the loops the block shares with others
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    i, _ = sch.get_loops(b)
    sch.reverse_compute_at(sch.get_block("C"), i)
    cw = sch.cache_write(b, "B", "local")
    assert next(lp.name for lp in sch.get_loops(cw)) == i.name
    cr = sch.cache_read(sch.get_block("C"), "B", "shared")
    assert next(lp.name for lp in sch.get_loops(cr)) == i.name
    check(sch, f)
    g = kernel("matmul")
    sch = tdsl.Schedule(g)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.reorder(k, i, j)  # the reduction loop is outermost: each k copies partial sums back
    _k0, _k1 = sch.split(k, factors=[None, 4])
    sch.cache_write(c, "C", "local")
    sch.cache_read(c, "A", "local")
    check(sch, g)


# set_scope -----------------------------------------------------------------------------------

@pytest.mark.parametrize("scope", ["shared", "local", "wmma.accumulator"])
def test_set_scope_intermediate(scope):
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    sch.set_scope(sch.get_block("C"), "C", scope)
    assert _alloc(sch, "C").scope == scope
    check(sch, f)


def test_set_scope_by_index_of_cache():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    sch.cache_write(c, 0, "shared")
    sch.set_scope(c, 0, "local")  # an index counts the block's writes, as in TVM: C_shared
    assert _alloc(sch, "C_shared").scope == "local"
    sch.cache_read(c, "A", "shared")
    sch.set_scope(c, "A_shared", "local")  # a name may be any buffer the block accesses
    assert _alloc(sch, "A_shared").scope == "local"
    check(sch, f)


def test_set_scope_refusals():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    expect_error(sch, lambda: sch.set_scope(b, "A", "shared"), "A", "parameter", "cache_read")
    expect_error(sch, lambda: sch.set_scope(b, "B", "register"), "register")
    expect_error(sch, lambda: sch.set_scope(b, "Z", "shared"), 'block "B"', "Z")


# docstrings ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["cache_read", "cache_write", "set_scope"])
def test_docstring_example(name):
    run_docstring_example(name)


# cache_write of a blockized tile under thread loops (TVM's mma schedule) -----------------------

TILED_GEMM = '''
@T.prim_func
def gemm(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    for i, j, k in T.grid(64, 64, 64):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''


def _blockized_under_threads(n_tiles_j=4):
    f = parse(TILED_GEMM)
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i, ii = sch.split(i, factors=[None, 16])
    j, ji = sch.split(j, factors=[None, 16])
    k, ki = sch.split(k, factors=[None, 16])
    sch.reorder(i, j, k, ii, ji, ki)
    outer = sch.blockize(ii)
    i0, i1 = sch.split(i, factors=[2, 2])
    j0, j1 = sch.split(j, factors=[2, 2])
    sch.reorder(i0, j0, k, i1, j1)
    t = sch.fuse(i0, j0)
    sch.bind(t, "threadIdx.y")
    return f, sch, outer, t


def test_cache_write_of_a_blockized_tile_whose_bindings_use_a_thread_loop():
    # each instance of the 16 x 16 tile block fills its tile (run once: stores affine in the
    # iterators), and the thread's instances are as many as the tiles: the copy back is whole
    f, sch, outer, t = _blockized_under_threads()
    cw = sch.cache_write(outer, 0, "local")
    sch.reverse_compute_at(cw, t)
    check(sch, f)


def test_cache_write_of_a_blockized_tile_with_a_predicate_inside_is_refused():
    f = parse(TILED_GEMM.replace("            with T.init():", "            T.where(i < 60)\n            with T.init():"))
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i, ii = sch.split(i, factors=[None, 16])
    sch.reorder(i, j, k, ii)
    outer = sch.blockize(ii)
    expect_error(sch, lambda: sch.cache_write(outer, 0, "local"), "holds other blocks", "every element")
