"""Library intrinsics (tdsl.intrinsics.blas): sch.tensorize(block, "blas.sgemm"/"blas.dgemm")
gives numpy's results for every layout, batch and transposition, with the interpreter (which
computes through the description) and the CPU build (which calls the BLAS) agreeing."""
import numpy as np
import pytest

import tdsl
from tdsl.intrinsics import blas
from tdsl.ir.attrs import TENSOR_INTRIN
from tdsl.schedule import library

M, N, K, BATCH = 13, 7, 9, 3


def gemm_src(dtype="float32", ta="n", tb="n", batch=0, b_batched=True, init=True, relu=False):
    """A GEMM C[(b,) i, j] (+)= A[..] * B[..] with A stored (M, K) or (K, M) ('t'), B (K, N) or
    (N, K); `batch` > 0 adds a batch loop; `relu` writes D = max(C + bias, 0) from an intermediate C."""
    bp = (f"{batch}, ",) if batch else ("",)
    a_shape = f"({bp[0]}{M}, {K})" if ta == "n" else f"({bp[0]}{K}, {M})"
    b_pre = bp[0] if b_batched else ""
    b_shape = f"({b_pre}{K}, {N})" if tb == "n" else f"({b_pre}{N}, {K})"
    c_shape = f"({bp[0]}{M}, {N})"
    vb = "vb, " if batch else ""
    a_idx = f"{vb}vi, vk" if ta == "n" else f"{vb}vk, vi"
    vbb = vb if b_batched else ""
    b_idx = f"{vbb}vk, vj" if tb == "n" else f"{vbb}vj, vk"
    c_idx = f"{vb}vi, vj"
    loops = (["b"] if batch else []) + ["i", "j", "k"]
    extents = ([str(batch)] if batch else []) + [str(M), str(N), str(K)]
    kinds = ("S" if batch else "") + "SSR"
    ivs = ", ".join(("vb", "vi", "vj", "vk")[0 if batch else 1:])
    zero = f"            with T.init():\n                C[{c_idx}] = T.{dtype}(0)\n" if init else ""
    out = f"C: T.Buffer({c_shape}, \"{dtype}\")"
    alloc = ""
    if relu:
        out = f"bias: T.Buffer(({N},), \"{dtype}\"), D: T.Buffer({c_shape}, \"{dtype}\")"
        alloc = f"    C = T.alloc_buffer({c_shape}, \"{dtype}\")\n"
    src = (f"@T.prim_func\ndef gemm(A: T.Buffer({a_shape}, \"{dtype}\"), B: T.Buffer({b_shape}, \"{dtype}\"), {out}):\n"
           f"{alloc}"
           f"    for {', '.join(loops)} in T.grid({', '.join(extents)}):\n"
           f"        with T.block(\"C\"):\n"
           f"            {ivs} = T.axis.remap(\"{kinds}\", [{', '.join(loops)}])\n"
           f"{zero}"
           f"            C[{c_idx}] = C[{c_idx}] + A[{a_idx}] * B[{b_idx}]\n")
    if relu:
        src += (f"    for {', '.join(loops[:-1])} in T.grid({', '.join(extents[:-1])}):\n"
                f"        with T.block(\"D\"):\n"
                f"            {ivs.rsplit(', ', 1)[0]} = T.axis.remap(\"{kinds[:-1]}\", [{', '.join(loops[:-1])}])\n"
                f"            D[{c_idx}] = T.max(C[{c_idx}] + bias[vj], T.{dtype}(0))\n")
    return tdsl.parse(src)


def reference(a, b, ta, tb, batch, b_batched):
    at = np.swapaxes(a, -1, -2) if ta == "t" else a
    bt = np.swapaxes(b, -1, -2) if tb == "t" else b
    return np.matmul(at.astype(np.float64), bt.astype(np.float64))


def operands(rng, dtype, ta, tb, batch, b_batched):
    bp = (batch,) if batch else ()
    a = rng.standard_normal(bp + ((M, K) if ta == "n" else (K, M))).astype(dtype)
    b = rng.standard_normal((bp if b_batched else ()) + ((K, N) if tb == "n" else (N, K))).astype(dtype)
    return a, b


pytestmark = pytest.mark.skipif(not blas.available(), reason="no BLAS in this process")


