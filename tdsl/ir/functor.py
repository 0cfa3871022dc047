"""Generic traversal of the IR: visitors, mutators, substitution.

Traversal follows each node's dataclass fields in order. Buffers are definitions referenced
by identity, so traversal does not descend into them; override `visit_buffer` to map them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from functools import cache
from typing import ClassVar

from .buffer import Buffer
from .expr import Binary, Broadcast, BufferLoad, Call, Cast, Node, PrimExpr, Ramp, Var


@cache
def node_fields(cls) -> tuple[str, ...]:
    """The fields of an IR node class that take part in its meaning (all but `span`)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.name != "span")


# Field annotations that can never hold a node, a buffer or a tuple: traversal skips them. The
# annotations are strings (`from __future__ import annotations` in the IR modules).
_LEAF_ANNOTATIONS = frozenset({"str", "int", "float", "bool", "DataType", "str | None"})


@cache
def child_fields(cls) -> tuple[str, ...]:
    """The fields of `cls` that traversal looks into: node_fields minus names, dtypes, kinds and
    other plain values (a Var or an immediate has none)."""
    return tuple(f.name for f in dataclasses.fields(cls)
                 if f.name != "span" and str(f.type) not in _LEAF_ANNOTATIONS)



def expr_children(e: Node) -> list[PrimExpr]:
    """The expressions directly inside `e` (its child_fields, tuples such as a call's args
    included; a BufferLoad's indices too): walkers built on it take a new node kind along
    without a list of field names to update."""
    out: list[PrimExpr] = []
    for name in child_fields(type(e)):
        child = getattr(e, name)
        if isinstance(child, PrimExpr):
            out.append(child)
        elif isinstance(child, tuple):
            out.extend(c for c in child if isinstance(c, PrimExpr))
    return out

@cache
def _init_fields(cls) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(positional, keyword-only) constructor fields of a node class, in order."""
    fields = [f for f in dataclasses.fields(cls) if f.init]
    return (tuple(f.name for f in fields if not f.kw_only), tuple(f.name for f in fields if f.kw_only))


@cache
def _init_names(cls) -> frozenset[str]:
    positional, keyword = _init_fields(cls)
    return frozenset(positional + keyword)


def replace_fields(node, **changes):
    """`dataclasses.replace` for IR nodes, without its per-call field inspection (the
    constructor, and so its checks, still runs)."""
    if not changes.keys() <= _init_names(type(node)):
        raise TypeError(f"{type(node).__name__} has no field(s) {', '.join(sorted(changes.keys() - _init_names(type(node))))}")
    positional, keyword = _init_fields(type(node))
    args = [changes[n] if n in changes else getattr(node, n) for n in positional]
    return type(node)(*args, **{n: changes[n] if n in changes else getattr(node, n) for n in keyword})


@cache
def _rebuild_plan(cls) -> tuple[tuple[tuple[str, int], ...], tuple[str, ...]]:
    """((positional field, its index in child_fields or -1), ...), keyword-only fields."""
    positional, keyword = _init_fields(cls)
    children = child_fields(cls)
    return tuple((n, children.index(n) if n in children else -1) for n in positional), keyword


def _rebuild(node, children: list):
    """A copy of `node` with new values of its child_fields, in order (what
    `dataclasses.replace` makes, without its per-call field inspection; the constructor, and so
    its checks, still runs)."""
    plan, keyword = _rebuild_plan(type(node))
    args = [children[k] if k >= 0 else getattr(node, n) for n, k in plan]
    if keyword:
        return type(node)(*args, **{n: getattr(node, n) for n in keyword})
    return type(node)(*args)


_NO_METHOD = object()
_LEAF = object()  # no visit method and nothing to traverse: visit returns at once


def _lookup(visitor_cls, node_cls):
    """What `visit` does with a `node_cls` node: its visit_<ClassName> function, _LEAF, or
    _NO_METHOD (generic traversal); cached in the visitor class's own table."""
    fn = getattr(visitor_cls, "visit_" + node_cls.__name__, _NO_METHOD)
    generic = visitor_cls.generic_visit
    if (fn is _NO_METHOD and generic in (IRVisitor.generic_visit, IRMutator.generic_visit)
            and dataclasses.is_dataclass(node_cls) and not child_fields(node_cls)):
        fn = _LEAF
    visitor_cls._visit_table[node_cls] = fn
    return fn


