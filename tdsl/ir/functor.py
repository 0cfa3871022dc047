"""Generic traversal of the IR: visitors, mutators, substitution.

Traversal follows each node's dataclass fields in order. Buffers are definitions referenced
by identity, so traversal does not descend into them; override `visit_buffer` to map them.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Callable

from .buffer import Buffer
from .expr import Node, PrimExpr, Var


@lru_cache(maxsize=None)
def node_fields(cls) -> tuple[str, ...]:
    """The fields of an IR node class that take part in its meaning (all but `span`)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.name != "span")


class IRVisitor:
    """Walks a node tree; define `visit_<ClassName>` to act on a kind of node."""

    def visit(self, node):
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            return method(node)
        return self.generic_visit(node)

    def generic_visit(self, node) -> None:
        for name in node_fields(type(node)):
            self._visit_value(getattr(node, name))

    def _visit_value(self, value) -> None:
        if isinstance(value, Buffer):
            self.visit_buffer(value)
        elif isinstance(value, Node):
            self.visit(value)
        elif isinstance(value, tuple):
            for item in value:
                self._visit_value(item)

    def visit_buffer(self, buffer: Buffer) -> None:
        pass


class IRMutator:
    """Rebuilds a node tree bottom-up; unchanged subtrees are returned as the same objects."""

    def visit(self, node):
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            return method(node)
        return self.generic_visit(node)

    def generic_visit(self, node):
        changes = {}
        for name in node_fields(type(node)):
            old = getattr(node, name)
            new = self._visit_value(old)
            if new is not old:
                changes[name] = new
        return dataclasses.replace(node, **changes) if changes else node

    def _visit_value(self, value):
        if isinstance(value, Buffer):
            return self.visit_buffer(value)
        if isinstance(value, Node):
            return self.visit(value)
        if isinstance(value, tuple):
            new = tuple(self._visit_value(item) for item in value)
            if all(a is b for a, b in zip(new, value)):
                return value
            return new
        return value

    def visit_buffer(self, buffer: Buffer) -> Buffer:
        return buffer


def post_order_visit(node, fn: Callable[[Node], None]) -> None:
    """Call `fn` on every node under `node` (children first), buffers excluded."""

    class _Visitor(IRVisitor):
        def visit(self, n):
            self.generic_visit(n)
            fn(n)

    _Visitor().visit(node)


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


def substitute(node, vmap: dict[Var, PrimExpr], buffers: bool = False):
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


def uses_var(node, var: Var) -> bool:
    """True when `var` occurs under `node`."""
    found = []

    class _Finder(IRVisitor):
        def visit_Var(self, v):
            if v is var:
                found.append(v)

    _Finder().visit(node)
    return bool(found)


def free_vars(node: PrimExpr) -> set[Var]:
    out: set[Var] = set()
    post_order_visit(node, lambda n: out.add(n) if isinstance(n, Var) else None)
    return out
