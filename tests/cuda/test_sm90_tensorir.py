"""The Hopper device functions from TensorIR: `T.call_extern` of tdsl_ptx_* on buffer elements
(passed by reference) with `sm90.device_functions()` as the function's CUDA prelude. Runs in the
emulator, compiles for sm_90a."""
import shutil

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda import sm90

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler")


def tma_tile():
    """One elected thread loads a 16 x 16 box of A (at column x, row y) by TMA into shared memory,
    every thread waits on the mbarrier and copies the tile out."""
    @T.prim_func
    def tile_load(tmap: T.Buffer((128,), "uint8"), B: T.Buffer((16, 16), "float16"), x: T.int32, y: T.int32):
        T.func_attr({"tdsl.cuda_prelude": sm90.device_functions()})
        bars = T.alloc_buffer((1,), "uint64", scope="shared")
        tile = T.alloc_buffer((16, 16), "float16", scope="shared")
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            with T.block("load"):
                # (one call per branch: tdsl's barrier planner takes the calls for shared-memory exchanges
                # and puts a __syncthreads() between them, which a branch of one thread cannot hold)
                if tx == 0:
                    T.evaluate(T.call_extern("void", "tdsl_ptx_mbarrier_init", bars[0], 1))
                if tx == 0:
                    T.evaluate(T.call_extern("uint64", "tdsl_ptx_mbarrier_arrive_expect_tx", bars[0], 512))
                if tx == 0:
                    T.evaluate(T.call_extern("void", "tdsl_ptx_tma_load_2d", tile[0, 0], tmap[0], x, y, bars[0]))
                T.evaluate(T.call_extern("void", "tdsl_ptx_mbarrier_wait", bars[0], 0))
                for k in range(4):
                    B[(tx * 4 + k) // 16, (tx * 4 + k) % 16] = tile[(tx * 4 + k) // 16, (tx * 4 + k) % 16]
    return tile_load


@needs_cxx
@pytest.mark.parametrize("x, y", [(0, 0), (8, 20), (-4, -2)])
def test_tma_tile_from_tensorir_in_the_emulator(x, y):
    a = np.arange(32 * 32, dtype=np.float32).reshape(32, 32).astype(np.float16)
    kernel = tdsl.build(tma_tile(), target="cuda", emulate=True)
    out = np.zeros((16, 16), np.float16)
    kernel(sm90.emulator_tensor_map(a, (16, 16)), out, x, y)
    want = np.zeros((16, 16), np.float16)
    for r in range(16):
        for c in range(16):
            if 0 <= y + r < 32 and 0 <= x + c < 32:
                want[r, c] = a[y + r, x + c]
    np.testing.assert_array_equal(out, want)
    assert "tdsl_ptx_tma_load_2d(tile[0], tmap[0], x, y, bars[0]);" in kernel.source


def test_tma_tile_from_tensorir_compiles_for_sm90a():
    pytest.importorskip("cuda.bindings")
    kernel = tdsl.build(tma_tile(), target="cuda", arch="sm_90a", ptx=True)
    assert "cp.async.bulk.tensor.2d" in kernel.ptx and "mbarrier.try_wait.parity" in kernel.ptx
