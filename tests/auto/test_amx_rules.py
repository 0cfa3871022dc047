"""auto_schedule on AMX (tdsl.auto.rules.amx_cpu): chosen for u8 x s8 -> s32 and bf16 -> fp32
GEMMs (and the quantized GEMM / NHWC conv2d accumulators) when the target's CPU has amx-int8 /
amx-bf16, the VNNI / AVX512-BF16 / AVX2 kernels otherwise; bit-exact int8 against numpy where
this host runs AMX; the host offers AMX only when the OS grants the tile data."""
from __future__ import annotations

import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest
from test_quantized_ops import conv_reference, quantized_conv2d, quantized_gemm, reference

import tdsl
import tdsl.target as tt
from tdsl import T
from tdsl.auto.hardware import hardware
from tdsl.auto.rules.amx_cpu import AMX_INT8, amx_tiles
from tdsl.auto.rules.matmul_cpu import MicroTile
from tdsl.intrinsics import x86_amx
from tdsl.target import cpu_features

SPR = "llvm -mcpu=sapphirerapids"   # a CPU with AMX: schedules for it are made on any host
needs_int8 = pytest.mark.skipif(not x86_amx.available("u8s8s32", cpu_features("cpu")),
                                reason="the CPU target 'cpu' builds for lacks amx-tile/amx-int8 (or the OS refused "
                                       "AMX tile data)")
needs_bf16 = pytest.mark.skipif(not x86_amx.available("bf16f32", cpu_features("cpu")),
                                reason="the CPU target 'cpu' builds for lacks amx-tile/amx-bf16 (or the OS refused "
                                       "AMX tile data)")


def _gemm(m: int, n: int, k: int, a: str = "uint8", c: str = "int32"):
    @T.prim_func
    def gemm(A: T.Buffer((m, k), a), B: T.Buffer((k, n), "int8" if a == "uint8" else a), C: T.Buffer((m, n), c)):
        for i, j, kk in T.grid(m, n, k):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                with T.init():
                    C[vi, vj] = T.cast(0, c)
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], c) * T.cast(B[vk, vj], c)
    return gemm


def _intrinsics(sch) -> list[str]:
    return [w for w in str(sch.trace).split('"') if w.startswith("x86.")]


@pytest.mark.parametrize("target,int8,bf16", [
    (SPR, "x86.amx.u8s8s32_32x32x128_init", "x86.amx.bf16f32_32x32x128_init"),
    (SPR + " -mattr=-amx-int8", "x86.avx512vnni.", "x86.amx.bf16f32_"),
    # without AMX, bf16 converts to fp32 in packing on Intel CPUs (vdpbf16ps runs at half rate there)
    (SPR + " -mattr=-amx-tile", "x86.avx512vnni.", "x86.avx512.fp32_"),
    ("llvm -mcpu=icelake-server", "x86.avx512vnni.", "x86.avx512.fp32_"),
    ("llvm -mcpu=x86-64-v3", "x86.avx2.", "x86.avx2.fp32_"),
])
def test_the_rule_follows_the_targets_features(target, int8, bf16):
    """Schedules only (nothing is built): the choice depends on the target, not on this host."""
    got8 = _intrinsics(tdsl.auto_schedule(_gemm(64, 64, 128), target))
    gotbf = _intrinsics(tdsl.auto_schedule(_gemm(64, 64, 128, "bfloat16", "float32"), target))
    assert got8 and got8[0].startswith(int8), got8
    assert gotbf and gotbf[0].startswith(bf16), gotbf


def test_the_schedule_packs_b_once_and_pads_a():
    trace = str(tdsl.auto_schedule(_gemm(128, 256, 512), SPR).trace)
    assert "v1 // 32, v0 // 4, v1 % 32, v0 % 4" in trace     # the AMX B tile's layout, one packing
    assert "storage_align" in trace and "parallel" in trace


