"""Helpers the generated interpreter code calls: wrap-around, casts, vector access, errors.

Scalars in generated code are numpy scalars of their IR dtype (exact float16/float32/int8...
arithmetic), except int32/int64 index arithmetic on loop variables and constants, which stays in
Python ints for speed and is wrapped explicitly (`wrap_int`) where overflow cannot be ruled out.
"""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import DataType
from ..errors import BoundsError

# Uninitialised memory: NaN for floats, this byte repeated for integers (0xA5A5A5A5 for
# int32), True for bool. Reading it makes a test fail loudly instead of passing by luck.
GARBAGE_BYTE = 0xA5


class InterpretError(Exception):
    """The function cannot be interpreted (malformed IR: an undefined variable or buffer...)."""


class ExternCallError(NotImplementedError):
    """The interpreter met a call it cannot run (an extern or hardware intrinsic)."""


def garbage(shape: tuple[int, ...], dtype: DataType) -> np.ndarray:
    """A fresh array filled with the recognisable "uninitialised" pattern."""
    nd = dtype.numpy
    if dtype.is_float:
        return np.full(shape, np.nan, dtype=nd)
    if dtype.is_bool:
        return np.ones(shape, dtype=nd)
    out = np.empty(shape, dtype=nd)
    out.view(np.uint8)[...] = GARBAGE_BYTE
    return out


def alloc(name: str, shape: tuple, dtype_name: str, strides: tuple = (), offset=0) -> np.ndarray:
    """Storage for an intermediate buffer: n-d when compact, flat when it has strides/offset."""
    dims = tuple(int(s) for s in shape)
    if any(d < 0 for d in dims):
        raise ValueError(f"buffer {name!r} has a negative extent in its shape {dims}")
    dtype = DataType.parse(dtype_name)
    if not strides and not offset:
        return garbage(dims, dtype)
    if any(d == 0 for d in dims):
        return garbage((int(offset),), dtype)
    span = int(offset) + 1 + sum((d - 1) * int(s) for d, s in zip(dims, strides))
    return garbage((max(span, 0),), dtype)


def make_wrap(bits: int, signed: bool):
    """A function wrapping a Python int into the range of an integer dtype, like C/numpy."""
    mask = (1 << bits) - 1
    half = 1 << (bits - 1)
    if signed:
        def wrap(x):
            return ((int(x) + half) & mask) - half
    else:
        def wrap(x):
            return int(x) & mask
    return wrap


def fmax(a, b):
    """`T.max` on float scalars as numpy's `maximum`: a NaN on either side gives NaN (Python's
    `max` keeps the first argument when the second is NaN)."""
    return a if a >= b or a != a else b


def fmin(a, b):
    """`T.min` on float scalars as numpy's `minimum`: a NaN on either side gives NaN."""
    return a if a <= b or a != a else b


