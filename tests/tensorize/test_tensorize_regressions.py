"""Regressions: loop kinds above a blockized block, and intrinsics with unit loops."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import tdsl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "schedule"))
from sched_check import check, expect_error
from tz_kernels import gemm


def blockized_gemm():
    """16x32x32 matmul tiled by 4/16/16, the tile blockized: (func, sch, loops)."""
    f = gemm(16, 32, 32)
    sch = tdsl.Schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 16])
    k0, k1 = sch.split(k, factors=[None, 16])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    sch.blockize(i1)
    return f, sch, (i0, j0, k0)


def _same_on_cpu(sch: tdsl.Schedule, f: tdsl.PrimFunc, shapes: list[tuple[int, ...]]) -> None:
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype("float32") for s in shapes]
    want = [a.copy() for a in args]
    tdsl.interpret(f, *want)
    got = [a.copy() for a in args]
    tdsl.build(sch, target="cpu")(*got)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_parallel_over_a_blockized_block_uses_the_outer_bindings():
    f, sch, (i0, _j0, _k0) = blockized_gemm()
    sch.parallel(i0)
    check(sch, f, tol=1e-4)
    _same_on_cpu(sch, f, [(16, 32), (32, 32), (16, 32)])
    assert "T.parallel(4)" in sch.func.script()


def test_vectorize_and_bind_over_a_blockized_block():
    f, sch, (i0, j0, _k0) = blockized_gemm()
    sch.bind(i0, "blockIdx.x")
    sch.bind(j0, "threadIdx.x")
    check(sch, f, tol=1e-4)
    f, sch, (i0, j0, _k0) = blockized_gemm()
    sch.vectorize(j0)
    check(sch, f, tol=1e-4)


def test_parallel_over_the_outer_reduction_loop_is_still_refused():
    _f, sch, (_i0, _j0, k0) = blockized_gemm()
    expect_error(sch, lambda: sch.parallel(k0), "k_0", '"C_o"', "reduction")


UNIT_DESC = '''
@T.prim_func
def row_desc(A: T.Buffer((1, 4), "float32"), B: T.Buffer((4, 4), "float32"), C: T.Buffer((1, 4), "float32")):
    for i, j, k in T.grid(1, 4, 4):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''

UNIT_IMPL = '''
@T.prim_func
def row_impl(A: T.Buffer((1, 4), "float32"), B: T.Buffer((4, 4), "float32"), C: T.Buffer((1, 4), "float32")):
    for j, k in T.grid(4, 4):
        C[0, j] = C[0, j] + A[0, k] * B[k, j]
'''


def _unit_intrin() -> str:
    if not tdsl.TensorIntrin.exists("test_row_1x4x4"):
        tdsl.TensorIntrin.register("test_row_1x4x4", tdsl.parse(UNIT_DESC), tdsl.parse(UNIT_IMPL))
    return "test_row_1x4x4"


def unit_tiled(fi: int = 1):
    f = gemm(8, 8, 8)
    sch = tdsl.Schedule(f)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    i0, i1 = sch.split(i, factors=[None, fi])
    j0, j1 = sch.split(j, factors=[None, 4])
    k0, k1 = sch.split(k, factors=[None, 4])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    sch.decompose_reduction(b, k0)
    return f, sch, i1


def test_description_with_a_unit_loop_matches_after_split_by_one():
    name = _unit_intrin()
    f, sch, i1 = unit_tiled()
    sch.tensorize(i1, name)
    text = sch.func.script()
    assert "'tdsl.tensor_intrin': 'test_row_1x4x4'" in text
    check(sch, f, tol=1e-4)
    from tdsl.lower.tensorize import apply_tensor_intrinsics

    lowered = apply_tensor_intrinsics(sch.func, "cpu").script()
    assert 'T.block("C")' not in lowered  # the implementation replaced the matched block
    assert "C[vi_o, vj_o * 4 + j] = C[vi_o, vj_o * 4 + j] + A[vi_o, vk_o * 4 + k]" in lowered, lowered
    _same_on_cpu(sch, f, [(8, 8), (8, 8), (8, 8)])


def test_unit_description_still_refuses_a_wider_tile():
    name = _unit_intrin()
    _f, sch, i1 = unit_tiled(fi=2)
    expect_error(sch, lambda: sch.tensorize(i1, name), "i_1", "extent 2")


PREDICATED = '''
@T.prim_func
def f(A: T.Buffer((5, 4), "float32"), B: T.Buffer((5, 4), "float32")):
    for io, ii, j in T.grid(2, 3, 4):
        with T.block("B"):
            vi = T.axis.spatial(5, io * 3 + ii)
            vj = T.axis.remap("S", [j])
            T.where(io * 3 + ii < 5)
            B[vi, vj] = A[vi, vj] + T.float32(1)
'''


def test_blockize_moves_an_outer_predicate_to_the_outer_block():
    """docs/reliability.md O1: the outer iterator was bound to 5, outside [0, 5)."""
    f = tdsl.parse(PREDICATED)
    sch = tdsl.Schedule(f)
    _, _, j = sch.get_loops(sch.get_block("B"))
    sch.blockize(j)
    text = sch.func.script()
    outer = text[text.index('T.block("B_o")'):text.index('T.block("B")')]
    assert "T.where(io * 3 + ii < 5)" in outer, text
    assert text.count("T.where") == 1, text
    check(sch, f)


def test_blockize_keeps_an_inner_predicate_inside():
    f = gemm(10, 8, 8)
    sch = tdsl.Schedule(f)
    i, _j, _k = sch.get_loops(sch.get_block("C"))
    i0, _i1 = sch.split(i, factors=[None, 4])
    sch.blockize(i0)  # the condition uses the loops inside the new block: it stays on "C"
    text = sch.func.script()
    inner = text[text.index('T.block("C")'):]
    assert "T.where" in inner, text
    check(sch, f, tol=1e-4)
