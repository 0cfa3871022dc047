"""The runtime on a machine without a GPU: clear TargetErrors (never a crash), argument checks
before any device work, and the DLPack capsule plumbing (exercised with host memory)."""
import ctypes
import os
import subprocess
import sys

import cuda_kernels as ck
import numpy as np
import pytest

import tdsl

pytest.importorskip("cuda.bindings")
from tdsl.backends.cuda import runtime

needs_no_gpu = pytest.mark.skipif(runtime.has_gpu(), reason="this machine has a GPU")


@pytest.fixture(scope="module")
def ew():
    func, ref = ck.elementwise(128)
    return tdsl.build(func, target="cuda", arch="sm_90"), ref


@needs_no_gpu
def test_calling_a_compiled_kernel_raises_target_error(ew):
    kernel, _ = ew
    with pytest.raises(tdsl.TargetError, match="no CUDA driver/GPU is available on this machine"):
        kernel(np.ones((2, 128), "float32"))
    with pytest.raises(tdsl.TargetError, match="no CUDA driver/GPU"):   # and again: the failure is remembered
        kernel(np.ones((2, 128), "float32"), np.empty((2, 128), "float32"))


@needs_no_gpu
def test_build_without_arch_needs_a_gpu():
    with pytest.raises(tdsl.TargetError, match="no CUDA driver/GPU.*arch='sm_90'"):
        tdsl.build(ck.elementwise(128)[0], target="cuda")


@needs_no_gpu
def test_device_arrays_need_a_gpu():
    with pytest.raises(tdsl.TargetError, match="no CUDA driver/GPU"):
        tdsl.device_array((4, 4), "float32")
    with pytest.raises(tdsl.TargetError, match="no CUDA driver/GPU"):
        tdsl.to_device(np.zeros(3, "float32"))


