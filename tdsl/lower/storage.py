"""`storage` (CPU): choose where each intermediate buffer lives, and allocate heap buffers once
per parallel task instead of once per serial iteration."""
from __future__ import annotations

from ..ir import (
    Allocate,
    Buffer,
    For,
    IfThenElse,
    IntImm,
    LetStmt,
    PrimFunc,
    SeqStmt,
    Stmt,
    Var,
    replace_buffers,
    uses_var,
)
from ..ir.functor import replace_fields as replace

LOCAL_LIMIT_BYTES = 16 * 1024
"""Intermediates of constant size up to this many bytes live on the stack (scope `local`);
larger or symbolic ones on the heap (scope `global`)."""


def _nbytes(buf: Buffer) -> int | None:
    size = 1
    for extent in buf.shape:
        if not isinstance(extent, IntImm):
            return None
        size *= extent.value
    return size * buf.dtype.itemsize * buf.dtype.lanes


def cpu_scope(buf: Buffer) -> str:
    """`local` (stack) for small constant-size buffers of any scope, `global` (heap) otherwise.
    GPU scopes (`shared`, `local`) mean nothing on a CPU beyond this."""
    nbytes = _nbytes(buf)
    return "local" if nbytes is not None and nbytes <= LOCAL_LIMIT_BYTES else "global"


def _rescope(stmt: Stmt) -> Stmt:
    """Every Allocate'd buffer with its CPU scope. One walk replaces them all, unless a buffer
    is allocated twice (each allocation then gets its own copy, as `_rescope_each` makes)."""
    bmap: dict[Buffer, Buffer] = {}
    allocated: set[Buffer] = set()
    if not _plan_scopes(stmt, bmap, allocated):
        return _rescope_each(stmt)
    return replace_buffers(stmt, bmap) if bmap else stmt


def _plan_scopes(stmt: Stmt, bmap: dict[Buffer, Buffer], allocated: set[Buffer]) -> bool:
    """Map each allocated buffer whose scope changes to its rescoped copy (allocations live
    in the statement structure: allocations, sequences, branches, loops and lets); False when
    a buffer is allocated twice."""
    if isinstance(stmt, Allocate):
        if stmt.buffer in allocated:
            return False
        allocated.add(stmt.buffer)
        scope = cpu_scope(stmt.buffer)
        if scope != stmt.buffer.scope:
            bmap[stmt.buffer] = stmt.buffer.with_(scope=scope)
        return _plan_scopes(stmt.body, bmap, allocated)
    if isinstance(stmt, SeqStmt):
        return all(_plan_scopes(s, bmap, allocated) for s in stmt.seq)
    if isinstance(stmt, IfThenElse):
        return (_plan_scopes(stmt.then_case, bmap, allocated)
                and (stmt.else_case is None or _plan_scopes(stmt.else_case, bmap, allocated)))
    if isinstance(stmt, (For, LetStmt)):
        return _plan_scopes(stmt.body, bmap, allocated)
    return True


def _rescope_each(stmt: Stmt) -> Stmt:
    """`_rescope` one allocation at a time (a buffer allocated twice gets two copies)."""
    if isinstance(stmt, Allocate):
        body = _rescope_each(stmt.body)
        scope = cpu_scope(stmt.buffer)
        if scope == stmt.buffer.scope:
            return stmt if body is stmt.body else replace(stmt, body=body)
        buf = stmt.buffer.with_(scope=scope)
        return Allocate(buf, replace_buffers(body, {stmt.buffer: buf}), span=stmt.span)
    if isinstance(stmt, SeqStmt):
        seq = tuple(_rescope_each(s) for s in stmt.seq)
        return stmt if all(a is b for a, b in zip(seq, stmt.seq)) else replace(stmt, seq=seq)
    if isinstance(stmt, IfThenElse):
        then_case = _rescope_each(stmt.then_case)
        else_case = None if stmt.else_case is None else _rescope_each(stmt.else_case)
        return replace(stmt, then_case=then_case, else_case=else_case)
    if isinstance(stmt, (For, LetStmt)):
        body = _rescope_each(stmt.body)
        return stmt if body is stmt.body else replace(stmt, body=body)
    return stmt


def _wrap(stmt: Stmt, bufs: list[Buffer]) -> Stmt:
    for buf in reversed(bufs):
        stmt = Allocate(buf, stmt)
    return stmt


def _split(bufs: list[Buffer], var: Var) -> tuple[list[Buffer], list[Buffer]]:
    """(buffers whose size uses `var`, the others)."""
    inner = [b for b in bufs if any(uses_var(s, var) for s in b.shape)]
    return inner, [b for b in bufs if b not in inner]


def _hoist(stmt: Stmt) -> tuple[Stmt, list[Buffer]]:
    """Lift heap allocations out of serial loops and branches; returns the statement without
    them and the buffers still to allocate further out."""
    if isinstance(stmt, Allocate):
        body, up = _hoist(stmt.body)
        if stmt.buffer.scope == "global":
            return body, [stmt.buffer] + up
        return replace(stmt, body=body), up
    if isinstance(stmt, For):
        body, up = _hoist(stmt.body)
        if stmt.kind in ("parallel", "thread_binding"):
            # each parallel iteration needs its own storage: hoisting further would share it
            return replace(stmt, body=_wrap(body, up)), []
        inner, up = _split(up, stmt.loop_var)
        return replace(stmt, body=_wrap(body, inner)), up
    if isinstance(stmt, LetStmt):
        body, up = _hoist(stmt.body)
        inner, up = _split(up, stmt.var)
        return replace(stmt, body=_wrap(body, inner)), up
    if isinstance(stmt, IfThenElse):
        then_case, up = _hoist(stmt.then_case)
        else_case, up_else = (None, []) if stmt.else_case is None else _hoist(stmt.else_case)
        return replace(stmt, then_case=then_case, else_case=else_case), up + up_else
    if isinstance(stmt, SeqStmt):
        parts, ups = [], []
        for s in stmt.seq:
            part, up = _hoist(s)
            parts.append(part)
            ups.extend(up)
        return replace(stmt, seq=tuple(parts)), ups
    return stmt, []


def storage(func: PrimFunc) -> PrimFunc:
    """CPU storage: small constant-size intermediates (<= 16 KiB) get scope `local` (stack),
    the others `global` (heap, 64-byte aligned by codegen); `shared` becomes one of the two.
    Heap allocations move out of serial loops and branches, up to the nearest enclosing
    parallel loop (whose iterations each keep a private copy) or the function top, unless
    their size depends on a variable bound on the way."""
    body = _rescope(func.body)
    body, up = _hoist(body)
    return func.with_body(_wrap(body, up))
