"""The CUDA driver side: device and context, module loading, launches, device arrays, DLPack.

Everything goes through `cuda.bindings.driver`, imported on first use, so importing tdsl
never needs cuda-python. Without a driver or GPU every entry point raises `tdsl.TargetError`.

`device_array(shape, dtype)` and `to_device(array)` give a `DeviceArray`: a contiguous GPU
array with `shape`, `dtype`, `.numpy()` (copy back), and the DLPack protocol
(`__dlpack__`, `__dlpack_device__` = (kDLCUDA, device id)), so PyTorch / CuPy / JAX can take it.
"""
from __future__ import annotations

import contextlib
import ctypes
import threading
from dataclasses import dataclass

import numpy as np

from ...dtypes import DataType, as_dtype, from_dlpack, to_dlpack
from ...errors import ArgumentError, TargetError
from .shared_memory import STATIC_LIMIT as STATIC_SHARED_LIMIT

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13

_NO_GPU = ("no CUDA driver/GPU is available on this machine ({why}); "
           "tdsl.build(func, target='cuda', emulate=True) runs the same CUDA C++ here on the CPU (an "
           "emulator that checks races and bounds), tdsl.build(func, target='cuda', arch='sm_90') still "
           "compiles (kernel.source, kernel.cubin), and target='cpu' runs the same function natively")


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise TargetError(_NO_GPU.format(why='cuda-python is not installed: pip install "tdsl[cuda]"')) from exc
    return driver


