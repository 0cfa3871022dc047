"""tdsl script (a Python AST) -> PrimFunc.

Every rejection is a ScriptError naming the file and line with a caret under the offending
source, and saying what is allowed instead.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import math
import textwrap
from dataclasses import dataclass
from typing import Any

from .. import dtypes as _dt
from ..dtypes import DataType
from ..errors import ScriptError, Span
from ..ir.buffer import Buffer, BufferRegion
from ..ir.expr import (
    MATH_CALLS,
    Binary,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Not,
    PrimExpr,
    Ramp,
    Range,
    Select,
    StringImm,
    Var,
    const,
)
from ..ir.opaque_calls import WMMA_BUILTINS
from ..ir.stmt import (
    THREAD_TAGS,
    TRUE,
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    IterVar,
    LetStmt,
    PrimFunc,
    SeqStmt,
    Stmt,
    annotation_value,
    flat_seq,
)
from .builtins import ABSENT, absent_message, resolve

_LOOP_KINDS = {"serial": "serial", "parallel": "parallel", "vectorized": "vectorized", "unroll": "unrolled",
               "thread_binding": "thread_binding"}
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
           ast.Mod: "floormod"}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_PY_BINOPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
              "div": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b}
_PY_CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
           "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}
_DTYPE_NAMES = set(_dt.SCALAR_NAMES)


@dataclass
class _Source:
    lines: list[str]
    file: str
    line_offset: int = 0
    col_offset: int = 0


class _HandleParam:
    """A `T.handle` parameter; `T.match_buffer` gives it its buffer."""

    def __init__(self, name: str):
        self.name = name
        self.buffer: Buffer | None = None


@dataclass
class _View:
    """`X = T.match_buffer(A[region], shape)` inside a block: X[i, j] is an element of A's
    region (tdsl has no buffer views in the IR, so the parser rewrites every use of X)."""

    name: str
    parent: Buffer
    starts: tuple  # per parent dimension, the region's start
    dims: tuple  # for each view dimension, the parent dimension it walks
    shape: tuple

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def parent_indices(self, indices) -> tuple:
        out = list(self.starts)
        for d, i in zip(self.dims, indices):
            out[d] = _simplify(self.starts[d] + i) if not (isinstance(self.starts[d], IntImm)
                                                           and self.starts[d].value == 0) else i
        return tuple(out)


class _BlockFrame:
    """What a `with T.block` body declares before its statements."""

    def __init__(self, name: str):
        self.name = name
        self.iter_vars: list[IterVar] = []
        self.iter_values: list[PrimExpr] = []
        self.reads: tuple[BufferRegion, ...] | None = None
        self.writes: tuple[BufferRegion, ...] | None = None
        self.predicate: PrimExpr = TRUE
        self.annotations: tuple = ()
        self.alloc_buffers: list[Buffer] = []
        self.init: Stmt | None = None


class Parser:
    def __init__(self, source: _Source, closure: dict[str, Any]):
        self.src = source
        self.closure = closure
        self.scopes: list[dict[str, Any]] = [{}]
        self.loop_ranges: dict[int, tuple[PrimExpr, PrimExpr]] = {}
        self.blocks: list[_BlockFrame] = []
        self.block_names: set[str] = set()
        self.has_block = False
        self.root = _BlockFrame("root")

    # errors and spans -----------------------------------------------------------------------
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

    # scopes ---------------------------------------------------------------------------------
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

    # function -------------------------------------------------------------------------------
    def parse_function(self, fn: ast.FunctionDef) -> PrimFunc:  # noqa: C901
        sym: dict[str, Var] = {}  # scalar parameters and symbolic dimensions, by name
        by_name: dict[str, Buffer | Var | None] = {}
        handles: dict[str, ast.arg] = {}  # T.handle parameters, until T.match_buffer names their buffer
        args = fn.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            raise self.error(fn, "prim_func parameters must be plain annotated names",
                             'e.g. def f(A: T.Buffer((128,), "float32"), n: T.int32)')
        for arg in args.args:  # scalars first, so that a buffer's "n" can be the parameter n
            if arg.arg in by_name:
                raise self.error(arg, f"duplicate parameter '{arg.arg}'", "give every parameter its own name")
            if arg.annotation is None:
                raise self.error(arg, f"parameter '{arg.arg}' needs an annotation",
                                 'write A: T.Buffer((128, 128), "float32") or n: T.int32')
            by_name[arg.arg] = None
            if self._is_dtype_annotation(arg.annotation):
                var = Var(arg.arg, self._dtype_of_annotation(arg.annotation), span=self.span(arg))
                sym[arg.arg] = by_name[arg.arg] = var
                self.define(arg.arg, var)
            elif self._is_handle_annotation(arg.annotation):
                handles[arg.arg] = arg
        for arg in args.args:
            if by_name[arg.arg] is None and arg.arg not in handles:
                buf = self.parse_buffer_annotation(arg, sym)
                self.define(arg.arg, buf)
                by_name[arg.arg] = buf
        for name, var in sym.items():
            if name not in by_name:
                self.define(name, var)  # a symbolic dimension, referred to by its bare name
        body_nodes = list(fn.body)
        if body_nodes and isinstance(body_nodes[0], ast.Expr) and isinstance(body_nodes[0].value, ast.Constant) \
                and isinstance(body_nodes[0].value.value, str):
            body_nodes = body_nodes[1:]  # docstring
        attrs: tuple = ()
        self._handles = {name: _HandleParam(name) for name in handles}
        for name, h in self._handles.items():
            self.define(name, h)
        kept = []
        for node in body_nodes:  # the prelude: T.func_attr, symbolic variables, T.match_buffer of the handles
            if self._is_call_to(node, "func_attr"):
                if not node.value.args:
                    raise self.error(node, "T.func_attr takes a dict", 'e.g. T.func_attr({"tir.noalias": True})')
                attrs = attrs + self.parse_dict(node.value.args[0], node.value)
            elif self._is_symbolic_decl(node):
                self.parse_symbolic_decl(node, sym)
            elif self._is_handle_match(node):
                buf = self.parse_match_buffer(node, node.targets[0].id)
                h = self.lookup(node.value.args[0])
                if h.buffer is not None:
                    raise self.error(node, f"the handle '{h.name}' is matched twice", "match each handle once")
                h.buffer = buf
                by_name[h.name] = buf
                self.define(buf.name, buf)
            else:
                kept.append(node)
        body_nodes = kept
        unmatched = [name for name, h in self._handles.items() if h.buffer is None]
        if unmatched:
            raise self.error(handles[unmatched[0]], f"the T.handle parameter '{unmatched[0]}' has no T.match_buffer",
                             f"write {unmatched[0].upper()} = T.match_buffer({unmatched[0]}, shape, \"dtype\") at "
                             "the top of the function, or declare the parameter as T.Buffer(shape, \"dtype\")")
        params = [by_name[a.arg] for a in args.args]
        body_nodes = self._unwrap_root_block(body_nodes)
        self.blocks.append(self.root)
        body = self.parse_stmts(body_nodes)
        self.blocks.pop()
        if self.has_block or self.root.alloc_buffers or self.root.annotations:
            root = Block("root", (), (), (), body, None, tuple(self.root.alloc_buffers), self.root.annotations)
            body = BlockRealize((), TRUE, root)
        return PrimFunc(fn.name, tuple(params), body, attrs, span=self.span(fn))

    def _is_handle_annotation(self, node) -> bool:
        if isinstance(node, ast.Call):
            node = node.func
        return self._t_name(node) == "handle"

    def _symbolic_pairs(self, node) -> list | None:
        """`n = T.int64()` or `n, m = T.int64(), T.int64()`: symbolic variables (dimensions bound by
        the buffers at call time), as (name node, call) pairs; None for any other statement."""
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            return None
        target, value = node.targets[0], node.value
        names = target.elts if isinstance(target, ast.Tuple) else [target]
        calls = value.elts if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) else [value]
        if len(names) != len(calls) or not all(isinstance(n, ast.Name) for n in names):
            return None
        if not all(isinstance(c, ast.Call) and self._t_name(c.func) in _DTYPE_NAMES and not c.args
                   and not c.keywords for c in calls):
            return None
        return list(zip(names, calls))

    def _is_symbolic_decl(self, node) -> bool:
        return self._symbolic_pairs(node) is not None

    def parse_symbolic_decl(self, node: ast.Assign, sym: dict[str, Var]) -> None:
        for name_node, call in self._symbolic_pairs(node) or ():
            name = name_node.id
            dt = _dt.DataType.parse(self._t_name(call.func))
            if not dt.is_integer:
                raise self.error(node, f"the symbolic variable '{name}' must be an integer, not {dt}",
                                 f"write {name} = T.int32() or T.int64()")
            var = Var(name, dt, span=self.span(name_node))
            sym[name] = var
            self.define(name, var)

    def _is_handle_match(self, node) -> bool:
        return isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
            and self._is_call_to_expr(node.value, "match_buffer") and node.value.args \
            and isinstance(node.value.args[0], ast.Name) and node.value.args[0].id in self._handles

    def parse_match_buffer(self, node: ast.Assign, name: str) -> Buffer:
        """`A = T.match_buffer(a, shape, dtype, strides=, elem_offset=, scope=, ...)` of a handle."""
        call = node.value
        kw = {k.arg: k.value for k in call.keywords}
        rest = list(call.args[1:])
        shape_node = rest.pop(0) if rest else kw.pop("shape", None)
        if shape_node is None:
            raise self.error(call, "T.match_buffer needs a shape", 'e.g. T.match_buffer(a, (128, 128), "float32")')
        dtype_node = rest.pop(0) if rest else kw.pop("dtype", None)
        return self._buffer_from(name, shape_node, dtype_node, rest, kw, call, node, "T.match_buffer", {})

    def _buffer_from(self, name, shape_node, dtype_node, rest, kw, call, node, what: str, sym) -> Buffer:
        """A Buffer from T.Buffer / T.match_buffer / T.alloc_buffer arguments. TVM's layout hints
        `align=` and `offset_factor=` are accepted and ignored (they constrain where a buffer may
        start, not what it holds); `elem_offset=` is `offset=`; `buffer_type="default"` and an
        empty `axis_separators` are accepted."""
        if rest:
            raise self.error(rest[0], f"too many arguments to {what}", f"{what} takes shape, dtype and keywords")
        signature = what == "T.Buffer"
        dtype = self.parse_dtype(dtype_node) if dtype_node is not None else _dt.float32
        shape = self.parse_shape(shape_node, sym if signature else None, signature=signature)
        strides = self.parse_shape(kw.pop("strides"), sym if signature else None, signature=signature) \
            if "strides" in kw else ()
        if strides and len(strides) != len(shape):
            raise self.error(call, f"{len(strides)} strides for {len(shape)} dimensions")
        offset_node = kw.pop("offset", None) or kw.pop("elem_offset", None)
        offset = self.parse_dim(offset_node, sym if signature else None, signature) if offset_node is not None \
            else None
        if isinstance(offset, IntImm) and offset.value == 0:
            offset = None
        scope = self.const_str(kw.pop("scope")) if "scope" in kw else "global"
        for hint in ("align", "offset_factor"):
            if hint in kw:
                self.eval_expr(kw.pop(hint))
        if "buffer_type" in kw and self.const_str(kw["buffer_type"]) == "default":
            kw.pop("buffer_type")
        if "axis_separators" in kw and self.eval_expr(kw["axis_separators"]) in ([], (), None):
            kw.pop("axis_separators")
        if kw:
            bad = next(iter(kw))
            raise self.error(kw[bad], f"unknown {what} argument '{bad}'",
                             f"{what} takes shape, dtype, strides=, offset= (elem_offset=), scope=, align=, "
                             "offset_factor=")
        return Buffer(name, shape, dtype, strides, offset, scope, span=self.span(node))

    def _unwrap_root_block(self, body_nodes: list) -> list:
        """`with T.block("root"):` written out (TVM prints it): its allocations are the function's."""
        if len(body_nodes) != 1 or not isinstance(body_nodes[0], ast.With) or len(body_nodes[0].items) != 1:
            return body_nodes
        ctx = body_nodes[0].items[0].context_expr
        if not (isinstance(ctx, ast.Call) and self._t_name(ctx.func) == "block" and len(ctx.args) == 1
                and isinstance(ctx.args[0], ast.Constant) and ctx.args[0].value == "root"):
            return body_nodes
        out = []
        declaring = True
        for st in body_nodes[0].body:
            if declaring and isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) \
                    and self._t_name(st.value.func) in ("reads", "writes"):
                continue  # the root block's regions are inferred
            if declaring and isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) \
                    and self._t_name(st.value.func) == "block_attr" and st.value.args:
                self.root.annotations = self.parse_dict(st.value.args[0], st.value)
                continue
            declaring = False
            out.append(st)
        if not out:
            raise self.error(body_nodes[0], 'the root block is empty')
        return out

    def _is_dtype_annotation(self, node) -> bool:
        if isinstance(node, ast.Call) and not node.args and not node.keywords:
            node = node.func  # T.int32(), TVM's spelling
        return self._t_name(node) in _DTYPE_NAMES

    def _dtype_of_annotation(self, node) -> DataType:
        if isinstance(node, ast.Call):
            node = node.func
        return _dt.DataType.parse(node.attr)

    def parse_buffer_annotation(self, arg: ast.arg, sym: dict[str, Var]) -> Buffer:
        node = arg.annotation
        if isinstance(node, ast.Subscript) and self._is_t_attr(node.value, "Buffer"):
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            call_args, keywords = elts, []
        elif isinstance(node, ast.Call) and self._is_t_attr(node.func, "Buffer"):
            call_args, keywords = node.args, node.keywords
        else:
            name = self._t_name(node.func if isinstance(node, ast.Call) else node)
            if name is not None and name not in ("Buffer", "handle"):
                message, hint = absent_message(name)
                raise self.error(node, f"{message} (the annotation of parameter '{arg.arg}')", hint)
            raise self.error(node, f"unsupported annotation for parameter '{arg.arg}'",
                             'use T.Buffer(shape, "dtype") for a buffer or T.int32 / T.float32 ... for a scalar')
        kw = {k.arg: k.value for k in keywords}
        rest = list(call_args)
        shape_node = rest.pop(0) if rest else kw.pop("shape", None)
        if shape_node is None:
            raise self.error(node, "T.Buffer needs a shape", 'e.g. T.Buffer((128, 128), "float32")')
        dtype_node = rest.pop(0) if rest else kw.pop("dtype", None)
        return self._buffer_from(arg.arg, shape_node, dtype_node, rest, kw, node, arg, "T.Buffer", sym)

    def parse_shape(self, node, sym: dict[str, Var] | None, signature: bool = False) -> tuple[PrimExpr, ...]:
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.parse_dim(e, sym, signature) for e in node.elts)
        value = self.eval_expr(node) if not signature else None
        if isinstance(value, (tuple, list)):
            return tuple(self.to_index(v, node) for v in value)
        return (self.parse_dim(node, sym, signature),)

    def parse_dim(self, node, sym: dict[str, Var] | None, signature: bool) -> PrimExpr:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text.isidentifier():
                if sym is None:
                    raise self.error(node, f"symbolic dimension '{text}' can only be declared in the signature",
                                     f"refer to it by its bare name: {text}")
                if text not in sym:
                    sym[text] = Var(text, _dt.int32, span=self.span(node))
                if not sym[text].dtype.is_integer:
                    raise self.error(node, f"dimension '{text}' is a {sym[text].dtype} parameter; it must be an "
                                           "integer", f"declare it as {text}: T.int32")
                return sym[text]
            try:
                sub = ast.parse(text, mode="eval").body
            except SyntaxError:
                raise self.error(node, f"cannot read the dimension {text!r}",
                                 'a dimension is an int, a name such as "n", or an expression such as "n * 2"')
            self.push()
            for name, var in (sym or {}).items():
                self.define(name, var)
            try:
                for n in ast.walk(sub):
                    if isinstance(n, ast.Name) and sym is not None and n.id not in sym and n.id not in self.closure:
                        sym[n.id] = Var(n.id, _dt.int32)
                        self.define(n.id, sym[n.id])
                    ast.copy_location(n, node)
                return self.to_index(self.eval_expr(sub), node)
            finally:
                self.pop()
        if signature and isinstance(node, ast.Name) and sym is not None and node.id in sym:
            return sym[node.id]
        return self.to_index(self.eval_expr(node), node)

    # statements -----------------------------------------------------------------------------
    def parse_stmts(self, nodes: list[ast.stmt]) -> Stmt:
        out: list[Stmt] = []
        k = 0
        while k < len(nodes):
            node = nodes[k]
            rest = nodes[k + 1:]
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                if self._is_call_to_expr(node.value, "alloc_buffer"):
                    self.parse_alloc_buffer(node, name)
                    k += 1
                    continue
                if self._is_call_to_expr(node.value, "allocate"):
                    buf = self.parse_allocate(node.value, name, node)
                    self.push()
                    self.define(name, buf)
                    body = self.parse_stmts(rest)
                    self.pop()
                    out.append(Allocate(buf, body, span=self.span(node)))
                    break
                if self._is_axis_call(node.value):
                    raise self.error(node, "T.axis declares block iterators, so it must be in a T.block",
                                     'wrap the computation in `with T.block("name"):`')
                value = self.eval_expr(node.value)
                if not isinstance(value, PrimExpr):
                    value = self.python_to_expr(value, node.value)
                var = Var(name, value.dtype, span=self.span(node.targets[0]))
                self.push()
                self.define(name, var)
                body = self.parse_stmts(rest)
                self.pop()
                out.append(LetStmt(var, value, body, span=self.span(node)))
                break
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                dtype = self._let_annotation_dtype(node)
                value = self.coerce(self.eval_expr(node.value), dtype, node.value, f"the value of {node.target.id}")
                if value.dtype != dtype:
                    raise self.error(node.value, f"{node.target.id} is declared {dtype} but the value is a "
                                                 f"{value.dtype}", f'convert it: T.cast(value, "{dtype}")')
                var = Var(node.target.id, dtype, span=self.span(node.target))
                self.push()
                self.define(var.name, var)
                body = self.parse_stmts(rest)
                self.pop()
                out.append(LetStmt(var, value, body, span=self.span(node)))
                break
            stmt = self.parse_stmt(node)
            if stmt is not None:
                out.append(stmt)
            k += 1
        if len(out) == 1:
            return out[0]
        return SeqStmt(tuple(flat_seq(out)))

    def parse_stmt(self, node: ast.stmt) -> Stmt | None:
        method = getattr(self, "stmt_" + type(node).__name__, None)
        if method is None:
            raise self.error(node, f"'{_stmt_word(node)}' statements are not part of tdsl",
                             "a prim_func body has for loops, with T.block(...), if/else, buffer stores "
                             "(A[i] = ...), let bindings (x = ...), T.evaluate(...)")
        return method(node)

    def stmt_Pass(self, node) -> Stmt | None:
        return None

    def stmt_Expr(self, node: ast.Expr) -> Stmt | None:
        call = node.value
        if isinstance(call, ast.Constant) and isinstance(call.value, str):
            return None  # a string used as a comment
        if isinstance(call, ast.Call) and self._t_name(call.func) in ("reads", "writes", "where", "block_attr"):
            raise self.error(node, f"T.{self._t_name(call.func)} must come first in a T.block body",
                             "put block declarations (T.axis, T.where, T.reads, T.writes, T.block_attr) "
                             "before the block's statements")
        if isinstance(call, ast.Call) and self._t_name(call.func) == "evaluate":
            if len(call.args) != 1:
                raise self.error(call, "T.evaluate takes one expression")
            value = self.eval_expr(call.args[0])
            return Evaluate(self.python_to_expr(value, call.args[0]), span=self.span(node))
        if isinstance(call, ast.Call) and self._t_name(call.func) == "call_extern":
            return Evaluate(self.eval_expr(call), span=self.span(node))
        if isinstance(call, ast.Call) and self._t_name(call.func) in ABSENT:
            raise self.error(call.func, *absent_message(self._t_name(call.func)))
        raise self.error(node, "this expression does nothing as a statement",
                         "store it into a buffer (A[i] = ...), bind it (x = ...), or wrap an extern call in "
                         "T.evaluate(...)")

    def stmt_Return(self, node) -> Stmt:
        raise self.error(node, "a prim_func cannot return a value",
                         "write results into an output buffer parameter; callers get it back from the kernel")

    def stmt_While(self, node) -> Stmt:
        raise self.error(node, "while loops are not part of tdsl", "use for i in range(n): ...")

    def stmt_AugAssign(self, node: ast.AugAssign) -> Stmt:
        if not isinstance(node.target, ast.Subscript):
            raise self.error(node.target, "augmented assignment needs a buffer element on the left",
                             "local names are immutable let bindings; write A[i] += v, or y = x + v")
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported in tdsl",
                             "use + - * / // %")
        buf, indices = self.parse_store_target(node.target)
        load = BufferLoad(buf, indices, span=self.span(node.target))
        value = self.binary(op, load, self.eval_expr(node.value), node)
        return self.make_store(buf, indices, value, node)

    def stmt_AnnAssign(self, node) -> Stmt:
        raise self.error(node, "an annotated assignment here is not part of tdsl",
                         "a let binding with its type is `x: T.int32 = value` (or x: T.let[T.int32] = value)")

    def _let_annotation_dtype(self, node: ast.AnnAssign) -> DataType:
        ann = node.annotation
        if isinstance(ann, ast.Subscript) and self._t_name(ann.value) == "let":
            ann = ann.slice
        if not self._is_dtype_annotation(ann):
            raise self.error(ann, "a let binding's annotation is a scalar type",
                             "e.g. x: T.int32 = value, or x: T.let[T.float32] = value")
        return self._dtype_of_annotation(ann)

    def stmt_Assign(self, node: ast.Assign) -> Stmt:
        if len(node.targets) != 1:
            raise self.error(node, "chained assignment is not supported", "assign one target per statement")
        target = node.targets[0]
        if isinstance(target, ast.Subscript):
            buf, indices = self.parse_store_target(target)
            value = self.eval_expr(node.value)
            return self.make_store(buf, indices, value, node)
        if isinstance(target, ast.Tuple) and self._is_axis_call(node.value):
            raise self.error(node, "T.axis declares block iterators, so it must come first in a T.block",
                             "move it to the top of the block body")
        raise self.error(target, "cannot assign to this target",
                         "assign to a buffer element (A[i, j] = ...) or a single name (x = ...)")

    def parse_store_target(self, target: ast.Subscript) -> tuple[Buffer, tuple[PrimExpr, ...]]:
        buf = self.eval_expr(target.value)
        if isinstance(buf, _View):
            return buf.parent, buf.parent_indices(self.parse_indices(buf, target))
        if not isinstance(buf, Buffer):
            raise self.error(target.value, "only buffer elements can be stored to",
                             "declare the buffer as a parameter or with T.alloc_buffer")
        return buf, self.parse_indices(buf, target)

    def make_store(self, buf: Buffer, indices, value, node) -> BufferStore:
        value = self.coerce(value, buf.dtype, node.value if hasattr(node, "value") else node,
                            f"the value stored into {buf.name} ({buf.dtype})")
        lanes = max([i.dtype.lanes for i in indices] + [1])
        if value.dtype != buf.dtype.with_lanes(lanes * buf.dtype.lanes):
            raise self.error(node.value, f"cannot store a {value.dtype} value into {buf.name}, a {buf.dtype} buffer",
                             f'convert it: T.cast(value, "{buf.dtype}")')
        return BufferStore(buf, value, indices, span=self.span(node))

    def stmt_If(self, node: ast.If) -> Stmt | None:
        cond = self.eval_expr(node.test)
        if not isinstance(cond, PrimExpr):
            branch = node.body if cond else node.orelse
            return self._scoped_stmts(branch) if branch else None
        if not cond.dtype.is_bool:
            raise self.error(node.test, f"the condition of an if must be a bool, not {cond.dtype}",
                             "compare it, e.g. x != 0")
        self.if_depth = getattr(self, "if_depth", 0) + 1   # bindings under an if may leave their domain
        try:
            then = self._scoped_stmts(node.body)
            other = self._scoped_stmts(node.orelse) if node.orelse else None
        finally:
            self.if_depth -= 1
        return IfThenElse(cond, then, other, span=self.span(node))

    def _scoped_stmts(self, nodes) -> Stmt:
        self.push()
        try:
            return self.parse_stmts(nodes)
        finally:
            self.pop()

    def stmt_For(self, node: ast.For) -> Stmt:
        if node.orelse:
            raise self.error(node.orelse[0], "for ... else is not part of tdsl")
        it = node.iter
        if not isinstance(it, ast.Call):
            raise self.error(it, "a tdsl loop iterates over range(...) or a T loop",
                             "use range(n), T.grid(n, m), T.serial / T.parallel / T.vectorized / T.unroll / "
                             "T.thread_binding")
        fname = self._t_name(it.func)
        if isinstance(it.func, ast.Name) and it.func.id == "range":
            fname = "range"
        if fname == "grid":
            targets = self._loop_targets(node.target, len(it.args), it)
            if it.keywords:
                raise self.error(it, "T.grid takes only extents")
            extents = [self.to_index(self.eval_expr(a), a) for a in it.args]
            specs = [(const(0, e.dtype), e, "serial", None, ()) for e in extents]
        elif fname in ("range", *_LOOP_KINDS):
            targets = self._loop_targets(node.target, 1, it)
            specs = [self.parse_loop_call(it, fname)]
        else:
            raise self.error(it, "a tdsl loop iterates over range(...) or a T loop",
                             "use range(n), T.grid(n, m), T.serial / T.parallel / T.vectorized / T.unroll / "
                             "T.thread_binding")
        self.push()
        loop_vars = []
        for tgt, (lo, ext, _, _, _) in zip(targets, specs):
            var = Var(tgt.id, ext.dtype, span=self.span(tgt))
            self.define(tgt.id, var)
            self.loop_ranges[id(var)] = (lo, ext)
            loop_vars.append(var)
        body = self.parse_stmts(node.body)
        self.pop()
        for var, (lo, ext, kind, tag, ann) in reversed(list(zip(loop_vars, specs))):
            body = For(var, lo, ext, kind, body, tag, ann, span=self.span(node))
        return body

    def _loop_targets(self, target, count: int, it) -> list[ast.Name]:
        names = target.elts if isinstance(target, ast.Tuple) else [target]
        if not all(isinstance(n, ast.Name) for n in names):
            raise self.error(target, "loop variables must be plain names")
        if len(names) != count:
            raise self.error(target, f"{len(names)} loop variables for {count} loops",
                             "name one variable per extent of T.grid")
        return names

    def parse_loop_call(self, it: ast.Call, fname: str):
        kw = {k.arg: k.value for k in it.keywords}
        kind = "serial" if fname == "range" else _LOOP_KINDS[fname]
        tag = None
        if kind == "thread_binding":
            if "thread" not in kw:
                raise self.error(it, "T.thread_binding needs thread=",
                                 f'e.g. T.thread_binding(32, thread="threadIdx.x"); axes: {", ".join(THREAD_TAGS)}')
            tag = self.const_str(kw.pop("thread"))
            if tag not in THREAD_TAGS:
                raise self.error(it, f"unknown thread axis {tag!r}", f"use one of {', '.join(THREAD_TAGS)}")
        ann = ()
        if "annotations" in kw and fname != "range":
            ann = self.parse_dict(kw.pop("annotations"), it)
        if kw:
            bad = next(iter(kw))
            raise self.error(kw[bad], f"unknown argument '{bad}' of {fname}")
        args = it.args
        if fname == "range" and len(args) == 3:
            raise self.error(args[2], "range with a step is not supported", "scale the loop variable instead")
        if len(args) == 1:
            ext = self.to_index(self.eval_expr(args[0]), args[0])
            lo = const(0, ext.dtype)
        elif len(args) == 2:
            lo = self.to_index(self.eval_expr(args[0]), args[0])
            hi = self.to_index(self.eval_expr(args[1]), args[1])
            lo, hi = self.unify_ints(lo, hi, it)
            ext = _simplify(hi - lo)
        else:
            raise self.error(it, f"{fname} takes (stop) or (start, stop)")
        return lo, ext, kind, tag, ann

    def stmt_With(self, node: ast.With) -> Stmt:
        if len(node.items) != 1:
            raise self.error(node, "one context per with statement")
        item = node.items[0]
        ctx = item.context_expr
        name = self._t_name(ctx.func) if isinstance(ctx, ast.Call) else None
        if name == "block":
            return self.parse_block(node, ctx)
        if name == "init":
            raise self.error(node, "with T.init() must be directly inside a T.block",
                             "move it to the top of the block body")
        if name == "LetStmt" and isinstance(item.optional_vars, ast.Name):
            value = self.python_to_expr(self.eval_expr(ctx.args[0]), ctx.args[0])
            var = Var(item.optional_vars.id, value.dtype, span=self.span(item.optional_vars))
            self.push()
            self.define(var.name, var)
            body = self.parse_stmts(node.body)
            self.pop()
            return LetStmt(var, value, body, span=self.span(node))
        if name == "allocate" and isinstance(item.optional_vars, ast.Name):
            buf = self.parse_allocate(ctx, item.optional_vars.id, node)
            self.push()
            self.define(buf.name, buf)
            body = self.parse_stmts(node.body)
            self.pop()
            return Allocate(buf, body, span=self.span(node))
        if name in ABSENT:
            raise self.error(ctx, *absent_message(name))
        raise self.error(ctx, "unsupported with statement", 'use with T.block("name"): or with T.init():')

    # blocks ---------------------------------------------------------------------------------
    def parse_block(self, node: ast.With, ctx: ast.Call) -> Stmt:
        if len(ctx.args) != 1 or not isinstance(ctx.args[0], ast.Constant) or not isinstance(ctx.args[0].value, str):
            raise self.error(ctx, "T.block needs a name", 'write with T.block("C"):')
        name = ctx.args[0].value
        if name == "root" or name in self.block_names:
            raise self.error(ctx.args[0], f'block name "{name}" is already used' if name != "root"
                             else 'the block name "root" is reserved', "block names are unique in a function")
        self.block_names.add(name)
        self.has_block = True
        frame = _BlockFrame(name)
        self.blocks.append(frame)
        self.push()
        stmts = list(node.body)
        body_nodes: list[ast.stmt] = []
        declaring = True
        for st in stmts:
            if declaring and self.parse_block_decl(st, frame):
                continue
            if self._is_with_init(st):
                if frame.init is not None:
                    raise self.error(st, f'block "{name}" has two T.init() sections')
                frame.init = self._scoped_stmts(st.body)
                continue
            if self._is_block_decl(st):
                raise self.error(st, f"{self._decl_word(st)} must come before the statements of block \"{name}\"",
                                 "declare iterators, T.where, T.reads, T.writes, T.block_attr and "
                                 "T.alloc_buffer at the top of the block")
            declaring = False
            body_nodes.append(st)
        body = self.parse_stmts(body_nodes)
        self.pop()
        self.blocks.pop()
        block = Block(name, tuple(frame.iter_vars), (), (), body, frame.init, tuple(frame.alloc_buffers),
                      frame.annotations, span=self.span(ctx))
        reads, writes = self.block_regions(block, frame, node)
        block = Block(name, block.iter_vars, reads, writes, body, frame.init, block.alloc_buffers,
                      frame.annotations, span=block.span)
        self._check_bindings_in_domain(frame, node)
        return BlockRealize(tuple(frame.iter_values), frame.predicate, block, span=self.span(node))

    def _check_bindings_in_domain(self, frame: _BlockFrame, node) -> None:
        """An iterator bound outside its constant domain over the enclosing constant loops (no
        T.where, no enclosing if) is refused: `T.axis.spatial(10, i)` under `range(16)`."""
        from ..arith import const_bound
        from ..ir import Range, free_vars

        if getattr(self, "if_depth", 0) or not (isinstance(frame.predicate, IntImm) and frame.predicate.value):
            return
        for iv, value in zip(frame.iter_vars, frame.iter_values):
            dom = iv.dom
            if not (isinstance(dom.min, IntImm) and isinstance(dom.extent, IntImm)):
                continue
            ranges = {}
            for v in free_vars(value):
                lo_ext = self.loop_ranges.get(id(v))
                if lo_ext is None or not all(isinstance(x, IntImm) for x in lo_ext):
                    break
                ranges[v] = Range(*lo_ext)
            else:
                lo, hi = const_bound(value, ranges)
                end = dom.min.value + dom.extent.value
                if lo is not None and hi is not None and (lo < dom.min.value or hi >= end):
                    from .printer import message_text

                    raise self.error(node, f'block "{frame.name}": iterator {iv.var.name} is bound to '
                                     f'{message_text(value)}, which ranges over [{lo}, {hi}], outside its domain '
                                     f'[{dom.min.value}, {end})',
                                     "bind it within its domain, or guard the block with T.where(...)")

    def block_regions(self, block: Block, frame: _BlockFrame, node) -> tuple:
        from ..arith import infer_block_regions

        if frame.reads is not None and frame.writes is not None:
            inferred_reads, inferred_writes = infer_block_regions(block)
            # TVM's scripts leave a reduction's own output out of T.reads (C[vi, vj] = C[vi, vj] + ...
            # with T.reads(A[...], B[...])): the read of a buffer the block declares it writes is
            # added after the declared reads, so that read indices keep TVM's meaning
            written = {id(r.buffer) for r in frame.writes}
            listed = {id(r.buffer) for r in frame.reads}
            own = tuple(r for r in inferred_reads if id(r.buffer) in written and id(r.buffer) not in listed)
            if own:
                frame.reads = frame.reads + own
            self._check_declared(frame.reads, inferred_reads, "reads", frame, node)
            self._check_declared(frame.writes, inferred_writes, "writes", frame, node)
            return frame.reads, frame.writes
        reads, writes = infer_block_regions(block)
        return (frame.reads if frame.reads is not None else reads,
                frame.writes if frame.writes is not None else writes)

    def _check_declared(self, declared, inferred, what: str, frame: _BlockFrame, node) -> None:
        names = {id(r.buffer) for r in declared}
        for r in inferred:
            if id(r.buffer) not in names:
                raise self.error(node, f'block "{frame.name}" {what[:-1]}s {r.buffer.name}, but T.{what} '
                                       "does not list it",
                                 f"add it to T.{what}(...) or leave T.reads/T.writes out to have them inferred")

    def _is_with_init(self, st) -> bool:
        return isinstance(st, ast.With) and len(st.items) == 1 and isinstance(st.items[0].context_expr, ast.Call) \
            and self._t_name(st.items[0].context_expr.func) == "init"

    def _is_block_decl(self, st) -> bool:
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            return self._t_name(st.value.func) in ("reads", "writes", "where", "block_attr")
        if isinstance(st, ast.Assign):
            return self._is_axis_call(st.value) or self._is_call_to_expr(st.value, "alloc_buffer") \
                or self._is_call_to_expr(st.value, "match_buffer")
        return False

    def _decl_word(self, st) -> str:
        if isinstance(st, ast.Expr):
            return f"T.{self._t_name(st.value.func)}"
        if self._is_axis_call(st.value):
            return "T.axis"
        return "T.match_buffer" if self._is_call_to_expr(st.value, "match_buffer") else "T.alloc_buffer"

    def parse_block_decl(self, st, frame: _BlockFrame) -> bool:
        if isinstance(st, ast.Assign) and self._is_axis_call(st.value):
            self.parse_axis(st, frame)
            return True
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and self._is_call_to_expr(st.value, "alloc_buffer"):
            self.parse_alloc_buffer(st, st.targets[0].id)
            return True
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and self._is_call_to_expr(st.value, "match_buffer"):
            self.define(st.targets[0].id, self.parse_view(st, st.targets[0].id))
            return True
        if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)):
            return False
        call = st.value
        what = self._t_name(call.func)
        if what in ("reads", "writes"):
            if getattr(frame, what) is not None:
                raise self.error(st, f"T.{what} appears twice in block \"{frame.name}\"")
            setattr(frame, what, self.parse_regions(call))
            return True
        if what == "where":
            if len(call.args) != 1:
                raise self.error(call, "T.where takes one condition")
            cond = self.eval_expr(call.args[0])
            cond = self.python_to_expr(cond, call.args[0]) if not isinstance(cond, PrimExpr) else cond
            if not cond.dtype.is_bool:
                raise self.error(call.args[0], f"T.where needs a bool condition, not {cond.dtype}")
            self._refuse_own_iterators(cond, frame, call.args[0], "T.where")
            frame.predicate = cond
            return True
        if what == "block_attr":
            frame.annotations = self.parse_dict(call.args[0], call) if call.args else ()
            return True
        return False

    def parse_axis(self, st: ast.Assign, frame: _BlockFrame) -> None:
        if len(st.targets) != 1:
            raise self.error(st, "one target list per T.axis statement")
        target = st.targets[0]
        call = st.value
        kind_name = call.func.attr
        if kind_name == "remap":
            if len(call.args) != 2 or not isinstance(call.args[0], ast.Constant) \
                    or not isinstance(call.args[0].value, str) or not isinstance(call.args[1], (ast.List, ast.Tuple)):
                raise self.error(call, 'T.axis.remap takes a kind string and a list of loop variables',
                                 'e.g. vi, vj, vk = T.axis.remap("SSR", [i, j, k])')
            kinds = call.args[0].value
            values = call.args[1].elts
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            if not (len(kinds) == len(values) == len(names)):
                raise self.error(call, f"T.axis.remap has {len(kinds)} kinds, {len(values)} loop variables and "
                                       f"{len(names)} names", "give one kind letter (S or R) per loop variable")
            for name, kind, vnode in zip(names, kinds, values):
                if kind not in "SR":
                    raise self.error(call.args[0], f"unknown iterator kind '{kind}'",
                                     "use S for spatial (data-parallel) and R for reduction")
                value = self.eval_expr(vnode)
                if not isinstance(value, Var) or id(value) not in self.loop_ranges:
                    raise self.error(vnode, "T.axis.remap binds iterators to loop variables",
                                     "for any other binding use T.axis.spatial(extent, value)")
                lo, ext = self.loop_ranges[id(value)]
                self._add_iter(frame, name, kind, Range(lo, ext), value)
            return
        kind = {"spatial": "S", "S": "S", "reduce": "R", "R": "R"}.get(kind_name)
        if kind_name in ("scan", "opaque"):
            raise self.error(call.func, f"T.axis.{kind_name} (TVM's {kind_name} iterator) is not part of tdsl: a tdsl "
                             "block's iterators are spatial or reduction",
                             "write T.axis.spatial(n, i) or T.axis.reduce(n, k); a scan is a loop inside one block, "
                             "or a chain of blocks")
        if kind is None:
            raise self.error(call.func, f"unknown T.axis.{kind_name}", "use T.axis.spatial, T.axis.reduce or "
                                                                       "T.axis.remap")
        if not isinstance(target, ast.Name):
            raise self.error(target, f"T.axis.{kind_name} declares one iterator", "write vi = T.axis.spatial(n, i)")
        if len(call.args) != 2:
            raise self.error(call, f"T.axis.{kind_name} takes (domain, value)",
                             f"e.g. vi = T.axis.{kind_name}(128, i * 4 + j)")
        value = self.to_index(self.eval_expr(call.args[1]), call.args[1])
        dom_node = call.args[0]
        if isinstance(dom_node, ast.Tuple):
            if len(dom_node.elts) != 2:
                raise self.error(dom_node, "a domain tuple is (start, stop)")
            lo = self.to_index(self.eval_expr(dom_node.elts[0]), dom_node, value.dtype)
            hi = self.to_index(self.eval_expr(dom_node.elts[1]), dom_node, value.dtype)
            dom = Range(lo, _simplify(hi - lo))
        else:
            ext = self.to_index(self.eval_expr(dom_node), dom_node, value.dtype)
            dom = Range(const(0, ext.dtype), ext)
        if dom.extent.dtype != value.dtype:
            raise self.error(call, f"the domain is {dom.extent.dtype} but the value is {value.dtype}",
                             "cast one of them so that they agree")
        self._add_iter(frame, target, kind, dom, value)

    def _refuse_own_iterators(self, expr: PrimExpr, frame: _BlockFrame, node, what: str) -> None:
        """A block's predicate and iterator bindings are evaluated outside the block, over the
        loop variables: its own iterators are not defined there."""
        from ..ir.functor import free_vars

        own = {id(iv.var): iv.var.name for iv in frame.iter_vars}
        used = sorted(own[id(v)] for v in free_vars(expr) if id(v) in own)
        if used:
            raise self.error(node, f'{what} of block "{frame.name}" uses its own iterator {used[0]}',
                             "write it over the loop variables (e.g. T.where(i * 16 + j < 50))")

    def _add_iter(self, frame: _BlockFrame, name_node: ast.Name, kind: str, dom: Range, value: PrimExpr) -> None:
        if not isinstance(name_node, ast.Name):
            raise self.error(name_node, "block iterators must be plain names")
        self._refuse_own_iterators(value, frame, name_node, f"the binding of {name_node.id}")
        var = Var(name_node.id, value.dtype, span=self.span(name_node))
        frame.iter_vars.append(IterVar(var, dom, kind, span=self.span(name_node)))
        frame.iter_values.append(value)
        self.define(name_node.id, var)

    def parse_regions(self, call: ast.Call) -> tuple[BufferRegion, ...]:
        nodes = list(call.args)
        if len(nodes) == 1 and isinstance(nodes[0], (ast.List, ast.Tuple)):
            nodes = list(nodes[0].elts)
        out = []
        for n in nodes:
            if isinstance(n, ast.Subscript):
                buf = self.eval_expr(n.value)
                view = buf if isinstance(buf, _View) else None
                if view is not None:
                    buf = view
                elif not isinstance(buf, Buffer):
                    raise self.error(n.value, "T.reads / T.writes list buffer regions", "e.g. T.reads(A[vi, 0:128])")
                elts = self._subscript_elts(n)
                if len(elts) != buf.ndim:
                    raise self.error(n, f"{buf.name} has {buf.ndim} dimensions but the region gives {len(elts)}")
                ranges = []
                for e in elts:
                    if isinstance(e, ast.Slice):
                        if e.lower is None or e.upper is None or e.step is not None:
                            raise self.error(e, "a region slice is start:stop", "e.g. A[vi, 0:128]")
                        lo = self.to_index(self.eval_expr(e.lower), e.lower)
                        hi = self.to_index(self.eval_expr(e.upper), e.upper)
                        lo, hi = self.unify_ints(lo, hi, e)
                        ranges.append(Range(lo, _simplify(hi - lo)))
                    else:
                        idx = self.to_index(self.eval_expr(e), e)
                        ranges.append(Range(idx, const(1, idx.dtype)))
                if view is not None:
                    out.append(self._view_region(view, ranges, n))
                else:
                    out.append(BufferRegion(buf, tuple(ranges), span=self.span(n)))
            else:
                value = self.eval_expr(n)
                if isinstance(value, Buffer):
                    out.append(value.full_region())
                elif isinstance(value, _View):
                    out.append(self._view_region(value, [Range(const(0, e.dtype), e) for e in value.shape], n))
                else:
                    raise self.error(n, "T.reads / T.writes list buffer regions", "e.g. T.reads(A[vi, 0:128], B)")
        return tuple(out)

    def parse_view(self, node: ast.Assign, name: str) -> _View:
        """`X = T.match_buffer(A[vi * 4:vi * 4 + 4, 0:16], (4, 16))` inside a block."""
        call = node.value
        kw = {k.arg: k.value for k in call.keywords}
        src = call.args[0] if call.args else None
        if not isinstance(src, ast.Subscript):
            raise self.error(call, "inside a block, T.match_buffer takes a buffer region",
                             "e.g. A0 = T.match_buffer(A[vi, 0:16], (16,))")
        regions = self.parse_regions(ast.Call(func=call.func, args=[src], keywords=[]))
        region = regions[0]
        parent = region.buffer
        rest = list(call.args[1:])
        shape_node = rest.pop(0) if rest else kw.pop("shape", None)
        dtype_node = rest.pop(0) if rest else kw.pop("dtype", None)
        if shape_node is None:
            raise self.error(call, "T.match_buffer needs a shape", "e.g. T.match_buffer(A[vi, 0:16], (16,))")
        shape = self.parse_shape(shape_node, None)
        if dtype_node is not None and self.parse_dtype(dtype_node) != parent.dtype:
            raise self.error(dtype_node, f"{parent.name} is {parent.dtype}; a view of it has that dtype")
        for hint in ("align", "offset_factor", "elem_offset", "strides", "scope", "buffer_type"):
            kw.pop(hint, None)  # layout facts of the parent; a view in tdsl has the parent's layout
        if kw or rest:
            bad = next(iter(kw)) if kw else None
            raise self.error(kw[bad] if bad else rest[0], f"unknown T.match_buffer argument '{bad or rest[0]}'")
        extents = [r.extent for r in region.region]
        dims = list(range(len(extents)))
        if len(shape) < len(extents):  # dimensions of extent 1 may be left out of the view's shape
            dims = [d for d, e in enumerate(extents) if not (isinstance(e, IntImm) and e.value == 1)]
            while len(dims) < len(shape):
                dims = sorted(set(dims) | {next(d for d in range(len(extents)) if d not in dims)})
        if len(dims) != len(shape) or not all(self._same_extent(extents[d], e) for d, e in zip(dims, shape)):
            raise self.error(call, f"the view's shape ({', '.join(_text(e) for e in shape)}) does not match the "
                                   f"region of {parent.name} ({', '.join(_text(e) for e in extents)})",
                             "give the view the region's extents (dimensions of extent 1 may be left out)")
        return _View(name, parent, tuple(r.min for r in region.region), tuple(dims), tuple(shape))

    def _same_extent(self, a: PrimExpr, b: PrimExpr) -> bool:
        from ..ir.structural import same_expr

        return same_expr(_simplify(a), _simplify(b)) or (
            isinstance(a, IntImm) and isinstance(b, IntImm) and a.value == b.value)

    def _view_region(self, view: _View, ranges, node) -> BufferRegion:
        out = [Range(start, const(1, start.dtype)) for start in view.starts]
        for d, r in zip(view.dims, ranges):
            out[d] = Range(_simplify(view.starts[d] + r.min), r.extent)
        return BufferRegion(view.parent, tuple(out), span=self.span(node))

    def parse_alloc_buffer(self, node: ast.Assign, name: str) -> None:
        frame = self.blocks[-1] if self.blocks else None
        if frame is None:
            raise self.error(node, "T.alloc_buffer must be inside a block or at the top of the function")
        if frame is self.root and len(self.scopes) > 1:
            raise self.error(node, "T.alloc_buffer must be inside a block or at the top of the function",
                             "move it out of the loop, or into a T.block")
        call = node.value
        kw = {k.arg: k.value for k in call.keywords}
        rest = list(call.args)
        shape_node = rest.pop(0) if rest else kw.pop("shape", None)
        if shape_node is None:
            raise self.error(call, "T.alloc_buffer needs a shape", 'e.g. T.alloc_buffer((128,), "float32")')
        dtype_node = rest.pop(0) if rest else kw.pop("dtype", None)
        if rest:
            kw["scope"] = rest.pop(0)
        buf = self._buffer_from(name, shape_node, dtype_node, rest, kw, call, node, "T.alloc_buffer", None)
        frame.alloc_buffers.append(buf)
        self.define(name, buf)

    def parse_allocate(self, call: ast.Call, name: str, node) -> Buffer:
        if len(call.args) < 2:
            raise self.error(call, "T.allocate takes (shape, dtype, scope)")
        shape = self.parse_shape(call.args[0], None)
        dtype = self.parse_dtype(call.args[1])
        kw = {k.arg: k.value for k in call.keywords}
        scope = self.const_str(call.args[2]) if len(call.args) > 2 else (
            self.const_str(kw["scope"]) if "scope" in kw else "global")
        return Buffer(name, shape, dtype, (), None, scope, span=self.span(node))

    # expressions ----------------------------------------------------------------------------
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

    def expr_Tuple(self, node: ast.Tuple):
        return tuple(self.eval_expr(e) for e in node.elts)

    def expr_List(self, node: ast.List):
        return [self.eval_expr(e) for e in node.elts]

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
        raise self.error(node, "the ~ operator is not supported in tdsl")

    def expr_BinOp(self, node: ast.BinOp):
        if isinstance(node.op, ast.Pow):
            a, b = self.eval_expr(node.left), self.eval_expr(node.right)
            if not isinstance(a, PrimExpr) and not isinstance(b, PrimExpr):
                return a ** b
            return self.math_call("pow", [a, b], node)
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported in tdsl",
                             "use + - * / // % ** and T functions")
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
        return Binary(op, a, b, span=self.span(node))

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
        if not logic and op not in ("eq", "ne") and a.dtype.is_bool:
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

    # calls ----------------------------------------------------------------------------------
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
                if any(isinstance(a, (PrimExpr, Buffer)) for a in args):
                    raise self.error(node, f"{getattr(func, '__name__', 'this function')} cannot take tdsl values",
                                     'use T functions, e.g. T.cast(x, "float32"), T.min, T.max')
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
                         "see SPEC section 1 for the expression functions (T.exp, T.max, T.cast, ...)")

    def access_ptr(self, buf, node: ast.Call):
        """`A.access_ptr("r")` (TVM): a handle to the buffer's first element, or, with
        `offset=k`, to its k-th element in row-major order (a 1-d buffer, or k == 0)."""
        kw = {k.arg: k.value for k in node.keywords}
        args = list(node.args)
        names = ["access_mask", "ptr_type", "content_lanes", "offset", "extent"]
        for k, a in zip(names, args):
            kw[k] = a
        bad = [k for k in kw if k not in names]
        if bad:
            raise self.error(kw[bad[0]], f"unknown access_ptr argument '{bad[0]}'",
                             "access_ptr takes (access_mask, ptr_type, content_lanes, offset, extent)")
        if "ptr_type" in kw and self.const_str(kw["ptr_type"]) != "handle":
            raise self.error(kw["ptr_type"], "tdsl's access_ptr gives a handle", 'leave ptr_type out or use "handle"')
        if "content_lanes" in kw and self.eval_expr(kw["content_lanes"]) != 1:
            raise self.error(kw["content_lanes"], "tdsl's access_ptr has content_lanes=1",
                             "address a vector's first element with T.address_of(A[i])")
        offset = self.eval_expr(kw["offset"]) if "offset" in kw else 0
        return self._pointer(buf, offset, node)

    def _pointer(self, buf, offset, node) -> PrimExpr:
        """T.address_of the element `offset` (row-major) from the start of `buf` or of a view."""
        ndim = buf.ndim
        zero_offset = isinstance(offset, int) and offset == 0 or isinstance(offset, IntImm) and offset.value == 0
        if not zero_offset and ndim != 1:
            raise self.error(node, f"an offset into the {ndim}-d buffer {buf.name} is not expressible in tdsl",
                             "address the element itself: T.address_of(A[i, j])")
        first = [const(0, e.dtype if isinstance(e, PrimExpr) else _dt.int32) for e in buf.shape]
        if not zero_offset:
            first = [self.to_index(offset, node)]
        if isinstance(buf, _View):
            load = BufferLoad(buf.parent, buf.parent_indices(first), span=self.span(node))
        else:
            load = BufferLoad(buf, tuple(first), span=self.span(node))
        return Call(_dt.handle, "address_of", (load,), span=self.span(node))

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

    def call_Cast(self, node: ast.Call):
        if len(node.args) != 2:
            raise self.error(node, 'T.Cast takes ("dtype", value)')
        swapped = ast.Call(func=node.func, args=[node.args[1], node.args[0]], keywords=[])
        ast.copy_location(swapped, node)
        return self.call_cast(swapped)

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

    def call_likely(self, node):
        """`T.likely(cond)`: TVM's branch hint; the condition itself."""
        if len(node.args) != 1:
            raise self.error(node, "T.likely takes one condition")
        return self.eval_expr(node.args[0])

    def call_floordiv(self, node):
        return self.binary("floordiv", self.eval_expr(node.args[0]), self.eval_expr(node.args[1]), node)

    def call_floormod(self, node):
        return self.binary("floormod", self.eval_expr(node.args[0]), self.eval_expr(node.args[1]), node)

    def call_if_then_else(self, node):
        if len(node.args) != 3:
            raise self.error(node, "T.if_then_else takes (cond, then, else)")
        c, t, f = (self.eval_expr(a) for a in node.args)
        return self.select("if_then_else", c, t, f, node)

    def call_Select(self, node):
        if len(node.args) != 3:
            raise self.error(node, "T.Select takes (cond, then, else)")
        c, t, f = (self.eval_expr(a) for a in node.args)
        return self.select("Select", c, t, f, node)

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

    def call_call_extern(self, node):
        dtype_kw = [k.value for k in node.keywords if k.arg == "dtype"]
        if dtype_kw and node.args:  # TVM's other spelling: T.call_extern("name", *args, dtype="int32")
            dt, name, rest = self.parse_dtype(dtype_kw[0]), self.const_str(node.args[0]), node.args[1:]
        elif len(node.args) < 2 or node.keywords:
            raise self.error(node, 'T.call_extern takes ("dtype", "name", *args) or ("name", *args, dtype="dtype")')
        else:
            dt, name, rest = self.parse_dtype(node.args[0]), self.const_str(node.args[1]), node.args[2:]
        args = []
        for a in rest:
            v = self.eval_expr(a)
            if isinstance(v, str):
                args.append(StringImm(v))
            elif isinstance(v, Buffer):
                raise self.error(a, "pass a buffer element, not a buffer", "e.g. A[0, 0]")
            else:
                args.append(self.python_to_expr(v, a))
        return Call(dt, name, tuple(args), span=self.span(node))

    def call_wmma_builtin(self, node):
        """`T.tvm_mma_sync(C.data, ci, A.data, ai, ...)` and the other TVM warp-matrix builtins
        (tdsl.ir.opaque_calls): an opaque call over buffer addresses, kept as written."""
        name = self._t_name(node.func)
        arity = WMMA_BUILTINS[name][0]
        kw = {k.arg: k.value for k in node.keywords}
        if set(kw) - {"dtype"} or len(node.args) != arity:
            raise self.error(node, f"T.{name} takes {arity} arguments (and dtype=\"handle\")")
        args = []
        for a in node.args:
            v = self.eval_expr(a)
            args.append(StringImm(v) if isinstance(v, str) else self.python_to_expr(v, a))
        return Call(_dt.handle, name, tuple(args), span=self.span(node))

    call_tvm_fill_fragment = call_tvm_load_matrix_sync = call_tvm_store_matrix_sync = call_wmma_builtin
    call_tvm_mma_sync = call_tvm_bmma_sync = call_wmma_builtin

    def call_address_of(self, node):
        """`T.address_of(A[i, j])`: a handle to one element (TVM's tir.address_of)."""
        if len(node.args) != 1 or node.keywords:
            raise self.error(node, "T.address_of takes one buffer element", "e.g. T.address_of(A[i, 0])")
        load = self.eval_expr(node.args[0])
        if not isinstance(load, BufferLoad) or load.dtype.lanes != 1:
            raise self.error(node.args[0], f"T.address_of needs one buffer element, got {_describe(load)}",
                             "e.g. T.address_of(A[i, 0])")
        return Call(_dt.handle, "address_of", (load,), span=self.span(node))

    def call_Ramp(self, node):
        if len(node.args) != 3:
            raise self.error(node, "T.Ramp takes (base, stride, lanes)")
        base = self.to_index(self.eval_expr(node.args[0]), node.args[0])
        stride = self.coerce(self.eval_expr(node.args[1]), base.dtype, node.args[1], "the stride")
        lanes = self.eval_expr(node.args[2])
        if not isinstance(lanes, int) or lanes < 2:
            raise self.error(node.args[2], "lanes must be an integer constant >= 2")
        return Ramp(base, stride, lanes, span=self.span(node))

    def call_Broadcast(self, node):
        if len(node.args) != 2:
            raise self.error(node, "T.Broadcast takes (value, lanes)")
        value = self.python_to_expr(self.eval_expr(node.args[0]), node.args[0])
        lanes = self.eval_expr(node.args[1])
        if not isinstance(lanes, int) or lanes < 2:
            raise self.error(node.args[1], "lanes must be an integer constant >= 2")
        return Broadcast(value, lanes, span=self.span(node))

    # small helpers --------------------------------------------------------------------------
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

    def expr_Dict(self, node: ast.Dict):
        return {self.eval_expr(k): self.eval_expr(v) for k, v in zip(node.keys, node.values)}

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


