"""structural_equal / structural_hash: equality of meaning, up to renaming (alpha-equivalence).

Variable, buffer and function names do not matter; block names and everything else do.
`structural_diff` says where two programs first differ.
"""
from __future__ import annotations

import hashlib
import math
import operator
from collections.abc import Callable
from functools import cache

from ..dtypes import DataType
from . import printing
from .buffer import Buffer
from .expr import FloatImm, Node, Var
from .functor import node_fields
from .stmt import PrimFunc, SeqStmt, flat_seq

_BUFFER_FIELDS = ("shape", "dtype", "strides", "elem_offset", "scope")


class _Differ:
    """Compares two trees depth-first, left to right, with an explicit stack (a 3,000-term sum is
    a 3,000-deep tree: no recursion limit applies)."""

    def __init__(self):
        self.lhs_map: dict[int, object] = {}
        self.rhs_map: dict[int, object] = {}

    @staticmethod
    def fail(path, what: str, a, b):
        labels = []
        while path is not None:  # (parent, owner, field): labels are only written for a difference
            path, owner, field = path
            labels.append(f"[{field}]" if isinstance(owner, tuple) else f"buffer {owner.name}.{field}"
                          if isinstance(owner, Buffer) else f"{type(owner).__name__}.{field}")
        return "/".join(reversed(labels)) or "<root>", what, a, b

    def bind(self, a, b) -> tuple[bool, bool]:
        """Map definition a <-> b on first sight; afterwards they must agree. (agrees, first)"""
        ma, mb = self.lhs_map.get(id(a)), self.rhs_map.get(id(b))
        if ma is None and mb is None:
            self.lhs_map[id(a)] = b
            self.rhs_map[id(b)] = a
            return True, True
        return ma is b and mb is a, False

    def cmp(self, a, b):
        """None when equal, else (path, what, lhs part, rhs part) of the first difference."""
        stack: list = [(a, b, None)]  # (lhs, rhs, path: None at the root, else (parent, owner, field))
        push = stack.append
        while stack:
            a, b, path = stack.pop()
            a, b = _normalize(a), _normalize(b)
            if type(a) is not type(b):
                return self.fail(path, f"{type(a).__name__} vs {type(b).__name__}", a, b)
            if isinstance(a, Var):
                if a.dtype != b.dtype:
                    return self.fail(path, f"variable dtype {a.dtype} vs {b.dtype}", a, b)
                if not self.bind(a, b)[0]:
                    return self.fail(path, "a variable or buffer refers to different definitions", a, b)
            elif isinstance(a, Buffer):
                agrees, first = self.bind(a, b)
                if not agrees:
                    return self.fail(path, "a variable or buffer refers to different definitions", a, b)
                if first:
                    for name in reversed(_BUFFER_FIELDS):
                        push((getattr(a, name), getattr(b, name), (path, a, name)))
            elif isinstance(a, Node):
                for name in _reversed_fields(type(a)):
                    push((getattr(a, name), getattr(b, name), (path, a, name)))
            elif isinstance(a, tuple):
                if len(a) != len(b):
                    return self.fail(path, f"{len(a)} items vs {len(b)}", a, b)
                for i in range(len(a) - 1, -1, -1):
                    push((a[i], b[i], (path, a, i)))
            elif isinstance(a, float):
                if not (a == b or (math.isnan(a) and math.isnan(b))):
                    return self.fail(path, f"{a!r} vs {b!r}", a, b)
            elif a != b:
                return self.fail(path, f"{a!r} vs {b!r}", a, b)
        return None


def _normalize(x):
    """Nested statement sequences mean their concatenation; a sequence of one is that statement."""
    if not isinstance(x, SeqStmt):
        return x
    flat = flat_seq(x.seq)
    if len(flat) == 1:
        return flat[0]
    if len(flat) == len(x.seq):
        return x
    return SeqStmt(tuple(flat))


def structural_diff(a, b) -> str | None:
    """None when `a` and `b` are structurally equal, else a description of the first difference."""
    err = _Differ().cmp(a, b)
    if err is None:
        return None
    path, what, x, y = err
    return f"first difference at {path}: {what}\n  lhs: {_short(x)}\n  rhs: {_short(y)}"


def _short(x) -> str:
    text = printing.message_text(x) if isinstance(x, Node) else repr(x)
    return text if len(text) < 300 else text[:297] + "..."


def structural_equal(a, b) -> bool:
    """True when `a` and `b` mean the same program up to renaming."""
    return _Differ().cmp(a, b) is None


