"""Dynamic shared memory: kernels whose shared buffers exceed the 48 KiB of static shared memory
place them at aligned offsets in one `extern __shared__` array sized by the launch. Small kernels
keep their static arrays; the emulator runs the dynamic form unchanged (views checked against the
launch's bytes); NVRTC builds it for sm_80 and sm_90a; the limits per architecture are enforced at
build; the sm_90a rule's default is a 128 x 128 tile with the 128B swizzle, four stages deep."""
import ctypes
import shutil
import subprocess

import cuda_kernels as ck
import numpy as np
import pytest

import tdsl
from tdsl.auto.hardware import hardware
from tdsl.backends.cuda import cuda_source
from tdsl.backends.cuda.shared_memory import optin_limit

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler (the emulator needs one)")


def big_matmul():
    """128 x 128 block tiles, K steps of 64: A_sh and B_sh are 32 KiB each (64 KiB together)."""
    return ck.matmul(128, 128, 128, 128, 128, 64, 8, 8)


def operands(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 4, (128, 128)).astype("float32")   # small integers: every order of sums is exact
    b = rng.integers(-3, 4, (128, 128)).astype("float32")
    return a, b


def test_kernels_within_48_kib_keep_static_shared_arrays():
    func, _ = ck.matmul()
    src = cuda_source(func)
    assert "__shared__ __align__(16) float A_sh[256];" in src and "tdsl_smem" not in src


def test_over_48_kib_one_dynamic_array_with_a_view_per_buffer():
    func, _ = big_matmul()
    src = cuda_source(func)
    assert "extern __shared__ __align__(1024) unsigned char tdsl_smem[];" in src
    assert "float (&A_sh)[8192] = *reinterpret_cast<float (*)[8192]>(tdsl_smem + 0);" in src
    assert "float (&B_sh)[8192] = *reinterpret_cast<float (*)[8192]>(tdsl_smem + 32768);" in src
    assert "__shared__ __align__(16) float" not in src


def test_limits_per_architecture():
    assert optin_limit("sm_80") == 163 * 1024 == 166912
    assert optin_limit("sm_90a") == optin_limit("sm_90") == 227 * 1024 == 232448
    assert optin_limit("sm_86") == 99 * 1024 and optin_limit("sm_75") == 64 * 1024
    assert optin_limit("sm_99") == 48 * 1024           # an architecture tdsl does not know
    assert hardware("cuda -arch=sm_90a").max_shared == 232448
    assert hardware("cuda -arch=sm_80").max_shared == 166912
    assert hardware("cuda").max_shared == 48 * 1024      # no architecture named


def _gemm_96k():
    """A 96 KiB kernel: 128 x 96 float tiles of A and B."""
    return ck.matmul(128, 128, 96, 128, 128, 96, 8, 8)[0]


def test_a_kernel_over_the_architectures_limit_is_refused_at_build():
    func = _gemm_96k()
    with pytest.raises(tdsl.TargetError, match=r"kernel 'mm_kernel' uses 98304 bytes of shared memory \(A_sh, "
                                               r"B_sh\); sm_75 allows at most 65536 per block"):
        tdsl.build(func, target="cuda", arch="sm_75", emulate=True)
    with pytest.raises(tdsl.TargetError, match="sm_86 allows at most 101376"):
        tdsl.build(ck.matmul(128, 128, 112, 128, 128, 112, 8, 8)[0], target="cuda", arch="sm_86", emulate=True)


@needs_cxx
def test_the_emulator_runs_the_dynamic_form_against_numpy():
    func, ref = big_matmul()
    kernel = tdsl.build(func, target="cuda", emulate=True)   # three thread orders
    assert kernel.plan.kernels[0].dynamic_shared_bytes == 65536
    a, b = operands()
    c = np.zeros((128, 128), "float32")
    kernel(a, b, c)
    np.testing.assert_array_equal(c, ref(a, b))
    assert {g.buffer for g in kernel.stats.global_} >= {"A", "B", "C"}   # the counters as before


