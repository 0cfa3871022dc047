"""tdsl kernels as PyTorch custom operators that torch.compile keeps whole.

    import tdsl.torch
    op = tdsl.torch.custom_op("mylib::gemm_gelu", kernel)     # a torch.library custom op
    y = op(a, b)                                              # torch tensors in, torch tensors out
    torch.compile(model, fullgraph=True)                      # captured whole: no graph break

The operator's arguments are the function's parameters a caller must give (inputs and buffers it
updates in place, which are declared mutated), in order; it returns the buffers tdsl would
allocate (shape and dtype from the IR, symbolic dimensions bound from the inputs). Its fake
implementation is derived from the same IR, so torch.compile traces it without running it.
torch is imported when this module is (it is never a dependency of `import tdsl`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

try:
    import torch  # absolute: this module is tdsl.torch, the package it wraps is the top-level torch
except ImportError as _exc:
    raise ImportError(f"tdsl.torch needs PyTorch ({_exc}): pip install 'torch==2.13.0' (the CPU build; "
                      f"in a checkout: pip install -e '.[torch]')") from None

from tdsl.errors import ArgumentError
from tdsl.ir import Binary, Block, BufferStore, Cast, IntImm, PrimFunc, Var, as_prim_func, collect
from tdsl.ir.outputs import read_before_written

_TORCH_DTYPES = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
    "uint8": torch.uint8, "bool": torch.bool,
}
_SCALAR_SCHEMA = {"float": "float", "int": "int", "uint": "int", "bool": "bool"}
_INT32_MAX = (1 << 31) - 1
_PY_TYPES = {"float": float, "int": int, "uint": int, "bool": bool}


@dataclass(frozen=True)
class _Param:
    name: str
    role: str                  # "input", "mutated" (updated in place), "output" (allocated), "scalar"
    dtype: str
    shape: tuple               # IR shape expressions (buffers)
    torch_dtype: object = None
    np_dtype: Any = None


def _dtype_name(dt) -> str:
    return str(dt)


def signature(func: PrimFunc) -> list[_Param]:
    """The parameters of `func` with their role in a custom op, read from the IR: a buffer the
    function writes before reading is an output; one it reads first (an accumulation, an
    in-place update) is mutated; every other buffer is an input."""
    written = {s.buffer for s in collect(func.body, BufferStore)}
    written |= {r.buffer for b in collect(func.body, Block) for r in b.writes}
    out = []
    for p in func.params:
        if isinstance(p, Var):
            if p.dtype.code not in _SCALAR_SCHEMA or p.dtype.lanes != 1:
                raise ArgumentError(f"parameter {p.name!r} of {func.name!r}: a scalar of type {p.dtype} cannot be a "
                                    f"custom op argument (int, uint, float and bool scalars can)")
            out.append(_Param(p.name, "scalar", _dtype_name(p.dtype), ()))
            continue
        name = _dtype_name(p.dtype)
        if name not in _TORCH_DTYPES:
            raise ArgumentError(f"parameter {p.name!r} of {func.name!r}: dtype {name} has no torch dtype; "
                                f"supported: {', '.join(_TORCH_DTYPES)}")
        role = "input"
        if p in written:
            role = "mutated" if read_before_written(func, p) else "output"
        out.append(_Param(p.name, role, name, tuple(p.shape), _TORCH_DTYPES[name], p.dtype.numpy))
    _check_outputs_sized(func, out)
    return out


def _check_outputs_sized(func: PrimFunc, params: list[_Param]) -> None:
    given = {p.name for p in params if p.role == "scalar"}
    for p in params:
        if p.role not in ("output", "scalar"):
            given |= {s.name for s in p.shape if isinstance(s, Var)}
    for p in params:
        if p.role != "output":
            continue
        for s in p.shape:
            missing = sorted(v.name for v in collect(s, Var) if v.name not in given)
            if missing:
                raise ArgumentError(f"output {p.name!r} of {func.name!r} has a dimension {missing[0]!r} that no input "
                                    f"gives: a custom op allocates its outputs from its inputs' shapes")


def schema(params: list[_Param]) -> str:
    """The torch schema string, e.g. "(Tensor A, Tensor(a!) C, float alpha) -> Tensor"."""
    args = []
    alias = iter("abcdefghijklmnopqrstuvwxyz")
    for p in params:
        if p.role == "scalar":
            args.append(f"{_SCALAR_SCHEMA[p.dtype.rstrip('0123456789')]} {p.name}")
        elif p.role == "mutated":
            args.append(f"Tensor({next(alias)}!) {p.name}")
        elif p.role == "input":
            args.append(f"Tensor {p.name}")
    outs = [p for p in params if p.role == "output"]
    ret = "()" if not outs else "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    return f"({', '.join(args)}) -> {ret}"


def _eval(e, dims: dict):
    """An IR shape expression with ints or torch SymInts for its names."""
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return dims[e.name]
    if isinstance(e, Cast):
        return _eval(e.value, dims)
    if isinstance(e, Binary):
        a, b = _eval(e.a, dims), _eval(e.b, dims)
        ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
               "floordiv": lambda: a // b, "floormod": lambda: a % b}
        if e.op in ops:
            return ops[e.op]()
    raise ArgumentError(f"a shape entry must be a constant, a name, or +, -, *, //, % of them; got {e}")


class _Op:
    """What a registered op runs: binds shapes, allocates outputs, calls the kernel per device."""

    def __init__(self, qualname: str, func: PrimFunc, kernels: dict):
        self.qualname = qualname
        self.func = func
        self.params = signature(func)
        self.args = [p for p in self.params if p.role != "output"]
        self.outputs = [p for p in self.params if p.role == "output"]
        self.kernels = kernels          # device type -> built kernel
        const = all(isinstance(s, IntImm) for p in self.outputs for s in p.shape)
        self._const_shapes = [tuple(s.value for s in p.shape) for p in self.outputs] if const else None
        self._fast = None   # the generated fast call (_fast_call), made once the CPU kernel exists

    def kernel(self, device: torch.device):
        k = self.kernels.get(device.type)
        if k is None:
            if device.type not in ("cpu", "cuda"):
                raise ArgumentError(f"{self.qualname}: tensors on device {device} are not supported (cpu, cuda)")
            if "func" not in self.kernels:
                built = ", ".join(t for t in self.kernels if t != "func")
                raise ArgumentError(f"{self.qualname}: the kernel given was built for {built}, the tensors are on "
                                    f"{device.type}; pass the PrimFunc to build it for each device")
            from tdsl.backends import build

            k = self.kernels[device.type] = build(self.kernels["func"], target=device.type)
        return k

    def dims(self, args) -> dict:
        dims: dict = {}
        for p, a in zip(self.args, args):
            if p.role == "scalar":
                dims.setdefault(p.name, a)
                continue
            if not isinstance(a, torch.Tensor):
                raise ArgumentError(f"{self.qualname}: parameter {p.name!r} must be a tensor, got {type(a).__name__}")
            if a.dtype != p.torch_dtype:
                raise ArgumentError(f"{self.qualname}: parameter {p.name!r}: expected dtype {p.torch_dtype}, "
                                    f"got {a.dtype}")
            if a.dim() != len(p.shape):
                raise ArgumentError(f"{self.qualname}: parameter {p.name!r}: expected {len(p.shape)} dimensions, "
                                    f"got shape {tuple(a.shape)}")
            for s, n in zip(p.shape, a.shape):
                if isinstance(s, Var):
                    dims.setdefault(s.name, n)
        return dims

    def output_shapes(self, args) -> list[tuple]:
        if self._const_shapes is not None:
            self.dims(args)   # the checks
            return self._const_shapes
        dims = self.dims(args)
        return [tuple(_eval(s, dims) for s in p.shape) for p in self.outputs]

    def fake(self, *args):
        device = _device_of(self, args)
        outs = [torch.empty(shape, dtype=p.torch_dtype, device=device)
                for p, shape in zip(self.outputs, self.output_shapes(args))]
        return _result(outs)

    def run(self, *args):
        """The op's CPU and CUDA implementation: allocate the outputs, call the kernel."""
        fast = self._fast
        if fast is None and "cpu" in self.kernels:
            fast = self._fast = _fast_call(self, self.kernels["cpu"]) or False
        if fast:
            outs = fast(*args)
            if outs is not None:
                return outs
        device = _device_of(self, args)
        shapes = self.output_shapes(args)
        outs = [torch.empty(shape, dtype=p.torch_dtype, device=device) for p, shape in zip(self.outputs, shapes)]
        kernel = self.kernel(device)
        full = []
        args_it, outs_it = iter(args), iter(outs)
        for p in self.params:
            full.append(next(outs_it) if p.role == "output" else next(args_it))
        if device.type == "cpu":
            _call_cpu(kernel, self.params, full)
        else:
            _call_cuda(kernel, self.params, full, device)
        return _result(outs)


