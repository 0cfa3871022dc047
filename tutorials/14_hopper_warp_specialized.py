# %% [markdown]
# # 14 · A warp-specialized Hopper GEMM, by hand
#
# On H100/H200 a fast GEMM splits the block's threads into roles: a *producer* warpgroup whose
# one elected thread asks the TMA unit to copy tiles of A and B into shared memory, and a
# *consumer* warpgroup that multiplies them with `wgmma` tensor-core instructions. They meet at
# mbarriers: a stage's "full" barrier completes when the producer arrived and the TMA copies
# delivered all the bytes it announced (`arrive.expect_tx`); its "empty" barrier completes when
# all 128 consumers are done with it, so the producer may refill it.
#
# tdsl gives these instructions as device functions (`tdsl.backends.cuda.sm90`) that compile
# with NVRTC for `sm_90a` and that tdsl's CUDA emulator models as the PTX ISA defines them, so
# the kernel below is checked on a CPU: its result against numpy, its synchronisation by the
# emulator's mbarrier model (a wrong count is reported as a deadlock), and its SASS for the
# Hopper instructions.

# %%
import ctypes
import importlib.util
import os
import shutil
import subprocess
import tempfile

import numpy as np

import tdsl
from tdsl.backends.cuda import sm90
from tdsl.backends.cuda.emulator.raw import run_source

HAVE_CXX = any(shutil.which(c) for c in ("g++", "clang++", "c++"))
HAVE_NVRTC = importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.bindings") is not None
SKIPPED: list[str] = []

# %% [markdown]
# The kernel: each block computes a 64 x 32 tile of D = A B^T (A: M x K, B: N x K, fp16, both
# K-major) with 256 threads. A stage holds a 64 x 64 tile of A and a 32 x 64 tile of B, written by
# TMA with the 128-byte swizzle (each row of 64 halves is 128 bytes); the wgmma descriptors name
# the same swizzle (code 1, 8-row groups 1024 bytes apart), so what TMA writes is what wgmma
# reads, and the four k16 slices of a stage are descriptors starting 32 bytes further each.
# (No `setmaxnreg` here: with one consumer warpgroup the kernel starts each thread at up to 248
# registers, so there is nothing to move; the generated pipeline with two consumer warpgroups,
# 384 threads at 168 registers each, gives the producer 40 and the consumers 232: docs/hopper.md.)

# %%
KERNEL = r'''
extern "C" __global__ void __launch_bounds__(256) ws_gemm(float* __restrict__ D, const unsigned char* __restrict__ tmap_a, const unsigned char* __restrict__ tmap_b, int K, int N) {
  __shared__ __align__(1024) half a_s[8192];
  __shared__ __align__(1024) half b_s[4096];
  __shared__ __align__(16) unsigned long long full[2];
  __shared__ __align__(16) unsigned long long empty[2];
  const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 32, ktiles = K / 64;
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) { tdsl_ptx_mbarrier_init(&full[s], 1); tdsl_ptx_mbarrier_init(&empty[s], EMPTY); }
    tdsl_ptx_fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    if (threadIdx.x == 0) {
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % 2;
        if (kt >= 2) tdsl_ptx_mbarrier_wait(&empty[s], (kt / 2 - 1) & 1);
        tdsl_ptx_mbarrier_arrive_expect_tx(&full[s], (64 + 32) * 64 * 2);
        tdsl_ptx_tma_load_2d(&a_s[s * 4096], tmap_a, kt * 64, m0, &full[s]);
        tdsl_ptx_tma_load_2d(&b_s[s * 2048], tmap_b, kt * 64, n0, &full[s]);
      }
    }
  } else {
    __align__(16) float d[16];
    for (int i = 0; i < 16; ++i) d[i] = 0.0f;
    for (int kt = 0; kt < ktiles; ++kt) {
      const int s = kt % 2;
      tdsl_ptx_mbarrier_wait(&full[s], (kt / 2) & 1);
      tdsl_ptx_wgmma_fence();
      for (int j = 0; j < 4; ++j)
        tdsl_ptx_wgmma_m64n32k16_f32_f16(&d[0], tdsl_ptx_wgmma_desc(&a_s[s * 4096 + 16 * j], 16, 1024, 1),
                                         tdsl_ptx_wgmma_desc(&b_s[s * 2048 + 16 * j], 16, 1024, 1), 1);
      tdsl_ptx_wgmma_commit_group();
      tdsl_ptx_wgmma_wait_group<0>();
      tdsl_ptx_mbarrier_arrive(&empty[s]);
    }
    const int t = threadIdx.x - 128;
    for (int i = 0; i < 16; ++i) {
      const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2), col = 2 * (t % 4) + i % 2 + 8 * (i / 4);
      D[(m0 + row) * N + n0 + col] = d[i];
    }
  }
}
'''


