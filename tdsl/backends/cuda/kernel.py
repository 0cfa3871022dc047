"""CudaKernel: a compiled CUDA function called like a numpy function (docs/calling.md).

Arguments: `DeviceArray`s and CUDA `__dlpack__` tensors (PyTorch, CuPy) are used in place;
numpy arrays (and CPU DLPack tensors) are copied in and, when the function writes them, copied
back. Outputs left out are allocated (on the device when the call gave device tensors, else as
numpy arrays) and returned. Every argument is checked first (count, dtype, shape, symbolic
dimensions, layout, device), so a wrong call raises `tdsl.ArgumentError` even without a GPU;
running needs one (`tdsl.TargetError` otherwise).
"""
from __future__ import annotations

import ctypes
import statistics
import time as _time
from dataclasses import dataclass

import numpy as np

from ...dtypes import DataType
from ...errors import ArgumentError
from ...ir import Buffer, BufferStore, Call, IntImm, PrimExpr, PrimFunc, Var, collect
from ...ir.opaque_calls import TMA_STORE
from ...tracebacks import public_entry
from .plan import HostPlan, evaluate  # noqa: F401 (evaluate: public here too)

_MISSING = object()


def output_shape(buf: Buffer, values: dict[Var, int]) -> tuple[int, ...]:
    """The shape of an output left out of the call; ArgumentError naming the parameter and the
    expression when the given sizes make a dimension negative."""
    shape = tuple(evaluate(s, values) for s in buf.shape)
    if any(n < 0 for n in shape):
        from ...script.printer import message_text

        bad = ", ".join(f"{message_text(s)} = {n}" for s, n in zip(buf.shape, shape) if n < 0)
        used = sorted({v for s in buf.shape for v in collect(s, Var) if v in values}, key=lambda v: v.name)
        bound = ", ".join(f"{v.name} = {values[v]}" for v in used)
        raise ArgumentError(f"cannot allocate output {buf.name!r}: its dimension {bad} is negative with {bound}; "
                            f"pass {buf.name!r} or sizes that make it non-negative")
    return shape


_CTYPES = {"int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32, "int64": ctypes.c_int64,
           "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32,
           "uint64": ctypes.c_uint64, "float32": ctypes.c_float, "float64": ctypes.c_double, "bool": ctypes.c_bool}


def scalar_ctype(dt: DataType, value):
    """A ctypes value holding `value` as the kernel parameter type `dt`."""
    name = str(dt)
    if name in _CTYPES:
        return _CTYPES[name](value)
    if dt.bits == 16:  # half / bfloat16: their bits
        return ctypes.c_uint16(int(np.asarray(value, dtype=dt.numpy).view(np.uint16)))
    raise ArgumentError(f"scalar parameters of dtype {dt} are not supported by the CUDA backend")


@dataclass
class _Arg:
    """One bound buffer argument."""

    param: Buffer
    mode: str                 # "device" (used in place), "host" (copied), "new" (allocated)
    ptr: int = 0
    host: np.ndarray | None = None
    original: object = None
    device: object = None     # DeviceArray holding a host copy or a new output
    keep: tuple = ()


