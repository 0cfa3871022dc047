"""Loop primitives: split, fuse, reorder, parallel, vectorize, unroll, bind, annotate.

Every legal case goes through `check` (round trip + same results as the unscheduled kernel);
every illegal case through `expect_error` (ScheduleError naming the user's loops and blocks,
schedule untouched). The docstring examples of the facade are executed at the end.
"""
from __future__ import annotations

import inspect
import re
import textwrap

import pytest
from sched_check import ELEMWISE2, MATMUL, SYMBOLIC, check, expect_error, kernel

import tdsl
from tdsl import T


def loops_of(sch: tdsl.Schedule, block: str):
    return sch.get_loops(sch.get_block(block))


# split -------------------------------------------------------------------------------------

def test_split_dividing():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    i, _j, _k = loops_of(sch, "C")
    i0, i1 = sch.split(i, factors=[None, 4])
    assert (i0.name, i1.name) == ("i_0", "i_1")
    assert "T.where" not in sch.func.script()
    assert [lp.name for lp in loops_of(sch, "C")] == ["i_0", "i_1", "j", "k"]
    check(sch, f)


def test_split_non_dividing_reduction_adds_predicate():
    f = kernel("rowsum")
    sch = tdsl.Schedule(f)
    _i, k = loops_of(sch, "B")
    sch.split(k, factors=[None, 6])
    assert "T.where(k_0 * 6 + k_1 < 20)" in sch.func.script()
    check(sch, f)


def test_split_three_factors_inferred_middle():
    f = kernel("elemwise")
    sch = tdsl.Schedule(f)
    _i, j = loops_of(sch, "C")
    parts = sch.split(j, factors=[2, None, 3])
    assert [p.name for p in parts] == ["j_1_0", "j_1_1", "j_1_2"]  # C's j prints as j_1
    assert "T.grid(12, 2, 2, 3)" in sch.func.script()
    check(sch, f)


@pytest.mark.parametrize("n", [8, 13])
def test_split_symbolic_extent_uses_ceildiv(n):
    f = kernel(SYMBOLIC)
    sch = tdsl.Schedule(f)
    i, _j = loops_of(sch, "B")
    sch.split(i, factors=[None, 4])
    text = sch.func.script()
    assert "(n + 3) // 4" in text and "T.where" in text
    check(sch, f, dims={"n": n})


def test_split_by_symbolic_factor():
    f = kernel(SYMBOLIC)
    n = f.params[0].shape[0]  # the symbolic dimension
    sch = tdsl.Schedule(f)
    i, _j = loops_of(sch, "B")
    sch.split(i, factors=[1, n])
    check(sch, f, dims={"n": 5})


def test_split_refuses_wrong_product():
    sch = tdsl.Schedule(kernel("matmul"))
    i, _j, _k = loops_of(sch, "C")
    msg = expect_error(sch, lambda: sch.split(i, factors=[3, 4]), "loop i", "16", "factors=[None, 4]")
    assert ">>" in msg and "T.grid" in msg


def test_split_refuses_bad_factors():
    sch = tdsl.Schedule(kernel("matmul"))
    _i, j, _k = loops_of(sch, "C")
    expect_error(sch, lambda: sch.split(j, factors=[None, None]), "loop j", "None")
    expect_error(sch, lambda: sch.split(j, factors=[0, 16]), "loop j", "positive")
    expect_error(sch, lambda: sch.split(j, factors=["4", 4]), "loop j")
    expect_error(sch, lambda: sch.split(j, factors=[16]), "loop j", "2 factors")
    block = sch.get_block("C")
    expect_error(sch, lambda: sch.split(block, factors=[None, 4]), 'Block("C")')


# fuse --------------------------------------------------------------------------------------

def test_fuse_two_loops():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    i, j, _k = loops_of(sch, "C")
    fused = sch.fuse(i, j)
    assert fused.name == "i_j_fused"
    assert "i_j_fused // 16" in sch.func.script() and "i_j_fused % 16" in sch.func.script()
    check(sch, f)


def test_fuse_three_loops_then_split():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    fused = sch.fuse(*loops_of(sch, "C"))
    assert fused.name == "i_j_k_fused"
    sch.split(fused, factors=[None, 100])
    check(sch, f)


def test_fuse_spatial_and_reduction_loops():
    f = kernel("rowsum")
    sch = tdsl.Schedule(f)
    sch.fuse(*loops_of(sch, "B"))
    check(sch, f)


