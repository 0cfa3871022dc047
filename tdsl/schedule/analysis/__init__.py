"""Legality checks and clean-ups shared by the schedule primitives.

"Affine" here is TensorIR's quasi-affine: a binding built from loop variables with `+`, `-`,
multiplication by a loop-free factor, and `//` / `%` by a loop-free divisor. Loop-free parts
(constants, symbolic dimensions, scalar parameters) are free to appear anywhere.

check_parallelizable judges the blocks a loop drives directly (not nested in another block under
the loop): after blockize, the outer block's iterators and bindings are what the loop runs.
"""
from __future__ import annotations

import dataclasses

from ...arith import infer_block_regions, linear_form, relax, simplify
from ...ir import (
    TRUE,
    Binary,
    Block,
    BlockRealize,
    Buffer,
    BufferRegion,
    For,
    IntImm,
    IRMutator,
    PrimExpr,
    PrimFunc,
    Range,
    Stmt,
    Var,
    free_vars,
    is_true,
    logical_and,
    same_expr,
    substitute,
)
from ...ir import Cast as _Cast
from ...ir import IfThenElse as _IfThenElse
from ...ir import IntImm as _IntImm
from ...ir.tree import Path, all_realizes, child_realizes, children, path_ranges, walk
from ...script.printer import message_text as expr_text
from ..errors import block_name, loop_name, schedule_error


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
    return [s for s in walk(stmt) if isinstance(s, For)]


def thread_relaxed_loops(loops: list[For], scope: str) -> list[For]:
    """The loops of `loops` across whose iterations a buffer of storage `scope` is one buffer
    that a placed producer must fill as a whole: every thread of a thread block sees the same
    "shared" buffer, so its region covers all the threadIdx- and vthread-bound loops (TensorIR's
    rule: a virtual thread ranks with the threads; the copy can then be spread over the threads,
    a cooperative fetch). "local" and intrinsic
    scopes are private to a thread (none). "global" keeps the per-iteration region too (TensorIR
    relaxes every thread-bound loop there): each thread computes what it reads itself, which
    is what schedules written against tdsl so far rely on."""
    if scope.startswith("shared"):
        return [f for f in loops if f.thread_tag is not None and f.thread_tag.startswith(("threadIdx", "vthread"))]
    return []


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


def check_parallelizable(func: PrimFunc, primitive: str, loop: For, what: str, path: Path = ()) -> None:
    """`loop` may run its iterations concurrently (parallel, vectorized, thread-bound)."""
    check_affine_bindings(func, primitive, loop, loop.loop_var)
    if isinstance(loop.extent, IntImm) and loop.extent.value == 1:
        return  # a single iteration carries no dependence
    var = loop.loop_var
    # Only the outermost blocks under the loop are driven by it: a block nested in another
    # (the inner block of a blockize) is bound to its parent's iterators, and the parent's
    # bindings say whether the loop's iterations are independent.
    direct = {id(r) for r in child_realizes(loop)}   # (of loop.body, a realize, they would be its children)
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
        if is_reduction and not spatial_use and id(realize) in direct:
            raise schedule_error(
                func, primitive,
                f"every iteration of {loop_name(var)} updates the same elements in reduction "
                f"{block_name(block.name)}: no spatial iterator of the block depends on the loop",
                loops=(var,), blocks=(block.name,),
                rule=f"a loop can be {what} only when it carries no dependence between its iterations",
                fix="choose a loop bound to a spatial iterator of the block")
    ranges = path_ranges(path + (loop,))
    conflict = find_conflict(loop, ranges, private_to=var)
    if conflict is not None:
        writer, other, buf = conflict
        raise schedule_error(
            func, primitive, f"{block_name(writer)} writes {buf} and {block_name(other)} accesses it at elements "
            f"that other iterations of {loop_name(var)} may write, so the loop carries a dependence",
            loops=(var,), blocks=tuple(dict.fromkeys((writer, other))),
            rule=f"a loop can be {what} only when each iteration touches its own elements",
            fix="keep this loop serial")


@dataclasses.dataclass
class _Access:
    block: str
    region: BufferRegion  # in block iterator terms, as the block declares it
    is_write: bool
    vmap: dict  # block iterator -> binding
    inner: dict  # ranges of the loops between the analysed loop and the block

    def in_loop_terms(self) -> BufferRegion:
        """The region with bindings substituted and the inner loops relaxed to their range."""
        return _relax_region(substitute(self.region, self.vmap), self.inner)


def _accesses(loop: For) -> list[_Access]:
    """Every access of the blocks under `loop`. A nested block's accesses are inside its
    parent's regions; buffers allocated under the loop are private to an iteration."""
    out: list[_Access] = []
    private: set[Buffer] = set()
    for inner in all_realizes(loop):
        private.update(inner.block.alloc_buffers)

    def walk(node: Stmt, inner: dict[Var, Range]) -> None:
        if isinstance(node, BlockRealize):
            block = node.block
            vmap = {iv.var: v for iv, v in zip(block.iter_vars, node.iter_values)}
            for region, is_write in [(r, False) for r in block.reads] + [(w, True) for w in block.writes]:
                if region.buffer not in private:
                    out.append(_Access(block.name, region, is_write, vmap, inner))
            return
        if isinstance(node, For):
            inner = {**inner, node.loop_var: Range(node.min, node.extent)}
        for c in children(node):
            walk(c, inner)

    walk(loop.body, {})
    return out


