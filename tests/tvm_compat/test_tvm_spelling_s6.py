"""TVM schedule code runs unchanged: TVM's keyword names, `Schedule(mod, debug_mask=,
error_render_level=)`, `sch.mod["main"]`, and compute_at / reverse_compute_at's
`preserve_unit_loops` and `index` (TVM's test_tir_schedule_compute_at.py cuda_matmul cases, whose
shared tiles are relaxed over the virtual threads as well as the threads)."""
import numpy as np
import pytest
from sched_check import ELEMWISE2, MATMUL, check, expect_error, kernel

import tdsl
from tdsl.schedule.trace import Trace

# test_compute_at_cuda_matmul_3: A_shared placed under k0 is the tile of the whole thread block,
# relaxed over vthread.y and threadIdx.y (TVM's rule for "shared"); the unit loop of
# A_shared_local is kept (preserve_unit_loops=True). N = 2048 in TVM; the structure is the same
# for any N that is a multiple of 64, so N = 128 is checked numerically too.
CUDA_MATMUL = '''
@T.prim_func
def cuda_matmul(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, [{n}, {n}], "float32")
    B = T.match_buffer(b, [{n}, {n}], "float32")
    C = T.match_buffer(c, [{n}, {n}], "float32")
    A_shared = T.sblock_alloc_buffer([{n}, {n}], "float32", scope="shared")
    B_shared = T.sblock_alloc_buffer([{n}, {n}], "float32", scope="shared")
    A_shared_local = T.sblock_alloc_buffer([{n}, {n}], "float32", scope="local")
    B_shared_local = T.sblock_alloc_buffer([{n}, {n}], "float32", scope="local")
    C_local = T.sblock_alloc_buffer([{n}, {n}], "float32", scope="local")
    {a_shared_root}
    for i, j in T.grid({n}, {n}):
        with T.sblock("B_shared"):
            v0, v1 = T.axis.remap("SS", [i, j])
            B_shared[v0, v1] = B[v0, v1]
    for by in T.thread_binding(0, {tiles}, thread = "blockIdx.y"):
        for bx in T.thread_binding(0, {tiles}, thread = "blockIdx.x"):
            for vy in T.thread_binding(0, 2, thread = "vthread.y"):
                for vx in T.thread_binding(0, 2, thread = "vthread.x"):
                    for ty in T.thread_binding(0, 8, thread = "threadIdx.y"):
                        for tx in T.thread_binding(0, 8, thread = "threadIdx.x"):
                            for k0 in T.serial(0, {k0}):
                                {a_shared_here}
                                for k1 in T.unroll(0, 8):
                                    for i, j in T.grid(1, 4):
                                        with T.sblock("A_shared_local"):
                                            v0 = T.axis.S({n}, k0 * 8 + k1 + i)
                                            v1 = T.axis.S({n}, by * 64 + vy * 32 + ty * 4 + j)
                                            A_shared_local[v0, v1] = A_shared[v0, v1]
                                    for i, j in T.grid(1, 4):
                                        with T.sblock("B_shared_local"):
                                            v0 = T.axis.S({n}, k0 * 8 + k1 + i)
                                            v1 = T.axis.S({n}, bx * 64 + vx * 32 + tx * 4 + j)
                                            B_shared_local[v0, v1] = B_shared[v0, v1]
                                    for _, i, j in T.grid(1, 4, 4):
                                        with T.sblock("C"):
                                            vi = T.axis.S({n}, by * 64 + vy * 32 + ty * 4 + i)
                                            vj = T.axis.S({n}, bx * 64 + vx * 32 + tx * 4 + j)
                                            vk = T.axis.R({n}, k0 * 8 + k1)
                                            with T.init():
                                                C_local[vi, vj] = T.float32(0)
                                            C_local[vi, vj] = C_local[vi, vj] + A_shared_local[vk, vi] * B_shared_local[vk, vj]
                            for i, j in T.grid(4, 4):
                                with T.sblock("C_local"):
                                    v0 = T.axis.S({n}, by * 64 + vy * 32 + ty * 4 + i)
                                    v1 = T.axis.S({n}, bx * 64 + vx * 32 + tx * 4 + j)
                                    C[v0, v1] = C_local[v0, v1]
'''
A_SHARED_ROOT = '''for i, j in T.grid({n}, {n}):
        with T.sblock("A_shared"):
            v0, v1 = T.axis.remap("SS", [i, j])
            A_shared[v0, v1] = A[v0, v1]'''
