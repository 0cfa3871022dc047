"""auto_tensorize: the x86 micro-kernels fit odd GEMMs, transposed and batched operands, odd
convolutions and int8 GEMMs by themselves (reindex + pad_einsum + split/reorder + tensorize);
the CPU build calls the micro-kernel and agrees with numpy and the interpreter; refusals say why."""
import numpy as np
import pytest

import tdsl
from tdsl.intrinsics import x86
from tdsl.ir.attrs import TENSOR_INTRIN

pytestmark = pytest.mark.skipif("avx2" not in x86.available(), reason="needs AVX2")
FP32 = "x86.avx2.fp32_4x16x16"


def gemm(m, n, k, ta="n", tb="n", batch=0, dtype="float32", acc=None, init=True):
    acc = acc or dtype
    bp, vb, lp, ext, kinds = ("", "", "", "", "")
    if batch:
        bp, vb, lp, ext, kinds = f"{batch}, ", "vb, ", "b, ", f"{batch}, ", "S"
    a_shape, a_idx = ((m, k), "vi, vk") if ta == "n" else ((k, m), "vk, vi")
    b_shape, b_idx = ((k, n), "vk, vj") if tb == "n" else ((n, k), "vj, vk")
    cast = (lambda e: f'T.cast({e}, "{acc}")') if acc != dtype else (lambda e: e)
    zero = f"            with T.init():\n                C[{vb}vi, vj] = T.{acc}(0)\n" if init else ""
    a_dt, b_dt = (dtype, dtype) if dtype != "uint8" else ("uint8", "int8")
    return tdsl.parse(f'''
@T.prim_func
def g(A: T.Buffer(({bp}{a_shape[0]}, {a_shape[1]}), "{a_dt}"), B: T.Buffer(({bp}{b_shape[0]}, {b_shape[1]}), "{b_dt}"),
      C: T.Buffer(({bp}{m}, {n}), "{acc}")):
    for {lp}i, j, k in T.grid({ext}{m}, {n}, {k}):
        with T.block("C"):
            {vb}vi, vj, vk = T.axis.remap("{kinds}SSR", [{lp}i, j, k])
{zero}            C[{vb}vi, vj] = C[{vb}vi, vj] + {cast(f"A[{vb}{a_idx}]")} * {cast(f"B[{vb}{b_idx}]")}
''')


def ref(a, b, ta, tb):
    a = np.swapaxes(a, -1, -2) if ta == "t" else a
    b = np.swapaxes(b, -1, -2) if tb == "t" else b
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def tensorized(func) -> list[str]:
    from tdsl.ir import Block, collect

    return [v for b in collect(func.body, Block) for k, v in b.annotations if k == TENSOR_INTRIN]


