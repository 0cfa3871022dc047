"""The Hopper fused attention kernel (`flash_attention_sm90`: wgmma + TMA, a producer warpgroup and
two consumer warpgroups): its numbers in the emulator against numpy (fp16/bf16, head dim 64/128,
causal or not, a K/V ring that wraps, a sequence that is not a multiple of the 128-row tiles), its
protocol (a wrong barrier count, parity or byte count, a missing warpgroup sync fail in the
emulator), its sm_90a SASS, and `auto_schedule(..., arch="sm_90a")` choosing it."""
import ctypes
import pathlib
import sys

import numpy as np
import pytest

import tdsl
from tdsl.backends.cuda import flash_attention_sm90 as hopper
from tdsl.backends.cuda.flash_attention import AttentionShape, scale_log2
from tdsl.backends.cuda.stats import cuobjdump_path, opcodes

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))

from attention_gpu import attention_lowp_func, attention_lowp_ref  # noqa: E402


def _emulator():
    from tdsl.backends.cuda.emulator.compiler import find_compiler

    try:
        find_compiler()
    except tdsl.TargetError as exc:
        pytest.skip(f"the CUDA emulator needs a host C++ compiler: {exc}")


def _inputs(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    np_dtype = pytest.importorskip("ml_dtypes").bfloat16 if dtype == "bfloat16" else np.float16
    return [rng.standard_normal(shape).astype(np_dtype) for _ in range(3)]


def _run(shape: AttentionShape, q, k, v, source: str | None = None, order: int = 0) -> np.ndarray:
    from tdsl.backends.cuda.emulator.raw import run_source
    from tdsl.backends.cuda.sm90 import emulator_tensor_map

    maps = [emulator_tensor_map(x, hopper.tensor_box(), "128B") for x in (q, k, v)]
    out = np.zeros((shape.bh, shape.seq, shape.dim), np.float32)
    run_source(source or hopper.kernel_source(shape), hopper.kernel_name(shape),
               [*maps, out, ctypes.c_float(scale_log2(shape.dim ** -0.5))], grid=hopper.grid(shape),
               block=(hopper.THREADS, 1, 1), order=order, dynamic_shared=hopper.dynamic_shared_bytes(shape))
    return out


@pytest.mark.parametrize("bh,seq,dim,dtype,causal", [
    (1, 128, 64, "float16", False),
    (1, 384, 64, "float16", False),      # 3 key tiles: the 2-stage ring wraps
    (1, 256, 128, "float16", True),      # the second block: a full tile, then the diagonal one
    (2, 192, 64, "bfloat16", True),      # 192 rows: the last tiles end past the sequence
    (1, 128, 128, "bfloat16", False),
])
def test_emulated_kernel_matches_numpy(bh, seq, dim, dtype, causal):
    _emulator()
    shape = AttentionShape(bh, seq, dim, dtype, "float32", causal)
    q, k, v = _inputs((bh, seq, dim), dtype, seed=seq + dim)
    tol = 2e-3 if dtype == "float16" else 2e-2
    np.testing.assert_allclose(_run(shape, q, k, v), attention_lowp_ref(q, k, v, causal), rtol=tol, atol=tol)


def test_without_pingpong_the_same_numbers():
    """The consumers issuing their wgmma without taking turns (`pingpong=False`) compute the same."""
    _emulator()
    shape = AttentionShape(1, 256, 64, "float16", "float32", True)
    source = hopper.kernel_source(shape, pingpong=False)
    assert "turn[" not in source.split("extern \"C\"")[-1].split("__syncthreads")[1]
    q, k, v = _inputs((1, 256, 64), "float16", seed=6)
    np.testing.assert_allclose(_run(shape, q, k, v, source), attention_lowp_ref(q, k, v, True), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("order", [1, 2])
def test_other_thread_orders_give_the_same_bits(order):
    _emulator()
    shape = AttentionShape(1, 256, 64, "float16", "float32", True)
    q, k, v = _inputs((1, 256, 64), "float16", seed=4)
    np.testing.assert_array_equal(_run(shape, q, k, v), _run(shape, q, k, v, order=order))


@pytest.mark.parametrize("what,old,new,error", [
    ("empty barriers expecting 384 arrivals", "tdsl_ptx_mbarrier_init(&empty[s], 256)",
     "tdsl_ptx_mbarrier_init(&empty[s], 384)", r"deadlock: .* mbarrier empty\[0\]"),
    ("a full barrier waited with the wrong parity", "tdsl_ptx_mbarrier_wait(&full[s], (j / 2) & 1)",
     "tdsl_ptx_mbarrier_wait(&full[s], 0)", None),   # the third tile reads the stage before its copy lands
    ("1 KiB more announced than the copies bring", "arrive_expect_tx(&full[s], ", "arrive_expect_tx(&full[s], 1024 + ",
     "deadlock"),
    ("no warpgroup sync between writing P and the wgmma reading it",
     "      tdsl_fa3_warpgroup_sync(&wgbar[w], phase);\n    }\n", "    }\n", None),   # reads a stale P
    ("warpgroup 1 never gives warpgroup 0 its first turn", "    if (w == 1) tdsl_ptx_mbarrier_arrive(&turn[0]);",
     "", r"deadlock: .* 128 more wait on turn\[0\]"),
    ("P stored without fence.proxy.async before the wgmma reads it", "tdsl_ptx_fence_proxy_async();", "",
     "fence.proxy.async"),
    ("one P buffer: P written while the previous P V reads it", "TDSL_FA3_STORE_PAIR(half, Ps, at,",
     "TDSL_FA3_STORE_PAIR(half, Ps, at % (128 * 128),", "operand A was written after the wgmma was issued"),
])
def test_a_broken_protocol_fails_in_the_emulator(what, old, new, error):
    _emulator()
    shape = AttentionShape(1, 384, 64, "float16", "float32", False)
    source = hopper.kernel_source(shape)
    assert source.count(old) in (1, 2), what   # (the softmax: first tile, loop)
    q, k, v = _inputs((1, 384, 64), "float16", seed=5)
    if error is None:
        wrong = np.abs(_run(shape, q, k, v, source.replace(old, new)) - attention_lowp_ref(q, k, v, False)).max()
        assert wrong > 0.1, what
        return
    with pytest.raises(tdsl.TargetError, match=error):
        _run(shape, q, k, v, source.replace(old, new))


def test_the_shared_memory_fits_sm90():
    for dim in (64, 128):
        shape = AttentionShape(32, 4096, dim, "float16", "float16", True)
        assert hopper.dynamic_shared_bytes(shape) <= 232448   # sm_90's 227 KiB per block
    assert hopper.dynamic_shared_bytes(AttentionShape(1, 128, 128, "float16", "float16", False)) > 200 * 1024


@pytest.mark.parametrize("dim,dtype", [(64, "float16"), (128, "float16"), (128, "bfloat16")])
def test_sass_has_hgmma_utmaldg_syncs_and_no_local_memory(dim, dtype):
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC comes with the cuda extra")
    if cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    from tdsl.backends.cuda.nvrtc import compile_cuda
    from tdsl.backends.cuda.stats import resource_usage

    shape = AttentionShape(32, 4096, dim, dtype, dtype, True)
    with pytest.raises(tdsl.TargetError, match="needs the architecture-specific target sm_90a"):
        compile_cuda(hopper.kernel_source(shape), "sm_90", name="attention.cu")
    compiled = compile_cuda(hopper.kernel_source(shape), "sm_90a", name="attention.cu")
    ops = opcodes(compiled.cubin)
    count = lambda prefix: sum(n for op, n in ops.items() if op.startswith(prefix))   # noqa: E731
    # Q K^T (dim / 16 wgmma) and P V (128 / 16) each twice: the first tile / the loop / the last P V
    assert count("HGMMA") == 2 * (dim // 16 + hopper.BLOCK_N // 16)
    assert count("UTMALDG") > 0 and count("SYNCS") > 0 and count("USETMAXREG") == 2
    assert count("LDL") == 0 and count("STL") == 0 and count("HMMA") == 0
    usage = resource_usage(compiled.cubin)[hopper.kernel_name(shape)]
    assert usage["local"] == 0 and usage["stack"] == 0
    assert "serialized" not in compiled.log   # ptxas keeps the wgmma asynchronous (no C7519 warning)


def _nvrtc():
    pytest.importorskip("cuda.bindings.nvrtc", reason="a build with arch= compiles with NVRTC (the cuda extra)")


@pytest.mark.parametrize("kw", [dict(causal=True), dict(dtype="bfloat16", dim=128, out="bfloat16", p_cast=True)],
                         ids=["f16-causal", "bf16-d128-bf16-out"])
def test_auto_schedule_for_sm90a_runs_the_hopper_kernel(kw):
    _emulator()
    _nvrtc()
    dim = kw.pop("dim", 64)
    func = attention_lowp_func(1, 128, dim, **kw)
    sch = tdsl.auto_schedule(func, target="cuda", arch="sm_90a")
    assert 'value="cuda.flash_attention_fwd_sm90a"' in str(sch.trace)
    lowered = tdsl.lower(sch, target="cuda").script()
    assert 'T.call_extern("void", "tdsl_flash_attention_fwd_sm90a"' in lowered
    kernel = tdsl.build(sch, target="cuda", arch="sm_90a", emulate=True)
    dtype = kw.get("dtype", "float16")
    name = f"tdsl_flash_attention_fwd_sm90a_{'bf16' if dtype == 'bfloat16' else 'f16'}_d{dim}"
    assert name in kernel.source and "384, " in kernel.source
    assert any("FlashAttention-3" in n and n.startswith("info: ") for n in kernel.notes)
    q, k, v = _inputs((1, 128, dim), dtype, seed=dim)
    out = kernel(q, k, v)
    tol = 2e-3 if dtype == "float16" else 2e-2
    causal = bool(kw.get("causal"))
    np.testing.assert_allclose(out.astype(np.float64), attention_lowp_ref(q, k, v, causal), rtol=tol, atol=tol)


def test_other_architectures_keep_the_mma_sync_kernel_and_refuse_the_hopper_one():
    func = attention_lowp_func(1, 128, 64, causal=True)
    for arch in ("sm_80", "sm_90", None):
        trace = str(tdsl.auto_schedule(func, target="cuda", **({"arch": arch} if arch else {})).trace)
        assert 'value="cuda.flash_attention_fwd")' in trace, arch
    sch = tdsl.auto_schedule(func, target="cuda", arch="sm_90a")
    with pytest.raises(tdsl.TargetError, match="scheduled for sm_90a .* built for sm_80"):
        tdsl.build(sch, target="cuda", arch="sm_80", emulate=True)


def test_an_unknown_fused_kernel_is_refused_naming_the_known_ones():
    func = attention_lowp_func(1, 128, 64)
    sch = tdsl.Schedule(func)
    outer = sch.blockize([sch.get_block(n) for n in ("qk", "max", "exp", "sum", "norm", "pv")])
    sch.annotate(outer, "tdsl.fused_kernel", "cuda.flash_attention_fwd_sm100")
    with pytest.raises(tdsl.TargetError, match="unknown fused kernel 'cuda.flash_attention_fwd_sm100' .*"
                                               "'cuda.flash_attention_fwd_sm90a'"):
        tdsl.lower(sch, target="cuda")