def test_shapes_amx_cannot_take_go_to_the_other_kernels():
    """k not a multiple of 4 bytes, or an edge tile filling under a quarter of its 16 x 16
    accumulators (m = 2): the other kernels, still correct."""
    assert amx_tiles(64, 64, 98, AMX_INT8, 2 << 20) == []
    assert amx_tiles(2, 64, 128, AMX_INT8, 2 << 20) == []
    assert "x86.amx" not in str(tdsl.auto_schedule(_gemm(64, 64, 98), SPR).trace)
    assert "x86.amx" not in str(tdsl.auto_schedule(_gemm(2, 64, 128), SPR).trace)


def test_edges_take_partial_amx_tiles():
    """m, n not multiples of 16: MR / NR the divisor of at most 32 filling its 16-row tiles best
    (56: 28 = 16 + 12); k not of 64 bytes: KC = k with a short last step (then at most 2
    accumulator tiles: 28 x 16 before 28 x 28 with 20-element steps)."""
    assert amx_tiles(56, 64, 64, AMX_INT8, 2 << 20)[0] == MicroTile(28, 32, 64)
    assert amx_tiles(100, 100, 200, AMX_INT8, 2 << 20)[0] == MicroTile(25, 10, 200)   # not 25 x 25 x 40
    assert amx_tiles(56, 56, 100, AMX_INT8, 2 << 20)[0] in (MicroTile(28, 14, 100), MicroTile(14, 28, 100))
    assert amx_tiles(48, 64, 128, AMX_INT8, 2 << 20)[0] == MicroTile(16, 32, 128)    # full tiles as before
    got = _intrinsics(tdsl.auto_schedule(_gemm(56, 100, 200), SPR))
    assert got == ["x86.amx.u8s8s32_14x25x200_init"], got     # 2 tiles: the 200 = 3 x 64 + 8 steps


def test_the_design_space_offers_amx_tiles_and_blocks():
    sketches = tdsl.space(_gemm(64, 128, 256), SPR)
    names = {i.split("_init")[0].rsplit("x", 1)[0] for s in sketches for i in _intrinsics(s) if "amx" in i}
    assert {"x86.amx.u8s8s32_32x32", "x86.amx.u8s8s32_16x16"} <= names, names
    trace = str(sketches[0].trace)
    assert trace.count("sample_categorical") >= 5     # KC, NC, MC, the loop order, A padded or not