def _py_shape(e, names: dict) -> str | None:
    """An IR shape expression as Python source over the dimension locals, or None."""
    if isinstance(e, IntImm):
        return str(e.value)
    if isinstance(e, Var):
        return names.get(e.name)
    if isinstance(e, Cast):
        return _py_shape(e.value, names)
    if isinstance(e, Binary) and e.op in _PY_OPS:
        a, b = _py_shape(e.a, names), _py_shape(e.b, names)
        return None if a is None or b is None else f"({a} {_PY_OPS[e.op]} {b})"
    return None


_PY_OPS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "floormod": "%"}


def _fast_call(op: _Op, kernel):
    """A function generated for this op's signature that calls the CPU kernel's raw entry in a
    few microseconds when every tensor is a contiguous, aligned CPU tensor of the expected dtype
    and shape and every scalar a Python number of the parameter's kind; it returns None for
    anything else (run then takes the checked path, whose errors name the parameter). None
    when the op cannot have one (a parameter updated in place, a shape that is an expression,
    no outputs, a kernel without a raw entry)."""
    if not hasattr(kernel, "_raw") or not op.outputs or any(p.role == "mutated" for p in op.params):
        return None
    names = [f"a{k}" for k in range(len(op.args))]
    env: dict = {"Tensor": torch.Tensor, "empty": torch.empty, "raw": kernel._raw, "fail": kernel._raise}
    dims: dict[str, str] = {}
    checks = _fast_checks(op, kernel, names, env, dims)
    if checks is None:
        return None
    lines = [f"def fast({', '.join(names)}):", *checks]
    for p, name in zip(op.args, names):
        if p.role == "scalar":
            dims.setdefault(p.name, name)
    out_names = []
    for k, p in enumerate(op.outputs):
        shape = [t for t in (_py_shape(s, dims) for s in p.shape) if t is not None]
        if len(shape) != len(p.shape):
            return None
        env[f"odt{k}"] = p.torch_dtype
        out_names.append(f"o{k}")
        lines.append(f"    o{k} = empty(({', '.join(shape)}{',' if len(shape) == 1 else ''}), dtype=odt{k})")
    full, args_it, outs_it = [], iter(range(len(op.args))), iter(range(len(op.outputs)))
    for p in op.params:
        if p.role == "output":
            full.append(f"o{next(outs_it)}")
        else:
            k = next(args_it)
            full.append(names[k] if p.role == "scalar" else f"p{k}")
    call = [f"o{op.outputs.index(p)}.data_ptr()" if p.role == "output" else v for p, v in zip(op.params, full)]
    for i, axis in kernel._compiled.meta["dim_sources"]:
        call.append(f"{full[i]}" if axis < 0 else f"{_shape_of(op, i, full)}[{axis}]")
    lines.append(f"    rc = raw({', '.join(call)})")
    lines.append("    if rc: fail(rc)")
    lines.append(f"    return {out_names[0] if len(out_names) == 1 else '(' + ', '.join(out_names) + ')'}")
    exec("\n".join(lines), env)  # noqa: S102 - generated from the signature only, no user text
    return env["fast"]