@pytest.mark.parametrize("ta,tb", [("n", "n"), ("n", "t"), ("t", "n"), ("t", "t")])
@pytest.mark.parametrize("batch,b_batched", [(0, True), (BATCH, True), (BATCH, False)])
def test_sgemm_layouts_and_batches(rng, ta, tb, batch, b_batched):
    func = gemm_src("float32", ta, tb, batch, b_batched)
    sch = tdsl.Schedule(func)
    sch.tensorize(sch.get_block("C"), "blas.sgemm")
    name = _intrin_name(sch.func)
    assert name == f"blas.sgemm_{ta}{tb}_{M}x{N}x{K}_init"
    a, b = operands(rng, "float32", ta, tb, batch, b_batched)
    kernel = tdsl.build(sch, target="cpu")
    assert "tdsl_blas_" in kernel.source   # the library call, not the description's loops
    got = kernel(a, b)
    ref = reference(a, b, ta, tb, batch, b_batched)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tdsl.interpret(sch, a, b), got, rtol=1e-4, atol=1e-4)


def _intrin_name(func) -> str:
    from tdsl.ir import Block, collect

    names = [v for blk in collect(func.body, Block) for k, v in blk.annotations if k == TENSOR_INTRIN]
    assert len(names) == 1
    return names[0]


@pytest.mark.parametrize("ta,tb", [("n", "t"), ("t", "n")])
def test_dgemm_accumulates_without_init(rng, ta, tb):
    """No T.init: the call accumulates into the caller's C (beta = 1)."""
    sch = tdsl.Schedule(gemm_src("float64", ta, tb, init=False))
    sch.tensorize(sch.get_block("C"), "blas.dgemm")
    assert _intrin_name(sch.func) == f"blas.dgemm_{ta}{tb}_{M}x{N}x{K}"
    a, b = operands(rng, "float64", ta, tb, 0, True)
    c0 = rng.standard_normal((M, N))
    c = c0.copy()
    tdsl.build(sch, target="cpu")(a, b, c)
    np.testing.assert_allclose(c, c0 + reference(a, b, ta, tb, 0, True), rtol=1e-12, atol=1e-12)


