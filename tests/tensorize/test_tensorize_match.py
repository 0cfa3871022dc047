"""TensorIntrin registry, blockize, and tensorize's structural matching (and each mismatch)."""
from __future__ import annotations

import inspect
import re
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tz_kernels import gemm, refused, register_double16, same_results, tiled_gemm

import tdsl
from tdsl import T

# registry ----------------------------------------------------------------------------------

def test_registry_lists_builtins_and_user_intrinsics():
    name = register_double16()
    names = tdsl.TensorIntrin.list()
    assert name in names
    for builtin in ("x86.avx512.fp32_8x32x64", "x86.avx2.fp32_4x16x64", "x86.avx512vnni.dot_u8s8s32_16x4",
                    "x86.avxvnni.dot_u8s8s32_8x4", "cuda.wmma.mma_16x16x16_f16f32", "cuda.wmma.fill_16x16_f32"):
        assert builtin in names
    intrin = tdsl.TensorIntrin.get("x86.avx512.fp32_8x32x64")
    assert intrin.target == "cpu" and intrin.features == ("avx512f",)


def test_family_makes_intrinsics_on_demand():
    intrin = tdsl.TensorIntrin.get("x86.avx2.fp32_2x24x3")
    assert [tuple(int(s.value) for s in p.shape) for p in intrin.desc.params] == [(2, 3), (3, 24), (2, 24)]


def test_unknown_name_suggests_close_ones():
    with pytest.raises(tdsl.ScheduleError) as info:
        tdsl.TensorIntrin.get("x86.avx2.fp32_4x16_64")
    assert "did you mean" in str(info.value) and "x86.avx2.fp32_4x16x64" in str(info.value)


def test_register_checks_the_pair():
    desc = tdsl.parse(textwrap.dedent(register_double16.__globals__["DOUBLE16_DESC"]))
    with pytest.raises(ValueError, match="already registered"):
        tdsl.TensorIntrin.register("double16", desc, desc)
    other = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((16,), "float64"), B: T.Buffer((16,), "float32")):
    B[T.Ramp(0, 1, 16)] = T.cast(A[T.Ramp(0, 1, 16)], "float32x16")
''')
    with pytest.raises(ValueError, match="parameter 0"):
        tdsl.TensorIntrin.register("bad_pair", desc, other)
    with pytest.raises(TypeError):
        tdsl.TensorIntrin.register("bad_kind", desc, "not a function")


# blockize ----------------------------------------------------------------------------------

def test_blockize_gemm_tile_keeps_meaning():
    f, sch, i1 = tiled_gemm(32, 32, 32, 4, 16, 8)
    outer = sch.blockize(i1)
    assert outer.name == "C_o"
    text = sch.func.script()
    assert 'T.block("C_init")' in text and "vi_o * 4 + vi_i" in text
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((32, 32)).astype("float32") for _ in range(3)]
    same_results(sch.func, f, args)


def test_blockize_refuses_two_blocks():
    f = tdsl.parse('''
@T.prim_func
def two(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = A[vi]
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            C[vi] = A[vi]
''')
    sch = tdsl.Schedule(f)
    (i,) = sch.get_loops(sch.get_block("B"))
    refused(sch, lambda: sch.blockize(i), "loop i", "one block", "blocks inside: \"B\", \"C\"")


def test_blockize_refuses_fused_binding_it_cannot_divide():
    f = gemm(8, 8, 8)
    sch = tdsl.Schedule(f)
    i, j, _k = sch.get_loops(sch.get_block("C"))
    fused = sch.fuse(i, j)
    _, inner = sch.split(fused, factors=[None, 3])  # 3 does not divide vj's extent 8
    refused(sch, lambda: sch.blockize(inner), "blockize", "divide")


# tensorize: success --------------------------------------------------------------------------

def test_tensorize_user_intrinsic_on_a_row():
    name = register_double16()
    f = tdsl.parse('''
@T.prim_func
def scale(A: T.Buffer((4, 32), "float32"), B: T.Buffer((4, 32), "float32")):
    for i, j in T.grid(4, 32):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2)
