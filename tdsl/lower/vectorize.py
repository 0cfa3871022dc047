"""`vectorize`: rewrite `vectorized` loops into Ramp/Broadcast vector code, or leave them serial
with a note saying why."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..ir import (MATH_CALLS, Allocate, Binary, Broadcast, BufferLoad, BufferStore, Call, Cast, Evaluate, FloatImm,
                  For, IfThenElse, IntImm, IRMutator, LetStmt, Not, PrimExpr, PrimFunc, Ramp, Select, SeqStmt, Stmt,
                  Var, collect)
from ._util import add_notes, arith, broadcast, cast_to, fresh_copy, same_expr, seq
from .blocks import BLOCKS_ANNOTATION

MAX_LANES = 64


class NotVectorizable(Exception):
    """Why a loop body cannot be rewritten to vector form."""


def _has_load(e: PrimExpr) -> bool:
    return bool(collect(e, BufferLoad))


class _Lanes:
    """Rewrites one copy of a loop body with the loop variable standing for `lanes` lanes."""

    def __init__(self, var: Var, base: PrimExpr, lanes: int):
        self.var = var
        self.lanes = lanes
        self.env: dict[Var, PrimExpr] = {var: Ramp(base, IntImm(1, base.dtype), lanes)}

    # expressions -------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> PrimExpr:
        if e.dtype.lanes != 1:
            raise NotVectorizable(f"its body already has vector values ({e.dtype})")
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            raise NotVectorizable(f"it contains a {type(e).__name__} expression")
        return method(e)

    def expr_Var(self, e: Var) -> PrimExpr:
        return self.env.get(e, e)

    def expr_IntImm(self, e: IntImm) -> PrimExpr:
        return e

    expr_FloatImm = expr_IntImm

    def expr_Binary(self, e: Binary) -> PrimExpr:
        a, b = self.expr(e.a), self.expr(e.b)
        if a.dtype.lanes == 1 and b.dtype.lanes == 1:
            return e if a is e.a and b is e.b else Binary(e.op, a, b)
        if e.op in ("add", "sub", "mul") and a.dtype.is_integer:
            return arith(e.op, a, b)
        return Binary(e.op, broadcast(a, self.lanes), broadcast(b, self.lanes))

    def expr_Not(self, e: Not) -> PrimExpr:
        a = self.expr(e.a)
        return e if a is e.a else Not(a)

    def expr_Select(self, e: Select) -> PrimExpr:
        parts = [self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)]
        if all(p.dtype.lanes == 1 for p in parts):
            return Select(*parts)
        return Select(*(broadcast(p, self.lanes) for p in parts))

    def expr_Cast(self, e: Cast) -> PrimExpr:
        v = self.expr(e.value)
        if v.dtype.lanes == 1:
            return e if v is e.value else Cast(e.dtype, v)
        if isinstance(v, Ramp) and e.dtype.is_integer:
            return Ramp(cast_to(e.dtype, v.base), cast_to(e.dtype, v.stride), v.lanes)
        if isinstance(v, Broadcast):
            return Broadcast(cast_to(e.dtype, v.value), v.lanes)
        return Cast(e.dtype.with_lanes(self.lanes), v)

    def expr_Call(self, e: Call) -> PrimExpr:
        if e.op == "if_then_else":
            return self._if_then_else(e)
        if e.op not in MATH_CALLS:
            raise NotVectorizable(f"it calls {e.op!r}, which has no vector form")
        args = [self.expr(a) for a in e.args]
        if all(a.dtype.lanes == 1 for a in args):
            return Call(e.dtype, e.op, tuple(args))
        return Call(e.dtype.with_lanes(self.lanes), e.op, tuple(broadcast(a, self.lanes) for a in args))

    def _if_then_else(self, e: Call) -> PrimExpr:
        cond, t, f = (self.expr(a) for a in e.args)
        if all(a.dtype.lanes == 1 for a in (cond, t, f)):
            return Call(e.dtype, e.op, (cond, t, f))
        if cond.dtype.lanes == 1:
            # lane-uniform condition: still lazy, choosing between two vectors
            return Call(e.dtype.with_lanes(self.lanes), e.op, (cond, broadcast(t, self.lanes),
                                                               broadcast(f, self.lanes)))
        if _has_load(e.args[1]) or _has_load(e.args[2]):
            raise NotVectorizable("T.if_then_else with a condition that differs between lanes guards a load "
                                  "(evaluating every lane could read out of bounds)")
        return Select(cond, broadcast(t, self.lanes), broadcast(f, self.lanes))

    def expr_BufferLoad(self, e: BufferLoad) -> PrimExpr:
        if e.buffer.dtype.lanes != 1:
            raise NotVectorizable(f"buffer {e.buffer.name!r} has a vector dtype")
        (index,) = e.indices
        idx = self.expr(index)
        if idx.dtype.lanes == 1:
            return e if idx is index else BufferLoad(e.buffer, (idx,))
        self._check_contiguous(idx, f"the load from {e.buffer.name!r}")
        return BufferLoad(e.buffer, (idx,))

    def _check_contiguous(self, idx: PrimExpr, what: str) -> None:
        if not (isinstance(idx, Ramp) and isinstance(idx.stride, IntImm) and idx.stride.value == 1):
            raise NotVectorizable(f"{what} is not contiguous in {self.var.name}")

    # statements -------------------------------------------------------------------
    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, BufferStore):
            return self._store(s)
        if isinstance(s, SeqStmt):
            return SeqStmt(tuple(self.stmt(x) for x in s.seq))
        if isinstance(s, LetStmt):
            value = self.expr(s.value)
            var = Var(s.var.name, value.dtype, span=s.var.span)
            self.env[s.var] = var
            return LetStmt(var, value, self.stmt(s.body))
        if isinstance(s, IfThenElse):
            cond = self.expr(s.condition)
            if cond.dtype.lanes != 1:
                raise NotVectorizable(f"an `if` condition differs between the lanes of {self.var.name}")
            else_case = None if s.else_case is None else self.stmt(s.else_case)
            return IfThenElse(cond, self.stmt(s.then_case), else_case)
        if isinstance(s, Evaluate) and isinstance(s.value, IntImm):
            return s
        if isinstance(s, For):
            raise NotVectorizable(f"its body contains the loop {s.loop_var.name}")
        if isinstance(s, Allocate):
            raise NotVectorizable(f"its body allocates {s.buffer.name!r}")
        raise NotVectorizable(f"its body contains a {type(s).__name__} statement")

    def _store(self, s: BufferStore) -> Stmt:
        if s.buffer.dtype.lanes != 1:
            raise NotVectorizable(f"buffer {s.buffer.name!r} has a vector dtype")
        (index,) = s.indices
        idx = self.expr(index)
        value = self.expr(s.value)
        if idx.dtype.lanes == 1:
            raise NotVectorizable(f"every iteration stores into the same element of {s.buffer.name!r} "
                                  "(a reduction into a loop-invariant location)")
        self._check_contiguous(idx, f"the store into {s.buffer.name!r}")
        return BufferStore(s.buffer, broadcast(value, self.lanes), (idx,))


def _check_independent(stmt: Stmt, var: Var) -> None:
    """Lanes run at once, so every access to a written buffer must touch the lane's own element."""
    accesses: dict = {}
    for node in collect(stmt, (BufferStore, BufferLoad)):
        accesses.setdefault(node.buffer, []).append(node)
    for buf, nodes in accesses.items():
        if not any(isinstance(n, BufferStore) for n in nodes):
            continue
        first = nodes[0].indices[0]
        if not all(same_expr(n.indices[0], first) for n in nodes[1:]):
            raise NotVectorizable(f"its iterations depend on each other through buffer {buf.name!r} "
                                  f"(it is written and read at different places in {var.name})")


