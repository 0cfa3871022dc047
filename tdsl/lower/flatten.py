"""`flatten_buffers`: every buffer becomes one-dimensional."""
from __future__ import annotations

from ..dtypes import int64 as _INT64
from ..errors import TargetError
from ..ir import (
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    Cast,
    IntImm,
    IRMutator,
    PrimExpr,
    PrimFunc,
    Stmt,
)
from ..ir.attrs import FLAT_PARAMS, get_attr, set_attr
from ..ir.functor import replace_fields as replace
from ..ir.tree import walk
from ._util import arith, promote_ints
from .simplify import simplify_index


def row_major_strides(shape: tuple[PrimExpr, ...]) -> tuple[PrimExpr, ...]:
    """Element strides of a compact row-major array of `shape` (symbolic shapes included)."""
    strides: list[PrimExpr] = []
    acc: PrimExpr | None = None
    for extent in reversed(shape):
        strides.append(IntImm(1, extent.dtype) if acc is None else acc)
        acc = extent if acc is None else arith("mul", *promote_ints([extent, acc]))
    return tuple(reversed(strides))


def buffer_strides(buf: Buffer) -> tuple[PrimExpr, ...]:
    return buf.strides if buf.strides else row_major_strides(buf.shape)


def flat_extent(buf: Buffer) -> PrimExpr:
    """Number of elements the flat buffer spans: prod(shape) for a compact buffer; for explicit
    strides, the last reachable element + 1. `elem_offset` adds to both."""
    if not buf.shape:
        size: PrimExpr = IntImm(1)
    elif buf.strides:
        terms = [arith("mul", *promote_ints([arith("sub", s, IntImm(1, s.dtype)), st]))
                 for s, st in zip(buf.shape, buf.strides)]
        size = IntImm(1, terms[0].dtype)
        for t in terms:
            size = arith("add", *promote_ints([size, t]))
    else:
        size = buf.shape[0]
        for s in buf.shape[1:]:
            size = arith("mul", *promote_ints([size, s]))
    if buf.elem_offset is not None:
        size = arith("add", *promote_ints([size, buf.elem_offset]))
    return simplify_index(size)


def flat_index(buf: Buffer, indices: tuple[PrimExpr, ...]) -> PrimExpr:
    """sum(index_k * stride_k) + elem_offset, in the widest integer type involved."""
    if len(indices) != len(buf.shape):
        raise ValueError(f"buffer {buf.name!r} has {len(buf.shape)} dimensions but is indexed with "
                         f"{len(indices)} indices")
    if not indices:
        index: PrimExpr = IntImm(0)
    else:
        strides = buffer_strides(buf)
        index = None
        for idx, stride in zip(indices, strides):
            idx, stride = promote_ints([idx, stride])
            term = arith("mul", idx, stride)
            index = term if index is None else arith("add", *promote_ints([index, term]))
    if buf.elem_offset is not None:
        index = arith("add", *promote_ints([index, buf.elem_offset]))
    return index


def _shape_text(buf: Buffer) -> str:
    from ..script.printer import expr_str as expr_text

    return "(" + ", ".join(expr_text(s) for s in buf.shape) + ("," if len(buf.shape) == 1 else "") + ")"


def _exact_extent(buf: Buffer) -> int | None:
    """The flat extent of a buffer of constant shape (strides, offset) as a Python int."""
    parts = list(buf.shape) + list(buf.strides) + ([buf.elem_offset] if buf.elem_offset is not None else [])
    values = [p.value for p in parts if isinstance(p, IntImm)]
    if len(values) != len(parts):
        return None
    ndim = len(buf.shape)
    shape, rest = values[:ndim], values[ndim:]
    strides, offset = rest[:len(buf.strides)], rest[len(buf.strides):]
    if not shape:
        size = 1
    elif strides:
        size = 1 + sum((s - 1) * st for s, st in zip(shape, strides))
    else:
        size = 1
        for s in shape:
            size *= s
    return size + (offset[0] if offset else 0)


def checked_flat_extent(buf: Buffer, allocated: bool = True) -> PrimExpr:
    """`flat_extent`, refusing (TargetError, at build) a constant shape whose element count its
    index dtype cannot address (it would wrap: `T.alloc_buffer((65536, 32768))` allocated
    nothing). An allocated buffer's symbolic multi-dimensional count is computed in int64, so
    the allocation sees the true size rather than a wrapped one (parameters: the call checks
    the arrays)."""
    exact = _exact_extent(buf)
    index_bits = max([s.dtype.bits for s in buf.shape] + [32])
    if exact is not None:
        if exact >= 1 << (index_bits - 1):
            raise TargetError(f"buffer {buf.name!r} of shape {_shape_text(buf)} has {exact} elements, more than "
                              f"int{index_bits} indices address ({(1 << (index_bits - 1)) - 1}); give its shape "
                              f"T.int64 extents, or make it smaller")
        return flat_extent(buf)
    dims = [s for s in buf.shape if not (isinstance(s, IntImm) and s.value == 1)]
    if allocated and len(dims) > 1 and not buf.strides and buf.elem_offset is None and index_bits == 32:
        size: PrimExpr | None = None
        for s in dims:
            s64 = s if s.dtype.bits == 64 else Cast(_INT64, s)
            size = s64 if size is None else arith("mul", size, s64)
        assert size is not None
        return size
    return flat_extent(buf)


class _Flattener(IRMutator):
    def __init__(self, params=()):
        self.bmap: dict[Buffer, Buffer] = {}
        self.params = set(params)

    def visit_buffer(self, buf: Buffer) -> Buffer:
        if buf not in self.bmap:
            self.bmap[buf] = Buffer(buf.name, (checked_flat_extent(buf, buf not in self.params),), buf.dtype, scope=buf.scope,
                                    span=buf.span)
        return self.bmap[buf]

    def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
        indices = tuple(self.visit(i) for i in op.indices)
        return BufferLoad(self.visit_buffer(op.buffer), (flat_index(op.buffer, indices),), span=op.span)

    def visit_BufferStore(self, op: BufferStore):
        indices = tuple(self.visit(i) for i in op.indices)
        value = self.visit(op.value)
        return replace(op, buffer=self.visit_buffer(op.buffer), value=value,
                       indices=(flat_index(op.buffer, indices),))


def _has_block(stmt: Stmt) -> bool:
    """Whether a block is left under `stmt` (blocks are statements: expressions are not walked)."""
    return any(isinstance(s, (Block, BlockRealize)) for s in walk(stmt))


def _is_flat(buf: Buffer) -> bool:
    return len(buf.shape) == 1 and not buf.strides and buf.elem_offset is None


def flatten_buffers(func: PrimFunc) -> PrimFunc:
    """Every buffer becomes 1-d: index = sum(index_k * stride_k) + elem_offset, strides from
    `buffer.strides` or row-major from the shape. Parameters become new flat Buffers of the
    same name; the original parameter buffers are kept in attrs["tdsl.flat_params"]."""
    if _has_block(func.body):
        raise ValueError(f"flatten_buffers needs a function without blocks; run convert_blocks first "
                         f"(function {func.name!r})")
    if get_attr(func, FLAT_PARAMS) is not None and all(_is_flat(b) for b in func.buffer_params):
        return func  # already lowered once
    originals = tuple(func.buffer_params)
    flattener = _Flattener(originals)
    body = flattener.visit(func.body)
    params = tuple(flattener.visit_buffer(p) if isinstance(p, Buffer) else p for p in func.params)
    return set_attr(replace(func, params=params, body=body), FLAT_PARAMS, originals)
