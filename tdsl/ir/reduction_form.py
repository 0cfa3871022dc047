"""Simple reductions: which reduction blocks a threadIdx loop may drive (TVM's cross-thread reductions).

`bind(loop, "threadIdx.x")` of a loop that drives reduction iterators is accepted when every
block under the loop that it drives that way is a *simple reduction*: its body is one store
``B[idx] = combine(B[idx], value)`` (combine: ``+``, ``*``, ``T.max``, ``T.min``; the old value
may be either operand), ``idx`` depends on no reduction iterator, and its init (if any) is one
store to the same element. On the CPU the bound loop is an ordinary loop; the CUDA lowering
(`tdsl.lower.cross_thread`) turns each such block into an in-thread partial reduction,
an all-reduce across the bound threads (warp shuffles, then shared memory across warps), and a
store by one thread.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import Binary, Block, BufferLoad, BufferStore, PrimExpr, free_vars
from .structural import same_expr

COMBINERS = ("add", "mul", "max", "min")


@dataclass(frozen=True)
class SimpleReduction:
    """``store.buffer[store.indices] = op(old, value)``; `init` the init value (or None)."""

    store: BufferStore
    op: str
    value: PrimExpr
    init: PrimExpr | None


def simple_reduction(block: Block) -> SimpleReduction | None:
    """The block as a simple reduction (see the module docs), else None."""
    body = block.body
    if not isinstance(body, BufferStore) or not isinstance(body.value, Binary) or body.value.op not in COMBINERS:
        return None
    reduce_vars = {iv.var for iv in block.iter_vars if iv.kind == "R"}
    if not reduce_vars:
        return None
    if any(free_vars(i) & reduce_vars for i in body.indices):
        return None

    def is_old(e: PrimExpr) -> bool:
        return (isinstance(e, BufferLoad) and e.buffer is body.buffer and len(e.indices) == len(body.indices)
                and all(same_expr(a, b) for a, b in zip(e.indices, body.indices)))

    comb = body.value
    if is_old(comb.a) and not _loads(comb.b, body.buffer):
        value = comb.b
    elif is_old(comb.b) and not _loads(comb.a, body.buffer):
        value = comb.a
    else:
        return None
    init = None
    if block.init is not None:
        i = block.init
        if not (isinstance(i, BufferStore) and i.buffer is body.buffer
                and all(same_expr(a, b) for a, b in zip(i.indices, body.indices))):
            return None
        if _loads(i.value, body.buffer):
            return None
        init = i.value
    return SimpleReduction(body, comb.op, value, init)



def _loads(e: PrimExpr, buf) -> bool:
    from . import collect

    return any(x.buffer is buf for x in collect(e, BufferLoad))