def same_expr(a, b) -> bool:
    """Syntactic equality in one scope: variables and buffers compared by identity.

    Use it, not `structural_equal`, to ask whether two expressions of the same program name the
    same element: `structural_equal(vi, vj)` is True (it maps one free variable onto the other)."""
    stack = [(a, b)]
    while stack:
        a, b = stack.pop()
        if a is b:
            continue
        if type(a) is not type(b) or isinstance(a, (Var, Buffer)):
            return False
        if isinstance(a, Node):
            stack.extend((getattr(a, f), getattr(b, f)) for f in node_fields(type(a)))  # type: ignore[arg-type]
        elif isinstance(a, tuple):
            if len(a) != len(b):
                return False
            stack.extend(zip(a, b))
        elif isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            continue
        elif a != b:
            return False
    return True


def assert_structural_equal(a, b) -> None:
    """Raise AssertionError saying where `a` and `b` first differ."""
    diff = structural_diff(a, b)
    if diff is not None:
        raise AssertionError(diff)


class _Hasher:
    def __init__(self):
        self.ids: dict[int, int] = {}
        self.tokens: list[str] = []   # hashed once at the end: one update per token is slower
        self.emit = self.tokens.append
        self.keep: list = []

    def digest(self) -> str:
        return hashlib.blake2b("\x00".join(self.tokens).encode(), digest_size=16).hexdigest()

    def define(self, x) -> tuple[int, bool]:
        key = id(x)
        if key in self.ids:
            return self.ids[key], False
        self.ids[key] = len(self.ids)
        self.keep.append(x)
        return self.ids[key], True

    def visit(self, x):
        """Emit `x`'s tokens in depth-first order, with an explicit stack (no recursion limit)."""
        emit = self.emit
        getters = _REVERSED_VALUES
        stack = [x]
        pop, push = stack.pop, stack.append
        while stack:
            x = pop()
            t = type(x)
            if t is SeqStmt:
                x = _normalize(x)
                t = type(x)
            if t is tuple:
                emit(f"({len(x)}")
                push(_CLOSE)
                stack.extend(reversed(x))
            elif t in _SCALAR_TYPES:
                emit(f"{t.__name__}:{x!r}")
            elif t is DataType:
                emit(str(x))
            elif x is _CLOSE:
                emit(")")
            elif isinstance(x, Var):
                idx, _ = self.define(x)
                emit(f"var{idx}:{x.dtype}")
            elif isinstance(x, Buffer):
                idx, first = self.define(x)
                emit(f"buf{idx}")
                if first:
                    stack.extend(_BUFFER_VALUES_REVERSED(x))
            elif isinstance(x, Node):
                emit(t.__name__)
                getter = getters.get(t) or _reversed_values(t)
                stack.extend(getter(x))
            elif isinstance(x, float) and math.isnan(x):
                emit("nan")
            else:
                emit(f"{t.__name__}:{x!r}")


_CLOSE = object()  # the end of a tuple's items on the hasher's stack
_SCALAR_TYPES = frozenset({int, str, bool, type(None)})   # floats: NaN needs its own token


@cache
def _hashed_fields(cls) -> tuple[str, ...]:
    """A node's meaningful fields; a function's name is not part of its meaning."""
    return tuple(f for f in node_fields(cls) if not (f == "name" and issubclass(cls, PrimFunc)))


@cache
def _reversed_fields(cls) -> tuple[str, ...]:
    return tuple(reversed(_hashed_fields(cls)))


def _getter(names: tuple[str, ...]) -> Callable[[object], tuple]:
    """A function giving an object's values of `names`, as a tuple."""
    if len(names) == 1:
        name = names[0]
        return lambda x: (getattr(x, name),)
    return operator.attrgetter(*names) if names else (lambda x: ())


def _reversed_values(cls) -> Callable[[object], tuple]:
    """The values of a node's meaningful fields, last first (pushed on a stack, they pop in order)."""
    getter = _REVERSED_VALUES[cls] = _getter(_reversed_fields(cls))
    return getter


_REVERSED_VALUES: dict[type, Callable[[object], tuple]] = {}


_BUFFER_VALUES_REVERSED = _getter(tuple(reversed(_BUFFER_FIELDS)))


def structural_hash(node) -> str:
    """A hex digest equal for structurally equal programs."""
    hasher = _Hasher()
    hasher.visit(node)
    return hasher.digest()


__all__ = ["structural_equal", "structural_hash", "structural_diff", "assert_structural_equal", "FloatImm"]
