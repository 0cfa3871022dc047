"""test_tir_schedule_rfactor.py, ported: TVM's expected programs, compared structurally; TVM's
refusals; and the two steps TVM refuses that tdsl used to get silently wrong."""
import numpy as np
import pytest
from sched_check import check, expect_error

import tdsl
from tdsl import T


@T.prim_func(s_tir=True)
def transformed_matmul(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, [16, 16], dtype="float32")
    B = T.match_buffer(b, [16, 16], dtype="float32")
    C = T.match_buffer(c, [16, 16], dtype="float32")
    for i0, i1, i2_outer, i2_inner_outer, i2_inner_inner in T.grid(16, 16, 2, 2, 4):
        with T.sblock("update"):
            vi, vj = T.axis.remap("SS", [i0, i1])
            vk = T.axis.R(16, i2_outer * 8 + i2_inner_outer * 4 + i2_inner_inner)
            T.reads([A[vi, vk], B[vj, vk]])
            T.writes([C[vi, vj]])
            with T.init():
                C[vi, vj] = 0.0
            C[vi, vj] = C[vi, vj] + (A[vi, vk] * B[vj, vk])


@T.prim_func(s_tir=True)
def matmul_rfactor(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, [16, 16], dtype="float32")
    B = T.match_buffer(b, [16, 16], dtype="float32")
    C = T.match_buffer(c, [16, 16], dtype="float32")
    C_rf = T.sblock_alloc_buffer([4, 16, 16], dtype="float32")
    for i0, i1, i2_outer, i2_inner_outer, i2_inner_inner in T.grid(16, 16, 2, 2, 4):
        with T.sblock("update_rf"):
            vi2_inner_inner = T.axis.S(4, i2_inner_inner)
            vi = T.axis.S(16, i0)
            vj = T.axis.S(16, i1)
            vi2_outer = T.axis.R(2, i2_outer)
            vi2_inner_outer = T.axis.R(2, i2_inner_outer)
            with T.init():
                C_rf[vi2_inner_inner, vi, vj] = 0.0
            C_rf[vi2_inner_inner, vi, vj] = C_rf[vi2_inner_inner, vi, vj] + (
                A[vi, (((vi2_outer * 8) + (vi2_inner_outer * 4)) + vi2_inner_inner)]
                * B[vj, (((vi2_outer * 8) + (vi2_inner_outer * 4)) + vi2_inner_inner)]
            )
    for i0_1, i1_1, i2_inner_inner_1 in T.grid(16, 16, 4):
        with T.sblock("update"):
            vi2_inner_inner_1, vi_1, vj_1 = T.axis.remap("RSS", [i2_inner_inner_1, i0_1, i1_1])
            with T.init():
                C[vi_1, vj_1] = 0.0
            C[vi_1, vj_1] = C[vi_1, vj_1] + C_rf[vi2_inner_inner_1, vi_1, vj_1]


def test_reduction_rfactor_matmul_and_factor_axis_range():
    # test_reduction_rfactor_matmul / _factor_axis_range: TVM's program, structurally
    for axis in (0, -3):
        sch = tdsl.Schedule(transformed_matmul)
        update = sch.get_sblock("update")
        *_, kii = sch.get_loops(update)
        rf = sch.rfactor(kii, axis)
        assert rf.name == "update_rf"
        tdsl.assert_structural_equal(sch.func, matmul_rfactor)
        check(sch, transformed_matmul)
        tdsl.assert_structural_equal(sch.trace.apply_to(transformed_matmul).func, sch.func)


def test_reduction_rfactor_factor_axis_range_fail():
    sch = tdsl.Schedule(transformed_matmul)
    *_, kii = sch.get_loops(sch.get_sblock("update"))
    expect_error(sch, lambda: sch.rfactor(kii, 3), "factor_axis 3")
    expect_error(sch, lambda: sch.rfactor(kii, -4), "factor_axis -4")


