"""EmulatedKernel: a CUDA build whose kernels run on the CPU through the emulator.

Called exactly like a `CudaKernel` (same argument checks; numpy arrays or CPU DLPack tensors,
outputs left out are allocated and returned). Each launch runs every block under several
thread (and block) orders: ascending, descending, then a seeded shuffle; the buffers the kernel
writes are restored between runs and compared bit for bit afterwards. A difference is a race
(a missing barrier, threads or blocks exchanging data through memory without ordering, a thread
reading another thread's local buffer, or a read of memory nothing wrote: new shared/local
arrays start with a different byte pattern in each order), and raises `TargetError` naming the
buffer, an element and the block.
"""
from __future__ import annotations

import ctypes
import statistics
import threading
import time as _time

import numpy as np

from ....errors import ArgumentError, TargetError
from ....ir import Buffer
from ....tracebacks import public_entry
from .. import host_steps
from ..kernel import CudaKernel, _Arg, evaluate, output_shape, scalar_ctype, torch_outputs
from ..lower_gpu import MAX_BLOCK_DIM, MAX_GRID_DIM
from .compiler import launcher as _launcher
from .translate import EmuKernel, translate

CHECKED_SUFFIX = "_checked"   # the checked variant's kernel names (see emulator.checked_variant)

ORDER_NAMES = ("ascending", "descending", "shuffled")
_CALL_LOCK = threading.Lock()   # the emulator's state is per shared object and not re-entrant
MAX_LOCATE_BLOCKS = 4096


