"""The `T` namespace of tdsl scripts.

The body of a `@T.prim_func` function is never run by Python: the parser reads its source.
What lives here is what Python evaluates when the function is defined (the decorator and the
parameter annotations) plus the names the parser recognises, so that editors and `dir(T)`
show the language.
"""
from __future__ import annotations

from ..dtypes import SCALAR_NAMES


class _ScriptOnly:
    """A name that only has meaning inside a tdsl script."""

    def __init__(self, name: str):
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"T.{self.__name__} is tdsl script syntax: use it inside a @T.prim_func function")

    def __repr__(self) -> str:
        return f"T.{self.__name__}"


class _DType(_ScriptOnly):
    """`T.float32`: an annotation for scalar parameters, and a constant/cast in scripts."""


class _BufferSpec:
    """What `T.Buffer(shape, dtype)` evaluates to as a Python annotation."""

    def __init__(self, shape, dtype="float32", **kwargs):
        self.shape, self.dtype, self.kwargs = shape, dtype, kwargs

    def __repr__(self) -> str:
        return f"T.Buffer({self.shape!r}, {self.dtype!r})"


def Buffer(shape, dtype="float32", **kwargs):  # noqa: N802 - TVMScript spelling
    """`A: T.Buffer((128, "n"), "float32")` declares a buffer parameter."""
    return _BufferSpec(shape, dtype, **kwargs)


def prim_func(fn=None, **kwargs):
    """Parse the decorated Python function into a PrimFunc (its body is never executed)."""
    from ..errors import ScriptError
    from .parser import parse_function_or_error

    if fn is None:
        return prim_func
    import sys

    # Names used only in annotations are not closure cells: read them from the defining scope.
    result = parse_function_or_error(fn, sys._getframe(1).f_locals)
    if isinstance(result, ScriptError):
        raise result
    return result


class _Axis:
    spatial = S = _ScriptOnly("axis.spatial")
    reduce = R = _ScriptOnly("axis.reduce")
    remap = _ScriptOnly("axis.remap")


axis = _Axis()

for _name in SCALAR_NAMES:
    globals()[_name] = _DType(_name)

_SCRIPT_NAMES = (
    "grid serial parallel vectorized unroll thread_binding block init where reads writes block_attr func_attr "
    "alloc_buffer allocate evaluate LetStmt min max if_then_else Select cast Cast exp log sqrt rsqrt tanh "
    "sigmoid erf abs floor ceil pow exp2 log2 sin cos round trunc fma max_value min_value call_extern address_of Ramp "
    "Broadcast floordiv floormod"
).split()
for _name in _SCRIPT_NAMES:
    globals()[_name] = _ScriptOnly(_name)
del _name
