"""TVMScript as TVM's schedule tests write it parses unchanged (SPEC section 10), means what it
means in TVM (checked against numpy), and prints back to text that parses to the same function."""
import numpy as np
import pytest

import tdsl
from tdsl import T


def roundtrip(func):
    back = tdsl.parse(func.script())
    diff = tdsl.structural_diff(back, func)
    assert diff is None, f"{diff}\n{func.script()}"
    return back


def test_handle_params_match_buffer_sblock_root_and_func_attr():
    # test_tir_schedule_rfactor.py: matmul (T.handle + T.match_buffer, T.sblock, root block written out)
    @T.prim_func(private=True)
    def matmul(a: T.handle, b: T.handle, c: T.handle) -> None:
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        A = T.match_buffer(a, [16, 16])
        B = T.match_buffer(b, [16, 16], dtype="float32", offset_factor=1, align=64)
        C = T.match_buffer(c, (16, 16), "float32", elem_offset=0, buffer_type="default")
        with T.sblock("root"):
            T.reads([])
            T.writes([])
            for i, j, k in T.grid(16, 16, 16):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    with T.init():
                        C[vi, vj] = 0.0
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    assert [p.name for p in matmul.params] == ["A", "B", "C"]
    assert dict(matmul.attrs)["tir.noalias"] is True
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 16)).astype("float32"), rng.standard_normal((16, 16)).astype("float32")
    np.testing.assert_allclose(tdsl.interpret(matmul, a, b), a @ b, rtol=1e-4, atol=1e-4)
    roundtrip(matmul)
    plain = tdsl.parse('''
@T.prim_func
def matmul(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    T.func_attr({"global_symbol": "main", "tir.noalias": True})
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
''')
    assert tdsl.structural_equal(matmul, plain)