VIEW_SRC = r"""
extern "C" __global__ void rev(float* __restrict__ A, int k) {
  extern __shared__ __align__(1024) unsigned char tdsl_smem[];
  float (&S)[128] = *reinterpret_cast<float (*)[128]>(tdsl_smem + 1024);
  S[threadIdx.x] = A[threadIdx.x];
  __syncthreads();
  A[threadIdx.x] = S[k - threadIdx.x];
}
"""


@needs_cxx
def test_views_are_checked_against_the_launch_and_their_own_bounds():
    from tdsl.backends.cuda.emulator.raw import run_source

    a = np.arange(128, dtype="float32")
    run_source(VIEW_SRC, "rev", [a, ctypes.c_int(127)], dynamic_shared=1024 + 512)
    np.testing.assert_array_equal(a, np.arange(128)[::-1])
    with pytest.raises(tdsl.TargetError, match=r"S lies at bytes \[1024, 1536\) of the dynamic shared memory, "
                                               r"but the launch gives 1535 bytes"):
        run_source(VIEW_SRC, "rev", [a, ctypes.c_int(127)], dynamic_shared=1535)
    with pytest.raises(tdsl.TargetError, match=r"out-of-bounds access: S\[128\], but S has 128 elements"):
        run_source(VIEW_SRC, "rev", [a, ctypes.c_int(128)], dynamic_shared=4096)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_nvrtc_builds_the_dynamic_form(arch):
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda import stats

    func, _ = big_matmul()
    kernel = tdsl.build(func, target="cuda", arch=arch, ptx=True)
    assert ".extern .shared .align 1024 .b8 tdsl_smem[];" in kernel.ptx
    if stats.cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra)")
    usage = kernel.stats.resources["mm_kernel"]
    assert usage["dynamic_shared"] == 65536 and usage["local"] == 0
    assert usage["shared"] <= 1024      # static: none (sm_90 CUBINs count the KiB the system reserves)
    assert "65536" in str(kernel.stats)


def test_export_allows_and_passes_the_dynamic_bytes(tmp_path):
    pytest.importorskip("cuda.bindings")
    func, _ = big_matmul()
    kernel = tdsl.build(func, target="cuda", arch="sm_80")
    with open(kernel.export(str(tmp_path), archs=["sm_80", "sm_90"])) as fh:
        text = fh.read()
    assert "cuFuncSetAttribute(mm_functions[0], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536)" in text
    assert "(unsigned)tdsl_block[2], 65536, stream, tdsl_params, NULL)" in text
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is not None:   # the launcher is valid C against the driver API's cuda.h
        from test_export_cuda import _cuda_include

        (tmp_path / "use.c").write_text('#include "mm.h"\nint main(void) { return 0; }\n')
        subprocess.run([cc, "-std=c99", "-Wall", "-Werror", "-Wno-unused-function", "-fsyntax-only",
                        f"-I{_cuda_include()}", f"-I{tmp_path}", str(tmp_path / "use.c")], check=True,
                       capture_output=True, text=True)
    with pytest.raises(tdsl.TargetError, match="sm_75 allows at most 65536"):
        tdsl.build(_gemm_96k(), target="cuda", arch="sm_80").export(str(tmp_path / "x"), archs=["sm_75"])


