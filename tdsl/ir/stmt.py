"""Statement nodes, blocks and the PrimFunc."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..dtypes import bool_
from . import printing
from .buffer import Buffer, BufferRegion
from .expr import IntImm, Node, PrimExpr, Range, Var

if TYPE_CHECKING:
    from ..errors import Span

FOR_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")
THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z",
               "vthread.x", "vthread.y", "vthread.z")

Annotations = tuple[tuple[str, Any], ...]


class AnnotationDict(tuple):
    """A dict annotation value, frozen: a tuple of (key, value) pairs that prints as a dict."""

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: {annotation_text(v)}" for k, v in self) + "}"


def annotation_text(value) -> str:
    """An annotation value as script text: lists print as lists, dicts as dicts."""
    if isinstance(value, tuple) and not isinstance(value, AnnotationDict):
        return "[" + ", ".join(annotation_text(v) for v in value) + "]"
    return repr(value)


def annotation_value(value):
    """`value` as the IR stores an annotation value: int, float, str and bool as they are, a
    list or tuple as a tuple, a dict (string keys) as an AnnotationDict, recursively. Raises
    ValueError for anything else."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, AnnotationDict):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(annotation_value(v) for v in value)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError("the keys of a dict annotation value are strings")
        return AnnotationDict((k, annotation_value(v)) for k, v in value.items())
    raise ValueError(f"an annotation value is an int, float, str, bool, or a list or dict of those, not "
                     f"{type(value).__name__}")


def _span_field():
    return field(default=None, kw_only=True, compare=False, repr=False)


class Stmt(Node):
    __slots__ = ()


@dataclass(frozen=True, slots=True, eq=False)
class BufferStore(Stmt):
    buffer: Buffer
    value: PrimExpr
    indices: tuple[PrimExpr, ...]
    span: Span | None = _span_field()


@dataclass(frozen=True, slots=True, eq=False)
class Evaluate(Stmt):
    """Evaluate an expression for its effect (an extern call in a tensor intrinsic)."""

    value: PrimExpr
    span: Span | None = _span_field()


@dataclass(frozen=True, slots=True, eq=False)
class For(Stmt):
    """`for loop_var in [min, min + extent)`; kind in FOR_KINDS; thread_tag for thread_binding."""

    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: str
    body: Stmt
    thread_tag: str | None = None
    annotations: Annotations = ()
    span: Span | None = _span_field()

    def __post_init__(self):
        if self.kind not in FOR_KINDS:
            raise ValueError(f"unknown loop kind {self.kind!r}")
        if (self.kind == "thread_binding") != (self.thread_tag is not None):
            raise ValueError("a thread_binding loop needs a thread_tag, and only it")


@dataclass(frozen=True, slots=True, eq=False)
class SeqStmt(Stmt):
    seq: tuple[Stmt, ...]
    span: Span | None = _span_field()


def flat_seq(stmts) -> list[Stmt]:
    """The statements of `stmts` with nested SeqStmts spliced in (they mean their concatenation)."""
    out: list[Stmt] = []
    for s in stmts:
        if isinstance(s, SeqStmt):
            out.extend(flat_seq(s.seq))
        else:
            out.append(s)
    return out


@dataclass(frozen=True, slots=True, eq=False)
class IfThenElse(Stmt):
    condition: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None
    span: Span | None = _span_field()


@dataclass(frozen=True, slots=True, eq=False)
class LetStmt(Stmt):
    """`var = value` scoped over `body` (the script's local names)."""

    var: Var
    value: PrimExpr
    body: Stmt
    span: Span | None = _span_field()


@dataclass(frozen=True, slots=True, eq=False)
class Allocate(Stmt):
    """Storage for `buffer` over `body` (lowered IR only; blocks allocate with alloc_buffers)."""

    buffer: Buffer
    body: Stmt
    span: Span | None = _span_field()


@dataclass(frozen=True, slots=True, eq=False)
class IterVar(Node):
    """A block iterator: `var` ranges over `dom`; kind "S" (spatial) or "R" (reduce)."""

    var: Var
    dom: Range
    kind: str
    span: Span | None = _span_field()

    def __post_init__(self):
        if self.kind not in ("S", "R"):
            raise ValueError(f"iterator kind must be 'S' or 'R', not {self.kind!r}")


