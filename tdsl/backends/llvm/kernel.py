"""Kernel: a compiled CPU function, called like a numpy function (docs/calling.md).

The common call (numpy arrays of the right dtype, shape and layout) takes one ctypes call: the
generated entry receives the arrays themselves and checks them by reading numpy's array
struct. Anything unusual (a DLPack tensor, a non-contiguous input, a wrong argument) takes the
slow path here, which checks everything with messages that name the parameter, converts what
it may (copies of non-contiguous inputs, scalars to the parameter dtype) and calls the kernel
on raw pointers.
"""
from __future__ import annotations

import ctypes
import statistics
import sys
import time as _time

import numpy as np

from ...arith.evaluate import EvalError, eval_int
from ...config import config
from ...dtypes import DataType
from ...errors import ArgumentError, BoundsError, TargetError
from ...ir import Binary, Buffer, IntImm, PrimFunc, Var, collect
from ...ir.outputs import read_before_written
from ...tracebacks import USER_ERRORS, public_entry, user_frames
from .abi import numpy_layout_ok

_MISSING = object()
_CPU_DEVICES = (1, 3)   # DLPack kDLCPU, kDLCUDAHost (pinned host memory)


_FAST_OK: bool | None = None


def _ctype_of(dt: DataType):
    if dt.is_float:
        return ctypes.c_double
    return ctypes.c_uint64 if dt.is_uint else ctypes.c_int64


class _Param:
    """One parameter as the Kernel checks it."""

    __slots__ = ("dtype", "hi", "index", "is_buffer", "lo", "name", "np_dtype", "shape", "strides", "written")

    def __init__(self, index: int, p, written: bool):
        self.index = index
        self.name = p.name
        self.is_buffer = isinstance(p, Buffer)
        self.dtype: DataType = p.dtype
        self.np_dtype = p.dtype.numpy if not p.dtype.is_handle else None
        self.shape = tuple(p.shape) if self.is_buffer else ()
        self.strides = tuple(p.strides) if self.is_buffer else ()   # in elements; () for row-major
        if self.is_buffer and p.elem_offset is not None and not (isinstance(p.elem_offset, IntImm)
                                                                 and p.elem_offset.value == 0):
            raise TargetError(f"parameter {p.name!r} has an elem_offset; the CPU backend takes parameter "
                              f"buffers whose first element is the array's first element")
        self.written = written
        self.lo = self.hi = None
        if not self.is_buffer and p.dtype.is_integer:
            bits = p.dtype.bits
            self.lo, self.hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if p.dtype.is_int else (0, (1 << bits) - 1)

    def shape_text(self) -> str:
        from ...script.printer import message_text

        parts = [str(s.value) if isinstance(s, IntImm) else s.name if isinstance(s, Var) else message_text(s)
                 for s in self.shape]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


