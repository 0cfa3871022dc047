"""LLVM codegen: every dtype and operator, math calls, vectors, allocations, lazy selects.

The interpreter is the oracle for programs it runs; hand-built lowered IR (float floor
division, gathers, vector if_then_else) is checked against numpy directly.
"""
import math

import numpy as np
import pytest

import tdsl
from tdsl import dtypes as D
from tdsl.ir import (
    Allocate,
    Binary,
    Broadcast,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Evaluate,
    For,
    IntImm,
    PrimFunc,
    Ramp,
    SeqStmt,
    Var,
    const,
)

N = 37
INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOAT_DTYPES = ["float16", "bfloat16", "float32", "float64"]


def _np(dtype):
    return D.DataType.parse(dtype).numpy


def _operands(dtype, rng):
    npdt = _np(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, N).astype(bool), rng.integers(0, 2, N).astype(bool)
    if dtype.startswith("uint"):
        return rng.integers(0, 100, N).astype(npdt), rng.integers(1, 9, N).astype(npdt)
    if dtype.startswith("int"):
        b = rng.integers(1, 9, N) * rng.choice([-1, 1], N)
        return rng.integers(-100, 100, N).astype(npdt), b.astype(npdt)
    return (rng.standard_normal(N) * 4).astype(npdt), (rng.standard_normal(N) + 3).astype(npdt)


def _arith_kernel(dtype):
    int_ops = """
            O[5, vi] = A[vi] // B[vi]
            O[6, vi] = A[vi] % B[vi]""" if not dtype.startswith(("float", "bfloat")) else """
            O[5, vi] = A[vi] / B[vi]
            O[6, vi] = T.Select(A[vi] < B[vi], A[vi], B[vi])"""
    return tdsl.parse(f'''
@T.prim_func
def arith(A: T.Buffer(({N},), "{dtype}"), B: T.Buffer(({N},), "{dtype}"), O: T.Buffer((7, {N}), "{dtype}")):
    for i in range({N}):
        with T.block("o"):
            vi = T.axis.spatial({N}, i)
            O[0, vi] = A[vi] + B[vi]
            O[1, vi] = A[vi] - B[vi]
            O[2, vi] = A[vi] * B[vi]
            O[3, vi] = T.min(A[vi], B[vi])
            O[4, vi] = T.max(A[vi], B[vi]){int_ops}
''')


@pytest.mark.parametrize("dtype", INT_DTYPES + FLOAT_DTYPES)
def test_arithmetic_every_dtype(dtype, rng):
    func = _arith_kernel(dtype)
    a, b = _operands(dtype, rng)
    got = tdsl.build(func)(a, b)
    want = np.zeros((7, N), _np(dtype))
    tdsl.interpret(func, a, b, want)
    if dtype in INT_DTYPES:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6)


@pytest.mark.parametrize("src,dst", [("int8", "float32"), ("float32", "int16"), ("uint8", "int64"),
                                     ("int64", "int8"), ("float64", "float16"), ("float32", "bfloat16"),
                                     ("bfloat16", "float64"), ("float16", "uint8"), ("bool", "int32"),
                                     ("float32", "bool"), ("int32", "bool"), ("uint32", "float64"),
                                     ("float16", "bfloat16")])
def test_casts(src, dst, rng):
    func = tdsl.parse(f'''
@T.prim_func
def cast(A: T.Buffer(({N},), "{src}"), B: T.Buffer(({N},), "{dst}")):
    for i in range({N}):
        with T.block("c"):
            vi = T.axis.spatial({N}, i)
            B[vi] = T.cast(A[vi], "{dst}")
''')
    if src == "bool":
        a = rng.integers(0, 2, N).astype(bool)
    elif src.startswith(("float", "bfloat")):
        a = (rng.standard_normal(N) * 20).astype(_np(src))
        if dst.startswith("uint"):
            a = np.abs(a)
    else:
        a = rng.integers(0, 100, N).astype(_np(src))
    got = tdsl.build(func)(a)
    want = np.zeros(N, _np(dst))
    tdsl.interpret(func, a, want)
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def test_comparisons_and_logic(rng):
    func = tdsl.parse(f'''
@T.prim_func
def cmp(A: T.Buffer(({N},), "float32"), B: T.Buffer(({N},), "float32"), M: T.Buffer((8, {N}), "bool")):
    for i in range({N}):
        with T.block("m"):
            vi = T.axis.spatial({N}, i)
            M[0, vi] = A[vi] == B[vi]
            M[1, vi] = A[vi] != B[vi]
            M[2, vi] = A[vi] < B[vi]
            M[3, vi] = A[vi] <= B[vi]
            M[4, vi] = A[vi] > B[vi]
            M[5, vi] = A[vi] >= B[vi]
            M[6, vi] = A[vi] > 0.0 and B[vi] > 0.0
            M[7, vi] = not (A[vi] > 0.0 or B[vi] > 0.0)
''')
    a = rng.integers(-2, 3, N).astype(np.float32)
    b = rng.integers(-2, 3, N).astype(np.float32)
    a[0] = np.nan
    got = tdsl.build(func)(a, b)
    want = np.zeros((8, N), bool)
    tdsl.interpret(func, a, b, want)
    np.testing.assert_array_equal(got, want)


