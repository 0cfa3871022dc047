"""Caching primitives: cache_read, cache_write, set_scope.

Legal cases go through `check` (round trip + same results as the unscheduled kernel); refused
ones through `expect_error` (ScheduleError naming the user's things, schedule untouched).
"""
from __future__ import annotations

import pytest
from dataflow_helpers import CHAIN, SYMBOLIC_CHAIN, loops, parse, run_docstring_example
from sched_check import check, expect_error, kernel

import tdsl


def _alloc(sch: tdsl.Schedule, name: str):
    return next(b for b in sch.func.root_block.alloc_buffers if b.name == name)


# cache_read ----------------------------------------------------------------------------------

def test_cache_read_parameter_by_name():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    a_shared = sch.cache_read(sch.get_block("C"), "A", "shared")
    assert a_shared.name == "A_shared"
    assert _alloc(sch, "A_shared").scope == "shared"
    assert "A_shared[vi, vk]" in sch.func.script()
    assert sch.get_consumers(a_shared)[0].name == "C"
    check(sch, f)


def test_cache_read_by_index_and_twice_gives_unique_names():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    b1 = sch.cache_read(c, 2, "local")  # reads are C, A, B
    assert b1.name == "B_local"
    b2 = sch.cache_read(c, "B_local", "local")
    assert b2.name == "B_local_local"
    check(sch, f)


def test_cache_read_intermediate_after_split_copies_the_read_part():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    i, _j = loops(sch, "C")
    sch.split(i, factors=[None, 4])
    cr = sch.cache_read(sch.get_block("C"), "B", "local")
    # the copy sits between the producer and the consumer
    text = sch.func.script()
    assert text.index('T.block("B")') < text.index('T.block("B_local")') < text.index('T.block("C")')
    assert cr.name == "B_local"
    check(sch, f)


def test_cache_read_symbolic_then_compute_at():
    f = parse(SYMBOLIC_CHAIN)
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    cr = sch.cache_read(c, "B", "local")
    i, _ = sch.get_loops(c)
    sch.compute_at(cr, i)
    check(sch, f, dims={"n": 5})


def test_cache_read_refusals():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.cache_read(c, "C", "shared"), 'block "C"', "C", "cache_write")
    expect_error(sch, lambda: sch.cache_read(c, "Q", "shared"), 'block "C"', "Q")
    expect_error(sch, lambda: sch.cache_read(c, 7, "shared"), 'block "C"', "7")
    expect_error(sch, lambda: sch.cache_read(c, "A", "shraed"), "shraed", "shared")


# cache_write ---------------------------------------------------------------------------------

def test_cache_write_reduction_output():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    cw = sch.cache_write(c, 0, "local")
    assert cw.name == "C_local"
    assert sch.get_producers(cw)[0].name == "C"
    check(sch, f)


def test_cache_write_intermediate_then_reverse_compute_at():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    cw = sch.cache_write(b, "B", "local")
    i, _ = sch.get_loops(b)
    sch.reverse_compute_at(cw, i)
    check(sch, f)


def test_cache_write_elementwise_symbolic():
    f = parse(SYMBOLIC_CHAIN)
    sch = tdsl.Schedule(f)
    sch.cache_write(sch.get_block("C"), "C", "local")
    check(sch, f, dims={"n": 3})


def test_cache_write_refusals():
    accumulate = parse('''
@T.prim_func
def acc(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            C[vi] = C[vi] + A[vi]
''')
    sch = tdsl.Schedule(accumulate)
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.cache_write(c, "C", "local"), 'block "C"', "T.init")
    strided = parse('''
@T.prim_func
def strided(A: T.Buffer((8,), "float32"), C: T.Buffer((16,), "float32")):
    for i in range(8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            C[vi * 2] = A[vi]
''')
    sch = tdsl.Schedule(strided)
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.cache_write(c, "C", "local"), 'block "C"', "C")
    sch = tdsl.Schedule(kernel("matmul"))
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.cache_write(c, "A", "local"), 'block "C"', "A")


def test_cache_write_and_read_after_compute_at_work_per_shared_iteration():
    # the order of compute_at and caching does not matter: the copies run once per iteration of
    # the loops the block shares with others
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    i, _ = sch.get_loops(b)
    sch.reverse_compute_at(sch.get_block("C"), i)
    cw = sch.cache_write(b, "B", "local")
    assert next(lp.name for lp in sch.get_loops(cw)) == i.name
    cr = sch.cache_read(sch.get_block("C"), "B", "shared")
    assert next(lp.name for lp in sch.get_loops(cr)) == i.name
    check(sch, f)
    g = kernel("matmul")
    sch = tdsl.Schedule(g)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.reorder(k, i, j)  # the reduction loop is outermost: each k copies partial sums back
    _k0, _k1 = sch.split(k, factors=[None, 4])
    sch.cache_write(c, "C", "local")
    sch.cache_read(c, "A", "local")
    check(sch, g)


# set_scope -----------------------------------------------------------------------------------

