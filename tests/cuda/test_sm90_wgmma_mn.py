"""wgmma with an N-major ("transposed", imm-trans-b = 1) B operand in the emulator.

The shared-memory images are placed here from CuTe's description of the canonical MN-major GMMA
layouts (cute/atom/mma_traits_sm90_gmma.hpp, make_gmma_desc<Major::MN>), in elements of 16 bits
(T = 8 per 16 bytes), evaluated by CuTe's own rule (a coordinate splits colexicographically over
a mode's shape, offsets add by its strides) -- not from the emulator's formula:

    INTERLEAVE : ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO))
    B32        : Swizzle<1,4,3> o ((T,2,m),(8,k)) : ((1,T,LBO),(2T,SBO))
    B64        : Swizzle<2,4,3> o ((T,4,m),(8,k)) : ((1,T,LBO),(4T,SBO))
    B128       : Swizzle<3,4,3> o ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO))

(the swizzle on byte addresses: the 16-byte chunk bits 4.. XOR the 128-byte row bits 7..). The
PTX ISA says the same in words: for MN-major the leading byte offset is, swizzled, the stride
from one swizzle atom to the next along MN, not swizzled the stride between groups of 8 along K.
"""
import math
import shutil

import ml_dtypes
import numpy as np
import pytest
import sm90_harness as h

from tdsl.backends.cuda import sm90

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                                reason="no host C++ compiler")

T = 8   # 16-bit elements per 16 bytes


def crd2idx(i: int, shape, stride) -> int:
    """CuTe's index of a one-dimensional coordinate `i` into a (nested) mode."""
    if isinstance(shape, tuple):
        out = 0
        for s, d in zip(shape, stride):
            size = math.prod(s) if isinstance(s, tuple) else s
            out += crd2idx(i % size, s, d)
            i //= size
        return out
    return i * stride


