"""x86 low-precision micro-kernels (tdsl.intrinsics.x86_lowp) end to end on the CPU backend:
bit-exact against numpy's int32 GEMM and the interpreter, on every ISA this host runs."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.intrinsics import x86_lowp
from tdsl.target import cpu_features


def _int8_gemm(m: int, n: int, k: int):
    @T.prim_func
    def gemm(A: T.Buffer((m, k), "uint8"), B: T.Buffer((k, n), "int8"), C: T.Buffer((m, n), "int32")):
        for i, j, kk in T.grid(m, n, k):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                with T.init():
                    C[vi, vj] = 0
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
    return gemm


def packed_int8_schedule(func, mr: int, nr: int, kc: int, name: str) -> tdsl.Schedule:
    """B packed k-by-4 in NR-wide panels, MR x NR x KC tiles, the update tensorized."""
    sch = tdsl.Schedule(func)
    c = sch.get_block("C")
    pack = sch.cache_read(c, "B", "global")
    sch.transform_layout(pack, "B_global", lambda k, j: (j // nr, k // 4, j % nr, k % 4))
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, mr])
    jo, ji = sch.split(j, [None, nr])
    ko, ki = sch.split(k, [None, kc])
    sch.reorder(jo, io, ko, ii, ji, ki)
    sch.decompose_reduction(c, ko)
    sch.tensorize(ii, name)
    return sch


def _operands(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    a[0, :] = 255      # the extremes: vpmaddubsw would saturate 255 * -128 * 2 in int16
    b[:, 0] = -128
    return a, b


def _isa_param(isa):
    need = x86_lowp.INT8_ISAS[isa][1]
    missing = [f for f in need if f not in cpu_features("cpu")]
    return pytest.param(isa, marks=pytest.mark.skipif(bool(missing), reason=f"the CPU target 'cpu' builds for lacks {missing}"))


@pytest.mark.parametrize("isa", [_isa_param(i) for i in x86_lowp.INT8_ISAS])
def test_int8_microkernel_is_bit_exact(isa):
    _, _, (mr, nr) = x86_lowp.INT8_ISAS[isa]
    m, n, k = 2 * mr, 2 * nr, 48
    func = _int8_gemm(m, n, k)
    sch = packed_int8_schedule(func, mr, nr, 16, x86_lowp.register_int8(isa, mr, nr, 16))
    a, b = _operands(m, n, k)
    c = np.zeros((m, n), np.int32)
    tdsl.build(sch, target="cpu")(a, b, c)
    ref = a.astype(np.int32) @ b.astype(np.int32)
    np.testing.assert_array_equal(c, ref)
    c_interp = np.zeros_like(c)
    tdsl.interpret(sch.func, a, b, c_interp)
    np.testing.assert_array_equal(c_interp, ref)


def test_int8_microkernel_refuses_bad_tiles():
    with pytest.raises(ValueError, match="multiple of 16"):
        x86_lowp.register_int8("avx512vnni", 4, 24, 16)
    with pytest.raises(ValueError, match="multiple of 4"):
        x86_lowp.register_int8("avx2", 4, 16, 6)


def test_int8_microkernel_choice_follows_features():
    assert x86_lowp.int8_isa({"avx2", "avx512f", "avx512bw", "avx512vnni"}) == "avx512vnni"
    assert x86_lowp.int8_isa({"avx2", "avxvnni"}) == "avxvnni"
    assert x86_lowp.int8_isa({"avx2", "fma"}) == "avx2"
    assert x86_lowp.int8_isa({"sse4.2"}) is None
    assert x86_lowp.int8_microkernel({"avx2"}, kc=32) == "x86.avx2.u8s8s32_4x16x32"
    with pytest.raises(tdsl.TargetError, match="avx2"):
        x86_lowp.int8_microkernel({"sse4.2"})


def test_family_name_registers_on_demand():
    intrin = tdsl.TensorIntrin.get("x86.avx2.u8s8s32_2x8x8")
    assert "vpmaddwd" in intrin.doc


def test_periodic_load_is_one_broadcast_and_bounds_checked():
    """A[i, 4q + lane % 4] (4 bytes repeated) compiles to a 32-bit broadcast load, checked as the
    4 bytes it reads."""
    if "avx512vnni" not in cpu_features("cpu"):
        pytest.skip("the CPU target 'cpu' builds for lacks avx512vnni")
    func = _int8_gemm(8, 32, 16)
    sch = packed_int8_schedule(func, 8, 32, 16, x86_lowp.register_int8("avx512vnni", 8, 32, 16))
    kernel = tdsl.build(sch, target="cpu", bounds_check=True)
    assert "vpbroadcastd" in kernel.asm
    a, b = _operands(8, 32, 16)
    c = np.zeros((8, 32), np.int32)
    kernel(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


# bf16 -------------------------------------------------------------------------------------------

needs_bf16 = pytest.mark.skipif(not all(f in cpu_features("cpu") for f in x86_lowp.BF16_FEATURES),
                                reason="the CPU target 'cpu' builds for lacks AVX512-BF16")


def _bf16_gemm(m: int, n: int, k: int):
    @T.prim_func
    def gemm(A: T.Buffer((m, k), "bfloat16"), B: T.Buffer((k, n), "bfloat16"), C: T.Buffer((m, n), "float32")):
        for i, j, kk in T.grid(m, n, k):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")
    return gemm


def _bf16_operands(m, n, k):
    import ml_dtypes

    rng = np.random.default_rng(3)
    return (rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16),
            rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16))


def _within_fp32_rounding(c, a, b):
    """|c - exact| within k roundings of fp32 of the running sum of |products| (the order of
    accumulation differs from the description's; the products themselves are exact)."""
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = a.shape[1] * 2.0 ** -24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    assert np.all(np.abs(c - exact) <= bound + 1e-30)


@needs_bf16
def test_bf16_microkernel_is_within_fp32_rounding():
    m, n, k = 16, 64, 64
    sch = tdsl.Schedule(_bf16_gemm(m, n, k))
    c = sch.get_block("C")
    pack = sch.cache_read(c, "B", "global")
    sch.transform_layout(pack, "B_global", lambda k, j: (j // 32, k // 2, j % 32, k % 2))
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, [None, 8])
    jo, ji = sch.split(j, [None, 32])
    ko, ki = sch.split(kk, [None, 32])
    sch.reorder(jo, io, ko, ii, ji, ki)
    sch.decompose_reduction(c, ko)
    sch.tensorize(ii, x86_lowp.register_bf16(8, 32, 32))
    kernel = tdsl.build(sch, target="cpu")
    assert "vdpbf16ps" in kernel.asm
    a, b = _bf16_operands(m, n, k)
    out = np.zeros((m, n), np.float32)
    kernel(a, b, out)
    _within_fp32_rounding(out, a, b)


@needs_bf16
def test_auto_schedule_bf16_gemm_uses_vdpbf16ps_where_the_cpu_table_says_so(monkeypatch):
    from tdsl.auto.rules import lowp_convert

    monkeypatch.setitem(lowp_convert.BF16_DOT_PATH, tdsl.target.cpu_name("cpu"), True)
    m, n, k = 32, 64, 96
    sch = tdsl.auto_schedule(_bf16_gemm(m, n, k), "llvm -mattr=-amx-tile")   # AMX comes first where present
    assert "x86.avx512bf16.bf16f32_" in str(sch.trace) and "v0 // 2" in str(sch.trace)
    a, b = _bf16_operands(m, n, k)
    out = np.zeros((m, n), np.float32)
    tdsl.build(sch, target="cpu")(a, b, out)
    _within_fp32_rounding(out, a, b)


@pytest.mark.parametrize("cpu,dot", [("znver4", True), ("sapphirerapids", False)])
def test_bf16_default_path_follows_the_cpu(cpu, dot):
    sch = tdsl.auto_schedule(_bf16_gemm(32, 64, 96), f"llvm -mcpu={cpu} -mattr=-amx-tile")   # AMX comes first where present
    trace = str(sch.trace)
    assert ("x86.avx512bf16.bf16f32_" in trace) == dot
    assert ('dtype="float32"' in trace and "x86.avx512.fp32_" in trace) == (not dot)


@pytest.mark.parametrize("mattr,isa", [("-avx512bf16,-amx-tile", "avx512"), ("-avx512bf16,-avx512f,-amx-tile", "avx2")])
def test_bf16_without_the_unit_converts_to_fp32_in_packing(mattr, isa):
    from tdsl.auto.rules.lowp_convert import convert_isa

    target = f"llvm -mattr={mattr}"
    features = tdsl.target.cpu_features(target)
    if convert_isa(features, "bfloat16") != isa:
        pytest.skip(f"the CPU target 'cpu' builds for cannot run the {isa} kernel")
    sch = tdsl.auto_schedule(_bf16_gemm(16, 32, 64), target)
    trace = str(sch.trace)
    assert f"x86.{isa}.fp32_" in trace and 'cache_read(b0, buffer="B", scope="global", dtype="float32")' in trace
    kernel = tdsl.build(sch, target=target)
    assert any("no AVX512-BF16" in note for note in kernel.notes)
    a, b = _bf16_operands(16, 32, 64)
    out = np.zeros((16, 32), np.float32)
    kernel(a, b, out)
    _within_fp32_rounding(out, a, b)


@needs_bf16
def test_bf16_design_space_offers_both_paths():
    names = " ".join(str(s.trace) for s in tdsl.space(_bf16_gemm(32, 64, 64), "llvm -mattr=-amx-tile"))
    assert "x86.avx512bf16.bf16f32_" in names and "x86.avx512.fp32_" in names and 'dtype="float32"' in names


# fp16 -------------------------------------------------------------------------------------------

def _fp16_gemm(m: int, n: int, k: int):
    @T.prim_func
    def gemm(A: T.Buffer((m, k), "float16"), B: T.Buffer((k, n), "float16"), C: T.Buffer((m, n), "float32")):
        for i, j, kk in T.grid(m, n, k):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")
    return gemm


def _fp16_param(isa):
    from tdsl.auto.rules.lowp_convert import CONVERT_FEATURES

    missing = [f for f in CONVERT_FEATURES[isa] if f not in cpu_features("cpu")]
    return pytest.param(isa, marks=pytest.mark.skipif(bool(missing), reason=f"the CPU target 'cpu' builds for lacks {missing}"))


@pytest.mark.parametrize("isa", [_fp16_param(i) for i in ("avx512", "avx2")])
def test_auto_schedule_fp16_gemm_converts_in_packing_and_runs_the_fp32_kernel(isa):
    from tdsl.auto.rules.lowp_convert import convert_isa

    m, n, k = 24, 64, 96
    target = "cpu" if isa == "avx512" else "llvm -mattr=-avx512f"
    if convert_isa(tdsl.target.cpu_features(target), "float16") != isa:
        pytest.skip(f"target {target!r} does not choose {isa} here")
    sch = tdsl.auto_schedule(_fp16_gemm(m, n, k), target)
    trace = str(sch.trace)
    assert f"x86.{isa}.fp32_" in trace and trace.count('dtype="float32"') == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", tdsl.PerformanceWarning)   # the path taken is a note, not a warning
        kernel = tdsl.build(sch, target=target)
    assert "vcvtph2ps" in kernel.asm
    assert any("float16 GEMM block 'C'" in note and "converted to float32" in note for note in kernel.notes)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = np.zeros((m, n), np.float32)
    kernel(a, b, out)
    _within_fp32_rounding(out, a, b)
    want = np.zeros((m, n), np.float32)
    tdsl.interpret(_fp16_gemm(m, n, k), a, b, want)
    _within_fp32_rounding(want, a, b)


def _fp16_conv_nhwc():
    @T.prim_func
    def conv(X: T.Buffer((1, 6, 10, 32), "float16"), W: T.Buffer((3, 3, 32, 32), "float16"),
             Y: T.Buffer((1, 4, 8, 32), "float32")):
        for b, y, x, f, r, s, c in T.grid(1, 4, 8, 32, 3, 3, 32):
            with T.block("Y"):
                vb, vy, vx, vf, vr, vs, vc = T.axis.remap("SSSSRRR", [b, y, x, f, r, s, c])
                with T.init():
                    Y[vb, vy, vx, vf] = T.float32(0)
                Y[vb, vy, vx, vf] = Y[vb, vy, vx, vf] + T.cast(X[vb, vy + vr, vx + vs, vc], "float32") * \
                    T.cast(W[vr, vs, vc, vf], "float32")
    return conv


@pytest.mark.skipif("avx512f" not in cpu_features("cpu"), reason="the CPU target 'cpu' builds for lacks avx512f")
def test_fp16_conv2d_nhwc_converts_its_input_whole_and_its_filters_in_packing():
    sch = tdsl.auto_schedule(_fp16_conv_nhwc(), "cpu")
    trace = str(sch.trace)
    assert 'cache_read(b0, buffer="X", scope="global", dtype="float32")' in trace and "x86.avx512.fp32_" in trace
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 6, 10, 32)).astype(np.float16)
    w = rng.standard_normal((3, 3, 32, 32)).astype(np.float16)
    out = np.zeros((1, 4, 8, 32), np.float32)
    tdsl.build(sch, target="cpu")(x, w, out)
    want = np.zeros_like(out)
    tdsl.interpret(_fp16_conv_nhwc(), x, w, want)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif("avx512f" not in cpu_features("cpu"), reason="the CPU target 'cpu' builds for lacks avx512f")