def _fast_checks(op: _Op, kernel, names: list[str], env: dict, dims: dict) -> list[str] | None:
    """The generated fast call's argument checks (binding the dimensions into `dims`)."""
    lines = []
    for k, (p, name) in enumerate(zip(op.args, names)):
        if p.role == "scalar":
            lines.append(f"    if {name}.__class__ is not {_PY_TYPES[p.dtype.rstrip('0123456789')].__name__}: return None")
            q = kernel._params[op.params.index(p)]
            if q.lo is not None and p.dtype != "bool":
                lines.append(f"    if not {q.lo} <= {name} <= {q.hi}: return None")
            continue
        env[f"dt{k}"] = p.torch_dtype
        lines.append(f"    if {name}.__class__ is not Tensor or {name}.dtype is not dt{k} or not {name}.is_cpu "
                     f"or not {name}.is_contiguous(): return None")
        lines.append(f"    s{k} = {name}.shape")
        if all(isinstance(s, IntImm) for s in p.shape):   # one comparison of the whole shape
            lines.append(f"    if s{k} != {tuple(s.value for s in p.shape)!r}: return None")
        else:
            lines.append(f"    if len(s{k}) != {len(p.shape)}: return None")
        lines.append(f"    p{k} = {name}.data_ptr()")
        if p.np_dtype.itemsize > 1:
            lines.append(f"    if p{k} % {p.np_dtype.itemsize}: return None")
        for axis, s in enumerate(p.shape):
            if isinstance(s, IntImm):
                if not all(isinstance(t, IntImm) for t in p.shape):
                    lines.append(f"    if s{k}[{axis}] != {s.value}: return None")
            elif isinstance(s, Var) and s.name not in dims:
                dims[s.name] = f"d{len(dims)}"
                lines.append(f"    {dims[s.name]} = s{k}[{axis}]")
                lines.append(f"    if {dims[s.name]} > {_INT32_MAX}: return None")
            elif isinstance(s, Var):
                lines.append(f"    if s{k}[{axis}] != {dims[s.name]}: return None")
            else:
                return None
    return lines


