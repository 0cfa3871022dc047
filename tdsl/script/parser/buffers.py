"""Buffer declarations: `T.Buffer` annotations, `T.match_buffer` of a handle, `T.alloc_buffer`,
`T.allocate`, and the shapes and dimensions they take."""
from __future__ import annotations

import ast

from ... import dtypes as _dt
from ...ir.buffer import Buffer
from ...ir.expr import IntImm, PrimExpr, Var
from ..builtins import absent_message
from .core import ParserCore


class BufferParser(ParserCore):
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
                                 'a dimension is an int, a name such as "n", or an expression such as "n * 2"') from None
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
