"""The Hopper fused attention kernel (`flash_attention_sm90`: wgmma + TMA, a producer warpgroup and
two consumer warpgroups, P in registers for an RS wgmma, ping-pong on named barriers): its numbers in
the emulator against numpy (fp16/bf16, head dim 64/128, causal or not, a K/V ring that wraps, a
sequence that is not a multiple of the 128-row tiles), its protocol (a wrong mbarrier count, parity
or byte count, a turn never given or given with another thread count fail in the emulator; a wrong P
fragment gives wrong numbers), its sm_90a SASS, and `auto_schedule(..., arch="sm_90a")` choosing it."""
import ctypes
import pathlib
import re
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
    (1, 512, 64, "float16", False),      # 4 key tiles: the 3-stage ring wraps
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
    assert "tdsl_ptx_bar_" not in source.split("extern \"C\"")[-1].split("__syncthreads")[1]
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
    ("a full barrier waited with the wrong parity", "tdsl_ptx_mbarrier_wait(&full[s], (j / 3) & 1)",
     # the fourth tile does not wait for its copy: the consumers release stage 0 twice before the producer
     # waits for its first release, whose phase then never comes again
     "tdsl_ptx_mbarrier_wait(&full[s], 0)", r"deadlock: 1 thread\(s\) wait on mbarrier empty\[0\]"),
    ("1 KiB more announced than the copies bring", "arrive_expect_tx(&full[s], ", "arrive_expect_tx(&full[s], 1024 + ",
     "deadlock"),
    ("warpgroup 1 never gives warpgroup 0 its first turn",
     "    if (w == 1) tdsl_ptx_bar_arrive(1, 256);", "",
     r"deadlock: .*; 128 more wait on named barrier 1 \(bar.sync\): warp 4 \(threads 128-159\).*; 128 more wait on "
     r"named barrier 2 \(bar.sync\): warp 8"),
    ("the turn passed with another thread count than the one waiting", "tdsl_ptx_bar_arrive(1 + 1 - w, 256);",
     "tdsl_ptx_bar_arrive(1 + 1 - w, 384);", r"every arrival of one phase gives the same count"),
    ("P's fragment with the two 8-column halves of a k16 slice swapped",
     "pr[kk][r] = tdsl_fa_pack<half>(sc[8 * kk + 2 * r], sc[8 * kk + 2 * r + 1]);",
     "pr[kk][r] = tdsl_fa_pack<half>(sc[8 * kk + 2 * (r ^ 2)], sc[8 * kk + 2 * (r ^ 2) + 1]);", None),
])
def test_a_broken_protocol_fails_in_the_emulator(what, old, new, error):
    _emulator()
    shape = AttentionShape(1, 512, 64, "float16", "float32", False)
    source = hopper.kernel_source(shape)
    assert source.count(old) in (1, 2, 3), what   # (the softmax, P: first tile, loop; the turns: 3 places)
    q, k, v = _inputs((1, 512, 64), "float16", seed=5)
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
    # P stays in registers: no P tile, so 3 K/V stages fit at head dim 128 (Q 32 KiB + 3 x 64 KiB)
    assert hopper.STAGES == 3
    assert 224 * 1024 <= hopper.dynamic_shared_bytes(AttentionShape(1, 128, 128, "float16", "float16", False)) < 225 * 1024


@pytest.mark.parametrize("dim,dtype", [(64, "float16"), (128, "float16"), (128, "bfloat16")])
def test_sass_has_hgmma_utmaldg_syncs_named_barriers_and_no_local_memory(dim, dtype):
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
    # the turns on named barriers 1 and 2 (256 threads: 0x100) beside __syncthreads' barrier 0
    assert count("BAR.SYNC") >= 2 and count("BAR.ARV") >= 2
    sass = _sass(compiled.cubin)
    named = [line for line in sass if re.search(r"BAR\.(SYNC\S*|ARV) (R\d+|0x[12]), 0x100", line)]
    assert len(named) >= 4 and any("BAR.ARV 0x1, 0x100" in line for line in named), named
    # P V: HGMMA with A from registers (R.., not a descriptor), B transposed (V N-major)
    rs = [line for line in sass if re.search(r"HGMMA\.64x\d+x16\.F32\S* R\d+, R\d+, gdesc\[UR\d+\]\.tnspB", line)]
    assert len(rs) == 2 * hopper.BLOCK_N // 16, rs
    usage = resource_usage(compiled.cubin)[hopper.kernel_name(shape)]
    assert usage["local"] == 0 and usage["stack"] == 0
    assert "serialized" not in compiled.log   # ptxas keeps the wgmma asynchronous (no C7519 warning)


def _sass(cubin: bytes) -> list[str]:
    import os
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        return subprocess.run([cuobjdump_path(), "-sass", path], capture_output=True, text=True,
                              check=True).stdout.splitlines()


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