@needs_no_gpu
def test_process_survives_a_call_without_gpu():
    code = ("import sys, numpy as np, tdsl\n"
            f"sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
            "import cuda_kernels as ck\n"
            "k = tdsl.build(ck.matmul()[0], target='cuda', arch='sm_80')\n"
            "for _ in range(3):\n"
            "    try:\n"
            "        k(np.ones((64, 64), 'float32'), np.ones((64, 64), 'float32'))\n"
            "    except tdsl.TargetError as e:\n"
            "        msg = str(e)\n"
            "print('survived:', msg.split(' (')[0])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "survived: no CUDA driver/GPU is available on this machine"


def test_argument_errors_name_the_parameter(ew):
    kernel, _ = ew
    a = np.ones((2, 128), "float32")
    cases = [
        ((a.astype("float64"),), {}, "parameter 'A': expected dtype float32, got float64"),
        ((np.ones((2, 64), "float32"),), {}, r"parameter 'A': expected shape \(n, 128\), got \(2, 64\)"),
        ((np.ones(128, "float32"),), {}, r"parameter 'A': expected 2 dimensions \(n, 128\), got shape \(128,\)"),
        ((a, np.empty((3, 128), "float32")), {}, ("parameter 'B': dimension 0 is 3 but symbolic dimension 'n' "
                                                  "is already 2 from parameter 'A'")),
        ((a, a, a), {}, r"takes 2 arguments \(A, B\), got 3"),
        ((), {}, "missing parameter 'A'"),
        ((a,), {"C": a}, "has no parameter 'C'"),
        (([1.0, 2.0],), {}, "parameter 'A': expected an array"),
        ((a, np.empty((2, 128), "float32")[:, ::1].copy()), {"B": a}, "got parameter 'B' twice"),
    ]
    for args, kwargs, match in cases:
        with pytest.raises(tdsl.ArgumentError, match=match):
            kernel(*args, **kwargs)


def test_read_only_output_is_refused(ew):
    kernel, _ = ew
    out = np.empty((2, 128), "float32")
    out.flags.writeable = False
    with pytest.raises(tdsl.ArgumentError, match="parameter 'B': the kernel writes it but the array given is "
                                                 "read-only"):
        kernel(np.ones((2, 128), "float32"), out)


def test_scalar_argument_checks():
    from tdsl import T

    @T.prim_func
    def scale(A: T.Buffer((32,), "float32"), s: T.float32, k: T.int32):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.block("A"):
                i = T.axis.spatial(32, tx)
                A[i] = A[i] * s + T.cast(k, "float32")

    kernel = tdsl.build(scale, target="cuda", arch="sm_80")
    a = np.ones(32, "float32")
    with pytest.raises(tdsl.ArgumentError, match="parameter 'k': expected an integer"):
        kernel(a, 1.0, 2.5)
    with pytest.raises(tdsl.ArgumentError, match="parameter 'k': 4294967296 does not fit in int32"):
        kernel(a, 1.0, 2**32)
    with pytest.raises(tdsl.ArgumentError, match="parameter 's': expected a number"):
        kernel(a, "x", 1)


# ----------------------------------------------------------------------------- DLPack plumbing

def test_read_dlpack_of_a_host_array():
    a = np.arange(12, dtype="float32").reshape(3, 4)[:, 1:]
    view = runtime.read_dlpack(a)
    assert view.device_type == runtime.KDL_CPU and view.shape == (3, 3) and view.strides == (4, 1)
    assert str(view.dtype) == "float32"
    assert view.ptr == a.__array_interface__["data"][0]


def test_exported_capsule_is_consumable_and_keeps_memory_alive():
    host = np.arange(6, dtype="int32")

    class Exporter:
        def __dlpack__(self, stream=None, **kw):
            return runtime.export_dlpack(host.ctypes.data, (2, 3), tdsl.dtypes.int32, (runtime.KDL_CPU, 0), host)

        def __dlpack_device__(self):
            return (runtime.KDL_CPU, 0)

    before = len(runtime._EXPORTS)
    view = np.from_dlpack(Exporter())
    assert view.shape == (2, 3) and view.tolist() == [[0, 1, 2], [3, 4, 5]]
    host[0] = 42
    assert view[0, 0] == 42               # a view, not a copy
    del view
    import gc
    gc.collect()
    assert len(runtime._EXPORTS) == before   # the consumer called the deleter
    capsule = Exporter().__dlpack__()
    assert len(runtime._EXPORTS) == before + 1
    del capsule                              # never consumed: its destructor releases it
    gc.collect()
    assert len(runtime._EXPORTS) == before


def test_cuda_dlpack_tensor_is_checked_before_the_device_is_needed(ew):
    kernel, _ = ew
    host = np.zeros((2, 128), "float64")

    class FakeCudaTensor:
        """Claims to live on cuda:0 (its pointer is never dereferenced here)."""

        def __init__(self, arr, dtype):
            self.arr, self.dtype = arr, dtype

        def __dlpack__(self, stream=None, **kw):
            return runtime.export_dlpack(self.arr.ctypes.data, self.arr.shape, self.dtype,
                                         (runtime.KDL_CUDA, 0), self.arr)

        def __dlpack_device__(self):
            return (runtime.KDL_CUDA, 0)

    with pytest.raises(tdsl.ArgumentError, match="parameter 'A': expected dtype float32, got float64"):
        kernel(FakeCudaTensor(host, tdsl.dtypes.float64))
    if not runtime.has_gpu():
        with pytest.raises(tdsl.TargetError, match="no CUDA driver/GPU"):
            kernel(FakeCudaTensor(host.astype("float32"), tdsl.dtypes.float32))


def test_dlpack_of_another_device_is_refused(ew):
    kernel, _ = ew

    class OnVulkan:
        def __dlpack__(self, stream=None):
            raise AssertionError("not reached")

        def __dlpack_device__(self):
            return (7, 0)

    with pytest.raises(tdsl.ArgumentError, match="parameter 'A': a tensor on DLPack device type 7"):
        kernel(OnVulkan())


def test_ctypes_structs_match_dlpack_abi():
    assert ctypes.sizeof(runtime.DLTensor) == 48
    assert ctypes.sizeof(runtime.DLManagedTensor) == 64


@needs_no_gpu
def test_no_gpu_error_advises_the_emulator_and_each_raise_is_its_own():
    """Issue 28: the advice names emulate=True (which runs exactly that CUDA here), and the
    remembered failure is raised as a new exception each time, so its traceback points at the
    later call, not at the first failure."""
    import traceback

    func = ck.elementwise(128)[0]
    with pytest.raises(tdsl.TargetError) as first:
        tdsl.build(func, target="cuda")
    with pytest.raises(tdsl.TargetError) as later:
        tdsl.build(func, target="cuda")   # the line the later traceback must show
    assert first.value is not later.value
    assert "emulate=True" in str(later.value) and str(first.value) == str(later.value)
    lines = {f.lineno for f in traceback.extract_tb(later.value.__traceback__) if f.filename == __file__}
    first_lines = {f.lineno for f in traceback.extract_tb(first.value.__traceback__) if f.filename == __file__}
    assert first_lines and lines and not lines & first_lines, (first_lines, lines)
    a = np.arange(2 * 128, dtype="float32").reshape(2, 128)
    emulated = tdsl.build(func, target="cuda", emulate=True)     # the advice works
    np.testing.assert_allclose(emulated(a), ck.elementwise(128)[1](a), rtol=1e-6)
