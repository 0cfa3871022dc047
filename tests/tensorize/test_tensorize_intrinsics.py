"""Built-in intrinsics end to end: x86 fp32 micro-kernels and VNNI int8 dot products on the CPU
backend (checked against numpy and the interpreter), WMMA on CUDA (NVRTC to cubin) and on the
CPU through its description."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from tz_kernels import same_results, tiled_gemm

import tdsl
from tdsl.intrinsics import cuda as wmma
from tdsl.intrinsics import x86


@functools.cache
def _features() -> frozenset:
    from tdsl.target import cpu_features

    return cpu_features("cpu")   # what a build for "cpu" may use (the host's, or $TDSL_CPU_TARGET's)


def _has(*features: str) -> bool:
    return all(f in _features() for f in features)


# fp32 micro-kernels ---------------------------------------------------------------------------

@pytest.mark.parametrize("isa,mr,nr", [("avx2", 4, 16), ("avx512", 8, 32)])
def test_fp32_microkernel_lowers_to_fma(isa, mr, nr):
    _, sch, i1 = tiled_gemm(2 * mr, 2 * nr, 16, mr, nr, 8)
    sch.tensorize(i1, x86.register_fp32(isa, mr, nr, 8))
    if not _has(*x86.ISAS[isa][1]):
        with pytest.raises(tdsl.TargetError, match=x86.ISAS[isa][1][0]):
            tdsl.lower(sch, target="cpu")
        return
    lanes = x86.ISAS[isa][0]
    text = tdsl.lower(sch, target="cpu").script()
    assert f"llvm.fma.v{lanes}f32" in text and "T.Broadcast(A[" in text


def _on_this_cpu(isa: str, *shape):
    """A parameter set that runs only where the host has `isa` (the run itself needs it)."""
    needs = x86.ISAS[isa][1]
    why = f"the CPU that target 'cpu' builds for lacks {needs}"
    return pytest.param(isa, *shape, marks=pytest.mark.skipif(not _has(*needs), reason=why))


@pytest.mark.parametrize("isa,mr,nr,kc", [_on_this_cpu("avx2", 4, 16, 16), _on_this_cpu("avx2", 6, 16, 8),
                                          _on_this_cpu("avx512", 8, 32, 16)])
def test_fp32_microkernel_runs_correctly(isa, mr, nr, kc):
    m, n, k = 3 * mr, 2 * nr, 4 * kc
    f, sch, i1 = tiled_gemm(m, n, k, mr, nr, kc)
    sch.tensorize(i1, x86.register_fp32(isa, mr, nr, kc))
    rng = np.random.default_rng(4)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    kernel = tdsl.build(sch, target="cpu")
    c = kernel(a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(c, tdsl.interpret(f, a, b), rtol=1e-4, atol=1e-4)


def test_fp32_microkernel_choice_follows_the_host():
    if not (_has("avx512f") or _has("avx2", "fma")):
        with pytest.raises(tdsl.TargetError):
            x86.fp32_microkernel(16)
        return
    name = x86.fp32_microkernel(16)
    assert name == ("x86.avx512.fp32_8x32x16" if _has("avx512f") else "x86.avx2.fp32_4x16x16")


# int8 VNNI ----------------------------------------------------------------------------------

INT8_GEMM = '''
@T.prim_func
def gemm_u8s8(A: T.Buffer(({m}, {k}), "uint8"), Bp: T.Buffer(({n} // {lanes}, {k} // 4, {lanes}, 4), "int8"),
              C: T.Buffer(({m}, {n}), "int32")):
    for i, j, k in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "int32") * T.cast(Bp[vj // {lanes}, vk // 4, vj % {lanes}, vk % 4], "int32")
'''


def _int8_schedule(isa: str, m: int = 4, n: int = 32, k: int = 16):
    lanes = x86.VNNI[isa][0]
    f = tdsl.parse(INT8_GEMM.format(m=m, n=n, k=k, lanes=lanes))
    sch = tdsl.Schedule(f)
    i, j, kk = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, factors=[None, lanes])
    k0, k1 = sch.split(kk, factors=[None, 4])
    sch.reorder(i, j0, k0, j1, k1)
    sch.tensorize(j1, x86.dot_name(isa))
    return f, sch


def _int8_args(m, n, k, lanes, seed=5):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (m, k)).astype("uint8")
    b = rng.integers(-128, 128, (k, n)).astype("int8")
    packed = np.ascontiguousarray(b.reshape(k // 4, 4, n // lanes, lanes).transpose(2, 0, 3, 1))
    return a, b, packed


@pytest.mark.parametrize("isa", ["avx512vnni", "avxvnni"])
def test_int8_dot_matches_and_interprets(isa):
    f, sch = _int8_schedule(isa)
    lanes = x86.VNNI[isa][0]
    a, b, packed = _int8_args(4, 32, 16, lanes)
    c = np.zeros((4, 32), "int32")
    same_results(sch.func, f, [a, packed, c], tol=0)
    np.testing.assert_array_equal(tdsl.interpret(sch.func, a, packed), a.astype("int32") @ b.astype("int32"))


@pytest.mark.parametrize("isa", ["avx512vnni", "avxvnni"])
def test_int8_dot_builds_where_the_cpu_has_vnni(isa):
    _f, sch = _int8_schedule(isa)
    need = x86.VNNI[isa][2]
    if not _has(*need):
        with pytest.raises(tdsl.TargetError, match="lacks"):
            tdsl.build(sch, target="cpu")
        return
    lanes = x86.VNNI[isa][0]
    a, b, packed = _int8_args(4, 32, 16, lanes)
    got = tdsl.build(sch, target="cpu")(a, packed)
    np.testing.assert_array_equal(got, a.astype("int32") @ b.astype("int32"))


def test_int8_choice_reports_missing_vnni():
    if _has("avx512vnni") or _has("avxvnni"):
        assert x86.int8_dot() in (x86.dot_name("avx512vnni"), x86.dot_name("avxvnni"))
    else:
        with pytest.raises(tdsl.TargetError, match="VNNI"):
            x86.int8_dot()


# WMMA ---------------------------------------------------------------------------------------

WMMA_GEMM = '''
@T.prim_func
def wmma_gemm(A: T.Buffer((32, 32), "float16"), B: T.Buffer((32, 16), "float16"), C: T.Buffer((32, 16), "float32")):
    for bi in T.thread_binding(2, thread="blockIdx.y"):
        for bj in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                with T.block("warp"):
                    vbi, vbj, vtx = T.axis.remap("SSS", [bi, bj, tx])
                    Af = T.alloc_buffer((16, 16), "float16", scope="wmma.matrix_a")
                    Bf = T.alloc_buffer((16, 16), "float16", scope="wmma.matrix_b")
                    Cf = T.alloc_buffer((16, 16), "float32", scope="wmma.accumulator")
                    for i, j in T.grid(16, 16):
                        with T.block("fill"):
                            vi, vj = T.axis.remap("SS", [i, j])
                            Cf[vi, vj] = T.float32(0)
                    for ko in range(2):
                        for i, k in T.grid(16, 16):
                            with T.block("load_a"):
                                vi, vk = T.axis.remap("SS", [i, k])
                                Af[vi, vk] = A[vbi * 16 + vi, ko * 16 + vk]
                        for k, j in T.grid(16, 16):
                            with T.block("load_b"):
                                vk, vj = T.axis.remap("SS", [k, j])
                                Bf[vk, vj] = B[ko * 16 + vk, vbj * 16 + vj]
                        for i, j, k in T.grid(16, 16, 16):
                            with T.block("mma"):
                                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                                Cf[vi, vj] = Cf[vi, vj] + T.cast(Af[vi, vk], "float32") * T.cast(Bf[vk, vj], "float32")
                    for i, j in T.grid(16, 16):
                        with T.block("store"):
                            vi, vj = T.axis.remap("SS", [i, j])
                            C[vbi * 16 + vi, vbj * 16 + vj] = Cf[vi, vj]
'''


def _wmma_schedule():
    f = tdsl.parse(WMMA_GEMM)
    sch = tdsl.Schedule(f)
    for block, intrin in (("fill", wmma.FILL), ("load_a", wmma.load_a("global")),
                          ("load_b", wmma.load_b("global")), ("mma", wmma.MMA), ("store", wmma.store("global"))):
        loops = sch.get_loops(sch.get_block(block))
        sch.tensorize(loops[-3] if block == "mma" else loops[-2], intrin)
    return f, sch


def _wmma_args(seed=6):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype("float16") for shape in ((32, 32), (32, 16))]


def test_wmma_gemm_computes_through_its_description():
    _f, sch = _wmma_schedule()
    a, b = _wmma_args()
    want = a.astype("float32") @ b.astype("float32")
    got = tdsl.interpret(sch.func, a, b)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    assert tdsl.structural_diff(tdsl.parse(sch.func.script()), sch.func) is None
    lowered = tdsl.lower(sch, target="cpu").script()
    assert "tdsl_wmma" not in lowered  # the CPU keeps the description


def test_wmma_gemm_builds_for_the_cpu():
    _, sch = _wmma_schedule()
    a, b = _wmma_args()
    got = tdsl.build(sch, target="cpu")(a, b)
    np.testing.assert_allclose(got, a.astype("float32") @ b.astype("float32"), rtol=1e-3, atol=1e-3)


def test_wmma_lowering_for_cuda_calls_the_device_functions():
    _, sch = _wmma_schedule()
    lowered = tdsl.lower(sch, target="cuda")
    text = lowered.script()
    for fn in ("tdsl_wmma_fill_f32", "tdsl_wmma_load_a", "tdsl_wmma_load_b", "tdsl_wmma_mma_f16f32",
               "tdsl_wmma_store_f32"):
        assert fn in text, fn
    assert dict(lowered.attrs).get(wmma.PRELUDE_ATTR) == wmma.PRELUDE
    assert "wmma.accumulator" not in text  # fragments are per-thread local arrays on CUDA


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_wmma_prelude_compiles_with_nvrtc(arch):
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda.nvrtc import compile_cuda

    source = wmma.PRELUDE + r'''
extern "C" __global__ void tile(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ C) {
  float Cf[256]; half Af[256]; half Bf[256];
  tdsl_wmma_fill_f32(Cf[0], 0.0f);
  tdsl_wmma_load_a(Af[0], A[0], 16);
  tdsl_wmma_load_b(Bf[0], B[0], 16);
  tdsl_wmma_mma_f16f32(Cf[0], Af[0], Bf[0]);
  tdsl_wmma_store_f32(C[0], Cf[0], 16);
}
'''
    compiled = compile_cuda(source, arch)
    assert compiled is not None


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_wmma_gemm_compiles_to_cubin(arch):
    pytest.importorskip("cuda.bindings")
    _, sch = _wmma_schedule()
    kernel = tdsl.build(sch, target="cuda", arch=arch)
    assert "tdsl_wmma_mma_f16f32" in kernel.source and "#include <mma.h>" in kernel.source


HGEMM = '''
@T.prim_func
def hgemm(A: T.Buffer((32, 32), "float16"), B: T.Buffer((32, 32), "float16"), C: T.Buffer((32, 32), "float32")):
    for i, j, k in T.grid(32, 32, 32):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")
'''


def test_wmma_gemm_scheduled_with_caches_computes_through_descriptions():
    f = tdsl.parse(HGEMM)
    sch = tdsl.Schedule(f)
    blk = sch.get_block("C")
    i, j, k = sch.get_loops(blk)
    bi, ii = sch.split(i, factors=[None, 16])
    bj, jj = sch.split(j, factors=[None, 16])
    ko, ki = sch.split(k, factors=[None, 16])
    sch.reorder(bi, bj, ko, ii, jj, ki)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.reverse_compute_at(sch.cache_write(blk, 0, "wmma.accumulator"), bj)
    copies = [sch.cache_read(blk, "A", "shared"), sch.cache_read(blk, "B", "shared")]
    frags = [sch.cache_read(blk, "A_shared", "wmma.matrix_a"), sch.cache_read(blk, "B_shared", "wmma.matrix_b")]
    for b in frags + copies:
        sch.compute_at(b, ko)
    init = sch.decompose_reduction(blk, ko)
    for b in copies:
        _, tx = sch.split(sch.fuse(*sch.get_loops(b)[-2:]), factors=[None, 32])
        sch.bind(tx, "threadIdx.x")
    sch.tensorize(sch.get_loops(init)[-2], wmma.FILL)
    sch.tensorize(sch.get_loops(frags[0])[-2], wmma.load_a("shared"))
    sch.tensorize(sch.get_loops(frags[1])[-2], wmma.load_b("shared"))
    sch.tensorize(sch.get_loops(blk)[-3], wmma.MMA)
    sch.tensorize(sch.get_loops(sch.get_block("C_wmma_accumulator"))[-2], wmma.store("global"))
    rng = np.random.default_rng(9)
    a, b = (rng.standard_normal((32, 32)).astype("float16") for _ in range(2))
    want = a.astype("float32") @ b.astype("float32")
    np.testing.assert_allclose(tdsl.interpret(sch.func, a, b), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tdsl.build(sch, target="cpu")(a, b), want, rtol=1e-4, atol=1e-4)
    assert "tdsl_wmma_mma_f16f32" in tdsl.lower(sch, target="cuda").script()
