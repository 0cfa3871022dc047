"""CUDA kernels' calls show the user's frame only (as CPU kernels do, tdsl/tracebacks.py), and
`kernel.notes` says what the build could not do as the schedule asked (tdsl.build warns)."""
import os
import shutil
import traceback

import numpy as np
import pytest

import tdsl
from tdsl import T

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                                reason="no host C++ compiler")


@T.prim_func
def transpose_rows(A: T.Buffer((8, 64), "float32"), B: T.Buffer((64, 8), "float32")):
    for i, j in T.grid(64, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vj, vi]


def _kernel():
    sch = tdsl.Schedule(transpose_rows)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.x")
    jo, ji = sch.split(j, factors=[None, 4])
    sch.bind(jo, "threadIdx.x")
    sch.vectorize(ji)          # the load from A is strided in j: stays scalar
    with pytest.warns(tdsl.PerformanceWarning, match="kernel 'transpose_rows' is slower than its schedule asks"):
        return tdsl.build(sch, target="cuda", emulate=True)


def test_notes_and_short_tracebacks(monkeypatch):
    monkeypatch.delenv("TDSL_FULL_TRACEBACK", raising=False)
    kernel = _kernel()
    assert kernel.notes == ["loop j_1 in block B was not vectorized: the load from 'A' is not contiguous in j_1"]
    a = np.arange(512, dtype="float32").reshape(8, 64)
    np.testing.assert_array_equal(kernel(a), a.T)
    for call in (lambda: kernel(a.astype("float64")), lambda: kernel.time(a, b=1)):
        with pytest.raises(tdsl.ArgumentError) as info:
            call()
        frames = [f.filename for f in traceback.extract_tb(info.value.__traceback__)]
        root = os.path.dirname(tdsl.__file__)
        assert frames[0] == __file__
        assert [os.path.basename(f) for f in frames if f.startswith(root)] == ["tracebacks.py"], frames
