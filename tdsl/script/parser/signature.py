"""The function itself: parameters (buffers, scalars, `T.handle`s matched by `T.match_buffer`),
symbolic variables, `T.func_attr`, and TVM's written-out root block."""
from __future__ import annotations

import ast

from ... import dtypes as _dt
from ...dtypes import DataType
from ...ir.buffer import Buffer
from ...ir.expr import Var
from ...ir.stmt import TRUE, Block, BlockRealize, PrimFunc
from .common import _DTYPE_NAMES
from .core import ParserCore
from .frames import _HandleParam


class SignatureParser(ParserCore):
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
