"""run_source: hand-written CUDA C++ in the emulator, and its refusals."""
import ctypes
import shutil

import numpy as np
import pytest

import tdsl
from tdsl.backends.cuda.emulator.raw import run_source

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                                reason="no host C++ compiler")

SCALE = r'''
extern "C" __global__ void scale(float* __restrict__ A, float f, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) A[i] = A[i] * f;
}
'''


def test_runs_and_updates_arrays():
    a = np.arange(100, dtype=np.float32)
    run_source(SCALE, "scale", [a, ctypes.c_float(2.0), ctypes.c_int(100)], grid=(4, 1, 1), block=(32, 1, 1))
    np.testing.assert_array_equal(a, np.arange(100, dtype=np.float32) * 2)


def test_out_of_bounds_is_reported():
    a = np.zeros(100, np.float32)
    with pytest.raises(tdsl.TargetError, match=r"kernel 'scale' \(emulated\): out-of-bounds access: A\[100\]"):
        run_source(SCALE, "scale", [a, ctypes.c_float(2.0), ctypes.c_int(101)], grid=(4, 1, 1), block=(32, 1, 1))


@pytest.mark.parametrize("name, args, message", [
    ("scal", [], r"no kernel 'scal' in the source; it has scale"),
    ("scale", [np.zeros(4, np.float32)], r"kernel 'scale' takes 3 arguments \(A, f, n\), got 1"),
    ("scale", [[1.0], ctypes.c_float(1), ctypes.c_int(1)], r"argument 'A' of 'scale' is a pointer"),
    ("scale", [np.zeros(4, np.float32), 2.0, ctypes.c_int(1)], r"argument 'f' of 'scale' is a float: pass a ctypes"),
])
def test_refusals(name, args, message):
    with pytest.raises(tdsl.TargetError, match=message):
        run_source(SCALE, name, args)
