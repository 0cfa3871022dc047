"""auto_schedule for CUDA of conv2d as an implicit GEMM (GPUMmaConv: NHWC and NCHW, fp16 / bf16 -> fp32,
padding as its own kernel) and of attention's two GEMMs (Q K^T with K read transposed, P V; batch and
heads on blockIdx.z; the softmax between them its own kernels) on mma.sync: numbers against numpy in
the emulator at small sizes, ldmatrix free of bank conflicts, cp.async copies, HMMA / LDSM / LDGSTS in
the sm_80 SASS, and shapes off the tiles falling back with a note."""
import json

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda.stats import cuobjdump_path, opcodes


def conv_nhwc(N, H, W, C, K, R=3, pad=1, dtype="float16", ohwi=False, stride=1):
    """NHWC data, HWIO filter (or OHWI: the filter's last index is the reduction's channel)."""
    HP, WP = H + 2 * pad, W + 2 * pad
    OH, OW = (HP - R) // stride + 1, (WP - R) // stride + 1

    @T.prim_func
    def hwio(A: T.Buffer((N, H, W, C), dtype), Wt: T.Buffer((R, R, C, K), dtype),
             Out: T.Buffer((N, OH, OW, K), "float32")):
        Apad = T.alloc_buffer((N, HP, WP, C), dtype)
        for n, h, w, c in T.grid(N, HP, WP, C):
            with T.block("pad"):
                vn, vh, vw, vc = T.axis.remap("SSSS", [n, h, w, c])
                Apad[vn, vh, vw, vc] = T.if_then_else(vh >= pad and vh < H + pad and vw >= pad and vw < W + pad,
                                                      A[vn, vh - pad, vw - pad, vc], T.cast(0, dtype))
        for n, h, w, k, ry, rx, rc in T.grid(N, OH, OW, K, R, R, C):
            with T.block("conv"):
                vn, vh, vw, vk, vry, vrx, vrc = T.axis.remap("SSSSRRR", [n, h, w, k, ry, rx, rc])
                with T.init():
                    Out[vn, vh, vw, vk] = T.float32(0)
                Out[vn, vh, vw, vk] = Out[vn, vh, vw, vk] \
                    + T.cast(Apad[vn, vh * stride + vry, vw * stride + vrx, vrc], "float32") \
                    * T.cast(Wt[vry, vrx, vrc, vk], "float32")

    @T.prim_func
    def ohwi_(A: T.Buffer((N, H, W, C), dtype), Wt: T.Buffer((K, R, R, C), dtype),
              Out: T.Buffer((N, OH, OW, K), "float32")):
        Apad = T.alloc_buffer((N, HP, WP, C), dtype)
        for n, h, w, c in T.grid(N, HP, WP, C):
            with T.block("pad"):
                vn, vh, vw, vc = T.axis.remap("SSSS", [n, h, w, c])
                Apad[vn, vh, vw, vc] = T.if_then_else(vh >= pad and vh < H + pad and vw >= pad and vw < W + pad,
                                                      A[vn, vh - pad, vw - pad, vc], T.cast(0, dtype))
        for n, h, w, k, ry, rx, rc in T.grid(N, OH, OW, K, R, R, C):
            with T.block("conv"):
                vn, vh, vw, vk, vry, vrx, vrc = T.axis.remap("SSSSRRR", [n, h, w, k, ry, rx, rc])
                with T.init():
                    Out[vn, vh, vw, vk] = T.float32(0)
                Out[vn, vh, vw, vk] = Out[vn, vh, vw, vk] + T.cast(Apad[vn, vh + vry, vw + vrx, vrc], "float32") \
                    * T.cast(Wt[vk, vry, vrx, vrc], "float32")

    return ohwi_ if ohwi else hwio


def conv_nchw(N, C, H, W, K, R=3, pad=1, dtype="float16"):
    """NCHW data, OIHW filter."""
    HP, WP = H + 2 * pad, W + 2 * pad
    OH, OW = HP - R + 1, WP - R + 1

    @T.prim_func
    def f(A: T.Buffer((N, C, H, W), dtype), Wt: T.Buffer((K, C, R, R), dtype), Out: T.Buffer((N, K, OH, OW), "float32")):
        Apad = T.alloc_buffer((N, C, HP, WP), dtype)
        for n, c, h, w in T.grid(N, C, HP, WP):
            with T.block("pad"):
                vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
                Apad[vn, vc, vh, vw] = T.if_then_else(vh >= pad and vh < H + pad and vw >= pad and vw < W + pad,
                                                      A[vn, vc, vh - pad, vw - pad], T.cast(0, dtype))
        for n, k, h, w, rc, ry, rx in T.grid(N, K, OH, OW, C, R, R):
            with T.block("conv"):
                vn, vk, vh, vw, vrc, vry, vrx = T.axis.remap("SSSSRRR", [n, k, h, w, rc, ry, rx])
                with T.init():
                    Out[vn, vk, vh, vw] = T.float32(0)
                Out[vn, vk, vh, vw] = Out[vn, vk, vh, vw] + T.cast(Apad[vn, vrc, vh + vry, vw + vrx], "float32") \
                    * T.cast(Wt[vk, vrc, vry, vrx], "float32")
    return f


