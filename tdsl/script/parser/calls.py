"""Calls: `T.<dtype>(x)`, T.cast, T.min / T.max, the math functions, T.if_then_else,
T.max_value / T.min_value, and Python callables of the closure."""
from __future__ import annotations

import ast

from ... import dtypes as _dt
from ...ir.buffer import Buffer
from ...ir.expr import MATH_CALLS, Binary, Call, Cast, PrimExpr, Select, const
from ..builtins import ABSENT, absent_message
from .common import _DTYPE_NAMES, _int_limits, _is_np_int
from .core import ParserCore
from .frames import _describe, _View


class CallParser(ParserCore):
    def expr_Call(self, node: ast.Call):
        name = self._t_name(node.func)
        if name is None and isinstance(node.func, ast.Attribute) and node.func.attr == "access_ptr":
            base = self.eval_expr(node.func.value)
            if isinstance(base, (Buffer, _View)):
                return self.access_ptr(base, node)
        if name is None:
            func = self.eval_expr(node.func)
            if func in (min, max):
                return self.minmax(func.__name__, node)
            if func is abs:
                return self.math_call("abs", [self.eval_expr(a) for a in node.args], node)
            if func in (float, int, len) or callable(func):
                args = [self.eval_expr(a) for a in node.args]
                if getattr(self, "meta_depth", 0) and callable(func) and func not in (float, int, len):
                    return self._meta_call(func, args, node)
                if any(isinstance(a, (PrimExpr, Buffer)) for a in args):
                    raise self.error(node, f"{_python_name(func)} cannot take tdsl values", _t_instead(func))
                try:
                    return func(*args)
                except Exception as exc:
                    raise self.error(node, f"calling {getattr(func, '__name__', func)!s} failed: {exc}") from None
            raise self.error(node.func, f"{_describe(func)} is not callable")
        if name in _DTYPE_NAMES:
            return self.dtype_call(name, node)
        handler = getattr(self, "call_" + name, None)
        if handler is not None:
            return handler(node)
        if name in MATH_CALLS:
            return self.math_call(name, [self.eval_expr(a) for a in node.args], node)
        if name in ABSENT:
            raise self.error(node.func, *absent_message(name))
        raise self.error(node.func, f"T.{name} is not a tdsl expression",
                         "the expression functions are T.exp, T.log, T.sqrt, T.tanh, T.max, T.min, T.cast, "
                         "T.if_then_else, ... (docs/script.md lists them)")

    def _meta_call(self, func, args, node: ast.Call):
        """Inside T.meta_var(...): a Python function of the closure computed on tdsl expressions
        (an index map such as shared_16x16_to_ldmatrix_32x8_layout); its result is taken as is."""
        kwargs = {k.arg: self.eval_expr(k.value) for k in node.keywords if k.arg is not None}
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            raise self.error(node, f"calling {getattr(func, '__name__', func)!s} in T.meta_var failed: {exc}",
                             "the function must compute with +, -, *, //, % on its arguments") from None

    def dtype_call(self, name: str, node: ast.Call):
        dt = _dt.DataType.parse(name)
        if len(node.args) != 1:
            raise self.error(node, f"T.{name} takes one value", f"e.g. T.{name}(0)")
        value = self.eval_expr(node.args[0])
        if isinstance(value, str) and dt.is_float:
            try:
                return const(float(value), dt)
            except ValueError:
                raise self.error(node.args[0], f"cannot read {value!r} as a float", 'use "inf", "-inf" or "nan"') \
                    from None
        if isinstance(value, PrimExpr):
            return value if value.dtype == dt else Cast(dt, value, span=self.span(node))
        if isinstance(value, (bool, int, float)) or _is_np_int(value):
            if isinstance(value, float) and not dt.is_float:
                raise self.error(node.args[0], f"T.{name} needs an integer, got {value!r}")
            if dt.is_integer:
                lo, hi = _int_limits(dt)
                if not lo <= int(value) <= hi:
                    raise self.error(node.args[0], f"{value} does not fit in {name}")
            return const(value, dt)
        raise self.error(node.args[0], f"T.{name} cannot convert {_describe(value)}")

    def call_cast(self, node: ast.Call):
        if len(node.args) != 2:
            raise self.error(node, 'T.cast takes (value, "dtype")', 'e.g. T.cast(x, "float32")')
        value = self.eval_expr(node.args[0])
        dt = self.parse_dtype(node.args[1])
        if not isinstance(value, PrimExpr):
            return self.coerce(value, dt, node.args[0], "the value") if not (
                isinstance(value, float) and not dt.is_float) else const(int(value), dt)
        return value if value.dtype == dt else Cast(dt, value, span=self.span(node))

    def call_min(self, node):
        return self.minmax("min", node)

    def call_max(self, node):
        return self.minmax("max", node)

    def minmax(self, op: str, node: ast.Call):
        if len(node.args) < 2:
            raise self.error(node, f"T.{op} takes at least two values")
        values = [self.eval_expr(a) for a in node.args]
        result = values[0]
        for v, vn in zip(values[1:], node.args[1:]):
            if not isinstance(result, PrimExpr) and not isinstance(v, PrimExpr):
                result = min(result, v) if op == "min" else max(result, v)
                continue
            a, b = self.unify(result, v, node.args[0], vn, node, op)
            result = Binary(op, a, b, span=self.span(node))
        return result

    def call_floordiv(self, node):
        return self.binary("floordiv", self.eval_expr(node.args[0]), self.eval_expr(node.args[1]), node)

    def call_floormod(self, node):
        return self.binary("floormod", self.eval_expr(node.args[0]), self.eval_expr(node.args[1]), node)

    def _bit_call(self, op: str, node):
        if len(node.args) != 2 or node.keywords:
            raise self.error(node, f"T.{op} takes two values", f"e.g. T.{op}(x, 4)")
        return self.binary(op, self.eval_expr(node.args[0]), self.eval_expr(node.args[1]), node)

    def call_bitwise_and(self, node):
        return self._bit_call("bitwise_and", node)

    def call_bitwise_or(self, node):
        return self._bit_call("bitwise_or", node)

    def call_bitwise_xor(self, node):
        return self._bit_call("bitwise_xor", node)

    def call_shift_left(self, node):
        return self._bit_call("shift_left", node)

    def call_shift_right(self, node):
        return self._bit_call("shift_right", node)

    def call_bitwise_not(self, node):
        if len(node.args) != 1 or node.keywords:
            raise self.error(node, "T.bitwise_not takes one value", "e.g. T.bitwise_not(x)")
        return self.invert(self.eval_expr(node.args[0]), node)

    def call_if_then_else(self, node):
        if len(node.args) != 3:
            raise self.error(node, "T.if_then_else takes (cond, then, else)")
        c, t, f = (self.eval_expr(a) for a in node.args)
        return self.select("if_then_else", c, t, f, node)

    def select(self, kind: str, cond, t, f, node):
        cond = self.python_to_expr(cond, node) if not isinstance(cond, PrimExpr) else cond
        if not cond.dtype.element.is_bool:
            raise self.error(node, f"the condition must be a bool, not {cond.dtype}", "compare it, e.g. x != 0")
        if not isinstance(t, PrimExpr) and not isinstance(f, PrimExpr):
            t = self.python_to_expr(t, node)
        t, f = self.unify(t, f, node, node, node, "select")
        if kind == "Select":
            return Select(cond, t, f, span=self.span(node))
        return Call(t.dtype, "if_then_else", (cond, t, f), span=self.span(node))

    def math_call(self, name: str, args: list, node):
        arity = MATH_CALLS[name]
        if len(args) != arity:
            raise self.error(node, f"T.{name} takes {arity} argument{'s' if arity > 1 else ''}, got {len(args)}")
        first = next((a for a in args if isinstance(a, PrimExpr)), None)
        if first is None:
            dt = _dt.float32 if any(isinstance(a, float) for a in args) or name != "abs" else _dt.int32
        else:
            dt = first.dtype
        conv = [self.coerce(a, dt, node, f"argument {k + 1} of T.{name}") for k, a in enumerate(args)]
        for a in conv:
            if a.dtype != dt:
                raise self.error(node, f"the arguments of T.{name} have different dtypes: {dt} and {a.dtype}",
                                 "convert them with T.cast")
        if name != "abs" and not dt.is_float:
            raise self.error(node, f"T.{name} needs a float argument, not {dt}", 'convert it: T.cast(x, "float32")')
        return Call(dt, name, tuple(conv), span=self.span(node))

    def call_max_value(self, node):
        return self._limit(node, True)

    def call_min_value(self, node):
        return self._limit(node, False)

    def _limit(self, node, is_max: bool):
        dt = self.parse_dtype(node.args[0]) if node.args else None
        if dt is None:
            raise self.error(node, "T.max_value / T.min_value take a dtype", 'e.g. T.min_value("float32")')
        import numpy as np

        if dt.is_float:
            info = np.finfo(dt.numpy)
            return const(float(info.max if is_max else info.min), dt)
        if dt.is_bool:
            return const(is_max, dt)
        info = np.iinfo(dt.numpy)
        return const(int(info.max if is_max else info.min), dt)


