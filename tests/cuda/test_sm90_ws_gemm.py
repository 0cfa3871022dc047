"""A warp-specialized GEMM written by hand with the Hopper device functions: a producer
warpgroup's elected thread issues TMA loads into two shared stages guarded by mbarriers ("full":
one arrival + the stage's bytes; "empty": the consumer warpgroup's 128 arrivals), the consumer
warpgroup multiplies each stage with wgmma m64n32k16 (32B swizzle: what TMA writes is what the
descriptor reads). Checked in the emulator against numpy (with a stage count that cannot work
reported as a deadlock) and compiled for sm_90a, whose SASS holds HGMMA (wgmma), UTMALDG (TMA)
and SYNCS (mbarrier), and no local memory."""
import ctypes
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
import sm90_harness as h

import tdsl
from tdsl.backends.cuda import sm90

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler")

WS_GEMM = r'''
// D (M x N, f32) = A (M x K, f16, row-major) * B (N x K, f16, row-major)^T; block: 64 x 32 of D
extern "C" __global__ void __launch_bounds__(256) ws_gemm(float* __restrict__ D, const unsigned char* __restrict__ tmap_a, const unsigned char* __restrict__ tmap_b, int K, int N) {
  // STAGES x (64 rows x 16) of A and STAGES x (32 rows x 16) of B, 32B-swizzled by TMA
  __shared__ __align__(1024) half a_s[STAGES_A];
  __shared__ __align__(1024) half b_s[STAGES_B];
  __shared__ __align__(16) unsigned long long full[STAGES];
  __shared__ __align__(16) unsigned long long empty[STAGES];
  const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 32, ktiles = K / 16;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) { tdsl_ptx_mbarrier_init(&full[s], 1); tdsl_ptx_mbarrier_init(&empty[s], EMPTY_COUNT); }
    tdsl_ptx_fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x < 128) {                                  // producer warpgroup
    tdsl_ptx_setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % STAGES;
        if (kt >= STAGES) tdsl_ptx_mbarrier_wait(&empty[s], (kt / STAGES - 1) & 1);   // the consumers freed it
        tdsl_ptx_mbarrier_arrive_expect_tx(&full[s], (64 + 32) * 16 * 2);
        tdsl_ptx_tma_load_2d(&a_s[s * 1024], tmap_a, kt * 16, m0, &full[s]);
        tdsl_ptx_tma_load_2d(&b_s[s * 512], tmap_b, kt * 16, n0, &full[s]);
      }
    }
  } else {                                                  // consumer warpgroup
    tdsl_ptx_setmaxnreg_inc<232>();
    __align__(16) float d[16];
    for (int i = 0; i < 16; ++i) d[i] = 0.0f;
    for (int kt = 0; kt < ktiles; ++kt) {
      const int s = kt % STAGES;
      tdsl_ptx_mbarrier_wait(&full[s], (kt / STAGES) & 1);
      tdsl_ptx_wgmma_fence();
      tdsl_ptx_wgmma_m64n32k16_f32_f16(&d[0], tdsl_ptx_wgmma_desc(&a_s[s * 1024], 16, 256, 3),
                                       tdsl_ptx_wgmma_desc(&b_s[s * 512], 16, 256, 3), 1);
      tdsl_ptx_wgmma_commit_group();
      tdsl_ptx_wgmma_wait_group<0>();
      tdsl_ptx_mbarrier_arrive(&empty[s]);
    }
    const int t = threadIdx.x - 128;
    for (int i = 0; i < 16; ++i) {                          // CLayout_64x32: thread t, value i -> (row, column)
      const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2), col = 2 * (t % 4) + i % 2 + 8 * (i / 4);
      D[(m0 + row) * N + n0 + col] = d[i];
    }
  }
}
'''


def ws_source(stages=2, empty_count=128):
    k = (WS_GEMM.replace("STAGES_A", str(stages * 1024)).replace("STAGES_B", str(stages * 512))
         .replace("STAGES", str(stages)).replace("EMPTY_COUNT", str(empty_count)))
    return h.source(k, wgmma=((32, "f16"),))


def _run(m, n, k, stages=2, empty_count=128, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-2, 3, (m, k)).astype(np.float16)
    b = rng.integers(-2, 3, (n, k)).astype(np.float16)
    d = np.full(m * n, np.nan, np.float32)
    maps = [sm90.emulator_tensor_map(a, (64, 16), "32B"), sm90.emulator_tensor_map(b, (32, 16), "32B")]
    h.emulate(ws_source(stages, empty_count), "ws_gemm", [d, *maps, ctypes.c_int(k), ctypes.c_int(n)],
              grid=(n // 32, m // 64, 1), block=(256, 1, 1))
    return d.reshape(m, n), a.astype(np.float32) @ b.astype(np.float32).T


@needs_cxx
@pytest.mark.parametrize("stages", [1, 2, 3])
def test_warp_specialized_gemm_in_the_emulator(stages):
    got, want = _run(128, 64, 80, stages=stages)
    np.testing.assert_array_equal(got, want)


@needs_cxx
def test_an_empty_barrier_counting_too_many_consumers_deadlocks():
    # the "empty" barriers expect 256 arrivals but only the 128 consumers arrive: the producer
    # waits forever for stage 0 to be freed, the consumers for stage 0's second fill
    with pytest.raises(tdsl.TargetError, match=r"deadlock: 1 thread\(s\) wait on mbarrier empty\[0\] for the phase of "
                       r"parity 0, .*128 of 256 arrivals pending.*: warp 0 \(threads 0-0\); 128 more wait on full\[0\]: "
                       r"warp 4 \(threads 128-159\), warp 5 \(threads 160-191\), warp 6 \(threads 192-223\), warp 7"):
        _run(64, 32, 64, stages=2, empty_count=256)


def _cuobjdump():
    import nvidia

    for root in nvidia.__path__:
        for sub in ("cu13/bin", "cu12/bin", "cuda_cuobjdump/bin"):
            path = os.path.join(root, sub, "cuobjdump")
            if os.path.exists(path):
                return path
    return shutil.which("cuobjdump")


def test_sm90a_sass_has_hgmma_utmaldg_and_syncs():
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda.nvrtc import compile_cuda

    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    mod = compile_cuda(ws_source(), "sm_90a")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(mod.cubin)
        sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True, check=True).stdout
    for op in ("HGMMA.64x32x16.F32", "UTMALDG.2D", "SYNCS"):
        assert op in sass, op
    assert "LOCAL:0" in usage and "STL" not in sass
