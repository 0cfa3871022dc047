"""TVM's split/fuse, blockize and utilities cases that need tdsl API (test_tir_schedule_split_fuse.py,
test_tir_schedule_utilities.py, test_tir_schedule_error.py), written in tdsl's words: every
accepted step is checked against the interpreter (sched_check.check)."""
import json

import pytest
from dataflow_helpers import run_docstring_example
from sched_check import check, expect_error

import tdsl
from tdsl import T
from tdsl.schedule.trace import Trace


@T.prim_func(s_tir=True)
def scale3(A: T.Buffer((8, 6, 4), "float32"), B: T.Buffer((8, 6, 4), "float32")) -> None:
    for i, j, k in T.grid(8, 6, 4):
        with T.sblock("B"):
            vi, vj, vk = T.axis.remap("SSS", [i, j, k])
            B[vi, vj, vk] = A[vi, vj, vk] * 2.0


@T.prim_func(s_tir=True)
def scale3_symbolic(A: T.Buffer((4, 6, "n"), "float32"), B: T.Buffer((4, 6, "n"), "float32")) -> None:
    for i, j, k in T.grid(4, 6, n):
        with T.sblock("B"):
            vi, vj, vk = T.axis.remap("SSS", [i, j, k])
            B[vi, vj, vk] = A[vi, vj, vk] * 2.0


def test_fuse_of_a_symbolic_extent_uses_tvms_digit_form():
    # test_fuse_symbolic: the middle digit is (fused % (n * 6)) // n, as TVM writes it
    sch = tdsl.Schedule(scale3_symbolic)
    sch.fuse(*sch.get_loops("B"))
    text = sch.func.script()
    assert "i_j_k_fused % (n * 6) // n" in text, text
    check(sch, scale3_symbolic, dims={"n": 5})


def test_split_with_disable_predication():
    # test_split[True]: dividing factors need no guard, so the flag changes nothing
    sch = tdsl.Schedule(scale3)
    i, j, _ = sch.get_loops("B")
    sch.split(i, factors=[2, 1, 4], disable_predication=True)
    sch.split(j, factors=[3, 2], disable_predication=True)
    assert "T.where" not in sch.func.script()
    check(sch, scale3)
    again = Trace.from_json(json.dumps(sch.trace.as_json())).apply(scale3)
    assert tdsl.structural_diff(again.func, sch.func) is None
    # over-covering factors would run the tail unguarded: refused, naming the loop and the flag
    sch = tdsl.Schedule(scale3)
    (_, j, _) = sch.get_loops("B")
    expect_error(sch, lambda: sch.split(j, factors=[4, 2], disable_predication=True), "j", "disable_predication")


def test_split_by_an_int64_constant_factor():
    # test_split_int64_factors: an int64 IntImm factor of an int32 loop is the plain number
    sch = tdsl.Schedule(scale3_symbolic)
    _, _, k = sch.get_loops("B")
    sch.split(k, factors=[tdsl.ir.IntImm(3, tdsl.dtypes.DataType.parse("int64")), None])
    assert "T.cast" not in sch.func.script()
    check(sch, scale3_symbolic, dims={"n": 5})


@T.prim_func(s_tir=True)
def zero_dim(A: T.Buffer((), "int32"), C: T.Buffer((), "int32")) -> None:
    with T.sblock("C"):
        vi = T.axis.spatial(1, 0)  # noqa: F841 - a block iterator
        C[()] = A[()] + 5


def test_add_unit_loop_above_a_block_and_a_loop():
    # test_add_unit_loop_above_block / _above_loop
    sch = tdsl.Schedule(zero_dim)
    u = sch.add_unit_loop(sch.get_block("C"))
    assert [lp.name for lp in sch.get_loops("C")] == [u.name]
    u2 = sch.add_unit_loop(u)
    assert [lp.name for lp in sch.get_loops("C")] == [u2.name, u.name]
    check(sch, zero_dim)
    assert tdsl.structural_diff(sch.trace.apply(zero_dim).func, sch.func) is None
    run_docstring_example("add_unit_loop")


def test_get_returns_the_statement_of_a_handle():
    # test_tir_schedule_get_sblock / copy_2 / remove_rv: sch.get(rv) is the Block or the For
    sch = tdsl.Schedule(scale3)
    b = sch.get_block("B")
    i, j, k = sch.get_loops(b)
    assert sch.get(b).name == "B"
    assert sch.get(i).loop_var.name == "i" and sch.get(k).extent.value == 4
    copy = sch.copy()
    io, _ = sch.split(i, factors=[None, 4])
    assert sch.get(io).extent.value == 2
    expect_error(copy, lambda: copy.get(io), "no longer valid")
    sch.remove_rv(b)
    expect_error(sch, lambda: sch.get(b), "remove_rv")