class Kernel:
    """A compiled function. Call it with arrays (destination passing) or leave outputs out.

    Attributes: `func` (the PrimFunc as given), `lowered` (what was compiled), `source` (LLVM IR
    as generated), `optimized_ir`, `asm`, `notes` (what the build could not do as asked),
    `target` (what it was built for: "cpu" for the host, else e.g. "cpu -mcpu=x86-64-v3"),
    `time(*args)`.
    """

    def __init__(self, func: PrimFunc, compiled, options: dict | None = None, target=None):
        global _FAST_OK
        if _FAST_OK is None:
            _FAST_OK = numpy_layout_ok()
        self.func = func
        self._lowered: PrimFunc | None = None
        self.target = "cpu" if target is None else str(target)
        self.options = dict(options or {})
        self._compiled = compiled
        meta = compiled.meta
        written = [p["written"] for p in meta["params"]]
        self._params = [_Param(i, p, w) for i, (p, w) in enumerate(zip(func.params, written))]
        self._by_name = {p.name: p for p in self._params}
        # an output the function reads before writing (y[i] += ...) needs the caller's values
        # (a loaded library's meta lists them: tdsl.load gives the Kernel the signature only)
        listed = meta.get("needed")
        self._needed = {int(i): why for i, why in listed.items()} if listed is not None else \
            {p.index: why for p, param in zip(self._params, func.params)
             if p.is_buffer and p.written and (why := read_before_written(func, param))}
        self._outputs = [p for p in self._params if p.written and p.is_buffer and p.index not in self._needed]
        self._inputs = [p for p in self._params if p not in self._outputs]
        self._dims: list[str] = meta["dims"]
        self._checks: list[dict] = meta["checks"]
        argtypes = [ctypes.py_object if p.is_buffer else _ctype_of(p.dtype) for p in self._params]
        self._fast = ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes)(compiled.addresses[meta["symbol"]])
        raw_types = [ctypes.c_void_p if p.is_buffer else _ctype_of(p.dtype) for p in self._params]
        raw_types += [ctypes.c_int64] * len(self._dims)
        self._raw = ctypes.CFUNCTYPE(ctypes.c_int32, *raw_types)(compiled.addresses[meta["raw_symbol"]])
        tuple_symbol = meta.get("tuple_symbol")
        self._fast_tuple = (ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.py_object)(compiled.addresses[tuple_symbol])
                            if tuple_symbol else None)
        self._asm: str | None = None
        # explicitly strided parameters are checked on the slow path (the fast entry expects C order)
        self._fast_ok = _FAST_OK and not any(p.strides for p in self._params)
        self.__class__ = _specialised_class(self)

    # -- public ----------------------------------------------------------------------------
    @property
    def lowered(self) -> PrimFunc:
        """The lowered function that was compiled (lowered again on demand after a disk hit)."""
        if self._lowered is None:
            from ...lower import lower

            self._lowered = lower(self.func, target=self.target)
        return self._lowered

    @property
    def source(self) -> str:
        """The LLVM IR as generated, before optimisation."""
        return self._compiled.source

    @property
    def optimized_ir(self) -> str:
        """The LLVM IR after LLVM's pass pipeline (the one compile.pipeline_for chose), made
        again on first use."""
        return self._compiled.optimized_ir

    @property
    def asm(self) -> str:
        """The assembly for the CPU it was built for (`target`)."""
        if self._asm is None:
            from . import jit

            self._asm = jit.emit_assembly(self.optimized_ir, self._compiled.machine)
        return self._asm

    @property
    def notes(self) -> list[str]:
        """What the build could not do as the schedule asked (a `vectorize` left scalar, and why)
        and what it chose that costs speed; build warns (tdsl.PerformanceWarning) about the first kind."""
        return [*self._compiled.notes, *self._compiled.pipeline_notes]

    @property
    def from_cache(self) -> bool:
        """True when the machine code came from the disk cache."""
        return self._compiled.from_disk

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.name}: {p.dtype}{p.shape_text() if p.is_buffer else ''}" for p in self._params)
        return f"<tdsl.Kernel {self.func.name}({sig}) target={self.target!r}>"

    @public_entry
    def export(self, path: str, name: str | None = None) -> str:
        """Write `path/NAME.so` and `path/NAME.h` (NAME: the function's name): a shared library
        callable from C with no Python at run time, loadable again with tdsl.load. Returns the
        library's path (tdsl.backends.llvm.export)."""
        from .export import export_kernel

        return export_kernel(self, path, name)

    @public_entry
    def time(self, *args, number: int | None = None, repeat: int = 5, **kwargs) -> float:
        """Median seconds per call over `repeat` runs of `number` calls, after a warm-up call."""
        full = self._complete(args, kwargs)
        call = self.__call__
        call(*full)
        if number is None:
            number, elapsed = 1, 0.0
            while True:
                t0 = _time.perf_counter()
                for _ in range(number):
                    call(*full)
                elapsed = _time.perf_counter() - t0
                if elapsed >= 0.02 or number >= 1 << 20:
                    break
                number *= 2 if elapsed > 0.002 else 10
        samples = []
        for _ in range(max(repeat, 1)):
            t0 = _time.perf_counter()
            for _ in range(number):
                call(*full)
            samples.append((_time.perf_counter() - t0) / number)
        return statistics.median(samples)

    # -- slow path -------------------------------------------------------------------------
    def _complete(self, args, kwargs) -> list:
        """Bind and check the arguments; allocate left-out outputs. Returns one value per param."""
        values = self._bind(args, kwargs)
        dims: dict[str, tuple[int, str]] = {}
        arrays: list = [None] * len(self._params)
        # scalars first: a scalar parameter that names a dimension binds it, and every array is
        # checked against it (wherever it stands in the signature), as the fast entry does
        for p in self._params:
            if not p.is_buffer:
                arrays[p.index] = self._check_scalar(p, values[p.index])
                dims.setdefault(p.name, (arrays[p.index], f"scalar parameter {p.name!r}"))
        pending: list = []   # dimensions given by expressions ("n * 2"): checked once every name is bound
        for p in self._params:
            v = values[p.index]
            if p.is_buffer and v is not _MISSING:
                arrays[p.index] = self._check_array(p, v, dims, pending)
        for p, axis, want, got in pending:
            _solve_dim(want, got, dims, f"{p.name}.shape[{axis}]")
        for p, axis, want, got in pending:
            self._check_dim(p, axis, want, got, dims)
        for p in self._params:
            if p.is_buffer and arrays[p.index] is None:
                shape = tuple(self._dim_value(s, dims, p) for s in p.shape)
                if any(n < 0 for n in shape):
                    bound = ", ".join(f"{k} = {v}" for k, (v, _) in sorted(dims.items()))
                    raise ArgumentError(f"cannot allocate output {p.name!r} of shape {p.shape_text()}: it would be "
                                        f"{shape} with {bound}; pass {p.name!r} or sizes that make it non-negative")
                arrays[p.index] = self._empty(p, shape, dims)
            elif p.strides:
                arrays[p.index] = self._check_strides(p, arrays[p.index], dims)
        self._separate_overlaps(arrays, dims)
        return arrays

    def _byte_strides(self, p: _Param, dims: dict) -> tuple[int, ...]:
        return tuple(self._dim_value(s, dims, p) * p.np_dtype.itemsize for s in p.strides)

    def _empty(self, p: _Param, shape: tuple, dims: dict) -> np.ndarray:
        """A new array for parameter `p`, with its declared strides when it has any."""
        if not p.strides:
            return np.empty(shape, p.np_dtype)
        strides = self._byte_strides(p, dims)
        extent = 1 + sum((n - 1) * st for n, st in zip(shape, strides)) // p.np_dtype.itemsize if all(shape) else 0
        return np.lib.stride_tricks.as_strided(np.zeros(max(extent, 1), p.np_dtype), shape, strides)

    def _check_strides(self, p: _Param, arr: np.ndarray, dims: dict) -> np.ndarray:
        """A parameter declared with strides must be passed with exactly those strides."""
        want = self._byte_strides(p, dims)
        if tuple(arr.strides) == want or arr.size == 0:
            return arr
        if p.written:
            elems = tuple(st // p.np_dtype.itemsize for st in want)
            raise ArgumentError(f"parameter {p.name!r} is written by the kernel and must have strides {elems} "
                                f"(in elements) as declared; got strides {tuple(arr.strides)} (bytes)")
        out = self._empty(p, arr.shape, dims)
        out[...] = arr
        return out

    def _bind(self, args, kwargs) -> list:
        n = len(self._params)
        values = [_MISSING] * n
        positional = self._params if len(args) == n or len(args) > len(self._inputs) else self._inputs
        if len(args) > n:
            raise ArgumentError(f"{self.func.name}() takes {n} arguments ({self._signature()}) but "
                                f"{len(args)} were given")
        for p, v in zip(positional, args):
            values[p.index] = v
        for name, v in kwargs.items():
            p = self._by_name.get(name)
            if p is None:
                raise ArgumentError(f"{self.func.name}() has no parameter {name!r}; parameters: {self._signature()}")
            if values[p.index] is not _MISSING:
                raise ArgumentError(f"{self.func.name}() got two values for parameter {name!r}")
            values[p.index] = v
        missing = [p for p in self._params if values[p.index] is _MISSING and p not in self._outputs]
        if missing:
            why = "".join(f"; {p.name!r} cannot be left out: {self._needed[p.index]}"
                          for p in missing if p.index in self._needed)
            raise ArgumentError(f"{self.func.name}() is missing a value for parameter(s) "
                                f"{', '.join(repr(p.name) for p in missing)} ({self._signature()}); only outputs "
                                f"({', '.join(repr(p.name) for p in self._outputs) or 'none'}) may be left out{why}")
        return values

    def _signature(self) -> str:
        return ", ".join(p.name + (" (output)" if p in self._outputs else "") for p in self._params)

    def _as_array(self, p: _Param, v):
        if isinstance(v, np.ndarray):
            return v
        if hasattr(v, "__dlpack__"):
            device = getattr(v, "__dlpack_device__", None)
            if device is not None:
                try:
                    dev_type, dev_id = device()
                    dev_type = int(dev_type)
                except Exception as exc:  # noqa: BLE001 - a broken exporter must not crash the call
                    raise ArgumentError(f"parameter {p.name!r}: cannot query the tensor's DLPack device "
                                        f"({type(exc).__name__}: {exc})") from None
                if dev_type not in _CPU_DEVICES:
                    raise ArgumentError(f"parameter {p.name!r}: expected a CPU tensor, got a tensor on DLPack "
                                        f"device type {int(dev_type)} (id {dev_id}); copy it to the host first "
                                        f"or build for target='cuda'")
            try:
                return np.from_dlpack(v)
            except Exception as exc:  # noqa: BLE001 - e.g. an unsupported dtype or device in the capsule
                raise ArgumentError(f"parameter {p.name!r}: cannot read the tensor through DLPack: {exc}") from None
        raise ArgumentError(f"parameter {p.name!r}: expected a numpy array or a DLPack tensor of {p.dtype} with "
                            f"shape {p.shape_text()}, got {type(v).__name__} {_short(v)}")

    def _check_array(self, p: _Param, v, dims: dict, pending: list | None = None) -> np.ndarray:
        arr = self._as_array(p, v)
        if arr.dtype != p.np_dtype:
            raise ArgumentError(f"parameter {p.name!r}: expected dtype {p.dtype}, got {arr.dtype}")
        if arr.ndim != len(p.shape):
            raise ArgumentError(f"parameter {p.name!r}: expected {len(p.shape)} dimensions {p.shape_text()}, "
                                f"got {arr.ndim} with shape {tuple(arr.shape)}")
        for axis, (want, got) in enumerate(zip(p.shape, arr.shape)):
            if pending is not None and not isinstance(want, (IntImm, Var)):
                pending.append((p, axis, want, int(got)))
            else:
                self._check_dim(p, axis, want, int(got), dims)
        if p.written:
            if not arr.flags.writeable:
                raise ArgumentError(f"parameter {p.name!r} is written by the kernel but the array is read-only")
            if not p.strides and arr.flags.c_contiguous and not arr.flags.aligned:
                raise ArgumentError(f"parameter {p.name!r} is written by the kernel and must be aligned to its "
                                    f"dtype ({p.np_dtype.itemsize} bytes); got an array at address "
                                    f"{arr.__array_interface__['data'][0]:#x}; pass an aligned array and copy "
                                    f"the result back: tmp = np.empty_like({p.name}), call with tmp, then "
                                    f"{p.name}[...] = tmp")
            if not p.strides and not arr.flags.c_contiguous:
                raise ArgumentError(f"parameter {p.name!r} is written by the kernel and must be a C-contiguous "
                                    f"array; got strides {arr.strides} for shape {arr.shape}; pass a contiguous "
                                    f"array and copy the result back: tmp = np.empty_like({p.name}, order='C'), "
                                    f"call with tmp, then {p.name}[...] = tmp")
        elif not p.strides and not (arr.flags.c_contiguous and arr.flags.aligned):
            arr = np.ascontiguousarray(arr)
            if not arr.flags.aligned:
                arr = arr.copy()
        return arr

    def _check_dim(self, p: _Param, axis: int, want, got: int, dims: dict) -> None:
        where = f"{p.name}.shape[{axis}]"
        if isinstance(want, IntImm):
            if got != want.value:
                raise ArgumentError(f"parameter {p.name!r}: expected shape {p.shape_text()}, got shape with "
                                    f"{where} = {got} (expected {want.value})")
            return
        if isinstance(want, Var):
            if want.name in dims:
                value, source = dims[want.name]
                if value != got:
                    raise ArgumentError(f"inconsistent symbolic dimension {want.name!r}: {source} = {value} but "
                                        f"{where} = {got} (parameter {p.name!r}, shape {p.shape_text()})")
                return
            limit = (1 << (want.dtype.bits - 1)) - 1
            if got > limit:
                raise ArgumentError(f"parameter {p.name!r}: {where} = {got} exceeds the {want.dtype} range of "
                                    f"dimension {want.name!r}")
            dims[want.name] = (got, where)
            return
        expected = self._dim_value(want, dims, p, given=True)
        if expected != got:
            raise ArgumentError(f"parameter {p.name!r}: expected shape {p.shape_text()}, got {where} = {got} "
                                f"(expected {expected})")

    def _dim_value(self, s, dims: dict, p: _Param, given: bool = False) -> int:
        if isinstance(s, IntImm):
            return s.value
        if isinstance(s, Var) and s.name in dims:
            return dims[s.name][0]
        if isinstance(s, Var):
            if given:
                raise ArgumentError(f"parameter {p.name!r} of shape {p.shape_text()}: dimension {s.name!r} "
                                    f"is not given by any argument whose shape names it directly; pass one")
            raise ArgumentError(f"cannot allocate output {p.name!r} of shape {p.shape_text()}: dimension "
                                f"{s.name!r} is not given by any input; pass {p.name!r} explicitly")
        env = {v: dims[v.name][0] for v in collect(s, Var) if v.name in dims}
        try:
            return eval_int(s, env)
        except KeyError as exc:
            if given:
                raise ArgumentError(f"parameter {p.name!r} of shape {p.shape_text()}: dimension "
                                    f"{exc.args[0].name!r} is not given by any argument whose shape names it "
                                    f"directly; pass one") from None
            raise ArgumentError(f"cannot allocate output {p.name!r} of shape {p.shape_text()}: dimension "
                                f"{exc.args[0].name!r} is not given by any input; pass {p.name!r} explicitly") from None
        except (EvalError, ZeroDivisionError) as exc:
            from ...script.printer import message_text as expr_text  # not .codegen: no LLVM for a loaded kernel

            node = getattr(exc, "node", s)
            raise ArgumentError(f"parameter {p.name!r}: cannot evaluate the shape entry {expr_text(node)}") from None

    def _check_scalar(self, p: _Param, v):
        dt = p.dtype
        if isinstance(v, np.ndarray) and v.ndim == 0:
            v = v[()]
        if dt.is_bool:
            if isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and int(v) in (0, 1)):
                return int(bool(v))
            raise ArgumentError(f"parameter {p.name!r}: expected a bool, got {type(v).__name__} {_short(v)}")
        if dt.is_float:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise ArgumentError(f"parameter {p.name!r}: expected a {dt} number, got {type(v).__name__} "
                                    f"{_short(v)}")
            try:
                return float(v)
            except OverflowError:
                raise ArgumentError(f"parameter {p.name!r}: {_short(v)} is too large for {dt}") from None
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            if isinstance(v, (float, np.floating)) and float(v).is_integer():
                v = int(v)
            else:
                raise ArgumentError(f"parameter {p.name!r}: expected an integer ({dt}), got {type(v).__name__} "
                                    f"{_short(v)}")
        v = int(v)
        if not p.lo <= v <= p.hi:
            raise ArgumentError(f"parameter {p.name!r}: {v} is out of the range of {dt} [{p.lo}, {p.hi}]")
        return v

    def _separate_overlaps(self, arrays: list, dims: dict) -> None:
        """An output may not share memory with another argument: copy inputs, refuse two outputs."""
        bufs = [p for p in self._params if p.is_buffer]
        for p in bufs:
            if not p.written:
                continue
            for q in bufs:
                if q is p or not np.may_share_memory(arrays[p.index], arrays[q.index]):
                    continue
                if arrays[p.index].size == 0 or arrays[q.index].size == 0:
                    continue
                if q.written:
                    raise ArgumentError(f"parameters {p.name!r} and {q.name!r} are both written by the kernel "
                                        f"but share memory; pass separate arrays")
                copy = self._empty(q, arrays[q.index].shape, dims)
                copy[...] = arrays[q.index]
                arrays[q.index] = copy

    @public_entry
    def _slow_call(self, args, kwargs, rc):
        if rc is not None and rc != -1:
            self._raise(rc)
        views = _numpy_views(args, kwargs) if _torch_given(args, kwargs) else None
        if views is not None:   # CPU torch tensors: the fast entry on numpy views of the same memory
            out = self(*views[0], **views[1])
            return tuple(_as_torch(o) for o in out) if isinstance(out, tuple) else None if out is None else _as_torch(out)
        values = self._complete(args, kwargs)
        raw_args = []
        for p in self._params:
            v = values[p.index]
            raw_args.append(v.__array_interface__["data"][0] if p.is_buffer else v)
        dims = self._bound_dims(values)
        rc = self._raw(*raw_args, *dims)
        if rc:
            self._raise(rc)
        given = len(args) + len(kwargs)
        if given == len(self._params):
            return None
        left_out = [values[p.index] for p in self._outputs if not self._was_given(p, args, kwargs)]
        if _torch_given(args, kwargs):   # torch tensors in, torch tensors out (sharing the arrays' memory)
            left_out = [_as_torch(a) for a in left_out]
        return left_out[0] if len(left_out) == 1 else tuple(left_out)

    def _was_given(self, p: _Param, args, kwargs) -> bool:
        if p.name in kwargs:
            return True
        n = len(self._params)
        positional = self._params if len(args) == n or len(args) > len(self._inputs) else self._inputs
        return p in positional[:len(args)]

    def _bound_dims(self, values: list) -> list[int]:
        """The raw entry's dimension arguments, read from the arguments by position."""
        return [int(values[i]) if axis < 0 else int(values[i].shape[axis])
                for i, axis in self._compiled.meta["dim_sources"]]

    def _raise(self, rc: int):
        if rc == -4:   # abi.ERR_INTERRUPTED: let CPython's handler for the pending SIGINT run now
            import ctypes

            ctypes.pythonapi.PyErr_CheckSignals()   # raises KeyboardInterrupt (the default handler)
            raise KeyboardInterrupt(f"kernel {self.func.name!r} was interrupted; its outputs are incomplete")
        if rc == -2:
            raise MemoryError(f"kernel {self.func.name!r}: allocating an intermediate buffer failed")
        if rc == -3:
            raise MemoryError(f"kernel {self.func.name!r}: an intermediate buffer of these sizes has 2**31 elements "
                              "or more, past what its int32 indices address; give its shape T.int64 extents")
        if 1 <= rc <= len(self._checks):
            c = self._checks[rc - 1]
            name = self._params[c["param"]].name if c.get("param") is not None else c["buffer"]
            if "axis" in c:
                raise BoundsError(f"kernel {self.func.name!r}: index out of bounds in buffer {name!r}: index "
                                  f"{c['index']} on axis {c['axis']} is outside [0, {c['extent']})")
            raise BoundsError(f"kernel {self.func.name!r}: index out of bounds in buffer {name!r}: index "
                              f"{c['index']} is outside [0, {c['extent']}) (flattened)")
        raise RuntimeError(f"kernel {self.func.name!r} failed with code {rc}")