def test_epilogue_stays_generated(rng):
    """GEMM + bias + ReLU: the GEMM block calls sgemm, the epilogue block stays generated code."""
    sch = tdsl.Schedule(gemm_src("float32", relu=True))
    sch.tensorize(sch.get_block("C"), "blas.sgemm")
    a, b = operands(rng, "float32", "n", "n", 0, True)
    bias = rng.standard_normal(N).astype("float32")
    kernel = tdsl.build(sch, target="cpu")
    got = kernel(a, b, bias)
    np.testing.assert_allclose(got, np.maximum(a @ b + bias, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(tdsl.interpret(sch, a, b, bias) >= 0, True)
    # the trace records the generic name and replays it
    again = sch.trace.apply_to(gemm_src("float32", relu=True))
    assert _intrin_name(again.func) == _intrin_name(sch.func)


def test_tensorize_the_loop_above_a_split_reduction(rng):
    """The K loop split: the init moves to the outer block (generated), the call accumulates."""
    sch = tdsl.Schedule(gemm_src("float32"))
    i, j, k = sch.get_loops(sch.get_block("C"))
    k0, k1 = sch.split(k, factors=[3, None])
    sch.reorder(k0, i, j, k1)
    sch.tensorize(i, "blas.sgemm")
    assert _intrin_name(sch.func) == f"blas.sgemm_nn_{M}x{N}x3"
    a, b = operands(rng, "float32", "n", "n", 0, True)
    got = tdsl.build(sch, target="cpu")(a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_refusals_leave_the_schedule_unchanged():
    sch = tdsl.Schedule(gemm_src("float32", relu=True))
    before = sch.func
    with pytest.raises(tdsl.ScheduleError, match="three loops"):
        sch.tensorize(sch.get_block("D"), "blas.sgemm")     # two loops: not a GEMM
    with pytest.raises(tdsl.ScheduleError, match="dtype"):
        sch.tensorize(sch.get_block("C"), "blas.dgemm")     # float32 code, float64 routine
    assert sch.func is before and [i.kind for i in sch.trace.instructions] == ["get_block"] * 2


def test_elementwise_product_is_refused():
    src = tdsl.parse(f'''
@T.prim_func
def f(A: T.Buffer(({M}, {N}, {K}), "float32"), C: T.Buffer(({M}, {N}), "float32")):
    for i, j, k in T.grid({M}, {N}, {K}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vj, vk]
''')
    sch = tdsl.Schedule(src)
    with pytest.raises(tdsl.ScheduleError, match="blas.sgemm") as err:
        sch.tensorize(sch.get_block("C"), "blas.sgemm")
    assert "layouts" in str(err.value)


def test_scipy_fortran_fallback(rng):
    """The Fortran BLAS of scipy.linalg.cython_blas (column-major, by reference) computes the
    same: the intrinsic built from it, registered under its own name."""
    found = blas._from_scipy()
    if found is None:
        pytest.skip("scipy is not installed")
    blas.register_symbols(found)
    for layout in ("nn", "tt"):
        name = f"test.scipy_sgemm_{layout}"
        desc = tdsl.parse(blas.desc_text("sgemm", layout, M, N, K, True))
        impl = tdsl.parse(blas.impl_text(found, "sgemm", layout, M, N, K, True))
        tdsl.TensorIntrin.register(name, desc, impl, override=True)
        sch = tdsl.Schedule(gemm_src("float32", layout[0], layout[1]))
        sch.tensorize(sch.get_loops(sch.get_block("C"))[0], name)
        a, b = operands(rng, "float32", layout[0], layout[1], 0, True)
        kernel = tdsl.build(sch, target="cpu")
        assert "tdsl_blas_fortran32_sgemm" in kernel.source
        np.testing.assert_allclose(kernel(a, b), reference(a, b, layout[0], layout[1], 0, True),
                                   rtol=1e-4, atol=1e-4)


def test_no_blas_is_a_target_error(monkeypatch):
    monkeypatch.setenv("TDSL_BLAS", "none")
    sch = tdsl.Schedule(gemm_src("float32"))
    with pytest.raises(tdsl.TargetError, match="no BLAS found"):
        sch.tensorize(sch.get_block("C"), "blas.sgemm")
    assert len(sch.trace.instructions) == 1
    assert library.is_generic("blas.sgemm") and not library.is_generic("x86.avx2.fp32_4x16x64")


def test_parallel_batch_loop_around_the_call(rng):
    """The batch loop right above the tensorized block may run in parallel (each iteration calls
    sgemm on its own matrices)."""
    sch = tdsl.Schedule(gemm_src("float32", "n", "t", BATCH, True))
    sch.tensorize(sch.get_block("C"), "blas.sgemm")
    sch.parallel(sch.get_loops(sch.get_block("C_o"))[0])
    a, b = operands(rng, "float32", "n", "t", BATCH, True)
    kernel = tdsl.build(sch, target="cpu")
    for _ in range(5):
        np.testing.assert_allclose(kernel(a, b), reference(a, b, "n", "t", BATCH, True), rtol=1e-4, atol=1e-4)


def reordered_src(loops: str, iters: str, ta: str, tb: str) -> str:
    """C[i, j] += A[..] * B[..] with the loops in order `loops` and the block iterators in
    order `iters` (each a permutation of "ijk")."""
    ext = {"i": M, "j": N, "k": K}
    a_idx = "vi, vk" if ta == "n" else "vk, vi"
    b_idx = "vk, vj" if tb == "n" else "vj, vk"
    a_shape = (M, K) if ta == "n" else (K, M)
    b_shape = (K, N) if tb == "n" else (N, K)
    kinds = "".join("R" if r == "k" else "S" for r in iters)
    return (f"@T.prim_func\ndef gemm(A: T.Buffer({a_shape}, \"float32\"), B: T.Buffer({b_shape}, \"float32\"), "
            f"C: T.Buffer(({M}, {N}), \"float32\")):\n"
            f"    for {', '.join(loops)} in T.grid({', '.join(str(ext[r]) for r in loops)}):\n"
            f"        with T.block(\"C\"):\n"
            f"            {', '.join('v' + r for r in iters)} = T.axis.remap(\"{kinds}\", [{', '.join(iters)}])\n"
            f"            with T.init():\n                C[vi, vj] = T.float32(0)\n"
            f"            C[vi, vj] = C[vi, vj] + A[{a_idx}] * B[{b_idx}]\n")


@pytest.mark.parametrize("loops", blas.ORDERS)
@pytest.mark.parametrize("iters,ta,tb", [("same", "t", "t"), ("ijk", "n", "t"), ("kji", "n", "n")])
def test_reordered_loops_and_iterators(rng, loops, iters, ta, tb):
    """C[i, j] += A[k, i] * B[j, k] under `for k, j, i` (and every other order of the loops and
    of the block's iterators) is one library call; the interpreter and the build agree."""
    iters = loops if iters == "same" else iters
    sch = tdsl.Schedule(tdsl.parse(reordered_src(loops, iters, ta, tb)))
    sch.tensorize(sch.get_block("C"), "blas.sgemm")
    assert _intrin_name(sch.func) == blas.concrete_name("sgemm", ta + tb, M, N, K, True, loops, iters)
    a, b = operands(rng, "float32", ta, tb, 0, True)
    want = reference(a, b, ta, tb, 0, True)
    np.testing.assert_allclose(tdsl.build(sch, target="cpu")(a, b), want, rtol=1e-4, atol=1e-4)
    c = np.zeros((M, N), "float32")
    tdsl.interpret(sch.func, a, b, c)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
