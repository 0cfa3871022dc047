"""The `T` namespace of tdsl scripts.

The body of a `@T.prim_func` function is never run by Python: the parser reads its source.
What lives here is what Python evaluates when the function is defined (the decorator and the
parameter annotations) plus the names the parser recognises, so that editors and `dir(T)`
show the language.
"""
from __future__ import annotations

import builtins as _builtins

from ..dtypes import SCALAR_NAMES
from .builtins import BUILTINS, SYNONYMS


class _ScriptOnly:
    """A name that only has meaning inside a tdsl script."""

    def __init__(self, name: str):
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"T.{self.__name__} is tdsl script syntax: use it inside a @T.prim_func function")

    def __repr__(self) -> str:
        return f"T.{self.__name__}"


class _DType(_ScriptOnly):
    """`T.float32`: an annotation for scalar parameters, and a constant/cast in scripts.
    `T.int32()` (TVM's spelling of the annotation) is the annotation too. Called in Python
    (an index map `lambda i: (T.int64(0), i // 8)`, a pad value), `T.int64(0)` is the IR
    constant and `T.float32(e)` of an IR expression its cast, as in TVM."""

    def __call__(self, *args, **kwargs):
        # T.int32() is TVM's spelling of the annotation; T.int64(128) may also appear in a
        # T.Buffer annotation, which Python evaluates when the function is defined: the parser
        # reads the source itself, so that value is never used
        if len(args) != 1 or kwargs:
            return self
        from ..dtypes import DataType
        from ..ir import Cast, PrimExpr, const

        (value,) = args
        dtype = DataType.parse(self.__name__)
        if isinstance(value, PrimExpr):
            return value if value.dtype == dtype else Cast(dtype, value)
        if isinstance(value, (_builtins.bool, _builtins.int, _builtins.float)):   # T's names shadow these
            return const(value, dtype)
        return self


class _BufferSpec:
    """What `T.Buffer(shape, dtype)` evaluates to as a Python annotation."""

    def __init__(self, shape, dtype="float32", **kwargs):
        self.shape, self.dtype, self.kwargs = shape, dtype, kwargs

    def __repr__(self) -> str:
        return f"T.Buffer({self.shape!r}, {self.dtype!r})"


def Buffer(shape=None, dtype="float32", **kwargs):  # noqa: N802 - TVMScript spelling
    """`A: T.Buffer((128, "n"), "float32")` declares a buffer parameter."""
    return _BufferSpec(shape, dtype, **kwargs)


_PRIM_FUNC_OPTIONS = ("private", "s_tir", "check_well_formed")


def prim_func(fn=None, **kwargs):
    """Parse the decorated Python function into a PrimFunc (its body is never executed).

    TVM's decorator options `private=`, `s_tir=` and `check_well_formed=` are accepted; they
    change nothing in tdsl (a tdsl function has no global symbol and is always checked)."""
    from ..errors import ScriptError
    from .parser import parse_function_or_error

    bad = [k for k in kwargs if k not in _PRIM_FUNC_OPTIONS]
    if bad:
        raise TypeError(f"T.prim_func got an unknown option {bad[0]!r}; it takes {', '.join(_PRIM_FUNC_OPTIONS)}")
    if fn is None:
        return prim_func
    import sys

    # Names used only in annotations are not closure cells: read them from the defining scope.
    result = parse_function_or_error(fn, sys._getframe(1).f_locals)
    if isinstance(result, ScriptError):
        raise result
    return result


class _Handle(_ScriptOnly):
    """`a: T.handle`: a parameter that `A = T.match_buffer(a, shape, dtype)` turns into a buffer."""

    def __call__(self, *args, **kwargs):
        return self


class _Let(_ScriptOnly):
    """`x: T.let[T.int32] = value`."""

    def __getitem__(self, item):
        return self


handle = _Handle("handle")
let = _Let("let")


class _Axis:
    spatial = S = _ScriptOnly("axis.spatial")
    reduce = R = _ScriptOnly("axis.reduce")
    remap = _ScriptOnly("axis.remap")


axis = _Axis()

for _name in SCALAR_NAMES:
    globals()[_name] = _DType(_name)

for _name, (_role, _meaning) in BUILTINS.items():
    if _role in ("dtype", "decorator", "annotation") or _name == "axis":
        continue
    globals()[_name] = _ScriptOnly(_name)
for _name in SYNONYMS:
    globals()[_name] = _ScriptOnly(_name)
del _name, _role, _meaning


def __getattr__(name: str):
    """Any other `T.<name>` (a TVMScript construct tdsl does not have) evaluates to a marker, so
    that an annotation such as `a: T.Ptr` reaches the parser, whose ScriptError names it and
    says what tdsl writes instead."""
    if name.startswith("__"):
        raise AttributeError(name)
    return _ScriptOnly(name)
