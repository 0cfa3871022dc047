"""Paths through a function's statement tree: children, find, replace.

A `Path` is the tuple of a statement's ancestors, outermost first. The schedule primitives,
the tensor-intrinsic matcher and the lowering pass that swaps intrinsics in all navigate the
tree this way; rewriting a statement somewhere inside a function is `replace_at(func, path,
old, new)`, which rebuilds only the ancestors (IR nodes are immutable).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

from .buffer import Buffer
from .expr import Range, Var
from .functor import collect
from .stmt import Allocate, Block, BlockRealize, For, IfThenElse, LetStmt, PrimFunc, SeqStmt, Stmt

Path = tuple[Stmt, ...]  # ancestors of a statement, outermost first


def children(stmt: Stmt) -> tuple[Stmt, ...]:
    """The statements directly inside `stmt`, in program order (a block's init before its body)."""
    if isinstance(stmt, (For, LetStmt, Allocate)):
        return (stmt.body,)
    if isinstance(stmt, SeqStmt):
        return stmt.seq
    if isinstance(stmt, BlockRealize):
        return (stmt.block,)
    if isinstance(stmt, Block):
        return (stmt.body,) if stmt.init is None else (stmt.init, stmt.body)
    if isinstance(stmt, IfThenElse):
        return (stmt.then_case,) if stmt.else_case is None else (stmt.then_case, stmt.else_case)
    return ()


def walk(root: Stmt, descend: Callable[[Stmt], bool] | None = None) -> Iterator[Stmt]:
    """Every statement under `root`, itself first, in program order (pre-order; expressions are
    not visited: no statement hides in one). The statements inside a node for which
    `descend(node)` is false are skipped."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if descend is None or descend(node):
            stack.extend(reversed(children(node)))


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


def find_realize(root: Stmt, name: str) -> tuple[BlockRealize, Path] | None:
    """The realize of the block called `name` and its ancestors; None when there is none."""
    return find_path(root, lambda s: isinstance(s, BlockRealize) and s.block.name == name)  # type: ignore[return-value]


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


def conditions_in_scope(path: Path, stmt: Stmt, below: Stmt | None = None) -> list[tuple[IfThenElse, bool]]:
    """The `if` statements between `stmt` and its enclosing block (or, given `below`, only those
    under that ancestor), outer to inner, each with True when `stmt` is in its then-branch."""
    out: list[tuple[IfThenElse, bool]] = []
    inner = (*path, stmt)
    for i in range(len(path) - 1, -1, -1):
        node = path[i]
        if isinstance(node, Block) or node is below:
            break
        if isinstance(node, IfThenElse):
            out.append((node, inner[i + 1] is node.then_case))
    out.reverse()
    return out


def path_ranges(path: Path) -> dict[Var, Range]:
    """The ranges of the loops and block iterators enclosing a statement."""
    ranges: dict[Var, Range] = {}
    for node in path:
        if isinstance(node, For):
            ranges[node.loop_var] = Range(node.min, node.extent)
        elif isinstance(node, Block):
            for iv in node.iter_vars:
                ranges[iv.var] = iv.dom
    return ranges


def child_realizes(stmt: Stmt) -> list[BlockRealize]:
    """The block realizes under `stmt` that are not nested inside another block, in order."""
    def outside_blocks(s: Stmt) -> bool:
        return not isinstance(s, BlockRealize)

    top = stmt.block if isinstance(stmt, BlockRealize) else stmt
    return [r for c in children(top) for r in walk(c, outside_blocks) if isinstance(r, BlockRealize)]


def all_realizes(stmt: Stmt) -> list[BlockRealize]:
    """Every block realize under `stmt` (nested ones too), in pre-order."""
    return [s for s in walk(stmt) if isinstance(s, BlockRealize)]


def replace_child(parent: Stmt, old: Stmt, new: Stmt) -> Stmt:
    """`parent` with its direct child `old` (by identity) replaced by `new`."""
    for f in dataclasses.fields(parent):  # type: ignore[arg-type]
        value = getattr(parent, f.name)
        if value is old:
            return dataclasses.replace(parent, **{f.name: new})  # type: ignore[type-var]
        if isinstance(value, tuple) and any(v is old for v in value):
            return dataclasses.replace(parent, **{f.name: tuple(new if v is old else v for v in value)})  # type: ignore[type-var]
    raise ValueError("replace_child: not a child")  # a broken path is a bug in the caller


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
