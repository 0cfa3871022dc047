"""Quantized operators as users write them: a u8 x s8 GEMM with int32 accumulation, zero points,
per-tensor or per-channel scales and a fused requantize (round half to even, saturate) or
dequantize epilogue, auto-scheduled (the GEMM on the int8 micro-kernel) and checked bit-exact
against numpy references."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.target import cpu_features

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
        for i, j, kk in T.grid(m, n, k):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                with T.init():
                    acc[vi, vj] = 0
                acc[vi, vj] = acc[vi, vj] + T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
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
    if "avx2" in cpu_features("cpu"):
        assert "u8s8s32_" in str(sch.trace)
        # the epilogue runs per block of rows, right after them: the int32 block stays in cache
        assert 'get_block("epilogue")' in str(sch.trace) and "reverse_compute_at" in str(sch.trace)
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


CONV = '''
@T.prim_func
def qconv(X: T.Buffer({xshape}, "uint8"), W: T.Buffer({wshape}, "int8"), scale: T.Buffer(({f},), "float32"),
          Y: T.Buffer({yshape}, "uint8")):
    Xpad = T.alloc_buffer({pshape}, "uint8")
    acc = T.alloc_buffer({yshape}, "int32")
    wsum = T.alloc_buffer(({f},), "int32")
    for i0, i1, i2, i3 in T.grid({pgrid}):
        with T.block("pad"):
            v0, v1, v2, v3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
            Xpad[v0, v1, v2, v3] = T.if_then_else(1 <= {py} and {py} <= {h} and 1 <= {px} and {px} <= {w},
                                                  X[{xpad_read}], T.uint8({za}))
    for {conv_loops} in T.grid({conv_extents}):
        with T.block("conv"):
            {conv_iters} = T.axis.remap("SSSSRRR", [{conv_loops}])
            with T.init():
                acc[{yidx}] = 0
            acc[{yidx}] = acc[{yidx}] + T.cast(Xpad[{xidx}], "int32") * T.cast(W[{widx}], "int32")
    for ko, ci, r, s in T.grid({f}, {c}, 3, 3):
        with T.block("wsum"):
            vk, vc, vr, vs = T.axis.remap("SRRR", [ko, ci, r, s])
            with T.init():
                wsum[vk] = 0
            wsum[vk] = wsum[vk] + T.cast(W[{widx}], "int32")
    for nb, ko, y, x in T.grid({b}, {f}, {h}, {w}):
        with T.block("requantize"):
            vb, vk, vy, vx = T.axis.remap("SSSS", [nb, ko, y, x])
            Y[{yidx}] = T.cast(T.max(T.min(T.cast(T.round(T.cast(acc[{yidx}] - {za} * wsum[vk], "float32")
                                                        * scale[vk]), "int32") + {zy}, 255), 0), "uint8")
'''


def quantized_conv2d(layout: str, b: int, c: int, h: int, w: int, f: int):
    """3x3 conv2d, stride 1, padding 1 with the input's zero point, int32 accumulation, per-filter
    scales, requantized to uint8; NCHW (filters OIHW) or NHWC (filters HWIO)."""
    nchw = layout == "NCHW"
    fields = dict(b=b, c=c, h=h, w=w, f=f, za=ZA, zy=ZY,
                  xshape=(b, c, h, w) if nchw else (b, h, w, c), pshape=(b, c, h + 2, w + 2) if nchw else (b, h + 2, w + 2, c),
                  wshape=(f, c, 3, 3) if nchw else (3, 3, c, f), yshape=(b, f, h, w) if nchw else (b, h, w, f),
                  py="v2" if nchw else "v1", px="v3" if nchw else "v2",
                  xpad_read="v0, v1, v2 - 1, v3 - 1" if nchw else "v0, v1 - 1, v2 - 1, v3",
                  xidx="vb, vc, vy + vr, vx + vs" if nchw else "vb, vy + vr, vx + vs, vc",
                  widx="vk, vc, vr, vs" if nchw else "vr, vs, vc, vk",
                  yidx="vb, vk, vy, vx" if nchw else "vb, vy, vx, vk")
    fields["pgrid"] = ", ".join(map(str, fields["pshape"]))
    # the iterators in the output's index order, the reductions in the input's
    loops = ["nb", "ko", "y", "x", "ci", "r", "s"] if nchw else ["nb", "y", "x", "ko", "r", "s", "ci"]
    extents = dict(nb=b, ko=f, y=h, x=w, ci=c, r=3, s=3)
    names = dict(nb="vb", ko="vk", y="vy", x="vx", ci="vc", r="vr", s="vs")
    fields.update(conv_loops=", ".join(loops), conv_extents=", ".join(str(extents[v]) for v in loops),
                  conv_iters=", ".join(names[v] for v in loops))
    return tdsl.parse(CONV.format(**fields))


def conv_reference(x, wt, scale, layout):
    if layout == "NHWC":
        x, wt = x.transpose(0, 3, 1, 2), wt.transpose(3, 2, 0, 1)
    b, c, h, w = x.shape
    xp = np.pad(x.astype(np.int64) - ZA, ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = sum(np.einsum("bcyx,fc->bfyx", xp[:, :, r:r + h, s:s + w], wt[:, :, r, s].astype(np.int64))
              for r in range(3) for s in range(3)).astype(np.int32)
    y = np.clip(np.rint(acc.astype(np.float32) * scale[:, None, None]).astype(np.int32) + ZY, 0, 255).astype(np.uint8)
    return y.transpose(0, 2, 3, 1) if layout == "NHWC" else y


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_quantized_conv2d_is_bit_exact(layout):
    b, c, h, w, f = 1, 16, 8, 8, 32
    func = quantized_conv2d(layout, b, c, h, w, f)
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (b, c, h, w) if layout == "NCHW" else (b, h, w, c)).astype(np.uint8)
    wt = rng.integers(-128, 128, (f, c, 3, 3) if layout == "NCHW" else (3, 3, c, f)).astype(np.int8)
    scale = rng.uniform(2e-5, 6e-5, f).astype(np.float32)
    sch = tdsl.auto_schedule(func, "cpu")
    if layout == "NHWC" and "avx2" in cpu_features("cpu"):
        assert "u8s8s32_" in str(sch.trace)      # the int8 micro-kernel reads NHWC in place
    y = np.zeros((b, f, h, w) if layout == "NCHW" else (b, h, w, f), np.uint8)
    tdsl.build(sch, target="cpu")(x, wt, scale, y)
    want = conv_reference(x, wt, scale, layout)
    assert 0 < want.mean() < 255
    np.testing.assert_array_equal(y, want)
