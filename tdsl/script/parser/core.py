"""What every part of the parser stands on: source spans and errors, name scopes, and the
small readers of `T.<name>`, dtypes, strings and dicts."""
from __future__ import annotations

import ast
import builtins
from typing import Any

from ... import dtypes as _dt
from ...dtypes import DataType
from ...errors import ScriptError, Span
from ...ir.expr import PrimExpr
from ...ir.stmt import annotation_value
from ..builtins import resolve
from .common import _DTYPE_NAMES
from .frames import _BlockFrame, _describe, _Source


class ParserCore:
    def __init__(self, source: _Source, closure: dict[str, Any]):
        self.src = source
        self.closure = closure
        self.scopes: list[dict[str, Any]] = [{}]
        self.loop_ranges: dict[int, tuple[PrimExpr, PrimExpr]] = {}
        self.blocks: list[_BlockFrame] = []
        self.has_block = False
        self.root = _BlockFrame("root")

    def span(self, node: ast.AST) -> Span:
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        end_line = getattr(node, "end_lineno", line)
        end_col = getattr(node, "end_col_offset", None)
        text = self.src.lines[line - 1] if 0 < line <= len(self.src.lines) else None
        if end_line != line and text is not None:
            end_col = len(text.rstrip())
        off = self.src.col_offset if line > 0 else 0
        if text is not None and off:
            text = " " * off + text
        return Span(self.src.file, line + self.src.line_offset, col + off,
                    None if end_col is None else end_col + off, text)

    def error(self, node: ast.AST, message: str, hint: str | None = None) -> ScriptError:
        return ScriptError(message, self.span(node), hint)

    def define(self, name: str, value) -> None:
        self.scopes[-1][name] = value

    def lookup(self, node: ast.Name):
        for scope in reversed(self.scopes):
            if node.id in scope:
                return scope[node.id]
        if node.id in self.closure:
            return self.closure[node.id]
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        if node.id in ("range", "min", "max", "abs", "float", "int", "len"):
            return getattr(builtins, node.id)
        raise self.error(node, f"undefined name '{node.id}'",
                         "define it before the function (closure values are captured), or bind it in the script")

    def push(self):
        self.scopes.append({})

    def pop(self):
        self.scopes.pop()

    def parse_dtype(self, node) -> DataType:
        value = self.eval_expr(node) if not (isinstance(node, ast.Attribute) and self._t_name(node)
                                             in _DTYPE_NAMES) else node.attr
        if isinstance(value, DataType):
            return value
        if not isinstance(value, str):
            try:
                return _dt.as_dtype(value)
            except Exception:
                raise self.error(node, f"expected a dtype, got {_describe(value)}", 'e.g. "float32"') from None
        try:
            return _dt.DataType.parse(value)
        except ValueError as exc:
            raise self.error(node, str(exc)) from None

    def const_str(self, node) -> str:
        value = self.eval_expr(node)
        if not isinstance(value, str):
            raise self.error(node, f"expected a string, got {_describe(value)}")
        return value

    def parse_dict(self, node, where) -> tuple:
        value = self.eval_expr(node)
        if not isinstance(value, dict):
            raise self.error(node, "expected a dict literal", '{"key": value}')
        out = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise self.error(node, "annotation keys are strings")
            try:
                out.append((k, annotation_value(v)))
            except ValueError as exc:
                raise self.error(node, f"annotation {k!r}: {exc}") from None
        return tuple(out)

    def _t_name(self, func) -> str | None:
        """'exp' for T.exp, 'axis.remap' style names are not returned (see _is_axis_call)."""
        if isinstance(func, ast.Attribute):
            owner = func.value
            if (isinstance(owner, ast.Name) and owner.id == "T") or (isinstance(owner, ast.Attribute)
                                                                     and owner.attr == "T"):
                return resolve(func.attr)
        return None

    def _is_t_attr(self, node, attr: str) -> bool:
        return self._t_name(node) == attr

    def _is_call_to(self, stmt, name: str) -> bool:
        return isinstance(stmt, ast.Expr) and self._is_call_to_expr(stmt.value, name)

    def _is_call_to_expr(self, expr, name: str) -> bool:
        return isinstance(expr, ast.Call) and self._t_name(expr.func) == name

    def _is_axis_call(self, expr) -> bool:
        return (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
                and isinstance(expr.func.value, ast.Attribute) and expr.func.value.attr == "axis"
                and isinstance(expr.func.value.value, ast.Name) and expr.func.value.value.id == "T")