class _Dispatching:
    """Gives every visitor class its own type(node) -> method table (see _lookup)."""

    _visit_table: ClassVar[dict] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._visit_table = {}


class IRVisitor(_Dispatching):
    """Walks a node tree; define `visit_<ClassName>` to act on a kind of node."""

    def visit(self, node):
        fn = self._visit_table.get(type(node)) or _lookup(type(self), type(node))
        if fn is _LEAF:
            return None
        if fn is not _NO_METHOD:
            return fn(self, node)
        return self.generic_visit(node)

    def generic_visit(self, node) -> None:
        t = type(node)
        if t is Binary:   # the most common nodes, spelled out
            self.visit(node.a)
            self.visit(node.b)
            return
        if t is BufferLoad:
            self.visit_buffer(node.buffer)
            self._visit_tuple(node.indices)
            return
        for name in child_fields(t):
            value = getattr(node, name)
            if isinstance(value, Buffer):
                self.visit_buffer(value)
            elif isinstance(value, Node):
                self.visit(value)
            elif isinstance(value, tuple):
                self._visit_tuple(value)

    def _visit_tuple(self, value: tuple) -> None:
        for item in value:
            if isinstance(item, Buffer):
                self.visit_buffer(item)
            elif isinstance(item, Node):
                self.visit(item)
            elif isinstance(item, tuple):
                self._visit_tuple(item)

    def visit_buffer(self, buffer: Buffer) -> None:
        pass


class IRMutator(_Dispatching):
    """Rebuilds a node tree bottom-up; unchanged subtrees are returned as the same objects."""

    def visit(self, node):
        fn = self._visit_table.get(type(node)) or _lookup(type(self), type(node))
        if fn is _LEAF:
            return node
        if fn is not _NO_METHOD:
            return fn(self, node)
        return self.generic_visit(node)

    def generic_visit(self, node):
        fast = _FAST_MUTATE.get(type(node))
        if fast is not None:
            return fast(self, node)
        names = child_fields(type(node))
        children = None
        for k, name in enumerate(names):
            old = getattr(node, name)
            if isinstance(old, Buffer):
                new = self.visit_buffer(old)
            elif isinstance(old, Node):
                new = self.visit(old)
            elif isinstance(old, tuple):
                new = self._visit_tuple(old)
            else:
                continue
            if new is not old:
                if children is None:
                    children = [getattr(node, n) for n in names]
                children[k] = new
        return node if children is None else _rebuild(node, children)

    def _visit_tuple(self, value: tuple) -> tuple:
        new = None
        for k, item in enumerate(value):
            if isinstance(item, Buffer):
                out = self.visit_buffer(item)
            elif isinstance(item, Node):
                out = self.visit(item)
            elif isinstance(item, tuple):
                out = self._visit_tuple(item)
            else:
                continue
            if out is not item:
                if new is None:
                    new = list(value)
                new[k] = out
        return value if new is None else tuple(new)

    def visit_buffer(self, buffer: Buffer) -> Buffer:
        return buffer


# generic_visit of the most common expressions, spelled out (what the field loop does for them)

def _mutate_binary(m: IRMutator, e: Binary) -> PrimExpr:
    a, b = m.visit(e.a), m.visit(e.b)
    return e if a is e.a and b is e.b else Binary(e.op, a, b, span=e.span)


def _mutate_load(m: IRMutator, e: BufferLoad) -> PrimExpr:
    buf, indices = m.visit_buffer(e.buffer), m._visit_tuple(e.indices)
    return e if buf is e.buffer and indices is e.indices else BufferLoad(buf, indices, span=e.span)