def mn_major_layout(swizzle: int, m: int, k: int, lbo: int, sbo: int):
    """(shape, stride) of CuTe's MN-major canonical layout, strides in elements; `swizzle` in bytes
    (0 = INTERLEAVE), `m` atoms along MN, `k` groups of 8 along K."""
    if swizzle == 0:
        return ((T, 1, m), (8, k)), ((1, T, sbo // 2), (T, lbo // 2))
    w = swizzle // 16
    return ((T, w, m), (8, k)), ((1, T, lbo // 2), (w * T, sbo // 2))


def cute_swizzle(x: int, swizzle: int) -> int:
    bits = {0: 0, 32: 1, 64: 2, 128: 3}[swizzle]
    return x ^ ((x & (((1 << bits) - 1) << 7)) >> 3)


def place_mn(b_kn, swizzle, lbo, sbo, nbytes):
    """B given as [K, N] placed N-major into a shared image of `nbytes` bytes."""
    k, n = b_kn.shape
    atom = 8 if swizzle == 0 else swizzle // 2
    shape, stride = mn_major_layout(swizzle, n // atom, k // 8, lbo, sbo)
    flat = np.zeros(nbytes, np.uint8)
    for kk in range(k):
        for nn in range(n):
            off = cute_swizzle(2 * (crd2idx(nn, shape[0], stride[0]) + crd2idx(kk, shape[1], stride[1])), swizzle)
            assert off + 2 <= nbytes
            flat[off:off + 2] = np.frombuffer(b_kn[kk, nn].tobytes(), np.uint8)
    return flat


def place_a(a):
    """A (64 x 16) K-major, not swizzled: 8x8 core matrices, LBO 128 (along K), SBO 256 (rows)."""
    flat = np.zeros(64 * 32, np.uint8)
    for r in range(64):
        for k in range(16):
            off = (r // 8) * 256 + (k // 8) * 128 + (r % 8) * 16 + 2 * (k % 8)
            flat[off:off + 2] = np.frombuffer(a[r, k].tobytes(), np.uint8)
    return flat


def clayout(t, i):
    return 16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2), 2 * (t % 4) + i % 2 + 8 * (i // 4)


KERNEL = r'''
extern "C" __global__ void gemm(const ELEM* __restrict__ A, const ELEM* __restrict__ B, float* __restrict__ D) {
  __shared__ __align__(1024) ELEM a_s[1024];
  __shared__ __align__(1024) ELEM b_s[BELEMS];
  for (int i = threadIdx.x; i < 1024; i += 128) a_s[i] = A[i];
  for (int i = threadIdx.x; i < BELEMS; i += 128) b_s[i] = B[i];
  tdsl_ptx_fence_proxy_async();   // the async proxy (wgmma) reads what the threads stored
  __syncthreads();
  __align__(16) float d[NHALF];
  tdsl_ptx_wgmma_fence();
  FN(&d[0], tdsl_ptx_wgmma_desc(&a_s[0], 128, 256, 0), tdsl_ptx_wgmma_desc(&b_s[0], LBO, SBO, SWZ), 0);
  tdsl_ptx_wgmma_commit_group();
  tdsl_ptx_wgmma_wait_group<0>();
  for (int i = 0; i < NHALF; ++i) D[threadIdx.x * NHALF + i] = d[i];
}
'''
DTYPES = {"f16": (np.float16, "half"), "bf16": (ml_dtypes.bfloat16, "nv_bfloat16")}
CODES = {0: 0, 128: 1, 64: 2, 32: 3}


def run_mn(n, swizzle, dtype, atoms_first):
    """D = A B with B [16, n] N-major; `atoms_first`: the atoms along N lie next to each other
    (LBO small, SBO large) or the K groups do (SBO small, LBO large)."""
    np_dtype, ctype = DTYPES[dtype]
    rng = np.random.default_rng(n + swizzle)
    a = rng.integers(-3, 4, (64, 16)).astype(np_dtype)
    b = rng.integers(-3, 4, (16, n)).astype(np_dtype)
    atom_bytes = 8 * (16 if swizzle == 0 else swizzle)          # 8 rows of K x the atom's N bytes
    atoms = n // (8 if swizzle == 0 else swizzle // 2)
    mn_step, k_step = (atom_bytes, atom_bytes * atoms) if atoms_first else (atom_bytes * 2, atom_bytes)
    lbo, sbo = (k_step, mn_step) if swizzle == 0 else (mn_step, k_step)
    nbytes = atom_bytes * atoms * 2
    src = (KERNEL.replace("BELEMS", str(nbytes // 2)).replace("NHALF", str(n // 2)).replace("LBO", str(lbo))
           .replace("SBO", str(sbo)).replace("SWZ", str(CODES[swizzle])).replace("ELEM", ctype)
           .replace("FN", sm90.wgmma_name(n, dtype, "mn")))
    d = np.zeros(128 * n // 2, np.float32)
    h.emulate(h.source(src), "gemm", [place_a(a).view(np_dtype), place_mn(b, swizzle, lbo, sbo, nbytes).view(np_dtype), d])
    got = np.zeros((64, n), np.float32)
    for t in range(128):
        for i in range(n // 2):
            got[clayout(t, i)] = d[t * n // 2 + i]
    np.testing.assert_array_equal(got, a.astype(np.float32) @ b.astype(np.float32))


@pytest.mark.parametrize("swizzle, n", [(0, 16), (0, 64), (32, 32), (64, 64), (128, 64), (128, 128)])
@pytest.mark.parametrize("atoms_first", [True, False])
def test_wgmma_b_n_major(swizzle, n, atoms_first):
    run_mn(n, swizzle, "f16", atoms_first)


def test_wgmma_b_n_major_bf16():
    run_mn(128, 128, "bf16", True)


# The way a kernel gets an N-major B: TMA boxes of [K rows, 64 columns] of a row-major B[k, j]
# with the 128B swizzle, one box per 64 columns, each box LBO = K * 128 bytes after the last;
# 8-row groups of K are 1024 bytes apart (SBO). Two k16 steps advance the start 2048 bytes.
TMA = r'''
extern "C" __global__ void tma_mn(const half* __restrict__ A, const unsigned char* __restrict__ tmap_b, float* __restrict__ D) {
  __shared__ __align__(1024) half a_s[2048];
  __shared__ __align__(1024) half b_s[4096];
  __shared__ __align__(16) unsigned long long bar[1];
  for (int i = threadIdx.x; i < 2048; i += 128) a_s[i] = A[i];
  if (threadIdx.x == 0) tdsl_ptx_mbarrier_init(&bar[0], 1);
  tdsl_ptx_fence_proxy_async();   // the async proxy (wgmma) reads what the threads stored
  __syncthreads();
  if (threadIdx.x == 0) {
    tdsl_ptx_mbarrier_arrive_expect_tx(&bar[0], 32 * 128 * 2);
    tdsl_ptx_tma_load_2d(&b_s[0], tmap_b, 0, 0, &bar[0]);
    tdsl_ptx_tma_load_2d(&b_s[32 * 64], tmap_b, 64, 0, &bar[0]);
  }
  tdsl_ptx_mbarrier_wait(&bar[0], 0);
  __align__(16) float d[64];
  tdsl_ptx_wgmma_fence();
  for (int j = 0; j < 2; ++j)
    tdsl_ptx_wgmma_m64n128k16_f32_f16_bmn(&d[0], tdsl_ptx_wgmma_desc(&a_s[1024 * j], 128, 256, 0),
                                          tdsl_ptx_wgmma_desc(&b_s[16 * 64 * j], 32 * 128, 1024, 1), j > 0);
  tdsl_ptx_wgmma_commit_group();
  tdsl_ptx_wgmma_wait_group<0>();
  for (int i = 0; i < 64; ++i) D[threadIdx.x * 64 + i] = d[i];
}
'''


def test_tma_loaded_row_major_b_is_an_n_major_operand():
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (64, 32)).astype(np.float16)
    b = rng.integers(-3, 4, (32, 128)).astype(np.float16)      # B[k, j], j contiguous
    a_img = np.concatenate([place_a(np.ascontiguousarray(a[:, 16 * j:16 * j + 16])) for j in range(2)]).view(np.float16)
    d = np.zeros(128 * 64, np.float32)
    h.emulate(h.source(TMA), "tma_mn", [a_img, sm90.emulator_tensor_map(b, (32, 64), "128B"), d])
    got = np.zeros((64, 128), np.float32)
    for t in range(128):
        for i in range(64):
            got[clayout(t, i)] = d[t * 64 + i]
    np.testing.assert_array_equal(got, a.astype(np.float32) @ b.astype(np.float32))


def test_k_major_and_n_major_forms_are_named_apart():
    assert sm90.wgmma_name(64, "f16", "mn") == "tdsl_ptx_wgmma_m64n64k16_f32_f16_bmn"
    assert "0, 1;" in sm90.wgmma_function(64, "bf16", "mn") and "0, 0;" in sm90.wgmma_function(64, "bf16")
    with pytest.raises(Exception, match="B major-ness 'k' or 'mn'"):
        sm90.wgmma_function(64, "f16", "nk")


def test_sm90a_sass_reads_b_transposed():
    """NVRTC for sm_90a: the N-major form is HGMMA with the tnspB modifier, the K-major one without."""
    pytest.importorskip("cuda.bindings")
    import os
    import subprocess
    import tempfile

    from test_sm90_ws_gemm import _cuobjdump

    from tdsl.backends.cuda.nvrtc import compile_cuda

    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    for major, k_src in (("mn", TMA), ("k", TMA.replace("_bmn", ""))):
        mod = compile_cuda(h.source(k_src, wgmma=((128, "f16", major),)), "sm_90a")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.cubin")
            with open(path, "wb") as f:
                f.write(mod.cubin)
            sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout
        hgmma = [line for line in sass.splitlines() if "HGMMA.64x128x16.F32" in line]
        assert len(hgmma) == 2 and all(("tnspB" in line) == (major == "mn") for line in hgmma), hgmma
