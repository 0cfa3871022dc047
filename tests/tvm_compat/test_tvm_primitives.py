"""TVM's schedule API names and arguments that tdsl now has: get_sblock, work_on, remove_rv,
get_output_blocks, set_scope / storage_align by write index, ("read", i) buffers, tensor
intrinsics written TVM's way (root block, T.reads/T.writes, inner blocks)."""
import numpy as np
import pytest
from sched_check import check, expect_error

import tdsl
from tdsl import T
from tdsl.dtypes import DataType
from tdsl.ir import IntImm


@T.prim_func
def element_wise(a: T.handle, c: T.handle) -> None:
    # test_tir_schedule_set_scope.py: element_wise
    A = T.match_buffer(a, (16, 16), dtype="float32")
    C = T.match_buffer(c, (16, 16), dtype="float32")
    B = T.sblock_alloc_buffer((16, 16), dtype="float32")
    for i, j in T.grid(16, 16):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j in T.grid(16, 16):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] + 1.0


def _alloc(sch, name):
    return next(b for b in sch.func.root_block.alloc_buffers if b.name == name)


@pytest.mark.parametrize("buffer", [0, "B"])
def test_set_scope_index_is_a_write_index(buffer):
    # test_tir_schedule_set_scope.py: test_set_scope (block B's write 0 is B; its read 0 is A)
    sch = tdsl.Schedule(element_wise)
    sch.set_scope(sch.get_sblock("B"), buffer, "shared")
    assert _alloc(sch, "B").scope == "shared"
    check(sch, element_wise)


def test_set_scope_fail_on_output_buffer():
    # test_tir_schedule_set_scope.py: test_set_scope_fail_on_output_buffer
    sch = tdsl.Schedule(element_wise)
    c = sch.get_sblock("C")
    expect_error(sch, lambda: sch.set_scope(c, 0, "shared"), "C", "parameter")


def test_set_scope_fail_on_index_out_of_bound():
    # test_tir_schedule_set_scope.py: test_set_scope_fail_on_index_out_of_bound
    sch = tdsl.Schedule(element_wise)
    b = sch.get_sblock("B")
    expect_error(sch, lambda: sch.set_scope(b, 1, "shared"), "index 1")
    expect_error(sch, lambda: sch.set_scope(b, -1, "shared"), "index -1")


def test_set_scope_fail_on_invalid_scope():
    # test_tir_schedule_set_scope.py: test_set_scope_fail_on_invalid_scope
    sch = tdsl.Schedule(element_wise)
    b = sch.get_sblock("B")
    expect_error(sch, lambda: sch.set_scope(b, 0, "test_scope"), "test_scope")


def test_read_write_tuples_name_buffers():
    sch = tdsl.Schedule(element_wise)
    sch.storage_align(sch.get_sblock("B"), ("write", 0), 0, 16, 1)
    assert _alloc(sch, "B").strides[0].value == 17
    sch.transform_layout(sch.get_sblock("C"), ("read", 0), lambda i, j: (j, i))
    check(sch, element_wise)


def test_get_sblock_work_on_remove_rv_get_output_blocks():
    # test_tir_schedule_utilities.py: test_get_output_blocks_*, test_tir_schedule_remove_rv
    sch = tdsl.Schedule(element_wise)
    sch.work_on("main")
    assert [b.name for b in sch.get_output_blocks()] == ["C"]
    assert [b.name for b in sch.get_output_blocks(sch.get_sblock("root"))] == ["C"]
    b = sch.get_sblock("B", func_name="main")
    sch.remove_rv(b)
    with pytest.raises(tdsl.ScheduleError, match="remove_rv"):
        sch.get_loops(b)
    assert len(sch.get_loops(sch.get_sblock("B"))) == 2
    with pytest.raises(tdsl.ScheduleError, match="one function"):
        sch.work_on("other")
    with pytest.raises(tdsl.ScheduleError, match="one function"):
        sch.get_sblock("B", func_name="other")


