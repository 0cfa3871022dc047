"""mbarrier and the sm_90a target: NVRTC compiles the Hopper device functions for sm_90a and
refuses wgmma / setmaxnreg elsewhere by name; the emulator models mbarrier phases and
transaction counts as the PTX ISA defines them and reports deadlocks and count mismatches.

PTX ISA facts checked here ("Parallel Synchronization and Communication Instructions: mbarrier"):
- mbarrier.init sets the current phase to 0, the expected and the pending arrival counts to
  `count` (1 .. 2^20-1) and the tx-count to 0.
- mbarrier.arrive decrements the pending arrival count; expect_tx increments the tx-count;
  complete_tx (an asynchronous copy's completion) decrements it; arrive.expect_tx is expect-tx
  then arrive-on.
- phase completion: when the pending arrival count and the tx-count both reach zero, the phase
  advances, the pending count is reloaded with the expected count and the tx-count with 0.
- try_wait.parity P "waits for the completion of the phase indicated by phaseParity": it succeeds
  once the phase of parity P has completed, i.e. while the current phase's parity differs from P.
- the tx-count's range is -(2^20-1) .. 2^20-1.
- wgmma.* and setmaxnreg need the architecture-specific target sm_90a.
"""
import shutil

import numpy as np
import pytest
import sm90_harness as h

import tdsl
from tdsl.backends.cuda import sm90

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler")

# Two warps take turns through one barrier of count 64 for `rounds` phases: in each phase every
# thread adds its id to a shared slot only after the previous phase completed (parity = phase & 1).
PHASES = r'''
extern "C" __global__ void phases(int* __restrict__ out, int* __restrict__ parity_seen) {
  __shared__ __align__(16) unsigned long long bars[2];
  __shared__ __align__(16) int acc[4];
  if (threadIdx.x == 0) { tdsl_ptx_mbarrier_init(&bars[0], 64); acc[0] = 0; acc[1] = 0; acc[2] = 0; acc[3] = 0; }
  __syncthreads();
  for (int r = 0; r < 4; ++r) {
    atomicAdd(&acc[r], (int)threadIdx.x + 1);
    unsigned long long token = tdsl_ptx_mbarrier_arrive(&bars[0]);
    parity_seen[r * 64 + threadIdx.x] = (int)token;
    tdsl_ptx_mbarrier_wait(&bars[0], r & 1);
    out[r * 64 + threadIdx.x] = acc[r];   // every thread's add of round r happened before the phase completed
  }
}
'''


@needs_cxx
@pytest.mark.parametrize("order", [0, 1, 2])
def test_phases_complete_when_every_arrival_came(order):
    out = np.zeros(256, np.int32)
    seen = np.full(256, -1, np.int32)
    h.emulate(h.source(PHASES), "phases", [out, seen], block=(64, 1, 1), order=order)
    np.testing.assert_array_equal(out, np.full(256, sum(range(1, 65)), np.int32))
    # the token is the phase the arrival happened in: parity 0, 1, 0, 1
    np.testing.assert_array_equal(seen.reshape(4, 64), np.repeat([[0], [1], [0], [1]], 64, axis=1))


DEADLOCK = r'''
extern "C" __global__ void short_count(int* __restrict__ out) {
  __shared__ __align__(16) unsigned long long bars[2];
  if (threadIdx.x == 0) tdsl_ptx_mbarrier_init(&bars[1], 96);
  __syncthreads();
  tdsl_ptx_mbarrier_arrive(&bars[1]);
  tdsl_ptx_mbarrier_wait(&bars[1], 0);
  out[threadIdx.x] = 1;
}
'''