def _mutate_call(m: IRMutator, e: Call) -> PrimExpr:
    args = m._visit_tuple(e.args)
    return e if args is e.args else Call(e.dtype, e.op, args, span=e.span)


def _mutate_broadcast(m: IRMutator, e: Broadcast) -> PrimExpr:
    value = m.visit(e.value)
    return e if value is e.value else Broadcast(value, e.lanes, span=e.span)


def _mutate_ramp(m: IRMutator, e: Ramp) -> PrimExpr:
    base, stride = m.visit(e.base), m.visit(e.stride)
    return e if base is e.base and stride is e.stride else Ramp(base, stride, e.lanes, span=e.span)


def _mutate_cast(m: IRMutator, e: Cast) -> PrimExpr:
    value = m.visit(e.value)
    return e if value is e.value else Cast(e.dtype, value, span=e.span)


_FAST_MUTATE = {Binary: _mutate_binary, BufferLoad: _mutate_load, Call: _mutate_call, Broadcast: _mutate_broadcast,
                Ramp: _mutate_ramp, Cast: _mutate_cast}


class _PostOrder(IRVisitor):
    def __init__(self, fn: Callable[[Node], None]):
        self.fn = fn

    def visit(self, n):
        self.generic_visit(n)
        self.fn(n)


def post_order_visit(node, fn: Callable[[Node], None]) -> None:
    """Call `fn` on every node under `node` (children first), buffers excluded."""
    _PostOrder(fn).visit(node)


def collect(node, cls) -> list:
    """Every node of class `cls` under `node`, in post order."""
    out = []
    post_order_visit(node, lambda n: out.append(n) if isinstance(n, cls) else None)
    return out


class _Substituter(IRMutator):
    def __init__(self, vmap, buffers: bool):
        self.vmap = vmap
        self.buffers = buffers
        self.bmap: dict[Buffer, Buffer] = {}

    def visit_Var(self, var):
        return self.vmap.get(var, var)

    def visit_buffer(self, buffer):
        if not self.buffers:
            return buffer
        if buffer not in self.bmap:
            shape = tuple(self.visit(s) for s in buffer.shape)
            strides = tuple(self.visit(s) for s in buffer.strides)
            off = None if buffer.elem_offset is None else self.visit(buffer.elem_offset)
            same = (all(a is b for a, b in zip(shape, buffer.shape)) and
                    all(a is b for a, b in zip(strides, buffer.strides)) and off is buffer.elem_offset)
            self.bmap[buffer] = buffer if same else buffer.with_(shape=shape, strides=strides, elem_offset=off)
        return self.bmap[buffer]


def substitute(node, vmap: Mapping[Var, PrimExpr], buffers: bool = False):
    """Replace variables by expressions (inside buffer shapes too when `buffers`)."""
    if not vmap:
        return node
    return _Substituter(vmap, buffers).visit(node)


class _BufferReplacer(IRMutator):
    def __init__(self, bmap):
        self.bmap = bmap

    def visit_buffer(self, buffer):
        return self.bmap.get(buffer, buffer)


def replace_buffers(node, bmap: dict[Buffer, Buffer]):
    """Replace every reference to the buffers in `bmap` (loads, stores, regions, allocations)."""
    if not bmap:
        return node
    return _BufferReplacer(bmap).visit(node)


class _Found(Exception):
    """Ends a search at its first hit."""


class _VarFinder(IRVisitor):
    def __init__(self, var: Var):
        self.var = var

    def visit_Var(self, v: Var) -> None:
        if v is self.var:
            raise _Found


def uses_var(node, var: Var) -> bool:
    """True when `var` occurs under `node`."""
    try:
        _VarFinder(var).visit(node)
    except _Found:
        return True
    return False


class _FreeVars(IRVisitor):
    def __init__(self):
        self.out: set[Var] = set()

    def visit_Var(self, v: Var) -> None:
        self.out.add(v)


def free_vars(node: Node) -> set[Var]:
    """Every Var under `node` (buffers' shapes excluded)."""
    finder = _FreeVars()
    finder.visit(node)
    return finder.out
