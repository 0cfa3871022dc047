"""Which buffer parameters a caller may leave out (so that the kernel allocates them).

An output can be left out only when the function writes it before it reads it: a buffer that the
first block touching it reads without a `T.init` (an accumulation such as `y[i] += ...`, or an
in-place update) needs the caller's values, and allocating it would silently compute on garbage.
"""
from __future__ import annotations

from .buffer import Buffer
from .expr import BufferLoad
from .functor import post_order_visit
from .stmt import BlockRealize, BufferStore, PrimFunc, Stmt


def _loads(stmt: Stmt | None) -> set:
    found: set = set()
    if stmt is not None:
        post_order_visit(stmt, lambda n: found.add(n.buffer) if isinstance(n, BufferLoad) else None)
    return found


def _first_touch(stmt, buffer: Buffer):
    """The first block (program order) that reads or writes `buffer`, or None."""
    if isinstance(stmt, BlockRealize):
        block = stmt.block
        inner = _first_touch(block.body, buffer) if block.name == "root" else None
        if inner is not None:
            return inner
        if block.name != "root" and any(r.buffer is buffer for r in (*block.reads, *block.writes)):
            return block
        return None
    for name in ("seq", "body", "then_case", "else_case"):
        child = getattr(stmt, name, None)
        children = child if isinstance(child, tuple) else (child,)
        for c in children:
            if isinstance(c, Stmt):
                found = _first_touch(c, buffer)
                if found is not None:
                    return found
    return None


def read_before_written(func: PrimFunc, buffer: Buffer) -> str | None:
    """Why the caller must supply `buffer` (e.g. 'block "B" accumulates into it without T.init'),
    or None when the function writes it before reading it."""
    block = _first_touch(func.body, buffer)
    if block is None:
        # no block touches it (lowered IR has none): which store comes first is not tracked here
        return None
    while True:
        if block.init is not None and _stores(block.init, buffer):
            return None
        inner = _first_touch(block.body, buffer)  # a nested block (e.g. after blockize) decides
        if inner is None:
            break
        block = inner
    if buffer in _loads(block.body):
        return f'block "{block.name}" reads it before writing it (no T.init)'
    return None


def _stores(stmt: Stmt, buffer: Buffer) -> bool:
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, BufferStore) and n.buffer is buffer else None)
    return bool(found)