def test_fuse_one_block_of_two():
    f = kernel("elemwise")
    sch = tdsl.Schedule(f)
    sch.fuse(*loops_of(sch, "B"))
    assert [lp.name for lp in loops_of(sch, "C")] == ["i_1", "j_1"]
    check(sch, f)


def test_fuse_refuses_non_adjacent_and_wrong_order():
    sch = tdsl.Schedule(kernel("matmul"))
    i, j, k = loops_of(sch, "C")
    expect_error(sch, lambda: sch.fuse(i, k), "loop i", "loop k", "perfectly nested")
    expect_error(sch, lambda: sch.fuse(j, i), "loop j", "loop i")
    expect_error(sch, lambda: sch.fuse(i), "at least 2")


def test_fuse_refuses_loops_of_two_nests():
    sch = tdsl.Schedule(kernel("elemwise"))
    bi, _ = loops_of(sch, "B")
    _, cj = loops_of(sch, "C")
    expect_error(sch, lambda: sch.fuse(bi, cj), f"loop {bi.name}", f"loop {cj.name}")


# reorder -----------------------------------------------------------------------------------

def test_reorder_keeps_unnamed_loops_in_place():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    i, _j, k = loops_of(sch, "C")
    sch.reorder(k, i)
    assert [lp.name for lp in loops_of(sch, "C")] == ["k", "j", "i"]
    check(sch, f)


def test_reorder_after_split():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    i, j, k = loops_of(sch, "C")
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 8])
    sch.reorder(i0, j0, k, i1, j1)
    assert [lp.name for lp in loops_of(sch, "C")] == ["i_0", "j_0", "k", "i_1", "j_1"]
    check(sch, f)


def test_reorder_reduction_outside():
    f = kernel("rowsum")
    sch = tdsl.Schedule(f)
    i, k = loops_of(sch, "B")
    k0, k1 = sch.split(k, factors=[None, 8])
    sch.reorder(k1, i, k0)
    check(sch, f)


def test_reorder_refuses_loops_of_two_nests_and_duplicates():
    sch = tdsl.Schedule(kernel("elemwise"))
    bi, bj = loops_of(sch, "B")
    ci, _ = loops_of(sch, "C")
    expect_error(sch, lambda: sch.reorder(bj, ci), f"loop {ci.name}", f"loop {bj.name}")
    expect_error(sch, lambda: sch.reorder(bj, bi, bj), f"loop {bj.name}", "twice")


IMPERFECT = '''
@T.prim_func
def two(A: T.Buffer((8, 4), "float32"), B: T.Buffer((8, 4), "float32"), C: T.Buffer((8, 4), "float32")):
    for i in range(8):
        for j in range(4):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] + T.float32(1)
        for j2 in range(4):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j2])
                C[vi, vj] = A[vi, vj] * T.float32(2)
'''


def test_reorder_refuses_imperfect_nest():
    sch = tdsl.Schedule(kernel(IMPERFECT))
    i, j = loops_of(sch, "B")
    expect_error(sch, lambda: sch.reorder(j, i), "loop i", "loop j", "perfect")
    expect_error(sch, lambda: sch.fuse(i, j), "loop i", "loop j")


def test_reorder_refuses_mixed_reduction_loops():
    sch = tdsl.Schedule(kernel("rowsum"))
    fused = sch.fuse(*loops_of(sch, "B"))
    a, b = sch.split(fused, factors=[None, 7])
    expect_error(sch, lambda: sch.reorder(b, a), "i_k_fused", 'block "B"', "T.init")


NONAFFINE = '''
@T.prim_func
def gather(A: T.Buffer((16,), "float32"), B: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            vj = T.axis.spatial(16, i * j % 16)
            B[vi, vj] = A[vi]
'''


def test_nonaffine_binding_is_refused():
    sch = tdsl.Schedule(kernel(NONAFFINE))
    i, j = loops_of(sch, "B")
    expect_error(sch, lambda: sch.reorder(j, i), 'block "B"', "vj", "affine")
    expect_error(sch, lambda: sch.parallel(i), 'block "B"', "loop i", "affine")
    expect_error(sch, lambda: sch.fuse(i, j), 'block "B"', "affine")


# parallel / vectorize / unroll / bind ------------------------------------------------------

@pytest.mark.parametrize("name,block,index", [("matmul", "C", 0), ("matmul", "C", 1), ("elemwise", "C", 0),
                                              ("rowsum", "B", 0)])