@pytest.mark.parametrize("scope", ["shared", "local", "wmma.accumulator"])
def test_set_scope_intermediate(scope):
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    sch.set_scope(sch.get_block("C"), "C", scope)
    assert _alloc(sch, "C").scope == scope
    check(sch, f)


def test_set_scope_by_index_of_cache():
    f = kernel("matmul")
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    sch.cache_write(c, 0, "shared")
    sch.set_scope(c, 0, "local")  # an index counts the block's writes, as in TVM: C_shared
    assert _alloc(sch, "C_shared").scope == "local"
    sch.cache_read(c, "A", "shared")
    sch.set_scope(c, "A_shared", "local")  # a name may be any buffer the block accesses
    assert _alloc(sch, "A_shared").scope == "local"
    check(sch, f)


def test_set_scope_refusals():
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    b = sch.get_block("B")
    expect_error(sch, lambda: sch.set_scope(b, "A", "shared"), "A", "parameter", "cache_read")
    expect_error(sch, lambda: sch.set_scope(b, "B", "register"), "register")
    expect_error(sch, lambda: sch.set_scope(b, "Z", "shared"), 'block "B"', "Z")


# cache_read(..., dtype=): a converting copy --------------------------------------------------

HGEMM = '''
@T.prim_func
def hgemm(A: T.Buffer((8, 12), "DT"), B: T.Buffer((12, 16), "DT"), C: T.Buffer((8, 16), "float32")):
    for i, j, k in T.grid(8, 16, 12):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")
'''