def _solve_dim(want, got: int, dims: dict, where: str) -> None:
    """Bind the one unbound name of `n + c`, `n - c` or `n * c` (c a constant) from a given size,
    as the interpreter does; other expressions are only checked."""
    if not isinstance(want, Binary) or want.op not in ("add", "sub", "mul"):
        return
    a, b = want.a, want.b
    if want.op != "sub" and isinstance(a, IntImm):
        a, b = b, a
    if not (isinstance(a, Var) and isinstance(b, IntImm)) or a.name in dims:
        return
    c = b.value
    if want.op == "add":
        n = got - c
    elif want.op == "sub":
        n = got + c
    elif c != 0 and got % c == 0:
        n = got // c
    else:
        return
    if 0 <= n < 1 << (a.dtype.bits - 1):
        dims[a.name] = (n, where)


def _torch_given(args, kwargs) -> bool:
    """Whether an argument is a torch tensor (torch is never imported here: only if loaded)."""
    torch = sys.modules.get("torch")
    return torch is not None and any(isinstance(v, torch.Tensor) for v in (*args, *kwargs.values()))


def _numpy_views(args, kwargs) -> tuple[list, dict] | None:
    """The arguments with each CPU torch tensor as a numpy view of its memory (None when a
    tensor has no such view: bfloat16, another device; the checked path then says why)."""
    torch = sys.modules["torch"]

    def view(v):
        if not isinstance(v, torch.Tensor):
            return v
        if not v.is_cpu or v.dtype == torch.bfloat16:
            raise LookupError
        return v.detach().numpy()

    try:
        return [view(v) for v in args], {k: view(v) for k, v in kwargs.items()}
    except (LookupError, RuntimeError, TypeError):   # e.g. a tensor with the conjugate bit set
        return None