def _relax_region(region: BufferRegion, inner: dict[Var, Range]) -> BufferRegion:
    """The region covered over all values of the `inner` loops."""
    if not inner or not uses_any_region(region, set(inner)):
        return region
    dims = []
    for r in region.region:
        lo, _ = relax(r.min, inner)
        _, hi = relax(r.min + r.extent - 1, inner)
        dims.append(Range(lo, simplify(hi - lo + 1)))
    return BufferRegion(region.buffer, tuple(dims))


def _same_region(a: BufferRegion, b: BufferRegion, ranges: dict[Var, Range]) -> bool:
    return all(same_expr(simplify(x.min, ranges), simplify(y.min, ranges)) and
               same_expr(simplify(x.extent, ranges), simplify(y.extent, ranges))
               for x, y in zip(a.region, b.region))


def find_conflict(loop: For, ranges: dict[Var, Range],
                  private_to: Var | None = None) -> tuple[str, str, str] | None:
    """Two accesses under `loop`, at least one a write, to one buffer that may touch different
    elements in different iterations: (writer block, other block, buffer name), or None. With
    `private_to`, accesses to the same elements must also depend on that loop (each iteration
    has its own)."""
    accesses = _accesses(loop)
    cache: dict[int, BufferRegion] = {}

    def resolved(a: _Access) -> BufferRegion:
        if id(a) not in cache:
            cache[id(a)] = a.in_loop_terms()
        return cache[id(a)]

    for w in accesses:
        if not w.is_write:
            continue
        for o in accesses:
            if o is w or o.region.buffer is not w.region.buffer:
                continue
            # a block reading what it writes at the same place (a reduction) needs no arithmetic
            trivially_same = o.block == w.block and same_expr(o.region, w.region)
            if trivially_same and private_to is None:
                continue
            wr = resolved(w)
            if not trivially_same and not _same_region(wr, resolved(o), ranges):
                return w.block, o.block, w.region.buffer.name
            if private_to is not None and not uses_any_region(wr, {private_to}):
                return w.block, o.block, w.region.buffer.name
    return None


def uses_any_region(region: BufferRegion, variables: set[Var]) -> bool:
    return any(uses_any(r.min, variables) or uses_any(r.extent, variables) for r in region.region)


class _RealizeSimplifier(IRMutator):
    """Simplifies block bindings and predicates, knowing the ranges of the enclosing loops."""

    def __init__(self, ranges: dict[Var, Range], keep: frozenset[Var] = frozenset()):
        self.ranges = dict(ranges)
        self.keep = keep

    def visit_For(self, node: For):
        if node.loop_var in self.keep:  # a unit loop whose variable the bindings keep (TVM's preserve_unit_*)
            body = self.visit(node.body)
            return node if body is node.body else dataclasses.replace(node, body=body)
        self.ranges[node.loop_var] = Range(node.min, node.extent)
        try:
            body = self.visit(node.body)
        finally:
            del self.ranges[node.loop_var]
        return node if body is node.body else dataclasses.replace(node, body=body)

    def visit_BlockRealize(self, node: BlockRealize):
        values = tuple(simplify(v, self.ranges) for v in node.iter_values)
        pred = node.predicate if node.predicate is TRUE else simplify(node.predicate, self.ranges)
        if is_true(pred):
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


def simplify_realizes(stmt: Stmt, ranges: dict[Var, Range], keep: frozenset[Var] = frozenset()) -> Stmt:
    """`stmt` with every block binding and predicate under it simplified; the variables of the
    loops in `keep` stay in the bindings even where their loop runs once."""
    return _RealizeSimplifier(ranges, keep).visit(stmt)


def and_predicate(realize: BlockRealize, cond: PrimExpr) -> BlockRealize:
    """`realize` with `cond` added to its predicate."""
    pred = cond if realize.predicate is TRUE or is_true(realize.predicate) else logical_and(realize.predicate, cond)
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


def index_as(e: PrimExpr, dtype) -> PrimExpr:
    """An integer index expression in `dtype` (constants converted, others cast): loops and
    buffer shapes may mix int32 and int64 (`T.grid(T.int64(8))` over a `(128,)` buffer)."""
    if e.dtype == dtype:
        return e
    if isinstance(e, _IntImm):
        return _IntImm(e.value, dtype)
    return simplify(_Cast(dtype, e))


def same_width(a: PrimExpr, b: PrimExpr) -> tuple[PrimExpr, PrimExpr]:
    """Two integer index expressions in one dtype, the wider of the two (for comparing an int32
    iterator's bounds with an int64 buffer's)."""
    if a.dtype == b.dtype or not (a.dtype.is_integer and b.dtype.is_integer):
        return a, b
    wide = a.dtype if a.dtype.bits >= b.dtype.bits else b.dtype
    return index_as(a, wide), index_as(b, wide)


def refuse_conditions(func, primitive: str, name: str, path: Path) -> None:
    """Refuse a step that copies or regenerates a block's instances from its loops when an `if`
    stands between the block and those loops (the copy would run where the block does not)."""
    for node in reversed(path):
        if isinstance(node, Block):
            return
        if isinstance(node, _IfThenElse):
            raise schedule_error(func, primitive, f"{block_name(name)} runs under `if {expr_text(node.condition)}`, "
                                 f"which {primitive} would not carry over", blocks=(name,),
                                 rule=f"{primitive} copies or regenerates the block's instances from its loops, so "
                                      "no `if` may stand between the block and its loops",
                                 fix="write the condition as the block's T.where predicate")