def _int8_operands(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    a[1, :], b[:, 2] = 255, -128
    return a, b


@needs_int8
@pytest.mark.parametrize("m,n,k", [(128, 96, 256), (48, 64, 64), (64, 32, 4096)])
def test_auto_int8_gemm_on_amx_is_bit_exact(m, n, k):
    sch = tdsl.auto_schedule(_gemm(m, n, k), "cpu")
    assert any(i.startswith("x86.amx.u8s8s32_") for i in _intrinsics(sch))
    kernel = tdsl.build(sch, target="cpu")
    assert "tdpbusd" in kernel.asm
    assert kernel.notes == [f"info: int8 GEMM block 'C': the Intel AMX micro-kernel {_intrinsics(sch)[0]} (tdpbusd on "
                            "16-row x 64-byte tiles)"]
    a, b = _int8_operands(m, n, k)
    c = np.full((m, n), 7, np.int32)
    kernel(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@needs_int8
def test_every_sketch_of_the_space_is_bit_exact():
    """The tuner's candidates (other tiles, KC splitting k, the other loop order, A in place)."""
    m, n, k = 64, 64, 256
    a, b = _int8_operands(m, n, k)
    for sch in tdsl.space(_gemm(m, n, k), "cpu")[:6]:
        c = np.zeros((m, n), np.int32)
        tdsl.build(sch, target="cpu")(a, b, c)
        np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@needs_bf16
def test_auto_bf16_gemm_on_amx_is_within_fp32_rounding():
    m, n, k = 64, 96, 192
    sch = tdsl.auto_schedule(_gemm(m, n, k, "bfloat16", "float32"), "cpu")
    assert any(i.startswith("x86.amx.bf16f32_") for i in _intrinsics(sch))
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    out = np.zeros((m, n), np.float32)
    tdsl.build(sch, target="cpu")(a, b, out)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert np.all(np.abs(out - a64 @ b64) <= k * np.finfo(np.float32).eps * (np.abs(a64) @ np.abs(b64)))


@needs_int8
@pytest.mark.parametrize("out,m,n,k", [("int8", 64, 64, 128), ("float32", 64, 64, 128),
                                       # the epilogue under the column blocks (2 of 1024): the int32
                                       # accumulator the tile stores reach by address keeps its
                                       # row length (once shrunk to the block's, a heap overrun)
                                       ("int8", 64, 2048, 1024)])
def test_quantized_gemm_on_amx_is_bit_exact(out, m, n, k):
    sch = tdsl.auto_schedule(quantized_gemm(m, n, k, out), "cpu")
    assert any(i.startswith("x86.amx.u8s8s32_") for i in _intrinsics(sch))
    rng = np.random.default_rng(4)
    a, b = _int8_operands(m, n, k)
    scale = rng.uniform(1e-4, 3e-4, n).astype(np.float32)
    y = np.zeros((m, n), out)
    tdsl.build(sch, target="cpu")(a, b, scale, y)
    np.testing.assert_array_equal(y, reference(a, b, scale, out))


@needs_int8
def test_nhwc_int8_conv2d_on_amx_is_bit_exact():
    b, c, h, w, f = 1, 64, 8, 16, 32
    func = quantized_conv2d("NHWC", b, c, h, w, f)
    sch = tdsl.auto_schedule(func, "cpu")
    assert any(i.startswith("x86.amx.u8s8s32_") for i in _intrinsics(sch))
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (b, h, w, c)).astype(np.uint8)
    wt = rng.integers(-128, 128, (3, 3, c, f)).astype(np.int8)
    scale = rng.uniform(1e-5, 3e-5, f).astype(np.float32)
    y = np.zeros((b, h, w, f), np.uint8)
    tdsl.build(sch, target="cpu")(x, wt, scale, y)
    want = conv_reference(x, wt, scale, "NHWC")
    assert 0 < want.mean() < 255
    np.testing.assert_array_equal(y, want)


@pytest.fixture
def amx_refused(monkeypatch):
    """This process as if the OS had refused AMX's tile data (host caches cleared around it)."""
    def clear():
        for f in (tt.host_features, tt._features, tt._feature_string):
            f.cache_clear()
    monkeypatch.setattr(tt, "amx_permitted", lambda: False)
    clear()
    yield
    monkeypatch.undo()
    clear()


def test_without_the_os_grant_the_host_offers_no_amx(amx_refused):
    assert not any(f.startswith("amx-") for f in tt.host_features())
    assert "+amx-" not in tt.host_feature_string()
    assert "x86.amx" not in str(tdsl.auto_schedule(_gemm(64, 64, 128), "llvm -mcpu=native").trace)
    if not tt._host_cpu()[1].get("amx-int8"):
        pytest.skip("this CPU lacks amx-int8: nothing for the OS to refuse")
    # an explicit AMX target on a host that may not run AMX: refused, saying why
    with pytest.raises(tdsl.TargetError, match="amx-int8.*arch_prctl"):
        tt.check_host_target("llvm -mattr=+amx-int8")
    # the VNNI kernel runs instead, and kernel.notes says why
    sch = tdsl.auto_schedule(_gemm(64, 64, 128), "llvm -mcpu=native")
    assert "x86.amx" not in str(sch.trace) and "u8s8s32" in str(sch.trace)
    with pytest.warns(tdsl.PerformanceWarning):
        kernel = tdsl.build(sch, target="llvm -mcpu=native")
    assert any("operating system did not let" in n and "u8s8s32" in n for n in kernel.notes), kernel.notes
    a, b = _int8_operands(64, 64, 128)
    c = np.zeros((64, 64), np.int32)
    kernel(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@needs_int8
def test_an_exported_amx_kernel_loads_and_runs(tmp_path):
    """tdsl.load asks the OS for AMX's tile data (as a build does) before the kernel runs."""
    m, n, k = 64, 64, 128
    kernel = tdsl.build(tdsl.auto_schedule(_gemm(m, n, k), "cpu"), target="cpu")
    loaded = tdsl.load(kernel.export(str(tmp_path)))
    a, b = _int8_operands(m, n, k)
    c = np.zeros((m, n), np.int32)
    loaded(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


def test_load_refuses_an_amx_kernel_where_the_os_refused(tmp_path, monkeypatch):
    import base64
    import json
    import zlib

    from tdsl.backends.llvm import load as load_mod

    meta = {"features": ["amx_tile", "amx_int8"],
            "source": base64.b64encode(zlib.compress(b"call void @llvm.x86.ldtilecfg(ptr %cfg)")).decode()}
    monkeypatch.setattr(tt, "amx_permitted", lambda: False)
    with pytest.raises(tdsl.TargetError, match="uses AMX tiles.*arch_prctl"):
        load_mod._amx_granted("gemm.so", json.loads(json.dumps(meta)))
    meta["source"] = base64.b64encode(zlib.compress(b"define void @gemm()")).decode()
    load_mod._amx_granted("gemm.so", meta)    # built on an AMX host, no AMX in its code: loads


GEMM_MAIN = r"""
#include <stdio.h>
#include <stdint.h>
#include "gemm.h"
int main(int argc, char **argv) {
    static uint8_t a[64 * 128];
    static int8_t b[128 * 64];
    static int32_t c[64 * 64];
    for (int i = 0; i < 64 * 128; i++) { a[i] = (uint8_t)(i * 7 % 256); b[i] = (int8_t)(i * 5 % 256 - 128); }
    int rc = gemm(a, b, c);
    FILE *f = fopen(argv[1], "wb");
    fwrite(c, sizeof(int32_t), 64 * 64, f);
    fclose(f);
    return rc;
}
"""


@needs_int8
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) to build the test program")
def test_a_c_program_runs_an_exported_amx_kernel(tmp_path):
    """No Python in the process: the library's constructor asks Linux for the AMX tile data."""
    lib_dir = str(tmp_path / "gemm")
    tdsl.build(tdsl.auto_schedule(_gemm(64, 64, 128), "cpu"), target="cpu").export(lib_dir)
    src, exe, out = tmp_path / "main.c", tmp_path / "main", tmp_path / "c.bin"
    src.write_text(GEMM_MAIN)
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src), f"-I{lib_dir}", f"-L{lib_dir}", "-l:gemm.so",
                    f"-Wl,-rpath,{lib_dir}"], check=True, capture_output=True, text=True)
    subprocess.run(["env", "-i", str(exe), str(out)], check=True)
    i = np.arange(64 * 128)
    a = (i * 7 % 256).astype(np.uint8).reshape(64, 128)
    b = (i * 5 % 256 - 128).astype(np.int8).reshape(128, 64)
    np.testing.assert_array_equal(np.fromfile(out, np.int32).reshape(64, 64), a.astype(np.int32) @ b.astype(np.int32))


