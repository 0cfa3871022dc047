"""The runtime's host side (allocation, copies, argument marshalling, launch dimensions, outputs,
DLPack export) against a fake `cuda.bindings.driver` whose "device memory" is host memory and
whose launches run a numpy stand-in of the kernel. No GPU is needed; on a GPU machine
bench/gpu_check.py runs the real thing."""
import ctypes
import sys

import cuda_kernels as ck
import numpy as np
import pytest

import tdsl

pytest.importorskip("cuda.bindings")
from fake_cuda_driver import FakeDriver

from tdsl.backends.cuda import runtime


def _params(addr: int, n: int) -> list[int]:
    return [p for p in (ctypes.c_void_p * n).from_address(addr)]


def _array(ptr: int, shape, dtype) -> np.ndarray:
    count = int(np.prod(shape))
    raw = (ctypes.c_uint8 * (count * np.dtype(dtype).itemsize)).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


@pytest.fixture
def fake(monkeypatch):
    state = {}

    def on_launch(name, grid, block, params):
        state["hook"](name, grid, block, params)

    drv = FakeDriver(on_launch)
    import cuda.bindings

    from tdsl.backends.cuda.nvrtc import nvrtc_version

    nvrtc_version()   # load cuda.bindings.nvrtc (which imports the real driver module) first

    monkeypatch.setattr(cuda.bindings, "driver", drv, raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", drv)
    for attr in ("info", "context", "device", "error"):
        monkeypatch.setattr(runtime._State, attr, None)
    monkeypatch.setattr(runtime._State, "local", __import__("threading").local())
    drv.state = state
    return drv


def test_elementwise_call_with_numpy_and_device_arrays(fake):
    func, ref = ck.elementwise(128)
    kernel = tdsl.build(func, target="cuda", arch="sm_90")
    rows = 5

    def hook(name, grid, block, params):
        assert name == "ew_kernel" and grid == (rows, 1, 1) and block == (32, 1, 1)
        pa, pb = _params(params, 2)
        a_ptr = ctypes.c_void_p.from_address(pa).value
        b_ptr = ctypes.c_void_p.from_address(pb).value
        _array(b_ptr, (rows, 128), np.float32)[...] = ref(_array(a_ptr, (rows, 128), np.float32))

    fake.state["hook"] = hook
    a = np.random.default_rng(0).standard_normal((rows, 128)).astype("float32")
    out = kernel(a)                                   # output left out: allocated and returned
    np.testing.assert_allclose(out, ref(a), rtol=1e-6)
    b = np.zeros_like(a)
    assert kernel(a, b) is None                       # destination passing copies back
    np.testing.assert_allclose(b, ref(a), rtol=1e-6)
    da = tdsl.to_device(a)
    dout = kernel(da)                                 # device in, device out
    assert isinstance(dout, runtime.DeviceArray) and dout.shape == (rows, 128)
    np.testing.assert_allclose(dout.numpy(), ref(a), rtol=1e-6)
    assert len(fake.launches) == 3


def test_scalars_symbolic_dims_and_workspaces_are_passed(fake):
    from tdsl import T

    @T.prim_func
    def two(A: T.Buffer(("n",), "float32"), s: T.float32, C: T.Buffer(("n",), "float32")):
        B = T.alloc_buffer((n,), "float32")
        for bx in T.thread_binding(n, thread="blockIdx.x"):
            for tx in T.thread_binding(1, thread="threadIdx.x"):
                with T.block("B"):
                    i = T.axis.spatial(n, bx)
                    B[i] = A[i] * s
        for bx in T.thread_binding(n, thread="blockIdx.x"):
            for tx in T.thread_binding(1, thread="threadIdx.x"):
                with T.block("C"):
                    i = T.axis.spatial(n, bx)
                    C[i] = B[n - 1 - i]

    kernel = tdsl.build(two, target="cuda", arch="sm_90")
    names = [[p.name for p in k.params] for k in kernel.kernels]
    assert names == [["A", "s", "B"], ["C", "B", "n"]]
    seen = {}

    def hook(name, grid, block, params):
        if name == "two_kernel_0":
            pa, ps, pb = _params(params, 3)
            seen["s"] = ctypes.c_float.from_address(ps).value
            seen["B"] = ctypes.c_void_p.from_address(pb).value
            a = _array(ctypes.c_void_p.from_address(pa).value, (7,), np.float32)
            _array(seen["B"], (7,), np.float32)[...] = a * seen["s"]
        else:
            pc, pb, pn = _params(params, 3)
            n = ctypes.c_int32.from_address(pn).value
            assert ctypes.c_void_p.from_address(pb).value == seen["B"] and grid == (n, 1, 1)
            b = _array(seen["B"], (n,), np.float32)
            _array(ctypes.c_void_p.from_address(pc).value, (n,), np.float32)[...] = b[::-1]

    fake.state["hook"] = hook
    a = np.arange(7, dtype="float32")
    np.testing.assert_array_equal(kernel(a, 2.5), (a * 2.5)[::-1])
    assert seen["s"] == 2.5


def test_launch_limits_and_alignment_are_checked(fake):
    func, _ = ck.elementwise(128)
    kernel = tdsl.build(func, target="cuda", arch="sm_90")
    fake.state["hook"] = lambda *a: None
    fake.cuFuncGetAttribute = lambda attr, fn: (FakeDriver.CUresult.CUDA_SUCCESS, 16)
    kernel._module = None
    with pytest.raises(tdsl.TargetError, match="launches 32 threads per block.*at most 16"):
        kernel(np.ones((2, 128), "float32"))
    fake.cuFuncGetAttribute = lambda attr, fn: (FakeDriver.CUresult.CUDA_SUCCESS, 1024)
    kernel._module = None

    class Offset:
        """A CUDA tensor view starting 4 bytes into an allocation."""

        def __init__(self):
            self.base = tdsl.to_device(np.zeros((3, 128), "float32"))

        def __dlpack__(self, stream=None):
            return runtime.export_dlpack(self.base.ptr + 4, (2, 128), tdsl.dtypes.float32, (2, 0), self.base)

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(tdsl.ArgumentError, match="parameter 'A'.*16-byte vector loads.*not 16-byte aligned"):
        kernel(Offset())


def test_driver_errors_become_target_errors(fake):
    fake.cuMemAlloc = lambda n: (FakeDriver.CUresult.CUDA_ERROR_INVALID_VALUE, None)
    with pytest.raises(tdsl.TargetError, match=r"CUDA cuMemAlloc\(12 bytes\) failed: CUDA_ERROR_FAKE"):
        tdsl.device_array((3,), "float32")


def test_device_array_dlpack_export_and_numpy(fake):
    a = tdsl.to_device(np.arange(6, dtype="float32").reshape(2, 3))
    assert a.__dlpack_device__() == (2, 0) and a.shape == (2, 3) and str(a.dtype) == "float32"
    view = runtime.read_dlpack(a)
    assert view.ptr == a.ptr and view.shape == (2, 3) and view.device_type == 2 and view.strides is None
    np.testing.assert_array_equal(a.numpy(), np.arange(6).reshape(2, 3))
    z = tdsl.device_array(4, "int32")
    np.testing.assert_array_equal(z.numpy(), np.zeros(4, "int32"))
    import gc
    gc.collect()      # arrays of earlier tests held by reference cycles (e.g. kept tracebacks)
    freed = fake.freed
    del a, view, z
    gc.collect()
    assert fake.freed == freed + 2


def test_output_written_only_by_a_tensor_intrinsic_can_be_left_out(fake):
    sch, ref = ck.wmma_gemm(32, 16, 32)
    kernel = tdsl.build(sch, target="cuda", arch="sm_90")

    def hook(name, grid, block, params):
        pa, pb, pc = _params(params, 3)
        a = _array(ctypes.c_void_p.from_address(pa).value, (32, 32), np.float16)
        b = _array(ctypes.c_void_p.from_address(pb).value, (32, 16), np.float16)
        _array(ctypes.c_void_p.from_address(pc).value, (32, 16), np.float32)[...] = ref(a, b)

    fake.state["hook"] = hook
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 32)).astype("float16"), rng.standard_normal((32, 16)).astype("float16")
    np.testing.assert_allclose(kernel(a, b), ref(a, b), rtol=1e-6)
    assert fake.launches[-1][1:3] == ((1, 2, 1), (32, 1, 1))