def test_parallel_spatial_loop(name, block, index):
    f = kernel(name)
    sch = tdsl.Schedule(f)
    sch.parallel(loops_of(sch, block)[index])
    assert "T.parallel(" in sch.func.script()
    check(sch, f)


def test_parallel_refuses_reduction_loop():
    sch = tdsl.Schedule(kernel("matmul"))
    _i, _j, k = loops_of(sch, "C")
    msg = expect_error(sch, lambda: sch.parallel(k), "loop k", 'block "C"', "vk", "rfactor")
    assert "    >> " in msg
    sch2 = tdsl.Schedule(kernel("rowsum"))
    fused = sch2.fuse(*loops_of(sch2, "B"))
    expect_error(sch2, lambda: sch2.parallel(fused), "loop i_k_fused", 'block "B"')


@pytest.mark.parametrize("name,block,index", [("matmul", "C", 1), ("elemwise", "B", 1), ("elemwise", "C", 1)])
def test_vectorize_inner_loop(name, block, index):
    f = kernel(name)
    sch = tdsl.Schedule(f)
    sch.vectorize(loops_of(sch, block)[index])
    assert "T.vectorized(" in sch.func.script()
    check(sch, f)


def test_vectorize_after_split():
    f = kernel("rowsum")
    sch = tdsl.Schedule(f)
    i, _k = loops_of(sch, "B")
    _i0, i1 = sch.split(i, factors=[None, 4])
    sch.vectorize(i1)
    check(sch, f)


def test_vectorize_refuses_reduction_loop():
    sch = tdsl.Schedule(kernel("rowsum"))
    _i, k = loops_of(sch, "B")
    expect_error(sch, lambda: sch.vectorize(k), "loop k", 'block "B"', "vectorized")
    _k0, k1 = sch.split(k, factors=[None, 4])
    expect_error(sch, lambda: sch.vectorize(k1), "loop k_1", 'block "B"')


@pytest.mark.parametrize("name,block,index", [("matmul", "C", 2), ("elemwise", "C", 0), ("rowsum", "B", 1)])
def test_unroll_any_loop(name, block, index):
    f = kernel(name)
    sch = tdsl.Schedule(f)
    sch.unroll(loops_of(sch, block)[index])
    assert "T.unroll(" in sch.func.script()
    check(sch, f)


def test_unroll_refuses_dead_and_wrong_handles():
    sch = tdsl.Schedule(kernel("matmul"))
    i, j, _k = loops_of(sch, "C")
    sch.fuse(i, j)
    expect_error(sch, lambda: sch.unroll(i), "loop i", "no longer exists")
    block = sch.get_block("C")
    expect_error(sch, lambda: sch.unroll(block), 'Block("C")', "loop handle")


def test_bind_gpu_style():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    i, j, _k = loops_of(sch, "C")
    fused = sch.fuse(i, j)
    bx, tx = sch.split(fused, factors=[None, 32])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    text = sch.func.script()
    assert 'thread="blockIdx.x"' in text and 'thread="threadIdx.x"' in text
    check(sch, f)


def test_bind_two_dims():
    f = kernel("elemwise")
    sch = tdsl.Schedule(f)
    i, j = loops_of(sch, "C")
    sch.bind(i, "blockIdx.y")
    sch.bind(j, "threadIdx.y")
    check(sch, f)


def test_bind_vthread():
    f = kernel("rowsum")
    sch = tdsl.Schedule(f)
    i, _k = loops_of(sch, "B")
    i0, i1 = sch.split(i, factors=[3, 3])
    sch.bind(i0, "vthread.x")
    sch.bind(i1, "threadIdx.x")
    check(sch, f)


def test_bind_refuses_unknown_axis_reduction_and_rebinding():
    sch = tdsl.Schedule(kernel("matmul"))
    i, j, k = loops_of(sch, "C")
    expect_error(sch, lambda: sch.bind(i, "threadIdx.w"), "loop i", "threadIdx.w", "did you mean")
    # a reduction loop on blockIdx is refused (blocks cannot reduce together); on threadIdx it is a
    # cross-thread reduction (test_bind_reduction_loop_to_threads_is_a_cross_thread_reduction)
    expect_error(sch, lambda: sch.bind(k, "blockIdx.x"), "loop k", 'block "C"')
    sch.bind(i, "threadIdx.x")
    expect_error(sch, lambda: sch.bind(j, "threadIdx.x"), "loop i", "loop j", "threadIdx.x")


