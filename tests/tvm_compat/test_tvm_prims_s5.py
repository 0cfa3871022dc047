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


# cache_read / cache_write inside a blockized matmul of symbolic size ---------------------------
# (test_symbolic_matmul_blocked_cache_read / _write)

@T.prim_func
def matmul_blocked(A: T.Buffer(("(n + 7) // 8 * 8", 4), "float32"), B: T.Buffer((4, "(n + 7) // 8 * 8"), "float32"),
                   C: T.Buffer(("(n + 7) // 8 * 8", "(n + 7) // 8 * 8"), "float32"), n: T.int32) -> None:
    for i0_0, i1_0 in T.grid((n + 7) // 8, (n + 7) // 8):
        with T.block("matmul_o"):
            v_i0_o, v_i1_o = T.axis.remap("SS", [i0_0, i1_0])
            T.reads(A[v_i0_o * 8: v_i0_o * 8 + 8, 0:4], B[0:4, v_i1_o * 8: v_i1_o * 8 + 8])
            T.writes(C[v_i0_o * 8: v_i0_o * 8 + 8, v_i1_o * 8: v_i1_o * 8 + 8])
            for i0_1, i1_1, k in T.grid(8, 8, 4):
                with T.block("matmul"):
                    v_i0_i, v_i1_i, v_k_i = T.axis.remap("SSR", [i0_1, i1_1, k])
                    T.reads(A[v_i0_o * 8 + v_i0_i, v_k_i], B[v_k_i, v_i1_o * 8 + v_i1_i])
                    T.writes(C[v_i0_o * 8 + v_i0_i, v_i1_o * 8 + v_i1_i])
                    with T.init():
                        C[v_i0_o * 8 + v_i0_i, v_i1_o * 8 + v_i1_i] = T.float32(0)
                    C[v_i0_o * 8 + v_i0_i, v_i1_o * 8 + v_i1_i] = (
                        C[v_i0_o * 8 + v_i0_i, v_i1_o * 8 + v_i1_i]
                        + A[v_i0_o * 8 + v_i0_i, v_k_i] * B[v_k_i, v_i1_o * 8 + v_i1_i])


def _matmul_args(n: int, seed: int = 0) -> list:
    m = (n + 7) // 8 * 8
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((m, 4)).astype("float32"), rng.standard_normal((4, m)).astype("float32"),
            np.zeros((m, m), "float32"), n]


def _read_buffers(sch: tdsl.Schedule, block: str) -> list[str]:
    return [r.buffer.name for r in sch.get(sch.get_block(block)).reads]


def test_cache_read_keeps_the_read_indices():
    # the reads were [A, B, C] (C, the reduction's output, added after TVM's listed ones): the
    # cache takes A's place, so read index 1 still means B for the next step, as in TVM
    sch = tdsl.Schedule(matmul_blocked)
    sch.cache_read("matmul", 0, "shared")
    assert _read_buffers(sch, "matmul") == ["A_shared", "B", "C"]
    assert _read_buffers(sch, "matmul_o") == ["A", "B", "C"]
    sch.cache_read("matmul", 1, "shared")
    assert _read_buffers(sch, "matmul") == ["A_shared", "B_shared", "C"]
    for n in (5, 17):
        check(sch, matmul_blocked, args=_matmul_args(n))


def test_cache_write_of_a_store_offset_by_the_outer_block():
    # C[v_i0_o * 8 + v_i0_i, ...]: the outer block's part is fixed while matmul's loops run, so the
    # 8 x 8 box is written densely and copied back whole
    sch = tdsl.Schedule(matmul_blocked)
    sch.cache_write("matmul", 0, "local")
    assert "T.grid(8, 8)" in sch.func.script().split('with T.block("C_local")')[0].rsplit("for", 1)[-1]
    for n in (5, 17):
        check(sch, matmul_blocked, args=_matmul_args(n))


@T.prim_func
def offset_by_a_loop(A: T.Buffer((8, 8), "float32"), C: T.Buffer((8, 8), "float32")) -> None:
    for i in range(8):
        with T.block("outer"):
            vo = T.axis.remap("S", [i])
            for j, k in T.grid(8, 2):
                with T.block("B"):
                    vj = T.axis.spatial(4, j // 2)
                    vk = T.axis.spatial(2, k)
                    C[vo, vj * 2 + vk] = A[vo, vj * 2 + vk]


def test_cache_write_of_a_store_that_is_not_one_iterator_is_still_refused():
    sch = tdsl.Schedule(offset_by_a_loop)
    expect_error(sch, lambda: sch.cache_write("B", 0, "local"), "B", "every element")


# transform_layout with a scalar parameter in the map (test_transform_layout_with_var) ----------

@T.prim_func
def copy_with_scalar(A: T.Buffer((16,), "int32"), C: T.Buffer((16,), "int32"), n: T.int32) -> None:
    B = T.alloc_buffer((16,), "int32")
    for i in range(16):
        with T.block("block"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi]
    for i in range(16):
        with T.block("out"):
            vi = T.axis.remap("S", [i])
            C[vi] = B[vi] + n


def test_transform_layout_with_a_scalar_parameter_is_refused_by_name():
    # i // n, i % n is one-to-one only for n >= 1; tdsl has no assumptions to know it
    sch = tdsl.Schedule(copy_with_scalar)
    n = sch.func.params[2]
    expect_error(sch, lambda: sch.transform_layout("block", "B", lambda i: [i // n, i % n], pad_value=0),
                 "scalar parameter n", "n >= 1")


# transform_layout to a padded shape without pad_value (test_error_if_padding_forbidden) --------

@T.prim_func
def fill_14(A: T.Buffer((14,), "int32")) -> None:
    B = T.alloc_buffer((14,), "int32")
    for i in range(14):
        with T.block("block"):
            vi = T.axis.remap("S", [i])
            B[vi] = vi * 3
    for i in range(14):
        with T.block("out"):
            vi = T.axis.remap("S", [i])
            A[vi] = B[vi] + 1


def test_transform_layout_to_a_padded_shape_without_pad_value():
    # TVM refuses; tdsl accepts: the two padding elements of the 4 x 4 layout are never read
    sch = tdsl.Schedule(fill_14)
    sch.transform_layout("block", "B", lambda i: [i // 4, i % 4], pad_value=None)
    assert "T.alloc_buffer((4, 4)" in sch.func.script()
    check(sch, fill_14)
    want = np.arange(14, dtype="int32") * 3 + 1
    got = np.zeros(14, "int32")
    tdsl.interpret(sch.func, got)
    np.testing.assert_array_equal(got, want)
