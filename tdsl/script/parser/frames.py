"""The parser's own values: a script's source, a `T.handle` parameter, a view, a block being read;
and how an error message names any value."""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.buffer import Buffer, BufferRegion
from ...ir.expr import IntImm, PrimExpr, Var
from ...ir.stmt import TRUE, IterVar, PrimFunc, Stmt
from .common import _simplify


@dataclass


class _Source:
    lines: list[str]
    file: str
    line_offset: int = 0
    col_offset: int = 0


class _HandleParam:
    """A `T.handle` parameter; `T.match_buffer` gives it its buffer."""

    def __init__(self, name: str):
        self.name = name
        self.buffer: Buffer | None = None


@dataclass


class _View:
    """`X = T.match_buffer(A[region], shape)` inside a block: X[i, j] is an element of A's
    region (tdsl has no buffer views in the IR, so the parser rewrites every use of X)."""

    name: str
    parent: Buffer
    starts: tuple  # per parent dimension, the region's start
    dims: tuple  # for each view dimension, the parent dimension it walks
    shape: tuple

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def parent_indices(self, indices) -> tuple:
        out = list(self.starts)
        for d, i in zip(self.dims, indices):
            out[d] = _simplify(self.starts[d] + i) if not (isinstance(self.starts[d], IntImm)
                                                           and self.starts[d].value == 0) else i
        return tuple(out)


@dataclass(frozen=True)
class _PendingOffset:
    """`off = T.int32()` in a block (TVM): a name a later `T.match_buffer(..., elem_offset=off)`
    binds to the view's offset in its parent's storage."""

    name: str
    dtype: str


class _BlockFrame:
    """What a `with T.block` body declares before its statements."""

    def __init__(self, name: str):
        self.name = name
        self.iter_vars: list[IterVar] = []
        self.iter_values: list[PrimExpr] = []
        self.reads: tuple[BufferRegion, ...] | None = None
        self.writes: tuple[BufferRegion, ...] | None = None
        self.predicate: PrimExpr = TRUE
        self.annotations: tuple = ()
        self.alloc_buffers: list[Buffer] = []
        self.init: Stmt | None = None
        self.pending_offsets: dict[str, object] = {}  # `off = T.int32()` names no view has bound yet


def _describe(value) -> str:
    if isinstance(value, _PendingOffset):
        return f"{value.name} (a T.{value.dtype}() that no T.match_buffer(..., elem_offset={value.name}) has bound yet)"
    if isinstance(value, _View):
        return f"the view {value.name} of {value.parent.name}"
    if isinstance(value, _HandleParam):
        return f"the T.handle parameter {value.name}"
    if isinstance(value, Buffer):
        return f"the buffer {value.name}"
    if isinstance(value, Var):
        return f"the variable {value.name}"
    if isinstance(value, PrimExpr):
        return f"a {value.dtype} expression"
    if isinstance(value, PrimFunc):
        return f"the prim_func {value.name}"
    return f"{type(value).__name__} {value!r}"[:80]