A_SHARED_HERE = '''for i, j in T.grid(8, 64):
                                    with T.sblock("A_shared"):
                                        v0 = T.axis.S({n}, k0 * 8 + i)
                                        v1 = T.axis.S({n}, by * 64 + j)
                                        A_shared[v0, v1] = A[v0, v1]'''


def cuda_matmul(n: int, placed: bool) -> tdsl.PrimFunc:
    parts = {"a_shared_root": "" if placed else A_SHARED_ROOT.format(n=n),
             "a_shared_here": A_SHARED_HERE.format(n=n) if placed else ""}
    return tdsl.parse(CUDA_MATMUL.format(n=n, tiles=n // 64, k0=n // 8, **parts))


@pytest.mark.parametrize("n", [2048, 128])
def test_compute_at_cuda_matmul_3_relaxes_shared_over_vthread_and_keeps_unit_loops(n):
    before = cuda_matmul(n, placed=False)
    sch = tdsl.Schedule(before, debug_mask="all")
    loop = sch.get_loops(sch.get_sblock("C"))[6]
    sch.compute_at(sch.get_sblock("A_shared"), loop, preserve_unit_loops=True)
    tdsl.assert_structural_equal(sch.mod["main"], cuda_matmul(n, placed=True))
    replayed = sch.trace.apply(before)
    tdsl.assert_structural_equal(replayed.func, sch.func)
    assert "preserve_unit_loops=True" in str(sch.trace)
    if n == 128:
        check(sch, before)


def test_preserve_unit_loops_keeps_a_loop_of_extent_one():
    func = kernel(ELEMWISE2)
    for keep in (False, True):
        sch = tdsl.Schedule(func)
        _, j = sch.get_loops(sch.get_block("C"))
        sch.compute_at(sch.get_block("B"), j, preserve_unit_loops=keep)
        text = sch.func.script()
        assert ("T.grid(1, 1)" in text) == keep, text
        check(sch, func)
        tdsl.assert_structural_equal(Trace.from_json(sch.trace.as_json()).apply(func).func, sch.func)


TWO_CONSUMERS = '''
@T.prim_func
def two(A: T.Buffer((8, 4), "float32"), C: T.Buffer((8, 4), "float32"), D: T.Buffer((8, 4), "float32")):
    B = T.alloc_buffer((8, 4), "float32")
    E = T.alloc_buffer((8, 4), "float32")
    for i, j in T.grid(8, 4):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i in range(8):
        for j in range(4):
            with T.block("E"):
                vi, vj = T.axis.remap("SS", [i, j])
                E[vi, vj] = A[vi, vj] + 1.0
        for j in range(4):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = B[vi, vj] + E[vi, vj]
        for j in range(4):
            with T.block("D"):
                vi, vj = T.axis.remap("SS", [i, j])
                D[vi, vj] = C[vi, vj] * 3.0
'''


def _order(sch, loop_index=0):
    loop = sch.get(sch.get_loops(sch.get_block("C"))[loop_index])
    return [r.block.name for r in _realizes(loop.body)]


def _realizes(stmt):
    from tdsl.ir.tree import all_realizes
    return [r for r in all_realizes(stmt) if r.block.name != "root"]


@pytest.mark.parametrize("index,order", [(-1, ["E", "B", "C", "D"]), (-2, ["B", "E", "C", "D"]),
                                         (0, ["B", "E", "C", "D"]), (1, ["E", "B", "C", "D"])])
def test_compute_at_index_picks_the_place_among_the_statements(index, order):
    func = kernel(TWO_CONSUMERS)
    sch = tdsl.Schedule(func)
    sch.compute_at(sch.get_block("B"), sch.get_loops(sch.get_block("C"))[0], index=index)
    assert _order(sch) == order
    check(sch, func)


def test_compute_at_index_outside_the_legal_places_is_refused_and_names_them():
    func = kernel(TWO_CONSUMERS)
    sch = tdsl.Schedule(func)
    i, b = sch.get_loops(sch.get_block("C"))[0], sch.get_block("B")
    message = expect_error(sch, lambda: sch.compute_at(b, i, index=3), "index=3", 'block "B"', "0 to 1")
    assert "fix:" in message
    expect_error(sch, lambda: sch.compute_at(b, i, index=-3), "index must be")
    expect_error(sch, lambda: sch.compute_at(b, i, preserve_unit_loops=1), "True or False")


CONSUMER_THEN_READER = '''
@T.prim_func
def f(A: T.Buffer((8, 4), "float32"), D: T.Buffer((8, 4), "float32"), E: T.Buffer((8, 4), "float32")):
    B = T.alloc_buffer((8, 4), "float32")
    C = T.alloc_buffer((8, 4), "float32")
    for i in range(8):
        for j in range(4):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * 2.0
        for j in range(4):
            with T.block("E"):
                vi, vj = T.axis.remap("SS", [i, j])
                E[vi, vj] = A[vi, vj] - 1.0
    for i, j in T.grid(8, 4):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = B[vi, vj] + 1.0
'''


@pytest.mark.parametrize("index,order", [(-1, ["B", "E", "C"]), (-2, ["B", "C", "E"]), (1, ["B", "C", "E"])])
def test_reverse_compute_at_index(index, order):
    func = kernel(CONSUMER_THEN_READER)
    sch = tdsl.Schedule(func)
    sch.reverse_compute_at(sch.get_block("C"), sch.get_loops(sch.get_block("B"))[0], index=index)
    loop = sch.get(sch.get_loops(sch.get_block("B"))[0])
    assert [r.block.name for r in _realizes(loop.body)] == order
    check(sch, func)
    again = tdsl.Schedule(func)
    c, i = again.get_block("C"), again.get_loops(again.get_block("B"))[0]
    expect_error(again, lambda: again.reverse_compute_at(c, i, index=0), "index=0", "1 to 2")


# TVM's keyword names ---------------------------------------------------------------------------

def test_tvm_keyword_names_mean_tdsls_and_trace_as_tdsls():
    func = kernel(MATMUL)
    sch = tdsl.Schedule(func)
    sch.seed(seed=5)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.annotate(i, ann_key="pragma_unroll", ann_val=4)
    assert dict(sch.get(rand_var_or_sref=i).annotations)["pragma_unroll"] == 4
    sch.unannotate(i, ann_key="pragma_unroll")
    sch.cache_write(sch.get_block("C"), 0, "global")
    sch.set_scope("C", buffer_index=0, storage_scope="local")
    sch.storage_align("C", buffer_index=0, axis=0, factor=8, offset=1)
    outer = sch.blockize(target=sch.get_loops(sch.get_block("C"))[2])
    sch.remove_rv(rand_var=outer)
    text = str(sch.trace)
    assert "ann_key" not in text and 'key="pragma_unroll"' in text
    tdsl.assert_structural_equal(sch.trace.apply(func).func, sch.func)
    check(sch, func)
    with pytest.raises(TypeError, match="both key= and TVM's name for it, ann_key="):
        sch.annotate(i, key="a", ann_key="b", ann_val=1)


def test_tensorize_takes_tensor_intrin():
    from test_tvm_primitives import MMA, tiled_for_mma
    sch, ii = tiled_for_mma()
    sch.tensorize(block_or_loop=ii, tensor_intrin=MMA)
    assert f'intrin_name="{MMA}"' in str(sch.trace)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 8)).astype("float32"), rng.standard_normal((8, 8)).astype("float32")
    np.testing.assert_allclose(tdsl.build(sch)(a, b), a @ b.T, rtol=1e-5, atol=1e-5)