def attention(B, H, S, D, dtype="float16"):
    """softmax(Q K^T / sqrt(D)) V: two batched GEMMs on [batch, head, ...] with the softmax between
    them (P rounded to the operands' dtype)."""
    scale = 1.0 / float(np.sqrt(D))

    @T.prim_func
    def f(Q: T.Buffer((B, H, S, D), dtype), K: T.Buffer((B, H, S, D), dtype), V: T.Buffer((B, H, S, D), dtype),
          O: T.Buffer((B, H, S, D), "float32")):
        Sc = T.alloc_buffer((B, H, S, S), "float32")
        Mx = T.alloc_buffer((B, H, S), "float32")
        E = T.alloc_buffer((B, H, S, S), "float32")
        Sm = T.alloc_buffer((B, H, S), "float32")
        P = T.alloc_buffer((B, H, S, S), dtype)
        for b, h, i, j, d in T.grid(B, H, S, S, D):
            with T.block("QK"):
                vb, vh, vi, vj, vd = T.axis.remap("SSSSR", [b, h, i, j, d])
                with T.init():
                    Sc[vb, vh, vi, vj] = T.float32(0)
                Sc[vb, vh, vi, vj] = Sc[vb, vh, vi, vj] + T.cast(Q[vb, vh, vi, vd], "float32") \
                    * T.cast(K[vb, vh, vj, vd], "float32")
        for b, h, i, j in T.grid(B, H, S, S):
            with T.block("max"):
                vb, vh, vi, vj = T.axis.remap("SSSR", [b, h, i, j])
                with T.init():
                    Mx[vb, vh, vi] = T.float32(-3.0e38)
                Mx[vb, vh, vi] = T.max(Mx[vb, vh, vi], Sc[vb, vh, vi, vj])
        for b, h, i, j in T.grid(B, H, S, S):
            with T.block("exp"):
                vb, vh, vi, vj = T.axis.remap("SSSS", [b, h, i, j])
                E[vb, vh, vi, vj] = T.exp((Sc[vb, vh, vi, vj] - Mx[vb, vh, vi]) * T.float32(scale))
        for b, h, i, j in T.grid(B, H, S, S):
            with T.block("sum"):
                vb, vh, vi, vj = T.axis.remap("SSSR", [b, h, i, j])
                with T.init():
                    Sm[vb, vh, vi] = T.float32(0)
                Sm[vb, vh, vi] = Sm[vb, vh, vi] + E[vb, vh, vi, vj]
        for b, h, i, j in T.grid(B, H, S, S):
            with T.block("P"):
                vb, vh, vi, vj = T.axis.remap("SSSS", [b, h, i, j])
                P[vb, vh, vi, vj] = T.cast(E[vb, vh, vi, vj] / Sm[vb, vh, vi], dtype)
        for b, h, i, d, j in T.grid(B, H, S, D, S):
            with T.block("PV"):
                vb, vh, vi, vd, vj = T.axis.remap("SSSSR", [b, h, i, d, j])
                with T.init():
                    O[vb, vh, vi, vd] = T.float32(0)
                O[vb, vh, vi, vd] = O[vb, vh, vi, vd] + T.cast(P[vb, vh, vi, vj], "float32") \
                    * T.cast(V[vb, vh, vj, vd], "float32")
    return f


def _np(dtype):
    if dtype == "float16":
        return np.float16
    import ml_dtypes

    return ml_dtypes.bfloat16


