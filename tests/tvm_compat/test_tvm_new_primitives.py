"""TVM primitives tdsl did not have, ported from TVM's tests (test_tir_schedule_transform_layout.py,
test_tir_schedule_cache_read_write.py, test_tir_schedule_rfactor.py), in tdsl's syntax and at
smaller sizes: transform_block_layout, reindex_cache_read / reindex_cache_write, cache_read /
cache_write with several consumer_blocks, and two-buffer (argmax / argmin) reductions.

Every accepted step is checked against the interpreter (sched_check.check: round trip + same
results), replayed from its trace and from the trace's JSON; every refusal leaves the schedule
as it was (sched_check.expect_error)."""
import json

import numpy as np
import pytest
from dataflow_helpers import run_docstring_example
from sched_check import check, expect_error

import tdsl
from tdsl import T
from tdsl.ir.tree import find_realize, loops_in_scope
from tdsl.schedule.trace import Trace


def block_of(sch: tdsl.Schedule, name: str):
    return find_realize(sch.func.body, name)[0].block


def loop_extents(sch: tdsl.Schedule, name: str) -> list[int]:
    return [f.extent.value for f in loops_in_scope(find_realize(sch.func.body, name)[1])]


def replays(sch: tdsl.Schedule, original: tdsl.PrimFunc) -> None:
    """The trace replays onto `original`, directly and through its JSON, to the same function."""
    again = sch.trace.apply(original)
    assert tdsl.structural_diff(again.func, sch.func) is None
    from_json = Trace.from_json(json.dumps(sch.trace.as_json())).apply(original)
    assert tdsl.structural_diff(from_json.func, sch.func) is None


@pytest.mark.parametrize("name", ["transform_block_layout", "reindex_cache_read", "reindex_cache_write"])
def test_docstring_example(name):
    run_docstring_example(name)


# transform_block_layout ----------------------------------------------------------------------

@T.prim_func
def elementwise(A: T.Buffer((16, 8), "float32"), B: T.Buffer((16, 8), "float32")):
    # test_tir_schedule_transform_layout.py: elementwise (128 x 128 there)
    for i, j in T.grid(16, 8):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0


@T.prim_func
def conv2d_nhwc(Input: T.Buffer((1, 10, 10, 3), "float32"), Weight: T.Buffer((3, 3, 3, 8), "float32"),
                Conv: T.Buffer((1, 4, 4, 8), "float32")):
    # test_tir_schedule_transform_layout.py: conv2d_nhwc (stride 2, padded input), smaller
    PadInput = T.sblock_alloc_buffer([1, 12, 12, 3], dtype="float32")
    for i0, i1, i2, i3 in T.grid(1, 12, 12, 3):
        with T.sblock("PadInput"):
            i0_1, i1_1, i2_1, i3_1 = T.axis.remap("SSSS", [i0, i1, i2, i3])
            PadInput[i0_1, i1_1, i2_1, i3_1] = T.if_then_else(
                i1_1 >= 1 and i1_1 < 11 and i2_1 >= 1 and i2_1 < 11,
                Input[i0_1, i1_1 - 1, i2_1 - 1, i3_1], T.float32(0), dtype="float32")
    for i0, i1, i2, i3, i4, i5, i6 in T.grid(1, 4, 4, 8, 3, 3, 3):
        with T.sblock("conv2d_nhwc"):
            n, h, w, co, rh, rw, rc = T.axis.remap("SSSSRRR", [i0, i1, i2, i3, i4, i5, i6])
            with T.init():
                Conv[n, h, w, co] = T.float32(0)
            Conv[n, h, w, co] = Conv[n, h, w, co] + (
                PadInput[n, h * 2 + rh, w * 2 + rw, T.floordiv(co, 8) * 3 + rc] * Weight[rh, rw, rc, co])


@T.prim_func
def unit_dim(A: T.Buffer((1, 16), "float32"), C: T.Buffer((1, 16), "float32")):
    # test_tir_schedule_transform_layout.py: two_elementwise_unit_dim
    B = T.sblock_alloc_buffer((1, 16), "float32")
    for i, j in T.grid(1, 16):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j in T.grid(1, 16):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] + 1.0