# -------------------------------------------------------------------- hand-built lowered IR

def _flat(name, n, dtype):
    return Buffer(name, (IntImm(n),), D.DataType.parse(dtype))


def _loop(n, body_fn, kind="serial"):
    i = Var("i")
    return For(i, IntImm(0), IntImm(n), kind, body_fn(i))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_floordiv_floormod_match_numpy(dtype):
    a = np.array([7.5, -7.5, 7.5, -7.5, 0.0, -0.0, 3.0, 1e30, 5.0, -3.0], _np(dtype))
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.0, 3.0, np.inf, 1.5], _np(dtype))
    n = len(a)
    A, B, Q, R = (_flat(x, n, dtype) for x in "ABQR")
    body = _loop(n, lambda i: SeqStmt((
        BufferStore(Q, Binary("floordiv", BufferLoad(A, (i,)), BufferLoad(B, (i,))), (i,)),
        BufferStore(R, Binary("floormod", BufferLoad(A, (i,)), BufferLoad(B, (i,))), (i,)))))
    q, r = tdsl.build(PrimFunc("fdm", (A, B, Q, R), body))(a, b)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(q, np.floor_divide(a, b))
        np.testing.assert_array_equal(r, np.mod(a, b))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_division_by_zero_and_overflow_do_not_trap(dtype):
    info = np.iinfo(_np(dtype))
    a = np.array([7, -7, info.min, info.min, 5, -5], _np(dtype))
    b = np.array([0, 0, -1, -1, -1, 2], _np(dtype))
    n = len(a)
    A, B, Q, R, D_ = (_flat(x, n, dtype) for x in ("A", "B", "Q", "R", "D"))
    body = _loop(n, lambda i: SeqStmt((
        BufferStore(Q, Binary("floordiv", BufferLoad(A, (i,)), BufferLoad(B, (i,))), (i,)),
        BufferStore(R, Binary("floormod", BufferLoad(A, (i,)), BufferLoad(B, (i,))), (i,)),
        BufferStore(D_, Binary("div", BufferLoad(A, (i,)), BufferLoad(B, (i,))), (i,)))))
    q, r, d = tdsl.build(PrimFunc("idm", (A, B, Q, R, D_), body))(a, b)
    assert list(q[:2]) == [0, 0] and list(r[:2]) == [0, 0]       # x // 0 == 0, as numpy gives
    assert q[2] == info.min and r[3] == 0                          # MIN // -1 wraps
    assert list(q[4:]) == [-5, -3] and list(r[4:]) == [0, 1] and list(d[4:]) == [-5, -2]


MATH = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "erf": np.vectorize(math.erf), "abs": np.abs,
    "floor": np.floor, "ceil": np.ceil, "exp2": np.exp2, "log2": np.log2, "sin": np.sin, "cos": np.cos,
    "round": np.round, "trunc": np.trunc,
}
POSITIVE = {"log", "sqrt", "rsqrt", "log2"}