def ws_gemm_source(empty_count: int = 128) -> str:
    return sm90.device_functions(wgmma=((32, "f16"),)) + KERNEL.replace("EMPTY", str(empty_count))


print(KERNEL)

# %% [markdown]
# In the emulator: the tensor maps are tdsl's own encoding (`emulator_tensor_map`; on a GPU the
# driver's `cuTensorMapEncodeTiled` makes them). Copies land only when no thread can run, so a
# missing wait would read stale shared memory and fail the comparison.

# %%
M, N, K = 128, 64, 256
rng = np.random.default_rng(0)
a = rng.integers(-2, 3, (M, K)).astype(np.float16)
b = rng.integers(-2, 3, (N, K)).astype(np.float16)
maps = [sm90.emulator_tensor_map(a, (64, 64), "128B"), sm90.emulator_tensor_map(b, (32, 64), "128B")]
if HAVE_CXX:
    d = np.zeros(M * N, np.float32)
    run_source(ws_gemm_source(), "ws_gemm", [d, *maps, ctypes.c_int(K), ctypes.c_int(N)],
               grid=(N // 32, M // 64, 1), block=(256, 1, 1))
    np.testing.assert_array_equal(d.reshape(M, N), a.astype(np.float32) @ b.astype(np.float32).T)
    print("warp-specialized GEMM: emulated, equal to numpy")
    # the empty barriers expecting 256 arrivals where only the 128 consumers arrive: a deadlock
    try:
        run_source(ws_gemm_source(256), "ws_gemm", [d, *maps, ctypes.c_int(K), ctypes.c_int(N)],
                   grid=(N // 32, M // 64, 1), block=(256, 1, 1))
        raise AssertionError("the miscounted barrier was not reported")
    except tdsl.TargetError as e:
        assert "deadlock" in str(e) and "empty[0]" in str(e)
        print("miscounted barrier:", str(e)[:200], "...")
else:
    SKIPPED.append("the emulator (no host C++ compiler)")

# %% [markdown]
# For the GPU: NVRTC compiles it for `sm_90a` (plain `sm_90` is refused: wgmma is
# architecture-specific). The SASS shows HGMMA (wgmma), UTMALDG (TMA) and SYNCS (mbarrier).

# %%
if HAVE_NVRTC:
    from tdsl.backends.cuda.nvrtc import compile_cuda

    try:
        compile_cuda(ws_gemm_source(), "sm_90")
        raise AssertionError("sm_90 accepted wgmma")
    except tdsl.TargetError as e:
        print("sm_90:", str(e).split(" (line")[0])
    cubin = compile_cuda(ws_gemm_source(), "sm_90a").cubin
    tool = None
    import nvidia

    for root in nvidia.__path__:
        for sub in ("cu13/bin", "cu12/bin", "cuda_cuobjdump/bin"):
            if os.path.exists(os.path.join(root, sub, "cuobjdump")):
                tool = os.path.join(root, sub, "cuobjdump")
    if tool is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.cubin")
            with open(path, "wb") as f:
                f.write(cubin)
            sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout
        counts = {op: sass.count(op) for op in ("HGMMA", "UTMALDG", "SYNCS")}
        print("sm_90a SASS:", counts)
        assert all(counts.values())
    else:
        SKIPPED.append('the SASS check (cuobjdump comes with the test extra: pip install "tdsl[test]")')
else:
    SKIPPED.append('NVRTC (pip install "tdsl[cuda]")')

if SKIPPED:
    print(f"14_hopper_warp_specialized: the checks that ran passed; skipped here: {'; '.join(SKIPPED)}")
else:
    print("14_hopper_warp_specialized: all checks passed")
