"""Intel AMX micro-kernels (tdsl.intrinsics.x86_amx) on the CPU backend: int8 (tdpbusd)
bit-exact against numpy's int32 GEMM and the interpreter, bf16 (tdpbf16ps) within fp32 rounding,
every tile shape, the _init and accumulating variants."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.intrinsics import x86_amx
from tdsl.target import cpu_features

needs_int8 = pytest.mark.skipif(not x86_amx.available("u8s8s32", cpu_features("cpu")),
                                reason="the CPU target 'cpu' builds for lacks amx-tile/amx-int8 (or the OS refused "
                                       "AMX tile data)")
needs_bf16 = pytest.mark.skipif(not x86_amx.available("bf16f32", cpu_features("cpu")),
                                reason="the CPU target 'cpu' builds for lacks amx-tile/amx-bf16 (or the OS refused "
                                       "AMX tile data)")


def _gemm(m: int, n: int, k: int, a: str, c: str):
    @T.prim_func
    def gemm(A: T.Buffer((m, k), a), B: T.Buffer((k, n), "int8" if a == "uint8" else a), C: T.Buffer((m, n), c)):
        for i, j, kk in T.grid(m, n, k):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                with T.init():
                    C[vi, vj] = T.cast(0, c)
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], c) * T.cast(B[vk, vj], c)
    return gemm


def _schedule(func, kind: str, mr: int, nr: int, kc: int, k: int) -> tdsl.Schedule:
    """B packed as the AMX B tile wants it, MR x NR x KC tiles tensorized: the `_init` kernel when
    KC is all of k, else the accumulating one after a separate init."""
    g = 4 if kind == "u8s8s32" else 2
    sch = tdsl.Schedule(func)
    c = sch.get_block("C")
    pack = sch.cache_read(c, "B", "global")
    sch.transform_layout(pack, "B_global", lambda kk, j: (j // nr, kk // g, j % nr, kk % g))
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, [None, mr])
    jo, ji = sch.split(j, [None, nr])
    if kc == k:
        sch.reorder(jo, io, ii, ji, kk)
    else:
        ko, ki = sch.split(kk, [None, kc])
        sch.reorder(jo, io, ko, ii, ji, ki)
        sch.decompose_reduction(c, ko)
    sch.tensorize(ii, x86_amx.register(kind, mr, nr, kc, init=kc == k))
    return sch


def _int8_operands(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    a[0, :], b[:, 0] = 255, -128    # the extremes
    return a, b


TILES = [(32, 32), (32, 16), (16, 32), (16, 16)]


@pytest.mark.parametrize("mr,nr", TILES)
@pytest.mark.parametrize("kc", [128, 64])     # 128: all of k (_init); 64: two accumulating calls
def test_int8_interpreter_agrees_with_numpy(mr, nr, kc):
    """The scheduled function's meaning (the descriptions), on any host."""
    m, n, k = 32, 64, 128
    sch = _schedule(_gemm(m, n, k, "uint8", "int32"), "u8s8s32", mr, nr, kc, k)
    a, b = _int8_operands(m, n, k)
    c = np.full((m, n), 7, np.int32)
    tdsl.interpret(sch.func, a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@needs_int8
@pytest.mark.parametrize("mr,nr", TILES)
@pytest.mark.parametrize("kc", [192, 64])
def test_int8_amx_kernel_is_bit_exact(mr, nr, kc):
    m, n, k = 64, 96, 192
    sch = _schedule(_gemm(m, n, k, "uint8", "int32"), "u8s8s32", mr, nr, kc, k)
    kernel = tdsl.build(sch, target="cpu")
    assert "tdpbusd" in kernel.asm and "ldtilecfg" in kernel.asm
    assert ("tilezero" in kernel.asm) == (kc == k)
    a, b = _int8_operands(m, n, k)
    c = np.full((m, n), 7, np.int32)
    kernel(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


def _bf16_operands(m, n, k, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16),
            rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16))