@needs_int8
def test_batched_int8_gemm_on_amx_is_bit_exact():
    @T.prim_func
    def bmm(A: T.Buffer((3, 64, 128), "uint8"), B: T.Buffer((3, 128, 96), "int8"), C: T.Buffer((3, 64, 96), "int32")):
        for nb, i, j, k in T.grid(3, 64, 96, 128):
            with T.block("C"):
                vb, vi, vj, vk = T.axis.remap("SSSR", [nb, i, j, k])
                with T.init():
                    C[vb, vi, vj] = 0
                C[vb, vi, vj] = C[vb, vi, vj] + T.cast(A[vb, vi, vk], "int32") * T.cast(B[vb, vk, vj], "int32")

    sch = tdsl.auto_schedule(bmm, "cpu")
    assert any(i.startswith("x86.amx.u8s8s32_") for i in _intrinsics(sch))
    rng = np.random.default_rng(6)
    a = rng.integers(0, 256, (3, 64, 128)).astype(np.uint8)
    b = rng.integers(-128, 128, (3, 128, 96)).astype(np.int8)
    c = np.zeros((3, 64, 96), np.int32)
    tdsl.build(sch, target="cpu")(a, b, c)
    np.testing.assert_array_equal(c, np.einsum("bik,bkj->bij", a.astype(np.int64), b.astype(np.int64)).astype(np.int32))


