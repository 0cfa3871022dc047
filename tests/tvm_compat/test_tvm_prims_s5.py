"""Schedule primitives where TVM's tests (test_tir_schedule_compute_at.py, _cache_read_write.py,
_transform_layout.py, _reorder.py, _reduction.py) accept a legal step or refuse an illegal one,
and tdsl now does too; each accepted step is checked against the interpreter on the original."""
import numpy as np
from sched_check import check, expect_error

import tdsl
from tdsl import T

# decompose_reduction under an `if` ------------------------------------------------------------

@T.prim_func
def rowsum_under_if(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8,), "float32")) -> None:
    for i in range(8):
        for k in range(8):
            if i < 4:
                with T.block("B"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    with T.init():
                        B[vi] = 0.0
                    B[vi] = B[vi] + A[vi, vk]


@T.prim_func
def rowsum_under_if_on_k(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8,), "float32")) -> None:
    for i in range(8):
        for k in range(8):
            if k < 6:
                with T.block("B"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    with T.init():
                        B[vi] = 0.0
                    B[vi] = B[vi] + A[vi, vk]
            else:
                with T.block("C"):
                    vi, vk = T.axis.remap("SS", [i, k])
                    A[vi, vk] = A[vi, vk] * 2.0


@T.prim_func
def rowsum_from_the_third(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8,), "float32")) -> None:
    for i in range(8):
        for k in range(8):
            if k >= 2:
                with T.block("B"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    with T.init():
                        B[vi] = 0.0
                    B[vi] = B[vi] + A[vi, vk]


def test_decompose_reduction_carries_an_if_into_the_init():
    # the init used to run for all 8 rows, overwriting B[4:8], which the original never touches
    for at in (0, 1):
        sch = tdsl.Schedule(rowsum_under_if)
        sch.decompose_reduction("B", sch.get_loops("B")[at])
        init = sch.func.script().split('"B_init"')[1].split('"B"')[0]
        assert "T.where(" in init and "< 4" in init, init
        check(sch, rowsum_under_if)


def test_decompose_reduction_drops_an_if_that_holds_at_the_first_iteration():
    for at in (0, 1):
        sch = tdsl.Schedule(rowsum_under_if_on_k)
        sch.decompose_reduction("B", sch.get_loops("B")[at])
        check(sch, rowsum_under_if_on_k)


def test_decompose_reduction_refuses_an_if_that_skips_the_first_iteration():
    # the original's T.init never runs (k = 0 is skipped); a separate init block would
    sch = tdsl.Schedule(rowsum_from_the_third)
    i, _ = sch.get_loops("B")
    expect_error(sch, lambda: sch.decompose_reduction("B", i), "B", "k >= 2")


# compute_at of a block holding blocks (test_compute_at_blockized_2) ----------------------------

BLOCKIZED = '''
@T.prim_func
def blockized(A: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")) -> None:
    B = T.alloc_buffer([64, 64], "float32")
    for i_o, j_o in T.grid(8, 8):
        with T.block("B_outer"):
            vio, vjo = T.axis.remap("SS", [i_o, j_o])
            T.reads([A[vio * 8 : vio * 8 + 8, vjo * 8 : vjo * 8 + 8]])
            T.writes([B[vio * 8 : vio * 8 + ROWS, vjo * 8 : vjo * 8 + 8]])
            for i_i, j_i in T.grid(8, 8):
                with T.block("B_inner"):
                    vi = T.axis.S(64, vio * 8 + i_i)
                    vj = T.axis.S(64, INNER_J)
                    B[vi, vj] = A[vi, vj] * 2.0
    for i_o, j_o, i_i, j_i in T.grid(4, 4, 16, 16):
        with T.block("C"):
            vi = T.axis.S(64, i_o * 16 + i_i)
            vj = T.axis.S(64, j_o * 16 + j_i)
            C[vi, vj] = B[vi, vj] + 1.0
'''


def _blockized(rows: str = "8", inner_j: str = "vjo * 8 + j_i") -> tdsl.PrimFunc:
    return tdsl.parse(BLOCKIZED.replace("ROWS", rows).replace("INNER_J", inner_j))


def test_compute_at_of_a_blockized_producer():
    # the outer block's T.writes tiles say which instances the consumer's 16 x 16 tile needs: 2 x 2
    original = _blockized()
    sch = tdsl.Schedule(original)
    sch.compute_at("B_outer", sch.get_loops("C")[1])
    text = sch.func.script()
    assert "T.grid(2, 2)" in text and "vio = T.axis.spatial(8, i_o_1 * 2 + ax0)" in text, text
    check(sch, original)


def test_compute_at_of_a_blockized_producer_refusals():
    # T.writes narrower than what the inner block writes (rows 4..7 of each tile are missing)
    sch = tdsl.Schedule(_blockized(rows="4"))
    loop = sch.get_loops("C")[1]
    expect_error(sch, lambda: sch.compute_at("B_outer", loop), "B_inner", "B_outer", "T.writes")
    # an inner block bound through the outer loop j_o rather than the outer block's iterator
    sch = tdsl.Schedule(_blockized(inner_j="j_o * 8 + j_i"))
    loop = sch.get_loops("C")[1]
    expect_error(sch, lambda: sch.compute_at("B_outer", loop), "B_outer", "j_o")


# reverse_compute_at over a fused loop of symbolic size (test_shape_var_as_bound) ---------------

@T.prim_func
def rf_then_sum(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, "n", 8), "float32"),
                C: T.Buffer((4, "n"), "float32")) -> None:
    C_rf = T.alloc_buffer((8, 4, n))
    for f, r in T.grid(n * 4, 8):
        with T.block("rf"):
            vr = T.axis.spatial(8, r)
            v0 = T.axis.spatial(4, f // n)
            v1 = T.axis.spatial(n, f % n)
            C_rf[vr, v0, v1] = A[v0, vr] * B[v0, v1, vr]
    for f, r in T.grid(n * 4, 8):
        with T.block("sum"):
            vr = T.axis.reduce(8, r)
            v0 = T.axis.spatial(4, f // n)
            v1 = T.axis.spatial(n, f % n)
            with T.init():
                C[v0, v1] = 0.0
            C[v0, v1] = C[v0, v1] + C_rf[vr, v0, v1]


def test_reverse_compute_at_under_a_fused_loop_of_symbolic_size():
    sch = tdsl.Schedule(rf_then_sum)
    sch.reverse_compute_at("sum", sch.get_loops("rf")[0])
    text = sch.func.script()
    # one (v0, v1) per iteration of the fused loop, no guard: f // n < 4 since f < 4 * n
    assert "T.where" not in text and "v0_1 = T.axis.spatial(4, f // n)" in text, text
    for n in (1, 3):
        check(sch, rf_then_sum, dims={"n": n})


def test_a_digit_of_a_symbolic_size_that_leaves_its_domain_is_refused():
    # f runs over 5 * n, so f // n reaches 4, outside v0's domain of 4
    wrong = tdsl.parse(rf_then_sum.script().replace("T.grid(n * 4, 8)", "T.grid(n * 5, 8)"))
    sch = tdsl.Schedule(wrong)
    loop = sch.get_loops("rf")[0]
    expect_error(sch, lambda: sch.reverse_compute_at("sum", loop), "sum", "// n", "leaves its domain")
