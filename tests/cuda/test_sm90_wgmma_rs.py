"""wgmma with A from registers (the RS form: tdsl_ptx_wgmma_m64nNk16_f32_{f16|bf16}_rs[_bmn]) in the
emulator and in NVRTC's SASS.

The A fragment is placed here from CuTe's register-source layout for 16-bit types
(cute/atom/mma_traits_sm90_gmma.hpp, the PTX ISA's "register fragment layout for matrix A" of
m64nNk16), evaluated by CuTe's rule -- a thread index and a value index split colexicographically
over the modes' shapes, offsets add by the strides -- into the column-major (M = 64, K = 16) tile:

    ALayout_64x16 : ((4, 8, 4), (2, 2, 2)) : ((128, 1, 16), (64, 8, 512))

value v of thread t in half v % 2 of register v // 2 (the lower half first). Not the emulator's formula.
"""
import re
import shutil

import ml_dtypes
import numpy as np
import pytest
import sm90_harness as h
from test_sm90_wgmma_mn import clayout, crd2idx, place_mn

from tdsl.backends.cuda import sm90

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                                reason="no host C++ compiler")

A_SHAPE, A_STRIDE = ((4, 8, 4), (2, 2, 2)), ((128, 1, 16), (64, 8, 512))
DTYPES = {"f16": (np.float16, "half"), "bf16": (ml_dtypes.bfloat16, "nv_bfloat16")}


def a_fragment(t: int, v: int) -> tuple[int, int]:
    """(row, column) of A that value v of thread t holds (CuTe's ALayout_64x16)."""
    idx = crd2idx(t, A_SHAPE[0], A_STRIDE[0]) + crd2idx(v, A_SHAPE[1], A_STRIDE[1])
    return idx % 64, idx // 64


def a_registers(a) -> np.ndarray:
    """A (64 x 16 halves) as the warpgroup's 128 x 4 32-bit registers."""
    halves = np.zeros((128, 8), a.dtype)
    for t in range(128):
        for v in range(8):
            halves[t, v] = a[a_fragment(t, v)]
    return halves.view(np.uint32).reshape(128, 4)