def test_binding_a_bound_loop_again_is_refused_naming_its_binding():
    """Issue 28: a second bind replaced the first one silently."""
    sch = tdsl.Schedule(kernel("elemwise"))
    i, j = loops_of(sch, "C")
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    expect_error(sch, lambda: sch.bind(j, "threadIdx.y"), "loop j", "already bound to 'threadIdx.x'", "threadIdx.y")
    expect_error(sch, lambda: sch.bind(i, "blockIdx.x"), "loop i", "already bound to 'blockIdx.x'")


def test_bind_reduction_loop_to_threads_is_a_cross_thread_reduction():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    _, _, k = loops_of(sch, "C")
    sch.bind(k, "threadIdx.x")   # TVM semantics: the threads of k reduce together
    assert sch.func.script().count('thread="threadIdx.x"') == 1
    check(sch, f)


# annotate ----------------------------------------------------------------------------------

def test_annotate_block_and_loop():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    sch.annotate(b, "meta", "tile")
    sch.annotate(i, "pragma_unroll", 4)
    sch.annotate(j, "flag", True)
    sch.annotate(k, "ratio", 0.5)
    text = sch.func.script()
    assert re.search(r"T.block_attr\(\{.meta.: .tile.\}\)", text) and re.search(r".pragma_unroll.: 4", text)
    check(sch, f)


def test_annotate_replaces_and_unannotate_removes():
    f = kernel("elemwise")
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    sch.annotate(b, "k", 1)
    sch.annotate(b, "k", 2)
    realize_block = sch.func.script()
    assert re.search(r".k.: 2", realize_block) and not re.search(r".k.: 1", realize_block)
    sch.unannotate(b, "k")
    assert tdsl.structural_equal(sch.func, f)
    check(sch, f)


def test_annotate_then_unannotate_loop():
    f = kernel("rowsum")
    sch = tdsl.Schedule(f)
    _i, k = loops_of(sch, "B")
    sch.annotate(k, "x", "y")
    check(sch, f)
    sch.unannotate(k, "x")
    assert tdsl.structural_equal(sch.func, f)


def test_annotate_refuses_bad_values_and_missing_keys():
    sch = tdsl.Schedule(kernel("matmul"))
    b = sch.get_block("C")
    i, _, _ = sch.get_loops(b)
    expect_error(sch, lambda: sch.annotate(b, "tiles", {1, 2}), 'block "C"', "set")  # lists are values (TVM)
    expect_error(sch, lambda: sch.unannotate(i, "nothing"), "loop i", "nothing")


# docstring examples ------------------------------------------------------------------------

DOCUMENTED = ["split", "fuse", "reorder", "parallel", "vectorize", "unroll", "bind", "annotate", "unannotate"]


def _section(doc: str, title: str) -> str:
    m = re.search(rf"^\s*{title}::\n\n(.*?)(?=^\s*\w+::\n|\Z)", doc, re.DOTALL | re.MULTILINE)
    assert m, f"no {title}:: section"
    return textwrap.dedent(m.group(1)).strip() + "\n"


@pytest.mark.parametrize("name", DOCUMENTED)
def test_docstring_example(name):
    doc = inspect.getdoc(getattr(tdsl.Schedule, name))
    before = tdsl.parse(_section(doc, "Before"))
    after = tdsl.parse(_section(doc, "After"))
    scope = {"tdsl": tdsl, "T": T, "before": before}
    exec(_section(doc, "Call"), scope)
    sch = scope["sch"]
    assert tdsl.structural_diff(sch.func, after) is None, tdsl.structural_diff(sch.func, after)
    check(sch, before)


def test_every_transforming_primitive_is_documented():
    for name in DOCUMENTED:
        doc = getattr(tdsl.Schedule, name).__doc__
        assert "Before::" in doc and "Call::" in doc and "After::" in doc, name


def test_kernels_parse():
    for text in (MATMUL, ELEMWISE2, SYMBOLIC):
        assert tdsl.parse(text).script()


# dependences carried by a loop -------------------------------------------------------------

SCAN = '''
@T.prim_func
def scan(A: T.Buffer((20,), "float32"), B: T.Buffer((20,), "float32")):
    for i in range(20):
        with T.block("scan"):
            vi = T.axis.spatial(20, i)
            if vi == 0:
                B[vi] = A[vi]
            else:
                B[vi] = B[vi - 1] + A[vi]
'''