EDGE = (1, 15, 17, 40, 56, 100)


@needs_int8
def test_auto_int8_gemm_edges_are_bit_exact():
    """m, n in EDGE, k in (64, 100, 200): AMX's partial tiles where they fill a quarter of the
    accumulators (else the other kernels), bit-exact; kernel.notes names the path."""
    on_amx = 0
    for idx, (m, n, k) in enumerate((m, n, k) for m in EDGE for n in EDGE for k in (64, 100, 200)):
        sch = tdsl.auto_schedule(_gemm(m, n, k), "cpu")
        kernel = tdsl.build(sch, target="cpu")
        amx = [i for i in _intrinsics(sch) if i.startswith("x86.amx.")]
        on_amx += bool(amx)
        assert bool(amx) == bool(amx_tiles(m, n, k, AMX_INT8, hardware("cpu").l2)), (m, n, k)
        if amx:
            assert any(n_.startswith("info: int8 GEMM block 'C': the Intel AMX micro-kernel " + amx[0]) for n_ in kernel.notes)
        rng = np.random.default_rng(idx)
        a = rng.integers(0, 256, (m, k)).astype(np.uint8)
        b = rng.integers(-128, 128, (k, n)).astype(np.int8)
        a[0, :], b[:, 0] = 255, -128
        c = np.full((m, n), 7, np.int32)
        kernel(a, b, c)
        np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32), err_msg=f"{m} x {n} x {k}")
    assert on_amx >= 60


@needs_int8
@pytest.mark.parametrize("out,m,n,k", [("int8", 56, 40, 100), ("float32", 100, 17, 200)])
def test_quantized_gemm_edges_on_amx_are_bit_exact(out, m, n, k):
    sch = tdsl.auto_schedule(quantized_gemm(m, n, k, out), "cpu")
    assert any(i.startswith("x86.amx.u8s8s32_") for i in _intrinsics(sch))
    rng = np.random.default_rng(8)
    a, b = _int8_operands(m, n, k)
    scale = rng.uniform(1e-4, 3e-4, n).astype(np.float32)
    y = np.zeros((m, n), out)
    tdsl.build(sch, target="cpu")(a, b, scale, y)
    np.testing.assert_array_equal(y, reference(a, b, scale, out))


@needs_int8
def test_batched_int8_gemm_edges_on_amx_are_bit_exact():
    @T.prim_func
    def bmm(A: T.Buffer((3, 40, 100), "uint8"), B: T.Buffer((3, 100, 56), "int8"), C: T.Buffer((3, 40, 56), "int32")):
        for nb, i, j, k in T.grid(3, 40, 56, 100):
            with T.block("C"):
                vb, vi, vj, vk = T.axis.remap("SSSR", [nb, i, j, k])
                with T.init():
                    C[vb, vi, vj] = 0
                C[vb, vi, vj] = C[vb, vi, vj] + T.cast(A[vb, vi, vk], "int32") * T.cast(B[vb, vk, vj], "int32")

    sch = tdsl.auto_schedule(bmm, "cpu")
    assert any(i.startswith("x86.amx.u8s8s32_") for i in _intrinsics(sch))
    rng = np.random.default_rng(9)
    a = rng.integers(0, 256, (3, 40, 100)).astype(np.uint8)
    b = rng.integers(-128, 128, (3, 100, 56)).astype(np.int8)
    c = np.zeros((3, 40, 56), np.int32)
    tdsl.build(sch, target="cpu")(a, b, c)
    np.testing.assert_array_equal(c, np.einsum("bik,bkj->bij", a.astype(np.int64), b.astype(np.int64)).astype(np.int32))


