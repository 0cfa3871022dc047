"""Reference interpreter semantics, on IR built by hand (independent of the parser)."""
from __future__ import annotations

import time

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl import dtypes as D
from tdsl.interpreter import GARBAGE_BYTE, ExternCallError, interpret, python_source
from tdsl.ir import (
    TRUE,
    Allocate,
    Block,
    BlockRealize,
    Broadcast,
    Buffer,
    BufferRegion,
    BufferStore,
    Call,
    Cast,
    Evaluate,
    FloatImm,
    For,
    IfThenElse,
    IntImm,
    IterVar,
    LetStmt,
    PrimFunc,
    Ramp,
    Range,
    Select,
    SeqStmt,
    Var,
    if_then_else,
)

# ----------------------------------------------------------------------------- builders

def buf(name, shape, dtype="float32", **kw) -> Buffer:
    return Buffer(name, tuple(IntImm(s) if isinstance(s, int) else s for s in shape), D.as_dtype(dtype), **kw)


def loop(var, extent, body, kind="serial", lo=0):
    tag = "threadIdx.x" if kind == "thread_binding" else None
    ext = IntImm(extent) if isinstance(extent, int) else extent
    return For(var, IntImm(lo), ext, kind, body, thread_tag=tag)


def nest(vars_extents, body):
    for var, ext in reversed(vars_extents):
        body = loop(var, ext, body)
    return body


def block(name, iters, values, body, init=None, writes=(), predicate=TRUE, alloc=()):
    blk = Block(name, tuple(iters), (), tuple(BufferRegion(b, ()) for b in writes), body, init, tuple(alloc))
    return BlockRealize(tuple(values), predicate, blk)


def root(body, alloc=()):
    return BlockRealize((), TRUE, Block("root", (), (), (), body, None, tuple(alloc)))


def itv(name, extent, kind="S", lo=0):
    return IterVar(Var(name), Range(IntImm(lo), IntImm(extent) if isinstance(extent, int) else extent), kind)


def f32(x):
    return FloatImm(float(x), D.float32)


def elementwise(fn, n=16, dtype="float32", out_dtype=None, kind="serial"):
    """B[i] = fn(A, i) over range(n), inside one block."""
    A, B = buf("A", (n,), dtype), buf("B", (n,), out_dtype or dtype)
    i = Var("i")
    vi = itv("vi", n)
    body = block("B", [vi], [i], BufferStore(B, fn(A, vi.var), (vi.var,)))
    return PrimFunc("elementwise", (A, B), root(loop(i, n, body, kind)))


def matmul_ir(n=64) -> PrimFunc:
    A, B, C = buf("A", (n, n)), buf("B", (n, n)), buf("C", (n, n))
    i, j, k = Var("i"), Var("j"), Var("k")
    vi, vj, vk = itv("vi", n), itv("vj", n), itv("vk", n, "R")
    a, b, c = vi.var, vj.var, vk.var
    body = block("C", [vi, vj, vk], [i, j, k], BufferStore(C, C[a, b] + A[a, c] * B[c, b], (a, b)),
                 init=BufferStore(C, f32(0), (a, b)))
    return PrimFunc("matmul", (A, B, C), root(nest([(i, n), (j, n), (k, n)], body)))


# ----------------------------------------------------------------------------- blocks

def test_matmul_and_speed(rng):
    f = matmul_ir(64)
    a, b = rng.standard_normal((64, 64), "float32"), rng.standard_normal((64, 64), "float32")
    interpret(f, a, b)  # generate the code once
    start = time.process_time()  # CPU time: other processes share this machine's cores
    c = interpret(f, a, b)
    elapsed = time.process_time() - start
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert elapsed < 2.0, f"64x64x64 matmul took {elapsed:.2f} s"