# Schedule(mod, ...) and sch.mod ----------------------------------------------------------------

def test_error_render_levels():
    func = kernel(MATMUL)
    for level, lines in (("detail", 3), ("fast", 1)):
        sch = tdsl.Schedule(func, debug_mask="all", error_render_level=level)
        with pytest.raises(tdsl.ScheduleError, match="Cannot find a block with the name: wrong_name"):
            sch.get_sblock("wrong_name")
        i = sch.get_loops(sch.get_block("C"))[0]
        with pytest.raises(tdsl.ScheduleError) as info:
            sch.split(i, [None, None])
        assert str(info.value).startswith("split: ") and len(str(info.value).splitlines()) >= lines
        assert (len(str(info.value).splitlines()) == 1) == (level == "fast")
    none = tdsl.Schedule(func, error_render_level="none")
    with pytest.raises(tdsl.ScheduleError) as info:
        none.get_sblock("wrong_name")
    (msg,) = info.value.args
    assert "(not rendered)" in msg
    assert none.copy()._render == "none"
    with pytest.raises(AttributeError):
        none.non_existent_field()
    for bad in ({"debug_mask": "some"}, {"error_render_level": "loud"}, {"enable_check": "yes"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            tdsl.Schedule(func, **bad)


def test_ir_module_holds_one_function_and_goes_where_a_function_goes():
    func = kernel(ELEMWISE2)
    sch = tdsl.Schedule(tdsl.IRModule({"main": func}))
    mod = sch.mod
    assert mod["main"] is sch.func and mod[func.name] is sch.func and list(mod) == ["main"] and len(mod) == 1
    assert mod.script() == sch.func.script()
    with pytest.raises(KeyError, match="not 'other'"):
        mod["other"]
    a = np.random.default_rng(0).standard_normal((12, 10)).astype("float32")
    c = np.zeros_like(a)
    tdsl.build(mod)(a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)
    assert tdsl.structural_equal(tdsl.lower(mod), tdsl.lower(func))
    with pytest.raises(ValueError, match="holds one function in tdsl, got 2"):
        tdsl.IRModule({"main": func, "other": func})
    with pytest.raises(TypeError, match="not a PrimFunc"):
        tdsl.IRModule({"main": "text"})


# preserve_unit_iters (TVM's default form; tdsl's default folds unit loops) ---------------------

UNIT = '''
@T.prim_func
def unit(A: T.Buffer((16, 1), "float32"), C: T.Buffer((16, 1), "float32")):
    for i, j in T.grid(16, 1):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] + 1.0
'''


@pytest.mark.parametrize("keep", [False, True])
def test_split_preserve_unit_iters(keep):
    func = kernel(UNIT)
    sch = tdsl.Schedule(func)
    i, j = sch.get_loops(sch.get_block("C"))
    sch.split(i, [1, 16], preserve_unit_iters=keep)
    text = sch.func.script()
    assert ("T.axis.spatial(16, i_0 * 16 + i_1)" in text) == keep, text
    assert ("T.axis.spatial(1, j)" in text) == keep, text
    check(sch, func)
    tdsl.assert_structural_equal(sch.trace.apply(func).func, sch.func)
    i0 = sch.get_loops(sch.get_block("C"))[0]
    expect_error(sch, lambda: sch.split(i0, [1, 1], preserve_unit_iters="yes"), "True or False")


# TVM's test_blockize_outer_int64_shape, both settings
INT64_TILED = '''
@T.prim_func
def single_elementwise_int64(A: T.Buffer((T.int64(16), T.int64(128)), "float32"),
                             B: T.Buffer((T.int64(16), T.int64(128)), "float32")) -> None:
    for i0, j0, i1, j1 in T.grid(T.int64(1), T.int64(8), T.int64(16), T.int64(16)):
        with T.sblock("B"):
            vi = T.axis.S(T.int64(16), i0 * T.int64(16) + i1)
            vj = T.axis.S(T.int64(128), j0 * T.int64(16) + j1)
            B[vi, vj] = A[vi, vj] + 1.0
'''


@pytest.mark.parametrize("keep,outer", [(False, "T.axis.spatial(T.int64(1), T.int64(0))"),
                                        (True, 'T.axis.remap("SS", [i0, j0])')])
def test_blockize_preserve_unit_iters(keep, outer):
    func = kernel(INT64_TILED)
    sch = tdsl.Schedule(func, debug_mask="all")
    _, _, i1, _ = sch.get_loops(sch.get_sblock("B"))
    sch.blockize(i1, preserve_unit_iters=keep)
    assert outer in sch.mod["main"].script()
    check(sch, func)
    tdsl.assert_structural_equal(sch.trace.apply(func).func, sch.func)


def test_fuse_takes_preserve_unit_iters():
    func = kernel(UNIT)
    results = []
    for keep in (False, True):
        sch = tdsl.Schedule(func)
        sch.fuse(*sch.get_loops(sch.get_block("C")), preserve_unit_iters=keep)
        check(sch, func)
        results.append(sch.func)
    tdsl.assert_structural_equal(*results)


def test_tvm_methods_tdsl_lacks_say_what_to_write_instead():
    from tdsl.schedule.tvm_spelling import ABSENT_METHODS
    sch = tdsl.Schedule(kernel(MATMUL))
    for name, instead in ABSENT_METHODS.items():
        assert not hasattr(tdsl.Schedule, name), f"{name} exists now: take it out of ABSENT_METHODS"
        with pytest.raises(AttributeError, match=f"Schedule.{name} is a TVM schedule method tdsl does not have"):
            getattr(sch, name)
    with pytest.raises(AttributeError, match="has no attribute 'non_existent_field'"):
        sch.non_existent_field()


def test_tvm_names_on_ir_nodes_and_schedule_construction():
    func = kernel(MATMUL)
    sch = tdsl.Schedule(mod=tdsl.IRModule.from_expr(func), debug_mask="all")
    block = sch.get(sch.get_sblock("C"))
    assert block.name_hint == "C" and block.same_as(block) and not block.same_as(sch.func.body)
    assert sch.mod["main"].same_as(sch.func)
    with pytest.raises(TypeError, match="both func= and TVM's name for it, mod="):
        tdsl.Schedule(func=func, mod=func)


def test_json_trace_replays_buffer_tuples_and_int64_index_maps():
    # TVM's test_transform_layout_with_sampling / test_transform_block_layout_int64_extent round trips
    flat = kernel(ELEMWISE2.replace("(12, 10)", "(T.int64(12), T.int64(10))")
                  .replace("T.grid(12, 10)", "T.grid(T.int64(12), T.int64(10))"))
    sch = tdsl.Schedule(flat)
    sch.transform_layout("B", ("write", 0), lambda i, j: (j, i))
    sch.transform_block_layout("C", lambda i, j: (i * 10 + j,))
    assert 'buffer=("write", 0)' in str(sch.trace)
    again = Trace.from_json(sch.trace.as_json()).apply(flat)
    assert str(again.trace) == str(sch.trace)
    tdsl.assert_structural_equal(again.func, sch.func)
    check(again, flat)


def test_get_sref_removed_handles_and_unknown_intrinsics_as_tvm():
    # TVM's test_tir_schedule_get_sblock / _copy_2 / _remove_rv, test_tensor_intrin_look_up
    sch = tdsl.Schedule(kernel(MATMUL))
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    ref = sch.get_sref(block)
    assert ref.stmt.same_as(sch.get(block)) and ref.parent.stmt.same_as(sch.get(k))
    assert ref.parent.parent.parent.stmt.same_as(sch.get(i)) and ref.parent.parent.parent.parent.stmt.name == "root"
    i0, i1 = sch.split(i, [2, 8])
    assert sch.get_sref(i0).stmt.extent.value == 2 and sch.get_sref(i1).stmt.extent.value == 8
    copy = sch.copy()
    assert copy.get_sref(i1).stmt.same_as(sch.get_sref(i1).stmt)
    with pytest.raises(tdsl.ScheduleError, match="no longer exists"):
        sch.get_sref(i)
    sch.remove_rv(block)
    with pytest.raises(IndexError, match="removed with sch.remove_rv"):
        sch.get(block)
    with pytest.raises(ValueError, match="unknown tensor intrinsic 'non_existent_intrin'"):
        tdsl.TensorIntrin.get("non_existent_intrin")