def truncdiv(a, b):
    """Integer division rounding toward zero (the IR's `div` on integers, as in C)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) != (b < 0), -q, q).astype(np.result_type(a, b))
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def select(cond, true_value, false_value):
    """Eager select: both values were evaluated by the caller (T.Select)."""
    return true_value if cond else false_value


def ite_vector(cond, true_fn, false_fn):
    """Lazy vector if_then_else: only a branch some lane takes is evaluated."""
    if cond.all():
        return true_fn()
    if not cond.any():
        return false_fn()
    return np.where(cond, true_fn(), false_fn())


def make_erf(nptype):
    """erf in `nptype`, computed in double precision (numpy has no erf ufunc)."""
    def erf(x):
        if isinstance(x, np.ndarray):
            return np.array([math.erf(float(v)) for v in x], dtype=np.float64).astype(nptype)
        return nptype(math.erf(float(x)))
    return erf


def make_fma(nptype):
    """a * b + c rounded once for float16/32 (the product is exact in float64); plain for float64."""
    def fma(a, b, c):
        if nptype is np.float64:
            return a * b + c
        if isinstance(a, np.ndarray):
            return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(nptype)
        return nptype(np.float64(a) * np.float64(b) + np.float64(c))
    return fma


def ramp(base, stride, lanes: int, nptype):
    """The vector [base, base + stride, ...] in `nptype` (wrapping like the IR's integers)."""
    if np.issubdtype(nptype, np.integer):
        return (np.arange(lanes, dtype=np.int64) * int(stride) + int(base)).astype(nptype)
    return np.arange(lanes).astype(nptype) * nptype(stride) + nptype(base)


def broadcast(value, lanes: int, nptype):
    return np.full(lanes, value, dtype=nptype)


def out_of_bounds(buffer: str, indices: tuple, shape: tuple, where: str):
    """Raise BoundsError for a scalar access outside `shape`."""
    idx = ", ".join(str(int(i)) for i in indices)
    dims = ", ".join(str(int(s)) for s in shape)
    raise BoundsError(f"{where}: buffer {buffer!r} accessed at [{idx}], outside its shape ({dims})")


def index_check(index, extent, buffer: str, axis: int, where: str):
    """lower.index_checks' `tdsl.index_check`: `index`, if inside [0, extent) in every lane."""
    arr = np.asarray(index)
    if arr.size and (arr.min() < 0 or arr.max() >= int(extent)):
        bad = int(arr[(arr < 0) | (arr >= int(extent))].flat[0])
        raise BoundsError(f"{where}: buffer {buffer!r} accessed at index {bad} on axis {axis}, outside [0, "
                          f"{int(extent)})")
    return index


def bad_binding(block: str, iterator: str, value, lo, extent):
    raise BoundsError(f"block {block!r}: iterator {iterator} is bound to {int(value)}, outside its domain "
                      f"[{int(lo)}, {int(lo) + int(extent)})")


def vector_index(buffer: str, indices: tuple, shape: tuple, where: str) -> tuple:
    """Check a vector (or mixed) index tuple against `shape`; the arrays to index numpy with."""
    arrays = np.broadcast_arrays(*[np.asarray(i, dtype=np.int64) for i in indices])
    for axis, (arr, dim) in enumerate(zip(arrays, shape)):
        if arr.size and (arr.min() < 0 or arr.max() >= int(dim)):
            bad = int(arr[(arr < 0) | (arr >= int(dim))][0])
            lanes = [str(list(a)) for a in arrays]
            raise BoundsError(f"{where}: buffer {buffer!r} accessed at [{', '.join(lanes)}]; index {bad} on "
                              f"axis {axis} is outside its shape ({', '.join(str(int(s)) for s in shape)})")
    return tuple(arrays)


def flat_index(indices: tuple, strides: tuple, offset):
    """The storage position of an index tuple in a strided buffer."""
    pos = offset
    for i, s in zip(indices, strides):
        pos = pos + i * s
    return pos


def vload(storage: np.ndarray, buffer: str, indices: tuple, shape: tuple, where: str,
          strides: tuple | None = None, offset=0):
    """A vector load (lanes from fancy indexing)."""
    idx = vector_index(buffer, indices, shape, where)
    if strides is None:
        return storage[idx]
    return storage[flat_index(idx, strides, offset)]


def vstore(storage: np.ndarray, buffer: str, indices: tuple, shape: tuple, where: str, value,
           strides: tuple | None = None, offset=0) -> None:
    """A vector store; a scalar value is broadcast to every lane."""
    idx = vector_index(buffer, indices, shape, where)
    if strides is None:
        storage[idx] = value
    else:
        storage[flat_index(idx, strides, offset)] = value


def extern(op: str, where: str):
    from ..ir.opaque_calls import WMMA_BUILTINS, wmma_refusal

    if op in WMMA_BUILTINS:
        raise ExternCallError(wmma_refusal(op, f"{where}: the interpreter cannot run it"))
    raise ExternCallError(f"{where}: the interpreter cannot run extern call {op!r}; tensorized blocks are "
                          "interpreted through their intrinsic's description (interpret the function before "
                          "tensorize, or compare against the description)")
