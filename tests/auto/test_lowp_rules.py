"""auto_schedule of low-precision GEMMs on the CPU: the int8 rule (tdsl.auto.rules.lowp_cpu)
picks the micro-kernel the target's features allow, bit-exact against numpy; without a
dot-product unit it says so in kernel.notes."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.auto.rules.lowp_cpu import int8_tiles
from tdsl.intrinsics import x86_amx, x86_lowp
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


def _check(kernel, m, n, k):
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    a[1, :], b[:, 2] = 255, -128
    c = np.full((m, n), 7, np.int32)
    kernel(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


def test_auto_schedule_int8_gemm_uses_the_best_unit():
    if "avx2" not in cpu_features("cpu"):
        pytest.skip("the CPU target 'cpu' builds for lacks AVX2")
    func = _int8_gemm(64, 64, 64)
    sch = tdsl.auto_schedule(func, "cpu")
    isa = x86_lowp.int8_isa(cpu_features("cpu"))
    best = "amx" if x86_amx.available("u8s8s32", cpu_features("cpu")) else isa   # AMX first where the CPU has it
    assert f"x86.{best}.u8s8s32_" in str(sch.trace)
    assert "v0 // 4" in str(sch.trace)          # the k-by-4 packing is a visible step
    assert "_init" in str(sch.trace)            # k fits the tile: C = A @ B, written once (C starts at 7)
    kernel = tdsl.build(sch, target="cpu")
    _check(kernel, 64, 64, 64)
    assert not any("no AVX512-VNNI" in n for n in kernel.notes) or isa == "avx2"
    assert any(n.startswith("info: int8 GEMM block 'C'") and f"x86.{best}.u8s8s32_" in n for n in kernel.notes) \
        or isa == "avx2"


def test_target_without_vnni_takes_the_avx2_kernel_and_says_so():
    if "avx2" not in cpu_features("cpu"):
        pytest.skip("the CPU target 'cpu' builds for lacks AVX2")
    func = _int8_gemm(32, 48, 40)
    sch = tdsl.auto_schedule(func, "llvm -mattr=-avx512vnni,-avxvnni,-amx-tile")   # k = 40: AMX would take it
    assert "x86.avx2.u8s8s32_" in str(sch.trace)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = tdsl.build(sch, target="cpu")
    assert any("no AVX512-VNNI or AVX-VNNI" in n and "x86.avx2.u8s8s32" in n for n in kernel.notes)
    assert any(issubclass(w.category, tdsl.PerformanceWarning) for w in caught)
    _check(kernel, 32, 48, 40)


@pytest.mark.parametrize("mattr", ["-avx512vnni,-amx-tile", "-avx512vnni,-avxvnni,-amx-tile"])   # 24 x 64 x 36: AMX would take it
def test_every_int8_path_is_exact_on_this_host(mattr):
    features = tdsl.target.cpu_features(f"llvm -mattr={mattr}")
    isa = x86_lowp.int8_isa(features)
    if isa is None or any(f not in cpu_features("cpu") for f in x86_lowp.INT8_ISAS[isa][1]):
        pytest.skip(f"the CPU target 'cpu' builds for cannot run the {isa} int8 kernel")
    sch = tdsl.auto_schedule(_int8_gemm(24, 64, 36), f"llvm -mattr={mattr}")
    assert f"x86.{isa}.u8s8s32_" in str(sch.trace)
    _check(tdsl.build(sch, target="cpu"), 24, 64, 36)


def test_other_int8_gemms_are_left_to_the_general_rules():
    """s8 x s8 (vpdpbusd multiplies unsigned by signed) and k not a multiple of 4: no int8 kernel,
    still correct."""
    assert int8_tiles(64, 64, 30, "avx512vnni", 48 * 1024) == []

    @T.prim_func
    def s8s8(A: T.Buffer((16, 16), "int8"), B: T.Buffer((16, 16), "int8"), C: T.Buffer((16, 16), "int32")):
        for i, j, k in T.grid(16, 16, 16):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = 0
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
    sch = tdsl.auto_schedule(s8s8, "cpu")
    assert "u8s8s32" not in str(sch.trace)
    a = np.arange(256).reshape(16, 16).astype(np.int8)
    c = np.zeros((16, 16), np.int32)
    tdsl.build(sch, target="cpu")(a, a, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ a.astype(np.int32))


def test_the_design_space_offers_several_int8_tiles():
    """A search samples the micro tile (one sketch each) and the block sizes."""
    if x86_lowp.int8_isa(cpu_features("cpu")) is None:
        pytest.skip("the CPU target 'cpu' builds for lacks AVX2")
    sketches = tdsl.space(_int8_gemm(64, 128, 64), "cpu")
    names = {line.split('intrin_name="')[1].split('"')[0] for s in sketches for line in str(s.trace).splitlines()
             if "u8s8s32" in line and 'intrin_name="' in line}
    assert len(names) >= 2, names
    assert any("sample_categorical" in str(s.trace) for s in sketches)