def _within_fp32_rounding(out, a, b):
    """Every product of two bfloat16 is exact in fp32; the sums round at most k times."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    bound = a.shape[1] * np.finfo(np.float32).eps * (np.abs(a64) @ np.abs(b64))
    assert np.all(np.abs(out - ref) <= bound)


@needs_bf16
@pytest.mark.parametrize("mr,nr", TILES)
@pytest.mark.parametrize("kc", [96, 32])
def test_bf16_amx_kernel_is_within_fp32_rounding(mr, nr, kc):
    m, n, k = 64, 64, 96
    sch = _schedule(_gemm(m, n, k, "bfloat16", "float32"), "bf16f32", mr, nr, kc, k)
    kernel = tdsl.build(sch, target="cpu")
    assert "tdpbf16ps" in kernel.asm
    a, b = _bf16_operands(m, n, k)
    out = np.zeros((m, n), np.float32)
    kernel(a, b, out)
    _within_fp32_rounding(out, a, b)
    interp = np.zeros_like(out)
    tdsl.interpret(sch.func, a, b, interp)
    _within_fp32_rounding(interp, a, b)


@needs_bf16
def test_bf16_amx_adds_each_product_rounded_even_element_first():
    """The documented order: 1 + 2^-24 + 2^-24 (one k pair) stays 1 (a pair summed first would
    give 1 + 2^-23); 1 + 2^-24 + 1.5 * 2^-24 gives 1 + 2^-23 (odd element first: 1 + 2^-22)."""
    sch = _schedule(_gemm(16, 16, 32, "bfloat16", "float32"), "bf16f32", 16, 16, 32, 32)
    kernel = tdsl.build(sch, target="cpu")
    for odd, want in ((2.0 ** -12, 1.0), (3 * 2.0 ** -13, 1 + 2.0 ** -23)):
        a, b = np.zeros((16, 32), np.float32), np.zeros((32, 16), np.float32)
        a[0, 0] = b[0, 0] = 1.0                     # pair 0: the accumulator becomes 1
        a[0, 2], b[2, 0] = 2.0 ** -12, 2.0 ** -12   # pair 1, even element: 2^-24
        a[0, 3], b[3, 0] = odd, 2.0 ** -12          # pair 1, odd element
        out = np.zeros((16, 16), np.float32)
        kernel(a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16), out)
        assert out[0, 0] == np.float32(want)


def test_amx_kernel_refuses_bad_tiles():
    with pytest.raises(ValueError, match=r"1\.\.32"):
        x86_amx.register("u8s8s32", 48, 32, 64)
    with pytest.raises(ValueError, match="multiple of 4"):
        x86_amx.register("u8s8s32", 32, 32, 98)
    with pytest.raises(ValueError, match="multiple of 2"):
        x86_amx.register("bf16f32", 32, 32, 47)
    # 64 + 32 bytes of k: the short step's own A and B tiles make 12 with a 2 x 2 accumulator tile
    with pytest.raises(ValueError, match="needs 12 of AMX's 8 tiles"):
        x86_amx.register("u8s8s32", 32, 32, 96)
    assert not x86_amx.fits("u8s8s32", 17, 17, 96) and x86_amx.fits("u8s8s32", 32, 16, 96)
    assert x86_amx.fits("u8s8s32", 32, 32, 36)     # one short step: the same 8 tiles
    with pytest.raises(ValueError, match="unknown AMX kernel kind"):
        x86_amx.register("s8s8s32", 32, 32, 64)


# edge tiles: (MR, NR, KC, k): partial row / column tiles, a short last k step after full ones
# (its own A and B tiles), a KC below 64 bytes, accumulating (KC < k) and _init (KC = k)
EDGES = [(28, 32, 64, 64), (1, 1, 64, 64), (15, 17, 100, 100), (17, 15, 200, 200), (32, 12, 100, 200),
         (12, 32, 36, 108), (32, 32, 36, 72), (25, 25, 128, 256), (8, 1, 4, 8)]


@pytest.mark.parametrize("mr,nr,kc,k", EDGES[:4])
def test_edge_tiles_interpreter_agrees_with_numpy(mr, nr, kc, k):
    m, n = 2 * mr, 3 * nr
    sch = _schedule(_gemm(m, n, k, "uint8", "int32"), "u8s8s32", mr, nr, kc, k)
    a, b = _int8_operands(m, n, k)
    c = np.full((m, n), 7, np.int32)
    tdsl.interpret(sch.func, a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@needs_int8
@pytest.mark.parametrize("mr,nr,kc,k", EDGES)
def test_int8_edge_tiles_are_bit_exact(mr, nr, kc, k):
    """Partial tiles read and write only their rows and bytes: C's other elements keep 7 where
    a tile of the row block is not computed (the last column block is left out)."""
    m, n = 2 * mr, 3 * nr
    sch = _schedule(_gemm(m, n, k, "uint8", "int32"), "u8s8s32", mr, nr, kc, k)
    kernel = tdsl.build(sch, target="cpu")
    assert "tdpbusd" in kernel.asm
    a, b = _int8_operands(m, n, k)
    c = np.full((m, n), 7, np.int32)
    kernel(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@needs_bf16
@pytest.mark.parametrize("mr,nr,kc,k", [(28, 32, 32, 32), (15, 17, 50, 50), (32, 12, 50, 100), (7, 9, 6, 12)])
def test_bf16_edge_tiles_are_within_fp32_rounding(mr, nr, kc, k):
    m, n = 2 * mr, 3 * nr
    sch = _schedule(_gemm(m, n, k, "bfloat16", "float32"), "bf16f32", mr, nr, kc, k)
    kernel = tdsl.build(sch, target="cpu")
    a, b = _bf16_operands(m, n, k)
    out = np.zeros((m, n), np.float32)
    kernel(a, b, out)
    _within_fp32_rounding(out, a, b)
    interp = np.zeros_like(out)
    tdsl.interpret(sch.func, a, b, interp)
    _within_fp32_rounding(interp, a, b)


def test_family_names_register_on_demand_and_need_amx():
    intrin = tdsl.TensorIntrin.get("x86.amx.u8s8s32_16x32x128_init")
    assert "tdpbusd" in intrin.doc and intrin.features == ("amx-tile", "amx-int8")
    assert tdsl.TensorIntrin.get("x86.amx.bf16f32_32x16x64").features == ("amx-tile", "amx-bf16")
    with pytest.raises(tdsl.TargetError, match="amx-int8"):
        x86_amx.microkernel("u8s8s32", {"amx-tile", "avx512f"}, 64)


def test_a_target_without_amx_refuses_an_amx_schedule():
    """Built for a CPU without the AMX features, a block tensorized with an AMX kernel is a
    TargetError naming the block, the kernel and the missing features."""
    sch = _schedule(_gemm(32, 32, 64, "uint8", "int32"), "u8s8s32", 32, 32, 64, 64)
    with pytest.raises(tdsl.TargetError, match=r"x86\.amx\.u8s8s32_32x32x64_init.*amx-tile"):
        tdsl.build(sch, target="llvm -mattr=-amx-tile")
