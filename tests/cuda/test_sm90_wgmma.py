"""wgmma.mma_async m64nNk16 in the emulator: descriptors decoded as the PTX ISA's "Matrix
Descriptor Format" says (start >> 4 in bits 0-13 -- the emulator's own table index --, leading
byte offset bits 16-29, stride byte offset bits 32-45, swizzle bits 62-63: 1 = 128B), K-major
operands; accumulators placed as CuTe's SM90 GMMA traits say (cute/atom/mma_traits_sm90_gmma.hpp,
CLayout_64xN): thread t, value i -> row 16*(t/32) + (t%32)/4 + 8*((i/2)%2), column 2*(t%4) + i%2
+ 8*(i/4) (transcribed below as `clayout`); asynchronous until wgmma.wait_group."""
import shutil

import ml_dtypes
import numpy as np
import pytest
import sm90_harness as h

import tdsl

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                                reason="no host C++ compiler")


def clayout(t, i):
    return 16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2), 2 * (t % 4) + i % 2 + 8 * (i // 4)


KERNEL = r'''
extern "C" __global__ void gemm(const ELEM* __restrict__ A, const ELEM* __restrict__ B, float* __restrict__ D, int early) {
  __shared__ __align__(16) ELEM a_s[A_ELEMS];
  __shared__ __align__(16) ELEM b_s[NN16];
  for (int i = threadIdx.x; i < A_ELEMS; i += 128) a_s[i] = A[i];
  for (int i = threadIdx.x; i < NN16; i += 128) b_s[i] = B[i];
  tdsl_ptx_fence_proxy_async();   // the async proxy (wgmma) reads what the threads stored
  __syncthreads();
  __align__(16) float d[NHALF];
  for (int i = 0; i < NHALF; ++i) d[i] = 1.0f;
  tdsl_ptx_wgmma_fence();
  tdsl_ptx_wgmma_MNAME(&d[0], tdsl_ptx_wgmma_desc(&a_s[0], LBO, SBO, SWZ), tdsl_ptx_wgmma_desc(&b_s[0], LBO, SBO, SWZ), 1);
  tdsl_ptx_wgmma_commit_group();
  if (early == 2) {   // overwrite an operand while the wgmma is in flight
    __syncthreads();
    if (threadIdx.x == 0) a_s[0] = a_s[8];
    __syncthreads();
  }
  if (!early) tdsl_ptx_wgmma_wait_group<0>();
  for (int i = 0; i < NHALF; ++i) D[threadIdx.x * NHALF + i] = d[i];
  tdsl_ptx_wgmma_wait_group<0>();
}
'''


def _place(m, swizzle, dtype):
    """A (rows x 16) f16 matrix laid out K-major as the descriptor says: not swizzled, 8x8 core
    matrices (8 rows of 16 bytes) with LBO = 128 (along K) and SBO = 256 (along rows); 128B
    swizzled, rows of 128 bytes (K = 16 uses the first 32), SBO = 1024."""
    rows = m.shape[0]
    raw = np.zeros(rows * 64 if swizzle else rows * 16, dtype)
    flat = raw.view(np.uint8)
    for r in range(rows):
        for k in range(16):
            if swizzle:
                off = (r // 8) * 1024 + (r % 8) * 128 + 2 * k
                off ^= (off & (7 << 7)) >> 3          # CuTe Swizzle<3,4,3>
            else:
                off = (r // 8) * 256 + (2 * k // 16) * 128 + (r % 8) * 16 + (2 * k) % 16
            flat[off:off + 2] = np.frombuffer(m[r, k].tobytes(), np.uint8)
    return raw


DTYPES = {"f16": (np.float16, "half"), "bf16": (ml_dtypes.bfloat16, "nv_bfloat16")}


def _gemm(n, swizzle, dtype, early):
    import ctypes

    np_dtype, ctype = DTYPES[dtype]
    rng = np.random.default_rng(n)
    a = rng.integers(-3, 4, (64, 16)).astype(np_dtype)
    b = rng.integers(-3, 4, (n, 16)).astype(np_dtype)   # B K-major: N rows of K
    a_buf, b_raw = _place(a, swizzle, np_dtype), _place(b, swizzle, np_dtype)
    b_buf = np.zeros(max(b_raw.size, 8), np_dtype)
    b_buf[:b_raw.size] = b_raw
    src = (KERNEL.replace("A_ELEMS", str(a_buf.size)).replace("NN16", str(b_buf.size)).replace("NHALF", str(n // 2))
           .replace("MNAME", f"m64n{n}k16_f32_{dtype}").replace("ELEM", ctype).replace("LBO", "128")
           .replace("SBO", "1024" if swizzle else "256").replace("SWZ", "1" if swizzle else "0"))
    d = np.zeros(128 * n // 2, np.float32)
    h.emulate(h.source(src), "gemm", [a_buf, b_buf, d, ctypes.c_int(early)], block=(128, 1, 1))
    got = np.zeros((64, n), np.float32)
    for t in range(128):
        for i in range(n // 2):
            got[clayout(t, i)] = d[t * n // 2 + i]
    return got, a.astype(np.float32) @ b.astype(np.float32).T + 1.0


@pytest.mark.parametrize("n", [8, 16, 24, 32, 128, 256])
@pytest.mark.parametrize("swizzle", [False, True])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_wgmma_m64nNk16(n, swizzle, dtype):
    got, want = _gemm(n, swizzle, dtype, early=0)
    np.testing.assert_array_equal(got, want)


def test_accumulators_read_before_the_wait_are_the_old_ones():
    got, _ = _gemm(16, True, "f16", early=1)
    np.testing.assert_array_equal(got, np.ones((64, 16), np.float32))


def test_an_operand_written_while_in_flight_is_a_race():
    with pytest.raises(tdsl.TargetError, match=r"wgmma m64n16k16: shared memory of its operand A was written after the "
                       r"wgmma was issued and before its wait_group"):
        _gemm(16, False, "f16", early=2)


# wgmma.mma_async is .sync.aligned (PTX ISA): all threads of the warpgroup execute the same wgmma
DIVERGENT = r'''
extern "C" __global__ void divergent(float* __restrict__ D, int how) {
  __shared__ __align__(16) half a_s[1024];
  __shared__ __align__(16) half b_s[128];
  for (int i = threadIdx.x; i < 1024; i += 128) a_s[i] = __float2half(1.0f);
  for (int i = threadIdx.x; i < 128; i += 128) b_s[i] = __float2half(1.0f);
  tdsl_ptx_fence_proxy_async();   // the async proxy (wgmma) reads what the threads stored
  __syncthreads();
  __align__(16) float d[4];
  for (int i = 0; i < 4; ++i) d[i] = 0.0f;
  const int a_at = (how == 0 && threadIdx.x == 77) ? 512 : 0;
  if (how == 1 && threadIdx.x >= 64) return;
  tdsl_ptx_wgmma_m64n8k16_f32_f16(&d[0], tdsl_ptx_wgmma_desc(&a_s[a_at], 128, 256, 0),
                                  tdsl_ptx_wgmma_desc(&b_s[0], 128, 256, 0), 0);
  tdsl_ptx_wgmma_commit_group();
  tdsl_ptx_wgmma_wait_group<0>();
  for (int i = 0; i < 4; ++i) D[threadIdx.x * 4 + i] = d[i];
}
'''


@pytest.mark.parametrize("how, message", [
    (0, r"the threads of warpgroup 0 issue different instructions as their wgmma #0 \(m64n8k16 with descriptors"),
    (1, r"in warpgroup 0 thread 0 issued 1 wgmma but thread 64 issued 0"),
])
def test_a_warpgroup_that_does_not_issue_together_is_refused(how, message):
    import ctypes

    with pytest.raises(tdsl.TargetError, match=message):
        h.emulate(h.source(DIVERGENT), "divergent", [np.zeros(512, np.float32), ctypes.c_int(how)], block=(128, 1, 1))


# A 64-wide K tile in the 128B swizzle (rows of 128 bytes, 8-row atoms of 1024 bytes, SBO = 1024),
# multiplied as four k16 slices whose descriptors start 32 bytes further each (as CUTLASS's GMMA
# does): the swizzle acts on the address, so the advanced start reads the right elements.
K64 = r'''
extern "C" __global__ void k64(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ D) {
  __shared__ __align__(1024) half a_s[4096];
  __shared__ __align__(1024) half b_s[2048];
  for (int i = threadIdx.x; i < 4096; i += 128) a_s[i] = A[i];
  for (int i = threadIdx.x; i < 2048; i += 128) b_s[i] = B[i];
  tdsl_ptx_fence_proxy_async();   // the async proxy (wgmma) reads what the threads stored
  __syncthreads();
  __align__(16) float d[16];
  tdsl_ptx_wgmma_fence();
  for (int j = 0; j < 4; ++j)
    tdsl_ptx_wgmma_m64n32k16_f32_f16(&d[0], tdsl_ptx_wgmma_desc(&a_s[16 * j], 16, 1024, 1),
                                     tdsl_ptx_wgmma_desc(&b_s[16 * j], 16, 1024, 1), j > 0);
  tdsl_ptx_wgmma_commit_group();
  tdsl_ptx_wgmma_wait_group<0>();
  for (int i = 0; i < 16; ++i) D[threadIdx.x * 16 + i] = d[i];
}
'''


def _place_sw128(m):
    rows, cols = m.shape
    flat = np.zeros(rows * 128, np.uint8)
    for r in range(rows):
        for k in range(cols):
            off = cute_swizzle_128(r * 128 + 2 * k)
            flat[off:off + 2] = np.frombuffer(m[r, k].tobytes(), np.uint8)
    return flat.view(np.float16)


def cute_swizzle_128(x):
    return x ^ ((x & (7 << 7)) >> 3)     # CuTe Swizzle<3,4,3>


def test_k_slices_of_a_128B_swizzled_tile():
    rng = np.random.default_rng(7)
    a = rng.integers(-3, 4, (64, 64)).astype(np.float16)
    b = rng.integers(-3, 4, (32, 64)).astype(np.float16)
    d = np.zeros(128 * 16, np.float32)
    h.emulate(h.source(K64), "k64", [_place_sw128(a), _place_sw128(b), d], block=(128, 1, 1))
    got = np.zeros((64, 32), np.float32)
    for t in range(128):
        for i in range(16):
            got[clayout(t, i)] = d[t * 16 + i]
    np.testing.assert_array_equal(got, a.astype(np.float32) @ b.astype(np.float32).T)


def test_operands_stored_by_threads_without_a_proxy_fence_are_refused():
    """wgmma reads shared memory through the async proxy: the threads' stores (generic proxy) need a
    fence.proxy.async before it (PTX ISA, wgmma.mma_async and "Proxies"); without one a GPU may
    feed the tensor cores stale bytes, so the emulator stops."""
    import ctypes

    fence = "  tdsl_ptx_fence_proxy_async();   // the async proxy (wgmma) reads what the threads stored\n"
    assert fence in DIVERGENT
    src = h.source(DIVERGENT.replace(fence, ""))
    assert "fence_proxy_async" not in src.split("divergent")[1]
    with pytest.raises(tdsl.TargetError, match=r"wgmma reads a_s byte 0, which threads stored to after the last "
                                               r"fence.proxy.async: .*put tdsl_ptx_fence_proxy_async\(\)"):
        h.emulate(src, "divergent", [np.zeros(512, np.float32), ctypes.c_int(2)], block=(128, 1, 1))