def place_b_k(b_nk):
    """B (N x 16) K-major, not swizzled: 8x8 core matrices, LBO 128 (along K), SBO 256 (along N)."""
    n = b_nk.shape[0]
    flat = np.zeros(n * 32, np.uint8)
    for r in range(n):
        for k in range(16):
            off = (r // 8) * 256 + (k // 8) * 128 + (r % 8) * 16 + 2 * (k % 8)
            flat[off:off + 2] = np.frombuffer(b_nk[r, k].tobytes(), np.uint8)
    return flat


KERNEL = r'''
extern "C" __global__ void rs(const unsigned* __restrict__ A, const ELEM* __restrict__ B, float* __restrict__ D) {
  __shared__ __align__(1024) ELEM b_s[BTOTAL];
  for (int i = threadIdx.x; i < BTOTAL; i += blockDim.x) b_s[i] = B[i];
  tdsl_ptx_fence_proxy_async();   // the async proxy (wgmma) reads what the threads stored
  __syncthreads();
  const int t = threadIdx.x % 128;
  unsigned a[STEPS][4];
  for (int s = 0; s < STEPS; ++s)
    for (int r = 0; r < 4; ++r) a[s][r] = A[(s * 128 + t) * 4 + r];
  float d[NHALF];
  tdsl_ptx_wgmma_fence();
  for (int s = 0; s < STEPS; ++s) FN(&d[0], &a[s][0], tdsl_ptx_wgmma_desc(&b_s[s * BELEMS], LBO, SBO, 0), s > 0);
  tdsl_ptx_wgmma_commit_group();
  tdsl_ptx_wgmma_wait_group<0>();
  for (int i = 0; i < NHALF; ++i) D[threadIdx.x * NHALF + i] = d[i];
}
'''


def run_rs(n: int, dtype: str, b_major: str, steps: int = 1, threads: int = 128):
    np_dtype, ctype = DTYPES[dtype]
    rng = np.random.default_rng(n + steps)
    a = rng.integers(-4, 5, (64, 16 * steps)).astype(np_dtype)
    b = rng.integers(-4, 5, (16 * steps, n)).astype(np_dtype)      # [K, N]
    regs = np.concatenate([a_registers(np.ascontiguousarray(a[:, 16 * s:16 * s + 16])) for s in range(steps)])
    if b_major == "k":
        images = [place_b_k(np.ascontiguousarray(b[16 * s:16 * s + 16].T)) for s in range(steps)]
        lbo, sbo = 128, 256
    else:   # not swizzled N-major: core matrices of 8 N x 8 K; K groups LBO apart, N groups SBO apart
        lbo, sbo = 128, 256
        images = [place_mn(np.ascontiguousarray(b[16 * s:16 * s + 16]), 0, lbo, sbo, n * 32) for s in range(steps)]
    belems = n * 16
    src = (KERNEL.replace("BTOTAL", str(steps * belems)).replace("BELEMS", str(belems)).replace("NHALF", str(n // 2)).replace("STEPS", str(steps))
           .replace("LBO", str(lbo)).replace("SBO", str(sbo)).replace("ELEM", ctype)
           .replace("FN", sm90.wgmma_name(n, dtype, b_major, "rs")))
    d = np.zeros(threads * n // 2, np.float32)
    h.emulate(h.source(src), "rs", [regs.reshape(-1), np.concatenate(images).view(np_dtype), d],
              block=(threads, 1, 1))
    want = a.astype(np.float32) @ b.astype(np.float32)
    for wg in range(threads // 128):
        got = np.zeros((64, n), np.float32)
        for t in range(128):
            for i in range(n // 2):
                got[clayout(t, i)] = d[(wg * 128 + t) * n // 2 + i]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [8, 64, 128, 256])
@pytest.mark.parametrize("b_major", ["k", "mn"])
def test_wgmma_rs_f16(n, b_major):
    run_rs(n, "f16", b_major)


@pytest.mark.parametrize("b_major", ["k", "mn"])
def test_wgmma_rs_bf16(b_major):
    run_rs(64, "bf16", b_major)


def test_wgmma_rs_accumulates_over_k_slices_in_two_warpgroups():
    run_rs(32, "f16", "mn", steps=3, threads=256)


def test_rs_forms_are_named_apart():
    assert sm90.wgmma_name(64, "f16", "mn", "rs") == "tdsl_ptx_wgmma_m64n64k16_f32_f16_rs_bmn"
    text = sm90.wgmma_function(64, "bf16", "k", "rs")
    assert "{%32, %33, %34, %35}, %36, p, 1, 1, 0;" in text, text
    with pytest.raises(Exception, match="'ss' .* or 'rs'"):
        sm90.wgmma_function(64, "f16", "k", "sr")
    # the older tuple forms still work beside the new one
    src = sm90.device_functions(wgmma=((64, "f16"), (64, "f16", "mn"), (64, "f16", "mn", "rs")))
    assert all(f"{sm90.wgmma_name(64, 'f16', *form)}(float* d" in src for form in (("k",), ("mn",), ("mn", "rs")))


def test_sm90a_sass_has_hgmma_with_register_a():
    """NVRTC for sm_90a: the RS form is HGMMA whose A operand is a register (R..), the SS form's
    a descriptor (gdesc)."""
    pytest.importorskip("cuda.bindings")
    import os
    import subprocess
    import tempfile

    from test_sm90_ws_gemm import _cuobjdump

    from tdsl.backends.cuda.nvrtc import compile_cuda

    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    src = (KERNEL.replace("BTOTAL", "2048").replace("BELEMS", "1024").replace("NHALF", "32").replace("STEPS", "2").replace("LBO", "128")
           .replace("SBO", "256").replace("ELEM", "half").replace("FN", sm90.wgmma_name(64, "f16", "mn", "rs")))
    mod = compile_cuda(h.source(src, wgmma=((64, "f16", "mn", "rs"),)), "sm_90a")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(mod.cubin)
        sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout
    hgmma = [line for line in sass.splitlines() if "HGMMA.64x64x16.F32" in line]
    assert len(hgmma) == 2, sass
    assert all(re.search(r"HGMMA\.64x64x16\.F32\S* R\d+, R\d+, gdesc\[", line) for line in hgmma), hgmma
    assert all("tnspB" in line for line in hgmma), hgmma
