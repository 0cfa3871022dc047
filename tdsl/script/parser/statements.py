"""Statements: let bindings, stores, if, for loops (range, T.grid, T loop kinds), with, and the
refusals of Python statements tdsl does not have."""
from __future__ import annotations

import ast

from ...dtypes import DataType
from ...ir.buffer import Buffer
from ...ir.expr import BufferLoad, Cast, PrimExpr, Var, const
from ...ir.stmt import THREAD_TAGS, Allocate, BufferStore, Evaluate, For, IfThenElse, LetStmt, SeqStmt, Stmt, flat_seq
from ..builtins import ABSENT, absent_message
from .common import _BINOPS, _LOOP_KINDS, _simplify, _stmt_word
from .core import ParserCore
from .frames import _View


class StatementParser(ParserCore):
    def parse_stmts(self, nodes: list[ast.stmt], start: int = 0) -> Stmt:
        """`nodes[start:]` as one statement; a let binding or T.allocate scopes the statements after
        it (read from the same list, never a copy of its tail: linear in the statements)."""
        out: list[Stmt] = []
        k = start
        while k < len(nodes):
            node = nodes[k]
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and self._is_call_to_expr(node.value, "meta_var"):
                self.push()
                self.bind_meta_var(node)
                body = self.parse_stmts(nodes, k + 1)
                self.pop()
                out.append(body)
                break
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
                    body = self.parse_stmts(nodes, k + 1)
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
                body = self.parse_stmts(nodes, k + 1)
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
                body = self.parse_stmts(nodes, k + 1)
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

    def bind_meta_var(self, node: ast.Assign) -> None:
        """`a, b = T.meta_var(index_map(vi, vj))` (TVMScript): the names stand for the values the
        Python call computes from tdsl expressions; nothing is emitted."""
        call = node.value
        assert isinstance(call, ast.Call)
        if len(call.args) != 1 or call.keywords:
            raise self.error(call, "T.meta_var takes one value", "e.g. a, b = T.meta_var(index_map(vi, vj))")
        self.meta_depth = getattr(self, "meta_depth", 0) + 1
        try:
            value = self.eval_expr(call.args[0])
        finally:
            self.meta_depth -= 1
        target = node.targets[0]
        if isinstance(target, ast.Name):
            self.define(target.id, value)
            return
        names = target.elts if isinstance(target, (ast.Tuple, ast.List)) else None
        if names is None or not all(isinstance(n, ast.Name) for n in names):
            raise self.error(target, "T.meta_var binds a name or a tuple of names", "e.g. a, b = T.meta_var(...)")
        if not isinstance(value, (tuple, list)) or len(value) != len(names):
            got = f"{len(value)} values" if isinstance(value, (tuple, list)) else "one value"
            raise self.error(call, f"T.meta_var gives {got} to unpack into {len(names)} names",
                             "the Python function must return one value per name")
        for n, v in zip(names, value):
            self.define(n.id, v)

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
        call = node.value
        if isinstance(call, ast.Call) and self._t_name(call.func) in ABSENT:
            raise self.error(call.func, *absent_message(self._t_name(call.func)))
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
        want = buf.dtype.with_lanes(lanes * buf.dtype.lanes)
        if value.dtype != want and value.dtype.is_integer and want.is_float and value.dtype.lanes == want.lanes:
            # TVM's parser casts a stored value to the buffer's type; tdsl does so only from an
            # integer to a float (a number, not a bit pattern); a cast that can cut a value off
            # (float -> int, a narrower type) stays refused (docs/script.md, differences)
            value = Cast(want, value, span=self.span(node.value if hasattr(node, "value") else node))
        if value.dtype != want:
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