def test_odd_gemm_100x76x53(rng):
    sch = tdsl.Schedule(gemm(100, 76, 53))
    blk = sch.auto_tensorize(sch.get_block("C"), FP32)
    assert blk.name == "C_o" and tensorized(sch.func) == [FP32]
    assert [i.kind for i in sch.trace.instructions] == ["get_block", "auto_tensorize"]
    a, b = rng.standard_normal((100, 53)).astype("float32"), rng.standard_normal((53, 76)).astype("float32")
    kernel = tdsl.build(sch, target="cpu")
    assert "llvm.fma.v8f32" in kernel.source          # the micro-kernel, not the description
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    # the outer loops stay free: the caller can still parallelize them
    sch.parallel(sch.get_loops(blk)[0])
    np.testing.assert_allclose(tdsl.build(sch, target="cpu")(a, b), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ta,tb", [("n", "t"), ("t", "n"), ("t", "t")])
def test_transposed_operands(rng, ta, tb):
    m, n, k = 13, 21, 9
    sch = tdsl.Schedule(gemm(m, n, k, ta, tb))
    sch.auto_tensorize(sch.get_block("C"), FP32)
    a = rng.standard_normal((m, k) if ta == "n" else (k, m)).astype("float32")
    b = rng.standard_normal((k, n) if tb == "n" else (n, k)).astype("float32")
    got = tdsl.build(sch, target="cpu")(a, b)
    np.testing.assert_allclose(got, ref(a, b, ta, tb), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tdsl.interpret(sch, a, b), got, rtol=1e-4, atol=1e-4)


def test_batched_gemm_keeps_the_batch_outside(rng):
    sch = tdsl.Schedule(gemm(6, 17, 5, batch=3))
    blk = sch.auto_tensorize(sch.get_block("C"), FP32)
    assert sch.get_loops(blk)[0].name.startswith("b")
    a, b = rng.standard_normal((3, 6, 5)).astype("float32"), rng.standard_normal((3, 5, 17)).astype("float32")
    np.testing.assert_allclose(tdsl.build(sch, target="cpu")(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_divisible_gemm_needs_no_copy(rng):
    sch = tdsl.Schedule(gemm(8, 32, 32))
    sch.auto_tensorize(sch.get_block("C"), FP32)
    assert not sch.func.body.block.alloc_buffers   # no pad, no reindex: tiles straight on A, B, C
    a, b = rng.standard_normal((8, 32)).astype("float32"), rng.standard_normal((32, 32)).astype("float32")
    np.testing.assert_allclose(tdsl.build(sch, target="cpu")(a, b), a @ b, rtol=1e-4, atol=1e-4)


CONV = '''
@T.prim_func
def conv2d(X: T.Buffer(({n}, {c}, {h}, {w}), "float32"), W: T.Buffer(({k}, {c}, 3, 3), "float32"),
           Y: T.Buffer(({n}, {k}, {h}, {w}), "float32")):
    Xpad = T.alloc_buffer(({n}, {c}, {h} + 2, {w} + 2), "float32")
    for b, ci, y, x in T.grid({n}, {c}, {h} + 2, {w} + 2):
        with T.block("pad"):
            vb, vc, vy, vx = T.axis.remap("SSSS", [b, ci, y, x])
            Xpad[vb, vc, vy, vx] = T.if_then_else(1 <= vy and vy <= {h} and 1 <= vx and vx <= {w},
                                                  X[vb, vc, vy - 1, vx - 1], T.float32(0))
    for b, ko, y, x, ci, r, s in T.grid({n}, {k}, {h}, {w}, {c}, 3, 3):
        with T.block("conv"):
            vb, vk, vy, vx, vc, vr, vs = T.axis.remap("SSSSRRR", [b, ko, y, x, ci, r, s])
            with T.init():
                Y[vb, vk, vy, vx] = T.float32(0)
            Y[vb, vk, vy, vx] = Y[vb, vk, vy, vx] + Xpad[vb, vc, vy + vr, vx + vs] * W[vk, vc, vr, vs]
'''


@pytest.mark.parametrize("shape", [(2, 3, 5, 7, 5), (1, 5, 3, 9, 6)])
def test_odd_conv2d(rng, shape):
    n, c, h, w, k = shape
    func = tdsl.parse(CONV.format(n=n, c=c, h=h, w=w, k=k))
    sch = tdsl.Schedule(func)
    sch.auto_tensorize(sch.get_block("conv"), FP32)
    assert tensorized(sch.func) == [FP32]
    x = rng.standard_normal((n, c, h, w)).astype("float32")
    wt = rng.standard_normal((k, c, 3, 3)).astype("float32")
    want = tdsl.interpret(func, x, wt)
    np.testing.assert_allclose(tdsl.build(sch, target="cpu")(x, wt), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tdsl.interpret(sch, x, wt), want, rtol=1e-4, atol=1e-4)


def test_int8_gemm_with_the_dot_product(rng):
    name = x86.int8_dot_any()
    sch = tdsl.Schedule(gemm(9, 13, 7, dtype="uint8", acc="int32"))
    sch.auto_tensorize(sch.get_block("C"), name)
    a = rng.integers(0, 256, (9, 7)).astype("uint8")
    b = rng.integers(-128, 128, (7, 13)).astype("int8")
    np.testing.assert_array_equal(tdsl.build(sch, target="cpu")(a, b), a.astype(np.int32) @ b.astype(np.int32))


def test_refusals_say_why_and_leave_the_schedule():
    elementwise = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((8, 16), "float32"), B: T.Buffer((8, 16), "float32")):
    for i, j in T.grid(8, 16):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2)
''')
    sch = tdsl.Schedule(elementwise)
    with pytest.raises(tdsl.ScheduleError, match="reads 1 buffer"):
        sch.auto_tensorize(sch.get_block("B"), FP32)
    sch = tdsl.Schedule(gemm(8, 16, 16, dtype="float64"))
    with pytest.raises(tdsl.ScheduleError, match="float64"):
        sch.auto_tensorize(sch.get_block("C"), FP32)
    with pytest.raises(tdsl.ScheduleError, match="unknown tensor intrinsic"):
        sch.auto_tensorize(sch.get_block("C"), "x86.avx2.nope")
    sch = tdsl.Schedule(gemm(8, 16, 16, init=False))
    before = sch.func
    with pytest.raises(tdsl.ScheduleError, match="does not fit") as err:
        sch.auto_tensorize(sch.get_block("C"), x86.int8_dot_any())
    assert "float32" in str(err.value)
    assert sch.func is before and [i.kind for i in sch.trace.instructions] == ["get_block"]


def test_outer_loops_stay_schedulable(rng):
    """After auto_tensorize the caller re-tiles the loops outside the tile (GotoBLAS order),
    parallelizes them and decomposes the init the tensorized block carries."""
    sch = tdsl.Schedule(gemm(24, 32, 48))
    blk = sch.auto_tensorize(sch.get_block("C"), FP32)
    j0, k0, i0 = sch.get_loops(blk)
    io, ii = sch.split(i0, factors=[None, 2])
    sch.reorder(io, k0, j0, ii)
    sch.parallel(io)
    init = sch.decompose_reduction(blk, k0)
    assert init.name == "C_o_init"
    a, b = rng.standard_normal((24, 48)).astype("float32"), rng.standard_normal((48, 32)).astype("float32")
    np.testing.assert_allclose(tdsl.build(sch, target="cpu")(a, b), a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tdsl.interpret(sch, a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_accumulating_block_without_init(rng):
    """C += A @ B into the caller's C (no T.init), padded: the padded copy starts from C."""
    sch = tdsl.Schedule(gemm(13, 21, 9, init=False))
    sch.auto_tensorize(sch.get_block("C"), FP32)
    a, b = rng.standard_normal((13, 9)).astype("float32"), rng.standard_normal((9, 21)).astype("float32")
    c0 = rng.standard_normal((13, 21)).astype("float32")
    c = c0.copy()
    tdsl.build(sch, target="cpu")(a, b, c)
    np.testing.assert_allclose(c, c0 + a @ b, rtol=1e-4, atol=1e-4)
