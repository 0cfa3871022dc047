"""TVMScript constructs tdsl parses like TVM, from TVM's tir-schedule tests: repeated block names
(test_tir_schedule_compute_at.py two_elementwise_after_compute_at, test_tir_schedule_cache_read_write.py
continuous_cache_write / cache_read_multi_consumer), T.tvm_access_ptr (cache_read_write opaque_access,
compute_inline exp_exp_opaque_access_with_tvm_access_ptr), region slices without a bound
(cache_read_write inplace_func), an integer stored into a float buffer (compute_at
non_perfect_channel_group) and `T.call_extern(..., dtype="")`."""
import numpy as np
import pytest
from sched_check import check

import tdsl
from tdsl import T
from tdsl.arith import eval_int
from tdsl.script.printer import message_text


def _regions(block):
    def show(regions):
        return [(r.buffer.name, [(message_text(x.min), message_text(x.extent)) for x in r.region]) for r in regions]
    return show(block.reads), show(block.writes)


# repeated block names ---------------------------------------------------------------------------

@T.prim_func(s_tir=True)
def two_b(A: T.Buffer((8, 4), "float32"), C: T.Buffer((8, 4), "float32"), D: T.Buffer((8, 4), "float32")):
    # TVM's two_elementwise_after_compute_at names both blocks "B"; "D" is a third, named once
    B = T.sblock_alloc_buffer((8, 4), "float32")
    for i, j in T.grid(8, 4):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j in T.grid(8, 4):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] + 1.0
    for i, j in T.grid(8, 4):
        with T.sblock("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = A[vi, vj] - 1.0


def test_repeated_block_names_parse_print_interpret_and_build():
    back = tdsl.parse(two_b.script())
    assert tdsl.structural_equal(back, two_b)
    a = np.random.default_rng(0).standard_normal((8, 4)).astype("float32")
    for run in (lambda *x: tdsl.interpret(two_b, *x), tdsl.build(two_b)):
        c, d = np.zeros((8, 4), "float32"), np.zeros((8, 4), "float32")
        run(a, c, d)
        np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)
        np.testing.assert_allclose(d, a - 1, rtol=1e-6)


def test_get_block_of_a_repeated_name_names_both_places_and_the_fix():
    sch = tdsl.Schedule(two_b)
    with pytest.raises(tdsl.ScheduleError) as info:
        sch.get_block("B")
    msg = str(info.value)
    assert "Found multiple blocks with the name: B" in msg  # TVM's words
    assert "2 blocks" in msg and "under loops i, j" in msg and "under loops i_1, j_1" in msg
    assert 'T.block("B_1")' in msg
    assert len(sch.trace.instructions) == 0  # nothing recorded, the function unchanged
    with pytest.raises(tdsl.ScheduleError, match="Found multiple blocks with the name: B"):
        sch.compute_at("B", sch.get_loops(sch.get_block("D"))[0])  # a name where a handle goes


def test_lookups_that_would_return_a_repeated_name_refuse():
    sch = tdsl.Schedule(two_b)
    with pytest.raises(tdsl.ScheduleError, match="get_child_blocks: Found multiple blocks with the name: B"):
        sch.get_child_blocks(sch.get_block("root"))
    sch = tdsl.Schedule(_producer_named_twice)
    with pytest.raises(tdsl.ScheduleError, match="get_producers: Found multiple blocks with the name: B"):
        sch.get_producers(sch.get_block("E"))


def test_blocks_of_unique_names_still_schedule_beside_repeated_ones():
    sch = tdsl.Schedule(two_b)
    d = sch.get_block("D")
    i, j = sch.get_loops(d)
    sch.split(j, [2, 2])
    sch.parallel(i)
    check(sch, two_b)


@T.prim_func
def _producer_named_twice(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32"),
                          E: T.Buffer((8,), "float32")):
    B = T.alloc_buffer((8,), "float32")
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            C[vi] = A[vi] + 1.0
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = A[vi] * 3.0
    for i in range(8):
        with T.block("E"):
            vi = T.axis.spatial(8, i)
            E[vi] = B[vi] - 2.0


