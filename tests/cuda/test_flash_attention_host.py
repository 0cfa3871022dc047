"""The fused attention kernel's host side: launched by the runtime between tdsl's kernels (a fake
`cuda.bindings.driver`: its launch runs a numpy stand-in), and bench/gpu_check.py's GPU pipeline
rows built without a GPU."""
import ctypes
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tdsl

pytest.importorskip("cuda.bindings")
from fake_cuda_driver import FakeDriver  # noqa: E402

from tdsl.backends.cuda import runtime  # noqa: E402

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from attention_gpu import attention_lowp_func, attention_lowp_ref  # noqa: E402


@pytest.fixture
def fake(monkeypatch):
    import cuda.bindings

    from tdsl.backends.cuda import attention_step
    from tdsl.backends.cuda.nvrtc import nvrtc_version

    nvrtc_version()
    drv = FakeDriver()
    monkeypatch.setattr(cuda.bindings, "driver", drv, raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", drv)
    for attr in ("info", "context", "device", "error"):
        monkeypatch.setattr(runtime._State, attr, None)
    monkeypatch.setattr(runtime._State, "local", __import__("threading").local())
    attention_step._gpu_module.cache_clear()   # modules loaded through another driver
    yield drv
    attention_step._gpu_module.cache_clear()


def _value(params: int, i: int, ctype):
    addr = (ctypes.c_void_p * 5).from_address(params)[i]
    return ctype.from_address(addr).value


def _array(ptr: int, shape, dtype) -> np.ndarray:
    count = int(np.prod(shape))
    raw = (ctypes.c_uint8 * (count * np.dtype(dtype).itemsize)).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


@pytest.mark.parametrize("causal", [False, True])
def test_the_runtime_launches_the_fused_kernel_with_its_operands(fake, causal):
    shape = (2, 128, 64)
    kernel = tdsl.build(tdsl.auto_schedule(attention_lowp_func(*shape, causal=causal), target="cuda"),
                        target="cuda", arch="sm_90")
    assert kernel.kernels == [] and len(kernel.plan.steps) == 1
    seen = []

    def on_launch(name, grid, block, params):
        seen.append((name, grid, block))
        q, k, v = (_array(_value(params, i, ctypes.c_void_p), shape, np.float16) for i in range(3))
        o = _array(_value(params, 3, ctypes.c_void_p), shape, np.float32)
        scale_log2 = _value(params, 4, ctypes.c_float)
        assert abs(scale_log2 - 0.125 * np.log2(np.e)) < 1e-6
        o[...] = attention_lowp_ref(q, k, v, causal)   # the kernel's stand-in

    fake.on_launch = on_launch
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(shape).astype(np.float16) for _ in range(3))
    out = kernel(q, k, v)
    name = "tdsl_flash_attention_fwd_f16_d64" + ("_causal" if causal else "")
    assert seen == [(name, (2, 2, 1), (128, 1, 1))]
    np.testing.assert_allclose(out, attention_lowp_ref(q, k, v, causal), rtol=1e-6, atol=1e-6)


def test_gpu_check_help_and_pipeline_rows_without_a_gpu(monkeypatch, capsys):
    env = dict(os.environ, PYTHONPATH=str(BENCH.parent))
    r = subprocess.run([sys.executable, str(BENCH / "gpu_check.py"), "--help"], capture_output=True, text=True,
                       env=env, timeout=120, check=False)
    assert r.returncode == 0 and "--pipelines" in r.stdout and "scaled_dot_product_attention" in r.stdout
    import gpu_check

    monkeypatch.setattr(gpu_check, "FAILURES", [])
    monkeypatch.setattr(gpu_check, "ATTENTION_SIZE", (2, 128, 64))
    monkeypatch.setattr(gpu_check, "attention_figures", lambda: "no emulator run here")
    gpu_check.attention_row(on_gpu=False)
    sch, arch, why_not = gpu_check.pipeline_schedule(gpu_check._mma_gemm(256, "float16"), "mma.sync")
    assert arch == "sm_80" and why_not is None and "mma_f16f16f32" in str(sch.trace)
    _, arch, why_not = gpu_check.pipeline_schedule(gpu_check._mma_gemm(256, "float16"), "wgmma")
    assert arch == "sm_90a" and (why_not is None or "no wgmma step" in why_not)
    out = capsys.readouterr().out
    assert "[ok] attention fwd 2x128x64 fp16 causal (fused kernel): built (no GPU: not run)" in out
    assert gpu_check.FAILURES == []


def test_the_runtime_launches_the_hopper_kernel_with_tensor_maps(fake):
    """Scheduled for sm_90a on an sm_90 device: the wgmma kernel (sm_90a CUBIN), 384 threads, its
    dynamic shared memory allowed, and Q, K, V's tensor maps encoded by the driver into device
    memory the kernel's first three parameters point to."""
    from tdsl.backends.cuda import flash_attention_sm90 as hopper
    from tdsl.backends.cuda.flash_attention import AttentionShape

    shape = (2, 192, 64)
    sch = tdsl.auto_schedule(attention_lowp_func(*shape, causal=True), target="cuda", arch="sm_90a")
    kernel = tdsl.build(sch, target="cuda")        # the device: sm_90
    seen = []
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(shape).astype(np.float16) for _ in range(3))

    def on_launch(name, grid, block, params):
        maps = [_array(_value(params, i, ctypes.c_void_p), (16,), np.uint64) for i in range(3)]
        seen.append((name, grid, block, [m.copy() for m in maps]))
        o = _array(_value(params, 3, ctypes.c_void_p), shape, np.float32)
        o[...] = attention_lowp_ref(q, k, v, True)   # the kernel's stand-in

    fake.on_launch = on_launch
    out = kernel(q, k, v)
    assert [s[:3] for s in seen] == [("tdsl_flash_attention_fwd_sm90a_f16_d64_causal", (2, 2, 1), (384, 1, 1))]
    dynamic = fake.launches[-1][4]
    assert dynamic == hopper.dynamic_shared_bytes(AttentionShape(2, 192, 64, "float16", "float32", True)) > 49152
    assert fake.allowed_dynamic["tdsl_flash_attention_fwd_sm90a_f16_d64_causal"] >= dynamic
    encoded = fake.tensor_maps[-3:]
    assert [m["dims"] for m in encoded] == [[64, 192, 2]] * 3 and [m["box"] for m in encoded] == [[64, 128, 1]] * 3
    assert all(m["rank"] == 3 and m["strides"] == [128, 192 * 128] and "128B" in str(m["swizzle"]) for m in encoded)
    n = len(fake.tensor_maps)
    for i, words in enumerate(seen[0][3]):   # the kernel reads the driver's encodings
        assert list(words) == [((n - 2 + i) << 32) + w for w in range(16)]
    np.testing.assert_allclose(out, attention_lowp_ref(q, k, v, True), rtol=1e-6, atol=1e-6)
    # device arrays called again: the maps are encoded once for them, not per call
    dq, dk, dv = (runtime.to_device(x) for x in (q, k, v))
    do = runtime.device_array(shape, "float32")
    before = len(fake.tensor_maps)
    kernel(dq, dk, dv, do)
    kernel(dq, dk, dv, do)
    assert len(fake.tensor_maps) == before + 3 and len(seen) == 3
    assert [m["address"] for m in fake.tensor_maps[-3:]] == [dq.ptr, dk.ptr, dv.ptr]
    with pytest.raises(tdsl.TargetError, match="scheduled for sm_90a"):
        tdsl.build(sch, target="cuda", arch="sm_80")