@needs_int8
def test_nhwc_int8_conv2d_56_wide_on_amx_is_bit_exact():
    """The output row of 56 columns (m): 28-row micro tiles, 16 + 12 rows."""
    b, c, h, w, f = 1, 64, 3, 56, 64
    sch = tdsl.auto_schedule(quantized_conv2d("NHWC", b, c, h, w, f), "cpu")
    assert any(i.startswith("x86.amx.u8s8s32_28x") for i in _intrinsics(sch)), _intrinsics(sch)
    rng = np.random.default_rng(10)
    x = rng.integers(0, 256, (b, h, w, c)).astype(np.uint8)
    wt = rng.integers(-128, 128, (3, 3, c, f)).astype(np.int8)
    scale = rng.uniform(1e-5, 3e-5, f).astype(np.float32)
    y = np.zeros((b, h, w, f), np.uint8)
    kernel = tdsl.build(sch, target="cpu")
    assert any("partial tiles: rows 16 + 12" in n for n in kernel.notes), kernel.notes
    kernel(x, wt, scale, y)
    want = conv_reference(x, wt, scale, "NHWC")
    assert 0 < want.mean() < 255
    np.testing.assert_array_equal(y, want)


@needs_bf16
@pytest.mark.parametrize("m,n,k", [(56, 40, 100), (17, 100, 64)])
def test_auto_bf16_gemm_edges_on_amx_are_within_fp32_rounding(m, n, k):
    sch = tdsl.auto_schedule(_gemm(m, n, k, "bfloat16", "float32"), "cpu")
    assert any(i.startswith("x86.amx.bf16f32_") for i in _intrinsics(sch))
    rng = np.random.default_rng(11)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    out = np.zeros((m, n), np.float32)
    tdsl.build(sch, target="cpu")(a, b, out)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert np.all(np.abs(out - a64 @ b64) <= k * np.finfo(np.float32).eps * (np.abs(a64) @ np.abs(b64)))


@needs_int8
def test_a_shape_amx_refuses_says_so_in_the_notes():
    """m = 2: the VNNI kernel, whose note says the CPU has AMX but no tile takes the shape."""
    if "avx512vnni" not in cpu_features("cpu"):
        pytest.skip("the CPU target 'cpu' builds for lacks avx512vnni")
    kernel = tdsl.build(tdsl.auto_schedule(_gemm(2, 64, 128), "cpu"), target="cpu")
    assert any(n.startswith("info: int8 GEMM block 'C': the AVX512-VNNI vpdpbusd micro-kernel x86.avx512vnni.")
               and "no AMX tile takes this 2 x 64 x 128 GEMM" in n for n in kernel.notes), kernel.notes


@needs_int8
def test_every_sketch_of_an_edge_space_is_bit_exact():
    """The tuner's candidates at edges: other edge tiles, KC among those the tile's kernel takes
    (a short last step), the other loop order, A in place; decisions sampled with three seeds."""
    m, n, k = 56, 40, 100
    a, b = _int8_operands(m, n, k)
    sketches = [s for seed in (0, 1, 2) for s in tdsl.space(_gemm(m, n, k), "cpu", seed=seed)]
    assert len({i for s in sketches for i in _intrinsics(s) if i.startswith("x86.amx.")}) >= 3
    for sch in sketches:
        c = np.zeros((m, n), np.int32)
        tdsl.build(sch, target="cpu")(a, b, c)
        np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32), err_msg=str(_intrinsics(sch)))