def test_a_primitive_never_finds_a_repeated_name_by_itself():
    # reverse_compute_inline of E looks its producer up by name: refused, not the first "B"
    sch = tdsl.Schedule(_producer_named_twice)
    before = sch.func
    with pytest.raises(tdsl.ScheduleError, match="Found multiple blocks with the name: B"):
        sch.reverse_compute_inline(sch.get_block("E"))
    assert sch.func is before


def test_primitives_keep_making_fresh_names_and_replay_by_name():
    # TVM's continuous_cache_write expects three blocks "B"; tdsl's names stay distinct
    @T.prim_func
    def elementwise(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
        B = T.alloc_buffer((16, 16), "float32")
        for i, j in T.grid(16, 16):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * 2.0
        for i, j in T.grid(16, 16):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = B[vi, vj] + 1.0

    sch = tdsl.Schedule(elementwise)
    b = sch.get_block("B")
    sch.cache_write(b, 0, "shared")
    sch.cache_write(b, 0, "local")
    sch.cache_read(sch.get_block("C"), 0, "shared")
    names = tdsl.ir.tree.block_names(sch.func)
    assert len(names) == len(set(names)) == 5, names
    check(sch, elementwise)
    replay = tdsl.Schedule(elementwise)
    sch.trace.apply(replay)
    assert tdsl.structural_equal(replay.func, sch.func)


# T.tvm_access_ptr -------------------------------------------------------------------------------

@T.prim_func(s_tir=True)
def access_ptr_tvm(A: T.Buffer((128, 128), "float16"), B: T.Buffer((128, 128), "float16")):
    for i, j in T.grid(8, 8):
        with T.sblock("opaque"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.evaluate(T.tvm_load_matrix_sync(
                B.data, 16, 16, 16, vi * 8 + vj,
                T.tvm_access_ptr(T.type_annotation(dtype="float16"), A.data, vi * 2048 + vj * 16, 128, 1,
                                 dtype="handle"),
                128, "row_major", dtype="handle"))
    for i, j in T.grid(8, 8):
        with T.sblock("match_buffer"):
            vi, vj = T.axis.remap("SS", [i, j])
            A0 = T.match_buffer(A[vi * 16:vi * 16 + 16, vj * 16:vj * 16 + 16], (16, 16), "float16",
                                strides=[128, 1], offset_factor=1)
            B0 = T.match_buffer(B[vi * 16:vi * 16 + 16, vj * 16:vj * 16 + 16], (16, 16), "float16",
                                strides=[128, 1], offset_factor=1)
            T.evaluate(T.tvm_load_matrix_sync(
                B0.data, 16, 16, 16, vi * 8 + vj,
                T.tvm_access_ptr(T.type_annotation(dtype="float16"), A0.data, A0.elem_offset, A0.strides[0], 1,
                                 dtype="handle"),
                128, "row_major", dtype="handle"))


@T.prim_func
def access_ptr_tdsl(A: T.Buffer((128, 128), "float16"), B: T.Buffer((128, 128), "float16")):
    for i, j in T.grid(8, 8):
        with T.block("opaque"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.evaluate(T.tvm_load_matrix_sync(T.address_of(B[0, 0]), 16, 16, 16, vi * 8 + vj,
                                              T.address_of(A[vi * 16 + vj // 8, vj % 8 * 16]), 128, "row_major"))
    for i, j in T.grid(8, 8):
        with T.block("match_buffer"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.evaluate(T.tvm_load_matrix_sync(T.address_of(B[vi * 16, vj * 16]), 16, 16, 16, vi * 8 + vj,
                                              T.address_of(A[vi * 16 + vj // 8, vj % 8 * 16]), 128, "row_major"))


def test_tvm_access_ptr_is_the_address_of_the_row_major_element():
    # flat offset vi * 2048 + vj * 16 of a 128 x 128 buffer, and a view's elem_offset, name the
    # same element: row vi * 16 + vj // 8 (vj < 8), column vj % 8 * 16
    assert tdsl.structural_diff(access_ptr_tvm, access_ptr_tdsl) is None
    assert tdsl.structural_equal(tdsl.parse(access_ptr_tvm.script()), access_ptr_tvm)
    for name in ("opaque", "match_buffer"):
        reads, writes = _regions(tdsl.Schedule(access_ptr_tvm).get(name))
        assert reads == [("A", [("0", "128"), ("0", "128")])]  # the whole buffer, read: the builtin's source
        assert writes == [("B", [("0", "128"), ("0", "128")])]


def test_tvm_access_ptr_offset_digits_in_three_dimensions():
    @T.prim_func
    def f(A: T.Buffer((2, 3, 4), "float32"), p: T.int32):
        with T.block("b"):
            T.evaluate(T.call_extern("void", "llvm.prefetch.p0", T.tvm_access_ptr(
                T.type_annotation(dtype="float32"), A.data, p, 1, 1), 0, 3, 1))

    load = [c for c in tdsl.ir.collect(f.body, tdsl.ir.Call) if c.op == "address_of"][0].args[0]
    p = f.params[1]
    for value in range(24):  # the digits name element p of the row-major order
        digits = tuple(eval_int(i, {p: value}) for i in load.indices)
        assert np.ravel_multi_index(digits, (2, 3, 4)) == value


def test_evaluated_address_alone_is_a_read_and_compute_inline_keeps_it():
    # compute_inline test_compute_inline_opaque_access_with_tvm_access_ptr: TVM's expected program
    # reads lookup_table[0:1024] (the whole buffer) and does not write it
    @T.prim_func(s_tir=True)
    def before(lookup_table: T.Buffer((1024,), "int8"), x: T.Buffer((16,), "float16"),
               compute: T.Buffer((16,), "float16")):
        compute_1 = T.sblock_alloc_buffer([16], dtype="float16")
        for i0 in T.serial(16):
            with T.sblock("compute"):
                i0_1 = T.axis.spatial(16, i0)
                compute_1[i0_1] = T.exp(x[i0_1], dtype="float16")
        for i0 in T.serial(16):
            with T.sblock("compute_1"):
                i0_2 = T.axis.spatial(16, i0)
                T.evaluate(lookup_table.access_ptr("r"))
                compute[i0_2] = T.exp(compute_1[i0_2], dtype="float16")

    sch = tdsl.Schedule(before)
    assert _regions(sch.get(sch.get_block("compute_1")))[0][0] == ("lookup_table", [("0", "1024")])
    sch.compute_inline(sch.get_block("compute"))
    reads, writes = _regions(sch.get(sch.get_block("compute_1")))
    assert reads == [("lookup_table", [("0", "1024")]), ("x", [("i0_2_1", "1")])]
    assert writes == [("compute", [("i0_2_1", "1")])]


def test_address_kept_in_a_let_is_read_and_written():
    @T.prim_func
    def f(A: T.Buffer((8,), "float32")):
        with T.block("b"):
            p = T.address_of(A[2])
            T.evaluate(T.call_extern("void", "my_kernel", p))

    sch = tdsl.Schedule(f)
    reads, writes = _regions(sch.get(sch.get_block("b")))
    assert reads == writes == [("A", [("0", "8")])]


@pytest.mark.parametrize("call, fragment", [
    ('T.tvm_access_ptr(T.type_annotation(dtype="float32"), A.data, 0, 8, 1)', "element type float32"),
    ('T.tvm_access_ptr(T.type_annotation(dtype="float16"), A, 0, 8, 1)', "a buffer's data"),
    ('T.tvm_access_ptr(T.type_annotation(dtype="float16"), A.data, 0, 8, 4)', "1 (read), 2 (write) or 3"),
    ('T.tvm_access_ptr(T.type_annotation(dtype="float16"), A.data, 0, 8)', "takes (T.type_annotation"),
    ('T.tvm_access_ptr(T.type_annotation(dtype="float16"), A.data, 0.5, 8, 1)', "expected an integer"),
    ('T.tvm_access_ptr(T.type_annotation(dtype="float16"), S.data, 3, 8, 1)', "explicit strides"),
])
def test_bad_tvm_access_ptr_says_what_is_right(call, fragment):
    src = (
        "@T.prim_func\n"
        "def f(A: T.Buffer((8, 8), 'float16'), S: T.Buffer((8, 8), 'float16', strides=(16, 1))):\n"
        "    with T.block('b'):\n"
        f"        T.evaluate(T.call_extern('void', 'llvm.prefetch.p0', {call}, 0, 3, 1))\n")
    with pytest.raises(tdsl.ScriptError) as info:
        tdsl.parse(src)
    assert fragment in str(info.value) and "line 4" in str(info.value)


# region slices without a bound, void extern calls -----------------------------------------------

def test_region_slice_bounds_default_to_the_dimension_and_inplace_func_parses():
    @T.prim_func(s_tir=True)
    def inplace_func(data_io: T.Buffer((64), "int32")):  # cache_read_write's inplace_func
        data_1d = T.sblock_alloc_buffer([64], dtype="int32")
        for i0 in T.serial(64):
            with T.sblock("copy_in"):
                v0 = T.axis.remap("S", [i0])
                data_1d[v0] = data_io[v0]
        for i0 in T.serial(1):
            with T.sblock("ext_call"):
                T.reads(data_1d[:64])
                T.writes(data_1d[:64])
                T.evaluate(T.call_extern("call_impl", data_1d.data, dtype=""))

    sch = tdsl.Schedule(inplace_func)
    block = sch.get(sch.get_block("ext_call"))
    assert _regions(block) == ([("data_1d", [("0", "64")])], [("data_1d", [("0", "64")])])
    call = [c for c in tdsl.ir.collect(block.body, tdsl.ir.Call) if c.op == "call_impl"][0]
    assert str(call.dtype) == "void"
    assert tdsl.structural_equal(tdsl.parse(inplace_func.script()), inplace_func)


def test_open_slices_in_two_dimensions_run_like_numpy():
    @T.prim_func
    def rowsum(A: T.Buffer((6, 5), "float32"), B: T.Buffer((6,), "float32")):
        for i, k in T.grid(6, 5):
            with T.block("sum"):
                vi, vk = T.axis.remap("SR", [i, k])
                T.reads(A[vi, :], B[vi:])
                T.writes(B[vi])
                with T.init():
                    B[vi] = 0.0
                B[vi] = B[vi] + A[vi, vk]

    sch = tdsl.Schedule(rowsum)
    assert _regions(sch.get(sch.get_block("sum"))) == (
        [("A", [("vi", "1"), ("0", "5")]), ("B", [("vi", "6 - vi")])], [("B", [("vi", "1")])])
    a = np.random.default_rng(1).standard_normal((6, 5)).astype("float32")
    b = np.zeros(6, "float32")
    tdsl.interpret(rowsum, a, b)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5)
    with pytest.raises(tdsl.ScriptError, match="no step"):
        tdsl.parse(rowsum.script().replace("T.reads(A[vi, 0:5]", "T.reads(A[vi, 0:5:2]"))


# an integer stored into a float buffer ----------------------------------------------------------

def test_integer_stored_into_float_buffer_is_cast_like_tvm():
    @T.prim_func(s_tir=True)
    def f(B: T.Buffer((10,), "float32"), C: T.Buffer((10,), "float64")):  # non_perfect_channel_group
        for i in range(10):
            with T.sblock("B"):
                vi = T.axis.spatial(10, i)
                B[vi] = vi
                C[vi] = T.int64(3) * T.cast(vi, "int64")

    text = f.script()
    assert 'B[vi] = T.cast(vi, "float32")' in text
    check(f, f)
    b, c = np.zeros(10, "float32"), np.zeros(10, "float64")
    tdsl.interpret(f, b, c)
    np.testing.assert_array_equal(b, np.arange(10, dtype="float32"))
    np.testing.assert_array_equal(c, 3.0 * np.arange(10))


@pytest.mark.parametrize("buffer, value", [
    ('"int32"', "T.float32(1.5)"),   # float -> int cuts the value off
    ('"int8"', "vi"),                 # a narrower integer wraps
    ('"float16"', "T.float32(1.5)"),  # a float of another width
])
def test_other_store_type_mismatches_stay_refused(buffer, value):
    src = ("@T.prim_func\n"
           f"def f(B: T.Buffer((4,), {buffer})):\n"
           "    for i in range(4):\n"
           "        with T.block('B'):\n"
           "            vi = T.axis.spatial(4, i)\n"
           f"            B[vi] = {value}\n")
    with pytest.raises(tdsl.ScriptError, match="T.cast") as info:
        tdsl.parse(src)
    assert "line 6" in str(info.value)


# views: elem_offset names, TVM's right-aligned shapes; extern calls' declared regions ----------

def test_elem_offset_name_is_bound_by_the_view_int32_and_int64():
    # test_tir_schedule_tensorize.py tensorized_matmul(_int64_shape): `off = T.int32()` then
    # T.match_buffer(..., elem_offset=off); off is the view's first element in A's storage
    for it in ("int32", "int64"):
        src = f"""
@T.prim_func
def f(A: T.Buffer((T.{it}(64), T.{it}(64)), "float32")):
    for i, j in T.grid(T.{it}(4), T.{it}(4)):
        with T.block("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            off = T.{it}()
            A_sub = T.match_buffer(A[vi * T.{it}(16):vi * T.{it}(16) + T.{it}(16),
                                     vj * T.{it}(16):vj * T.{it}(16) + T.{it}(16)],
                                   [T.{it}(16), T.{it}(16)], elem_offset=off)
            T.evaluate(T.call_extern("void", "llvm.prefetch.p0", A_sub.data, off // T.{it}(256), 3, 1))
"""
        f = tdsl.parse(src)
        call = [c for c in tdsl.ir.collect(f.body, tdsl.ir.Call) if c.op == "llvm.prefetch.p0"][0]
        sch = tdsl.Schedule(f)
        vi, vj = [iv.var for iv in sch.get(sch.get_block("b")).iter_vars]
        assert str(call.args[1].dtype) == it
        for a, b in ((0, 0), (1, 2), (3, 3)):
            assert eval_int(call.args[1], {vi: a, vj: b}) == (a * 16 * 64 + b * 16) // 256


def test_unbound_elem_offset_name_is_refused():
    src = """
@T.prim_func
def f(A: T.Buffer((16,), "float32")):
    with T.block("b"):
        off = T.int32()
        T.evaluate(T.call_extern("void", "llvm.prefetch.p0", A.data, 0, 3, 1))
"""
    with pytest.raises(tdsl.ScriptError, match="never bound") as info:
        tdsl.parse(src)
    assert "elem_offset=off" in str(info.value)


def test_view_shape_matches_the_regions_last_dimensions_like_tvm():
    # test_tir_schedule_tensorize.py tensorized_batch_matmul_outer_product: region (1, 16, 1), shape [16, 1]
    @T.prim_func
    def f(A: T.Buffer((2, 16, 4), "float32"), B: T.Buffer((2, 16, 4), "float32")):
        for n, k in T.grid(2, 4):
            with T.block("b"):
                vn, vk = T.axis.remap("SS", [n, k])
                A_1 = T.match_buffer(A[vn, 0:16, vk], [16, 1])
                for x in range(16):
                    B[vn, x, vk] = A_1[x, 0] * 2.0

    a = np.random.default_rng(2).standard_normal((2, 16, 4)).astype("float32")
    b = np.zeros_like(a)
    tdsl.interpret(f, a, b)
    np.testing.assert_allclose(b, a * 2, rtol=1e-6)


def test_extern_call_regions_as_declared_when_the_buffer_is_listed():
    # tensorized_batch_matmul_dot_product: vec4add(C.data, ..., A.data, ..., B.data, ...) declares
    # A and B read only; TVM trusts that, and so does tdsl once the buffer is listed at all
    src = """
@T.prim_func
def f(A: T.Buffer((8,), "float32"), C: T.Buffer((1,), "float32")):
    with T.block("b"):
        T.reads(A[0:4], C[0])
        T.writes(C[0])
        T.evaluate(T.call_extern("int32", "vec4add", C.data, A.data))
"""
    f = tdsl.parse(src)
    sch = tdsl.Schedule(f)
    assert _regions(sch.get(sch.get_block("b"))) == ([("A", [("0", "4")]), ("C", [("0", "1")])],
                                                     [("C", [("0", "1")])])
    # a buffer whose address is passed but that is listed nowhere stays refused
    with pytest.raises(tdsl.ScriptError, match="reads A, but T.reads does not list it"):
        tdsl.parse(src.replace("T.reads(A[0:4], C[0])", "T.reads(C[0])"))