def test_init_runs_when_reduce_iterators_at_domain_minimum(rng):
    # vk ranges over [2, 6), bound to k + 2: the init must run at vk == 2, not at vk == 0.
    A, C = buf("A", (8, 8)), buf("C", (8,))
    i, k = Var("i"), Var("k")
    vi, vk = itv("vi", 8), itv("vk", 4, "R", lo=2)
    body = block("C", [vi, vk], [i, k + 2], BufferStore(C, C[vi.var] + A[vi.var, vk.var], (vi.var,)),
                 init=BufferStore(C, f32(0), (vi.var,)))
    f = PrimFunc("partial_sum", (A, C), root(nest([(i, 8), (k, 4)], body)))
    a = rng.standard_normal((8, 8), "float32")
    np.testing.assert_allclose(interpret(f, a), a[:, 2:6].sum(axis=1), rtol=1e-5)


def test_init_with_two_reduce_iterators_runs_once(rng):
    A, C = buf("A", (4, 5, 6)), buf("C", (4,))
    i, k, r = Var("i"), Var("k"), Var("r")
    vi, vk, vr = itv("vi", 4), itv("vk", 5, "R"), itv("vr", 6, "R")
    body = block("C", [vi, vk, vr], [i, k, r],
                 BufferStore(C, C[vi.var] + A[vi.var, vk.var, vr.var], (vi.var,)),
                 init=BufferStore(C, f32(0), (vi.var,)))
    f = PrimFunc("sum2", (A, C), root(nest([(i, 4), (k, 5), (r, 6)], body)))
    a = rng.standard_normal((4, 5, 6), "float32")
    np.testing.assert_allclose(interpret(f, a), a.sum(axis=(1, 2)), rtol=1e-5)


def test_predicate_guards_binding_and_body():
    # 4 x 16 iterations over a 50-element buffer: the predicate skips 14 of them, whose
    # iterator values would be outside the domain (which must not raise).
    A, B = buf("A", (50,)), buf("B", (50,))
    io, ii = Var("io"), Var("ii")
    vi = itv("vi", 50)
    value = io * 16 + ii
    body = block("B", [vi], [value], BufferStore(B, A[vi.var] * f32(2), (vi.var,)), predicate=value < 50)
    f = PrimFunc("split", (A, B), root(nest([(io, 4), (ii, 16)], body)))
    a = np.arange(50, dtype="float32")
    np.testing.assert_array_equal(interpret(f, a), a * 2)


def test_binding_outside_domain_raises_naming_the_block():
    A, B = buf("A", (50,)), buf("B", (50,))
    io, ii = Var("io"), Var("ii")
    vi = itv("vi", 50)
    body = block("Bblk", [vi], [io * 16 + ii], BufferStore(B, A[vi.var], (vi.var,)))
    f = PrimFunc("split", (A, B), root(nest([(io, 4), (ii, 16)], body)))
    with pytest.raises(tdsl.BoundsError, match=r"block 'Bblk'.*vi.*50"):
        interpret(f, np.zeros(50, "float32"))


def test_root_and_block_alloc_buffers_are_fresh_and_nan_filled():
    # The block reads its intermediate before writing it: the result must show NaN.
    A, B = buf("A", (4,)), buf("B", (4,))
    tmp = buf("tmp", (4,), scope="local")
    i = Var("i")
    vi = itv("vi", 4)
    body = block("B", [vi], [i], BufferStore(B, A[vi.var] + tmp[vi.var], (vi.var,)), alloc=[tmp])
    f = PrimFunc("uninit", (A, B), root(loop(i, 4, body)))
    assert np.isnan(interpret(f, np.ones(4, "float32"))).all()


def test_int_intermediate_garbage_pattern():
    A, B = buf("A", (3,), "int32"), buf("B", (3,), "int32")
    tmp = buf("tmp", (3,), "int32")
    i = Var("i")
    vi = itv("vi", 3)
    body = block("B", [vi], [i], BufferStore(B, tmp[vi.var], (vi.var,)))
    f = PrimFunc("garbage", (A, B), root(loop(i, 3, body), alloc=[tmp]))
    expected = np.frombuffer(bytes([GARBAGE_BYTE] * 4), "int32")[0]
    np.testing.assert_array_equal(interpret(f, np.zeros(3, "int32")), [expected] * 3)


