"""Legality checks and clean-ups shared by the schedule primitives.

"Affine" here is TensorIR's quasi-affine: a binding built from loop variables with `+`, `-`,
multiplication by a loop-free factor, and `//` / `%` by a loop-free divisor. Loop-free parts
(constants, symbolic dimensions, scalar parameters) are free to appear anywhere.
"""
from __future__ import annotations

import dataclasses

from ..arith import infer_block_regions, linear_form, simplify
from ..ir import (TRUE, Binary, Block, BlockRealize, For, IRMutator, PrimExpr, PrimFunc, Range, Stmt, Var,
                  free_vars, logical_and)
from .errors import block_name, loop_name, schedule_error
from .state import Path, all_realizes, children


def uses_any(expr, variables: set[Var]) -> bool:
    """True when `expr` mentions one of `variables`."""
    return bool(free_vars(expr) & variables)


def is_quasi_affine(expr: PrimExpr, loop_vars: set[Var]) -> bool:
    """True when `expr` is a quasi-affine function of `loop_vars` (see the module docstring)."""
    if not uses_any(expr, loop_vars):
        return True
    if isinstance(expr, Var) or linear_form(expr, loop_vars) is not None:
        return True
    if isinstance(expr, Binary):
        if expr.op in ("add", "sub"):
            return is_quasi_affine(expr.a, loop_vars) and is_quasi_affine(expr.b, loop_vars)
        if expr.op == "mul":
            if not uses_any(expr.a, loop_vars):
                return is_quasi_affine(expr.b, loop_vars)
            return not uses_any(expr.b, loop_vars) and is_quasi_affine(expr.a, loop_vars)
        if expr.op in ("floordiv", "floormod"):
            return not uses_any(expr.b, loop_vars) and is_quasi_affine(expr.a, loop_vars)
    return False


def all_loops(stmt: Stmt) -> list[For]:
    """Every loop under `stmt` (itself included), pre-order."""
    out: list[For] = []
    stack = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, For):
            out.append(node)
        stack.extend(reversed(children(node)))
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


def expr_text(expr: PrimExpr) -> str:
    """An expression as the user would write it."""
    try:
        from ..script.printer import expr_str

        return expr_str(expr)
    except Exception:  # messages must not fail on a printer gap
        return repr(expr)


def check_affine_bindings(func: PrimFunc, primitive: str, stmt: Stmt, culprit: Var) -> None:
    """Every block under `stmt` binds its iterators quasi-affinely to the loops."""
    loop_vars = {f.loop_var for f in all_loops(func.body)}
    for realize in all_realizes(stmt):
        for iv, value in zip(realize.block.iter_vars, realize.iter_values):
            if not is_quasi_affine(value, loop_vars):
                raise schedule_error(
                    func, primitive,
                    f"{block_name(realize.block.name)} under {loop_name(culprit)} binds its iterator "
                    f"{iv.var.name} to {expr_text(value)}, which is not an affine function of the loops",
                    loops=(culprit,), blocks=(realize.block.name,),
                    rule=f"{primitive} needs the blocks under the loop to bind their iterators affinely "
                         "(sums of loop variables times constants, with // and % by constants)",
                    fix="rewrite the binding in the script (T.axis.spatial(dom, affine value))")