def conv_ref(a, w, layout, pad=1, stride=1):
    """numpy conv2d; a NHWC + w HWIO / OHWI, or a NCHW + w OIHW."""
    a = a.astype(np.float32)
    w = w.astype(np.float32)
    if layout == "nchw":
        a, w = a.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0)
    elif layout == "ohwi":
        w = w.transpose(1, 2, 3, 0)
    R = w.shape[0]
    ap = np.pad(a, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    OH, OW = (ap.shape[1] - R) // stride + 1, (ap.shape[2] - R) // stride + 1
    out = np.zeros((a.shape[0], OH, OW, w.shape[3]), np.float32)
    for ry in range(R):
        for rx in range(R):
            window = ap[:, ry:ry + stride * (OH - 1) + 1:stride, rx:rx + stride * (OW - 1) + 1:stride]
            out += np.einsum("nhwc,ck->nhwk", window, w[ry, rx])
    return out.transpose(0, 3, 1, 2) if layout == "nchw" else out


def attention_ref(q, k, v):
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float32), k.astype(np.float32)) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    p = (p / p.sum(-1, keepdims=True)).astype(q.dtype).astype(np.float32)
    return np.einsum("bhij,bhjd->bhid", p, v.astype(np.float32))


def _conflict_free_ldmatrix(kernel, buffers):
    shared = {c.buffer: c for c in kernel.stats.shared}
    assert set(shared) == set(buffers)
    for c in shared.values():
        assert c.instructions > 0 and c.wavefronts == c.phases and c.worst == 1, c
    assert not [n for n in kernel.notes if "bank conflicts" in n]


def _skip_without_sass_tools():
    pytest.importorskip("cuda.bindings")
    if cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")


def _sass(kernel):
    ops = opcodes(kernel.cubin)
    assert any(o.startswith("HMMA.16816.F32") for o in ops), ops
    assert ops["LDSM.16.M88.4"] > 0
    assert ops["LDGSTS.E.BYPASS.128"] > 0
    assert not [o for o in ops if o.startswith(("LDL", "STL"))]
    for usage in kernel.stats.resources.values():
        assert usage["local"] == 0 and usage["stack"] == 0
    return ops


# ----------------------------------------------------------------------------- conv2d

CONV_CASES = {
    # name -> (function, layout of the reference, data shape, filter shape, dtype, stride)
    "nhwc-f16": (lambda: conv_nhwc(1, 8, 8, 32, 32), "nhwc", (1, 8, 8, 32), (3, 3, 32, 32), "float16", 1),
    "nhwc-ohwi-bf16": (lambda: conv_nhwc(2, 8, 8, 32, 64, dtype="bfloat16", ohwi=True), "ohwi", (2, 8, 8, 32),
                       (64, 3, 3, 32), "bfloat16", 1),
    "nhwc-f16-stride-2": (lambda: conv_nhwc(1, 16, 16, 32, 32, stride=2), "nhwc", (1, 16, 16, 32), (3, 3, 32, 32),
                          "float16", 2),
}


def test_conv2d_trace_is_an_implicit_gemm_on_mma_sync():
    trace = str(tdsl.auto_schedule(conv_nhwc(1, 8, 8, 32, 32), target="cuda").trace)
    for step in ("transform_block_layout", "reindex_cache_read", "reindex_cache_write", "mma_ldmatrix_f16_a",
                 "mma_ldmatrix_f16_b", "mma_f16f16f32", "mma_fill_16x16_f32", "mma_store_16x16_f32_shared_",
                 "tdsl.swizzle", "software_pipeline_stage", "software_pipeline_async_stages"):
        assert step in trace, step
    assert 'compute_inline(sch.get_block("pad"))' not in trace and "compute_inline(b0)" not in trace


@pytest.mark.parametrize("make", [lambda: conv_nhwc(1, 8, 8, 32, 32), lambda: conv_nchw(2, 32, 8, 8, 32),
                                  lambda: attention(1, 2, 64, 32)], ids=["nhwc", "nchw", "attention"])
def test_the_trace_reads_as_python_and_replays(make):
    from tdsl.schedule import Trace

    f = make()
    sch = tdsl.auto_schedule(f, target="cuda")
    text = str(sch.trace)
    assert "<function" not in text and "<lambda>" not in text
    fresh = tdsl.Schedule(f)
    exec(text, {"sch": fresh})  # noqa: S102 - the printed trace is the code under test
    assert tdsl.structural_equal(fresh.func, sch.func)
    back = Trace.from_json(json.dumps(sch.trace.as_json())).apply(f)
    assert tdsl.structural_equal(back.func, sch.func)


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_emulated_conv2d_is_right_with_cp_async_and_without_bank_conflicts(case):
    make, layout, ashape, wshape, dtype, stride = CONV_CASES[case]
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    a = rng.standard_normal(ashape).astype(_np(dtype))
    w = rng.standard_normal(wshape).astype(_np(dtype))
    kernel = tdsl.build(tdsl.auto_schedule(make(), target="cuda"), target="cuda", emulate=True)
    np.testing.assert_allclose(kernel(a, w), conv_ref(a, w, layout, stride=stride), rtol=1e-4, atol=1e-3)
    _conflict_free_ldmatrix(kernel, {"Apad_shared", "Wt_shared"})
    # every copy into shared memory is a 16-byte cp.async, every global access coalesced
    assert not [n for n in kernel.notes if "synchronous" in n or "not vectorized" in n], kernel.notes
    for g in kernel.stats.global_:
        assert g.coalesced, g


