"""TVM's warp-matrix builtins and buffer addresses as opaque calls (test_tir_schedule_split_fuse.py,
test_tir_schedule_reorder.py: *_with_opaque_access; test_tir_schedule_tensorize.py's intrinsics):
they parse, print and schedule; an address passed to a call is an access of the whole buffer;
every backend refuses the builtins by name."""
import numpy as np
import pytest
from sched_check import check

import tdsl
from tdsl import T


@T.prim_func(s_tir=True)
def opaque_access(a: T.handle, b: T.handle) -> None:
    A = T.match_buffer(a, [16, 16], "float32")
    B = T.match_buffer(b, [16, 16], "float32")
    for i, j in T.grid(16, 16):
        with T.sblock("A"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads([])
            T.writes([A[0:16, 0:16]])
            A[vi, vj] = 1
    for i, j in T.grid(16, 16):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.evaluate(T.tvm_fill_fragment(B.data, 16, 16, 16, 0, vi * 16 + vj, dtype="handle"))


def _regions(func, name):
    from tdsl.script.printer import message_text

    block = tdsl.Schedule(func).get(name)
    def show(regions):
        return [(r.buffer.name, [(message_text(x.min), message_text(x.extent)) for x in r.region]) for r in regions]
    return show(block.reads), show(block.writes)


def test_wmma_builtin_writes_the_whole_fragment_buffer():
    reads, writes = _regions(opaque_access, "B")
    assert reads == [] and writes == [("B", [("0", "16"), ("0", "16")])]
    text = opaque_access.script()
    assert "T.tvm_fill_fragment(T.address_of(B[0, 0]), 16, 16, 16, 0, vi_1 * 16 + vj_1)" in text
    assert tdsl.structural_diff(tdsl.parse(text), opaque_access) is None


def test_split_fuse_reorder_of_blocks_with_opaque_access():
    # test_fuse_with_opaque_access / test_split_with_opaque_access / test_reorder_with_opaque_access
    sch = tdsl.Schedule(opaque_access)
    for name in ("A", "B"):
        sch.fuse(*sch.get_loops(name))
    assert "i_j_fused // 16" in sch.func.script()
    sch = tdsl.Schedule(opaque_access)
    for name in ("A", "B"):
        _, j = sch.get_loops(name)
        sch.split(j, factors=[None, 4])
    sch.reorder(*reversed(sch.get_loops("A")))
    out = [np.zeros((16, 16), "float32"), np.zeros((16, 16), "float32")]
    with pytest.raises(Exception, match="tvm_fill_fragment"):
        tdsl.interpret(sch.func, *out)


def test_address_passed_to_an_extern_call_reads_and_writes_the_whole_buffer():
    @T.prim_func(s_tir=True)
    def ext(A: T.Buffer((8, 4), "float32"), B: T.Buffer((8,), "float32")) -> None:
        for i in range(8):
            with T.sblock("E"):
                vi = T.axis.spatial(8, i)
                T.evaluate(T.call_extern("row_sum", T.address_of(A[vi, 0]), B[vi], dtype="int32"))
                # a prefetch is a hint: it touches nothing
                T.evaluate(T.call_extern("void", "llvm.prefetch.p0", T.address_of(B[vi]), 0, 3, 1))

    reads, writes = _regions(ext, "E")
    assert reads == [("A", [("0", "8"), ("0", "4")]), ("B", [("vi", "1")])]
    assert writes == [("A", [("0", "8"), ("0", "4")])]


@pytest.mark.parametrize("build", ["interpret", "llvm"])
def test_backends_refuse_wmma_builtins_by_name(build):
    a, b = np.zeros((16, 16), "float32"), np.zeros((16, 16), "float32")
    with pytest.raises(Exception, match="T.tvm_fill_fragment is a TVM warp-matrix") as info:
        if build == "interpret":
            tdsl.interpret(opaque_access, a, b)
        else:
            tdsl.build(opaque_access)
    assert "cuda.wmma" in str(info.value)


def test_cuda_source_refuses_wmma_builtins_by_name():
    from tdsl.backends.cuda import cuda_source

    @T.prim_func
    def fill(B: T.Buffer((16, 16), "float32")):
        for t in T.thread_binding(32, thread="threadIdx.x"):
            with T.block("B"):
                vt = T.axis.spatial(32, t)  # noqa: F841 - a block iterator
                T.evaluate(T.tvm_fill_fragment(B.data, 16, 16, 16, 0, T.float32(0), dtype="handle"))

    with pytest.raises(tdsl.TargetError, match="CUDA backend cannot compile it: T.tvm_fill_fragment"):
        cuda_source(fill)


def test_tvm_style_intrinsic_with_a_root_block_registers():
    # test_tir_schedule_tensorize.py's dot_product intrinsic: a root block with T.reads/T.writes;
    # the call_extern spelling with dtype= (TVM's other argument order)
    @T.prim_func(s_tir=True)
    def dot_desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (4,))
        B = T.match_buffer(b, (4,))
        C = T.match_buffer(c, ())
        with T.sblock("root"):
            T.reads(C[()], A[0:4], B[0:4])
            T.writes(C[()])
            for i in range(0, 4):
                with T.sblock("update"):
                    vi = T.axis.remap("R", [i])
                    C[()] = C[()] + A[vi] * B[vi]

    @T.prim_func(s_tir=True)
    def dot_impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (4,), offset_factor=1)
        B = T.match_buffer(b, (4,), offset_factor=1)
        C = T.match_buffer(c, (), offset_factor=1)
        with T.sblock("root"):
            T.reads(C[()], A[0:4], B[0:4])
            T.writes(C[()])
            T.evaluate(T.call_extern("vec4add", C.data, A.data, B.data, dtype="int32"))

    tdsl.TensorIntrin.register("test_tvm_style_dot4", dot_desc, dot_impl, override=True)
    assert tdsl.TensorIntrin.get("test_tvm_style_dot4", allow_missing=True) is not None
    assert tdsl.TensorIntrin.get("no_such_intrin", allow_missing=True) is None

    @T.prim_func(s_tir=True)
    def rowdot(A: T.Buffer((3, 8), "float32"), B: T.Buffer((3, 8), "float32"), C: T.Buffer((3,), "float32")):
        for i, k in T.grid(3, 8):
            with T.sblock("update"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    C[vi] = T.float32(0)
                C[vi] = C[vi] + A[vi, vk] * B[vi, vk]

    sch = tdsl.Schedule(rowdot)
    i, k = sch.get_loops("update")
    _, ki = sch.split(k, factors=[None, 4])
    sch.decompose_reduction("update", sch.get_loops("update")[1])
    sch.tensorize(ki, "test_tvm_style_dot4")
    check(sch, rowdot)  # the tensorized block computes through its description

    # test_tensorize_intrinsic_with_annotation: the implementation's root T.block_attr goes to the block
    @T.prim_func(s_tir=True)
    def dot_impl_annotated(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (4,), offset_factor=1)
        B = T.match_buffer(b, (4,), offset_factor=1)
        C = T.match_buffer(c, (), offset_factor=1)
        with T.sblock("root"):
            T.reads(C[()], A[0:4], B[0:4])
            T.writes(C[()])
            T.sblock_attr({"test_annotation": True})
            T.evaluate(T.call_extern("vec4add", C.data, A.data, B.data, dtype="int32"))

    assert tdsl.structural_diff(tdsl.parse(dot_impl_annotated.script()), dot_impl_annotated) is None
    tdsl.TensorIntrin.register("test_tvm_style_dot4_annotated", dot_desc, dot_impl_annotated, override=True)
    sch = tdsl.Schedule(rowdot)
    _, k = sch.get_loops("update")
    _, ki = sch.split(k, factors=[None, 4])
    sch.tensorize(ki, "test_tvm_style_dot4_annotated")
    notes = dict(sch.get(sch.get_block("update_o")).annotations)
    assert notes["test_annotation"] is True and notes["tdsl.tensor_intrin"] == "test_tvm_style_dot4_annotated"
    check(sch, rowdot)
