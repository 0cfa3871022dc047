"""`unroll`: fully unroll `unrolled` loops of small constant extent.

A loop annotated ``pragma_auto_unroll_max_step = N`` (the auto-scheduler's unroll knob, as in
TVM) first marks as `unrolled` every serial loop of constant extent inside it whose iterations,
times those of the serial loops inside it, number at most N (innermost loops first).
"""
from __future__ import annotations

from ..ir import For, IntImm, PrimFunc, Stmt
from ..ir.attrs import AUTO_UNROLL
from ..ir.functor import replace_fields as replace
from ._util import StmtMutator, arith, fresh_copy, seq

MAX_UNROLL = 64
"""Unrolled loops with a constant extent up to this are expanded; longer ones keep kind
`unrolled` so that codegen can ask its compiler to unroll them."""


class _Unroller(StmtMutator):
    def visit_For(self, loop: For) -> Stmt:
        body = self.visit(loop.body)
        ext = loop.extent
        if loop.kind == "unrolled" and isinstance(ext, IntImm) and ext.value <= MAX_UNROLL:
            copies = [fresh_copy(body, {loop.loop_var: arith("add", loop.min, IntImm(k, loop.min.dtype))})
                      for k in range(ext.value)]
            return seq(*copies)
        return loop if body is loop.body else replace(loop, body=body)



def _children(node: Stmt) -> list[Stmt]:
    out = []
    for name in ("body", "seq", "then_case", "else_case", "init", "block"):
        value = getattr(node, name, None)
        if isinstance(value, Stmt):
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(v for v in value if isinstance(v, Stmt))
    return out


def _inner_steps(node: Stmt) -> int | None:
    """The most iterations of the serial loops nested along one path in `node` (itself included;
    1 without loops); None when one of them has a symbolic extent."""
    inner = [_inner_steps(c) for c in _children(node)]
    known = [v for v in inner if v is not None]
    if len(known) < len(inner):
        return None
    below = max(known, default=1)
    if not isinstance(node, For) or node.kind in ("vectorized", "parallel", "thread_binding"):
        return below
    if not isinstance(node.extent, IntImm):
        return None
    return int(node.extent.value) * below


class _AutoUnroll(StmtMutator):
    """Loops inside a `pragma_auto_unroll_max_step` loop whose nest is small enough become `unrolled`."""

    def __init__(self):
        self.limit = 0

    def visit_For(self, loop: For) -> Stmt:
        outer = self.limit
        step = dict(loop.annotations).get(AUTO_UNROLL)
        if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0:
            self.limit = max(self.limit, int(step))
        body = self.visit(loop.body)
        self.limit = outer
        new = loop if body is loop.body else replace(loop, body=body)
        if self.limit and loop.kind == "serial" and isinstance(loop.extent, IntImm) and step is None:
            steps = _inner_steps(new)
            if steps is not None and steps <= self.limit:
                new = replace(new, kind="unrolled")
        return new


def unroll(func: PrimFunc) -> PrimFunc:
    """`unrolled` loops with a constant extent <= 64 become copies of their body, the loop
    variable replaced by min, min + 1, ...; every variable defined inside gets a fresh copy."""
    body = _AutoUnroll().visit(func.body)
    return func.with_body(_Unroller().visit(body))
