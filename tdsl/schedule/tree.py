"""Tree helpers the schedule primitives share: finding a handle's statement (with a
ScheduleError naming it when it is gone), unique names, and the edits of a block tree that the
dataflow families (cache, compute location, reduction, layout) have in common.

Plain navigation (`Path`, `children`, `find_path`, `replace_at`, ...) is `tdsl.ir.tree`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..arith import infer_block_regions
from ..ir import (
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    For,
    IRMutator,
    LetStmt,
    PrimExpr,
    PrimFunc,
    Range,
    SeqStmt,
    Stmt,
    Var,
    collect,
    is_true,  # noqa: F401 - the primitives import it from here
    substitute,
)
from ..ir.tree import Path, all_realizes, find_path, fresh_name, path_ranges, replace_at, walk
from .errors import block_name, loop_name, schedule_error


def find_block(func: PrimFunc, name: str, primitive: str) -> tuple[BlockRealize, Path]:
    """The realize of block `name` and its ancestors; a ScheduleError naming it when gone, or
    when several blocks have that name (a script may repeat one, as in TVM)."""
    if name in repeated_block_names(func):
        raise ambiguous_block_error(func, name, primitive)
    found = find_path(func.body, lambda s: isinstance(s, BlockRealize) and s.block.name == name)
    if found is None:
        raise schedule_error(func, primitive, f"{block_name(name)} no longer exists in the function",
                             rule="a handle can only be used while its block exists (compute_inline and "
                                  "undo remove blocks)",
                             fix=f"look it up again with sch.get_block({name!r}) if it still exists")
    return found  # type: ignore[return-value]


_REPEATED_CACHE: dict[int, tuple[PrimFunc, frozenset[str]]] = {}
_REPEATED_CACHE_SIZE = 16


def repeated_block_names(func: PrimFunc) -> frozenset[str]:
    """The block names that more than one block of `func` has (cached per function object: a
    schedule step makes a new function, and no primitive makes a name repeat)."""
    hit = _REPEATED_CACHE.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    seen: set[str] = set()
    repeated: set[str] = set()
    for r in all_realizes(func.body):
        (repeated if r.block.name in seen else seen).add(r.block.name)
    result = frozenset(repeated)
    if len(_REPEATED_CACHE) >= _REPEATED_CACHE_SIZE:
        _REPEATED_CACHE.pop(next(iter(_REPEATED_CACHE)))
    _REPEATED_CACHE[id(func)] = (func, result)
    return result


def ambiguous_block_error(func: PrimFunc, name: str, primitive: str):
    """The ScheduleError for a block name that several blocks have: where each one is."""
    places = []
    for node in walk(func.body):
        if isinstance(node, BlockRealize) and node.block.name == name:
            found = find_path(func.body, lambda s, n=node: s is n)
            loops = [p.loop_var.name for p in found[1] if isinstance(p, For)] if found else []
            line = f"line {node.block.span.line}, " if node.block.span is not None else ""
            places.append(f"{line}under loops {', '.join(loops)}" if loops else f"{line}outside every loop")
    return schedule_error(
        func, primitive, f"Found multiple blocks with the name: {name} ({len(places)} blocks: "
                         f"{'; '.join(places)})",
        blocks=(name,),
        rule="a tdsl schedule names a block by its name, so it cannot tell blocks of one name apart",
        fix=f'give each its own name in the script (T.block("{name}"), T.block("{name}_1")) before scheduling')


def find_loop(func: PrimFunc, var: Var, primitive: str) -> tuple[For, Path]:
    """The loop whose variable is `var` and its ancestors; a ScheduleError naming it when gone."""
    found = find_path(func.body, lambda s: isinstance(s, For) and s.loop_var is var)
    if found is None:
        raise schedule_error(func, primitive, f"{loop_name(var)} no longer exists in the function",
                             rule="a loop handle dies when its loop is replaced (split, fuse) or its step undone",
                             fix="take fresh handles from sch.get_loops(block)")
    return found  # type: ignore[return-value]


def unique_names(func: PrimFunc) -> PrimFunc:
    """`func` with every loop, block iterator and let variable under a name of its own.

    Parsing gives two nests written `for i, j` two pairs of Vars both called i and j; the
    printer shows the second pair as i_1, j_1. Renaming them the same way up front makes the
    names in error messages and traces the names the user sees in `sch.show()`. A function
    whose names are already unique is returned as is.
    """
    taken = {p.name for p in func.params}
    for p in func.params:
        if isinstance(p, Buffer):
            taken.update(v.name for s in p.shape for v in collect(s, Var))
    root = func.root_block
    if root is not None:  # function-level buffers print before the loops
        taken.update(b.name for b in root.alloc_buffers)
    renames: dict[Var, PrimExpr] = {}
    for node in walk(func.body):
        defined: list[Var] = []
        if isinstance(node, For):
            defined.append(node.loop_var)
        elif isinstance(node, LetStmt):
            defined.append(node.var)
        elif isinstance(node, BlockRealize):
            defined.extend(iv.var for iv in node.block.iter_vars)
        for var in defined:
            if var.name in taken:
                renames[var] = Var(fresh_name(var.name, taken), var.dtype)
            else:
                taken.add(var.name)
    if not renames:
        return func
    return func.with_body(substitute(func.body, renames))


# edits shared by the dataflow families ----------------------------------------------------


def buffer_names(func: PrimFunc) -> set[str]:
    """Every buffer name in the function (parameters and allocations)."""
    names = {p.name for p in func.params if isinstance(p, Buffer)}
    for r in all_realizes(func.body):
        names.update(b.name for b in r.block.alloc_buffers)
    return names


def alloc_site(func: PrimFunc, buffer: Buffer) -> BlockRealize | None:
    """The realize of the block that allocates `buffer`; None for a function parameter."""
    for r in all_realizes(func.body):
        if any(b is buffer for b in r.block.alloc_buffers):
            return r
    return None


def scope_of(path: Path) -> tuple[BlockRealize | None, Stmt]:
    """The realize of the enclosing block of a statement (None at function level) and the
    statement directly inside it that holds the path (its 'top statement' container)."""
    for node in reversed(path):
        if isinstance(node, BlockRealize):
            return node, node.block.body
    return None, path[0] if path else None  # type: ignore[return-value]


def top_index(path: Path, stmt: Stmt) -> tuple[Path, int]:
    """Where `stmt` (reached through `path`) sits in its scope: the path up to and including the
    enclosing Block, and the index of the statement of that block's body that holds `stmt`."""
    scope_pos = max(i for i, p in enumerate(path) if isinstance(p, Block))
    inside = path[scope_pos + 1:] + (stmt,)
    body = inside[0]
    if isinstance(body, SeqStmt):
        top = inside[1]
        return path[:scope_pos + 1], next(i for i, s in enumerate(body.seq) if s is top)
    return path[:scope_pos + 1], 0


