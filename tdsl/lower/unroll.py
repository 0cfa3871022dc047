"""`unroll`: fully unroll `unrolled` loops of small constant extent."""
from __future__ import annotations

from ..ir import For, IntImm, PrimFunc, Stmt
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


def unroll(func: PrimFunc) -> PrimFunc:
    """`unrolled` loops with a constant extent <= 64 become copies of their body, the loop
    variable replaced by min, min + 1, ...; every variable defined inside gets a fresh copy."""
    return func.with_body(_Unroller().visit(func.body))