# Python / numpy functions whose tdsl counterpart has another name
_RENAMED = {"fabs": "abs", "absolute": "abs", "maximum": "max", "minimum": "min", "fmax": "max", "fmin": "min",
            "power": "pow", "where": "if_then_else", "rint": "round"}


def _python_name(func) -> str:
    name = getattr(func, "__name__", "this function")
    module = getattr(func, "__module__", None) or ""
    if module == "math" or (getattr(func, "__self__", None) is None and module.startswith("numpy")):
        return f"{'math' if module == 'math' else 'numpy'}.{name}"
    return name


def _t_instead(func) -> str:
    """What to write instead of a Python/numpy function called on tdsl values: `math.exp` -> T.exp."""
    name = getattr(func, "__name__", "")
    t_name = _RENAMED.get(name, name)
    if t_name in MATH_CALLS or t_name in ("max", "min", "if_then_else"):
        return f"use T.{t_name}(...): {_python_name(func)} computes on Python numbers when the script is parsed, " \
               f"T.{t_name} in the kernel"
    casts = {"float": "float32", "int": "int32", "bool": "bool"}
    if name in casts:
        return f'use T.cast(x, "{casts[name]}") (or T.{casts[name]}(x))'
    return 'use T functions, e.g. T.exp, T.cast(x, "float32"), T.min, T.max'