def _pieces(extent: int, max_lanes: int) -> list[tuple[int, int, int]]:
    """(offset, lanes, count) chunks covering [0, extent): `count` chunks of `lanes` from
    `offset`; lane counts are powers of two <= max_lanes."""
    width = 1
    while width * 2 <= min(extent, max_lanes):
        width *= 2
    out = [(0, width, extent // width)]
    offset, rest = (extent // width) * width, extent % width
    piece = width // 2
    while rest:
        if rest >= piece:
            out.append((offset, piece, 1))
            offset, rest = offset + piece, rest - piece
        piece //= 2
    return out


def _vector_body(loop: For, base: PrimExpr, lanes: int) -> Stmt:
    if lanes == 1:
        return fresh_copy(loop.body, {loop.loop_var: base})
    body = _Lanes(loop.loop_var, base, lanes).stmt(loop.body)
    _check_independent(body, loop.loop_var)
    return body


def vectorize_loop(loop: For, max_lanes: int = MAX_LANES) -> Stmt:
    """The vector form of one `vectorized` loop; raises NotVectorizable."""
    if not isinstance(loop.extent, IntImm):
        raise NotVectorizable("its extent is not a constant")
    extent = loop.extent.value
    if extent <= 0:
        return seq()
    parts: list[Stmt] = []
    for offset, lanes, count in _pieces(extent, max_lanes):
        start = arith("add", loop.min, IntImm(offset, loop.min.dtype))
        if count == 1:
            parts.append(_vector_body(loop, start, lanes))
            continue
        chunk = Var(loop.loop_var.name + "_c", loop.loop_var.dtype)
        base = arith("add", start, arith("mul", chunk, IntImm(lanes, chunk.dtype)))
        parts.append(For(chunk, IntImm(0, chunk.dtype), IntImm(count, chunk.dtype), "serial",
                         _vector_body(loop, base, lanes), annotations=loop.annotations))
    return seq(*parts)


class _Vectorizer(IRMutator):
    def __init__(self, max_lanes: int):
        self.max_lanes = max_lanes
        self.notes: list[str] = []

    def visit_For(self, loop: For) -> Stmt:
        body = self.visit(loop.body)
        if body is not loop.body:
            loop = replace(loop, body=body)
        if loop.kind != "vectorized":
            return loop
        blocks = dict(loop.annotations).get(BLOCKS_ANNOTATION)
        loop = replace(loop, annotations=tuple(kv for kv in loop.annotations if kv[0] != BLOCKS_ANNOTATION))
        try:
            return vectorize_loop(loop, self.max_lanes)
        except NotVectorizable as exc:
            where = f" in block {blocks}" if blocks else ""
            self.notes.append(f"loop {loop.loop_var.name}{where} was not vectorized: {exc}")
            return replace(loop, kind="serial")


def make_vectorize(max_lanes: int = MAX_LANES) -> Callable[[PrimFunc], PrimFunc]:
    """The vectorize pass with vectors of at most `max_lanes` lanes."""

    def vectorize(func: PrimFunc) -> PrimFunc:
        """`vectorized` loops -> Ramp/Broadcast vector code, or serial loops with a note."""
        vectorizer = _Vectorizer(max_lanes)
        body = vectorizer.visit(func.body)
        return add_notes(func.with_body(body), vectorizer.notes)

    return vectorize


vectorize = make_vectorize()