''')
    sch = tdsl.Schedule(f)
    _i, j = sch.get_loops(sch.get_block("B"))
    _, j1 = sch.split(j, factors=[None, 16])
    sch.tensorize(j1, name)
    text = sch.func.script()
    assert "tdsl.tensor_intrin" in text and "double16" in text
    a = np.random.default_rng(1).standard_normal((4, 32)).astype("float32")
    same_results(sch.func, f, [a, np.zeros_like(a)])
    lowered = tdsl.lower(sch, target="cpu").script()
    assert "T.Ramp" in lowered and "T.Broadcast(T.float32(2.0), 16)" in lowered


def test_tensorize_fp32_microkernel_matches_and_interprets():
    f, sch, i1 = tiled_gemm(16, 32, 16, 8, 32, 4)
    sch.tensorize(i1, "x86.avx512.fp32_8x32x4")
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(s).astype("float32") for s in ((16, 16), (16, 32), (16, 32))]
    same_results(sch.func, f, args)
    assert "tensorize" in str(sch.trace)


def test_tensorize_block_handle_after_blockize():
    _f, sch, i1 = tiled_gemm(8, 16, 8, 4, 16, 4)
    block = sch.blockize(i1)
    sch.tensorize(block, "x86.avx2.fp32_4x16x4")
    sch.undo()
    assert "tdsl.tensor_intrin" not in sch.func.script()


# tensorize: each kind of mismatch ------------------------------------------------------------

def test_mismatch_extent_says_which_split():
    _, sch, i1 = tiled_gemm(32, 32, 32, 8, 32, 8)
    msg = refused(sch, lambda: sch.tensorize(i1, "x86.avx2.fp32_4x16x8"), "extent 8", "extent", "sch.split(i_1")
    assert "factors=[None, 4]" in msg


def test_mismatch_dtype():
    _, sch, i1 = tiled_gemm(8, 16, 8, 4, 16, 4, dt="float64")
    refused(sch, lambda: sch.tensorize(i1, "x86.avx2.fp32_4x16x4"), "dtype float64", "float32")


def test_mismatch_loop_order_suggests_reorder():
    f = gemm(8, 16, 4)
    sch = tdsl.Schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, factors=[None, 4])
    sch.reorder(i0, i1, k, j)
    refused(sch, lambda: sch.tensorize(i1, "x86.avx2.fp32_4x16x4"), "ordered (i_1, k, j)", "sch.reorder(i_1, j, k)")


def test_mismatch_index_pattern():
    f = tdsl.parse('''
@T.prim_func
def gemm_nt(A: T.Buffer((4, 4), "float32"), B: T.Buffer((16, 4), "float32"), C: T.Buffer((4, 16), "float32")):
    for i, j, k in T.grid(4, 16, 4):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj, vk]
''')
    sch = tdsl.Schedule(f)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    refused(sch, lambda: sch.tensorize(i, "x86.avx2.fp32_4x16x4"), "B[vj, vk]", "varies inside the tile",
            "transform_layout")


def test_mismatch_buffer_count():
    f = tdsl.parse('''
@T.prim_func
def gemm_bias(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 16), "float32"), D: T.Buffer((4, 16), "float32"),
              C: T.Buffer((4, 16), "float32")):
    for i, j, k in T.grid(4, 16, 4):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj] + D[vi, vj]
''')
    sch = tdsl.Schedule(f)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    refused(sch, lambda: sch.tensorize(i, "x86.avx2.fp32_4x16x4"), "uses 4 buffers", "uses 3")


def test_mismatch_one_buffer_in_two_roles():
    f = tdsl.parse('''
