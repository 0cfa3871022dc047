"""The emulator's coalescing counters (include/global_counters.h): 32-byte sectors per warp
request on global memory, against what the same bytes would take if contiguous."""
import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda.emulator import find_compiler

try:
    find_compiler()
except Exception as e:  # noqa: BLE001 - no host C++ compiler: nothing here can run
    pytest.skip(f"no host C++ compiler for the emulator: {e}", allow_module_level=True)


def copy(transposed: bool, dtype: str = "float32"):
    @T.prim_func
    def f(A: T.Buffer((64, 64), dtype), B: T.Buffer((64, 64), dtype)):
        for i in T.thread_binding(64, thread="blockIdx.x"):
            for j in T.thread_binding(64, thread="threadIdx.x"):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    if transposed:
                        B[vj, vi] = A[vj, vi]
                    else:
                        B[vi, vj] = A[vi, vj]
    return f


def _run(f, dtype="float32"):
    a = np.arange(64 * 64).reshape(64, 64).astype(dtype)
    kernel = tdsl.build(f, target="cuda", emulate=True)
    np.testing.assert_array_equal(kernel(a), a)
    return kernel, {g.buffer: g for g in kernel.stats.global_}


def test_a_row_per_warp_is_four_sectors_per_request():
    kernel, g = _run(copy(False))
    # 64 blocks x 2 warps, one load of A and one store of B each; 32 lanes x 4 bytes = 4 sectors
    for name in ("A", "B"):
        assert (g[name].requests, g[name].sectors, g[name].ideal, g[name].unpaired) == (128, 512, 512, 0)
        assert g[name].coalesced
    assert kernel.notes == []


def test_a_column_per_warp_is_a_sector_per_lane():
    kernel, g = _run(copy(True))
    assert g["A"].sectors_per_request == 32 and g["A"].ideal == 4 * g["A"].requests
    assert not g["A"].coalesced
    assert any(n.startswith("uncoalesced accesses to A in kernel") and "32.0 32-byte sectors per warp request" in n
               for n in kernel.notes)
    assert "sectors/request" in str(kernel.stats)


def test_half_rows_fill_half_the_sectors():
    _, g = _run(copy(False, "float16"), "float16")
    assert g["A"].sectors_per_request == 2 and g["A"].coalesced