# test_tir_schedule_tensorize.py: intrinsics written with a root block, T.reads/T.writes and blocks
@T.prim_func
def mma_desc(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, (4, 4), align=64, offset_factor=1)
    B = T.match_buffer(b, (4, 4), align=64, offset_factor=1)
    C = T.match_buffer(c, (4, 4), align=64, offset_factor=1)
    with T.sblock("root"):
        T.reads(C[0:4, 0:4], A[0:4, 0:4], B[0:4, 0:4])
        T.writes(C[0:4, 0:4])
        for i, j, k in T.grid(4, 4, 4):
            with T.sblock("update"):
                vii, vjj, vkk = T.axis.remap("SSR", [i, j, k])
                C[vii, vjj] = C[vii, vjj] + A[vii, vkk] * B[vjj, vkk]


@T.prim_func
def mma_impl(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, (4, 4), align=64, offset_factor=1)
    B = T.match_buffer(b, (4, 4), align=64, offset_factor=1)
    C = T.match_buffer(c, (4, 4), align=64, offset_factor=1)
    with T.sblock("root"):
        T.reads(C[0:4, 0:4], A[0:4, 0:4], B[0:4, 0:4])
        T.writes(C[0:4, 0:4])
        for i, j in T.grid(4, 4):
            with T.sblock("dot"):
                vi, vj = T.axis.remap("SS", [i, j])
                acc: T.float32 = A[vi, 0] * B[vj, 0] + A[vi, 1] * B[vj, 1]
                C[vi, vj] = C[vi, vj] + (acc + A[vi, 2] * B[vj, 2] + A[vi, 3] * B[vj, 3])


@T.prim_func
def matmul(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, (8, 8))
    B = T.match_buffer(b, (8, 8))
    C = T.match_buffer(c, (8, 8))
    for i, j, k in T.grid(8, 8, 8):
        with T.sblock("update"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj, vk]


MMA = "tvm_compat.mma_4x4x4"


def tiled_for_mma():
    """matmul tiled 4x4x4 with its init decomposed, and the loop to tensorize with MMA."""
    if not tdsl.TensorIntrin.exists(MMA):
        tdsl.TensorIntrin.register(MMA, mma_desc, mma_impl)
    sch = tdsl.Schedule(matmul)
    update = sch.get_sblock("update")
    i, j, k = sch.get_loops(update)
    io, ii = sch.split(i, factors=[2, 4])
    jo, ji = sch.split(j, factors=[2, 4])
    ko, ki = sch.split(k, factors=[2, 4])
    sch.reorder(io, jo, ko, ii, ji, ki)
    sch.decompose_reduction(update, ko)
    return sch, ii


def test_tensorize_with_an_implementation_written_with_blocks():
    sch, ii = tiled_for_mma()
    sch.tensorize(ii, MMA)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 8)).astype("float32"), rng.standard_normal((8, 8)).astype("float32")
    np.testing.assert_allclose(tdsl.build(sch)(a, b), a @ b.T, rtol=1e-5, atol=1e-5)


# test_tir_schedule_transform_layout.py: pad_value -------------------------------------------
@T.prim_func
def padded_copy(A: T.Buffer(14, "int32"), C: T.Buffer(14, "int32")):
    B = T.sblock_alloc_buffer(14, "int32")
    for i in T.serial(14):
        with T.sblock("block"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi] * 2
    for i in T.serial(14):
        with T.sblock("C"):
            vi = T.axis.remap("S", [i])
            C[vi] = B[vi]


def _padded_b(func, a):
    """The (4, 4) buffer B the function computes, made a parameter so that the padding is seen."""
    text = func.script().replace('    B = T.alloc_buffer((4, 4), "int32")\n', "")
    text = text.replace('C: T.Buffer((14,), "int32")', 'C: T.Buffer((14,), "int32"), B: T.Buffer((4, 4), "int32")')
    b = np.full((4, 4), -7, "int32")
    tdsl.interpret(tdsl.parse(text), a, np.zeros(14, "int32"), b)
    return b.ravel()