def _text(e) -> str:
    from .printer import message_text

    return message_text(e) if isinstance(e, PrimExpr) else str(e)


def _simplify(e: PrimExpr) -> PrimExpr:
    from ..arith import simplify

    return simplify(e)


def _is_np_int(value) -> bool:
    return hasattr(value, "dtype") and getattr(getattr(value, "dtype", None), "kind", "") in "iu" \
        and not isinstance(value, (PrimExpr, Buffer)) and getattr(value, "ndim", 1) == 0


def _int_limits(dt: DataType) -> tuple[int, int]:
    if dt.is_uint:
        return 0, 2 ** dt.bits - 1
    return -(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1) - 1


def _describe(value) -> str:
    if isinstance(value, _View):
        return f"the view {value.name} of {value.parent.name}"
    if isinstance(value, _HandleParam):
        return f"the T.handle parameter {value.name}"
    if isinstance(value, Buffer):
        return f"the buffer {value.name}"
    if isinstance(value, Var):
        return f"the variable {value.name}"
    if isinstance(value, PrimExpr):
        return f"a {value.dtype} expression"
    if isinstance(value, PrimFunc):
        return f"the prim_func {value.name}"
    return f"{type(value).__name__} {value!r}"[:80]


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


# entry points ------------------------------------------------------------------------------------