@pytest.mark.parametrize("lanes", [1, 16])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_math_calls_scalar_and_vector(dtype, lanes, rng):
    n = 64
    x = np.concatenate([rng.standard_normal(n - 12) * 3,
                        [0.0, 1e-6, -1e-6, 0.3, -0.62, 0.63, 0.99, 1.01, -2.5, 9.0, -30.0, 0.5]])
    xp = np.abs(x) + 0.1
    names = list(MATH)
    A = _flat("A", n, dtype)
    P = _flat("P", n, dtype)
    O = _flat("O", n * len(names), dtype)
    dt = D.DataType.parse(dtype)

    def body(i):
        idx = Ramp(i * lanes, IntImm(1), lanes) if lanes > 1 else i
        stores = []
        for k, name in enumerate(names):
            src = P if name in POSITIVE else A
            val = Call(dt.with_lanes(lanes), name, (BufferLoad(src, (idx,)),))
            out_idx = Ramp(i * lanes + k * n, IntImm(1), lanes) if lanes > 1 else i + k * n
            stores.append(BufferStore(O, val, (out_idx,)))
        return SeqStmt(tuple(stores))

    kernel = tdsl.build(PrimFunc("math", (A, P, O), _loop(n // lanes, body)))
    out = kernel(x.astype(dt.numpy), xp.astype(dt.numpy)).reshape(len(names), n)
    for k, name in enumerate(names):
        arg = xp if name in POSITIVE else x
        want = MATH[name](arg.astype(dt.numpy).astype(np.float64))
        rtol = 2e-6 if dtype == "float32" else 1e-7 if name not in ("tanh", "erf") else 2e-7
        np.testing.assert_allclose(out[k], want, rtol=rtol, atol=1e-30, err_msg=name)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_math_calls_half_precision(dtype, rng):
    func = tdsl.parse(f'''
@T.prim_func
def m(A: T.Buffer((40,), "{dtype}"), O: T.Buffer((5, 40), "{dtype}")):
    for i in range(40):
        with T.block("m"):
            vi = T.axis.spatial(40, i)
            O[0, vi] = T.exp(A[vi])
            O[1, vi] = T.tanh(A[vi])
            O[2, vi] = T.erf(A[vi])
            O[3, vi] = T.sigmoid(A[vi])
            O[4, vi] = T.sqrt(T.abs(A[vi]))
''')
    a = rng.standard_normal(40).astype(_np(dtype))
    got = tdsl.build(func)(a).astype(np.float64)
    want = np.zeros((5, 40), _np(dtype))
    tdsl.interpret(func, a, want)
    np.testing.assert_allclose(got, want.astype(np.float64), rtol=1e-2, atol=1e-3)


def test_pow_and_fma(rng):
    n = 32
    A, B, C, O = (_flat(x, n, "float32") for x in "ABCO")
    P = _flat("P", n, "float32")
    body = _loop(n, lambda i: SeqStmt((
        BufferStore(O, Call(D.float32, "fma", (BufferLoad(A, (i,)), BufferLoad(B, (i,)), BufferLoad(C, (i,)))),
                    (i,)),
        BufferStore(P, Call(D.float32, "pow", (BufferLoad(B, (i,)), BufferLoad(C, (i,)))), (i,)))))
    a, c = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    b = rng.random(n).astype(np.float32) + 0.5
    o, p = tdsl.build(PrimFunc("pf", (A, B, C, O, P), body))(a, b, c)
    np.testing.assert_allclose(o, a * b + c, rtol=1e-6)
    np.testing.assert_allclose(p, b ** c, rtol=1e-6)


def test_vector_gather_broadcast_and_lazy_vector_select(rng):
    """Strided (gathered) vector loads, a broadcast index, and a lane-wise lazy if_then_else
    whose loads would be out of bounds in the lanes that are not selected."""
    n, lanes = 64, 8
    A = _flat("A", n, "float32")
    S = _flat("S", 1, "float32")
    O = _flat("O", n, "float32")
    G = _flat("G", n // 2, "float32")

    def body(i):
        ramp = Ramp(i * lanes, IntImm(1), lanes)
        shifted = Ramp(i * lanes - 1, IntImm(1), lanes)
        cond = Binary("ge", shifted, Broadcast(IntImm(0), lanes))
        guarded = Call(D.float32.with_lanes(lanes), "if_then_else",
                       (cond, BufferLoad(A, (shifted,)), Broadcast(const(0.0, "float32"), lanes)))
        val = guarded + BufferLoad(S, (Broadcast(IntImm(0), lanes),))
        return BufferStore(O, val, (ramp,))

    gather = _loop(n // 2 // lanes, lambda i: BufferStore(
        G, BufferLoad(A, (Ramp(i * lanes * 2, IntImm(2), lanes),)), (Ramp(i * lanes, IntImm(1), lanes),)))
    func = PrimFunc("vec", (A, S, O, G), SeqStmt((_loop(n // lanes, body), gather)))
    a = rng.standard_normal(n).astype(np.float32)
    s = np.array([0.5], np.float32)
    o, g = tdsl.build(func, bounds_check=True)(a, s)
    np.testing.assert_allclose(o, np.concatenate([[0.0], a[:-1]]) + 0.5, rtol=1e-6)
    np.testing.assert_array_equal(g, a[::2])


def test_vectorized_schedule_produces_vector_ir(rng):
    func = tdsl.parse('''
@T.prim_func
def vadd(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32"), C: T.Buffer((256,), "float32")):
    for io in range(16):
        for ii in T.vectorized(16):
            with T.block("c"):
                vi = T.axis.spatial(256, io * 16 + ii)
                C[vi] = T.exp(A[vi]) * B[vi]
''')
    kernel = tdsl.build(func)
    assert "<16 x float>" in kernel.source
    assert "expf" not in kernel.optimized_ir       # exp is vector code, not one libm call per lane
    a, b = rng.standard_normal(256).astype(np.float32), rng.standard_normal(256).astype(np.float32)
    np.testing.assert_allclose(kernel(a, b), np.exp(a) * b, rtol=1e-6)


def test_stack_and_heap_allocations(rng):
    """A small intermediate lives on the stack, a large one on the (freed) heap."""
    small, big = 16, 300_000
    A = _flat("A", big, "float32")
    O = _flat("O", big, "float32")
    T1 = Buffer("T1", (IntImm(small),), D.float32, scope="local")
    T2 = Buffer("T2", (IntImm(big),), D.float32, scope="global")
    i, j = Var("i"), Var("j")
    fill = For(i, IntImm(0), IntImm(big), "serial",
               BufferStore(T2, BufferLoad(A, (i,)) * const(2.0, "float32"), (i,)))
    use = For(i, IntImm(0), IntImm(big // small), "serial", SeqStmt((
        For(j, IntImm(0), IntImm(small), "serial", BufferStore(T1, BufferLoad(T2, (i * small + j,)), (j,))),
        For(j, IntImm(0), IntImm(small), "serial",
            BufferStore(O, BufferLoad(T1, (IntImm(small - 1) - j,)), (i * small + j,))))))
    func = PrimFunc("alloc", (A, O), Allocate(T2, Allocate(T1, SeqStmt((fill, use)))))
    kernel = tdsl.build(func)
    assert "aligned_alloc" in kernel.source and "alloca" in kernel.source
    a = rng.standard_normal(big).astype(np.float32)
    want = (a * 2).reshape(-1, small)[:, ::-1].reshape(-1)
    for _ in range(3):   # the heap buffer is freed each call (no growth, no double free)
        np.testing.assert_array_equal(kernel(a), want)


def test_scalar_parameters_of_every_kind():
    func = tdsl.parse('''
@T.prim_func
def sc(A: T.Buffer((4,), "float32"), x: T.int8, y: T.uint64, z: T.float16, w: T.bool, v: T.float64):
    for i in range(4):
        with T.block("s"):
            vi = T.axis.spatial(4, i)
            A[vi] = T.cast(x, "float32") + T.cast(y, "float32") + T.cast(z, "float32") + T.cast(v, "float32") \
                + T.Select(w, T.float32(100), T.float32(0))
''')
    kernel = tdsl.build(func)
    a = np.zeros(4, np.float32)
    kernel(a, -3, 2 ** 40, 0.5, True, 0.25)
    np.testing.assert_allclose(a, np.float32(-3 + 2 ** 40 + 0.5 + 0.25 + 100), rtol=1e-7)
    kernel(a, np.int8(5), np.uint64(1), np.float16(1.5), False, 1)
    np.testing.assert_allclose(a, 5 + 1 + 1.5 + 1)


def test_kernel_source_optimized_ir_asm_and_time(rng):
    func = tdsl.parse('''
@T.prim_func
def add(A: T.Buffer((1024,), "float32"), B: T.Buffer((1024,), "float32"), C: T.Buffer((1024,), "float32")):
    for i in range(1024):
        with T.block("c"):
            vi = T.axis.spatial(1024, i)
            C[vi] = A[vi] + B[vi]
''')
    kernel = tdsl.build(func)
    assert "noalias" in kernel.source and "define" in kernel.source
    assert "<16 x float>" in kernel.optimized_ir or "<8 x float>" in kernel.optimized_ir   # loop-vectorised
    assert "zmm" in kernel.asm or "ymm" in kernel.asm or "xmm" in kernel.asm
    assert kernel.func is func
    a, b = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
    seconds = kernel.time(a, b, number=10, repeat=3)
    assert 0 < seconds < 0.01


def test_extern_calls_vector_intrinsic_and_unknown_function():
    n = 32
    A, O = _flat("A", n, "float32"), _flat("O", n, "float32")
    f16 = D.DataType.parse("float32x16")

    def vec_fma(i):
        v = BufferLoad(A, (Ramp(i * 16, IntImm(1), 16),))
        return BufferStore(O, Call(f16, "llvm.fma.v16f32", (v, v, v)), (Ramp(i * 16, IntImm(1), 16),))

    a = np.arange(n, dtype=np.float32)
    np.testing.assert_array_equal(tdsl.build(PrimFunc("vfma", (A, O), _loop(n // 16, vec_fma)))(a), a * a + a)
    missing = _loop(n, lambda i: BufferStore(O, Call(D.float32, "tdsl_no_such_function", (BufferLoad(A, (i,)),)),
                                             (i,)))
    with pytest.raises(tdsl.TargetError, match="tdsl_no_such_function"):
        tdsl.build(PrimFunc("missing", (A, O), missing))


def test_zero_dimensional_and_parameterless_kernels():
    A, B = Buffer("A", (), D.float32), Buffer("B", (), D.float32)
    k = tdsl.build(PrimFunc("zd", (A, B), BufferStore(B, BufferLoad(A, ()) * const(3.0, "float32"), ())))
    assert float(k(np.array(2.0, np.float32))) == 6.0
    assert tdsl.build(PrimFunc("nothing", (), Evaluate(IntImm(0))))() is None


def test_float32_exp_is_accurate_over_the_whole_range():
    """exp(float32) is IR code (vectorisable): about 2 ulp, with overflow, underflow to
    subnormals and zero, infinities and NaN handled like numpy."""
    func = tdsl.parse('''
@T.prim_func
def e(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("b"):
            vi = T.axis.spatial(n, i)
            B[vi] = T.exp(A[vi])
''')
    specials = [np.inf, -np.inf, np.nan, 0.0, -0.0, 88.72283, 88.72284, -87.33655, -103.9, -103.98, -200.0]
    x = np.concatenate([np.linspace(-110, 95, 200_001), specials]).astype(np.float32)
    got = tdsl.build(func)(x).astype(np.float64)
    want = np.exp(x.astype(np.float64))
    with np.errstate(over="ignore"):
        want32 = want.astype(np.float32)
    normal = np.isfinite(want32) & (want32 >= np.finfo(np.float32).tiny)
    assert np.max(np.abs(got[normal] - want[normal]) / want[normal]) < 2.5e-7
    subnormal = (want32 > 0) & (want32 < np.finfo(np.float32).tiny)
    assert np.max(np.abs(got[subnormal] - want[subnormal])) <= 2 * 1.5e-45
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want32))
    np.testing.assert_array_equal(got == 0, want32 == 0)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got[-len(specials):], np.exp(np.array(specials, np.float32)))


def test_lane_uniform_lazy_select_branches_on_whole_vectors(rng):
    """T.if_then_else(scalar cond, vector, vector): one branch, vector loads only when taken."""
    n, lanes = 64, 16
    A, O = _flat("A", n, "float32"), _flat("O", n + lanes, "float32")

    def body(i):
        ramp = Ramp(i * lanes - lanes, IntImm(1), lanes)
        val = Call(D.float32.with_lanes(lanes), "if_then_else",
                   (Binary("ge", i, IntImm(1)), BufferLoad(A, (ramp,)), Broadcast(const(-1.0, "float32"), lanes)))
        return BufferStore(O, val, (Ramp(i * lanes, IntImm(1), lanes),))

    kernel = tdsl.build(PrimFunc("shift", (A, O), _loop(n // lanes + 1, body)), bounds_check=True)
    assert "extractelement" not in kernel.source
    a = rng.standard_normal(n).astype(np.float32)
    np.testing.assert_array_equal(kernel(a), np.concatenate([-np.ones(lanes, np.float32), a]))