@T.prim_func
def square(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(4, 16, 4):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            C[vi, vj] = C[vi, vj] + A[vi, vk] * A[vk, vj]
''')
    sch = tdsl.Schedule(f)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    refused(sch, lambda: sch.tensorize(i, "x86.avx2.fp32_4x16x4"), "uses 2 buffers")


def test_mismatch_partial_tile_predicate():
    f = gemm(6, 16, 4)
    sch = tdsl.Schedule(f)
    i, _j, _k = sch.get_loops(sch.get_block("C"))
    _, i1 = sch.split(i, factors=[None, 4])
    refused(sch, lambda: sch.tensorize(i1, "x86.avx2.fp32_4x16x4"), "does not divide", "extent (6)")


ROWSUM_DESC = '''
@T.prim_func
def rowsum_desc(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
    for i, k in T.grid(4, 8):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vk]
'''

ROWSUM_IMPL = '''
@T.prim_func
def rowsum_impl(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = T.float32(0)
        for k in range(8):
            B[i] = B[i] + A[i, k]
'''

ROWSUM = '''
@T.prim_func
def rowsum(A: T.Buffer((8, {k}), "float32"), B: T.Buffer((8,), "float32")):
    for i, k in T.grid(8, {k}):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vk]
'''


def _rowsum_intrin() -> str:
    if not tdsl.TensorIntrin.exists("test.rowsum_init"):
        tdsl.TensorIntrin.register("test.rowsum_init", tdsl.parse(ROWSUM_DESC), tdsl.parse(ROWSUM_IMPL))
    return "test.rowsum_init"


def test_mismatch_missing_init():
    name = _rowsum_intrin()
    sch = tdsl.Schedule(tdsl.parse(ROWSUM.format(k=16)))
    i, k = sch.get_loops(sch.get_block("B"))
    i0, i1 = sch.split(i, factors=[None, 4])
    k0, k1 = sch.split(k, factors=[None, 8])
    sch.reorder(i0, k0, i1, k1)
    refused(sch, lambda: sch.tensorize(i1, name), "has no T.init()", "initialises", "whole reduction")


def test_description_with_init_matches_a_whole_reduction_tile():
    name = _rowsum_intrin()
    f = tdsl.parse(ROWSUM.format(k=8))
    sch = tdsl.Schedule(f)
    i, _ = sch.get_loops(sch.get_block("B"))
    _, i1 = sch.split(i, factors=[None, 4])
    sch.tensorize(i1, name)
    a = np.random.default_rng(7).standard_normal((8, 8)).astype("float32")
    same_results(sch.func, f, [a, np.full(8, np.nan, "float32")])
    kernel = tdsl.build(sch, target="cpu")
    np.testing.assert_allclose(kernel(a), a.sum(axis=1), rtol=1e-5)


def test_mismatch_operation():
    f = tdsl.parse('''
@T.prim_func
def gemm_sub(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 16), "float32"), C: T.Buffer((4, 16), "float32")):
    for i, j, k in T.grid(4, 16, 4):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            C[vi, vj] = C[vi, vj] - A[vi, vk] * B[vk, vj]
''')
    sch = tdsl.Schedule(f)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    refused(sch, lambda: sch.tensorize(i, "x86.avx2.fp32_4x16x4"), "computes", "C[vi, vj] - A[vi, vk]")


def test_mismatch_unknown_intrinsic_names_the_loop():
    _, sch, i1 = tiled_gemm(8, 16, 4, 4, 16, 4)
    refused(sch, lambda: sch.tensorize(i1, "x86.avx2.fp32_4x16x"), "unknown tensor intrinsic", "did you mean")


def test_mismatch_scope():
    f = tdsl.parse('''
@T.prim_func
def copy(A: T.Buffer((16, 16), "float16"), B: T.Buffer((16, 16), "float16")):
    for i, j in T.grid(16, 16):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj]
''')
    sch = tdsl.Schedule(f)
    i, _ = sch.get_loops(sch.get_block("B"))
    refused(sch, lambda: sch.tensorize(i, "cuda.wmma.load_a_16x16_f16_global"), "scope 'global'",
            "'wmma.matrix_a'", "cache_read")


def test_mismatch_strides_of_packed_operand():
    f = tdsl.parse('''
@T.prim_func
def dot(A: T.Buffer((8,), "uint8"), B: T.Buffer((16, 8), "int8"), C: T.Buffer((16,), "int32")):
    for j, k in T.grid(16, 8):
        with T.block("C"):
            vj, vk = T.axis.remap("SR", [j, k])
            C[vj] = C[vj] + T.cast(A[vk], "int32") * T.cast(B[vj, vk], "int32")