@T.prim_func(s_tir=True)
def rowsum_not_quasi_affine(a: T.handle, b: T.handle) -> None:
    A = T.match_buffer(a, (16, 128))
    B = T.match_buffer(b, (16,))
    for i, k in T.grid(16, 16):
        with T.sblock("B"):
            vi = T.axis.S(16, i)
            vk = T.axis.R(128, T.floordiv(k * k, 2))
            with T.init():
                B[vi] = 0.0
            B[vi] = B[vi] + A[vi, vk]


def test_reduction_rfactor_not_reduction_block2_non_affine_binding():
    # test_reduction_rfactor_not_reduction_block2. vk = k * k // 2 is 0 at k = 0 and k = 1, so the
    # original restarts the sum at k = 1; partial sums would not: tdsl used to accept this.
    sch = tdsl.Schedule(rowsum_not_quasi_affine)
    _, k = sch.get_loops(sch.get_sblock("B"))
    expect_error(sch, lambda: sch.rfactor(k, 0), 'block "B"', "k * k // 2", "not an affine")


def test_rfactor_refuses_an_affine_binding_that_restarts_the_reduction():
    # beyond TVM's cases: vk = k // 2 is affine but also 0 twice, so T.init runs twice
    f = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
    for i, k in T.grid(4, 16):
        with T.block("B"):
            vi = T.axis.spatial(4, i)
            vk = T.axis.reduce(8, k // 2)
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vk]
''')
    sch = tdsl.Schedule(f)
    _, k = sch.get_loops(sch.get_block("B"))
    expect_error(sch, lambda: sch.rfactor(k, 0), "more than once")


@T.prim_func(s_tir=True)
def matmul_not_same_buffer_access(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, (16, 16))
    B = T.match_buffer(b, (16, 16))
    C = T.match_buffer(c, (16, 16))
    for i, j, k in T.grid(16, 16, 16):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0.0
            C[vj, vi] = C[vj, vi] + A[vi, vk] * B[vk, vj]


def test_reduction_rfactor_not_same_buffer_access():
    # test_reduction_rfactor_not_same_buffer_access: the init stores C[vi, vj], the update
    # C[vj, vi]; tdsl used to take them for one element (structural equality maps vi onto vj)
    sch = tdsl.Schedule(matmul_not_same_buffer_access)
    _, _, k = sch.get_loops(sch.get_sblock("C"))
    expect_error(sch, lambda: sch.rfactor(k, 0), "not single stores to the same element")


@T.prim_func(s_tir=True)
def rowsum(a: T.handle, b: T.handle) -> None:
    A = T.match_buffer(a, (8, 16))
    B = T.match_buffer(b, (8,))
    for i, k in T.grid(8, 16):
        with T.sblock("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = 0.0
            B[vi] = B[vi] + A[vi, vk]


def _rowsum_variant(init="0.0", update="B[vi] + A[vi, vk]", store="B[vi]", shape="(8,)"):
    return tdsl.parse(f'''
@T.prim_func
def f(A: T.Buffer((8, 16), "float32"), B: T.Buffer({shape}, "float32")):
    for i, k in T.grid(8, 16):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                {store} = T.float32({init})
            {store} = {update}
''')


def test_reduction_rfactor_refusals_tvm_makes_too():
    # not_reduction_block1 (element-wise), not_reduction_block3 (rowsum_not_dominant: the store
    # uses the reduction iterator), wrong_reduce_pattern2 (B - A), wrong_loops1 (a spatial loop)
    elementwise = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8, 8), "float32")):
    for i, j in T.grid(8, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2)
''')
    sch = tdsl.Schedule(elementwise)
    i, _ = sch.get_loops(sch.get_block("B"))
    expect_error(sch, lambda: sch.rfactor(i, 0), 'block "B"')
    for f, what in [(_rowsum_variant(store="B[vi, vk]", update="B[vi, vk] + A[vi, vk]", shape="(8, 16)"),
                     "reduction iterator"),
                    (_rowsum_variant(update="B[vi] - A[vi, vk]"), "not a sum, product, min or max")]:
        sch = tdsl.Schedule(f)
        _, k = sch.get_loops(sch.get_block("B"))
        expect_error(sch, lambda sch=sch, k=k: sch.rfactor(k, 0), what)
    sch = tdsl.Schedule(rowsum)
    i, _ = sch.get_loops(sch.get_sblock("B"))
    expect_error(sch, lambda: sch.rfactor(i, 0), "spatial iterator")


