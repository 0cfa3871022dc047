"""A fake `cuda.bindings.driver` for tests without a GPU: its "device memory" is host memory and a
launch runs a Python stand-in of the kernel (`on_launch`). Import it after
`pytest.importorskip("cuda.bindings")`."""
import ctypes
import enum

from cuda.bindings import driver as real_driver


class FakeDriver:
    """Just enough of cuda.bindings.driver, with result tuples like the real one."""

    CUdeviceptr = real_driver.CUdeviceptr
    CUstream = real_driver.CUstream
    CUdevice_attribute = real_driver.CUdevice_attribute
    CUfunction_attribute = real_driver.CUfunction_attribute
    CUtensorMapDataType = real_driver.CUtensorMapDataType
    CUtensorMapInterleave = real_driver.CUtensorMapInterleave
    CUtensorMapSwizzle = real_driver.CUtensorMapSwizzle
    CUtensorMapL2promotion = real_driver.CUtensorMapL2promotion
    CUtensorMapFloatOOBfill = real_driver.CUtensorMapFloatOOBfill

    class CUresult(enum.IntEnum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_INVALID_VALUE = 1

    OK = (CUresult.CUDA_SUCCESS,)

    L2 = 1 << 16   # bytes of L2 cache

    def __init__(self, on_launch=None):
        self.on_launch = on_launch   # on_launch(name, grid, block, params): the kernel's stand-in
        self.blocks: dict[int, ctypes.Array] = {}
        self.launches: list[tuple] = []
        self.freed = 0

    def cuInit(self, flags):
        return self.OK

    def cuDeviceGetCount(self):
        return self.OK + (1,)

    def cuDeviceGet(self, i):
        return self.OK + (0,)

    def cuDevicePrimaryCtxRetain(self, dev):
        return self.OK + ("ctx",)

    def cuCtxSetCurrent(self, ctx):
        return self.OK

    def cuDeviceGetAttribute(self, attr, dev):
        name = attr.name
        values = {"COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0, "MAX_THREADS_PER_BLOCK": 1024,
                  "MAX_BLOCK_DIM_X": 1024, "MAX_BLOCK_DIM_Y": 1024, "MAX_BLOCK_DIM_Z": 64,
                  "MAX_GRID_DIM_X": 2**31 - 1, "MAX_GRID_DIM_Y": 65535, "MAX_GRID_DIM_Z": 65535,
                  "MAX_SHARED_MEMORY_PER_BLOCK": 49152, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
                  "L2_CACHE_SIZE": self.L2}
        return self.OK + (values[name.replace("CU_DEVICE_ATTRIBUTE_", "")],)

    def cuDeviceGetName(self, n, dev):
        return self.OK + (b"Fake H200\x00",)

    def cuMemAlloc(self, n):
        buf = (ctypes.c_uint8 * n)()
        addr = ctypes.addressof(buf)
        self.blocks[addr] = buf
        return self.OK + (self.CUdeviceptr(addr),)

    def cuMemFree(self, ptr):
        self.blocks.pop(int(ptr), None)
        self.freed += 1
        return self.OK

    def cuMemsetD8(self, ptr, value, n):
        ctypes.memset(int(ptr), value, n)
        return self.OK

    def cuMemcpyHtoD(self, dst, src, n):
        ctypes.memmove(int(dst), src, n)
        return self.OK

    def cuMemcpyDtoH(self, dst, src, n):
        ctypes.memmove(dst, int(src), n)
        return self.OK

    def cuModuleLoadData(self, image):
        assert ctypes.string_at(image, 4) == b"\x7fELF"
        return self.OK + ("module",)

    def cuModuleGetFunction(self, module, name):
        return self.OK + (name.decode(),)

    STATIC_SHARED = 1024   # what CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES reports (sm_90 CUBINs: the reserved KiB)
    # the CUDA driver API's CUfunction_attribute values the fake answers / accepts (cuda.h)
    FUNC_ATTRIBUTES = {0: "MAX_THREADS_PER_BLOCK", 1: "SHARED_SIZE_BYTES", 8: "MAX_DYNAMIC_SHARED_SIZE_BYTES"}

    def cuFuncGetAttribute(self, attr, fn):
        name = self.FUNC_ATTRIBUTES[int(attr)]
        assert attr.name == f"CU_FUNC_ATTRIBUTE_{name}"
        if name == "SHARED_SIZE_BYTES":
            return self.OK + (self.STATIC_SHARED,)
        return self.OK + (1024,)

    def cuFuncSetAttribute(self, fn, attr, value):
        """Records (function, attribute name, value) in `self.func_attributes`; like the driver,
        refuses more dynamic shared memory than the opt-in limit less the static part."""
        name = self.FUNC_ATTRIBUTES[int(attr)]
        assert attr.name == f"CU_FUNC_ATTRIBUTE_{name}" and name == "MAX_DYNAMIC_SHARED_SIZE_BYTES"
        if not hasattr(self, "func_attributes"):
            self.func_attributes = []
        self.func_attributes.append((fn, name, value))
        if value + self.STATIC_SHARED > 232448:
            return (self.CUresult.CUDA_ERROR_INVALID_VALUE,)
        self.allowed_dynamic = getattr(self, "allowed_dynamic", {})
        self.allowed_dynamic[fn] = value
        return self.OK

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        if shared > 49152 and getattr(self, "allowed_dynamic", {}).get(fn, 0) < shared:
            return (self.CUresult.CUDA_ERROR_INVALID_VALUE,)   # (the driver's answer without the attribute)
        self.launches.append((fn, (gx, gy, gz), (bx, by, bz), int(stream), shared))
        if self.on_launch is not None:
            self.on_launch(fn, (gx, gy, gz), (bx, by, bz), params)
        return self.OK

    class CUtensorMap:
        """The driver's opaque 128 bytes (16 words); the fake's words number its encodings."""

        def __init__(self, words):
            self.opaque = list(words)

    def cuTensorMapEncodeTiled(self, dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle,
                               l2_promotion, oob_fill):
        """Records the arguments (`self.tensor_maps`); the map's words are (call number << 32) + i."""
        if not hasattr(self, "tensor_maps"):
            self.tensor_maps = []
        self.tensor_maps.append(dict(dtype=dtype, rank=rank, address=int(address), dims=list(dims),
                                     strides=list(strides), box=list(box), element_strides=list(element_strides),
                                     interleave=interleave, swizzle=swizzle, l2_promotion=l2_promotion,
                                     oob_fill=oob_fill))
        n = len(self.tensor_maps)
        return self.OK + (self.CUtensorMap([(n << 32) + i for i in range(16)]),)

    # CUDA events: handles numbered from 1; `live_events` holds the ones created and not destroyed
    def cuEventCreate(self, flags):
        self.events_created = getattr(self, "events_created", 0) + 1
        self.live_events = getattr(self, "live_events", set()) | {self.events_created}
        return self.OK + (self.events_created,)

    def _event(self, event) -> bool:
        return event in getattr(self, "live_events", set())

    def cuEventRecord(self, event, stream):
        if not self._event(event):
            return (self.CUresult.CUDA_ERROR_INVALID_VALUE,)
        self.recorded = getattr(self, "recorded", {}) | {event: len(self.launches)}
        return self.OK

    def cuEventSynchronize(self, event):
        return self.OK if self._event(event) else (self.CUresult.CUDA_ERROR_INVALID_VALUE,)

    def cuEventElapsedTime(self, start, end):
        """One millisecond per launch between the two records."""
        if not (self._event(start) and self._event(end)):
            return (self.CUresult.CUDA_ERROR_INVALID_VALUE,)
        return self.OK + (float(self.recorded[end] - self.recorded[start]),)

    def cuEventDestroy(self, event):
        if not self._event(event):
            return (self.CUresult.CUDA_ERROR_INVALID_VALUE,)
        self.live_events.discard(event)
        return self.OK

    def cuStreamSynchronize(self, stream):
        return self.OK

    def cuCtxSynchronize(self):
        return self.OK

    def cuGetErrorName(self, err):
        return self.OK + (b"CUDA_ERROR_FAKE",)

    def cuGetErrorString(self, err):
        return self.OK + (b"fake",)