def remove_realize(stmt: Stmt, target: BlockRealize) -> Stmt | None:
    """`stmt` without `target`; loops and sequences left empty disappear (None when all is gone)."""
    if stmt is target:
        return None
    if isinstance(stmt, For):
        body = remove_realize(stmt.body, target)
        if body is None:
            return None
        return stmt if body is stmt.body else dataclasses.replace(stmt, body=body)
    if isinstance(stmt, SeqStmt):
        kept = []
        changed = False
        for s in stmt.seq:
            new = remove_realize(s, target)
            changed |= new is not s
            if new is not None:
                kept.append(new)
        if not changed:
            return stmt
        if not kept:
            return None
        return kept[0] if len(kept) == 1 else SeqStmt(tuple(kept))
    if isinstance(stmt, BlockRealize):
        block = stmt.block
        body = remove_realize(block.body, target)
        if body is block.body:
            return stmt
        body = body if body is not None else SeqStmt(())
        return dataclasses.replace(stmt, block=dataclasses.replace(block, body=body))
    if hasattr(stmt, "body") and isinstance(stmt.body, Stmt):
        body = remove_realize(stmt.body, target)
        if body is None:
            return None
        return stmt if body is stmt.body else dataclasses.replace(stmt, body=body)  # type: ignore[type-var]
    return stmt


def seq_insert(body: Stmt, index: int, new: Stmt) -> SeqStmt:
    """`body` as a sequence with `new` inserted before position `index`."""
    items = list(body.seq) if isinstance(body, SeqStmt) else [body]
    items.insert(index, new)
    return SeqStmt(tuple(items))


