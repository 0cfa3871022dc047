"""Handles (BlockRV, LoopRV) and navigation of a function's statement tree.

The pure primitives name things by stable identities: a block by its name (unique in a
function), a loop by its loop `Var` object (primitives that keep a loop keep its Var). The
Schedule wraps those identities in handles that also remember the trace step that made them,
so that a handle of an undone step is refused.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..ir import Block, BlockRealize, Buffer, For, LetStmt, PrimFunc, Stmt, Var, collect, substitute
from .errors import block_name, loop_name, schedule_error


@dataclass(frozen=True, eq=False)
class BlockRV:
    """A handle to a block, followed by its name."""

    name: str
    serial: int

    def __repr__(self) -> str:
        return f'Block("{self.name}")'


@dataclass(frozen=True, eq=False)
class LoopRV:
    """A handle to a loop, followed by the identity of its loop variable."""

    var: Var
    serial: int

    @property
    def name(self) -> str:
        return self.var.name

    def __repr__(self) -> str:
        return f"Loop({self.var.name})"


Path = tuple[Stmt, ...]  # ancestors of a statement, outermost first


def children(stmt: Stmt) -> tuple[Stmt, ...]:
    """The statements directly inside `stmt` (a block's init before its body)."""
    out = []
    for name in ("init", "body", "block", "seq", "then_case", "else_case"):
        value = getattr(stmt, name, None)
        if isinstance(value, Stmt):
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(v for v in value if isinstance(v, Stmt))
    return tuple(out)


def find_path(root: Stmt, pred) -> tuple[Stmt, Path] | None:
    """The first statement (pre-order) satisfying `pred`, with its ancestors."""
    stack: list[tuple[Stmt, Path]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if pred(node):
            return node, path
        sub = path + (node,)
        stack.extend((c, sub) for c in reversed(children(node)))
    return None


def find_block(func: PrimFunc, name: str, primitive: str) -> tuple[BlockRealize, Path]:
    """The realize of block `name` and its ancestors; a ScheduleError naming it when gone."""
    found = find_path(func.body, lambda s: isinstance(s, BlockRealize) and s.block.name == name)
    if found is None:
        raise schedule_error(func, primitive, f"{block_name(name)} no longer exists in the function",
                             rule="a handle can only be used while its block exists (compute_inline and "
                                  "undo remove blocks)",
                             fix=f"look it up again with sch.get_block({name!r}) if it still exists")
    return found  # type: ignore[return-value]


def find_loop(func: PrimFunc, var: Var, primitive: str) -> tuple[For, Path]:
    """The loop whose variable is `var` and its ancestors; a ScheduleError naming it when gone."""
    found = find_path(func.body, lambda s: isinstance(s, For) and s.loop_var is var)
    if found is None:
        raise schedule_error(func, primitive, f"{loop_name(var)} no longer exists in the function",
                             rule="a loop handle dies when its loop is replaced (split, fuse) or its step undone",
                             fix="take fresh handles from sch.get_loops(block)")
    return found  # type: ignore[return-value]


def enclosing_block(path: Path) -> Block | None:
    """The nearest block around a statement (its scope)."""
    for node in reversed(path):
        if isinstance(node, Block):
            return node
    return None


def loops_in_scope(path: Path) -> list[For]:
    """The loops between a statement and its enclosing block, outer to inner."""
    out: list[For] = []
    for node in reversed(path):
        if isinstance(node, Block):
            break
        if isinstance(node, For):
            out.append(node)
    out.reverse()
    return out


def child_realizes(stmt: Stmt) -> list[BlockRealize]:
    """The block realizes under `stmt` that are not nested inside another block, in order."""
    out: list[BlockRealize] = []

    def walk(node: Stmt) -> None:
        if isinstance(node, BlockRealize):
            out.append(node)
            return
        for c in children(node):
            walk(c)

    for c in children(stmt.block if isinstance(stmt, BlockRealize) else stmt):
        walk(c)
    return out


def all_realizes(stmt: Stmt) -> list[BlockRealize]:
    """Every block realize under `stmt` (nested ones too), in pre-order."""
    out: list[BlockRealize] = []

    def walk(node: Stmt) -> None:
        if isinstance(node, BlockRealize):
            out.append(node)
        for c in children(node):
            walk(c)

    walk(stmt)
    return out


def replace_child(parent: Stmt, old: Stmt, new: Stmt) -> Stmt:
    """`parent` with its direct child `old` (by identity) replaced by `new`."""
    for f in dataclasses.fields(parent):
        value = getattr(parent, f.name)
        if value is old:
            return dataclasses.replace(parent, **{f.name: new})
        if isinstance(value, tuple) and any(v is old for v in value):
            return dataclasses.replace(parent, **{f.name: tuple(new if v is old else v for v in value)})
    raise ValueError("replace_child: not a child")  # a broken path is a bug in the primitive


def replace_at(func: PrimFunc, path: Path, old: Stmt, new: Stmt) -> PrimFunc:
    """The function with statement `old`, reached through `path`, replaced by `new`."""
    for parent in reversed(path):
        new = replace_child(parent, old, new)
        old = parent
    return func.with_body(new)


def var_names(func: PrimFunc) -> set[str]:
    """Every name in the function's namespace (parameters, dimensions, loops, iterators, buffers)."""
    names = {v.name for v in collect(func.body, Var)}
    names.update(b.name for r in all_realizes(func.body) for b in r.block.alloc_buffers)
    for p in func.params:
        if isinstance(p, Var):
            names.add(p.name)
        elif isinstance(p, Buffer):
            names.update(v.name for s in p.shape for v in collect(s, Var))
            names.add(p.name)
    return names


def fresh_name(base: str, taken: set[str]) -> str:
    """`base`, or `base_1`, `base_2`, ... whichever is not taken; the result is added to `taken`."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def block_names(func: PrimFunc) -> list[str]:
    """The names of all blocks, in program order (the implicit root block excluded)."""
    return [r.block.name for r in all_realizes(func.body) if r is not func.body]


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
    renames: dict[Var, Var] = {}
    stack: list[Stmt] = [func.body]
    while stack:
        node = stack.pop()
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
        stack.extend(reversed(children(node)))
    if not renames:
        return func
    return func.with_body(substitute(func.body, renames))
