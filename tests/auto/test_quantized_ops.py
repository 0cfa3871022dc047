"""Quantized operators as users write them: a u8 x s8 GEMM with int32 accumulation, zero points,
per-tensor or per-channel scales and a fused requantize (round half to even, saturate) or
dequantize epilogue, auto-scheduled (the GEMM on the int8 micro-kernel) and checked bit-exact
against numpy references."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.target import host_features

ZA, ZB, ZY = 3, -2, 5   # zero points of A, B and the output
LIMITS = {"int8": (-128, 127), "uint8": (0, 255)}


def quantized_gemm(m: int, n: int, k: int, out: str):
    """y = requantize(sum_k (A - ZA) (B - ZB)), written the way that keeps the GEMM plain:
    sum A*B - ZB * rowsum(A) - ZA * colsum(B) + k * ZA * ZB. `out` "int8" / "uint8": round half to
    even of acc * scale[j], plus ZY, saturated; "float32": acc * scale[j] (dequantized)."""
    lo, hi = LIMITS.get(out, (0, 0))

    @T.prim_func
    def qgemm(A: T.Buffer((m, k), "uint8"), B: T.Buffer((k, n), "int8"), scale: T.Buffer((n,), "float32"),
              Y: T.Buffer((m, n), out)):
        acc = T.alloc_buffer((m, n), "int32")
        rowsum = T.alloc_buffer((m,), "int32")
        colsum = T.alloc_buffer((n,), "int32")
        for i, j, kk in T.grid(m, n, k):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                with T.init():
                    acc[vi, vj] = 0
                acc[vi, vj] = acc[vi, vj] + T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
        for i, kk in T.grid(m, k):
            with T.block("rowsum"):
                vi, vk = T.axis.remap("SR", [i, kk])
                with T.init():
                    rowsum[vi] = 0
                rowsum[vi] = rowsum[vi] + T.cast(A[vi, vk], "int32")
        for j, kk in T.grid(n, k):
            with T.block("colsum"):
                vj, vk = T.axis.remap("SR", [j, kk])
                with T.init():
                    colsum[vj] = 0
                colsum[vj] = colsum[vj] + T.cast(B[vk, vj], "int32")
        for i, j in T.grid(m, n):
            with T.block("epilogue"):
                vi, vj = T.axis.remap("SS", [i, j])
                q = acc[vi, vj] - ZB * rowsum[vi] - ZA * colsum[vj] + k * ZA * ZB
                if out == "float32":
                    Y[vi, vj] = T.cast(q, "float32") * scale[vj]
                else:
                    Y[vi, vj] = T.cast(T.max(T.min(T.cast(T.round(T.cast(q, "float32") * scale[vj]), "int32") + ZY,
                                                   hi), lo), out)
    return qgemm


def reference(a, b, scale, out):
    acc = ((a.astype(np.int64) - ZA) @ (b.astype(np.int64) - ZB)).astype(np.int32)
    if out == "float32":
        return acc.astype(np.float32) * scale
    lo, hi = LIMITS[out]
    return np.clip(np.rint(acc.astype(np.float32) * scale).astype(np.int32) + ZY, lo, hi).astype(out)


@pytest.mark.parametrize("out,per_channel", [("int8", True), ("uint8", False), ("float32", True)])
def test_quantized_gemm_is_bit_exact(out, per_channel):
    m, n, k = 32, 64, 48
    func = quantized_gemm(m, n, k, out)
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    scale = (rng.uniform(0.5, 2.0, n) if per_channel else np.full(n, 1.25)).astype(np.float32) / 2000
    b[:, 1] = ZB             # column 1: acc = A[:, 0] - ZA, times 0.5: ties (x.5) for the odd ones
    b[0, 1] = ZB + 1
    scale[1] = 0.5
    sch = tdsl.auto_schedule(func, "cpu")
    if "avx2" in host_features():
        assert "u8s8s32_" in str(sch.trace)
    y = np.zeros((m, n), out)
    tdsl.build(sch, target="cpu")(a, b, scale, y)
    want = reference(a, b, scale, out)
    assert np.any((a[:, 0].astype(np.int32) - ZA) % 2 == 1)
    np.testing.assert_array_equal(y, want)
    if out != "float32":
        assert y.min() == LIMITS[out][0] or y.max() == LIMITS[out][1]   # saturation is exercised
    y_interp = np.zeros((m, n), out)
    tdsl.interpret(func, a, b, scale, y_interp)
    np.testing.assert_array_equal(y_interp, want)