def check(result, what: str):
    """Unpack a cuda.bindings result tuple; TargetError naming the call and the CUDA error."""
    driver = _driver()
    err = result[0]
    if err != driver.CUresult.CUDA_SUCCESS:
        try:
            name = driver.cuGetErrorName(err)[1].decode()
            text = driver.cuGetErrorString(err)[1].decode()
        except Exception:  # noqa: BLE001 (the message must not fail)
            name, text = str(err), ""
        raise TargetError(f"CUDA {what} failed: {name}: {text}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


# ----------------------------------------------------------------------------- device

@dataclass
class DeviceInfo:
    ordinal: int
    name: str
    arch: str
    max_threads_per_block: int
    max_block_dim: tuple[int, int, int]
    max_grid_dim: tuple[int, int, int]
    max_shared_per_block: int
    max_shared_per_block_optin: int


class _State:
    lock = threading.Lock()
    info: DeviceInfo | None = None
    context = None
    device = None
    error: str | None = None   # the message: each raise is a new exception with its own traceback
    local = threading.local()


def _init() -> DeviceInfo:
    driver = _driver()
    try:
        (err,) = driver.cuInit(0)
    except RuntimeError as exc:  # DynamicLibNotFoundError: no libcuda on this machine
        raise TargetError(_NO_GPU.format(why=f"the NVIDIA driver library could not be loaded: {exc}")) from None
    if err != driver.CUresult.CUDA_SUCCESS:
        raise TargetError(_NO_GPU.format(why=f"cuInit failed with {err.name if hasattr(err, 'name') else err}"))
    count = check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    if not count:
        raise TargetError(_NO_GPU.format(why="the driver reports no CUDA device"))
    dev = check(driver.cuDeviceGet(0), "cuDeviceGet")
    ctx = check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    A = driver.CUdevice_attribute

    def attr(a) -> int:
        return int(check(driver.cuDeviceGetAttribute(a, dev), "cuDeviceGetAttribute"))

    major = attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    minor = attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    try:
        raw = check(driver.cuDeviceGetName(256, dev), "cuDeviceGetName")
        name = raw.split(b"\x00")[0].decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    except TargetError:
        name = "CUDA device 0"
    info = DeviceInfo(
        0, name, f"sm_{major}{minor}", attr(A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        (attr(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X), attr(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
         attr(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)),
        (attr(A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X), attr(A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
         attr(A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)),
        attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
        attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN))
    _State.device, _State.context = dev, ctx
    return info


def device_info() -> DeviceInfo:
    """The GPU (device 0), its context made current on this thread; TargetError without one."""
    if _State.info is None:
        with _State.lock:
            if _State.error is not None:
                raise TargetError(_State.error)
            if _State.info is None:
                try:
                    _State.info = _init()
                except TargetError as exc:
                    _State.error = str(exc)
                    raise
                _State.local.current = True
    if not getattr(_State.local, "current", False):
        check(_driver().cuCtxSetCurrent(_State.context), "cuCtxSetCurrent")
        _State.local.current = True
    return _State.info


def has_gpu() -> bool:
    """True when a CUDA device can be used (never raises)."""
    try:
        device_info()
        return True
    except TargetError:
        return False


def synchronize() -> None:
    device_info()
    check(_driver().cuCtxSynchronize(), "cuCtxSynchronize (a kernel may have failed)")


def stream_handle(stream) -> int:
    """An int CUstream handle from None, an int, a CUstream, or a torch/CuPy stream object."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    for attr in ("cuda_stream", "ptr", "handle"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise ArgumentError(f"stream: expected None, an int handle, a CUstream or a torch/CuPy stream, "
                            f"got {type(stream).__name__}") from None


# ----------------------------------------------------------------------------- memory

class _Allocation:
    """Owns one cuMemAlloc block; freed when the last DeviceArray / export using it is gone."""

    __slots__ = ("__weakref__", "nbytes", "ptr")

    def __init__(self, nbytes: int):
        device_info()
        driver = _driver()
        self.nbytes = nbytes
        self.ptr = int(check(driver.cuMemAlloc(max(nbytes, 1)), f"cuMemAlloc({nbytes} bytes)"))

    def __del__(self):
        ptr, self.ptr = getattr(self, "ptr", 0), 0
        if ptr:
            try:
                from cuda.bindings import driver

                driver.cuMemFree(driver.CUdeviceptr(ptr))
            except Exception:  # noqa: BLE001, S110 (at exit the driver may be gone)
                pass


class DeviceArray:
    """A contiguous array in GPU memory. `numpy()` copies it back; DLPack exports it."""

    def __init__(self, shape, dtype, *, _alloc: _Allocation | None = None):
        self.shape = tuple(int(s) for s in shape)
        self.dtype: DataType = as_dtype(dtype)
        if any(s < 0 for s in self.shape):
            raise ValueError(f"negative dimension in shape {self.shape}")
        self.size = int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        self.nbytes = self.size * self.dtype.itemsize * self.dtype.lanes
        self._alloc = _alloc if _alloc is not None else _Allocation(self.nbytes)

    @property
    def ptr(self) -> int:
        """The device address of element 0."""
        return self._alloc.ptr

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device=cuda:0)"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def numpy(self, stream=None) -> np.ndarray:
        """A host copy (waits for work queued on the default stream / `stream`)."""
        out = np.empty(self.shape, dtype=self.dtype.numpy)
        copy_to_host(out, self.ptr, stream)
        return out

    def copy_from(self, array, stream=None) -> None:
        """Overwrite the contents with a host array of the same shape and dtype."""
        arr = np.ascontiguousarray(array, dtype=self.dtype.numpy)
        if arr.shape != self.shape:
            raise ValueError(f"shape {arr.shape} does not match the DeviceArray's {self.shape}")
        copy_to_device(self.ptr, arr, stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule ("dltensor") viewing this array; the memory stays alive until the
        consumer calls the deleter (or the unconsumed capsule is collected)."""
        if dl_device is not None and tuple(dl_device) != (KDL_CUDA, 0):
            raise BufferError(f"a DeviceArray lives on cuda:0 and cannot be exported to device {dl_device}")
        if copy:
            raise BufferError("DeviceArray.__dlpack__ does not copy (copy=True was requested)")
        # work is queued on the legacy default stream, which consumers' streams synchronise with
        return export_dlpack(self.ptr, self.shape, self.dtype, (KDL_CUDA, 0), self._alloc)


def _byte_count(arr: np.ndarray) -> int:
    return int(arr.nbytes)


def copy_to_device(dst_ptr: int, host: np.ndarray, stream=None) -> None:
    driver = _driver()
    host = np.ascontiguousarray(host)
    if host.nbytes == 0:
        return
    src = host.__array_interface__["data"][0]
    handle = stream_handle(stream)
    if handle:
        check(driver.cuMemcpyHtoDAsync(driver.CUdeviceptr(dst_ptr), src, host.nbytes, driver.CUstream(handle)),
              "cuMemcpyHtoDAsync")
        check(driver.cuStreamSynchronize(driver.CUstream(handle)), "cuStreamSynchronize")
    else:
        check(driver.cuMemcpyHtoD(driver.CUdeviceptr(dst_ptr), src, host.nbytes), "cuMemcpyHtoD")


def copy_to_host(host: np.ndarray, src_ptr: int, stream=None) -> None:
    driver = _driver()
    if not host.flags.c_contiguous:
        raise ValueError("copy_to_host needs a contiguous destination")
    if host.nbytes == 0:
        return
    dst = host.__array_interface__["data"][0]
    handle = stream_handle(stream)
    if handle:
        check(driver.cuStreamSynchronize(driver.CUstream(handle)), "cuStreamSynchronize (a kernel may have failed)")
    check(driver.cuMemcpyDtoH(dst, driver.CUdeviceptr(src_ptr), host.nbytes),
          "cuMemcpyDtoH (a kernel may have failed)")


def device_array(shape, dtype="float32", *, zero: bool = True) -> DeviceArray:
    """A new GPU array of `shape` and `dtype` (zero-filled unless zero=False)."""
    if isinstance(shape, int):
        shape = (shape,)
    arr = DeviceArray(shape, dtype)
    if zero and arr.nbytes:
        driver = _driver()
        check(driver.cuMemsetD8(driver.CUdeviceptr(arr.ptr), 0, arr.nbytes), "cuMemsetD8")
    return arr


def to_device(array, dtype=None) -> DeviceArray:
    """Copy a numpy array (or anything np.asarray takes) to a new DeviceArray."""
    host = np.asarray(array) if dtype is None else np.asarray(array, dtype=as_dtype(dtype).numpy)
    try:
        dt = as_dtype(host.dtype)
    except TypeError as exc:
        raise ArgumentError(f"to_device: {exc}") from None
    arr = DeviceArray(host.shape, dt)
    copy_to_device(arr.ptr, host)
    return arr


# ----------------------------------------------------------------------------- DLPack

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


_GET_POINTER = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_RAW_IS_VALID = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_RAW_GET_POINTER = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_CAPSULE_NEW = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR)(
    ("PyCapsule_New", ctypes.pythonapi))

# exported tensors: address of the DLManagedTensor -> (struct, shape array, owner); the entry
# keeps the memory alive until the consumer (or the capsule's destructor) calls the deleter
_EXPORTS: dict[int, tuple] = {}
_EXPORTS_LOCK = threading.Lock()


@_DELETER
def _dlpack_deleter(addr):
    try:
        with _EXPORTS_LOCK:
            _EXPORTS.pop(addr, None)
    except Exception:  # noqa: BLE001 - called from C during interpreter shutdown: never raise
        pass


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # an unconsumed capsule still named "dltensor" owns the tensor: release it
    try:
        if _RAW_IS_VALID(capsule, b"dltensor"):
            addr = _RAW_GET_POINTER(capsule, b"dltensor")
            if addr:
                _dlpack_deleter(addr)
    except Exception:  # noqa: BLE001 - module globals may already be gone at shutdown
        pass


# C code (capsule destructors, DLPack consumers) may call these two callbacks while the
# interpreter shuts down, after this module's globals were cleared: their thunks must never be
# freed, or that call jumps into freed memory and kills the process.
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_dlpack_deleter))
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_capsule_destructor))