def test_scan_loop_carries_a_dependence():
    f = kernel(SCAN)
    sch = tdsl.Schedule(f)
    (i,) = loops_of(sch, "scan")
    expect_error(sch, lambda: sch.parallel(i), "loop i", 'block "scan"', "dependence")
    expect_error(sch, lambda: sch.vectorize(i), "loop i", "B")
    expect_error(sch, lambda: sch.bind(i, "threadIdx.x"), "loop i")
    _, i1 = sch.split(i, factors=[None, 8])
    sch.unroll(i1)  # order-preserving steps stay legal
    check(sch, f)


SHARED_NEST = '''
@T.prim_func
def shared(A: T.Buffer((8, 4), "float32"), C: T.Buffer((8, 4), "float32"), D: T.Buffer((8, 4), "float32")):
    B = T.alloc_buffer((8, 4), "float32")
    for i, j in T.grid(8, 4):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] + T.float32(1)
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] * T.float32(2)
        with T.block("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = B[vi, 3 - vj]
'''


def test_blocks_sharing_a_nest():
    f = kernel(SHARED_NEST)
    sch = tdsl.Schedule(f)
    i, j = loops_of(sch, "C")
    assert [b.name for b in sch.get_child_blocks(j)] == ["B", "C", "D"]
    expect_error(sch, lambda: sch.reorder(j, i), 'block "B"', 'block "D"', "reorder")
    expect_error(sch, lambda: sch.parallel(j), 'block "B"', 'block "D"', "loop j")
    sch.parallel(i)  # each i touches its own rows of B
    sch.split(j, factors=[2, 2])
    check(sch, f)


NESTED = '''
@T.prim_func
def nest(A: T.Buffer((6, 8), "float32"), B: T.Buffer((6, 8), "float32")):
    for i in range(6):
        with T.block("outer"):
            vi = T.axis.spatial(6, i)
            for j in range(8):
                with T.block("inner"):
                    vj = T.axis.spatial(8, j)
                    B[vi, vj] = A[vi, vj] + T.float32(1)
'''


def test_nested_blocks_scope_loops():
    f = kernel(NESTED)
    sch = tdsl.Schedule(f)
    (j,) = loops_of(sch, "inner")
    (i,) = loops_of(sch, "outer")
    assert [b.name for b in sch.get_child_blocks(sch.get_block("outer"))] == ["inner"]
    expect_error(sch, lambda: sch.reorder(j, i), "loop j", "loop i", 'block "outer"', "past a block")
    expect_error(sch, lambda: sch.fuse(i, j), "loop i", "loop j")
    sch.parallel(i)
    sch.split(j, factors=[None, 3])
    sch.vectorize(loops_of(sch, "inner")[1])
    check(sch, f)


OFFSET = '''
@T.prim_func
def offs(A: T.Buffer((12, 10), "float32"), B: T.Buffer((12, 10), "float32")):
    for i in range(2, 12):
        for j in range(3, 10):
            with T.block("B"):
                vi = T.axis.spatial(12, i)
                vj = T.axis.spatial(10, j)
                B[vi, vj] = A[vi, vj] + T.float32(1)
'''


def test_loops_that_do_not_start_at_zero():
    f = kernel(OFFSET)
    sch = tdsl.Schedule(f)
    i, _ = loops_of(sch, "B")
    sch.split(i, factors=[None, 4])
    assert "i_0 * 4 + i_1 + 2" in sch.func.script()
    check(sch, f)
    sch = tdsl.Schedule(f)
    fused = sch.fuse(*loops_of(sch, "B"))
    outer, _ = sch.split(fused, factors=[None, 8])
    sch.parallel(outer)
    assert "(i_j_fused_0 * 8 + i_j_fused_1) % 7 + 3" in sch.func.script()
    check(sch, f)


def test_error_message_layout():
    sch = tdsl.Schedule(kernel("matmul"))
    _, j, _ = loops_of(sch, "C")
    msg = expect_error(sch, lambda: sch.split(j, factors=[3, 4]))
    assert msg.splitlines()[:5] == [
        "split: factors [3, 4] multiply to 12, but loop j has extent 16",
        "  rule: without a None factor, the factors of a split must multiply to at least the loop's extent",
        ("  fix: write factors=[None, 4] to let tdsl infer the outer factor (a non-dividing split adds a T.where "
         "predicate)"),
        "    >> for i, j, k in T.grid(16, 16, 16):  # <-- j",
        '           with T.block("C"):',
    ]
