"""`flatten_buffers`: every buffer becomes one-dimensional."""
from __future__ import annotations

from ..ir import (
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
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


class _Flattener(IRMutator):
    def __init__(self):
        self.bmap: dict[Buffer, Buffer] = {}

    def visit_buffer(self, buf: Buffer) -> Buffer:
        if buf not in self.bmap:
            self.bmap[buf] = Buffer(buf.name, (flat_extent(buf),), buf.dtype, scope=buf.scope, span=buf.span)
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
    flattener = _Flattener()
    body = flattener.visit(func.body)
    params = tuple(flattener.visit_buffer(p) if isinstance(p, Buffer) else p for p in func.params)
    return set_attr(replace(func, params=params, body=body), FLAT_PARAMS, originals)