def _shape_of(op: _Op, index: int, full: list) -> str:
    """The shape (source) of parameter `index` inside the generated fast call."""
    p = op.params[index]
    if p.role == "output":
        return f"o{op.outputs.index(p)}.shape"
    return f"s{op.args.index(p)}"


def _device_of(op: _Op, args) -> torch.device:
    devices = {a.device for a in args if isinstance(a, torch.Tensor)}
    if len(devices) > 1:
        raise ArgumentError(f"{op.qualname}: the tensors are on different devices: "
                            f"{', '.join(sorted(str(d) for d in devices))}")
    return devices.pop() if devices else torch.device("cpu")


def _result(outs: list):
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)


def _as_numpy(t: torch.Tensor, p: _Param) -> np.ndarray:
    """A numpy view of a CPU tensor (contiguous copies of read-only inputs that are not)."""
    if not t.is_contiguous():
        if p.role == "mutated":
            raise ArgumentError(f"parameter {p.name!r} is updated in place and must be a contiguous tensor; got "
                                f"strides {t.stride()} for shape {tuple(t.shape)} (pass x.contiguous() and copy back)")
        t = t.contiguous()
    if t.dtype == torch.bfloat16:   # numpy has no bfloat16: the same bits, as ml_dtypes' type
        return t.view(torch.int16).numpy().view(np.dtype(p.np_dtype))
    return t.detach().numpy()


def _call_cpu(kernel, params: list[_Param], full: list) -> None:
    arrays = [a if p.role == "scalar" else _as_numpy(a, p) for p, a in zip(params, full)]
    kernel(*arrays)


def _call_cuda(kernel, params: list[_Param], full: list, device: torch.device) -> None:
    full = [a if p.role == "scalar" or p.role == "mutated" or a.is_contiguous() else a.contiguous()
            for p, a in zip(params, full)]
    with torch.cuda.device(device):   # the device guard: the kernel's module and launch on this device
        kernel(*full, stream=torch.cuda.current_stream(device).cuda_stream)


_REGISTERED: dict[str, tuple] = {}   # qualname -> (_Op, Library): a Library dropped is unregistered


def custom_op(name: str, kernel_or_func, backward=None):
    """Register `kernel_or_func` (a built tdsl Kernel, a PrimFunc or a Schedule) as the torch
    custom op `name` ("namespace::name") and return it (its torch.ops OpOverload).

    The op takes the function's inputs (tensors and scalars, in parameter order; buffers the
    function updates in place are declared mutated) and returns the buffers it would allocate.
    A PrimFunc is built for the device of the tensors it gets (cpu, or cuda on a GPU, on the
    current stream). `backward=` (a Kernel or PrimFunc) makes the op differentiable: it takes
    the forward's inputs then one gradient per forward output, and returns one gradient per
    tensor input, in order.

        op = tdsl.torch.custom_op("mylib::add_one", add_one)     # add_one(A: (n,), B: (n,))
        y = op(torch.arange(4.0))                                # tensor([1., 2., 3., 4.])
    """
    func, kernels = _func_and_kernels(kernel_or_func, name)
    impl = _Op(name, func, kernels)
    bwd = _check_backward(impl, backward) if backward is not None else None
    for qualname in (name, bwd.qualname if bwd is not None else None):
        if qualname in _REGISTERED:
            raise ArgumentError(f"custom op {qualname!r} is already registered in this process; choose another name")
    op = _register(impl)
    if bwd is not None:
        _register_backward(_REGISTERED[name][1], impl, _register(bwd))
    return op


