"""structural_equal / structural_hash: equality of meaning, up to renaming (alpha-equivalence).

Variable, buffer and function names do not matter; block names and everything else do.
`structural_diff` says where two programs first differ.
"""
from __future__ import annotations

import hashlib
import math
from functools import lru_cache

from ..dtypes import DataType
from . import printing
from .buffer import Buffer
from .expr import FloatImm, Node, Var
from .functor import node_fields
from .stmt import PrimFunc, SeqStmt, flat_seq

_BUFFER_FIELDS = ("shape", "dtype", "strides", "elem_offset", "scope")


class _Differ:
    def __init__(self):
        self.lhs_map: dict[int, object] = {}
        self.rhs_map: dict[int, object] = {}
        self.path: list[str] = []

    def fail(self, what: str, a, b):
        return "/".join(self.path) or "<root>", what, a, b

    def bind(self, a, b):
        """Map definition a <-> b on first sight; afterwards they must agree."""
        ma, mb = self.lhs_map.get(id(a)), self.rhs_map.get(id(b))
        if ma is None and mb is None:
            self.lhs_map[id(a)] = b
            self.rhs_map[id(b)] = a
            return None, True
        if ma is b and mb is a:
            return None, False
        return self.fail("a variable or buffer refers to different definitions", a, b), False

    def cmp(self, a, b):
        a, b = _normalize(a), _normalize(b)
        if type(a) is not type(b):
            return self.fail(f"{type(a).__name__} vs {type(b).__name__}", a, b)
        if isinstance(a, Var):
            if a.dtype != b.dtype:
                return self.fail(f"variable dtype {a.dtype} vs {b.dtype}", a, b)
            err, _ = self.bind(a, b)
            return err
        if isinstance(a, Buffer):
            err, first = self.bind(a, b)
            if err or not first:
                return err
            for name in _BUFFER_FIELDS:
                self.path.append(f"buffer {a.name}.{name}")
                err = self.cmp(getattr(a, name), getattr(b, name))
                self.path.pop()
                if err:
                    return err
            return None
        if isinstance(a, Node):
            for name in node_fields(type(a)):
                if name == "name" and isinstance(a, PrimFunc):
                    continue
                self.path.append(f"{type(a).__name__}.{name}")
                err = self.cmp(getattr(a, name), getattr(b, name))
                self.path.pop()
                if err:
                    return err
            return None
        if isinstance(a, tuple):
            if len(a) != len(b):
                return self.fail(f"{len(a)} items vs {len(b)}", a, b)
            for i, (x, y) in enumerate(zip(a, b)):
                self.path.append(f"[{i}]")
                err = self.cmp(x, y)
                self.path.pop()
                if err:
                    return err
            return None
        if isinstance(a, float):
            if a == b or (math.isnan(a) and math.isnan(b)):
                return None
            return self.fail(f"{a!r} vs {b!r}", a, b)
        if a != b:
            return self.fail(f"{a!r} vs {b!r}", a, b)
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
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (Var, Buffer)):
        return False
    if isinstance(a, Node):
        return all(same_expr(getattr(a, f), getattr(b, f)) for f in node_fields(type(a)))  # type: ignore[arg-type]
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same_expr(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


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
        t = type(x)
        if t is SeqStmt:
            x = _normalize(x)
            t = type(x)
        emit = self.emit
        if t is tuple:
            emit(f"({len(x)}")
            for item in x:
                self.visit(item)
            emit(")")
        elif t in _SCALAR_TYPES:
            emit(f"{t.__name__}:{x!r}")
        elif t is DataType:
            emit(str(x))
        elif isinstance(x, Var):
            idx, _ = self.define(x)
            emit(f"var{idx}:{x.dtype}")
        elif isinstance(x, Buffer):
            idx, first = self.define(x)
            emit(f"buf{idx}")
            if first:
                for name in _BUFFER_FIELDS:
                    self.visit(getattr(x, name))
        elif isinstance(x, Node):
            emit(t.__name__)
            fields = _hashed_fields(t)
            for name in fields:
                self.visit(getattr(x, name))
        elif isinstance(x, float) and math.isnan(x):
            emit("nan")
        else:
            emit(f"{t.__name__}:{x!r}")


_SCALAR_TYPES = frozenset({int, str, bool, type(None)})   # floats: NaN needs its own token


@lru_cache(maxsize=None)
def _hashed_fields(cls) -> tuple[str, ...]:
    """A node's meaningful fields; a function's name is not part of its meaning."""
    return tuple(f for f in node_fields(cls) if not (f == "name" and issubclass(cls, PrimFunc)))


def structural_hash(node) -> str:
    """A hex digest equal for structurally equal programs."""
    hasher = _Hasher()
    hasher.visit(node)
    return hasher.digest()


__all__ = ["structural_equal", "structural_hash", "structural_diff", "assert_structural_equal", "FloatImm"]