@needs_cxx
def test_a_wait_that_can_never_complete_is_a_deadlock():
    # 64 threads arrive on a barrier expecting 96: the phase keeps 32 arrivals pending forever
    with pytest.raises(tdsl.TargetError) as e:
        h.emulate(h.source(DEADLOCK), "short_count", [np.zeros(64, np.int32)], block=(64, 1, 1))
    msg = str(e.value)
    assert "deadlock" in msg and "mbarrier bars[1]" in msg and "32 of 96 arrivals pending" in msg
    assert "warp 0 (threads 0-31), warp 1 (threads 32-63)" in msg and "parity 0" in msg


WRONG_PARITY = r'''
extern "C" __global__ void wrong_parity(int* __restrict__ out) {
  __shared__ __align__(16) unsigned long long bars[1];
  if (threadIdx.x == 0) tdsl_ptx_mbarrier_init(&bars[0], 32);
  __syncthreads();
  tdsl_ptx_mbarrier_arrive(&bars[0]);
  tdsl_ptx_mbarrier_wait(&bars[0], 0);
  if (threadIdx.x >= 16) tdsl_ptx_mbarrier_wait(&bars[0], 1);  // phase 1 never gets an arrival
  out[threadIdx.x] = 1;
}
'''


@needs_cxx
def test_the_waiting_warps_are_named():
    with pytest.raises(tdsl.TargetError, match=r"16 thread\(s\) wait on mbarrier bars\[0\] for the phase of parity 1"
                       r".*phase 1: 32 of 32 arrivals pending.*16 thread\(s\) finished.*warp 0 \(threads 16-31\)"):
        h.emulate(h.source(WRONG_PARITY), "wrong_parity", [np.zeros(32, np.int32)], block=(32, 1, 1))


TX_MISMATCH = r'''
extern "C" __global__ void tx_mismatch(int* __restrict__ out) {
  __shared__ __align__(16) unsigned long long bars[1];
  if (threadIdx.x == 0) tdsl_ptx_mbarrier_init(&bars[0], 1);
  __syncthreads();
  if (threadIdx.x == 0) tdsl_ptx_mbarrier_arrive_expect_tx(&bars[0], 4096);  // no copy ever completes
  tdsl_ptx_mbarrier_wait(&bars[0], 0);
  out[threadIdx.x] = 1;
}
'''


@needs_cxx
def test_a_tx_count_that_never_reaches_zero_is_a_mismatch():
    with pytest.raises(tdsl.TargetError, match=r"transaction count mismatch on mbarrier bars\[0\]: every arrival of "
                       r"phase 0 came but its tx-count is 4096 \(expect_tx announced 4096 bytes, the copies "
                       r"completed 0\)"):
        h.emulate(h.source(TX_MISMATCH), "tx_mismatch", [np.zeros(32, np.int32)], block=(32, 1, 1))


MISUSE = r'''
extern "C" __global__ void misuse(int* __restrict__ out, int what) {
  __shared__ __align__(16) unsigned long long bars[1];
  if (what == 0) tdsl_ptx_mbarrier_arrive(&bars[0]);
  if (what == 1) { tdsl_ptx_mbarrier_init(&bars[0], 1); tdsl_ptx_mbarrier_arrive(&bars[0]);  // phase 0 completes
                   tdsl_ptx_mbarrier_arrive_expect_tx(&bars[0], 16);   // phase 1: arrived, 16 bytes pending
                   tdsl_ptx_mbarrier_arrive(&bars[0]); }
  if (what == 2) tdsl_ptx_mbarrier_init(&bars[0], 1 << 20);
  if (what == 3) { tdsl_ptx_mbarrier_init(&bars[0], 1); tdsl_ptx_mbarrier_expect_tx(&bars[0], 1u << 20); }
  out[0] = 1;
}
'''


@needs_cxx
@pytest.mark.parametrize("what, message", [
    (0, r"mbarrier_arrive on bars\[0\], which no mbarrier_init initialised in this block"),
    (1, r"mbarrier_arrive on bars\[0\]: phase 1 already has all 1 arrivals"),
    (2, r"mbarrier_init of bars\[0\] with count 1048576: the PTX ISA takes 1 to 2\^20-1"),
    (3, r"transaction count mismatch on mbarrier bars\[0\]: its tx-count reached 1048576, outside"),
])
def test_misuse_is_reported(what, message):
    import ctypes

    with pytest.raises(tdsl.TargetError, match=message):
        h.emulate(h.source(MISUSE), "misuse", [np.zeros(1, np.int32), ctypes.c_int(what)], block=(1, 1, 1))