@T.prim_func
def elementwise_int64(A: T.Buffer((T.int64(8), T.int64(8)), "float32"),
                      B: T.Buffer((T.int64(8), T.int64(8)), "float32")):
    # test_tir_schedule_transform_layout.py: test_transform_block_layout_int64_extent
    for i, j in T.grid(T.int64(8), T.int64(8)):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0


def test_transform_block_layout_basic():
    # test_transform_block_layout_basic: one fused iterator, indices read back with // and %
    sch = tdsl.Schedule(elementwise)
    sch.transform_block_layout("B", lambda i, j: (i * 8 + j,))
    assert loop_extents(sch, "B") == [128]
    assert "v0 // 8, v0 % 8" in sch.func.script()
    check(sch, elementwise)
    replays(sch, elementwise)


def test_transform_block_layout_conv2d_nhwc():
    # test_transform_block_layout_conv2d_nhwc: spatial and reduction iterators fused separately
    sch = tdsl.Schedule(conv2d_nhwc)
    sch.transform_block_layout(sch.get_sblock("conv2d_nhwc"),
                               lambda n, h, w, co, rh, rw, rc: (n * 16 + h * 4 + w, co, rh * 9 + rw * 3 + rc))
    block = block_of(sch, "conv2d_nhwc")
    assert [(iv.kind, iv.dom.extent.value) for iv in block.iter_vars] == [("S", 16), ("S", 8), ("R", 27)]
    check(sch, conv2d_nhwc)
    replays(sch, conv2d_nhwc)