def _as_torch(arr: np.ndarray):
    torch = sys.modules["torch"]
    if arr.dtype.name == "bfloat16":   # numpy has no bfloat16 of its own: the same bits
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _specialised_class(k: Kernel) -> type:
    """A Kernel subclass whose __call__ is generated for this signature (one ctypes call)."""
    params = k._params
    names = [f"a{i}" for i in range(len(params))]
    by_tuple = k._fast_tuple is not None
    call = "fast_tuple(({}))".format(", ".join(names) + ("," if len(names) == 1 else "")) if by_tuple else \
        f"fast({', '.join(names)})"
    lines = ["def __call__(self, *args, **kwargs):"]
    if k._fast_ok:
        lines.append("    if not kwargs:")
        lines.append("        n = len(args)")
        lines.append(f"        if n == {len(params)}:")
        if by_tuple:
            lines.append("            rc = fast_tuple(args)")
        else:
            lines.append(f"            {', '.join(names)}{',' if len(names) == 1 else ''} = args")
            lines += _scalar_guards(params, names, "            ")
            lines.append(f"            rc = {call}")
        lines.append("            if rc == 0:")
        lines.append("                return None")
        lines.append("            return self._slow_call(args, kwargs, rc)")
        sizes = _output_sizes(k) if k._outputs and len(k._inputs) < len(params) else None
        if sizes is not None:
            env_names = [f"a{p.index}" for p in k._inputs]
            lines.append(f"        if n == {len(k._inputs)}:")
            if env_names:
                lines.append(f"            {', '.join(env_names)}{',' if len(env_names) == 1 else ''} = args")
            lines += _scalar_guards(k._inputs, env_names, "            ")
            lines += ["            " + line for line in sizes]
            for p in k._outputs:
                shape = ", ".join(str(s.value) if isinstance(s, IntImm) else f"d_{s.name}" if isinstance(s, Var)
                                  else _py_size(s) for s in p.shape)
                lines.append(f"            a{p.index} = empty(({shape}{',' if len(p.shape) == 1 else ''}), "
                             f"dt{p.index})")
            lines.append(f"            rc = {call}")
            lines.append("            if rc == 0:")
            outs = [f"a{p.index}" for p in k._outputs]
            lines.append(f"                return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ')'}")
            lines.append("            return self._slow_call(args, kwargs, rc)")
    lines.append("    return self._slow_call(args, kwargs, None)")
    # a user error (or a MemoryError for the sizes given) leaves with the user's frames only:
    # neither this generated frame nor tdsl's (a bare `raise` adds no frame)
    lines = [lines[0], "  try:", *("  " + line for line in lines[1:]),
             "  except (*USER_ERRORS, MemoryError) as error:",
             "    if not config.full_traceback:",
             "        error.__traceback__ = user_frames(error.__traceback__)",
             "    raise"]
    env = {"fast": k._fast, "fast_tuple": k._fast_tuple, "empty": np.empty, "ndarray": np.ndarray,
           "USER_ERRORS": USER_ERRORS, "config": config, "user_frames": user_frames, "__name__": __name__}
    for p in params:
        env[f"dt{p.index}"] = p.np_dtype
        if p.lo is not None:
            env[f"lo{p.index}"], env[f"hi{p.index}"] = p.lo, p.hi
    code = compile("\n".join(lines), f"<tdsl kernel {k.func.name!r} call>", "exec")
    exec(code, env)  # noqa: S102 - generated from the signature only, no user text
    fn = env["__call__"]
    fn.__doc__ = f"Call {k.func.name}({k._signature()})."
    return type("Kernel", (Kernel,), {"__call__": fn, "__module__": Kernel.__module__,
                                      "__qualname__": "Kernel"})


