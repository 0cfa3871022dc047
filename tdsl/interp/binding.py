"""The interpreter's calling convention (docs/calling.md): match arguments to parameters, check
dtypes and shapes, bind symbolic dimensions, allocate the outputs that were left out."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..arith.evaluate import EvalError, eval_int
from ..errors import ArgumentError
from ..ir.attrs import FLAT_PARAMS
from ..ir.buffer import Buffer
from ..ir.expr import Binary, BufferLoad, Call, IntImm, PrimExpr, Var
from ..ir.functor import post_order_visit
from ..ir.opaque_calls import TMA_STORE
from ..ir.outputs import read_before_written
from ..ir.stmt import Block, BufferStore, PrimFunc
from . import runtime


def written_buffers(func: PrimFunc) -> set[Buffer]:
    """Buffers the function writes: targets of stores (a TMA store's too) and buffers in any
    block's writes."""
    out: set[Buffer] = set()

    def visit(node):
        if isinstance(node, BufferStore):
            out.add(node.buffer)
        elif isinstance(node, Call) and node.op == TMA_STORE and isinstance(node.args[0], BufferLoad):
            out.add(node.args[0].buffer)
        elif isinstance(node, Block):
            out.update(r.buffer for r in node.writes)

    post_order_visit(func.body, visit)
    return out


def flat_mode(buf: Buffer) -> bool:
    """True when the generated code reaches `buf` through flat storage (strides or an offset)."""
    off = buf.elem_offset
    return bool(buf.strides) or (off is not None and not (isinstance(off, IntImm) and off.value == 0))


@dataclass
class _Env:
    """Values of the function's variables, and which parameter bound each (for messages)."""

    values: dict[Var, int] = field(default_factory=dict)
    origin: dict[Var, str] = field(default_factory=dict)


@dataclass
class BoundCall:
    storages: list[np.ndarray]
    values: list
    allocated: list[np.ndarray]
    copy_back: list[tuple[np.ndarray, np.ndarray]]  # (the caller's array, the contiguous copy run on)

    def finish(self) -> None:
        """Copy results computed on contiguous copies back into the caller's arrays."""
        for dst, src in self.copy_back:
            dst[...] = src.reshape(dst.shape)




def declared_params(func: PrimFunc) -> dict[Buffer, Buffer]:
    """For each buffer parameter, the buffer arguments are checked against: itself, or for a
    flattened (lowered) function the original n-d buffer kept in attrs["tdsl.flat_params"]."""
    originals = dict(func.attrs).get(FLAT_PARAMS)
    params = func.buffer_params
    if originals is None:
        return {p: p for p in params}
    if len(originals) != len(params):
        raise ArgumentError(f"{func.name}: attrs[{FLAT_PARAMS!r}] lists {len(originals)} buffers for "
                            f"{len(params)} buffer parameters")
    return dict(zip(params, originals))


def bind_arguments(func: PrimFunc, sig_buffers: list[Buffer], sig_vars: list[Var], written: set[Buffer],
                   args: tuple, kwargs: dict) -> BoundCall:
    """Turn a call's arguments into what the generated function takes."""
    given = _match_params(func, args, kwargs, written)
    decls = declared_params(func)
    env = _Env()
    for p in func.params:
        if isinstance(p, Var):
            env.values[p] = _scalar(p, given[p])
            env.origin[p] = f"scalar parameter {p.name!r}"
    pending: list[tuple[PrimExpr, int, str]] = []
    storages: dict[Buffer, np.ndarray] = {}
    copy_back: list[tuple[np.ndarray, np.ndarray]] = []
    for p in sig_buffers:
        if p in given:
            storages[p] = _bind_array(p, decls[p], given[p], p in written, env, pending, copy_back)
    _solve_pending(env, pending)
    allocated = []
    for p in sig_buffers:
        if p not in given:
            arr = _allocate_output(decls[p], env)
            storages[p] = arr if p is decls[p] and not flat_mode(p) else arr.reshape(-1)
            allocated.append(arr)
    values = []
    for v in sig_vars:
        if v not in env.values:
            raise ArgumentError(f"{func.name}(): cannot determine the value of {v.name!r} from the arguments")
        values.append(_typed(v, env.values[v]))
    return BoundCall([storages[p] for p in sig_buffers], values, allocated, copy_back)


def _match_params(func: PrimFunc, args: tuple, kwargs: dict, written: set[Buffer]) -> dict:
    params = func.params
    names = ", ".join(p.name for p in params)
    if len(args) > len(params):
        raise ArgumentError(f"{func.name}() takes {len(params)} arguments ({names}), got {len(args)}")
    given = dict(zip(params, args))
    by_name = {p.name: p for p in params}
    for key, value in kwargs.items():
        p = by_name.get(key)
        if p is None:
            raise ArgumentError(f"{func.name}() has no parameter {key!r}; its parameters are ({names})")
        if p in given:
            raise ArgumentError(f"{func.name}(): parameter {key!r} is given twice (by position and by name)")
        given[p] = value
    for p in params:
        if p in given:
            continue
        if isinstance(p, Var):
            raise ArgumentError(f"{func.name}(): missing scalar parameter {p.name!r} ({p.dtype})")
        if p not in written:
            outs = ", ".join(b.name for b in params if isinstance(b, Buffer) and b in written) or "none"
            raise ArgumentError(f"{func.name}(): missing input buffer {p.name!r}; only outputs (buffers the "
                                f"function writes: {outs}) may be left out")
        why = read_before_written(func, p)
        if why:
            raise ArgumentError(f"{func.name}(): output {p.name!r} cannot be left out: {why}; pass an "
                                "initialised array")
    return given


def _scalar(p: Var, value):
    dt = p.dtype
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    is_bool = isinstance(value, (bool, np.bool_))
    is_int = isinstance(value, (int, np.integer)) and not is_bool
    is_float = isinstance(value, (float, np.floating)) or type(value).__name__ == "bfloat16"
    if dt.is_bool:
        if not (is_bool or (is_int and value in (0, 1))):
            raise ArgumentError(f"scalar parameter {p.name!r} expects a bool, got {value!r}")
        return np.bool_(value)
    if dt.is_integer:
        if not is_int:
            raise ArgumentError(f"scalar parameter {p.name!r} expects an integer ({dt}), got {value!r}")
        lo, hi = np.iinfo(dt.numpy).min, np.iinfo(dt.numpy).max
        if not lo <= int(value) <= hi:
            raise ArgumentError(f"scalar parameter {p.name!r}: {value} does not fit in {dt}")
        return dt.numpy.type(int(value))
    if dt.is_float:
        if not (is_int or is_float):
            raise ArgumentError(f"scalar parameter {p.name!r} expects a number ({dt}), got {value!r}")
        return dt.numpy.type(value)
    raise ArgumentError(f"scalar parameter {p.name!r} has dtype {dt}, which the interpreter cannot take")


def _as_array(p: Buffer, value) -> np.ndarray:
    if isinstance(value, np.ndarray):
        arr = value
    elif hasattr(value, "__dlpack__"):
        try:
            arr = np.from_dlpack(value)
        except Exception as exc:  # the producer's own error text is the useful part
            raise ArgumentError(f"parameter {p.name!r}: cannot read the DLPack tensor on the CPU ({exc})") from exc
    else:
        raise ArgumentError(f"parameter {p.name!r} expects a numpy array ({p.dtype}), got {type(value).__name__}")
    if arr.dtype != p.dtype.numpy:
        raise ArgumentError(f"parameter {p.name!r} expects dtype {p.dtype}, got {arr.dtype}")
    return arr


def _bind_array(p: Buffer, decl: Buffer, value, written: bool, env: _Env, pending: list,
                copy_back: list) -> np.ndarray:
    """Check an array against the declared buffer `decl`, bind its symbolic sizes, and return
    the storage the generated code indexes: the array itself, or a flat view of its memory."""
    arr = _as_array(decl, value)
    if written and not arr.flags.writeable:
        raise ArgumentError(f"parameter {decl.name!r} is written by the function but the array is read-only")
    if arr.ndim != decl.ndim:
        raise ArgumentError(f"parameter {decl.name!r} expects a {decl.ndim}-d array of shape "
                            f"({', '.join(map(str, decl.shape))}), got shape {arr.shape}")
    for axis, (expr, actual) in enumerate(zip(decl.shape, arr.shape)):
        _match(expr, int(actual), f"parameter {decl.name!r} axis {axis}", env, pending)
    if decl.elem_offset is not None:
        _match(decl.elem_offset, 0, f"parameter {decl.name!r} elem_offset (an array starts at its element 0)",
               env, pending)
    if decl.strides:
        return _strided_storage(decl, arr, env, pending)
    if p is decl and not flat_mode(p):
        return arr  # n-d indexing through numpy handles any layout
    return _flatten(arr, written, copy_back)


def _flatten(arr: np.ndarray, written: bool, copy_back: list) -> np.ndarray:
    """A row-major flat view; a non-contiguous array is run on a copy (copied back if written)."""
    if arr.flags.c_contiguous:
        return arr.reshape(-1)
    flat = np.ascontiguousarray(arr).reshape(-1)
    if written:
        copy_back.append((arr, flat))
    return flat


def _strided_storage(p: Buffer, arr: np.ndarray, env: _Env, pending: list) -> np.ndarray:
    item = arr.itemsize
    if any(s < 0 or s % item for s in arr.strides):
        raise ArgumentError(f"parameter {p.name!r}: array strides {arr.strides} are not non-negative multiples "
                            f"of the element size {item}")
    elems = [s // item for s in arr.strides]
    for axis, (expr, actual) in enumerate(zip(p.strides, elems)):
        if arr.shape[axis] == 1 and isinstance(expr, IntImm):
            continue  # numpy leaves the stride of a length-1 axis arbitrary
        _match(expr, actual, f"parameter {p.name!r} stride of axis {axis}", env, pending)
    if arr.size == 0:
        return np.empty(0, arr.dtype)
    span = 1 + sum((d - 1) * s for d, s in zip(arr.shape, elems))
    return np.lib.stride_tricks.as_strided(arr, shape=(span,), strides=(item,))


def _match(expr: PrimExpr, actual: int, what: str, env: _Env, pending: list) -> None:
    if isinstance(expr, IntImm):
        if expr.value != actual:
            raise ArgumentError(f"{what}: expected {expr.value}, got {actual}")
    elif isinstance(expr, Var):
        if expr in env.values:
            if int(env.values[expr]) != actual:
                raise ArgumentError(f"{what}: expected {expr.name} = {int(env.values[expr])} (bound by "
                                    f"{env.origin[expr]}), got {actual}")
        else:
            env.values[expr] = actual
            env.origin[expr] = what
    else:
        pending.append((expr, actual, what))


def _solve_pending(env: _Env, pending: list) -> None:
    """Check compound shape entries (`n * 2`), solving `v * c` / `v + c` for a still-unbound v."""
    while pending:
        progress = False
        for item in list(pending):
            expr, actual, what = item
            free = [v for v in _vars(expr) if v not in env.values]
            if not free:
                value = evaluate(expr, env.values)
                if value != actual:
                    raise ArgumentError(f"{what}: expected {_describe(expr, env)} = {value}, got {actual}")
            elif not _solve(expr, actual, env, what):
                continue
            pending.remove(item)
            progress = True
        if not progress:
            expr, actual, what = pending[0]
            names = ", ".join(sorted(v.name for v in _vars(expr) if v not in env.values))
            raise ArgumentError(f"{what}: cannot determine {names} from the size {actual}; pass an argument whose "
                                "shape names it directly")


def _solve(expr: PrimExpr, actual: int, env: _Env, what: str) -> bool:
    if not isinstance(expr, Binary) or expr.op not in ("mul", "add"):
        return False
    var, const = (expr.a, expr.b) if isinstance(expr.a, Var) else (expr.b, expr.a)
    if not isinstance(var, Var) or not isinstance(const, IntImm):
        return False
    if expr.op == "add":
        env.values[var] = actual - const.value
    else:
        if const.value == 0 or actual % const.value:
            raise ArgumentError(f"{what}: size {actual} is not a multiple of {const.value}")
        env.values[var] = actual // const.value
    env.origin[var] = what
    return True


def _vars(expr: PrimExpr) -> list[Var]:
    out: list[Var] = []
    post_order_visit(expr, lambda n: out.append(n) if isinstance(n, Var) and n not in out else None)
    return out


def _describe(expr: PrimExpr, env: _Env) -> str:
    names = ", ".join(f"{v.name} = {int(env.values[v])}" for v in _vars(expr))
    return f"the size computed from {names}"


def evaluate(expr: PrimExpr, values: dict[Var, int]) -> int:
    """The value of an integer shape expression under `values` (KeyError for an unbound Var)."""
    try:
        return eval_int(expr, values)
    except EvalError as exc:
        raise ArgumentError(f"the interpreter cannot evaluate the shape expression {type(exc.node).__name__} at "
                            "call time") from None


def _allocate_output(p: Buffer, env: _Env) -> np.ndarray:
    if p.strides:
        raise ArgumentError(f"output {p.name!r} has explicit strides; pass its array instead of leaving it out")
    try:
        shape = tuple(evaluate(s, env.values) for s in p.shape)
    except KeyError as exc:
        raise ArgumentError(f"cannot allocate output {p.name!r}: the size {exc.args[0].name!r} is not fixed by "
                            "the other arguments; pass the output array") from None
    if any(n < 0 for n in shape):
        from ..script.printer import message_text

        bad = ", ".join(f"{message_text(s)} = {n}" for s, n in zip(p.shape, shape) if n < 0)
        bound = ", ".join(f"{v.name} = {int(env.values[v])}" for v in sorted(
            {v for s in p.shape for v in _vars(s) if v in env.values}, key=lambda v: v.name))
        raise ArgumentError(f"cannot allocate output {p.name!r}: its dimension {bad} is negative with {bound}; "
                            f"pass {p.name!r} or sizes that make it non-negative")
    if p.elem_offset is not None and isinstance(p.elem_offset, Var) and p.elem_offset not in env.values:
        env.values[p.elem_offset] = 0
        env.origin[p.elem_offset] = f"output {p.name!r}"
    for v, axis in ((s, k) for k, s in enumerate(p.shape)):
        if isinstance(v, Var):
            env.values.setdefault(v, shape[axis])
    return runtime.garbage(shape, p.dtype)


def _typed(v: Var, value):
    """A variable's value as a numpy scalar of its dtype (symbolic dimensions: int32)."""
    if isinstance(value, np.generic) and value.dtype == v.dtype.numpy:
        return value
    info = np.iinfo(v.dtype.numpy) if v.dtype.is_integer else None
    if info is not None and not info.min <= int(value) <= info.max:
        raise ArgumentError(f"{v.name} = {value} does not fit in {v.dtype}")
    return v.dtype.numpy.type(value)