class CudaKernel:
    """A compiled CUDA function: `source` (CUDA C++), `cubin` (bytes), `ptx` (when asked),
    `arch`, `kernels` (the launches in order); call it with arrays."""

    def __init__(self, func: PrimFunc, plan: HostPlan, source: str, cubin: bytes, ptx: str | None, arch: str,
                 vector_params: dict[str, set[str]], options: dict):
        from ...ir.attrs import FLAT_PARAMS as FLAT_PARAMS_ATTR
        from ...ir.attrs import get_attr

        self.func = func
        self.plan = plan
        self.lowered = plan.func
        self.source = source
        self.cubin = cubin
        self.ptx = ptx
        self.arch = arch
        self.options = dict(options)
        self.kernels = plan.kernels
        self.name = func.name
        self._vector_params = vector_params
        self._module = None
        self._module_arch = arch
        flat = plan.func.buffer_params
        originals = get_attr(plan.func, FLAT_PARAMS_ATTR, None) or flat
        self._nd = dict(zip(flat, originals))
        # what the function writes, read from the block IR: tensor intrinsics write through extern
        # calls in the lowered code, but their descriptions still store in the original
        stored = {n.buffer for n in collect(func.body, BufferStore)}
        stored |= {c.args[0].buffer for c in collect(func.body, Call) if c.op == TMA_STORE}   # (a TMA store's C)
        self._written = {b for b, orig in zip(flat, func.buffer_params) if orig in stored}
        self._params = list(plan.func.params)
        from .tensor_maps import resolve

        self._tensor_maps = resolve(func, plan)   # TMA tensor maps the call path encodes

    def __repr__(self) -> str:
        return f"<CudaKernel {self.name} for {self.arch}: {len(self.kernels)} launch(es)>"

    # ------------------------------------------------------------------------- binding
    def _bind(self, args, kwargs) -> tuple[dict, dict]:
        params = self._params
        if len(args) > len(params):
            raise ArgumentError(f"{self.name}() takes {len(params)} arguments "
                                f"({', '.join(p.name for p in params)}), got {len(args)}")
        given: dict = {}
        for p, a in zip(params, args):
            given[p] = a
        names = {p.name: p for p in params}
        for k, v in kwargs.items():
            if k not in names:
                raise ArgumentError(f"{self.name}() has no parameter {k!r}; parameters: "
                                    f"{', '.join(p.name for p in params)}")
            if names[k] in given:
                raise ArgumentError(f"{self.name}() got parameter {k!r} twice")
            given[names[k]] = v
        for p in params:
            if p not in given and not (isinstance(p, Buffer) and p in self._written):
                raise ArgumentError(f"{self.name}() is missing parameter {p.name!r}"
                                    + (" (only outputs may be left out)" if isinstance(p, Buffer) else ""))
        return given, names

    def _classify(self, p: Buffer, value) -> _Arg:
        from . import runtime

        if isinstance(value, runtime.DeviceArray):
            return _Arg(p, "device", value.ptr, original=value, keep=(value,))
        if isinstance(value, np.ndarray):
            return _Arg(p, "host", host=value, original=value)
        if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
            dev_type, _ = value.__dlpack_device__()
            if dev_type in (runtime.KDL_CPU, runtime.KDL_CUDA_HOST):
                return _Arg(p, "host", host=np.from_dlpack(value), original=value)
            if dev_type in (runtime.KDL_CUDA, runtime.KDL_CUDA_MANAGED):
                return _Arg(p, "dlpack", original=value)
            raise ArgumentError(f"parameter {p.name!r}: a tensor on DLPack device type {dev_type} cannot be "
                                "used by a CUDA kernel; expected a CUDA tensor or host memory")
        raise ArgumentError(f"parameter {p.name!r}: expected an array (numpy, DeviceArray or a DLPack tensor), "
                            f"got {type(value).__name__}")

    def _check_buffer(self, arg: _Arg, dims: dict, stream: int, later: list) -> None:
        from . import runtime

        p, nd = arg.param, self._nd[arg.param]
        want = nd.dtype
        if arg.mode == "host":
            arr = arg.host
            dtype_ok = arr.dtype == want.numpy
            shape, strides = arr.shape, None
            got = str(arr.dtype)
        elif arg.mode == "device":
            dtype_ok = arg.original.dtype == want
            shape, strides, got = arg.original.shape, None, str(arg.original.dtype)
        else:  # dlpack
            view = runtime.read_dlpack(arg.original, stream)
            arg.keep, arg.ptr = view.keepalive, view.ptr
            dtype_ok = view.dtype == want
            shape, strides, got = view.shape, view.strides, str(view.dtype)
        if not dtype_ok:
            raise ArgumentError(f"parameter {p.name!r}: expected dtype {want}, got {got}")
        if len(shape) != len(nd.shape):
            raise ArgumentError(f"parameter {p.name!r}: expected {len(nd.shape)} dimensions "
                                f"{_shape_text(nd.shape)}, got shape {tuple(shape)}")
        for axis, (s, n) in enumerate(zip(nd.shape, shape)):
            if isinstance(s, (IntImm, Var)):
                self._match_dim(p, axis, s, int(n), dims, tuple(shape))
            else:   # an expression ("m + 1"): checked once every name is bound (_check_expressions)
                later.append((p, axis, s, int(n), tuple(shape)))
        if strides is not None and not _compact(shape, strides):
            raise ArgumentError(f"parameter {p.name!r}: the tensor is not contiguous (strides {tuple(strides)} "
                                f"for shape {tuple(shape)}); pass .contiguous() / a compact copy")

    def _match_dim(self, p: Buffer, axis: int, s: PrimExpr, n: int, dims: dict, shape: tuple) -> None:
        if isinstance(s, IntImm):
            if s.value != n:
                raise ArgumentError(f"parameter {p.name!r}: expected shape {_shape_text(self._nd[p].shape)}, got "
                                    f"{shape} (dimension {axis} is {n}, not {s.value})")
            return
        if isinstance(s, Var):
            if s in dims and dims[s][0] != n:
                first, where = dims[s]
                raise ArgumentError(f"parameter {p.name!r}: dimension {axis} is {n} but symbolic dimension "
                                    f"{s.name!r} is already {first} from {where}")
            dims.setdefault(s, (n, f"parameter {p.name!r}"))

    def _check_expressions(self, later: list, values: dict) -> None:
        """The array dimensions declared as expressions of the sizes ("m + 1"), now that the sizes
        are bound by the other dimensions and the scalars."""
        from ...script.printer import message_text

        for p, axis, s, n, shape in later:
            free = sorted({v.name for v in collect(s, Var) if v not in values})
            if free:
                raise ArgumentError(f"parameter {p.name!r}: dimension {axis} is declared {message_text(s)}, but "
                                    f"no argument gives {', '.join(repr(f) for f in free)} by itself; pass an "
                                    "array whose dimension is exactly it (or the scalar)")
            want = evaluate(s, values)
            if want != n:
                used = ", ".join(f"{v.name} = {values[v]}" for v in sorted(set(collect(s, Var)), key=lambda v: v.name))
                raise ArgumentError(f"parameter {p.name!r}: expected shape {_shape_text(self._nd[p].shape)}, got "
                                    f"{shape} (dimension {axis} is {n}, not {message_text(s)} = {want} with {used})")

    def _bind_all(self, args, kwargs, stream: int):
        given, _ = self._bind(args, kwargs)
        dims: dict = {}
        later: list = []     # dimensions declared as expressions, checked once the names are bound
        bufs: list[_Arg] = []
        scalars: dict[Var, object] = {}
        for p in self._params:   # scalars first: one that names a dimension must match the arrays
            if isinstance(p, Var):
                value = scalars[p] = _check_scalar(p, given[p])
                if p.dtype.is_integer and isinstance(value, int):
                    dims[p] = (int(value), f"parameter {p.name!r}")
        for p in self._params:
            if isinstance(p, Var):
                continue
            if p not in given:
                bufs.append(_Arg(p, "new"))
                continue
            arg = self._classify(p, given[p])
            self._check_buffer(arg, dims, stream, later)
            if arg.mode == "host" and p in self._written and not arg.host.flags.writeable:
                raise ArgumentError(f"parameter {p.name!r}: the kernel writes it but the array given is read-only")
            bufs.append(arg)
        values = {v: n for v, (n, _) in dims.items()}
        values.update({v: s for v, s in scalars.items() if v.dtype.is_integer})
        self._check_expressions(later, values)
        for arg in bufs:
            if arg.mode == "new":
                nd = self._nd[arg.param]
                for s in nd.shape:
                    if isinstance(s, Var) and s not in values:
                        raise ArgumentError(f"output {arg.param.name!r} was left out but its shape uses "
                                            f"{s.name!r}, which no other argument determines; pass it")
        return bufs, scalars, values

    # ------------------------------------------------------------------------- calling
    def _ensure_module(self):
        from . import runtime

        info = runtime.device_info()
        if self._module is None:
            cubin = self.cubin
            if info.arch != self.arch.removesuffix("a"):   # (sm_90a code runs on an sm_90 device)
                # a CUBIN runs only on its own architecture family: compile for this device
                from .nvrtc import compile_cuda

                cubin = compile_cuda(self.source, info.arch).cubin
                self._module_arch = info.arch
            self._module = runtime.Module(cubin, [k.name for k in self.kernels])
        return self._module

    @property
    def notes(self) -> list[str]:
        """What the build could not do as the schedule asked (a `vectorize` left scalar, and why);
        tdsl.build warns (tdsl.PerformanceWarning) when there are any. An emulated kernel adds,
        after a call, the shared-memory bank conflicts its run counted (`stats`)."""
        from ...ir.attrs import LOWER_NOTES, get_attr

        return [str(n) for n in get_attr(self.plan.func, LOWER_NOTES, ())] + self._shared_stats().notes()

    def _shared_stats(self):
        from .stats import KernelStats

        return KernelStats(shared=[c for rows in getattr(self, "_shared_counters", {}).values() for c in rows],
                           global_=[c for rows in getattr(self, "_global_counters", {}).values() for c in rows])

    @property
    def stats(self):
        """A `tdsl.backends.cuda.stats.KernelStats`: registers, spill stack, shared and local memory
        per kernel from the CUBIN (cuobjdump, pip wheel nvidia-cuda-cuobjdump), and for an emulated
        kernel after a call the ldmatrix bank-conflict counters per shared array. `print(k.stats)`
        shows a table."""
        from .stats import resource_usage

        if not hasattr(self, "_resources"):
            self._resources = resource_usage(self.cubin) if self.cubin else None
        out = self._shared_stats()
        out.resources = self._resources
        for spec in self.kernels if self._resources else []:   # (cuobjdump counts static shared memory only)
            if spec.name in self._resources:
                self._resources[spec.name]["dynamic_shared"] = spec.dynamic_shared_bytes
        return out

    @public_entry
    def __call__(self, *args, stream=None, **kwargs):
        from . import host_steps, runtime

        handle = runtime.stream_handle(stream)
        bufs, scalars, values = self._bind_all(args, kwargs, handle)
        module = self._ensure_module()
        any_device = any(a.mode in ("device", "dlpack") for a in bufs)
        ptrs: dict[Buffer, int] = {}
        for arg in bufs:
            nd = self._nd[arg.param]
            if arg.mode == "host":
                arr = np.ascontiguousarray(arg.host)
                arg.device = runtime.to_device(arr)
                arg.ptr = arg.device.ptr
            elif arg.mode == "new":
                shape = output_shape(nd, values)
                arg.device = runtime.device_array(shape, nd.dtype, zero=False)
                arg.ptr = arg.device.ptr
            ptrs[arg.param] = arg.ptr
        workspaces = []
        for w in self.plan.workspaces:
            size = evaluate(w.shape[0], values)
            ws = runtime.device_array((size,), w.dtype, zero=False)
            workspaces.append(ws)
            ptrs[w] = ws.ptr
        if self._tensor_maps:
            from .tensor_maps import fill_device

            fill_device(self._tensor_maps, ptrs, handle)
        for at, spec in enumerate(self.kernels):
            host_steps.run_steps(self.plan.steps, at, lambda step: host_steps.run_cublas(step, ptrs, handle))
            self._launch(module, spec, ptrs, scalars, values, handle)
        host_steps.run_steps(self.plan.steps, len(self.kernels), lambda step: host_steps.run_cublas(step, ptrs, handle))
        outputs = []
        for arg in bufs:
            if arg.mode == "host" and arg.param in self._written:
                back = arg.device.numpy(stream=handle)
                np.copyto(arg.host, back)
            if arg.mode == "new":
                outputs.append(arg.device if any_device else arg.device.numpy(stream=handle))
        del workspaces
        if not outputs:
            return None
        outputs = torch_outputs(args, kwargs, outputs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _launch(self, module, spec, ptrs: dict, scalars: dict, values: dict, stream: int) -> None:
        from . import runtime

        grid = tuple(evaluate(e, values) for e in spec.dims("blockIdx"))
        block = tuple(evaluate(e, values) for e in spec.dims("threadIdx"))
        if min(grid) <= 0 or min(block) <= 0:
            return  # an empty launch: nothing to do
        runtime.check_launch(module, spec.name, grid, block, spec.shared_bytes, spec.dynamic_shared_bytes)
        cargs = []
        for p in spec.params:
            if isinstance(p, Buffer):
                ptr = ptrs[p]
                if p.name in self._vector_params.get(spec.name, ()) and ptr % 16:
                    raise ArgumentError(f"parameter {p.name!r}: kernel {spec.name!r} uses 16-byte vector loads and "
                                        f"stores on it, but its data pointer 0x{ptr:x} is not 16-byte aligned; "
                                        "pass an aligned tensor (e.g. not an offset view)")
                cargs.append(ctypes.c_void_p(ptr))
            elif p in scalars:
                cargs.append(scalar_ctype(p.dtype, scalars[p]))
            else:
                cargs.append(scalar_ctype(p.dtype, values[p]))
        runtime.launch(module, spec.name, grid, block, cargs, stream, spec.dynamic_shared_bytes)

    @public_entry
    def export(self, path: str, name: str | None = None, archs: list[str] | None = None) -> str:
        """Write CUBINs for `archs` (default: this kernel's arch) and `path/NAME.h`, a host
        launcher through the CUDA driver API (no Python, no NVRTC) that also encodes the TMA
        tensor maps the call path would; returns the header's path (tdsl.backends.cuda.export)."""
        from .export import export_cuda

        return export_cuda(self, path, name, archs)

    @public_entry
    def time(self, *args, number: int | None = None, repeat: int = 5, stream=None, **kwargs) -> float:
        """Median seconds per call (CUDA events), after a warm-up call. Pass device arrays to time
        the kernels alone (numpy arguments include the copies)."""
        from . import runtime

        self(*args, stream=stream, **kwargs)
        runtime.synchronize()
        handle = runtime.stream_handle(stream)
        if number is None:
            t0 = _time.perf_counter()
            self(*args, stream=stream, **kwargs)
            runtime.synchronize()
            once = max(_time.perf_counter() - t0, 1e-6)
            number = max(1, min(1000, int(0.05 / once)))
        with runtime.Timer(handle) as timer:
            samples = [timer.measure(lambda: self(*args, stream=stream, **kwargs), number) for _ in range(repeat)]
        return statistics.median(samples)


def torch_outputs(args, kwargs, outputs: list) -> list:
    """Torch tensors in, torch tensors out: the outputs (numpy arrays, DeviceArrays) as torch
    tensors sharing their memory when an argument is a torch tensor (torch is never imported
    here: only used if loaded)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not any(isinstance(v, torch.Tensor) for v in (*args, *kwargs.values())):
        return outputs
    out = []
    for o in outputs:
        if isinstance(o, np.ndarray):
            out.append(torch.from_numpy(o.view(np.int16)).view(torch.bfloat16) if o.dtype.name == "bfloat16"
                       else torch.from_numpy(o))
        else:
            out.append(torch.from_dlpack(o))
    return out


def _check_scalar(p: Var, value):
    dt = p.dtype
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    if dt.is_bool:
        if not isinstance(value, (bool, int)):
            raise ArgumentError(f"parameter {p.name!r}: expected a bool, got {type(value).__name__}")
        return bool(value)
    if dt.is_integer:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentError(f"parameter {p.name!r}: expected an integer ({dt}), got {type(value).__name__}")
        lo, hi = (-(1 << (dt.bits - 1)), (1 << (dt.bits - 1)) - 1) if dt.is_int else (0, (1 << dt.bits) - 1)
        if not lo <= value <= hi:
            raise ArgumentError(f"parameter {p.name!r}: {value} does not fit in {dt}")
        return value
    if dt.is_float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ArgumentError(f"parameter {p.name!r}: expected a number ({dt}), got {type(value).__name__}")
        return float(value)
    raise ArgumentError(f"parameter {p.name!r}: scalars of dtype {dt} are not supported")


def _compact(shape, strides) -> bool:
    expect = 1
    for n, s in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def _shape_text(shape) -> str:
    from ...script.printer import message_text

    parts = [str(s.value) if isinstance(s, IntImm) else s.name if isinstance(s, Var) else message_text(s)
             for s in shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