@needs_cxx
def test_sm90a_rule_default_is_128x128_with_the_128b_swizzle_four_stages_in_dynamic_shared_memory():
    from test_sm90_auto import gemm
    from test_sm90_auto import operands as gemm_operands

    M, N, K = 128, 128, 256
    sch = tdsl.auto_schedule(gemm(M, N, K), target="cuda", arch="sm_90a")
    script = sch.func.script()
    assert 'T.thread_binding(3, thread="threadIdx.y")' in script        # producer + two consumer warpgroups
    kernel = tdsl.build(sch, target="cuda", emulate=True, thread_orders=1)
    src = kernel.source
    assert "half (&A_shared)[32768] = *reinterpret_cast<half (*)[32768]>(tdsl_smem + 0);" in src   # 4 x 128 x 64
    assert "half (&B_shared)[32768] = *reinterpret_cast<half (*)[32768]>(tdsl_smem + 65536);" in src
    assert "tdsl_ptx_wgmma_desc(&A_shared[" in src and ", 16, 1024, 1)" in src   # the 128B swizzle
    a, b, want = gemm_operands(M, N, K, "float16")
    np.testing.assert_array_equal(kernel(a, b), want)
    # without dynamic shared memory (48 KiB) the rule keeps the static choices
    from tdsl.auto.hardware import Hardware
    from tdsl.auto.rules.gpu_wgmma import configs

    assert configs(M, N, K)[0] == (128, 64, 4, 128)
    assert configs(M, N, K, Hardware("cuda").max_shared)[0] == (64, 64, 2, 64)


def _k64_in_dynamic_shared(a_at: int) -> str:
    """test_sm90_wgmma's K64 (k16 slices of 128B-swizzled tiles) with its tiles in `tdsl_smem`."""
    from test_sm90_wgmma import K64

    views = ("  extern __shared__ __align__(1024) unsigned char tdsl_smem[];\n"
             f"  half (&a_s)[4096] = *reinterpret_cast<half (*)[4096]>(tdsl_smem + {a_at});\n"
             "  half (&b_s)[2048] = *reinterpret_cast<half (*)[2048]>(tdsl_smem + 16384);\n")
    src = K64.replace("  __shared__ __align__(1024) half a_s[4096];\n  __shared__ __align__(1024) half b_s[2048];\n",
                      views)
    assert "tdsl_smem + 16384" in src
    return src


@needs_cxx
def test_swizzled_wgmma_tiles_at_offsets_in_the_dynamic_array():
    import sm90_harness as h
    from test_sm90_wgmma import _place_sw128, clayout

    from tdsl.backends.cuda.emulator.raw import run_source

    rng = np.random.default_rng(7)
    a = rng.integers(-3, 4, (64, 64)).astype(np.float16)
    b = rng.integers(-3, 4, (32, 64)).astype(np.float16)
    d = np.zeros(128 * 16, np.float32)
    run_source(h.source(_k64_in_dynamic_shared(8192)), "k64", [_place_sw128(a), _place_sw128(b), d],
               block=(128, 1, 1), dynamic_shared=16384 + 4096)
    got = np.zeros((64, 32), np.float32)
    for t in range(128):
        for i in range(16):
            got[clayout(t, i)] = d[t * 16 + i]
    np.testing.assert_array_equal(got, a.astype(np.float32) @ b.astype(np.float32).T)
    # a tile off the 1024-byte swizzle atom would read other elements on a GPU: refused
    with pytest.raises(tdsl.TargetError, match="wgmma: its operand a_s starts at byte 512 of the shared memory; "
                                               "a 128B swizzle repeats every 1024 bytes"):
        run_source(h.source(_k64_in_dynamic_shared(512)), "k64", [_place_sw128(a), _place_sw128(b), d],
                   block=(128, 1, 1), dynamic_shared=16384 + 4096)