''')
    sch = tdsl.Schedule(f)
    j, k = sch.get_loops(sch.get_block("C"))
    k0, k1 = sch.split(k, factors=[None, 4])
    sch.reorder(k0, j, k1)
    refused(sch, lambda: sch.tensorize(j, "x86.avx512vnni.dot_u8s8s32_16x4"), "stride 8", "needs 4")


# docstring examples ------------------------------------------------------------------------

def _section(doc: str, title: str) -> str:
    m = re.search(rf"^\s*{title}::\n\n(.*?)(?=^\s*\w+::\n|\Z)", doc, re.DOTALL | re.MULTILINE)
    assert m, f"no {title}:: section"
    return textwrap.dedent(m.group(1)).strip() + "\n"


@pytest.mark.parametrize("name", ["blockize", "tensorize"])
def test_docstring_example(name):
    import tz_kernels

    doc = inspect.getdoc(getattr(tdsl.Schedule, name))
    before = tdsl.parse(_section(doc, "Before"))
    after = tdsl.parse(_section(doc, "After"))
    scope = {"tdsl": tdsl, "T": T, "before": before,
             "double16_desc": tdsl.parse(tz_kernels.DOUBLE16_DESC), "double16_impl": tdsl.parse(tz_kernels.DOUBLE16_IMPL)}
    code = _section(doc, "Call")
    if tdsl.TensorIntrin.exists("double16"):
        code = code.replace('tdsl.TensorIntrin.register("double16", double16_desc, double16_impl)\n', "")
    exec(code, scope)  # noqa: S102 - the docstring's own example
    sch = scope["sch"]
    assert tdsl.structural_diff(sch.func, after) is None, tdsl.structural_diff(sch.func, after)
    a = np.random.default_rng(3).standard_normal([int(s.value) for s in before.params[0].shape]).astype("float32")
    same_results(sch.func, before, [a, np.zeros_like(a)])


def test_trace_replays_blockize_and_tensorize():
    f, sch, i1 = tiled_gemm(8, 32, 8, 4, 16, 4)
    sch.tensorize(i1, "x86.avx2.fp32_4x16x4")
    assert 'intrin_name="x86.avx2.fp32_4x16x4"' in str(sch.trace)
    replay = sch.trace.apply_to(f)
    assert tdsl.structural_diff(replay.func, sch.func) is None
    sch2 = tdsl.Schedule(f)
    b = sch2.blockize(sch2.get_loops(sch2.get_block("C"))[0])
    assert b.name == "C_o" and "sch.blockize(" in str(sch2.trace)


@settings(max_examples=12, deadline=None)
@given(fi=st.sampled_from([1, 2, 4, 8]), fj=st.sampled_from([1, 2, 4, 8]), fk=st.sampled_from([1, 2, 4, 8]),
       order=st.permutations(range(3)), at=st.integers(0, 5))
def test_blockize_anywhere_keeps_meaning(fi, fj, fk, order, at):
    f = gemm(8, 8, 8)
    sch = tdsl.Schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    outer, inner = zip(*(sch.split(lp, factors=[None, fac]) for lp, fac in ((i, fi), (j, fj), (k, fk))))
    sch.reorder(*[outer[x] for x in order], *inner)
    loops = sch.get_loops(sch.get_block("C"))
    try:
        sch.blockize(loops[at])
    except tdsl.ScheduleError as err:  # only the init of a mixed nest may be refused
        assert "spatial and reduction" in str(err)
        return
    rng = np.random.default_rng(at)
    args = [rng.standard_normal((8, 8)).astype("float32") for _ in range(3)]
    same_results(sch.func, f, args)


def test_decompose_reduction_then_tensorize_the_update():
    f = gemm(8, 16, 4)
    sch = tdsl.Schedule(f)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    _, i1 = sch.split(i, factors=[None, 4])
    msg = refused(sch, lambda: sch.tensorize(i1, "x86.avx2.fp32_4x16x4"), "T.init()", "decompose_reduction")
    assert "lacks" in msg
    sch.decompose_reduction(sch.get_block("C"), i1)
    sch.tensorize(i1, "x86.avx2.fp32_4x16x4")
    rng = np.random.default_rng(8)
    args = [rng.standard_normal(s).astype("float32") for s in ((8, 4), (4, 16), (8, 16))]
    same_results(sch.func, f, args)


COPY_PROBE = '''
@T.prim_func
def copy_{role}(A: T.Buffer((2, 16), "float32", strides=("a_s", 1), offset="a_off"), B: T.Buffer((2, 16), "float32")):
{body}
'''


def test_impl_binds_strides_offsets_and_regions():
    from tdsl.lower.tensorize import apply_tensor_intrinsics

    if not tdsl.TensorIntrin.exists("test.copy_probe"):
        desc = tdsl.parse(COPY_PROBE.format(role="desc", body='''    for i, j in T.grid(2, 16):
        with T.block("copy"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj]'''))
        impl = tdsl.parse(COPY_PROBE.format(
            role="impl", body='    T.evaluate(T.call_extern("int32", "copy_probe", a_off, a_s, B[1, 3]))'))
        tdsl.TensorIntrin.register("test.copy_probe", desc, impl)
    f = tdsl.parse('''
@T.prim_func
def cp(A: T.Buffer((8, 64), "float32"), B: T.Buffer((8, 64), "float32")):
    for i, j in T.grid(8, 64):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj]
''')
    sch = tdsl.Schedule(f)
    i, j = sch.get_loops(sch.get_block("B"))
    i0, i1 = sch.split(i, factors=[None, 2])
    j0, _ = sch.split(j, factors=[None, 16])
    sch.reorder(i0, j0, i1)
    sch.tensorize(i1, "test.copy_probe")
    text = apply_tensor_intrinsics(sch.func, "cpu").script()
    # the offset of the tile A[vi_o * 2, vj_o * 16] in A's storage, A's row stride, and B[1, 3] of the tile
    assert '"copy_probe", vi_o * 128 + vj_o * 16, 64, B[vi_o * 2 + 1, vj_o * 16 + 3])' in text, text