def test_emulated_conv2d_nchw_is_right_with_channels_last_operand_tiles():
    # NCHW data with an OIHW filter: the padding kernel writes the padded data channels last and
    # a small kernel copies the filter channels last, so every operand tile of the implicit GEMM
    # comes in by 16-byte cp.async and its accesses are coalesced
    f = conv_nchw(2, 32, 8, 8, 32)
    sch = tdsl.auto_schedule(f, target="cuda")
    assert "transform_layout" in str(sch.trace) and "mma_f16f16f32_trans" in str(sch.trace)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 32, 8, 8)).astype(np.float16)
    w = rng.standard_normal((32, 32, 3, 3)).astype(np.float16)
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    np.testing.assert_allclose(kernel(a, w), conv_ref(a, w, "nchw"), rtol=1e-4, atol=1e-3)
    _conflict_free_ldmatrix(kernel, {"Apad_shared", "Wt_global_shared"})
    assert not [n for n in kernel.notes if "synchronous" in n or "not vectorized" in n], kernel.notes
    gemm = [g for g in kernel.stats.global_ if g.buffer == "Out"][0].kernel
    for g in kernel.stats.global_:
        if g.kernel == gemm:
            assert g.coalesced, g


def test_emulated_1x1_conv2d_fuses_n_h_w_into_the_gemm_rows():
    # as a batched GEMM its rows would be w (8: off the tiles); as an implicit GEMM m = n * h * w
    @T.prim_func
    def f(A: T.Buffer((2, 8, 8, 32), "float16"), Wt: T.Buffer((32, 64), "float16"),
          Out: T.Buffer((2, 8, 8, 64), "float32")):
        for n, h, w, k, rc in T.grid(2, 8, 8, 64, 32):
            with T.block("conv"):
                vn, vh, vw, vk, vrc = T.axis.remap("SSSSR", [n, h, w, k, rc])
                with T.init():
                    Out[vn, vh, vw, vk] = T.float32(0)
                Out[vn, vh, vw, vk] = Out[vn, vh, vw, vk] + T.cast(A[vn, vh, vw, vrc], "float32") \
                    * T.cast(Wt[vrc, vk], "float32")

    sch = tdsl.auto_schedule(f, target="cuda")
    assert "transform_block_layout" in str(sch.trace) and "mma_f16f16f32" in str(sch.trace)
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    rng = np.random.default_rng(6)
    a = rng.standard_normal((2, 8, 8, 32)).astype(np.float16)
    w = rng.standard_normal((32, 64)).astype(np.float16)
    np.testing.assert_allclose(kernel(a, w), np.einsum("nhwc,ck->nhwk", a.astype(np.float32), w.astype(np.float32)),
                               rtol=1e-4, atol=1e-3)
    assert not kernel.notes


def test_sass_of_conv2d_56x56x64_for_sm_80():
    _skip_without_sass_tools()
    kernel = tdsl.build(tdsl.auto_schedule(conv_nhwc(1, 56, 56, 64, 64), target="cuda"), target="cuda", arch="sm_80")
    ops = _sass(kernel)
    assert ops["LDSM.16.MT88.4"] > 0   # B stored k-major: ldmatrix .trans


def test_conv2d_off_the_tiles_falls_back_with_a_note():
    # 24 output channels: not a multiple of a block tile; the SIMT rules take it (padding inlined)
    f = conv_nhwc(1, 8, 8, 32, 24)
    trace = str(tdsl.auto_schedule(f, target="cuda").trace)
    assert "mma_ldmatrix" not in trace and "compute_inline" in trace
    kernel = tdsl.build(tdsl.auto_schedule(f, target="cuda"), target="cuda", emulate=True)
    (note,) = [n for n in kernel.notes if "tensor cores" in n]
    assert note.startswith("convolution block 'conv' is not on the tensor cores (mma.sync): the implicit GEMM's "
                           "m x n = 64 x 24 is not a multiple of a block tile"), note
    rng = np.random.default_rng(2)
    a = rng.standard_normal((1, 8, 8, 32)).astype(np.float16)
    w = rng.standard_normal((3, 3, 32, 24)).astype(np.float16)
    np.testing.assert_allclose(kernel(a, w), conv_ref(a, w, "nhwc"), rtol=1e-4, atol=1e-3)