def _lowp_args(dtype: str, seed: int = 0):
    import ml_dtypes
    import numpy as np

    np_dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((8, 12)).astype(np_dt), rng.standard_normal((12, 16)).astype(np_dt),
            np.zeros((8, 16), np.float32)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cache_read_dtype_converts_in_the_copy_and_drops_the_casts(dtype):
    f = parse(HGEMM.replace("DT", dtype))
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    pb = sch.cache_read(c, "B", "global", dtype="float32")
    pa = sch.cache_read(c, "A", "global", dtype="float32")
    assert str(_alloc(sch, "B_global").dtype) == "float32" and str(_alloc(sch, "A_global").dtype) == "float32"
    text = sch.func.script()
    assert 'B_global[v0, v1] = T.cast(B[v0, v1], "float32")' in text
    assert "C[vi, vj] = C[vi, vj] + A_global[vi, vk] * B_global[vk, vj]" in text
    # the packing steps of an fp32 GEMM apply to the converted copies
    sch.transform_layout(pb, "B_global", lambda k, j: (j // 8, k, j % 8))
    i, _j, _k = sch.get_loops(c)
    sch.compute_at(pa, i)
    check(sch, f, args=_lowp_args(dtype), tol=0)


def test_cache_read_dtype_widens_integers_exactly():
    f = parse('''
@T.prim_func
def qgemm(A: T.Buffer((8, 16), "uint8"), B: T.Buffer((16, 8), "int8"), C: T.Buffer((8, 8), "int32")):
    for i, j, k in T.grid(8, 8, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
''')
    import numpy as np

    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    sch.cache_read(c, "A", "global", dtype="int32")
    sch.cache_read(c, "B", "local", dtype="int32")
    rng = np.random.default_rng(1)
    args = [rng.integers(0, 256, (8, 16)).astype(np.uint8), rng.integers(-128, 128, (16, 8)).astype(np.int8),
            np.zeros((8, 8), np.int32)]
    check(sch, f, args=args, tol=0)
    want, got = [a.copy() for a in args], [a.copy() for a in args]
    tdsl.build(f)(*want)
    tdsl.build(sch)(*got)
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_array_equal(got[2], args[0].astype(np.int32) @ args[1].astype(np.int32))


def test_cache_read_dtype_with_consumer_blocks():
    f = parse('''
@T.prim_func
def two(A: T.Buffer((16,), "float16"), B: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = T.cast(A[vi], "float32") * T.float32(2)
    for i in range(16):
        with T.block("C"):
            vi = T.axis.remap("S", [i])
            C[vi] = T.cast(A[vi], "float32") + T.float32(1)
''')
    import numpy as np

    sch = tdsl.Schedule(f)
    b, c = sch.get_block("B"), sch.get_block("C")
    sch.cache_read(b, "A", "global", consumer_blocks=[b, c], dtype="float32")
    assert sch.func.script().count('T.cast(A[') == 1
    args = [np.random.default_rng(2).standard_normal(16).astype(np.float16), np.zeros(16, np.float32),
            np.zeros(16, np.float32)]
    check(sch, f, args=args, tol=0)


def test_cache_read_dtype_prints_in_the_trace_and_replays():
    import json

    from tdsl.schedule.trace import Trace

    f = parse(HGEMM.replace("DT", "float16"))
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    sch.cache_read(c, "B", "global", dtype="float32")
    sch.cache_read(c, 1, "global")   # the plain form records no dtype
    text = str(sch.trace)
    assert 'sch.cache_read(b0, buffer="B", scope="global", dtype="float32")' in text
    assert 'sch.cache_read(b0, buffer=1, scope="global")' in text
    fresh = tdsl.Schedule(f)
    exec(text, {"sch": fresh})
    assert tdsl.structural_equal(fresh.func, sch.func)
    back = Trace.from_json(json.dumps(sch.trace.as_json()))
    assert str(back) == text
    assert tdsl.structural_equal(back.apply(f).func, sch.func)


def test_cache_read_dtype_refusals():
    f = parse('''
@T.prim_func
def mixed(A: T.Buffer((8, 8), "float16"), B: T.Buffer((8, 8), "float32"), C: T.Buffer((8, 8), "float64")):
    for i, j in T.grid(8, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = T.cast(A[vi, vj] + A[vj, vi], "float32")
    for i, j in T.grid(8, 8):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = T.cast(A[vi, vj], "float64") + T.cast(B[vi, vj], "float64")
''')
    sch = tdsl.Schedule(f)
    b, c = sch.get_block("B"), sch.get_block("C")
    msg = expect_error(sch, lambda: sch.cache_read(b, "A", "global", dtype="float32"), 'block "B"', "A[vi, vj]",
                       "T.cast")
    assert "fix: leave dtype out" in msg
    expect_error(sch, lambda: sch.cache_read(c, "A", "global", dtype="float32"), 'block "C"', "A[vi, vj]",
                 "float32")   # cast to float64, not to the cache's float32
    expect_error(sch, lambda: sch.cache_read(c, "B", "global", dtype="float16"), 'block "C"', "B", "exactly")
    expect_error(sch, lambda: sch.cache_read(c, "B", "global", dtype="flaot64"), "flaot64", "data type")
    expect_error(sch, lambda: sch.cache_read(c, "A", "global", consumer_blocks=[b, c], dtype="float64"),
                 'block "B"', "A[vi, vj]")
    sch.cache_read(c, "A", "global", dtype="float64")   # every read of A in C is a cast to float64
    sch.cache_read(c, "B", "global", dtype="float32")   # its own dtype: a plain copy
    check(sch, f, args=_mixed_args(), tol=0)


def _mixed_args():
    import numpy as np

    rng = np.random.default_rng(5)
    return [rng.standard_normal((8, 8)).astype(np.float16), np.zeros((8, 8), np.float32), np.zeros((8, 8))]


def test_exact_widenings():
    from tdsl.dtypes import DataType
    from tdsl.schedule.primitives.cache_convert import exact_widening

    def ok(a, b):
        return exact_widening(DataType.parse(a), DataType.parse(b))

    assert ok("float16", "float32") and ok("bfloat16", "float32") and ok("float32", "float64")
    assert ok("int8", "int32") and ok("uint8", "int16") and ok("uint8", "uint32") and ok("int16", "float32")
    assert ok("int32", "float64") and ok("int8", "bfloat16")
    assert not ok("float16", "bfloat16") and not ok("bfloat16", "float16") and not ok("float32", "float16")
    assert not ok("int8", "uint16") and not ok("int32", "float32") and not ok("uint16", "int16")
    assert not ok("float32", "float32") and not ok("float32", "int64")


# docstrings ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["cache_read", "cache_write", "set_scope"])
def test_docstring_example(name):
    run_docstring_example(name)


# cache_write of a blockized tile under thread loops (TVM's mma schedule) -----------------------

TILED_GEMM = '''
@T.prim_func
def gemm(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    for i, j, k in T.grid(64, 64, 64):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''


def _blockized_under_threads(n_tiles_j=4):
    f = parse(TILED_GEMM)
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i, ii = sch.split(i, factors=[None, 16])
    j, ji = sch.split(j, factors=[None, 16])
    k, ki = sch.split(k, factors=[None, 16])
    sch.reorder(i, j, k, ii, ji, ki)
    outer = sch.blockize(ii)
    i0, i1 = sch.split(i, factors=[2, 2])
    j0, j1 = sch.split(j, factors=[2, 2])
    sch.reorder(i0, j0, k, i1, j1)
    t = sch.fuse(i0, j0)
    sch.bind(t, "threadIdx.y")
    return f, sch, outer, t


def test_cache_write_of_a_blockized_tile_whose_bindings_use_a_thread_loop():
    # each instance of the 16 x 16 tile block fills its tile (run once: stores affine in the
    # iterators), and the thread's instances are as many as the tiles: the copy back is whole
    f, sch, outer, t = _blockized_under_threads()
    cw = sch.cache_write(outer, 0, "local")
    sch.reverse_compute_at(cw, t)
    check(sch, f)


def test_cache_write_of_a_blockized_tile_with_a_predicate_inside_is_refused():
    f = parse(TILED_GEMM.replace("            with T.init():", "            T.where(i < 60)\n            with T.init():"))
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i, ii = sch.split(i, factors=[None, 16])
    sch.reorder(i, j, k, ii)
    outer = sch.blockize(ii)
    expect_error(sch, lambda: sch.cache_write(outer, 0, "local"), "holds other blocks", "every element")