# ---------------------------------------------------------------------------- NVRTC, sm_90a

ARCH_SPECIFIC = r'''
extern "C" __global__ void __launch_bounds__(128) hopper(float* __restrict__ out) {
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  tdsl_ptx_setmaxnreg_inc<232>();
  tdsl_ptx_wgmma_fence();
  tdsl_ptx_wgmma_m64n8k16_f32_f16(d, 0ull, 0ull, 0);
  tdsl_ptx_wgmma_commit_group();
  tdsl_ptx_wgmma_wait_group<0>();
  out[threadIdx.x] = d[0] + d[1] + d[2] + d[3];
}
extern "C" __global__ void __launch_bounds__(128) hopper_bf16(float* __restrict__ out, unsigned long long da, unsigned long long db) {
  float d[128];
  for (int i = 0; i < 128; ++i) d[i] = 0.f;
  tdsl_ptx_wgmma_fence();
  tdsl_ptx_wgmma_m64n256k16_f32_bf16(d, da, db, 1);
  tdsl_ptx_wgmma_commit_group();
  tdsl_ptx_wgmma_wait_group<0>();
  for (int i = 0; i < 128; ++i) out[threadIdx.x * 128 + i] = d[i];
}
'''


def test_sm90a_compiles_wgmma_and_setmaxnreg():
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda.nvrtc import compile_cuda

    mod = compile_cuda(h.source(PHASES + ARCH_SPECIFIC, wgmma=((8, "f16"), (256, "bf16"))), "sm_90a", want_ptx=True)
    assert mod.cubin[:4] == b"\x7fELF"
    for instr in ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", "setmaxnreg.inc.sync.aligned.u32 232",
                  "mbarrier.try_wait.parity.shared::cta.b64", "mbarrier.arrive.shared::cta.b64"):
        assert instr in mod.ptx
    assert ".target sm_90a" in mod.ptx


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_other_targets_refuse_wgmma_by_name(arch):
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda.nvrtc import compile_cuda

    src = h.source(ARCH_SPECIFIC, wgmma=((8, "f16"),))
    with pytest.raises(tdsl.TargetError, match=rf"setmaxnreg \(register reallocation\) needs the "
                       rf"architecture-specific target sm_90a, but the kernel is built for {arch} \(line \d+: "
                       r"tdsl_ptx_setmaxnreg_inc<232>\(\);\); build with arch=\"sm_90a\""):
        compile_cuda(src, arch)
    raw = 'extern "C" __global__ void f() { asm volatile("wgmma.fence.sync.aligned;"); }\n'
    with pytest.raises(tdsl.TargetError,
                       match="wgmma \\(warpgroup matrix multiply\\) needs the architecture-specific target sm_90a"):
        compile_cuda(raw, arch)


def test_mbarrier_alone_compiles_for_plain_sm90():
    # mbarrier, TMA and fence.proxy.async are sm_90 (not architecture-specific): the device
    # functions compile there; the sm_90a-only ones are left out by __CUDA_ARCH_FEAT_SM90_ALL
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda.nvrtc import compile_cuda

    mod = compile_cuda(h.source(PHASES), "sm_90", want_ptx=True)
    assert "mbarrier.init.shared::cta.b64" in mod.ptx and "wgmma" not in mod.ptx


def test_wgmma_shapes_are_checked():
    with pytest.raises(tdsl.TargetError, match="N a multiple of 8 in \\[8, 256\\]"):
        sm90.wgmma_function(12, "f16")