def _register(impl: _Op):
    ns, _, opname = impl.qualname.partition("::")
    lib = torch.library.Library(ns, "FRAGMENT")
    try:
        lib.define(opname + schema(impl.params))
    except RuntimeError as exc:
        raise ArgumentError(f"cannot register custom op {impl.qualname!r}: {exc}") from None
    # registered per backend, not through torch.library.custom_op: its Python autograd and
    # dispatch layers cost ~40 us per call, ten times the kernel's call on small tensors
    lib.impl(opname, impl.run, "CPU")
    lib.impl(opname, impl.run, "CUDA")
    torch.library.register_fake(impl.qualname, impl.fake, lib=lib)
    _REGISTERED[impl.qualname] = (impl, lib)
    return getattr(getattr(torch.ops, ns), opname).default


def _func_and_kernels(kernel_or_func, name: str) -> tuple[PrimFunc, dict]:
    if not isinstance(name, str) or name.count("::") != 1:
        raise ArgumentError(f"custom_op name must be 'namespace::name', got {name!r}")
    func = getattr(kernel_or_func, "func", None)
    if isinstance(func, PrimFunc) and not hasattr(kernel_or_func, "mod"):   # a built kernel
        device = "cuda" if type(kernel_or_func).__name__ == "CudaKernel" else "cpu"
        return func, {device: kernel_or_func}
    func = as_prim_func(kernel_or_func, "tdsl.torch.custom_op")
    return func, {"func": func}


def _check_backward(fwd: _Op, backward) -> _Op:
    """The backward function's op, checked against the forward before anything is registered."""
    if any(p.role == "mutated" for p in fwd.params):
        raise ArgumentError(f"{fwd.qualname}: backward= needs an op without in-place updates")
    ns, _, base = fwd.qualname.partition("::")
    func, kernels = _func_and_kernels(backward, f"{ns}::{base}_backward")
    bwd = _Op(f"{ns}::{base}_backward", func, kernels)
    tensor_inputs = [p for p in fwd.args if p.role == "input"]
    want_args = len(fwd.args) + len(fwd.outputs)
    if len(bwd.args) != want_args or len(bwd.outputs) != len(tensor_inputs) or \
            any(p.role == "mutated" for p in bwd.params):
        raise ArgumentError(
            f"{fwd.qualname}: the backward function {func.name!r} must take the forward's "
            f"{len(fwd.args)} input(s) then {len(fwd.outputs)} output gradient(s) ({want_args} arguments) and "
            f"return {len(tensor_inputs)} gradient(s), one per tensor input; it takes {len(bwd.args)} and "
            f"returns {len(bwd.outputs)}")
    return bwd


def _register_backward(lib, fwd: _Op, bwd) -> None:
    """register_autograd for `fwd`, whose gradients the op `bwd` computes."""
    tensor_inputs = [i for i, p in enumerate(fwd.args) if p.role == "input"]

    def setup_context(ctx, inputs, output):
        ctx.tdsl_inputs = inputs
        ctx.save_for_backward(*[inputs[i] for i in tensor_inputs])

    def grad(ctx, *grads):
        saved = iter(ctx.saved_tensors)
        inputs = [next(saved) if p.role == "input" else a for p, a in zip(fwd.args, ctx.tdsl_inputs)]
        got = bwd(*inputs, *[g.contiguous() for g in grads])
        got = got if isinstance(got, tuple) else (got,)
        out: list = [None] * len(fwd.args)
        for i, g in zip(tensor_inputs, got):
            out[i] = g
        return tuple(out)

    torch.library.register_autograd(fwd.qualname, grad, setup_context=setup_context, lib=lib)


def to_torch(value):
    """A numpy array (or a tuple of them) as torch tensors sharing its memory."""
    if isinstance(value, tuple):
        return tuple(to_torch(v) for v in value)
    if isinstance(value, np.ndarray):
        if value.dtype.name == "bfloat16":
            return torch.from_numpy(value.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(value)
    return value


__all__ = ["custom_op", "signature", "schema", "to_torch"]
