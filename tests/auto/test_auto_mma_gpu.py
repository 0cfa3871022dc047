"""auto_schedule of fp16 / bf16 GEMMs for CUDA: shared staging, ldmatrix from XOR-swizzled tiles, mma.sync
(GPUMmaTiling). Checked in the emulator (numbers, bank conflicts) and, where the NVRTC and
cuobjdump wheels are installed, in the sm_80 SASS."""
import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda.stats import cuobjdump_path, opcodes


def gemm(n, dtype):
    @T.prim_func
    def f(A: T.Buffer((n, n), dtype), B: T.Buffer((n, n), dtype), C: T.Buffer((n, n), "float32")):
        for i, j, k in T.grid(n, n, n):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")
    return f


def _np(dtype):
    import ml_dtypes

    return np.float16 if dtype == "float16" else ml_dtypes.bfloat16


DTYPES = ["float16", "bfloat16"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_auto_schedule_puts_gemms_on_mma_sync(dtype):
    trace = str(tdsl.auto_schedule(gemm(256, dtype), target="cuda").trace)
    short = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    for name in (f"mma_ldmatrix_{short}_a", f"mma_ldmatrix_{short}_b", f"mma_{short}{short}f32", "mma_fill_16x16_f32",
                 "mma_store_16x16_f32_global_", "tdsl.swizzle", "software_pipeline_stage",
                 "software_pipeline_async_stages"):
        assert name in trace


@pytest.mark.parametrize("dtype", DTYPES)
def test_emulated_256_cubed_is_right_without_bank_conflicts(dtype):
    pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((256, 256)).astype(_np(dtype)) for _ in range(2))
    kernel = tdsl.build(tdsl.auto_schedule(gemm(256, dtype), target="cuda"), target="cuda", emulate=True)
    np.testing.assert_allclose(kernel(a, b), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4, atol=1e-4)
    shared = {c.buffer: c for c in kernel.stats.shared}
    assert set(shared) == {"A_shared", "B_shared"}
    for c in shared.values():
        assert c.instructions > 0 and c.wavefronts == c.phases and c.worst == 1
    assert not [n for n in kernel.notes if "bank conflicts" in n]
    # the tiles come in by cp.async (each copy counted as the bytes it reads), the results go out
    # by stores: every global request touches the ideal number of 32-byte sectors
    loads = {g.buffer: g for g in kernel.stats.global_}
    assert set(loads) == {"A", "B", "C"}
    for g in loads.values():
        assert g.coalesced and g.sectors == g.ideal, g


@pytest.mark.parametrize("dtype", DTYPES)
def test_sass_for_sm_80_has_hmma_and_ldsm_and_no_spills(dtype):
    pytest.importorskip("cuda.bindings")
    if cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    kernel = tdsl.build(tdsl.auto_schedule(gemm(256, dtype), target="cuda"), target="cuda", arch="sm_80")
    ops = opcodes(kernel.cubin)
    assert ops["HMMA.16816.F32" + (".BF16" if dtype == "bfloat16" else "")] > 0
    assert ops["LDSM.16.M88.4"] > 0 and ops["LDSM.16.MT88.4"] > 0
    assert not [o for o in ops if o.startswith(("LDL", "STL"))]
    (usage,) = kernel.stats.resources.values()
    assert usage["registers"] <= 255 and usage["local"] == 0 and usage["stack"] == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_pipelined_copies_are_cp_async(dtype):
    pytest.importorskip("cuda.bindings")
    if cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    kernel = tdsl.build(tdsl.auto_schedule(gemm(256, dtype), target="cuda"), target="cuda", arch="sm_80")
    ops = opcodes(kernel.cubin)
    assert any(o.startswith("LDGSTS") for o in ops) and ops["LDSM.16.M88.4"] > 0   # copies are cp.async
    # of 16 bytes (8 halves) each, bypassing L1 (.cg): no narrower copies
    assert ops["LDGSTS.E.BYPASS.128"] > 0 and not [o for o in ops if o.startswith("LDGSTS") and ".128" not in o], ops
    assert not [o for o in ops if o.startswith(("LDL", "STL"))]


def test_shapes_off_the_tile_fall_back():
    # 48 is not a multiple of a block tile: the WMMA rule takes the fp16 GEMM instead
    trace = str(tdsl.auto_schedule(gemm(48, "float16"), target="cuda").trace)
    assert "mma_ldmatrix" not in trace and "cuda.wmma" in trace