def refresh_block(block: Block, keep_order: bool = False) -> Block:
    """`block` with its reads/writes inferred again from its body. With `keep_order`, in the
    order of the old regions: a buffer keeps its place, and a new one takes the place of a
    buffer that is gone (cache_read's `A_shared` that of `A`), so read and write indices keep
    their meaning (TVM's `cache_read(block, 1)` after `cache_read(block, 0)`)."""
    reads, writes = infer_block_regions(block)
    if not keep_order:
        return dataclasses.replace(block, reads=tuple(reads), writes=tuple(writes))
    return dataclasses.replace(block, reads=_in_old_order(reads, block.reads),
                               writes=_in_old_order(writes, block.writes))


def _in_old_order(new: Sequence, old: Sequence) -> tuple:
    old_bufs = [r.buffer for r in old]
    new_bufs = {r.buffer for r in new}
    holes = [k for k, b in enumerate(old_bufs) if b not in new_bufs]
    fresh = iter(holes)
    keys = []
    for pos, r in enumerate(new):
        if r.buffer in old_bufs:
            keys.append((old_bufs.index(r.buffer), 0, pos))
        else:
            hole = next(fresh, None)
            keys.append((len(old_bufs), 1, pos) if hole is None else (hole, 1, pos))
    return tuple(r for _, r in sorted(zip(keys, new), key=lambda x: x[0]))


class _Refresher(IRMutator):
    """Re-infers the regions of the blocks (inner first) that touch one of `buffers`."""

    def __init__(self, buffers: set[Buffer], keep_order: bool = False):
        self.buffers = buffers
        self.keep_order = keep_order

    def visit_Block(self, node: Block):
        node = self.generic_visit(node)
        touched = {r.buffer for r in node.reads + node.writes}
        if node.name != "root" and touched & self.buffers:
            return refresh_block(node, self.keep_order)
        return node

    def generic_visit(self, node):
        if not isinstance(node, Stmt):
            return node
        return super().generic_visit(node)


def refresh_touching(stmt: Stmt, buffers: set[Buffer], keep_order: bool = False) -> Stmt:
    """Re-infer the regions of every block under `stmt` that reads or writes one of `buffers`
    (`keep_order`: see refresh_block)."""
    return _Refresher(buffers, keep_order).visit(stmt)


def add_alloc(func: PrimFunc, scope: BlockRealize | None, buffer: Buffer) -> PrimFunc:
    """The function with `buffer` allocated in the block of realize `scope` (None: the root)."""
    target = scope if scope is not None else func.body
    if not isinstance(target, BlockRealize):
        raise TypeError("a function without a root block cannot allocate")  # lowered IR is not scheduled
    found = find_block(func, target.block.name, "alloc") if target is not func.body else (func.body, ())
    realize, path = found
    block = dataclasses.replace(realize.block, alloc_buffers=realize.block.alloc_buffers + (buffer,))
    return replace_at(func, path, realize, dataclasses.replace(realize, block=block))


def drop_unused_allocs(func: PrimFunc) -> PrimFunc:
    """Remove allocations of intermediate buffers nothing reads or writes any more."""

    used: set[Buffer] = set()
    for node in collect(func.body, BufferLoad) + collect(func.body, BufferStore):
        used.add(node.buffer)

    class _Dropper(IRMutator):
        def visit_Block(self, node: Block):
            node = self.generic_visit(node)
            kept = tuple(b for b in node.alloc_buffers if b in used)
            return node if len(kept) == len(node.alloc_buffers) else dataclasses.replace(node, alloc_buffers=kept)

        def generic_visit(self, node):
            if not isinstance(node, Stmt):
                return node
            return super().generic_visit(node)

    return func.with_body(_Dropper().visit(func.body))


def outer_ranges(path: Path) -> dict[Var, Range]:
    """The ranges of the loops and iterators outside the scope (enclosing block) of a statement."""
    scope_pos = max((i for i, p in enumerate(path) if isinstance(p, Block)), default=-1)
    return path_ranges(path[:scope_pos + 1])


def insert_beside(func: PrimFunc, path: Path, stmt: Stmt, new: Stmt, after: bool) -> PrimFunc:
    """The function with `new` placed right before (or after) `stmt`, reached through `path`."""
    parent = path[-1]
    if isinstance(parent, SeqStmt):
        items = list(parent.seq)
        pos = next(i for i, x in enumerate(items) if x is stmt)
        items.insert(pos + (1 if after else 0), new)
        return replace_at(func, path[:-1], parent, SeqStmt(tuple(items)))
    pair = (stmt, new) if after else (new, stmt)
    return replace_at(func, path, stmt, SeqStmt(pair))