def _find_function(tree: ast.Module, src: _Source, what: str) -> ast.FunctionDef:
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    others = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.Import, ast.ImportFrom))
              and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    if len(funcs) != 1 or others:
        node = (others or funcs[1:] or [tree.body[0] if tree.body else None])[0]
        line = getattr(node, "lineno", 1)
        text = src.lines[line - 1] if 0 < line <= len(src.lines) else None
        raise ScriptError(f"{what} must hold exactly one function definition",
                          Span(src.file, line + src.line_offset, 0, None, text),
                          "write one @T.prim_func def at top level")
    return funcs[0]


def _run(tree_fn: ast.FunctionDef, src: _Source, closure: dict) -> PrimFunc | ScriptError:
    """The parsed function, or the ScriptError to raise (entry points raise it, so that the
    traceback the user sees ends at their own code, not inside the parser)."""
    from ..deep import DEEP_LIMIT, run_deep

    parser = Parser(src, closure)
    try:
        return run_deep(lambda: Parser(src, closure).parse_function(tree_fn))
    except ScriptError as err:
        return err.with_traceback(None)
    except RecursionError:
        return ScriptError(f"the function is nested too deeply to parse (more than about {DEEP_LIMIT} levels)",
                           parser.span(tree_fn))


def parse(source, extra_vars: dict[str, Any] | None = None) -> PrimFunc:
    """Parse the source of one decorated function (a string), or a Python function object.

    `T` is predefined; `extra_vars` adds names the script may refer to.
    """
    if callable(source) and not isinstance(source, str):
        return parse_function(source)
    if not isinstance(source, str):
        raise TypeError(f"tdsl.parse takes script text or a function, not {type(source).__name__}")
    text = textwrap.dedent(source)
    src = _Source(text.splitlines(), "<tdsl script>")
    from ..deep import run_deep

    try:
        tree = run_deep(lambda: ast.parse(text))
    except RecursionError:
        raise ScriptError("the function is nested too deeply to parse",
                          Span("<tdsl script>", 1, 0, None, None)).with_traceback(None) from None
    except SyntaxError as exc:
        raise ScriptError(f"invalid Python syntax: {exc.msg}",
                          Span("<tdsl script>", exc.lineno or 1, max((exc.offset or 1) - 1, 0), None,
                               exc.text)).with_traceback(None) from None
    fn = _find_function(tree, src, "tdsl.parse's text")
    from . import T as T_module

    closure = {"T": T_module}
    closure.update(extra_vars or {})
    result = _run(fn, src, closure)
    if isinstance(result, ScriptError):
        raise result
    return result


