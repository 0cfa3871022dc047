"""Lookup primitives: get_block, get_loops, get_child_blocks, get_producers, get_consumers,
get_output_blocks.

They return the function unchanged with the blocks (by name) or loops (by Var) they found.
"""
from __future__ import annotations

import difflib

from ...ir import Block, BlockRealize, Buffer, For, PrimFunc, Var
from ...ir.tree import block_names, child_realizes, loops_in_scope
from ..errors import schedule_error
from ..tree import ambiguous_block_error, find_block, find_loop


def get_block(func: PrimFunc, name: str) -> tuple[PrimFunc, str]:
    """The block called `name`."""
    if not isinstance(name, str):
        raise schedule_error(func, "get_block", f"a block name is a string, not {type(name).__name__} {name!r}")
    names = block_names(func)
    root = func.root_block
    if name not in names and not (root is not None and root.name == name):
        listed = ", ".join(f'"{n}"' for n in names) or "none"
        close = difflib.get_close_matches(name, names, n=1)
        fix = f'did you mean "{close[0]}"?' if close else None
        raise schedule_error(func, "get_block", f'Cannot find a block with the name: {name} '
                             f"(function {func.name} has the blocks {listed})", fix=fix)
    if names.count(name) > 1:
        raise ambiguous_block_error(func, name, "get_block")
    return func, name


def get_loops(func: PrimFunc, block: str) -> tuple[PrimFunc, list[Var]]:
    """The loops around `block` up to its enclosing block, outer to inner."""
    _, path = find_block(func, block, "get_loops")
    return func, [f.loop_var for f in loops_in_scope(path)]


def get_child_blocks(func: PrimFunc, parent: str | Var) -> tuple[PrimFunc, list[str]]:
    """The blocks directly under a block or a loop (not those nested in other blocks)."""
    node: For | BlockRealize
    if isinstance(parent, Var):
        node, _ = find_loop(func, parent, "get_child_blocks")
    else:
        node, _ = find_block(func, parent, "get_child_blocks")
    return func, [r.block.name for r in child_realizes(node)]


def _buffers(regions) -> set[Buffer]:
    return {r.buffer for r in regions}


def _siblings(func: PrimFunc, block: str, primitive: str) -> tuple[list[Block], Block]:
    """The blocks of `block`'s scope (those directly under the same enclosing block), and its own."""
    realize, path = find_block(func, block, primitive)
    scope = next((p for p in reversed(path) if isinstance(p, BlockRealize)), None)
    if scope is None:  # a function without a root block: the top-level blocks are the scope
        realizes = [func.body] if isinstance(func.body, BlockRealize) else child_realizes(func.body)
    else:
        realizes = child_realizes(scope)
    return [r.block for r in realizes], realize.block


def get_producers(func: PrimFunc, block: str) -> tuple[PrimFunc, list[str]]:
    """The sibling blocks before `block` that write a buffer it reads (or writes), in order."""
    siblings, target = _siblings(func, block, "get_producers")
    needed = _buffers(target.reads) | _buffers(target.writes)
    out = []
    for b in siblings:
        if b is target:
            break
        if _buffers(b.writes) & needed:
            out.append(b.name)
    return func, out


def get_consumers(func: PrimFunc, block: str) -> tuple[PrimFunc, list[str]]:
    """The sibling blocks after `block` that read (or overwrite) a buffer it writes, in order."""
    siblings, target = _siblings(func, block, "get_consumers")
    written = _buffers(target.writes)
    out = []
    seen = False
    for b in siblings:
        if b is target:
            seen = True
            continue
        if seen and (_buffers(b.reads) | _buffers(b.writes)) & written:
            out.append(b.name)
    return func, out



def get_output_blocks(func: PrimFunc, scope: str) -> tuple[PrimFunc, list[str]]:
    """The blocks under the block `scope` (the root block: "root"), at any depth, that write a
    buffer the function's caller sees (a parameter), in program order (TVM's
    get_output_blocks): a blockized `B_o` and its inner `B` both count."""
    from ...ir.tree import all_realizes

    if scope == "root" and func.root_block is None:
        body = func.body
    else:
        body = find_block(func, scope, "get_output_blocks")[0].block.body
    params = {p for p in func.params if isinstance(p, Buffer)}
    out = []
    for r in all_realizes(body):
        if any(w.buffer in params for w in r.block.writes):
            out.append(r.block.name)
    return func, out