@pytest.mark.parametrize("batch,n,isa", [(3, 48, "avx512"), (1, 24, "avx2")])
def test_fp16_batched_and_narrow_gemms_convert_in_packing(batch, n, isa):
    m, k = 16, 32

    @T.prim_func
    def bmm(A: T.Buffer((batch, m, k), "float16"), B: T.Buffer((batch, k, n), "float16"),
            C: T.Buffer((batch, m, n), "float32")):
        for bb, i, j, kk in T.grid(batch, m, n, k):
            with T.block("C"):
                vb, vi, vj, vk = T.axis.remap("SSSR", [bb, i, j, kk])
                with T.init():
                    C[vb, vi, vj] = T.float32(0)
                C[vb, vi, vj] = C[vb, vi, vj] + T.cast(A[vb, vi, vk], "float32") * T.cast(B[vb, vk, vj], "float32")

    sch = tdsl.auto_schedule(bmm, "cpu")
    trace = str(sch.trace)
    assert trace.count('dtype="float32"') == 2 and f"x86.{isa}.fp32_" in trace   # n = 24: AVX2's 8 lanes
    rng = np.random.default_rng(6)
    a = rng.standard_normal((batch, m, k)).astype(np.float16)
    b = rng.standard_normal((batch, k, n)).astype(np.float16)
    out = np.zeros((batch, m, n), np.float32)
    tdsl.build(sch, target="cpu")(a, b, out)
    for q in range(batch):
        _within_fp32_rounding(out[q], a[q], b[q])
