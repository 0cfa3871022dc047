"""Tables and small helpers the parts of the parser share."""
from __future__ import annotations

import ast

from ... import dtypes as _dt
from ...dtypes import DataType
from ...ir.buffer import Buffer
from ...ir.expr import PrimExpr

_LOOP_KINDS = {"serial": "serial", "parallel": "parallel", "vectorized": "vectorized", "unroll": "unrolled",
               "thread_binding": "thread_binding"}

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
           ast.Mod: "floormod", ast.BitAnd: "bitwise_and", ast.BitOr: "bitwise_or", ast.BitXor: "bitwise_xor",
           ast.LShift: "shift_left", ast.RShift: "shift_right"}

_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}

_PY_BINOPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
              "div": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b,
              "bitwise_and": lambda a, b: a & b, "bitwise_or": lambda a, b: a | b, "bitwise_xor": lambda a, b: a ^ b,
              "shift_left": lambda a, b: a << b, "shift_right": lambda a, b: a >> b}

_NO_REINTERPRET = ('bit operations take integers; tdsl has no T.reinterpret, and T.cast(x, "int32") converts '
                   'the value, not its bits')

_PY_CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
           "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}

_DTYPE_NAMES = set(_dt.SCALAR_NAMES)


def _text(e) -> str:
    from ..printer import message_text

    return message_text(e) if isinstance(e, PrimExpr) else str(e)


def _simplify(e: PrimExpr) -> PrimExpr:
    from ...arith import simplify

    return simplify(e)


def _is_np_int(value) -> bool:
    return hasattr(value, "dtype") and getattr(getattr(value, "dtype", None), "kind", "") in "iu" \
        and not isinstance(value, (PrimExpr, Buffer)) and getattr(value, "ndim", 1) == 0


def _int_limits(dt: DataType) -> tuple[int, int]:
    if dt.is_uint:
        return 0, 2 ** dt.bits - 1
    return -(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1) - 1


def _stmt_word(node) -> str:
    return {"FunctionDef": "def", "ClassDef": "class", "Import": "import", "ImportFrom": "from ... import",
            "Try": "try", "Raise": "raise", "Delete": "del", "Global": "global", "Nonlocal": "nonlocal",
            "Break": "break", "Continue": "continue", "Assert": "assert", "Match": "match",
            "AsyncFor": "async for", "AsyncWith": "async with", "AsyncFunctionDef": "async def"}.get(
        type(node).__name__, type(node).__name__)


def _expr_word(node) -> str:
    return {"Lambda": "lambda", "ListComp": "a list comprehension", "DictComp": "a dict comprehension",
            "GeneratorExp": "a generator expression", "JoinedStr": "an f-string", "Starred": "*args",
            "NamedExpr": "the := operator", "Await": "await", "Yield": "yield", "SetComp": "a set comprehension",
            "Set": "a set"}.get(type(node).__name__, type(node).__name__)