def test_nested_block_and_loop_kinds(rng):
    A, B = buf("A", (6,)), buf("B", (6,))
    i = Var("i")
    vi = itv("vi", 6)
    inner = block("inner", [vi], [i], BufferStore(B, A[vi.var] + f32(1), (vi.var,)))
    outer = BlockRealize((), TRUE, Block("outer", (), (), (), loop(i, 6, inner, "thread_binding")))
    f = PrimFunc("nested", (A, B), root(outer))
    a = rng.standard_normal(6, "float32")
    np.testing.assert_array_equal(interpret(f, a), a + 1)
    assert "threadIdx.x, run serially" in python_source(f)


@pytest.mark.parametrize("kind", ["parallel", "vectorized", "unrolled"])
def test_other_loop_kinds_run_serially(kind, rng):
    f = elementwise(lambda A, v: A[v] * f32(3), kind=kind)
    a = rng.standard_normal(16, "float32")
    np.testing.assert_array_equal(interpret(f, a), a * np.float32(3))


def test_deep_loop_nest_beyond_python_block_limit():
    # 24 nested loops of extent 1..2: CPython allows only 20 static loop levels per function.
    A = buf("A", (1,), "int32")
    loops = [(Var(f"l{k}"), 2 if k < 3 else 1) for k in range(24)]
    total = loops[0][0]
    for var, _ in loops[1:]:
        total = total + var
    body = BufferStore(A, A[0] + total + 1, (IntImm(0),))
    f = PrimFunc("deep", (A,), nest(loops, body))
    a = np.zeros(1, "int32")
    interpret(f, a)
    assert a[0] == 8 + 12  # 8 iterations; the three outer variables sum to 12 over them


# ----------------------------------------------------------------------------- expressions

def test_long_expression_chains():
    # 250 nested additions: more than the 200 parentheses CPython accepts in one expression.
    def chain(A, v):
        e = A[v]
        for _ in range(250):
            e = e + f32(1)
        return e

    np.testing.assert_array_equal(interpret(elementwise(chain, 4), np.zeros(4, "float32")), [250] * 4)


def test_if_then_else_is_lazy_and_select_is_eager():
    # B[i] = A[i - 1] when i >= 1 else 0: A[-1] must never be loaded by if_then_else.
    def lazy(A, v):
        return if_then_else(v >= 1, A[v - 1], f32(0))

    def eager(A, v):
        return Select(v >= 1, A[v - 1], f32(0))

    a = np.arange(8, dtype="float32") + 1
    np.testing.assert_array_equal(interpret(elementwise(lazy, 8), a), [0, 1, 2, 3, 4, 5, 6, 7])
    with pytest.raises(tdsl.BoundsError, match=r"'A'.*\[-1\]"):
        interpret(elementwise(eager, 8), a)


def test_integer_wraparound_like_numpy():
    # Loop-variable arithmetic overflows int32 and must wrap exactly like numpy's int32.
    f = elementwise(lambda A, v: A[v] + v * 1073741824 + 7, 8, "int32")
    a = np.arange(8, dtype="int32") * 1000
    with np.errstate(over="ignore"):
        expected = a + np.arange(8, dtype="int32") * np.int32(1073741824) + np.int32(7)
    np.testing.assert_array_equal(interpret(f, a), expected)
    # The same through a cast: loop variable * 50 narrowed to int8 / uint8.
    g = elementwise(lambda A, v: Cast(D.int8, v * 50), 8, "int8")
    np.testing.assert_array_equal(interpret(g, np.zeros(8, "int8")), (np.arange(8) * 50).astype(np.int8))
    h = elementwise(lambda A, v: A[v] + IntImm(200, D.uint8), 8, "uint8")
    np.testing.assert_array_equal(interpret(h, np.arange(8, dtype="uint8") * 20),
                                  (np.arange(8, dtype="uint8") * 20) + np.uint8(200))