@needs_cxx
def test_sm80_mma_rule_offers_deeper_pipelines_when_the_arch_gives_more_shared_memory():
    from test_sm90_auto import gemm
    from test_sm90_auto import operands as gemm_operands

    from tdsl.auto.rules.gpu_mma import stage_choices

    assert stage_choices(256, "float16", 48 * 1024) == [2]          # "cuda" alone: as before
    assert stage_choices(256, "float16", 166912) == [2, 3, 4]
    assert stage_choices(64, "float16", 166912) == [2]              # two K steps of 32
    M, N, K = 128, 128, 256
    plain = tdsl.auto_schedule(gemm(M, N, K), target="cuda")
    assert "'software_pipeline_stage': [0, 1, 0, 1, 1]" in plain.func.script()
    sch = tdsl.auto_schedule(gemm(M, N, K), target="cuda -arch=sm_80")
    samples = [k for k, ins in enumerate(sch.trace) if ins.kind == "sample_categorical"]
    first = dict(list(sch.trace)[samples[0]].attrs)
    assert first["candidates"] == [1, 2, 3]                                            # the compute's stage
    assert "'software_pipeline_stage': [0, 2, 0, 2, 2]" in sch.func.script()         # default: 3 stages
    a, b, want = gemm_operands(M, N, K, "float16")
    for depth, dynamic in ((3, 0), (4, 65536)):
        picked = sch.trace.with_decisions({samples[0]: depth - 2}).apply(gemm(M, N, K))
        kernel = tdsl.build(picked, target="cuda", emulate=True, thread_orders=1)
        assert [k.dynamic_shared_bytes for k in kernel.plan.kernels] == [dynamic]
        np.testing.assert_array_equal(kernel(a, b), want)


def test_sm80_four_stage_mma_gemm_builds_with_nvrtc():
    pytest.importorskip("cuda.bindings")
    from test_sm90_auto import gemm

    from tdsl.backends.cuda import stats

    sch = tdsl.auto_schedule(gemm(256, 256, 256), target="cuda -arch=sm_80")
    step = next(k for k, ins in enumerate(sch.trace) if ins.kind == "sample_categorical")
    picked = sch.trace.with_decisions({step: 2}).apply(gemm(256, 256, 256))     # four stages: 64 KiB
    kernel = tdsl.build(picked, target="cuda", arch="sm_80")
    assert "extern __shared__ __align__(1024) unsigned char tdsl_smem[];" in kernel.source
    if stats.cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra)")
    ops = stats.opcodes(kernel.cubin)
    assert any(o.startswith("LDGSTS") for o in ops) and any(o.startswith("HMMA") for o in ops), sorted(ops)
    for name, usage in kernel.stats.resources.items():
        assert usage["dynamic_shared"] == 65536 and usage["local"] == 0, (name, usage)


@needs_cxx
@pytest.mark.parametrize("tile_at, ok", [(2048, True), (512, False)])
def test_tma_loads_into_views_place_the_swizzle_from_the_dynamic_arrays_start(tile_at, ok):
    import sm90_harness as h
    from test_sm90_tma import LOAD, _expected

    from tdsl.backends.cuda import sm90
    from tdsl.backends.cuda.emulator.raw import run_source

    views = ("  extern __shared__ __align__(1024) unsigned char tdsl_smem[];\n"
             f"  half (&tile)[1024] = *reinterpret_cast<half (*)[1024]>(tdsl_smem + {tile_at});\n"
             "  unsigned long long (&bars)[1] = *reinterpret_cast<unsigned long long (*)[1]>(tdsl_smem + 0);\n")
    src = LOAD.replace("  __shared__ __align__(16) half tile[BOX];\n  __shared__ __align__(16) unsigned long long "
                       "bars[1];\n", views).replace("BOX", "1024")
    assert "tdsl_smem + 0" in src
    a = (np.arange(24 * 48).reshape(24, 48) % 2003).astype(np.float16)
    out = np.zeros(1024, np.float16)
    args = [out, sm90.emulator_tensor_map(a, (16, 64), "128B"), ctypes.c_int(8), ctypes.c_int(4), ctypes.c_int(2048)]
    if ok:
        run_source(h.source(src), "tma_tile", args, block=(64, 1, 1), dynamic_shared=4096)
        np.testing.assert_array_equal(out, _expected(a, (16, 64), "128B", 8, 4))
    else:
        with pytest.raises(tdsl.TargetError, match="tile byte 512: a 128B swizzle repeats every 1024 bytes"):
            run_source(h.source(src), "tma_tile", args, block=(64, 1, 1), dynamic_shared=4096)