@pytest.mark.parametrize("pad_value", [None, 42])
def test_no_padding_does_not_depend_on_pad_value(pad_value):
    # test_no_padding: a map without padding ignores pad_value
    sch = tdsl.Schedule(padded_copy)
    sch.transform_layout(sch.get_sblock("block"), "B", lambda i: [i // 7, i % 7], pad_value=pad_value)
    assert "padding" not in sch.func.script()
    check(sch, padded_copy, args=[np.arange(14, dtype="int32"), np.zeros(14, "int32")])


@pytest.mark.parametrize("pad_value, padding", [(0, [0, 0]), (lambda i, j: i + j, [5, 6]), (None, [-7, -7])])
def test_padded_transform_stores_the_pad_value(pad_value, padding):
    # test_padded_transform_without_loop / test_pad_value_function: a block fills the padding;
    # without pad_value the padding is left alone (tdsl accepts; TVM refuses: docs/script.md)
    sch = tdsl.Schedule(padded_copy)
    sch.transform_layout(sch.get_sblock("block"), "B", lambda i: [i // 4, i % 4], pad_value=pad_value)
    text = sch.func.script()
    assert ('T.block("buffer_B_padding")' in text) == (pad_value is not None)
    a = np.arange(14, dtype="int32")
    check(sch, padded_copy, args=[a, np.zeros(14, "int32")])
    b = _padded_b(sch.func, a)
    assert list(b[14:]) == padding and list(b[:14]) == list(a * 2)
    tdsl.assert_structural_equal(sch.trace.apply_to(padded_copy).func, sch.func)  # the trace replays


@pytest.mark.parametrize("pad_value, why", [
    (0.0, "is a float"),  # test_error_on_non_matching_types (a float for an int buffer)
    (IntImm(0, DataType.parse("int8")), "int8"),  # test_error_on_wrong_padding_type
    (lambda i, j: padded_copy.params[0][0], "reads a buffer"),  # test_pad_value_may_not_reference_other_buffer
])
def test_bad_pad_values_are_refused(pad_value, why):
    sch = tdsl.Schedule(padded_copy)
    b = sch.get_sblock("block")
    expect_error(sch, lambda: sch.transform_layout(b, "B", lambda i: [i // 4, i % 4], pad_value=pad_value), why)


def test_cache_read_write_take_tvm_keywords_and_block_names():
    # test_tir_schedule_cache_read_write.py: test_symbolic_matmul_blocked_cache_read / _write use
    # read_buffer_index= / write_buffer_index= / storage_scope=; TVM passes block names too
    sch = tdsl.Schedule(matmul)
    update = sch.get_sblock("update")
    sch.cache_read(update, read_buffer_index=1, storage_scope="shared", consumer_blocks=[update])
    sch.cache_write("update", write_buffer_index=0, storage_scope="local")
    assert {b.name for b in sch.func.root_block.alloc_buffers} == {"A_shared", "C_local"}
    check(sch, matmul)
    expect_error(sch, lambda: sch.cache_read(update, 1, "shared", consumer_blocks=["C_local"]),
                 "consumer_blocks", '"C_local"', "does not read")
    expect_error(sch, lambda: sch.compute_inline("nope"), "Cannot find a block with the name: nope")


def test_trace_json_round_trip_with_tvm_names():
    # test_tir_schedule_trace.py: Trace.as_json / Trace.apply_json_to_schedule, on a trace that
    # uses this additions (a block by name, write-index set_scope, pad_value, dict values)
    import json

    from tdsl.schedule.trace import Trace

    sch = tdsl.Schedule(padded_copy)
    sch.transform_layout("block", "B", lambda i: [i // 4, i % 4], pad_value=lambda i, j: i + j)
    sch.set_scope(sch.get_sblock("block"), 0, "local")
    sch.annotate(sch.get_loops(sch.get_sblock("C"))[0], "note", {"arr": [0, 1], "key": 3})
    text = json.dumps(sch.trace.as_json())
    again = tdsl.Schedule(padded_copy)
    Trace.apply_json_to_schedule(json.loads(text), again)
    tdsl.assert_structural_equal(again.func, sch.func)
    check(again, padded_copy, args=[np.arange(14, dtype="int32"), np.zeros(14, "int32")])