def parse_function(fn, scope: dict[str, Any] | None = None) -> PrimFunc:
    """The work of the @T.prim_func decorator; `scope` holds the defining scope's local names."""
    result = parse_function_or_error(fn, scope)
    if isinstance(result, ScriptError):
        raise result
    return result


def parse_function_or_error(fn, scope: dict[str, Any] | None = None) -> PrimFunc | ScriptError:
    if isinstance(fn, PrimFunc):
        return fn
    try:
        lines, first = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except (OSError, TypeError) as exc:
        return ScriptError(f"cannot read the source of {getattr(fn, '__name__', fn)!r}: {exc}",
                           None, "define prim_funcs in a file or notebook cell, or use tdsl.parse(text)")
    raw = "".join(lines)
    text = textwrap.dedent(raw)
    col = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    src = _Source(text.splitlines(), file, first - 1, col)
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:  # pragma: no cover - Python already compiled it
        return ScriptError(exc.msg, Span(file, first + (exc.lineno or 1) - 1, 0, None, exc.text))
    fn_node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    closure = dict(fn.__globals__)
    if scope is not None and scope is not fn.__globals__:
        closure.update(scope)
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                closure[name] = cell.cell_contents
            except ValueError:
                pass
    from . import T as T_module

    closure.setdefault("T", T_module)
    return _run(fn_node, src, closure)


__all__ = ["Parser", "math", "parse", "parse_function"]