def test_int64_symbolic_vars_shapes_and_let_annotations():
    # test_tir_schedule_compute_inline.py: test_compute_inline_softmax (n, m = T.int64(), T.int64())
    @T.prim_func(s_tir=True)
    def f(a: T.handle, b: T.handle):
        n, m = T.int64(), T.int64()
        A = T.match_buffer(a, (n, m))
        B = T.match_buffer(b, (n, m))
        X = T.sblock_alloc_buffer((n, m))
        for i, j in T.grid(n, m):
            with T.sblock("X"):
                vi, vj = T.axis.remap("SS", [i, j])
                X[vi, vj] = A[vi, vj] * 2.0
        for i, j in T.grid(n, m):
            with T.sblock("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                x: T.float32 = X[vi, vj] + 1.0
                y: T.let[T.float32] = x * 3.0
                B[vi, vj] = y

    assert str(f.params[0].shape[0].dtype) == "int64"
    a = np.random.default_rng(1).standard_normal((5, 3)).astype("float32")
    np.testing.assert_allclose(tdsl.interpret(f, a), (a * 2 + 1) * 3, rtol=1e-6)
    text = f.script()
    assert "n = T.int64()" in text and "T.match_buffer" in text  # an int64 dimension is no string
    roundtrip(f)


def test_cache_read_of_an_int64_shaped_buffer():
    # test_tir_schedule_cache_read_write.py: test_cache_read_location... elementwise_shape_int64
    @T.prim_func(s_tir=True)
    def elementwise_shape_int64(a: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (T.int64(128), T.int64(128)))
        B = T.sblock_alloc_buffer((T.int64(128), T.int64(128)))
        C = T.match_buffer(c, (T.int64(128), T.int64(128)))
        for i, j in T.grid(128, 128):
            with T.sblock("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * 2.0
        for i, j in T.grid(128, 128):
            with T.sblock("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = B[vi, vj] + 1.0

    sch = tdsl.Schedule(elementwise_shape_int64)
    sch.cache_read(sch.get_block("B"), 0, "global")
    loops = sch.get_loops(sch.get_block("A_global"))
    assert all(str(sch.func.script()).count("T.grid(T.int64(128), T.int64(128))") == 1 for _ in loops)
    a = np.random.default_rng(2).standard_normal((128, 128)).astype("float32")
    np.testing.assert_allclose(tdsl.interpret(sch.func, a), a * 2 + 1, rtol=1e-6)
    roundtrip(sch.func)


def test_match_buffer_of_a_sub_region_inside_a_block():
    # test_tir_schedule_blockize.py / _tensorize.py: T.match_buffer(A[vi*4:vi*4+4, ...], (4, 4))
    @T.prim_func
    def f(a: T.handle, c: T.handle):
        A = T.match_buffer(a, (16, 16))
        C = T.match_buffer(c, (16, 16))
        for i, j in T.grid(4, 4):
            with T.sblock("blk"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(A[vi * 4:vi * 4 + 4, vj * 4:vj * 4 + 4])
                T.writes(C[vi * 4:vi * 4 + 4, vj * 4:vj * 4 + 4])
                A0 = T.match_buffer(A[vi * 4:vi * 4 + 4, vj * 4:vj * 4 + 4], (4, 4), offset_factor=1)
                C0 = T.match_buffer(C[vi * 4:vi * 4 + 4, vj * 4:vj * 4 + 4], (4, 4), offset_factor=1)
                R = T.match_buffer(A[vi * 4, vj * 4:vj * 4 + 4], (4,))
                for x, y in T.grid(4, 4):
                    C0[x, y] = A0[x, y] + R[y]

    a = np.random.default_rng(3).standard_normal((16, 16)).astype("float32")
    want = a + np.repeat(a[::4], 4, axis=0)
    np.testing.assert_allclose(tdsl.interpret(f, a), want, rtol=1e-6)
    roundtrip(f)


def test_access_ptr_and_data_are_addresses():
    # test_tir_schedule_tensorize.py: intrinsics pass A.access_ptr("r") / A.data to extern calls
    @T.prim_func
    def f(a: T.handle):
        A = T.match_buffer(a, (4, 16))
        for i in range(4):
            with T.sblock("b"):
                vi = T.axis.spatial(4, i)
                A0 = T.match_buffer(A[vi, 0:16], (16,))
                T.evaluate(T.call_extern("int32", "touch", A0.access_ptr("rw"), A.data, A0.access_ptr("r", offset=4)))

    text = f.script()
    assert "T.address_of(A[vi, 0])" in text and "T.address_of(A[0, 0])" in text
    assert "T.address_of(A[vi, 4])" in text
    roundtrip(f)


def test_init_in_a_block_without_reduction_iterators_runs_every_time():
    # test_tir_schedule_reduction.py: a T.init() in a block without a reduction iterator (TVM runs it
    # on every execution of the block, before the body)
    @T.prim_func
    def f(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("b"):
                vi = T.axis.spatial(8, i)
                with T.init():
                    B[vi] = T.float32(1)
                B[vi] = B[vi] + A[vi]

    a = np.arange(8, dtype="float32")
    b = np.full(8, 100, dtype="float32")
    tdsl.interpret(f, a, b)
    np.testing.assert_allclose(b, a + 1)
    roundtrip(f)


def test_list_and_dict_annotation_values():
    # test_tir_schedule_utilities.py: test_annotate_unannotate_loop / _block
    @T.prim_func
    def f(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (8, 8))
        B = T.match_buffer(b, (8, 8))
        for i in T.serial(0, 8, annotations={"test1": "aaa", "test4": {"arr": [0, 0], "key": 3}}):
            for j in T.serial(0, 8, annotations={"test2": 612, "test3": ["aa", 1]}):
                with T.sblock("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    T.sblock_attr({"test2": 0.22, "test3": ["aa", 1]})
                    B[vi, vj] = A[vi, vj]

    text = f.script()
    assert "'test4': {'arr': [0, 0], 'key': 3}" in text and "'test3': ['aa', 1]" in text
    roundtrip(f)
    sch = tdsl.Schedule(f)
    i = sch.get_loops(sch.get_block("B"))[0]
    sch.annotate(i, "test5", {"arr": [1, 2]})
    assert "'test5': {'arr': [1, 2]}" in sch.func.script()
    with pytest.raises(tdsl.ScheduleError, match="annotation value"):
        sch.annotate(i, "bad", {1: 2})


def test_loop_whose_extent_uses_the_outer_variable_round_trips():
    # the round-trip bug: for j in range(i) printed as T.grid(128, i)
    @T.prim_func
    def tri(A: T.Buffer((16, 16), "float32")):
        for i in range(16):
            for j in range(i):
                with T.block("b"):
                    vi = T.axis.spatial(16, i)
                    vj = T.axis.spatial(16, j)
                    A[vi, vj] = T.float32(0)

    assert "T.grid" not in tri.script()
    roundtrip(tri)


@pytest.mark.parametrize("source, construct, instead", [
    ("def f(a: T.Ptr):\n    pass", "T.Ptr", "T.Buffer(shape, dtype)"),
    ("def f(A: T.Buffer((8,), 'float32')):\n    B = T.decl_buffer((8,), 'float32')", "T.decl_buffer",
     "T.alloc_buffer"),
    ("def f(A: T.Buffer((8,), 'float32')):\n    with T.launch_thread('threadIdx.x', 8):\n        pass",
     "T.launch_thread", "T.thread_binding"),
    ("def f(A: T.Buffer((8,), 'float32')):\n    T.evaluate(T.type_annotation(dtype='float32'))",
     "T.type_annotation", "T.address_of"),
    ("def f(A: T.Buffer((8,), 'float32')):\n    T.Assert(True, 'x')", "T.Assert", "if c"),
])
def test_absent_tvm_constructs_name_themselves_and_what_tdsl_writes(source, construct, instead):
    with pytest.raises(tdsl.ScriptError) as info:
        tdsl.parse("@T.prim_func\n" + source)
    assert construct in str(info.value) and instead in str(info.value)


def test_a_handle_without_match_buffer_is_a_script_error():
    with pytest.raises(tdsl.ScriptError, match="'a' has no T.match_buffer"):
        tdsl.parse("@T.prim_func\ndef f(a: T.handle):\n    pass")
    with pytest.raises(tdsl.ScriptError, match="T.handle parameter"):
        tdsl.parse("@T.prim_func\ndef f(a: T.handle, b: T.handle):\n    B = T.match_buffer(b, (4,))\n"
                   "    for i in range(4):\n        with T.block('x'):\n            vi = T.axis.spatial(4, i)\n"
                   "            B[vi] = a[vi]")


def test_t_handle_is_an_annotation_not_an_attribute_error():
    # before: `a: T.handle` raised AttributeError when Python evaluated the annotation
    assert repr(T.handle) == "T.handle" and repr(T.sblock) == "T.sblock"
    with pytest.raises(TypeError, match="unknown option"):
        T.prim_func(bogus=True)


def test_the_builtin_table_names_every_t_name():
    from tdsl.script import builtins

    for name in ("block", "match_buffer", "handle", "grid", "exp", "float32"):
        assert name in builtins.BUILTINS
        assert hasattr(T, name)
    assert builtins.resolve("sblock") == "block"
    assert "| `T.sblock` | synonym | `T.block` |" in builtins.markdown_table()


def test_docs_show_the_builtin_table():
    import pathlib

    from tdsl.script import builtins

    docs = pathlib.Path(__file__).resolve().parents[2] / "docs" / "script.md"
    assert builtins.markdown_table() in docs.read_text(), "regenerate docs/script.md's table from builtins"