EVERY_FUNCTION = r'''
extern "C" __global__ void __launch_bounds__(128) every(float* __restrict__ out, const unsigned char* __restrict__ tmap) {
  __shared__ __align__(1024) half tile[4096];
  __shared__ __align__(16) unsigned long long bars[2];
  tdsl_ptx_mbarrier_init(&bars[0], 1);
  tdsl_ptx_mbarrier_init(bars[1], 1);
  tdsl_ptx_fence_mbarrier_init();
  tdsl_ptx_mbarrier_expect_tx(&bars[0], 64);
  tdsl_ptx_mbarrier_expect_tx(bars[1], 64);
  unsigned long long t = tdsl_ptx_mbarrier_arrive(&bars[0]) + tdsl_ptx_mbarrier_arrive(bars[1]);
  t += tdsl_ptx_mbarrier_arrive_expect_tx(&bars[0], 64) + tdsl_ptx_mbarrier_arrive_expect_tx(bars[1], 64);
  tdsl_ptx_tma_load_1d(&tile[0], tmap, 1, &bars[0]);
  tdsl_ptx_tma_load_2d(&tile[0], tmap, 1, 2, &bars[0]);
  tdsl_ptx_tma_load_2d(tile[0], tmap[0], 1, 2, bars[0]);
  tdsl_ptx_tma_load_3d(&tile[0], tmap, 1, 2, 3, &bars[0]);
  tdsl_ptx_tma_load_4d(&tile[0], tmap, 1, 2, 3, 4, &bars[0]);
  tdsl_ptx_tma_load_5d(&tile[0], tmap, 1, 2, 3, 4, 5, &bars[0]);
  tdsl_ptx_mbarrier_wait(&bars[0], 0);
  tdsl_ptx_mbarrier_wait(bars[1], 1);
  tdsl_ptx_fence_proxy_async();
  tdsl_ptx_tma_store_1d(tmap, 1, &tile[0]);
  tdsl_ptx_tma_store_2d(tmap, 1, 2, &tile[0]);
  tdsl_ptx_tma_store_3d(tmap, 1, 2, 3, &tile[0]);
  tdsl_ptx_bulk_commit_group();
  tdsl_ptx_bulk_wait_group<1>();
  tdsl_ptx_bulk_wait_group_read<0>();
  tdsl_ptx_setmaxnreg_dec<40>();
  tdsl_ptx_setmaxnreg_inc<232>();
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  tdsl_ptx_wgmma_fence();
  tdsl_ptx_wgmma_m64n8k16_f32_f16(d, tdsl_ptx_wgmma_desc(&tile[0], 16, 1024, 1), tdsl_ptx_wgmma_desc(tile[64], 16, 1024, 1), 1);
  tdsl_ptx_wgmma_m64n8k16_f32_f16(d[0], 0ull, 0ull, 0);
  tdsl_ptx_wgmma_commit_group();
  tdsl_ptx_wgmma_wait_group<1>();
  out[threadIdx.x] = d[0] + d[1] + d[2] + d[3] + (float)t;
}
'''


def test_every_device_function_assembles_for_sm90a():
    # ptxas checks only the inline PTX a kernel uses: one kernel calling each function (and each
    # reference form) once, compiled to CUBIN
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda.nvrtc import compile_cuda

    mod = compile_cuda(h.source(EVERY_FUNCTION, wgmma=((8, "f16"),)), "sm_90a", want_ptx=True)
    assert mod.cubin[:4] == b"\x7fELF"
    for instr in ("mbarrier.expect_tx.relaxed.cta.shared::cta.b64", "fence.mbarrier_init.release.cluster",
                  "mbarrier.arrive.expect_tx.shared::cta.b64", "cp.async.bulk.tensor.5d", "cp.async.bulk.tensor.1d",
                  "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group", "cp.async.bulk.wait_group 1",
                  "setmaxnreg.dec.sync.aligned.u32 40", "wgmma.wait_group.sync.aligned 1", "fence.proxy.async"):
        assert instr in mod.ptx, instr
