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
import torch  # absolute: this module is tdsl.torch, the package it wraps is the top-level torch

from tdsl.errors import ArgumentError
from tdsl.ir import Binary, Block, BufferStore, Cast, IntImm, PrimFunc, Var, as_prim_func, collect
from tdsl.ir.outputs import read_before_written

_TORCH_DTYPES = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
    "uint8": torch.uint8, "bool": torch.bool,
}
_SCALAR_SCHEMA = {"float": "float", "int": "int", "uint": "int", "bool": "bool"}


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


def custom_op(name: str, kernel_or_func, backward=None):
    """Register `kernel_or_func` (a built tdsl Kernel, a PrimFunc or a Schedule) as the torch
    custom op `name` ("namespace::name") and return it (a torch.library CustomOpDef).

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
    op_impl = _Op(name, func, kernels)
    mutated = [p.name for p in op_impl.args if p.role == "mutated"]
    op = torch.library.custom_op(name, op_impl.run, mutates_args=mutated, schema=schema(op_impl.params))
    op.register_fake(op_impl.fake)
    op.tdsl = op_impl  # type: ignore[attr-defined]  # what backward= and tests read
    if backward is not None:
        _register_backward(op, op_impl, backward)
    return op


def _func_and_kernels(kernel_or_func, name: str) -> tuple[PrimFunc, dict]:
    if not isinstance(name, str) or name.count("::") != 1:
        raise ArgumentError(f"custom_op name must be 'namespace::name', got {name!r}")
    func = getattr(kernel_or_func, "func", None)
    if isinstance(func, PrimFunc) and not hasattr(kernel_or_func, "mod"):   # a built kernel
        device = "cuda" if type(kernel_or_func).__name__ == "CudaKernel" else "cpu"
        return func, {device: kernel_or_func}
    func = as_prim_func(kernel_or_func, "tdsl.torch.custom_op")
    return func, {"func": func}


def _register_backward(op, fwd: _Op, backward) -> None:
    if any(p.role == "mutated" for p in fwd.params):
        raise ArgumentError(f"{fwd.qualname}: backward= needs an op without in-place updates")
    ns, _, base = fwd.qualname.partition("::")
    bwd = custom_op(f"{ns}::{base}_backward", backward)
    tensor_inputs = [i for i, p in enumerate(fwd.args) if p.role == "input"]
    bwd_impl = bwd.tdsl
    want_args = len(fwd.args) + len(fwd.outputs)
    if len(bwd_impl.args) != want_args or len(bwd_impl.outputs) != len(tensor_inputs):
        raise ArgumentError(
            f"{fwd.qualname}: the backward function {bwd_impl.func.name!r} must take the forward's "
            f"{len(fwd.args)} input(s) then {len(fwd.outputs)} output gradient(s) ({want_args} arguments) and "
            f"return {len(tensor_inputs)} gradient(s), one per tensor input; it takes {len(bwd_impl.args)} and "
            f"returns {len(bwd_impl.outputs)}")

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

    op.register_autograd(grad, setup_context=setup_context)


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
