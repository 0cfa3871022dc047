"""Expressions: names, attributes, operators with their dtype rules, comparisons, buffer loads;
Python values fold while no IR value takes part."""
from __future__ import annotations

import ast

from ... import dtypes as _dt
from ...dtypes import DataType
from ...ir.buffer import Buffer
from ...ir.expr import (
    BIT_SYMBOLS,
    BITWISE_OPS,
    SHIFT_OPS,
    Binary,
    Broadcast,
    BufferLoad,
    Cast,
    FloatImm,
    IntImm,
    Not,
    PrimExpr,
    bitwise_not,
    const,
    shift_in_range,
)
from ..builtins import ABSENT, absent_message
from .common import (
    _BINOPS,
    _CMPOPS,
    _NO_REINTERPRET,
    _PY_BINOPS,
    _PY_CMP,
    _expr_word,
    _int_limits,
    _is_np_int,
    _simplify,
)
from .core import ParserCore
from .frames import _describe, _HandleParam, _View


class ExpressionParser(ParserCore):
    def eval_expr(self, node: ast.expr):
        """An IR expression, a Buffer, or a plain Python value (closure constants fold)."""
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise self.error(node, f"{_expr_word(node)} is not supported in tdsl expressions",
                             "use arithmetic, comparisons, and/or/not, buffer loads and T functions")
        return method(node)

    def expr_Constant(self, node: ast.Constant):
        return node.value

    def expr_Name(self, node: ast.Name):
        return self.lookup(node)

    def expr_Attribute(self, node: ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "T":
            if node.attr in ABSENT:
                raise self.error(node, *absent_message(node.attr))
            raise self.error(node, f"T.{node.attr} cannot be used as a value here",
                             "T functions are called, e.g. T.exp(x), T.float32(0)")
        base = self.eval_expr(node.value)
        if isinstance(base, _View) and node.attr in ("shape", "ndim", "dtype"):
            return base.shape if node.attr == "shape" else base.ndim if node.attr == "ndim" else str(
                base.parent.dtype)
        if isinstance(base, (Buffer, _View)) and node.attr == "data":
            return self._pointer(base, 0, node)
        if isinstance(base, (Buffer, _View)) and node.attr in ("elem_offset", "strides"):
            return self.layout_attr(base, node.attr)
        if isinstance(base, _HandleParam):
            raise self.error(node, f"'{base.name}' is a T.handle parameter",
                             f"match it to a buffer first: X = T.match_buffer({base.name}, shape, \"dtype\")")
        if isinstance(base, (PrimExpr, Buffer)):
            if isinstance(base, Buffer) and node.attr in ("shape", "dtype", "ndim"):
                value = getattr(base, node.attr)
                return str(value) if node.attr == "dtype" else value
            raise self.error(node, f"'{node.attr}' is not available on {_describe(base)} in tdsl")
        try:
            return getattr(base, node.attr)
        except AttributeError:
            raise self.error(node, f"{type(base).__name__} has no attribute '{node.attr}'") from None

    def layout_attr(self, base, attr: str):
        """`X.elem_offset` / `X.strides` (TVM) of a row-major buffer or of a view of one: where its
        element 0 sits in the storage, and the step of each dimension, in elements."""
        storage = base.parent if isinstance(base, _View) else base
        if storage.strides:
            full_strides = list(storage.strides)
        else:
            full_strides, step = [], None
            for extent in reversed(storage.shape):
                full_strides.insert(0, const(1, extent.dtype) if step is None else step)
                step = extent if step is None else _simplify(step * extent)
        index_type = storage.shape[0].dtype if storage.shape else _dt.int32
        start = storage.elem_offset if storage.elem_offset is not None else const(0, index_type)
        if not isinstance(base, _View):
            return start if attr == "elem_offset" else tuple(full_strides)
        if attr == "strides":
            return tuple(full_strides[d] for d in base.dims)
        offset = start
        for first, stride in zip(base.starts, full_strides):
            term = first * stride if first.dtype == stride.dtype else first * Cast(first.dtype, stride)
            offset = offset + term if offset.dtype == term.dtype else Cast(term.dtype, offset) + term
        return _simplify(offset)

    def expr_Tuple(self, node: ast.Tuple):
        return tuple(self.eval_expr(e) for e in node.elts)

    def expr_List(self, node: ast.List):
        return [self.eval_expr(e) for e in node.elts]

    def expr_Dict(self, node: ast.Dict):
        return {self.eval_expr(k): self.eval_expr(v) for k, v in zip(node.keys, node.values)}

    def expr_UnaryOp(self, node: ast.UnaryOp):
        value = self.eval_expr(node.operand)
        if isinstance(node.op, ast.Not):
            if not isinstance(value, PrimExpr):
                return not value
            if not value.dtype.is_bool:
                raise self.error(node, f"'not' needs a bool operand, not {value.dtype}", "compare it, e.g. x == 0")
            return Not(value, span=self.span(node))
        if isinstance(node.op, ast.UAdd):
            return value
        if isinstance(node.op, ast.USub):
            if not isinstance(value, PrimExpr):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    return -value
                raise self.error(node, f"cannot negate {_describe(value)}")
            if isinstance(value, IntImm):
                return IntImm(-value.value, value.dtype, span=self.span(node))
            if isinstance(value, FloatImm):
                return FloatImm(-value.value, value.dtype, span=self.span(node))
            self._check_arith_operand(value, node.operand)
            return Binary("sub", const(0, value.dtype), value, span=self.span(node))
        if isinstance(node.op, ast.Invert):
            return self.invert(value, node)
        raise self.error(node, f"the {type(node.op).__name__} operator is not supported in tdsl")

    def invert(self, value, node):
        """`~a` (T.bitwise_not) of an integer: `a ^ all_ones`."""
        if isinstance(value, bool) or (isinstance(value, PrimExpr) and value.dtype.is_bool):
            raise self.error(node, "'~' on a bool value", "write `not a` for the logical negation")
        if not isinstance(value, PrimExpr):
            if isinstance(value, int) or _is_np_int(value):
                return ~value
            raise self.error(node, f"cannot apply ~ to {_describe(value)}")
        if not value.dtype.is_integer:
            raise self.error(node, f"'~' needs an integer operand, not {value.dtype}", _NO_REINTERPRET)
        out = bitwise_not(value)
        return Binary(out.op, out.a, out.b, span=self.span(node))

    def expr_BinOp(self, node: ast.BinOp):
        if isinstance(node.op, ast.Pow):
            a, b = self.eval_expr(node.left), self.eval_expr(node.right)
            if not isinstance(a, PrimExpr) and not isinstance(b, PrimExpr):
                return a ** b
            return self.math_call("pow", [a, b], node)
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported in tdsl",
                             "use + - * / // % ** & | ^ << >> and T functions")
        return self.binary(op, self.eval_expr(node.left), self.eval_expr(node.right), node)

    def binary(self, op: str, a, b, node):
        if not isinstance(a, (PrimExpr, Buffer)) and not isinstance(b, (PrimExpr, Buffer)):
            try:
                return (_PY_BINOPS if op in _PY_BINOPS else _PY_CMP)[op](a, b)
            except Exception as exc:
                raise self.error(node, f"cannot compute {a!r} {op} {b!r}: {exc}") from None
        left = getattr(node, "left", node)
        right = getattr(node, "right", node)
        a, b = self.unify(a, b, left, right, node, op)
        if op == "div" and not a.dtype.is_float:
            raise self.error(node, f"'/' on {a.dtype} operands is not defined in tdsl",
                             "use // for floor division (or T.cast to a float type)")
        if op in ("floordiv", "floormod") and a.dtype.is_float:
            raise self.error(node, f"'{'//' if op == 'floordiv' else '%'}' needs integer operands, not {a.dtype}",
                             "use / for float division, or T.floor(a / b)")
        if op in BITWISE_OPS:
            self._check_bit_operands(op, a, b, node)
        return Binary(op, a, b, span=self.span(node))

    def _check_bit_operands(self, op: str, a: PrimExpr, b: PrimExpr, node) -> None:
        """& | ^ take integers or bools, << >> integers, and a constant shift stays below the width."""
        symbol = BIT_SYMBOLS[op]
        if a.dtype.is_bool and op in SHIFT_OPS:
            raise self.error(node, f"'{symbol}' on bool operands", 'shift an integer: T.cast(x, "int32")')
        if not (a.dtype.is_integer or a.dtype.is_bool):
            raise self.error(node, f"'{symbol}' needs integer operands, not {a.dtype}", _NO_REINTERPRET)
        amount = b.value if isinstance(b, Broadcast) else b
        if op in SHIFT_OPS and isinstance(amount, IntImm) and not shift_in_range(amount.value, amount.dtype):
            raise self.error(node, f"a shift of {a.dtype} by {amount.value} is undefined",
                             f"shift by 0 to {a.dtype.bits - 1} (the operand's bit width minus one)")

    def _check_arith_operand(self, value, node) -> None:
        if isinstance(value, Buffer):
            raise self.error(node, f"{value.name} is a buffer, not a value",
                             f"load an element: {value.name}[{', '.join('i' * 1 for _ in value.shape)}]")
        if isinstance(value, PrimExpr) and value.dtype.is_bool:
            raise self.error(node, "arithmetic on a bool value", 'use and/or/not, or T.cast(x, "int32")')

    def unify(self, a, b, left, right, node, op: str) -> tuple[PrimExpr, PrimExpr]:
        """Bring both operands to one dtype; Python numbers adopt the other side's dtype."""
        for v, n in ((a, left), (b, right)):
            if isinstance(v, Buffer):
                self._check_arith_operand(v, n)
            if not isinstance(v, (PrimExpr, int, float, bool)):
                raise self.error(n, f"{_describe(v)} cannot be used in an expression")
        logic = op in ("and", "or")
        if not isinstance(a, PrimExpr):
            a = self.coerce(a, b.dtype, left, "the left operand")
        if not isinstance(b, PrimExpr):
            b = self.coerce(b, a.dtype, right, "the right operand")
        if a.dtype != b.dtype:
            raise self.error(node, f"operands have different dtypes: {a.dtype} and {b.dtype}",
                             f'convert one with T.cast, e.g. T.cast(x, "{a.dtype}")')
        if not logic and op not in ("eq", "ne", *BITWISE_OPS) and a.dtype.is_bool:   # bit ops: _check_bit_operands
            raise self.error(node, f"'{op}' on bool operands", 'use and/or/not, or T.cast(x, "int32")')
        if logic and not a.dtype.is_bool:
            raise self.error(node, f"'{op}' needs bool operands, not {a.dtype}", "compare them first, e.g. x != 0")
        return a, b

    def coerce(self, value, dtype: DataType, node, what: str) -> PrimExpr:
        """A Python number as a constant of `dtype`; IR values pass through unchanged."""
        if isinstance(value, PrimExpr):
            return value
        if isinstance(value, Buffer):
            self._check_arith_operand(value, node)
        if isinstance(value, bool):
            if dtype.is_bool:
                return const(value, dtype)
            raise self.error(node, f"{what} is a bool but a {dtype} is expected")
        if isinstance(value, int) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "iu"
                                      and not isinstance(value, (PrimExpr, Buffer))):
            value = int(value)
            if dtype.is_bool:
                raise self.error(node, f"{what} is an integer but a bool is expected")
            if dtype.is_integer:
                lo, hi = _int_limits(dtype)
                if not lo <= value <= hi:
                    raise self.error(node, f"{value} does not fit in {dtype}")
            return const(value, dtype.element) if not dtype.is_vector else Broadcast(const(value, dtype.element),
                                                                                      dtype.lanes)
        if isinstance(value, float) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") == "f"):
            if not dtype.is_float:
                raise self.error(node, f"{what} is the float {float(value)!r} but a {dtype} is expected",
                                 'write an integer, or convert: T.cast(x, "float32")')
            c = const(float(value), dtype.element)
            return c if not dtype.is_vector else Broadcast(c, dtype.lanes)
        raise self.error(node, f"{what} is {_describe(value)}, which is not a value of type {dtype}")

    def python_to_expr(self, value, node) -> PrimExpr:
        if isinstance(value, PrimExpr):
            return value
        if isinstance(value, bool):
            return const(value, _dt.bool_)
        if isinstance(value, int):
            return const(value, _dt.int32)
        if isinstance(value, float):
            return const(value, _dt.float32)
        if isinstance(value, Buffer):
            self._check_arith_operand(value, node)
        raise self.error(node, f"{_describe(value)} is not a tdsl value")

    def to_index(self, value, node, dtype: DataType | None = None) -> PrimExpr:
        """An integer expression (Python ints become int32, or `dtype`)."""
        if isinstance(value, bool) or (not isinstance(value, (int, PrimExpr)) and not _is_np_int(value)):
            raise self.error(node, f"expected an integer, got {_describe(value)}")
        if not isinstance(value, PrimExpr):
            return self._int_const(int(value), node, dtype)
        if not value.dtype.is_integer:
            raise self.error(node, f"expected an integer, got a {value.dtype} value",
                             'indices and extents are integers; convert with T.cast(x, "int32")')
        return value

    def _int_const(self, v: int, node, dtype: DataType | None) -> PrimExpr:
        """A Python int as an index: int32, or int64 past int32's range (as TVM), or `dtype`;
        never a wrapped immediate (a loop of 2**32 + 1 trips running once)."""
        dt = dtype or (_dt.int32 if -2**31 <= v < 2**31 else _dt.int64)
        lo, hi = (0, 2**dt.bits - 1) if dt.is_uint else (-2**(dt.bits - 1), 2**(dt.bits - 1) - 1)
        if not lo <= v <= hi:
            raise self.error(node, f"{v} does not fit {dt}", "indices and extents are at most int64")
        return const(v, dt)

    def unify_ints(self, a: PrimExpr, b: PrimExpr, node) -> tuple[PrimExpr, PrimExpr]:
        if a.dtype == b.dtype:
            return a, b
        if isinstance(a, IntImm):
            return const(a.value, b.dtype), b
        if isinstance(b, IntImm):
            return a, const(b.value, a.dtype)
        raise self.error(node, f"bounds have different dtypes: {a.dtype} and {b.dtype}", "cast one of them")

    def expr_BoolOp(self, node: ast.BoolOp):
        op = "and" if isinstance(node.op, ast.And) else "or"
        values = [self.eval_expr(v) for v in node.values]
        if not any(isinstance(v, PrimExpr) for v in values):
            result = values[0]
            for v in values[1:]:
                result = (result and v) if op == "and" else (result or v)
            return result
        result = values[0]
        for v, vn in zip(values[1:], node.values[1:]):
            a = self.coerce(result, _dt.bool_, node.values[0], "the left operand") if not isinstance(
                result, PrimExpr) else result
            b = self.coerce(v, _dt.bool_, vn, "the right operand") if not isinstance(v, PrimExpr) else v
            a, b = self.unify(a, b, node, vn, node, op)
            result = Binary(op, a, b, span=self.span(node))
        return result

    def expr_Compare(self, node: ast.Compare):
        left = self.eval_expr(node.left)
        result = None
        lnode = node.left
        for opnode, rnode in zip(node.ops, node.comparators):
            op = _CMPOPS.get(type(opnode))
            if op is None:
                raise self.error(node, f"comparison {type(opnode).__name__} is not supported in tdsl",
                                 "use == != < <= > >=")
            right = self.eval_expr(rnode)
            if not isinstance(left, (PrimExpr, Buffer)) and not isinstance(right, (PrimExpr, Buffer)):
                part = _PY_CMP[op](left, right)
            else:
                a, b = self.unify(left, right, lnode, rnode, node, op)
                part = Binary(op, a, b, span=self.span(node))
            if result is None:
                result = part
            elif isinstance(result, PrimExpr) or isinstance(part, PrimExpr):
                a = result if isinstance(result, PrimExpr) else const(result, _dt.bool_)
                b = part if isinstance(part, PrimExpr) else const(part, _dt.bool_)
                result = Binary("and", a, b, span=self.span(node))
            else:
                result = result and part
            left, lnode = right, rnode
        return result

    def expr_IfExp(self, node: ast.IfExp):
        cond = self.eval_expr(node.test)
        if not isinstance(cond, PrimExpr):
            return self.eval_expr(node.body if cond else node.orelse)
        return self.select("if_then_else", cond, self.eval_expr(node.body), self.eval_expr(node.orelse), node)

    def expr_Subscript(self, node: ast.Subscript):
        base = self.eval_expr(node.value)
        if isinstance(base, Buffer):
            return BufferLoad(base, self.parse_indices(base, node), span=self.span(node))
        if isinstance(base, _View):
            return BufferLoad(base.parent, base.parent_indices(self.parse_indices(base, node)), span=self.span(node))
        if isinstance(base, (PrimExpr,)):
            raise self.error(node, f"{_describe(base)} cannot be indexed", "only buffers are indexed in tdsl")
        index = self.eval_expr(node.slice)
        try:
            return base[index]
        except Exception as exc:
            raise self.error(node, f"cannot index {_describe(base)}: {exc}") from None

    def _subscript_elts(self, node: ast.Subscript) -> list:
        sl = node.slice
        if isinstance(sl, ast.Tuple):
            return list(sl.elts)
        return [sl]

    def parse_indices(self, buf: Buffer, node: ast.Subscript) -> tuple[PrimExpr, ...]:
        elts = self._subscript_elts(node)
        if len(elts) == 0 or (len(elts) == 1 and isinstance(elts[0], ast.Tuple) and not elts[0].elts):
            elts = []
        if len(elts) != buf.ndim:
            raise self.error(node, f"{buf.name} has {buf.ndim} dimension{'s' if buf.ndim != 1 else ''} but is "
                                   f"indexed with {len(elts)}",
                             f"write {buf.name}[{', '.join(f'i{k}' for k in range(buf.ndim))}]")
        out = []
        for e in elts:
            if isinstance(e, ast.Slice):
                raise self.error(e, "slices are only allowed in T.reads / T.writes",
                                 "index one element; loop over the others")
            value = self.eval_expr(e)
            if isinstance(value, PrimExpr) and value.dtype.is_vector and value.dtype.is_integer:
                out.append(value)
                continue
            out.append(self.to_index(value, e))
        return tuple(out)