def check_parallelizable(func: PrimFunc, primitive: str, loop: For, what: str) -> None:
    """`loop` may run its iterations concurrently (parallel, vectorized, thread-bound)."""
    check_affine_bindings(func, primitive, loop, loop.loop_var)
    var = loop.loop_var
    for realize in all_realizes(loop.body):
        block = realize.block
        spatial_use = False
        for iv, value in zip(block.iter_vars, realize.iter_values):
            if not uses_any(value, {var}):
                continue
            if iv.kind == "R":
                raise schedule_error(
                    func, primitive,
                    f"{loop_name(var)} drives the reduction iterator {iv.var.name} of {block_name(block.name)} "
                    f"(bound to {expr_text(value)}), so its iterations accumulate into the same elements",
                    loops=(var,), blocks=(block.name,),
                    rule=f"only loops bound to data-parallel (spatial) block iterators can be {what}",
                    fix="keep this loop serial, or split the reduction with sch.rfactor(loop, 0) first")
            spatial_use = True
        is_reduction = block.init is not None or any(iv.kind == "R" for iv in block.iter_vars)
        if is_reduction and not spatial_use:
            raise schedule_error(
                func, primitive,
                f"every iteration of {loop_name(var)} updates the same elements in reduction "
                f"{block_name(block.name)}: no spatial iterator of the block depends on the loop",
                loops=(var,), blocks=(block.name,),
                rule=f"a loop can be {what} only when it carries no dependence between its iterations",
                fix="choose a loop bound to a spatial iterator of the block")


class _RealizeSimplifier(IRMutator):
    """Simplifies block bindings and predicates, knowing the ranges of the enclosing loops."""

    def __init__(self, ranges: dict[Var, Range]):
        self.ranges = dict(ranges)

    def visit_For(self, node: For):
        self.ranges[node.loop_var] = Range(node.min, node.extent)
        try:
            body = self.visit(node.body)
        finally:
            del self.ranges[node.loop_var]
        return node if body is node.body else dataclasses.replace(node, body=body)

    def visit_BlockRealize(self, node: BlockRealize):
        values = tuple(simplify(v, self.ranges) for v in node.iter_values)
        pred = node.predicate if node.predicate is TRUE else simplify(node.predicate, self.ranges)
        if _is_true(pred):
            pred = TRUE
        saved = dict(self.ranges)
        for iv in node.block.iter_vars:
            self.ranges[iv.var] = iv.dom
        try:
            block = self._visit_block(node.block)
        finally:
            self.ranges = saved
        return dataclasses.replace(node, iter_values=values, predicate=pred, block=block)

    def _visit_block(self, block: Block) -> Block:
        body = self.visit(block.body)
        init = None if block.init is None else self.visit(block.init)
        if body is block.body and init is block.init:
            return block
        return dataclasses.replace(block, body=body, init=init)

    def generic_visit(self, node):
        # only statements can hold block realizes; expressions are left alone
        if not isinstance(node, Stmt):
            return node
        return super().generic_visit(node)


def _is_true(expr: PrimExpr) -> bool:
    from ..ir import IntImm

    return isinstance(expr, IntImm) and expr.dtype.is_bool and expr.value == 1


def simplify_realizes(stmt: Stmt, ranges: dict[Var, Range]) -> Stmt:
    """`stmt` with every block binding and predicate under it simplified."""
    return _RealizeSimplifier(ranges).visit(stmt)


def and_predicate(realize: BlockRealize, cond: PrimExpr) -> BlockRealize:
    """`realize` with `cond` added to its predicate."""
    pred = cond if realize.predicate is TRUE or _is_true(realize.predicate) else logical_and(realize.predicate, cond)
    return dataclasses.replace(realize, predicate=pred)


class _RegionRefresher(IRMutator):
    def __init__(self, changed: set[Var]):
        self.changed = changed

    def visit_Block(self, node: Block):
        node = super().generic_visit(node)
        regions = node.reads + node.writes
        if any(uses_any(r, self.changed) for region in regions for r in _region_exprs(region)):
            reads, writes = infer_block_regions(node)
            node = dataclasses.replace(node, reads=tuple(reads), writes=tuple(writes))
        return node

    def generic_visit(self, node):
        if not isinstance(node, Stmt):
            return node
        return super().generic_visit(node)


def _region_exprs(region):
    for r in region.region:
        yield r.min
        yield r.extent


def refresh_regions(stmt: Stmt, changed: set[Var]) -> Stmt:
    """Re-infer the reads/writes of blocks whose regions mention the rewritten loop variables."""
    return _RegionRefresher(changed).visit(stmt)