_PY_OPS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "floormod": "%"}


def _py_size(e) -> str:
    """Python source of a size expression over the bound names `d_<name>` (see _output_sizes)."""
    if isinstance(e, IntImm):
        return str(e.value)
    if isinstance(e, Var):
        return f"d_{e.name}"
    if isinstance(e, Binary) and e.op in _PY_OPS:
        return f"({_py_size(e.a)} {_PY_OPS[e.op]} {_py_size(e.b)})"
    if isinstance(e, Binary) and e.op in ("min", "max"):
        return f"{e.op}({_py_size(e.a)}, {_py_size(e.b)})"
    raise KeyError(e)


def _output_sizes(k: Kernel) -> list[str] | None:
    """Lines binding `d_<name>` for each symbolic dimension of a left-out output from the inputs'
    shapes (or a scalar parameter of that name), so the fast call allocates outputs of symbolic
    shape too; an input that is not a numpy array of the declared rank, or a size below zero,
    goes to the slow path (which names what is wrong). None when some output size cannot be
    read this way. The fast entry still checks every input against every other."""
    source: dict[str, str] = {}
    for p in k._inputs:
        if not p.is_buffer and p.dtype.is_integer:
            source.setdefault(p.name, f"a{p.index}")
    arrays: dict[int, int] = {}
    for p in k._inputs:
        if p.is_buffer:
            for axis, s in enumerate(p.shape):
                if isinstance(s, Var) and s.name not in source:
                    source[s.name] = f"a{p.index}.shape[{axis}]"
                    arrays[p.index] = len(p.shape)
    wanted: list[str] = []
    exprs = [s for p in k._outputs for s in p.shape if not isinstance(s, IntImm)]
    for s in exprs:
        for v in collect(s, Var):
            if v.name not in source or not v.name.isidentifier():
                return None
            if v.name not in wanted:
                wanted.append(v.name)
        if not isinstance(s, Var):
            try:
                _py_size(s)
            except KeyError:
                return None
    if not exprs:
        return []
    slow = "return self._slow_call(args, kwargs, None)"
    lines = [f"if type(a{i}) is not ndarray or a{i}.ndim != {ndim}: {slow}" for i, ndim in arrays.items()
             if any(source[name].startswith(f"a{i}.") for name in wanted)]
    lines += [f"d_{name} = {source[name]}" for name in wanted]
    composite = [s for s in exprs if not isinstance(s, Var)]
    checks = [f"{_py_size(s)} < 0" for s in composite] + [f"d_{name} < 0" for name in wanted]
    lines.append(f"if {' or '.join(checks)}: {slow}")
    return lines


def _scalar_guards(params, names, indent: str) -> list[str]:
    """Scalars of exactly the expected Python type go fast; anything else is checked slowly."""
    out = []
    for p, name in zip(params, names):
        if p.is_buffer:
            continue
        if p.dtype.is_bool:
            out.append(f"{indent}if {name} is not True and {name} is not False:")
        elif p.dtype.is_float:
            out.append(f"{indent}if type({name}) is not float:")
        else:
            out.append(f"{indent}if type({name}) is not int or not lo{p.index} <= {name} <= hi{p.index}:")
        out.append(f"{indent}    return self._slow_call(args, kwargs, None)")
    return out