@T.prim_func(s_tir=True)
def blockized(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8, 8), "float32")) -> None:
    with T.sblock("blockized_B"):
        vio = T.axis.spatial(1, 0)  # noqa: F841 - a block iterator
        for i, j in T.grid(8, 8):
            with T.sblock("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * 2.0


def test_get_output_blocks_counts_outer_and_inner_blocks():
    # test_get_output_blocks_nested
    sch = tdsl.Schedule(blockized)
    assert [b.name for b in sch.get_output_blocks("root")] == ["blockized_B", "B"]
    assert [b.name for b in sch.get_output_blocks("blockized_B")] == ["B"]


def test_unknown_block_message_uses_tvms_phrase():
    # test_tir_schedule_error_detail
    sch = tdsl.Schedule(scale3)
    expect_error(sch, lambda: sch.get_block("wrong_name"), "Cannot find a block with the name: wrong_name")


def test_with_attr_sets_a_function_attribute():
    f = scale3.with_attr("global_symbol", "scale")
    assert dict(f.attrs)["global_symbol"] == "scale" and not scale3.attrs
    assert dict(f.with_attr("global_symbol", "s2").attrs) == {"global_symbol": "s2"}
    assert tdsl.structural_diff(f.with_body(scale3.body), f) is None


@T.prim_func(s_tir=True)
def two_blocks(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8, 8), "float32")) -> None:
    for m in range(3):
        for i, j in T.grid(3, 1):
            with T.sblock("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * 2.0 + B[vi, vj]
        for i, j in T.grid(8, 4):
            with T.sblock("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj + 4] = A[vi, vj + 4] * 3.0 + B[vi, vj + 4]


def test_blockize_a_list_of_sibling_blocks():
    # test_blockize_blocks: one block without iterators around both loop nests
    sch = tdsl.Schedule(two_blocks)
    outer = sch.blockize([sch.get_block("B"), sch.get_block("C")])
    assert outer.name == "outer_B_C_"
    assert [lp.name for lp in sch.get_loops(outer)] == ["m"]
    assert [b.name for b in sch.get_child_blocks(outer)] == ["B", "C"]
    text = sch.func.script()
    assert "T.reads(A[0:8, 0:8], B[0:8, 0:8])" in text and "T.writes(B[0:8, 0:8])" in text, text
    check(sch, two_blocks)
    assert tdsl.structural_diff(sch.trace.apply(two_blocks).func, sch.func) is None
    again = Trace.from_json(json.dumps(sch.trace.as_json())).apply(two_blocks)
    assert tdsl.structural_diff(again.func, sch.func) is None
    # blocks that are not siblings of one scope, or a repeated block, are refused
    sch = tdsl.Schedule(two_blocks)
    b = sch.get_block("B")
    expect_error(sch, lambda: sch.blockize([b, b]), "distinct")
    expect_error(sch, lambda: sch.blockize([b]), "not siblings")


def test_scan_iterators_are_refused_by_name():
    # test_reorder_fail_with_wrong_block_var_type writes vk = T.axis.scan(128, k)
    text = '''
@T.prim_func
def f(A: T.Buffer((8,), "float32")):
    for k in range(8):
        with T.block("B"):
            vk = T.axis.scan(8, k)
            A[vk] = A[vk] + 1.0
'''
    with pytest.raises(tdsl.ScriptError, match=r"T.axis.scan \(TVM's scan iterator\) is not part of tdsl"):
        tdsl.parse(text)


@T.prim_func
def int64_add(A: T.Buffer((T.int64(12),), "float32"), B: T.Buffer((T.int64(12),), "float32")):
    for i in range(T.int64(12)):
        with T.block("B"):
            vi = T.axis.spatial(T.int64(12), i)
            B[vi] = A[vi] + T.float32(1)


@pytest.mark.parametrize("factors", [("int64", 1, "int32", 512), ("int32", 1, "int32", 3, "int32", 4)])
def test_split_of_an_int64_extent_by_int32_and_mixed_factors(factors):
    # test_split_int64_extent_with_mixed_factors / _with_int32_factors
    from tdsl.dtypes import DataType
    from tdsl.ir import IntImm

    values = [IntImm(v, DataType.parse(d)) for d, v in zip(factors[::2], factors[1::2])]
    sch = tdsl.Schedule(int64_add)
    (i,) = sch.get_loops("B")
    loops = sch.split(i, factors=values)
    assert all(str(sch.get(lp).loop_var.dtype) == "int64" for lp in loops)
    check(sch, int64_add)
