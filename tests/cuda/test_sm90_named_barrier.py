"""Named barriers (tdsl_ptx_bar_sync / tdsl_ptx_bar_arrive: PTX bar.sync / bar.arrive id, count) in the
emulator: a bar.sync waits until `count` threads arrived on barrier id in the current phase, bar.arrive
counts without waiting; deadlocks and misuse are reported."""
import shutil

import numpy as np
import pytest
import sm90_harness as h

import tdsl
from tdsl.backends.cuda import sm90

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                                reason="no host C++ compiler")

# warp 0 produces a value per round into `box`, warp 1 consumes it: barrier 1 "full" (warp 0 arrives,
# warp 1 syncs), barrier 2 "empty" (warp 1 arrives, warp 0 syncs before overwriting)
PRODUCER_CONSUMER = r'''
extern "C" __global__ void pc(const int* __restrict__ X, int* __restrict__ Y) {
  __shared__ int box[32];
  const int lane = threadIdx.x & 31;
  for (int r = 0; r < ROUNDS; ++r) {
    if (threadIdx.x < 32) {
      if (r > 0) tdsl_ptx_bar_sync(2, 64);     // warp 1 has read the previous round
      box[lane] = X[r * 32 + lane];
      tdsl_ptx_bar_arrive(1, 64);              // the round is written
    } else {
      tdsl_ptx_bar_sync(1, 64);                // wait for it
      Y[r * 32 + lane] = box[lane] * 2;
      tdsl_ptx_bar_arrive(2, 64);              // the box may be overwritten
    }
  }
}
'''


@pytest.mark.parametrize("order", [0, 1, 2])
def test_producer_consumer_rounds_in_any_thread_order(order):
    rounds = 5
    x = np.arange(rounds * 32, dtype=np.int32) * 3 + 1
    y = np.zeros_like(x)
    src = h.source(PRODUCER_CONSUMER.replace("ROUNDS", str(rounds)))
    h.emulate(src, "pc", [x, y], block=(64, 1, 1), order=order, seed=7)
    np.testing.assert_array_equal(y, 2 * x)


def test_without_the_wait_the_consumer_reads_too_early():
    """The same kernel with bar.sync replaced by bar.arrive for the consumer: with warp 1 scheduled
    first it reads the box before warp 0 wrote it (so the test above would notice a bar.sync that
    does not wait)."""
    rounds = 1
    x = np.arange(32, dtype=np.int32) + 5
    y = np.zeros_like(x)
    src = h.source(PRODUCER_CONSUMER.replace("ROUNDS", str(rounds))
                   .replace("tdsl_ptx_bar_sync(1, 64);", "tdsl_ptx_bar_arrive(1, 64);"))
    try:
        h.emulate(src, "pc", [x, y], block=(64, 1, 1), order=1)
    except tdsl.TargetError as e:   # the uninitialised shared read may be reported instead
        assert "box" in str(e)
        return
    assert not np.array_equal(y, 2 * x)


def test_the_whole_block_meets_at_a_named_barrier():
    src = h.source(r'''
extern "C" __global__ void all(int* __restrict__ Y) {
  __shared__ int v[128];
  v[threadIdx.x] = threadIdx.x;
  tdsl_ptx_bar_sync(5, 128);
  Y[threadIdx.x] = v[127 - threadIdx.x];
}
''')
    y = np.zeros(128, np.int32)
    h.emulate(src, "all", [y], block=(128, 1, 1), order=2, seed=3)
    np.testing.assert_array_equal(y, 127 - np.arange(128))


def test_a_sync_that_can_never_complete_is_a_deadlock_naming_barrier_and_warps():
    src = h.source(r'''
extern "C" __global__ void dead(int* __restrict__ Y) {
  if (threadIdx.x < 64) tdsl_ptx_bar_sync(3, 96);   // only warps 0 and 1 ever arrive
  Y[threadIdx.x] = 1;
}
''')
    with pytest.raises(tdsl.TargetError) as e:
        h.emulate(src, "dead", [np.zeros(128, np.int32)], block=(128, 1, 1))
    msg = str(e.value)
    assert "deadlock: 64 thread(s) wait at named barrier 3 (bar.sync) for 96 arrivals, of which 64 came" in msg, msg
    assert "warp 0 (threads 0-31), warp 1 (threads 32-63)" in msg and "64 thread(s) finished" in msg, msg


@pytest.mark.parametrize("call, message", [
    ("tdsl_ptx_bar_sync(1, 48)", r"tdsl_ptx_bar_sync\(1, 48\): the thread count must be a positive multiple of 32"),
    ("tdsl_ptx_bar_arrive(16, 64)", r"tdsl_ptx_bar_arrive\(16, 64\): the barrier id is 0 to 15"),
    ("tdsl_ptx_bar_sync(1, 256)", r"tdsl_ptx_bar_sync\(1, 256\): the block has only 128 threads"),
    ("tdsl_ptx_bar_sync(4, threadIdx.x < 32 ? 64 : 96)",
     r"tdsl_ptx_bar_sync\(4, 96\): phase 0 of named barrier 4 started with count 64: every arrival of one phase"),
])
def test_misuse_is_reported(call, message):
    src = h.source('extern "C" __global__ void bad(int* __restrict__ Y) {\n  CALL;\n  Y[threadIdx.x] = 1;\n}\n'
                   .replace("CALL", call))
    with pytest.raises(tdsl.TargetError, match=message):
        h.emulate(src, "bad", [np.zeros(128, np.int32)], block=(128, 1, 1))


def test_device_functions_are_bar_sync_and_bar_arrive():
    text = sm90.device_functions()
    assert 'asm volatile("bar.sync %0, %1;"' in text and 'asm volatile("bar.arrive %0, %1;"' in text