def test_floor_division_and_modulo():
    # On loop-variable ints (Python ints) and on loaded values (numpy scalars).
    q = elementwise(lambda A, v: (v - 8) // 3 + (A[v] // 3) * 100, 16, "int32")
    m = elementwise(lambda A, v: (v - 8) % 3 + (A[v] % 3) * 100, 16, "int32")
    a = np.arange(16, dtype="int32") - 9
    idx = np.arange(16) - 8
    np.testing.assert_array_equal(interpret(q, a), idx // 3 + (a // 3) * 100)
    np.testing.assert_array_equal(interpret(m, a), idx % 3 + (a % 3) * 100)
    assert (interpret(m, a) >= 0).all()


def test_integer_div_truncates_and_float_floordiv_floors():
    from tdsl.ir import Binary

    t = elementwise(lambda A, v: Binary("div", A[v], IntImm(4)), 8, "int32")
    a = np.array([-9, -8, -7, -1, 0, 1, 7, 9], "int32")
    np.testing.assert_array_equal(interpret(t, a), [-2, -2, -1, 0, 0, 0, 1, 2])
    fl = elementwise(lambda A, v: A[v] // f32(2), 4)
    np.testing.assert_array_equal(interpret(fl, np.array([-3, -1, 1, 3], "float32")), [-2, -1, 0, 1])


def test_float_to_int_cast_truncates_toward_zero():
    f = elementwise(lambda A, v: Cast(D.int32, A[v]), 4, "float32", "int32")
    np.testing.assert_array_equal(interpret(f, np.array([-2.7, -0.5, 0.5, 2.7], "float32")), [-2, 0, 0, 2])


def test_float16_arithmetic_stays_in_float16():
    # Sequential accumulation of 2048 ones in float16 stops at 2048 (2049 is not representable).
    A, C = buf("A", (4096,), "float16"), buf("C", (1,), "float16")
    k = Var("k")
    vk = itv("vk", 4096, "R")
    body = block("C", [vk], [k], BufferStore(C, C[0] + A[vk.var], (IntImm(0),)),
                 init=BufferStore(C, FloatImm(0.0, D.float16), (IntImm(0),)))
    f = PrimFunc("sum16", (A, C), root(loop(k, 4096, body)))
    assert interpret(f, np.ones(4096, "float16"))[0] == 2048


def test_math_calls_keep_the_dtype():
    for op in ("exp", "tanh", "sigmoid", "sqrt", "erf", "rsqrt", "log", "round"):
        f = elementwise(lambda A, v, op=op: Call(D.float16, op, (A[v],)), 8, "float16")
        out = interpret(f, np.linspace(0.5, 2, 8).astype("float16"))
        assert out.dtype == np.float16
    fma = elementwise(lambda A, v: Call(D.float32, "fma", (A[v], A[v], f32(1))), 4)
    np.testing.assert_allclose(interpret(fma, np.arange(4, dtype="float32")), [1, 2, 5, 10])


def test_let_if_and_evaluate():
    A, B = buf("A", (6,), "int32"), buf("B", (6,), "int32")
    i, x = Var("i"), Var("x")
    store_pos = BufferStore(B, x * 2, (i,))
    store_neg = BufferStore(B, IntImm(0) - x, (i,))
    body = LetStmt(x, A[i] - 3, SeqStmt((Evaluate(IntImm(0)), IfThenElse(x >= 0, store_pos, store_neg))))
    f = PrimFunc("let_if", (A, B), loop(i, 6, body))
    a = np.arange(6, dtype="int32")
    np.testing.assert_array_equal(interpret(f, a), np.where(a - 3 >= 0, (a - 3) * 2, 3 - a))


def test_extern_call_raises_clear_error():
    A = buf("A", (4,))
    i = Var("i")
    body = Evaluate(Call(D.int32, "llvm.x86.avx512.vpdpbusd.512", (A[i],)))
    f = PrimFunc("ext", (A,), loop(i, 4, body))
    with pytest.raises(ExternCallError, match="vpdpbusd"):
        interpret(f, np.zeros(4, "float32"))
    assert issubclass(ExternCallError, NotImplementedError)


# ----------------------------------------------------------------------------- lowered IR, views

def test_allocate_and_vector_ramp_broadcast(rng):
    # Lowered form: flat buffers, a local Allocate, 8-lane loads/stores.
    A, B = buf("A", (32,)), buf("B", (32,))
    tmp = buf("tmp", (8,), scope="local")
    io = Var("io")
    lanes = Ramp(io * 8, IntImm(1), 8)
    body = Allocate(tmp, SeqStmt((
        BufferStore(tmp, A[lanes] * Broadcast(f32(2), 8), (Ramp(IntImm(0), IntImm(1), 8),)),
        BufferStore(B, tmp[Ramp(IntImm(0), IntImm(1), 8)] + Broadcast(f32(1), 8), (lanes,)))))
    f = PrimFunc("vec", (A, B), loop(io, 4, body))
    a = rng.standard_normal(32, "float32")
    np.testing.assert_array_equal(interpret(f, a), a * 2 + 1)


def test_strided_ramp_vector_select_and_bounds():
    A, B = buf("A", (16,)), buf("B", (8,))
    even = A[Ramp(IntImm(0), IntImm(2), 8)]
    odd = A[Ramp(IntImm(1), IntImm(2), 8)]
    f = PrimFunc("pairs", (A, B), BufferStore(B, Select(even > odd, even, odd), (Ramp(IntImm(0), IntImm(1), 8),)))
    a = np.random.default_rng(1).standard_normal(16).astype("float32")
    np.testing.assert_array_equal(interpret(f, a), np.maximum(a[0::2], a[1::2]))
    bad = PrimFunc("bad", (A, B), BufferStore(B, A[Ramp(IntImm(2), IntImm(2), 8)], (Ramp(IntImm(0), IntImm(1), 8),)))
    with pytest.raises(tdsl.BoundsError, match="'A'.*16"):
        interpret(bad, a)


@pytest.mark.parametrize("index", [-1, 16])
def test_out_of_bounds_load_and_store_raise(index):
    A, B = buf("A", (16,)), buf("B", (16,))
    load = PrimFunc("ld", (A, B), BufferStore(B, A[IntImm(index)], (IntImm(0),)))
    store = PrimFunc("st", (A, B), BufferStore(B, A[IntImm(0)], (IntImm(index),)))
    a = np.zeros(16, "float32")
    with pytest.raises(tdsl.BoundsError, match=rf"'A'.*\[{index}\]"):
        interpret(load, a)
    with pytest.raises(IndexError, match=rf"'B'.*\[{index}\]"):
        interpret(store, a)


def test_out_of_bounds_on_one_axis_is_caught_even_if_flat_position_is_valid():
    A, B = buf("A", (4, 4)), buf("B", (1,))
    f = PrimFunc("ax", (A, B), BufferStore(B, A[IntImm(0), IntImm(5)], (IntImm(0),)))
    with pytest.raises(tdsl.BoundsError, match=r"\[0, 5\]"):
        interpret(f, np.zeros((4, 4), "float32"))


def test_strided_parameter_view(rng):
    # A declares row stride 8 (elements): the caller passes a column slice of an 4x8 array.
    A = buf("A", (4, 3), strides=(IntImm(8), IntImm(1)))
    s = Var("s")
    Asym = buf("A", (4, 3), strides=(s, IntImm(1)))
    B = buf("B", (4, 3))
    i, j = Var("i"), Var("j")
    for Abuf in (A, Asym):
        f = PrimFunc("view", (Abuf, B), nest([(i, 4), (j, 3)], BufferStore(B, Abuf[i, j] * f32(10), (i, j))))
        big = rng.standard_normal((4, 8), "float32")
        np.testing.assert_array_equal(interpret(f, big[:, 2:5]), big[:, 2:5] * 10)
    with pytest.raises(tdsl.ArgumentError, match="stride"):
        interpret(PrimFunc("view", (A, B), BufferStore(B, A[0, 0], (IntImm(0), IntImm(0)))),
                  rng.standard_normal((4, 3), "float32"))


def test_intermediate_with_strides_and_offset():
    # tmp is a 3x2 view with row stride 5 at offset 4 inside its storage.
    A, B = buf("A", (3, 2)), buf("B", (3, 2))
    tmp = buf("tmp", (3, 2), strides=(IntImm(5), IntImm(1)), elem_offset=IntImm(4))
    i, j, i2, j2 = Var("i"), Var("j"), Var("i2"), Var("j2")
    body = SeqStmt((nest([(i, 3), (j, 2)], BufferStore(tmp, A[i, j] + f32(1), (i, j))),
                    nest([(i2, 3), (j2, 2)], BufferStore(B, tmp[i2, j2], (i2, j2)))))
    f = PrimFunc("strided_tmp", (A, B), root(body, alloc=[tmp]))
    a = np.arange(6, dtype="float32").reshape(3, 2)
    np.testing.assert_array_equal(interpret(f, a), a + 1)
    assert "_alloc('tmp', (3, 2), 'float32', (5, 1), 4)" in python_source(f)


def test_flattened_function_binds_against_original_params(rng):
    # The lowered form: flat parameters, originals in attrs["tdsl.flat_params"].
    n = Var("n")
    A2, B2 = buf("A", (n, 4)), buf("B", (n, 4))
    A1, B1 = buf("A", (n * 4,)), buf("B", (n * 4,))
    k = Var("k")
    body = loop(k, n * 4, BufferStore(B1, A1[k] * f32(2), (k,)))
    f = PrimFunc("flat", (A1, B1), body, attrs=(("tdsl.flat_params", (A2, B2)),))
    a = rng.standard_normal((5, 4), "float32")
    np.testing.assert_array_equal(interpret(f, a), a * 2)
    out = np.zeros((10, 4), "float32")[::2]  # non-contiguous output: computed on a copy, copied back
    interpret(f, np.asfortranarray(a), out)
    np.testing.assert_array_equal(out, a * 2)
    with pytest.raises(tdsl.ArgumentError, match="2-d"):
        interpret(f, a.reshape(-1))


# ----------------------------------------------------------------------------- calling convention

def three_param_func():
    """C = A + B, D = A - B over a symbolic n."""
    n = Var("n")
    A, B, C, Dd = buf("A", (n,)), buf("B", (n,)), buf("C", (n,)), buf("D", (n,))
    i = Var("i")
    body = SeqStmt((BufferStore(C, A[i] + B[i], (i,)), BufferStore(Dd, A[i] - B[i], (i,))))
    return PrimFunc("addsub", (A, B, C, Dd), loop(i, n, body))


def test_outputs_left_out_are_allocated_and_returned(rng):
    f = three_param_func()
    a, b = rng.standard_normal(7, "float32"), rng.standard_normal(7, "float32")
    c, d = interpret(f, a, b)
    np.testing.assert_array_equal(c, a + b)
    np.testing.assert_array_equal(d, a - b)
    c2 = np.zeros(7, "float32")
    d2 = interpret(f, a, b, c2)
    np.testing.assert_array_equal(c2, a + b)
    np.testing.assert_array_equal(d2, a - b)
    d3 = np.zeros(7, "float32")
    assert interpret(f, a, b, c2, d3) is None
    np.testing.assert_array_equal(d3, a - b)
    c4 = interpret(f, a, b, D=d3)
    np.testing.assert_array_equal(c4, a + b)
    a_before = a.copy()
    interpret(f, a, b)
    np.testing.assert_array_equal(a, a_before)


def test_scalar_parameters(rng):
    A, B = buf("A", (8,)), buf("B", (8,))
    alpha, shift = Var("alpha", D.float32), Var("shift")
    i = Var("i")
    f = PrimFunc("scal", (A, alpha, shift, B),
                 loop(i, 8, BufferStore(B, A[(i + shift) % 8] * alpha, (i,))))
    a = rng.standard_normal(8, "float32")
    np.testing.assert_array_equal(interpret(f, a, 2.0, -3), np.roll(a, 3) * np.float32(2))
    np.testing.assert_array_equal(interpret(f, a, alpha=np.float32(2), shift=np.int64(5)),
                                  np.roll(a, -5) * np.float32(2))
    with pytest.raises(tdsl.ArgumentError, match="'shift'.*integer"):
        interpret(f, a, 2.0, 1.5)
    with pytest.raises(tdsl.ArgumentError, match="'shift'.*fit"):
        interpret(f, a, 2.0, 2**40)
    with pytest.raises(tdsl.ArgumentError, match="missing scalar parameter 'shift'"):
        interpret(f, a, 2.0)


@pytest.mark.parametrize("args, kwargs, pattern", [
    ((np.zeros(7, "float64"), np.zeros(7, "float32")), {}, r"'A' expects dtype float32, got float64"),
    ((np.zeros(7, "float32"), np.zeros(6, "float32")), {}, r"'B' axis 0: expected n = 7 \(bound by parameter 'A'"),
    ((np.zeros((7, 1), "float32"), np.zeros(7, "float32")), {}, r"'A' expects a 1-d array"),
    ((np.zeros(7, "float32"),), {}, r"missing input buffer 'B'.*C, D"),
    ((np.zeros(7, "float32"),) * 5, {}, r"takes 4 arguments \(A, B, C, D\), got 5"),
    ((np.zeros(7, "float32"), np.zeros(7, "float32")), {"E": 1}, r"no parameter 'E'"),
    ((np.zeros(7, "float32"), np.zeros(7, "float32")), {"A": 1}, r"'A' is given twice"),
    (([0.0] * 7, np.zeros(7, "float32")), {}, r"'A' expects a numpy array"),
])
def test_argument_errors_name_the_parameter(args, kwargs, pattern):
    with pytest.raises(tdsl.ArgumentError, match=pattern):
        interpret(three_param_func(), *args, **kwargs)


def test_output_with_unbound_symbolic_size_must_be_passed():
    n, m = Var("n"), Var("m")
    A, B = buf("A", (n,)), buf("B", (m,))
    f = PrimFunc("sizes", (A, B), loop(Var("i"), m, BufferStore(B, f32(0), (IntImm(0),))))
    with pytest.raises(tdsl.ArgumentError, match="'B'.*'m'"):
        interpret(f, np.zeros(3, "float32"))
    assert interpret(f, np.zeros(3, "float32"), np.ones(2, "float32")) is None


def test_read_only_array_for_written_buffer_is_rejected():
    a = np.zeros(7, "float32")
    out = np.zeros(7, "float32")
    out.flags.writeable = False
    with pytest.raises(tdsl.ArgumentError, match="'C'.*read-only"):
        interpret(three_param_func(), a, a, out)


def test_code_is_generated_once_per_function():
    f = matmul_ir(4)
    assert python_source(f) is python_source(f)
    assert "for i in range(4):" in python_source(f)


# ----------------------------------------------------------------------------- property: integer semantics

def _int_exprs():
    """Random int32 expression trees over the loop variable i and the load A[i], as pairs
    (IR builder, numpy int32 vectorised evaluator); numpy's arrays wrap and floor like the IR."""
    from hypothesis import strategies as st

    from tdsl.ir import Binary

    leaves = st.one_of(
        st.just((lambda A, i: i, lambda a, i: i)),
        st.just((lambda A, i: A[i], lambda a, i: a)),
        st.integers(-2**31, 2**31 - 1).map(lambda c: (lambda A, i: IntImm(c), lambda a, i: np.full_like(a, c))),
    )

    def extend(children):
        ops = st.sampled_from(["add", "sub", "mul", "min", "max"])
        np_ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum}
        binary = st.tuples(ops, children, children).map(
            lambda t: (lambda A, i, t=t: Binary(t[0], t[1][0](A, i), t[2][0](A, i)),
                       lambda a, i, t=t: np_ops[t[0]](t[1][1](a, i), t[2][1](a, i))))
        divisors = st.integers(-7, 7).filter(lambda d: d != 0)
        division = st.tuples(st.sampled_from(["floordiv", "floormod"]), children, divisors).map(
            lambda t: (lambda A, i, t=t: Binary(t[0], t[1][0](A, i), IntImm(t[2])),
                       lambda a, i, t=t: (np.floor_divide if t[0] == "floordiv" else np.mod)(
                           t[1][1](a, i), np.int32(t[2]))))
        narrow = children.map(
            lambda c: (lambda A, i, c=c: Cast(D.int32, Cast(D.int8, c[0](A, i))),
                       lambda a, i, c=c: c[1](a, i).astype(np.int8).astype(np.int32)))
        return st.one_of(binary, division, narrow)

    return st.recursive(leaves, extend, max_leaves=8)


def test_integer_expressions_match_numpy():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=60, deadline=None)
    @given(_int_exprs(), st.lists(st.integers(-2**31, 2**31 - 1), min_size=6, max_size=6))
    def check(pair, values):
        build, reference = pair
        a = np.array(values, dtype=np.int32)
        f = elementwise(build, 6, "int32")
        with np.errstate(all="ignore"):
            expected = reference(a, np.arange(6, dtype=np.int32))
        np.testing.assert_array_equal(interpret(f, a), np.broadcast_to(expected, (6,)), err_msg=python_source(f))

    check()


def test_output_read_before_written_cannot_be_left_out():
    import tdsl

    f = tdsl.parse('''
@T.prim_func
def acc(A: T.Buffer((4, 3), "float32"), y: T.Buffer((4,), "float32")):
    for i, k in T.grid(4, 3):
        with T.block("y"):
            vi, vk = T.axis.remap("SR", [i, k])
            y[vi] = y[vi] + A[vi, vk]
''')
    a = np.ones((4, 3), "float32")
    with pytest.raises(tdsl.ArgumentError, match="'y' cannot be left out"):
        tdsl.interpret(f, a)
    with pytest.raises(tdsl.ArgumentError, match="'y' cannot be left out"):
        tdsl.build(f)(a)
    y = np.full(4, 10, "float32")
    tdsl.interpret(f, a, y)
    np.testing.assert_array_equal(y, np.full(4, 13, "float32"))


@T.prim_func
def _min_max_nan(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32"), C: T.Buffer((4,), "float32"),
                 D: T.Buffer((4,), "float32")):
    for i in range(4):
        with T.block("B"):
            vi = T.axis.spatial(4, i)
            B[vi] = T.max(A[vi], T.float32(1))
            C[vi] = T.max(T.float32(1), A[vi])
            D[vi] = T.min(T.float32(1), A[vi])


def test_float_min_max_propagate_nan_like_numpy_and_the_cpu_backend():
    # Python's max(1.0, nan) is 1.0: the interpreter must not use it on floats
    a = np.array([np.nan, 0, 2, -1], np.float32)
    want = (np.maximum(a, 1), np.maximum(1, a), np.minimum(1, a))
    for got in (tdsl.interpret(_min_max_nan, a), tdsl.build(_min_max_nan)(a)):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_float_min_max_match_numpy_scalar_and_vector():
    # NaN on either side gives NaN; ties of signed zeros compare equal (numpy itself returns
    # either zero depending on its code path, so the sign of a tied zero is not specified)
    a = np.array([np.nan, 0.0, -0.0, 0.0, -0.0, 1, np.nan, 3] * 2, np.float32)
    b = np.array([1, np.nan, 0.0, -0.0, -0.0, np.nan, np.nan, 2] * 2, np.float32)

    @T.prim_func
    def mm(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32"),
           D: T.Buffer((16,), "float32")):
        for i in range(16):
            with T.block("C"):
                vi = T.axis.spatial(16, i)
                C[vi] = T.max(A[vi], B[vi])
                D[vi] = T.min(A[vi], B[vi])

    sch = tdsl.Schedule(mm)
    _, v = sch.split(sch.get_loops(sch.get_block("C"))[0], factors=[None, 8])
    sch.vectorize(v)
    want = (np.maximum(a, b), np.minimum(a, b))
    for got in (tdsl.interpret(mm, a, b), tdsl.build(mm)(a, b), tdsl.build(sch)(a, b)):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