def test_transform_block_layout_unit_dim_and_split():
    # test_transform_block_layout_unit_dim (a permutation), and a split of one iterator
    sch = tdsl.Schedule(unit_dim)
    sch.transform_block_layout("B", lambda i, j: (j, i))
    assert loop_extents(sch, "B") == [16, 1]
    check(sch, unit_dim)
    replays(sch, unit_dim)
    sch = tdsl.Schedule(elementwise)
    sch.transform_block_layout("B", lambda i, j: (j, i // 4, i % 4))
    assert loop_extents(sch, "B") == [8, 4, 4]
    check(sch, elementwise)
    replays(sch, elementwise)


def test_transform_block_layout_int64_extent():
    # test_transform_block_layout_int64_extent: the new loop and iterator are int64
    sch = tdsl.Schedule(elementwise_int64)
    sch.transform_block_layout("B", lambda i, j: (i * 8 + j,))
    (loop,) = sch.get_loops(sch.get_block("B"))
    assert str(loop.var.dtype) == "int64"
    check(sch, elementwise_int64)


@T.prim_func
def nt_matmul(a: T.handle, b: T.handle, c: T.handle):
    # test_transform_block_layout_with_symbolic_bound (smaller constant dimensions)
    n = T.int64()
    A = T.match_buffer(a, (T.int64(1), T.int64(4), T.int64(1), T.int64(8)), "float32")
    B = T.match_buffer(b, (T.int64(1), T.int64(4), n, T.int64(8)), "float32")
    C = T.match_buffer(c, (n * T.int64(4),), "float32")
    for i0, i1, i2, i3, k in T.grid(T.int64(1), T.int64(4), T.int64(1), n, T.int64(8)):
        with T.sblock("NT_matmul"):
            v_i0, v_i1, v_i2, v_i3, v_k = T.axis.remap("SSSSR", [i0, i1, i2, i3, k])
            with T.init():
                C[v_i1 * n + v_i3] = T.float32(0)
            C[v_i1 * n + v_i3] = C[v_i1 * n + v_i3] + A[v_i0, v_i1, v_i2, v_k] * B[v_i0, v_i1, v_i3, v_k]


def test_transform_block_layout_with_symbolic_bound():
    n = nt_matmul.params[1].shape[2]
    sch = tdsl.Schedule(nt_matmul)
    sch.transform_block_layout("NT_matmul", lambda x, y, z, w, k: (x * 4 * n + y * n + z * n + w, k))
    assert "B[T.int64(0), v0 // n, v0 % n, v1]" in sch.func.script()
    rng = np.random.default_rng(0)
    check(sch, nt_matmul, args=[rng.standard_normal((1, 4, 1, 8)).astype("float32"),
                                rng.standard_normal((1, 4, 3, 8)).astype("float32"), np.zeros(12, "float32")])
    replays(sch, nt_matmul)
    expect_error(sch, lambda: sch.transform_block_layout("NT_matmul", lambda v0, v1: (v0 // n, v0 % n + v1)),
                 "one-to-one")


def test_transform_block_layout_refusals():
    # test_transform_block_layout_fail_non_affine / _fail_mixed_iter_type, and tdsl's other rules
    sch = tdsl.Schedule(elementwise)
    expect_error(sch, lambda: sch.transform_block_layout("B", lambda i, j: (i + j,)), 'block "B"', "one-to-one")
    expect_error(sch, lambda: sch.transform_block_layout("B", lambda i, j: (i * 4 + j,)), "one-to-one")
    expect_error(sch, lambda: sch.transform_block_layout("B", lambda i: (i,)), "2 iterators")
    sch = tdsl.Schedule(conv2d_nhwc)
    expect_error(sch, lambda: sch.transform_block_layout(
        "conv2d_nhwc", lambda n, h, w, co, rh, rw, rc: (n * 16 + h * 4 + w, co * 3 + rh, rw * 3 + rc)),
        "co * 3 + rh", "spatial and reduction")
    sch = tdsl.Schedule(elementwise)
    sch.split(sch.get_loops(sch.get_block("B"))[0], factors=[None, 4])
    expect_error(sch, lambda: sch.transform_block_layout("B", lambda i, j: (j, i)), "trivially")
    sch = tdsl.Schedule(unit_dim)
    sch.compute_at(sch.get_block("B"), sch.get_loops(sch.get_block("C"))[0])
    expect_error(sch, lambda: sch.transform_block_layout("C", lambda i, j: (j, i)), "more than the block")


# reindex_cache_read / reindex_cache_write ----------------------------------------------------

@T.prim_func
def two_elementwise(A: T.Buffer((8, 8), "float32"), C: T.Buffer((8, 8), "float32")):
    # test_tir_schedule_cache_read_write.py: elementwise (128 x 128 there)
    B = T.sblock_alloc_buffer((8, 8))
    for i, j in T.grid(8, 8):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j in T.grid(8, 8):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] + 1.0


@T.prim_func
def multi_consumer(X: T.Buffer((32,), "float32"), Y: T.Buffer((32,), "float32"), Z: T.Buffer((32,), "float32")):
    # test_tir_schedule_cache_read_write.py: func_multi_consumer, with inputs and outputs
    A = T.sblock_alloc_buffer((32,))
    for i in range(4):
        for j in range(8):
            with T.sblock("A"):
                vi = T.axis.spatial(32, i * 8 + j)
                A[vi] = X[vi] + 1.0
        for j in range(8):
            with T.sblock("B"):
                vi = T.axis.spatial(32, i * 8 + j)
                Y[vi] = A[vi] + 1.0
    for i in range(32):
        with T.sblock("C"):
            vi = T.axis.spatial(32, i)
            Z[vi] = A[vi] * 2.0


@T.prim_func
def reduce(A: T.Buffer((4, 4, 4, 4), "float32"), C: T.Buffer((4, 4), "float32")):
    # test_tir_schedule_cache_read_write.py: reduce (128s there)
    B = T.sblock_alloc_buffer((4, 4, 4))
    for i, j, k in T.grid(4, 4, 4):
        for l in range(4):
            with T.sblock("B"):
                vi, vj, vk, vl = T.axis.remap("SSSR", [i, j, k, l])
                with T.init():
                    B[vi, vj, vk] = T.float32(0)
                B[vi, vj, vk] = B[vi, vj, vk] + A[vi, vj, vk, vl]
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + B[vi, vj, vk]


@T.prim_func
def access_under_scope(B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    # test_tir_schedule_cache_read_write.py: access_under_scope
    A = T.sblock_alloc_buffer((16, 16))
    for i0, j0 in T.grid(2, 2):
        with T.sblock("scope"):
            i, j = T.axis.remap("SS", [i0, j0])
            for x, y in T.grid(8, 8):
                with T.sblock("A"):
                    vi = T.axis.S(16, i * 8 + x)
                    vj = T.axis.S(16, j * 8 + y)
                    A[vi, vj] = 1.0
            for x, y in T.grid(8, 8):
                with T.sblock("B"):
                    vi = T.axis.S(16, i * 8 + x)
                    vj = T.axis.S(16, j * 8 + y)
                    B[vi, vj] = A[vi, vj] + 1.0
    for i, j in T.grid(16, 16):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] * 2.0


@T.prim_func
def stencil(A: T.Buffer((9,), "float32"), C: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.sblock("C"):
            vi = T.axis.spatial(8, i)
            C[vi] = A[vi] + A[vi + 1]


def _alloc(sch, name):
    return next(b for b in sch.func.root_block.alloc_buffers if b.name == name)


def test_reindex_cache_read():
    # test_reindex_cache_read
    sch = tdsl.Schedule(two_elementwise)
    copy = sch.reindex_cache_read("C", 0, "shared", lambda i, j: (j, i // 2, i % 2))
    assert copy.name == "B_shared"
    assert [s.value for s in _alloc(sch, "B_shared").shape] == [8, 4, 2]
    assert "B_shared[vj_1, vi_1 // 2, vi_1 % 2] + T.float32(1.0)" in sch.func.script()
    check(sch, two_elementwise)
    replays(sch, two_elementwise)


def test_reindex_cache_read_multi_consumer():
    # test_reindex_cache_read_multi_consumer: the copy sits under loop i, after the writer A
    sch = tdsl.Schedule(multi_consumer)
    sch.reindex_cache_read("B", 0, "shared", lambda i: (i // 8, i % 8))
    assert sch.get_loops(sch.get_block("A_shared"))[0].var is sch.get_loops(sch.get_block("A"))[0].var
    check(sch, multi_consumer)
    replays(sch, multi_consumer)


def test_reindex_cache_write_and_reduce():
    # test_reindex_cache_write and test_reindex_cache_write_reduce (two steps)
    sch = tdsl.Schedule(two_elementwise)
    sch.reindex_cache_write("B", 0, "shared", lambda i, j: (j, i))
    check(sch, two_elementwise)
    replays(sch, two_elementwise)
    sch = tdsl.Schedule(reduce)
    sch.reindex_cache_write("B", 0, "shared", lambda i, j, k, l: (j, i, k))
    sch.reindex_cache_write("C", 0, "shared", lambda i, j, k: [j, i])
    copy = block_of(sch, "B_shared")
    assert [iv.kind for iv in copy.iter_vars] == ["S", "S", "S"]  # vl is not in the access
    assert [s.value for s in _alloc(sch, "C_shared").shape] == [4, 4]
    check(sch, reduce)
    replays(sch, reduce)


def test_reindex_cache_refusals():
    # test_reindex_cache_read_fail_not_match / _write_fail_not_match / _failed_not_single_point /
    # _write_fail_not_single_point; tdsl also refuses a map that puts two elements in one slot
    sch = tdsl.Schedule(two_elementwise)
    expect_error(sch, lambda: sch.reindex_cache_read("C", 0, "shared", lambda i, j: j * 2), "vi", "index map")
    expect_error(sch, lambda: sch.reindex_cache_write("B", 0, "shared", lambda i, j: i), "vj", "index map")
    expect_error(sch, lambda: sch.reindex_cache_read("C", 0, "shared", lambda i, j: (i // 2, j)),
                 "same place")
    expect_error(sch, lambda: sch.reindex_cache_read("C", 0, "nowhere", lambda i, j: (i, j)), "nowhere")
    sch = tdsl.Schedule(access_under_scope)
    expect_error(sch, lambda: sch.reindex_cache_read("scope", 0, "shared", lambda i, j: (i, j)), '"scope"')
    expect_error(sch, lambda: sch.reindex_cache_write("scope", 0, "shared", lambda i, j: (i, j)), '"scope"')
    sch = tdsl.Schedule(stencil)
    expect_error(sch, lambda: sch.reindex_cache_read("C", 0, "shared", lambda i: (i,)), "single element")
    sch = tdsl.Schedule(accumulate)
    expect_error(sch, lambda: sch.reindex_cache_write("acc", 0, "local", lambda i: (i,)), "T.init", "garbage")
    # a guarded read (padding inside the block): the copy would read A[-1]
    sch = tdsl.Schedule(guarded_read)
    expect_error(sch, lambda: sch.reindex_cache_read("B", "A", "global", lambda i: (i,)), "T.if_then_else",
                 "padded copy")


@T.prim_func
def guarded_read(A: T.Buffer((8,), "float32"), B: T.Buffer((10,), "float32")):
    for i in range(10):
        with T.block("B"):
            vi = T.axis.spatial(10, i)
            B[vi] = T.if_then_else(vi >= 1 and vi < 9, A[vi - 1], T.float32(0))


@T.prim_func
def accumulate(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.sblock("acc"):
            vi = T.axis.spatial(8, i)
            B[vi] = B[vi] + A[vi]


# consumer_blocks -----------------------------------------------------------------------------

@T.prim_func
def two_consumers(X: T.Buffer((16,), "float32"), Y: T.Buffer((16,), "float32"), Z: T.Buffer((8,), "float32")):
    A = T.sblock_alloc_buffer((16,))
    for i in range(16):
        with T.sblock("A"):
            vi = T.axis.spatial(16, i)
            A[vi] = X[vi] * 3.0
    for i in range(16):
        with T.sblock("B"):
            vi = T.axis.spatial(16, i)
            Y[vi] = A[vi] + 1.0
    for i in range(8):
        with T.sblock("C"):
            vi = T.axis.spatial(8, i)
            Z[vi] = A[vi * 2] - A[vi * 2 + 1]


def test_cache_read_with_several_consumers():
    # test_cache_read_location: consumer_blocks=[B, C] (one cache read by both) and [C] (only C)
    sch = tdsl.Schedule(two_consumers)
    copy = sch.cache_read("B", 0, "shared", consumer_blocks=[sch.get_block("B"), sch.get_block("C")])
    script = sch.func.script()
    assert copy.name == "A_shared" and script.count("A_shared[") >= 4 and "A[vi_2 * 2]" not in script
    check(sch, two_consumers)
    replays(sch, two_consumers)
    sch = tdsl.Schedule(multi_consumer)
    sch.cache_read("B", 0, "global", consumer_blocks=["C"])  # B names the buffer; only C reads the copy
    assert "A_global" not in str(block_of(sch, "B").reads)
    assert "A_global" in str(block_of(sch, "C").reads)
    check(sch, multi_consumer)
    replays(sch, multi_consumer)


def test_cache_read_consumers_around_a_writer():
    # test_cache_read_location, consumer_blocks=[B, C]: the writer A shares loop i with B, so B's
    # copy is made in there, after A, and C (after the loop) gets a second copy of the finished A
    sch = tdsl.Schedule(multi_consumer)
    sch.cache_read("B", 0, "global", consumer_blocks=["B", "C"])
    assert [len(sch.get_loops(sch.get_block(n))) for n in ("A_global", "A_global_1")] == [2, 1]
    assert all("A_global" in str(block_of(sch, n).reads) for n in ("B", "C"))
    check(sch, multi_consumer)
    replays(sch, multi_consumer)


@T.prim_func
def rewritten(X: T.Buffer((16,), "float32"), Y: T.Buffer((16,), "float32"), Z: T.Buffer((16,), "float32")):
    A = T.sblock_alloc_buffer((16,))
    for i in range(16):
        with T.sblock("A"):
            vi = T.axis.spatial(16, i)
            A[vi] = X[vi]
    for i in range(16):
        with T.sblock("B"):
            vi = T.axis.spatial(16, i)
            Y[vi] = A[vi] + 1.0
    for i in range(16):
        with T.sblock("A2"):
            vi = T.axis.spatial(16, i)
            A[vi] = X[vi] * 2.0
    for i in range(16):
        with T.sblock("C"):
            vi = T.axis.spatial(16, i)
            Z[vi] = A[vi]


def test_cache_write_with_consumers():
    # test_cache_write_location: consumer_blocks=[B], [C] and [B, C] read the cache
    for consumers, copy_under_loop in ((["B"], False), (["C"], True), (["B", "C"], False)):
        sch = tdsl.Schedule(multi_consumer)
        sch.cache_write("A", 0, "global", consumer_blocks=consumers)
        for name in ("B", "C"):
            reads_cache = "A_global" in str(block_of(sch, name).reads)
            assert reads_cache == (name in consumers), (consumers, name)
        assert (len(sch.get_loops(sch.get_block("A_global"))) == 2) == copy_under_loop
        check(sch, multi_consumer)
        replays(sch, multi_consumer)


@T.prim_func
def output_read_back(X: T.Buffer((8,), "float32"), Y: T.Buffer((8,), "float32"), Z: T.Buffer((8,), "float32")):
    T_ = T.sblock_alloc_buffer((8,))
    for i in range(8):
        with T.sblock("E"):
            vi = T.axis.spatial(8, i)
            Z[vi] = T_[vi]
    for i in range(8):
        with T.sblock("W"):
            vi = T.axis.spatial(8, i)
            Y[vi] = X[vi] + 1.0
            T_[vi] = X[vi]
    for i in range(8):
        with T.sblock("R"):
            vi = T.axis.spatial(8, i)
            Z[vi] = Y[vi] * 2.0


def test_consumer_blocks_refusals():
    sch = tdsl.Schedule(rewritten)
    # one cache before B and C would be stale: A2 writes A between them
    expect_error(sch, lambda: sch.cache_read("B", 0, "global", consumer_blocks=["B", "C"]), "A2", "stale",
                 "once per consumer")
    sch = tdsl.Schedule(multi_consumer)
    expect_error(sch, lambda: sch.cache_read("B", 0, "global", consumer_blocks=["A"]), '"A"', "does not read")
    expect_error(sch, lambda: sch.cache_read("B", 0, "global", consumer_blocks="C"), "list")
    sch = tdsl.Schedule(output_read_back)
    expect_error(sch, lambda: sch.cache_write("W", 0, "global", consumer_blocks=["R"]), "Y", "parameter")
    expect_error(sch, lambda: sch.cache_write("W", "T_", "global", consumer_blocks=["E"]), '"E"', "runs before")
    sch = tdsl.Schedule(two_consumers)
    expect_error(sch, lambda: sch.cache_write("A", 0, "global", consumer_blocks=["Nope"]), "Nope")
    sch = tdsl.Schedule(access_under_scope)
    expect_error(sch, lambda: sch.cache_write("A", 0, "global", consumer_blocks=["C"]), '"C"', "another scope")


# argmax / argmin -----------------------------------------------------------------------------

ARGMAX = '''
@T.prim_func
def argmax_split(idx: T.Buffer((8, 32), "int32"), val: T.Buffer((8, 32), "{vdtype}"),
                 argmax_v0: T.Buffer(({n0},), "int32"), argmax_v1: T.Buffer((8,), "{vdtype}")):
    for i0, i1_0, i1_1 in T.grid(8, 4, 8):
        with T.sblock("argmax"):
            i = T.axis.spatial(8, i0)
            k = T.axis.reduce(32, i1_0 * 8 + i1_1)
            with T.init():
                {init}
            {body}
'''
INIT = '''argmax_v0[i] = -1
                argmax_v1[i] = T.min_value("{vdtype}")'''
BODY = '''v_argmax_v0: T.let[T.int32] = T.Select(argmax_v1[i] {cmp} val[i, k], argmax_v0[i], idx[i, k])
            v_argmax_v1: T.let[T.{vdtype}] = T.Select(argmax_v1[i] {cmp} val[i, k], argmax_v1[i], val[i, k])
            argmax_v0[i] = v_argmax_v0
            argmax_v1[i] = v_argmax_v1'''


def argmax_func(init=INIT, body=BODY, vdtype="float32", cmp=">=", n0=8) -> tdsl.PrimFunc:
    text = ARGMAX.format(init=init, body=body, vdtype="{vdtype}", n0=n0).replace("{cmp}", cmp)
    return tdsl.parse(text.replace("{vdtype}", vdtype))


def _argmax_inputs(vdtype="float32", ties=False):
    rng = np.random.default_rng(1)
    idx = rng.permutation(8 * 32).reshape(8, 32).astype("int32")  # any index values
    val = (rng.integers(0, 3, (8, 32)) if ties else rng.standard_normal((8, 32))).astype(vdtype)
    return idx, val


def _expected(idx, val, first=True):
    pos = val.argmax(1) if first else val.shape[1] - 1 - val[:, ::-1].argmax(1)
    return idx[np.arange(8), pos], val.max(1)


@pytest.mark.parametrize("cmp,first", [(">=", True), (">", False)])
def test_argmax_runs_and_decomposes(cmp, first):
    # argmax_split: parse, interpret, build, decompose_reduction (ties: >= keeps the first, > the last)
    f = argmax_func(cmp=cmp, vdtype="int32")
    idx, val = _argmax_inputs("int32", ties=True)
    want = _expected(idx, val, first)
    for run in (lambda g, *a: tdsl.interpret(g, *a), lambda g, *a: tdsl.build(g)(*a)):
        out = [np.zeros(8, "int32"), np.zeros(8, "int32")]
        run(f, idx, val, *out)
        np.testing.assert_array_equal(out[0], want[0])
        np.testing.assert_array_equal(out[1], want[1])
    sch = tdsl.Schedule(f)
    sch.decompose_reduction(sch.get_block("argmax"), sch.get_loops(sch.get_block("argmax"))[1])
    check(sch, f, args=[idx, val, np.zeros(8, "int32"), np.zeros(8, "int32")])
    replays(sch, f)


@pytest.mark.parametrize("ties", [False, True])
def test_argmax_rfactor_outer_reduction_loop(ties):
    # test_reduction_rfactor_argmax, on the outer reduction loop (exact, ties included)
    vdtype = "int32" if ties else "float32"
    f = argmax_func(vdtype=vdtype)
    sch = tdsl.Schedule(f)
    _, ko, _ = sch.get_loops(sch.get_block("argmax"))
    rf = sch.rfactor(ko, 1)
    assert rf.name == "argmax_rf"
    assert [b.name for b in sch.func.root_block.alloc_buffers] == ["argmax_v0_rf", "argmax_v1_rf"]
    idx, val = _argmax_inputs(vdtype, ties)
    out = [np.zeros(8, "int32"), np.zeros(8, vdtype)]
    tdsl.interpret(sch.func, idx, val, *out)
    want = _expected(idx, val)
    np.testing.assert_array_equal(out[0], want[0])
    np.testing.assert_array_equal(out[1], want[1])
    check(sch, f, args=[idx, val, np.zeros(8, "int32"), np.zeros(8, vdtype)])
    replays(sch, f)


def test_argmin_init_reordered_and_rfactor_of_the_whole_loop():
    # test_reduction_rfactor_argmin_init_update_reordeded: init and update stores in the other order
    init = '''argmax_v1[i] = T.max_value("{vdtype}")
                argmax_v0[i] = -1'''
    body = BODY.replace("argmax_v0[i] = v_argmax_v0\n            argmax_v1[i] = v_argmax_v1",
                        "argmax_v1[i] = v_argmax_v1\n            argmax_v0[i] = v_argmax_v0")
    f = argmax_func(init=init, body=body, cmp="<=")
    idx, val = _argmax_inputs()
    sch = tdsl.Schedule(f)
    i, ko, ki = sch.get_loops(sch.get_block("argmax"))
    k = sch.fuse(ko, ki)
    sch.rfactor(k, 0)  # one candidate per partial result: the rfactor block has no reduction left
    out = [np.zeros(8, "int32"), np.zeros(8, "float32")]
    tdsl.interpret(sch.func, idx, val, *out)
    np.testing.assert_array_equal(out[0], idx[np.arange(8), val.argmin(1)])
    check(sch, f, args=[idx, val, np.zeros(8, "int32"), np.zeros(8, "float32")])
    replays(sch, f)


def test_argmax_rfactor_inner_loop_is_refused():
    # test_reduction_rfactor_argmax factors the inner loop: on a tie the partials would keep
    # another index (TVM accepts it); tdsl refuses and says which loop to factor
    sch = tdsl.Schedule(argmax_func())
    _, _, ki = sch.get_loops(sch.get_block("argmax"))
    expect_error(sch, lambda: sch.rfactor(ki, 1), "loop i1_1", "outermost reduction loop", "loop i1_0")


_BAD = {  # test_reduction_rfactor_argmax_* refusals: (init, body, n0)
    "different_shape": (INIT, BODY, 16),
    "different_indices": (INIT.replace("argmax_v1[i] =", "argmax_v1[i + 1] ="),
                          BODY.replace("argmax_v1[i] = v_argmax_v1", "argmax_v1[i + 1] = v_argmax_v1"), 8),
    "init_not_bufferstore": (INIT.replace('argmax_v1[i] = T.min_value("{vdtype}")',
                                          'v1_init: T.let[T.{vdtype}] = T.min_value("{vdtype}")\n'
                                          '                argmax_v1[i] = v1_init'), BODY, 8),
    "init_buffer_duplicate": (INIT.replace('argmax_v1[i] = T.min_value("{vdtype}")', "argmax_v0[i] = -1"), BODY, 8),
    "bind_more_than_init": ("argmax_v0[i] = -1", BODY, 8),
    "inconsistent_bufferstore_number": (INIT, BODY + "\n            argmax_v1[i] = v_argmax_v1", 8),
    "body_seq_not_bufferstore": (INIT, BODY.replace("argmax_v1[i] = v_argmax_v1", "T.evaluate(0)"), 8),
    "body_bufferstore_value_not_var": (INIT, BODY.replace(
        "argmax_v0[i] = v_argmax_v0", "argmax_v0[i] = T.Select(argmax_v1[i] >= val[i, k], argmax_v0[i], idx[i, k])"), 8),
    "one_let_var_used_multi_times": (INIT, BODY.replace("argmax_v1[i] = v_argmax_v1", "argmax_v1[i] = v_argmax_v0"), 8),
    "one_buffer_updated_multi_times": (INIT, BODY.replace("argmax_v1[i] = v_argmax_v1", "argmax_v0[i] = v_argmax_v1"),
                                       8),
    "not_a_select": (INIT, BODY.replace("T.Select(argmax_v1[i] {cmp} val[i, k], argmax_v1[i], val[i, k])",
                                        "T.max(argmax_v1[i], val[i, k])"), 8),
}


@pytest.mark.parametrize("case", sorted(_BAD))
def test_argmax_rfactor_refusals(case):
    init, body, n0 = _BAD[case]
    vdtype = "int32" if case in ("one_let_var_used_multi_times", "one_buffer_updated_multi_times") else "float32"
    sch = tdsl.Schedule(argmax_func(init=init, body=body, n0=n0, vdtype=vdtype))
    _, ko, _ = sch.get_loops(sch.get_block("argmax"))
    expect_error(sch, lambda: sch.rfactor(ko, 1), 'block "argmax"')


@T.prim_func
def matmul_with_let(A: T.Buffer((8, 16), "float32"), B: T.Buffer((8, 16), "float32"), C: T.Buffer((8, 8), "float32")):
    # test_tir_schedule_rfactor.py: transformed_matmul_with_let (a one-buffer update through T.let)
    for i0, i1, i2_outer, i2_inner in T.grid(8, 8, 4, 4):
        with T.sblock("update"):
            vi, vj = T.axis.remap("SS", [i0, i1])
            vk = T.axis.R(16, i2_outer * 4 + i2_inner)
            with T.init():
                C[vi, vj] = 0.0
            v_C: T.let[T.float32] = C[vi, vj] + (A[vi, vk] * B[vj, vk])
            C[vi, vj] = v_C


def test_rfactor_matmul_with_let():
    # test_reduction_rfactor_matmul_with_let
    sch = tdsl.Schedule(matmul_with_let)
    *_, kii = sch.get_loops(sch.get_block("update"))
    sch.rfactor(kii, 0)
    check(sch, matmul_with_let)
    replays(sch, matmul_with_let)


@pytest.mark.parametrize("name,arity", [("tvm_mma_sync", 8), ("tvm_fill_fragment", 6)])
def test_tvm_wmma_builtins_check_their_arity(name, arity):
    # test_tir_schedule_tensorize.py writes its MMA implementations with T.tvm_mma_sync & co.;
    # they parse as opaque calls (test_tvm_opaque_builtins.py), with their argument count checked
    text = f'''
@T.prim_func
def f(A: T.Buffer((16, 16), "float32")):
    T.evaluate(T.{name}(A.data, 0, dtype="handle"))
'''
    with pytest.raises(tdsl.ScriptError) as info:
        tdsl.parse(text)
    assert f"T.{name} takes {arity} arguments" in str(info.value)
