"""`simplify` (tdsl.arith on every integer expression) and `remove_no_op`."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..ir import (
    Allocate,
    Buffer,
    BufferLoad,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    IntImm,
    IRMutator,
    IRVisitor,
    LetStmt,
    Not,
    PrimExpr,
    PrimFunc,
    Range,
    SeqStmt,
    Stmt,
    Var,
    as_expr,
    substitute,
    uses_var,
)
from ._util import is_false, is_nop, is_true, nop, same_expr, seq


def _arith_simplify() -> Callable | None:
    """tdsl.arith.simplify, or None while that module is not available."""
    try:
        from ..arith import simplify
    except ImportError:
        return None
    return simplify


def _arith_analyzer() -> Callable | None:
    """tdsl.arith's analyzer factory (ranges -> memoizing Analyzer), or None without tdsl.arith."""
    try:
        from ..arith.simplify import analyzer
    except ImportError:
        return None
    return analyzer


def simplify_index(e: PrimExpr, ranges: dict[Var, Range] | None = None) -> PrimExpr:
    """Simplify a scalar integer expression when tdsl.arith is available, else return it."""
    simplify = _arith_simplify()
    if simplify is None or e.dtype.lanes != 1 or not (e.dtype.is_integer or e.dtype.is_bool):
        return e
    return simplify(e, ranges or None)


class _Simplifier(IRMutator):
    """Simplifies each maximal scalar integer/bool expression, knowing the enclosing loop ranges.
    Float expressions are only simplified inside (their integer indices): rewriting float
    arithmetic could change rounding or signed zeros."""

    def __init__(self, make_analyzer: Callable):
        self.make_analyzer = make_analyzer
        self.ranges: dict[Var, Range] = {}
        # one analyzer per set of loop ranges (made at its first use), not one per expression:
        # its memo tables then serve every expression of the scope (same results, as
        # arith.simplify(e, ranges) is Analyzer(ranges).simplify(e)); ~2x faster on the GEMM
        self.scoped = None

    def visit(self, node):
        if isinstance(node, PrimExpr) and node.dtype.lanes == 1 and (node.dtype.is_integer or node.dtype.is_bool):
            if self.scoped is None:
                self.scoped = self.make_analyzer(dict(self.ranges) or None)
            return self.scoped.simplify(as_expr(node))
        return super().visit(node)

    def visit_For(self, loop: For) -> Stmt:
        lo, ext = self.visit(loop.min), self.visit(loop.extent)
        outer, self.scoped = self.scoped, None
        self.ranges[loop.loop_var] = Range(lo, ext)
        body = self.visit(loop.body)
        del self.ranges[loop.loop_var]
        self.scoped = outer
        if lo is loop.min and ext is loop.extent and body is loop.body:
            return loop
        return replace(loop, min=lo, extent=ext, body=body)

    def visit_LetStmt(self, op: LetStmt) -> Stmt:
        value, body = self.visit(op.value), self.visit(op.body)
        return op if value is op.value and body is op.body else replace(op, value=value, body=body)


def simplify(func: PrimFunc) -> PrimFunc:
    """Run tdsl.arith.simplify on every integer and boolean expression (a no-op while
    tdsl.arith is not available)."""
    make_analyzer = _arith_analyzer()
    if make_analyzer is None:
        return func
    return func.with_body(_Simplifier(make_analyzer).visit(func.body))


class _Found(Exception):
    """Ends a search at its first hit."""


class _BufferFinder(IRVisitor):
    """Raises _Found at the first reference to `buf`: an allocation's first use is usually its
    body's first statement, so the search rarely walks the whole body (it did, once per
    allocation, in remove_no_op: ~5 ms of the GEMM's build)."""

    def __init__(self, buf: Buffer):
        self.buf = buf

    def visit_buffer(self, b: Buffer) -> None:
        if b is self.buf:
            raise _Found


def _uses_buffer(stmt: Stmt, buf: Buffer) -> bool:
    try:
        _BufferFinder(buf).visit(stmt)
    except _Found:
        return True
    return False


class _NoOpRemover(IRMutator):
    def visit_SeqStmt(self, op: SeqStmt) -> Stmt:
        return seq(*(self.visit(s) for s in op.seq))

    def visit_Evaluate(self, op: Evaluate) -> Stmt:
        return nop() if isinstance(op.value, IntImm) else op

    def visit_For(self, loop: For) -> Stmt:
        body = self.visit(loop.body)
        ext = loop.extent
        if is_nop(body) or (isinstance(ext, IntImm) and ext.value <= 0):
            return nop()
        # a one-trip loop is its body, except thread bindings, which set launch dimensions
        if isinstance(ext, IntImm) and ext.value == 1 and loop.kind != "thread_binding":
            return substitute(body, {loop.loop_var: loop.min}, buffers=True)
        return loop if body is loop.body else replace(loop, body=body)

    def visit_IfThenElse(self, op: IfThenElse) -> Stmt:
        then_case = self.visit(op.then_case)
        else_case = None if op.else_case is None else self.visit(op.else_case)
        if is_nop(else_case):
            else_case = None
        if is_true(op.condition):
            return then_case
        if is_false(op.condition):
            return else_case if else_case is not None else nop()
        if is_nop(then_case):
            return nop() if else_case is None else IfThenElse(Not(op.condition), else_case, span=op.span)
        if then_case is op.then_case and else_case is op.else_case:
            return op
        return replace(op, then_case=then_case, else_case=else_case)

    def visit_LetStmt(self, op: LetStmt) -> Stmt:
        body = self.visit(op.body)
        if not uses_var(body, op.var):
            return body
        return op if body is op.body else replace(op, body=body)

    def visit_Allocate(self, op: Allocate) -> Stmt:
        body = self.visit(op.body)
        if is_nop(body) or not _uses_buffer(body, op.buffer):
            return body
        return op if body is op.body else replace(op, body=body)

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        # X[i] = X[i] stores what is already there
        v = op.value
        if (isinstance(v, BufferLoad) and v.buffer is op.buffer and len(v.indices) == len(op.indices)
                and all(same_expr(a, b) for a, b in zip(v.indices, op.indices))):
            return nop()
        return op


def remove_no_op(func: PrimFunc) -> PrimFunc:
    """Drop statements that do nothing: empty or zero-trip loops, constant-false branches,
    unused lets and allocations, `X[i] = X[i]`; one-trip loops become their body."""
    return func.with_body(_NoOpRemover().visit(func.body))