@pytest.mark.parametrize("variant", ["init 1", "parallel k"])
def test_rfactor_steps_tvm_refuses_but_tdsl_proves(variant):
    # test_reduction_rfactor_wrong_reduce_pattern1 (init 1.0 is not the identity of +) and
    # _not_serial_loop (k is parallel): tdsl's partials start from the identity and the write-back
    # from the init, and a parallel k writes distinct partials, so the results are equal
    f = _rowsum_variant(init="1.0") if variant == "init 1" else tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((8, 16), "float32"), B: T.Buffer((8,), "float32")):
    for i in T.serial(8):
        for k in T.parallel(16):
            with T.block("B"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] = B[vi] + A[vi, vk]
''')
    sch = tdsl.Schedule(f)
    _, k = sch.get_loops(sch.get_block("B"))
    sch.rfactor(k, 0)
    check(sch, f)
    if variant == "parallel k":
        assert "T.parallel(16)" in sch.func.script()  # the partials' loop; the write-back's is serial
        a = np.random.default_rng(0).standard_normal((8, 16)).astype("float32")
        np.testing.assert_allclose(tdsl.build(sch)(a), a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_reduction_rfactor_zero_dim():
    # test_reduction_rfactor_zero_dim
    f = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((16,), "float32"), B: T.Buffer((), "float32")):
    for k0 in range(16):
        with T.block("B"):
            k = T.axis.reduce(16, k0)
            with T.init():
                B[()] = T.float32(0)
            B[()] = B[()] + A[k]
''')
    sch = tdsl.Schedule(f)
    (k,) = sch.get_loops(sch.get_block("B"))
    sch.rfactor(k, 0)
    text = sch.func.script()
    assert 'B_rf = T.alloc_buffer((16,), "float32")' in text
    check(sch, f)


def test_reduction_rfactor_predicate():
    # test_reduction_rfactor_predicate: TVM raises a RuntimeError ("should be a ScheduleError");
    # tdsl accepts a non-dividing split's tail guard (the write-back adds only the used partials)
    f = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((8, 16), "float32"), B: T.Buffer((8,), "float32")):
    for i, k_0, k_1 in T.grid(8, 4, 5):
        with T.block("B"):
            T.where(k_0 * 5 + k_1 < 16)
            vi = T.axis.spatial(8, i)
            vk = T.axis.reduce(16, k_0 * 5 + k_1)
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vk]
''')
    sch = tdsl.Schedule(f)
    _, ko, _ = sch.get_loops(sch.get_block("B"))
    sch.rfactor(ko, 1)
    check(sch, f)


def test_reduction_rfactor_int64():
    # test_reduction_rfactor_int64
    @T.prim_func(s_tir=True)
    def before(A: T.Buffer((T.int64(8), T.int64(8)), "float32"), B: T.Buffer((T.int64(8),), "float32")):
        for i0, k0, k1 in T.grid(T.int64(8), T.int64(2), T.int64(4)):
            with T.sblock("update"):
                vi = T.axis.spatial(T.int64(8), i0)
                vk = T.axis.reduce(T.int64(8), k0 * T.int64(4) + k1)
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] = B[vi] + A[vi, vk]

    sch = tdsl.Schedule(before)
    *_, k1 = sch.get_loops(sch.get_sblock("update"))
    sch.rfactor(k1, 0)
    check(sch, before)
