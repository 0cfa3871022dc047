"""transform_layout / transform_block_layout as TVM's test_tir_schedule_transform_layout.py uses
them: symbolic dimensions in the map (`x * 32 * n + y * n + z * n + w`) with
`assume_injective_transform=True`, the block's read order kept, padding found for maps with
offsets and constant outputs (`(0, (i + 1) // 8, (i + 1) % 8)`), and `T.int64(0)` in Python."""
import numpy as np
import pytest
from sched_check import check, expect_error, kernel

import tdsl
from tdsl import T

NT_MATMUL = '''
@T.prim_func
def nt_matmul(a: T.handle, b: T.handle, c: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (T.int64(1), T.int64(32), T.int64(1), T.int64(128)), "float32")
    B = T.match_buffer(b, (T.int64(1), T.int64(32), n, T.int64(128)), "float32")
    C = T.match_buffer(c, {c_shape}, "float32")
    for i0, i1, i2, i3, k in T.grid(T.int64(1), T.int64(32), T.int64(1), n, T.int64(128)):
        with T.sblock("NT_matmul"):
            v_i0, v_i1, v_i2, v_i3, v_k = T.axis.remap("SSSSR", [i0, i1, i2, i3, k])
            T.reads(A[v_i0, v_i1, v_i2, v_k], B[v_i0, v_i1, v_i3, v_k])
            T.writes(C[{c_index}])
            with T.init():
                C[{c_index}] = T.float32(0)
            C[{c_index}] = C[{c_index}] + A[v_i0, v_i1, v_i2, v_k] * B[v_i0, v_i1, v_i3, v_k]
'''


def nt_matmul(flat: bool) -> tdsl.PrimFunc:
    if flat:
        return kernel(NT_MATMUL.format(c_shape="(n * T.int64(32),)", c_index="v_i1 * n + v_i3"))
    return kernel(NT_MATMUL.format(c_shape="(T.int64(1), T.int64(32), T.int64(1), n)",
                                   c_index="v_i0, v_i1, v_i2, v_i3"))


def _args(func, n):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 32, 1, 128)).astype("float32")
    b = rng.standard_normal((1, 32, n, 128)).astype("float32")
    return a, b


def test_transform_layout_with_symbolic_bound():
    before = nt_matmul(flat=False)
    _, _, n, _ = before.params[1].ty.shape          # TVM's spelling; a tdsl Buffer is its own type
    sch = tdsl.Schedule(before)
    block = sch.get_sblock("NT_matmul")
    sch.transform_layout(block, ("write", 0), lambda x, y, z, w: x * 32 * n + y * n + z * n + w,
                         assume_injective_transform=True)
    tdsl.assert_structural_equal(sch.mod["main"], nt_matmul(flat=True))
    assert "assume_injective_transform=True" in str(sch.trace)
    tdsl.assert_structural_equal(sch.trace.apply(before).func, sch.func)
    a, b = _args(before, 5)
    want = tdsl.interpret(before, a, b)
    got = tdsl.interpret(sch.func, a, b)
    np.testing.assert_allclose(got, want.reshape(-1), rtol=1e-5)


def test_symbolic_map_needs_the_users_word_and_is_still_checked_at_small_sizes():
    before = nt_matmul(flat=False)
    n = before.params[1].shape[2]
    sch = tdsl.Schedule(before)
    block = sch.get_sblock("NT_matmul")
    message = expect_error(sch, lambda: sch.transform_layout(block, ("write", 0),
                                                             lambda x, y, z, w: x * 32 * n + y * n + z * n + w),
                           "symbolic shape", "assume_injective_transform=True")
    assert "fix:" in message
    # y + w sends (y, w) = (1, 0) and (0, 1) to one place: found at n = 2 although the user says otherwise
    expect_error(sch, lambda: sch.transform_layout(block, ("write", 0), lambda x, y, z, w: y + w,
                                                   assume_injective_transform=True),
                 "sends two elements of C to one place when n = 2", "assume_injective_transform=True")


def test_transform_block_layout_with_symbolic_bound_keeps_the_read_order():
    before = nt_matmul(flat=True)
    n = before.params[1].shape[2]
    sch = tdsl.Schedule(before)
    sch.transform_block_layout(sch.get_sblock("NT_matmul"),
                               lambda x, y, z, w, k: (x * 32 * n + y * n + z * n + w, k))
    block = sch.get(sch.get_sblock("NT_matmul"))
    assert [r.buffer.name for r in block.reads] == ["A", "B", "C"]     # C's read added after the listed ones
    a, b = _args(before, 3)
    np.testing.assert_allclose(tdsl.interpret(sch.func, a, b), tdsl.interpret(before, a, b), rtol=1e-5)


def test_the_new_indices_are_simplified_in_the_blocks_domains():
    func = nt_matmul(flat=False)
    n = func.params[1].shape[2]
    sch = tdsl.Schedule(func)
    sch.transform_layout("NT_matmul", "C", lambda x, y, z, w: (x * 32 + y, z * n + w), assume_injective_transform=True)
    assert "C[v_i1, v_i3]" in sch.func.script()


# TVM's test_index_map_dtype_legalize_with_constant: padding of a map with an offset and a constant output

@T.prim_func
def fill16(A: T.Buffer(T.int64(16), "int32")):
    for i in T.grid(T.int64(16)):
        with T.sblock("block"):
            vi = T.axis.remap("S", [i])
            A[vi] = T.cast(vi, "int32") + 1


def test_padding_of_a_map_with_an_offset_and_a_constant_output():
    sch = tdsl.Schedule(fill16)
    sch.transform_layout(block="block", buffer="A", pad_value=-7,
                         index_map=lambda i: [tdsl.ir.const(0, i.ty.dtype), (i + 1) // 8, (i + 1) % 8])
    got = tdsl.interpret(sch.func)
    want = np.full(24, -7, "int32")
    want[1:17] = np.arange(1, 17)
    np.testing.assert_array_equal(got.reshape(-1), want)
    assert got.shape == (1, 3, 8)
    check(sch, sch.func)   # prints and parses back


def test_dtype_constructors_make_constants_in_python():
    from tdsl.ir import Cast, FloatImm, IntImm, Var
    assert T.int64(0) == IntImm(0, tdsl.dtypes.int64) or isinstance(T.int64(0), IntImm)
    assert isinstance(T.float32(1.5), FloatImm) and T.float32(1.5).value == 1.5
    x = Var("x", tdsl.dtypes.int32)
    assert isinstance(T.int64(x), Cast) and T.int32(x) is x
    assert repr(T.int64()) == "T.int64"                  # TVM's annotation spelling stays an annotation


@pytest.mark.parametrize("shape", [(14,)])
def test_implicit_padding_with_assume_injective(shape):
    # TVM's test_implicit_padding_assume_injective: no pad_value, the padding is never read
    @T.prim_func
    def main(B: T.Buffer((14,), "int32")):
        A = T.alloc_buffer(14, "int32")
        for i in T.serial(14):
            with T.block("block"):
                vi = T.axis.remap("S", [i])
                A[vi] = vi
        for i in T.serial(14):
            with T.block("copy"):
                vi = T.axis.remap("S", [i])
                B[vi] = A[vi]

    sch = tdsl.Schedule(main)
    sch.transform_layout("block", "A", lambda i: [i // 4, i % 4], pad_value=None, assume_injective_transform=True)
    assert "T.alloc_buffer((4, 4)" in sch.func.script()
    check(sch, main)