@dataclass(frozen=True, slots=True, eq=False)
class Block(Stmt):
    """The unit of computation schedules act on. Its iterators are bound by a BlockRealize."""

    name: str
    iter_vars: tuple[IterVar, ...]
    reads: tuple[BufferRegion, ...]
    writes: tuple[BufferRegion, ...]
    body: Stmt
    init: Stmt | None = None
    alloc_buffers: tuple[Buffer, ...] = ()
    annotations: Annotations = ()
    span: Span | None = _span_field()

    @property
    def name_hint(self) -> str:
        """TVM's name for `name`."""
        return self.name


@dataclass(frozen=True, slots=True, eq=False)
class BlockRealize(Stmt):
    """Runs `block` with its iterators bound to `iter_values` when `predicate` holds."""

    iter_values: tuple[PrimExpr, ...]
    predicate: PrimExpr
    block: Block
    span: Span | None = _span_field()


TRUE = IntImm(1, bool_)


@dataclass(frozen=True, slots=True, eq=False)
class PrimFunc(Node):
    """A tensor program: parameters (Buffers and scalar Vars) and a body.

    The body of a parsed function is a BlockRealize of the implicit root block, which holds
    the function-level `T.alloc_buffer`s. Symbolic dimensions are the Vars found in the
    parameter buffers' shapes. `attrs` is a tuple of (key, value) pairs (compiler metadata,
    e.g. lowering's notes): look one up with `dict(func.attrs).get(key)`.

    `str(func)` / `print(func)` is the script; `repr(func)` one line (name, signature, blocks);
    notebooks render `_repr_html_`, the highlighted script.
    """

    name: str
    params: tuple[Buffer | Var, ...]
    body: Stmt
    attrs: Annotations = ()
    span: Span | None = _span_field()

    # user-facing conveniences (printed by tdsl.script through the hook in ir/printing.py) -----
    def script(self) -> str:
        return printing.script(self)

    def __str__(self) -> str:
        return self.script()

    def __repr__(self) -> str:
        return f"<PrimFunc {printing.summary(self)}>"

    def show(self, style: str | None = None) -> None:
        """Print the script, highlighted in a terminal; in a notebook, display it as HTML."""
        printing.show_function(self, style=style)

    def _repr_html_(self) -> str:
        return printing.function_html(self)

    def with_body(self, body: Stmt) -> PrimFunc:
        from dataclasses import replace

        return replace(self, body=body)

    def with_attr(self, key: str, value) -> PrimFunc:
        """A copy with the function attribute `key` set to `value` (TVM's `PrimFunc.with_attr`)."""
        from dataclasses import replace

        return replace(self, attrs=tuple((k, v) for k, v in self.attrs if k != key) + ((key, value),))

    def specialize(self, **sizes: int) -> PrimFunc:
        """A copy with symbolic dimensions bound to constants (TVM's name), arithmetic folded:

        >>> rowsum.specialize(n=1024)     # A: T.Buffer(("n", 64)) -> T.Buffer((1024, 64))
        """
        from .specialize import specialize

        return specialize(self, sizes)

    @property
    def buffer_params(self) -> tuple[Buffer, ...]:
        return tuple(p for p in self.params if isinstance(p, Buffer))

    @property
    def root_block(self) -> Block | None:
        return self.body.block if isinstance(self.body, BlockRealize) else None

    def __call__(self, *args, **kwargs):
        raise TypeError(f"prim_func {self.name!r} is IR, not a compiled kernel: call "
                        f"tdsl.interpret({self.name}, ...) or tdsl.build({self.name})(...)")


def as_prim_func(obj, caller: str) -> PrimFunc:
    """`obj` if it is a PrimFunc, else the current function of what holds one in `.func` (a
    Schedule); a TypeError naming `caller` ("tdsl.build", "lower()") for anything else."""
    if isinstance(obj, PrimFunc):
        return obj
    inner = getattr(obj, "func", None)
    if isinstance(inner, PrimFunc):
        return inner
    raise TypeError(f"{caller} takes a PrimFunc or a Schedule, not {type(obj).__name__}")