@pytest.mark.skipif(not __import__("shutil").which("g++"), reason="no host C++ compiler")
def test_emulated_kernel_takes_device_arrays(fake):
    # issue 16's "not done": to_device arrays as inputs of an emulated kernel (copied to the host,
    # written ones copied back; outputs left out come back as DeviceArrays, as on a GPU)
    func, ref = ck.elementwise(128)
    kernel = tdsl.build(func, target="cuda", emulate=True)
    a = np.random.default_rng(1).standard_normal((3, 128)).astype("float32")
    dout = kernel(tdsl.to_device(a))
    assert isinstance(dout, runtime.DeviceArray)
    np.testing.assert_allclose(dout.numpy(), ref(a), rtol=1e-6)
    db = tdsl.device_array((3, 128), "float32")
    assert kernel(tdsl.to_device(a), db) is None
    np.testing.assert_allclose(db.numpy(), ref(a), rtol=1e-6)
    assert fake.launches == []        # nothing ran on the "GPU"


def test_dynamic_shared_memory_is_allowed_then_passed_to_the_launch(fake):
    # 128 x 128 tiles: 64 KiB of shared memory, more than the 48 KiB a launch gets without asking
    func, ref = ck.matmul(128, 128, 128, 128, 128, 64, 8, 8)
    kernel = tdsl.build(func, target="cuda", arch="sm_90")
    assert "extern __shared__ __align__(1024) unsigned char tdsl_smem[];" in kernel.source

    def hook(name, grid, block, params):
        pa, pb, pc = (ctypes.c_void_p.from_address(p).value for p in _params(params, 3))
        _array(pc, (128, 128), np.float32)[...] = ref(_array(pa, (128, 128), np.float32),
                                                      _array(pb, (128, 128), np.float32))

    fake.state["hook"] = hook
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((128, 128)).astype("float32"), rng.standard_normal((128, 128)).astype("float32")
    c = np.zeros((128, 128), "float32")
    kernel(a, b, c)
    np.testing.assert_allclose(c, ref(a, b), rtol=1e-6)
    assert fake.func_attributes == [("mm_kernel", "MAX_DYNAMIC_SHARED_SIZE_BYTES", 65536)]
    assert fake.launches[-1][0] == "mm_kernel" and fake.launches[-1][4] == 65536   # sharedMemBytes
    kernel(a, b, c)                                   # allowed once per loaded function
    assert len(fake.func_attributes) == 1 and len(fake.launches) == 2