def test_conv2d_with_padding_inside_the_block_falls_back_with_a_note():
    # the guard T.if_then_else(...) cannot travel with a plain cp.async copy of the data tile
    @T.prim_func
    def f(A: T.Buffer((1, 8, 8, 32), "float16"), Wt: T.Buffer((3, 3, 32, 32), "float16"),
          Out: T.Buffer((1, 8, 8, 32), "float32")):
        for n, h, w, k, ry, rx, rc in T.grid(1, 8, 8, 32, 3, 3, 32):
            with T.block("conv"):
                vn, vh, vw, vk, vry, vrx, vrc = T.axis.remap("SSSSRRR", [n, h, w, k, ry, rx, rc])
                with T.init():
                    Out[vn, vh, vw, vk] = T.float32(0)
                Out[vn, vh, vw, vk] = Out[vn, vh, vw, vk] + T.cast(T.if_then_else(
                    vh + vry >= 1 and vh + vry < 9 and vw + vrx >= 1 and vw + vrx < 9,
                    A[vn, vh + vry - 1, vw + vrx - 1, vrc], T.float16(0)), "float32") \
                    * T.cast(Wt[vry, vrx, vrc, vk], "float32")

    kernel = tdsl.build(tdsl.auto_schedule(f, target="cuda"), target="cuda", emulate=True)
    (note,) = [n for n in kernel.notes if "tensor cores" in n]
    assert "reads 'A' through T.if_then_else" in note and "write the padding as its own block" in note
    rng = np.random.default_rng(5)
    a = rng.standard_normal((1, 8, 8, 32)).astype(np.float16)
    w = rng.standard_normal((3, 3, 32, 32)).astype(np.float16)
    np.testing.assert_allclose(kernel(a, w), conv_ref(a, w, "nhwc"), rtol=1e-4, atol=1e-3)


# ----------------------------------------------------------------------------- attention

def test_attention_gemms_are_on_mma_sync_and_softmax_stays_its_own_kernels():
    trace = str(tdsl.auto_schedule(attention(1, 2, 64, 32), target="cuda").trace)
    assert trace.count("mma_f16f16f32_trans") == 1       # Q K^T: K read [j, d], B n-major
    assert trace.count('"mma_f16f16f32"') == 1          # P V
    assert trace.count("blockIdx.z") == 2               # batch x heads fused onto blockIdx.z, per GEMM
    assert 'get_block("P")' in trace and "compute_inline" not in trace.split('get_block("P")')[1].split("\n")[1]


def test_emulated_attention_is_right_without_bank_conflicts():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, 64, 32)).astype(np.float16) for _ in range(3))
    kernel = tdsl.build(tdsl.auto_schedule(attention(1, 2, 64, 32), target="cuda"), target="cuda", emulate=True)
    np.testing.assert_allclose(kernel(q, k, v), attention_ref(q, k, v), rtol=2e-3, atol=2e-3)
    _conflict_free_ldmatrix(kernel, {"Q_shared", "K_shared", "P_shared", "V_shared"})
    assert not [n for n in kernel.notes if "synchronous" in n]


def test_sass_of_attention_for_sm_80():
    _skip_without_sass_tools()
    kernel = tdsl.build(tdsl.auto_schedule(attention(2, 4, 128, 64), target="cuda"), target="cuda", arch="sm_80")
    _sass(kernel)


def test_gemm_off_the_tiles_leaves_a_note():
    @T.prim_func
    def f(A: T.Buffer((48, 64), "float16"), B: T.Buffer((64, 48), "float16"), C: T.Buffer((48, 48), "float32")):
        for i, j, k in T.grid(48, 48, 64):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")

    kernel = tdsl.build(tdsl.auto_schedule(f, target="cuda"), target="cuda", emulate=True)
    (note,) = [n for n in kernel.notes if "tensor cores" in n]
    assert note.startswith("GEMM block 'C' is not on the tensor cores (mma.sync): 48 x 48 is not a multiple"), note
    rng = np.random.default_rng(4)
    a = rng.standard_normal((48, 64)).astype(np.float16)
    b = rng.standard_normal((64, 48)).astype(np.float16)
    np.testing.assert_allclose(kernel(a, b), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
