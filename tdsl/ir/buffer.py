"""Buffer: a named n-d array with a dtype, a shape (symbolic dimensions are Vars), a scope."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..dtypes import DataType
from .expr import IntImm, Node, PrimExpr, Range

if TYPE_CHECKING:
    from ..errors import Span

SCOPES = ("global", "shared", "local")


@dataclass(frozen=True, slots=True, eq=False)
class Buffer(Node):
    """A buffer, compared by identity in the IR (alpha-equivalence in structural_equal).

    `strides` is empty for a compact row-major buffer; otherwise one stride (in elements) per
    dimension. `elem_offset` is the offset of element 0 in the underlying storage (views).
    """

    name: str
    shape: tuple[PrimExpr, ...]
    dtype: DataType
    strides: tuple[PrimExpr, ...] = ()
    elem_offset: PrimExpr | None = None
    scope: str = "global"
    span: Span | None = field(default=None, kw_only=True, compare=False, repr=False)

    @property
    def ty(self) -> Buffer:
        """TVM's type of a buffer parameter (`func.params[1].ty.shape`): a tdsl Buffer carries its
        shape and dtype itself."""
        return self

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Buffer({self.name!r}, {list(map(str, self.shape))}, {self.dtype}, scope={self.scope!r})"

    def __getitem__(self, indices):
        from .expr import BufferLoad, as_expr

        if not isinstance(indices, tuple):
            indices = (indices,)
        return BufferLoad(self, tuple(as_expr(i) for i in indices))

    def full_region(self) -> BufferRegion:
        return BufferRegion(self, tuple(Range(IntImm(0, s.dtype), s) for s in self.shape))

    def with_(self, **changes) -> Buffer:
        """A new buffer (a distinct identity) with some fields changed."""
        from dataclasses import replace

        return replace(self, **changes)


@dataclass(frozen=True, slots=True, eq=False)
class BufferRegion(Node):
    """A rectangular region of a buffer: one Range per dimension."""

    buffer: Buffer
    region: tuple[Range, ...]
    span: Span | None = field(default=None, kw_only=True, compare=False, repr=False)