class EmulatedKernel(CudaKernel):
    """A CUDA function run by the CPU emulator: `source` is the CUDA C++ (what a GPU build
    compiles), `emulated_source` the host C++ translation unit actually compiled;
    `thread_orders` (1-3) how many thread orders each block runs under."""

    def __init__(self, func, plan, source, vector_params, unit: str, emu_kernels: list[EmuKernel], lib,
                 options: dict, cubin: bytes | None = None, arch: str | None = None):
        super().__init__(func, plan, source, cubin or b"", None, arch or "emulated", vector_params, options)
        self.emulated_source = unit
        self.thread_orders = int(options.get("thread_orders", 3))
        self.seed = 0
        self._lib = lib
        self._emu = {k.name: k for k in emu_kernels}
        self._fns = {}
        for k in emu_kernels:
            self._fns[k.name] = _launcher(lib, k.name)
        lib.tdsl_emu_error.restype = ctypes.c_char_p
        lib.tdsl_emu_switches.restype = ctypes.c_ulonglong
        lib.tdsl_emu_set_dynamic_shared.argtypes = [ctypes.c_longlong]
        self.checked_source: str | None = None
        self._checked: list[tuple] = []     # per launch: (spec, EmuKernel, launcher, its lib)
        self._checked_map: dict = {}        # the checked plan's parameters -> this plan's

    def add_checked_variant(self, plan, source: str, emu_kernels: list[EmuKernel], lib) -> None:
        """Also run, once before each launch, the kernel's checked variant (`lower_for_cuda(...,
        checked=True)`: per-axis checks of the accesses not proven in bounds); it must have the
        same launches as this kernel."""
        if len(plan.kernels) != len(self.kernels):
            raise TargetError(f"internal: the checked variant of {self.name!r} has {len(plan.kernels)} launches, "
                              f"the kernel {len(self.kernels)}")
        lib.tdsl_emu_error.restype = ctypes.c_char_p
        lib.tdsl_emu_set_dynamic_shared.argtypes = [ctypes.c_longlong]
        emu = {k.name: k for k in emu_kernels}
        self.checked_source = source
        self._checked = [(spec, emu[spec.name], _launcher(lib, spec.name), lib) for spec in plan.kernels]
        self._checked_map = dict(zip(plan.func.params, self.plan.func.params))
        self._checked_map.update(zip(plan.workspaces, self.plan.workspaces))

    def __repr__(self) -> str:
        return f"<EmulatedKernel {self.name}: {len(self.kernels)} launch(es) on the CPU emulator>"

    # ------------------------------------------------------------------------- arguments
    def _classify(self, p: Buffer, value) -> _Arg:
        device_array = _device_array_type()
        if device_array is not None and isinstance(value, device_array):
            # a GPU array (tdsl.to_device): run on a host copy, copied back after the call
            return _Arg(p, "host", host=value.numpy(), original=value)
        if isinstance(value, np.ndarray):
            return _Arg(p, "host", host=value, original=value)
        if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
            dev_type, _ = value.__dlpack_device__()
            if dev_type in (1, 3):  # kDLCPU, kDLCUDAHost
                return _Arg(p, "host", host=np.from_dlpack(value), original=value)
            raise ArgumentError(f"parameter {p.name!r}: an emulated CUDA kernel runs on the CPU and takes host "
                                f"arrays (numpy, CPU DLPack tensors or tdsl DeviceArrays), not a tensor on DLPack "
                                f"device type {dev_type}")
        raise ArgumentError(f"parameter {p.name!r}: expected an array (numpy, a CPU DLPack tensor or a DeviceArray), "
                            f"got {type(value).__name__}")

    # ------------------------------------------------------------------------- calling
    @public_entry
    def __call__(self, *args, stream=None, **kwargs):
        bufs, scalars, values = self._bind_all(args, kwargs, 0)
        arrays: dict[Buffer, np.ndarray] = {}
        copies: list[tuple[np.ndarray, np.ndarray]] = []
        outputs = []
        for arg in bufs:
            nd = self._nd[arg.param]
            if arg.mode == "host":
                arr = arg.host
                if not arr.flags.c_contiguous or not arr.flags.writeable:
                    work = np.ascontiguousarray(arr).copy()
                    if arg.param in self._written:
                        copies.append((arr, work))
                    arr = work
            else:  # a new output: NaN-like garbage, as uninitialised device memory would be
                arr = _poisoned(output_shape(nd, values), nd.dtype.numpy)
                outputs.append(arr)
            arrays[arg.param] = arr
        for w in self.plan.workspaces:
            arrays[w] = _poisoned((evaluate(w.shape[0], values),), w.dtype.numpy)
        if self._tensor_maps:
            from ..tensor_maps import fill_emulated

            fill_emulated(self._tensor_maps, arrays)
        def library(step) -> None:       # cuBLAS's stand-in: numpy's BLAS (host_steps.run_emulated)
            host_steps.run_emulated(step, arrays)

        with _CALL_LOCK:
            for i, spec in enumerate(self.kernels):
                host_steps.run_steps(self.plan.steps, i, library)
                if self._checked:
                    self._run_checked(self._checked[i], arrays, scalars, values)
                self._launch_emulated(spec, arrays, scalars, values)
            host_steps.run_steps(self.plan.steps, len(self.kernels), library)
        for orig, work in copies:
            np.copyto(orig, work)
        device_array = _device_array_type()
        on_device = device_array is not None and any(isinstance(a.original, device_array) for a in bufs)
        if on_device:
            for arg in bufs:
                if isinstance(arg.original, device_array) and arg.param in self._written:
                    arg.original.copy_from(arrays[arg.param])
            from ..runtime import to_device

            outputs = [to_device(o) for o in outputs]   # device in, device out (as on a GPU)
        if not outputs:
            return None
        outputs = torch_outputs(args, kwargs, outputs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _arguments(self, spec, emu: EmuKernel, arrays: dict, scalars: dict, values: dict, rename: dict):
        """The launcher's (pointers, sizes, ctypes kept alive, [(buffer, array) it writes]);
        `rename` maps another plan's parameters to this kernel's (the checked variant's)."""
        if len(emu.params) != len(spec.params):
            raise TargetError(f"kernel {spec.name!r}: the emulator read {len(emu.params)} parameters from its "
                              f"signature but the launch has {len(spec.params)}")
        n = len(spec.params)
        ptrs = (ctypes.c_void_p * n)()
        sizes = (ctypes.c_longlong * n)()
        keep = []
        written: list[tuple[Buffer, np.ndarray]] = []
        for i, (p, ep) in enumerate(zip(spec.params, emu.params)):
            p = rename.get(p, p)
            if isinstance(p, Buffer):
                arr = arrays[p]
                ptrs[i] = arr.ctypes.data
                sizes[i] = arr.size
                if not ep.const:
                    written.append((p, arr))
            else:
                value = scalars[p] if p in scalars else values[p]
                c = scalar_ctype(p.dtype, value)
                keep.append(c)
                ptrs[i] = ctypes.addressof(c)
        return ptrs, sizes, keep, written

    @staticmethod
    def _dims(spec, values: dict):
        grid = tuple(evaluate(e, values) for e in spec.dims("blockIdx"))
        block = tuple(evaluate(e, values) for e in spec.dims("threadIdx"))
        if min(grid) <= 0 or min(block) <= 0:
            return None
        # what a GPU refuses to launch (symbolic extents; constant ones are refused at build)
        for kind, dims, limits in (("blockIdx", grid, MAX_GRID_DIM), ("threadIdx", block, MAX_BLOCK_DIM)):
            for axis, got in zip("xyz", dims):
                if got > limits[axis]:
                    raise TargetError(f"kernel {spec.name!r}: {kind}.{axis} extent {got} exceeds the CUDA limit "
                                      f"{limits[axis]}")
        return grid, block, (ctypes.c_longlong * 6)(*grid, *block)

    def _run_checked(self, checked: tuple, arrays: dict, scalars: dict, values: dict) -> None:
        """The launch's checked variant, once (ascending order); the buffers it wrote are restored."""
        spec, emu, fn, lib = checked
        launch = self._dims(spec, values)
        if launch is None:
            return
        ptrs, sizes, _keep, written = self._arguments(spec, emu, arrays, scalars, values, self._checked_map)
        snapshot = [a.copy() for _, a in written]
        lib.tdsl_emu_set_dynamic_shared(spec.dynamic_shared_bytes)
        try:
            if fn(ptrs, sizes, launch[2], 0, self.seed, -1):
                msg = lib.tdsl_emu_error().decode(errors="replace")
                raise TargetError(f"kernel {spec.name.removesuffix(CHECKED_SUFFIX)!r} (emulated, per-axis checked "
                                  f"variant): {msg}")
        finally:
            for (_, a), s in zip(written, snapshot):
                np.copyto(a, s)

    def _launch_emulated(self, spec, arrays: dict, scalars: dict, values: dict) -> None:
        launch = self._dims(spec, values)
        if launch is None:
            return
        grid, _, dims = launch
        ptrs, sizes, _keep, written = self._arguments(spec, self._emu[spec.name], arrays, scalars, values, {})
        fn = self._fns[spec.name]
        self._lib.tdsl_emu_set_dynamic_shared(spec.dynamic_shared_bytes)   # the launch's sharedMemBytes

        def run(order: int, only_block: int = -1) -> None:
            if fn(ptrs, sizes, dims, order, self.seed, only_block):
                msg = self._lib.tdsl_emu_error().decode(errors="replace")
                raise TargetError(f"kernel {spec.name!r} (emulated, {ORDER_NAMES[order]} thread order): {msg}")

        orders = max(1, min(3, self.thread_orders))
        snapshot = [a.copy() for _, a in written] if orders > 1 else []
        self._lib.tdsl_emu_bank_clear()
        self._lib.tdsl_emu_global_count(1)      # counted in the first order's run, read by _count_shared
        try:
            run(0)
        except TargetError:
            self._lib.tdsl_emu_global_count(0)
            raise
        self._count_shared(spec.name)
        if orders == 1:
            return
        first = [a.copy() for _, a in written]
        for order in range(1, orders):
            for (_, a), s in zip(written, snapshot):
                np.copyto(a, s)
            run(order)
            for (p, a), ref in zip(written, first):
                bad = _first_difference(a, ref)
                if bad is not None:
                    self._report_race(spec, p, bad, written, snapshot, run, order, grid)

    def _report_race(self, spec, buf: Buffer, flat: int, written, snapshot, run, order: int, grid) -> None:
        """Find the block whose threads disagree (each block alone under two orders) and raise."""
        nblocks = grid[0] * grid[1] * grid[2]
        where = self._element(buf, flat, written)
        if nblocks <= MAX_LOCATE_BLOCKS:
            for b in range(nblocks):
                results = []
                for o in (0, order):
                    for (_, a), s in zip(written, snapshot):
                        np.copyto(a, s)
                    run(o, b)
                    results.append([a.copy() for _, a in written])
                for (p, _), r0, r1 in zip(written, results[0], results[1]):
                    bad = _first_difference(r1, r0)
                    if bad is not None:
                        idx = (b % grid[0], b // grid[0] % grid[1], b // (grid[0] * grid[1]))
                        raise TargetError(
                            f"kernel {spec.name!r} (emulated): threads of block {idx} disagree on "
                            f"{self._element(p, bad, written)} between the {ORDER_NAMES[0]} and {ORDER_NAMES[order]} "
                            "thread orders: a missing barrier, a thread reading another thread's buffer, or a read "
                            "of memory nothing wrote")
        raise TargetError(f"kernel {spec.name!r} (emulated): {where} differs between the {ORDER_NAMES[0]} and "
                          f"{ORDER_NAMES[order]} block orders, while each block alone agrees with itself: the blocks "
                          "of one launch exchange data through global memory, which has no order on a GPU; split "
                          "the computation into separate kernels (separate thread-bound loop nests)")

    def _element(self, buf: Buffer, flat: int, written) -> str:
        shape = self._nd.get(buf, buf).shape
        arr = {id(p): a for p, a in written}.get(id(buf))
        try:
            dims = tuple(int(s.value) for s in shape)
        except AttributeError:
            dims = None
        if dims is None and arr is not None:
            dims = arr.shape
        name = self._nd.get(buf, buf).name
        if dims and int(np.prod(dims)) > flat:
            idx = np.unravel_index(flat, dims)
            return f"{name}[{', '.join(str(int(i)) for i in idx)}]"
        return f"{name}[{flat}]"

    def with_source(self, source: str) -> EmulatedKernel:
        """The same launches running `source` (e.g. hand-edited CUDA text) instead of
        `self.source`; kernel names and parameters must stay as they are."""
        opts = dict(self.options)
        opts["thread_orders"] = self.thread_orders
        return EmulatedKernel.compile(self.func, self.plan, source, self._vector_params, opts)

    @classmethod
    def compile(cls, func, plan, source: str, vector_params, options: dict, cubin=None, arch=None) -> EmulatedKernel:
        """`source` translated for the emulator, compiled with the host C++ compiler and loaded."""
        from .compiler import find_compiler, load

        find_compiler()
        unit, kernels = translate(source)
        lib = load(unit, use_cache=options.get("use_cache", True))
        return cls(func, plan, source, vector_params, unit, kernels, lib, options, cubin=cubin, arch=arch)

    def _count_shared(self, kernel: str) -> None:
        """Keep the bank-conflict counters of `kernel`'s run just done (see `stats`)."""
        from ..stats import GlobalCounter, SharedCounter, parse_bank_report, parse_global_report

        self._lib.tdsl_emu_bank_report.restype = ctypes.c_char_p
        report = self._lib.tdsl_emu_bank_report().decode()
        counters: dict[str, list[SharedCounter]] = getattr(self, "_shared_counters", {})
        counters[kernel] = parse_bank_report(kernel, report, self.source)
        self._shared_counters = counters
        self._lib.tdsl_emu_global_report.restype = ctypes.c_char_p
        text = self._lib.tdsl_emu_global_report().decode()
        self._lib.tdsl_emu_global_count(0)
        globals_: dict[str, list[GlobalCounter]] = getattr(self, "_global_counters", {})
        globals_[kernel] = parse_global_report(kernel, text)
        self._global_counters = globals_

    def switches(self) -> int:
        """Fiber switches the emulator made so far (a measure of its work)."""
        return int(self._lib.tdsl_emu_switches())

    @public_entry
    def time(self, *args, number: int | None = None, repeat: int = 5, stream=None, **kwargs) -> float:
        """Median seconds per emulated call on the CPU (not GPU time), after a warm-up call."""
        self(*args, **kwargs)
        number = number or 1
        samples = []
        for _ in range(repeat):
            t0 = _time.perf_counter()
            for _ in range(number):
                self(*args, **kwargs)
            samples.append((_time.perf_counter() - t0) / number)
        return statistics.median(samples)


def _device_array_type():
    """runtime.DeviceArray when the runtime module is loaded (a DeviceArray can exist only then)."""
    import sys

    module = sys.modules.get(__name__.rsplit(".", 2)[0] + ".runtime")
    return getattr(module, "DeviceArray", None)


def _poisoned(shape, dtype) -> np.ndarray:
    arr = np.empty(shape, dtype)
    arr.view(np.uint8).fill(0xFF)
    return arr


def _first_difference(a: np.ndarray, b: np.ndarray) -> int | None:
    """The flat index of the first element whose bits differ, else None."""
    ua = a.reshape(-1).view(np.uint8).reshape(a.size, -1) if a.size else a.reshape(-1)
    ub = b.reshape(-1).view(np.uint8).reshape(b.size, -1) if b.size else b.reshape(-1)
    if ua.size == 0:
        return None
    diff = np.any(ua != ub, axis=1)
    if not diff.any():
        return None
    return int(np.argmax(diff))