def test_static_kernels_launch_with_no_dynamic_shared_memory(fake):
    func, ref = ck.matmul()
    kernel = tdsl.build(func, target="cuda", arch="sm_90")
    fake.state["hook"] = lambda *args: None
    kernel(*[np.zeros((64, 64), "float32")] * 3)
    assert fake.launches[-1][4] == 0 and not hasattr(fake, "func_attributes")


def test_a_device_with_less_opt_in_shared_memory_refuses_the_launch(fake, monkeypatch):
    func, _ = ck.matmul(128, 128, 96, 128, 128, 96, 8, 8)     # 96 KiB: fits sm_90 at build
    kernel = tdsl.build(func, target="cuda", arch="sm_90")
    real = fake.cuDeviceGetAttribute

    def smaller(attr, dev):
        if attr.name == "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN":
            return fake.OK + (65536,)
        return real(attr, dev)

    monkeypatch.setattr(fake, "cuDeviceGetAttribute", smaller)
    fake.state["hook"] = lambda *args: None
    with pytest.raises(tdsl.TargetError, match=r"kernel 'mm_kernel' needs 99328 bytes of shared memory per block "
                                               r"\(98304 dynamic\); Fake H200 \(sm_90\) allows at most 65536"):
        kernel(np.zeros((128, 96), "float32"), np.zeros((96, 128), "float32"), np.zeros((128, 128), "float32"))
    assert fake.launches == [] and not hasattr(fake, "func_attributes")


def test_timer_events_are_destroyed(fake):
    """Every CUDA event the timing creates is destroyed: by kernel.time, by a `with` block (also
    when the timed call raises), by close(); a closed Timer refuses to measure."""
    func, ref = ck.elementwise(128)
    kernel = tdsl.build(func, target="cuda", arch="sm_90")
    fake.state["hook"] = lambda *a: None
    a = np.ones((4, 128), np.float32)
    seconds = kernel.time(a, number=3, repeat=2)
    assert seconds == pytest.approx(1e-3)                # the fake's 1 ms per launch
    assert fake.events_created == 2 and fake.live_events == set()

    def boom():
        raise RuntimeError("the timed call failed")

    with pytest.raises(RuntimeError, match="the timed call failed"), runtime.Timer() as timer:
        assert len(fake.live_events) == 2
        timer.measure(boom, 1)
    assert fake.events_created == 4 and fake.live_events == set()
    timer = runtime.Timer()
    timer.close()
    timer.close()                                        # a second close destroys nothing twice
    assert fake.events_created == 6 and fake.live_events == set()
    with pytest.raises(tdsl.TargetError, match="Timer.measure after close"):
        timer.measure(lambda: None, 1)
    runtime.Timer()                                      # dropped unclosed: collected, destroyed
    assert fake.events_created == 8 and fake.live_events == set()