def export_dlpack(ptr: int, shape: tuple[int, ...], dtype: DataType, device: tuple[int, int], owner):
    """A "dltensor" PyCapsule for contiguous memory at `ptr`, keeping `owner` alive."""
    managed = DLManagedTensor()
    shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    t = managed.dl_tensor
    t.data = ptr
    t.device = DLDevice(*device)
    t.ndim = len(shape)
    code, bits, lanes = to_dlpack(dtype)
    t.dtype = DLDataType(code, bits, lanes)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.POINTER(ctypes.c_int64)()   # NULL: compact row-major
    t.byte_offset = 0
    managed.deleter = _dlpack_deleter
    addr = ctypes.addressof(managed)
    with _EXPORTS_LOCK:
        _EXPORTS[addr] = (managed, shape_arr, owner)
    return _CAPSULE_NEW(addr, b"dltensor", _capsule_destructor)


@dataclass
class DLView:
    """What a DLPack producer exported: pointer, device, dtype, shape, strides (elements)."""

    ptr: int
    device_type: int
    device_id: int
    dtype: DataType
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    keepalive: tuple


def read_dlpack(obj, stream: int = 0) -> DLView:
    """Read a `__dlpack__` object's tensor through its capsule (not consumed: the producer's
    capsule destructor releases it when `keepalive` goes)."""
    handle = stream if stream else None
    try:
        capsule = obj.__dlpack__(stream=handle)
    except TypeError:
        capsule = obj.__dlpack__()
    addr = _GET_POINTER(capsule, b"dltensor")
    managed = DLManagedTensor.from_address(addr)
    t = managed.dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
    dt = from_dlpack(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    return DLView(int(t.data or 0) + int(t.byte_offset), t.device.device_type, t.device.device_id, dt, shape,
                  strides, (capsule, obj))


# ----------------------------------------------------------------------------- modules and launches

class Module:
    """A loaded CUBIN and its kernels."""

    def __init__(self, cubin: bytes, names: list[str]):
        device_info()
        driver = _driver()
        image = ctypes.create_string_buffer(cubin, len(cubin))
        self.handle = check(driver.cuModuleLoadData(ctypes.addressof(image)), "cuModuleLoadData")
        self.functions = {n: check(driver.cuModuleGetFunction(self.handle, n.encode()), f"cuModuleGetFunction({n})")
                          for n in names}
        A = driver.CUfunction_attribute
        self.max_threads = {n: int(check(driver.cuFuncGetAttribute(A.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f),
                                         "cuFuncGetAttribute")) for n, f in self.functions.items()}
        self.static_shared = {n: int(check(driver.cuFuncGetAttribute(A.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f),
                                           "cuFuncGetAttribute")) for n, f in self.functions.items()}
        self.dynamic_allowed: dict[str, int] = {}   # kernel -> MAX_DYNAMIC_SHARED_SIZE_BYTES set so far


def launch(module: Module, name: str, grid: tuple[int, int, int], block: tuple[int, int, int],
           args: list, stream: int = 0, dynamic_shared: int = 0) -> None:
    """cuLaunchKernel with `args` as ctypes values (their addresses form kernelParams) and
    `dynamic_shared` bytes of dynamic shared memory (allowed first when over 48 KiB)."""
    driver = _driver()
    if dynamic_shared > STATIC_SHARED_LIMIT and module.dynamic_allowed.get(name, 0) < dynamic_shared:
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(driver.cuFuncSetAttribute(module.functions[name], attr, dynamic_shared),
              f"cuFuncSetAttribute({name}, MAX_DYNAMIC_SHARED_SIZE_BYTES, {dynamic_shared})")
        module.dynamic_allowed[name] = dynamic_shared
    ptrs = (ctypes.c_void_p * max(len(args), 1))(*[ctypes.addressof(a) for a in args])
    check(driver.cuLaunchKernel(module.functions[name], *grid, *block, dynamic_shared, driver.CUstream(stream),
                                ctypes.addressof(ptrs), 0), f"cuLaunchKernel({name})")


def check_launch(module: Module, name: str, grid, block, shared_bytes: int, dynamic_shared: int = 0) -> None:
    """Clear errors for launches the device cannot run (`shared_bytes`: the kernel's shared buffers;
    `dynamic_shared`: the launch's dynamic bytes, on top of the static shared memory the CUBIN has)."""
    info = device_info()
    threads = block[0] * block[1] * block[2]
    limit = min(info.max_threads_per_block, module.max_threads[name])
    if threads > limit:
        raise TargetError(f"kernel {name!r} launches {threads} threads per block ({block[0]} x {block[1]} x "
                          f"{block[2]}) but {info.name} allows at most {limit} for it "
                          f"(device limit {info.max_threads_per_block}, register use limits the rest)")
    for axis, got, lim in zip("xyz", block, info.max_block_dim):
        if got > lim:
            raise TargetError(f"kernel {name!r}: threadIdx.{axis} extent {got} exceeds the device limit {lim}")
    for axis, got, lim in zip("xyz", grid, info.max_grid_dim):
        if got > lim:
            raise TargetError(f"kernel {name!r}: blockIdx.{axis} extent {got} exceeds the device limit {lim}")
    need = max(shared_bytes, module.static_shared.get(name, 0) + dynamic_shared if dynamic_shared else 0)
    limit = max(info.max_shared_per_block, info.max_shared_per_block_optin)
    if need > limit:
        raise TargetError(f"kernel {name!r} needs {need} bytes of shared memory per block"
                          f"{f' ({dynamic_shared} dynamic)' if dynamic_shared else ''}; {info.name} ({info.arch}) "
                          f"allows at most {info.max_shared_per_block_optin} (opt-in; {info.max_shared_per_block} "
                          "without): use smaller tiles or fewer pipeline stages")


class Timer:
    """CUDA events around a callable, in seconds. The two events live until `close()` (or the
    end of a `with` block, or the Timer's collection):

        with Timer(stream) as timer:
            seconds = timer.measure(lambda: kernel(a, b), number=10)
    """

    def __init__(self, stream: int = 0):
        driver = _driver()
        self.stream = stream
        self.start = self.end = None
        self.start = check(driver.cuEventCreate(0), "cuEventCreate")
        try:
            self.end = check(driver.cuEventCreate(0), "cuEventCreate")
        except TargetError:
            self.close()
            raise

    def measure(self, fn, number: int) -> float:
        if self.start is None or self.end is None:
            raise TargetError("Timer.measure after close(): make a new Timer")
        driver = _driver()
        check(driver.cuEventRecord(self.start, driver.CUstream(self.stream)), "cuEventRecord")
        for _ in range(number):
            fn()
        check(driver.cuEventRecord(self.end, driver.CUstream(self.stream)), "cuEventRecord")
        check(driver.cuEventSynchronize(self.end), "cuEventSynchronize (a kernel may have failed)")
        ms = check(driver.cuEventElapsedTime(self.start, self.end), "cuEventElapsedTime")
        return float(ms) / 1e3 / number

    def close(self) -> None:
        """Destroy the events (cuEventDestroy); a second call does nothing."""
        events, self.start, self.end = (self.start, self.end), None, None
        for event in events:
            if event is not None:
                check(_driver().cuEventDestroy(event), "cuEventDestroy")

    def __enter__(self) -> Timer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        with contextlib.suppress(Exception):   # (at exit the driver may be gone)
            self.close()
