"""Loop primitives: split, fuse, reorder, parallel, vectorize, unroll, bind.

New loops are named TVM-style from the loops they replace (`i` -> `i_0, i_1`; `i, j` ->
`i_j_fused`), made unique in the function. Loops that survive a primitive keep their Var.

parallel / vectorize / bind check the blocks the loop drives directly: a block nested in another
(the inner block of a blockize) is judged through its parent's bindings. bind accepts a loop
inside (or around) a loop bound to the same threadIdx axis when the inner loop is no longer than
the outer one, its code does not depend on the outer loop, and its blocks can run again without
changing the result (a cooperative fetch; see _check_rebind): the CUDA backend makes both loops
one thread index, guarding the shorter.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence

from ...arith import prove, simplify
from ...ir import (
    THREAD_TAGS,
    Block,
    BlockRealize,
    Buffer,
    For,
    IntImm,
    PrimExpr,
    PrimFunc,
    SeqStmt,
    Stmt,
    Var,
    const,
    free_vars,
    is_const,
    substitute,
)
from ...ir.tree import Path, all_realizes, children, fresh_name, path_ranges, var_names
from ..analysis import (
    all_loops,
    and_predicate,
    check_affine_bindings,
    check_parallelizable,
    expr_text,
    find_conflict,
    refresh_regions,
    simplify_realizes,
    uses_any,
)
from ..errors import block_name, loop_name, schedule_error
from ..tree import find_loop

# split -------------------------------------------------------------------------------------

def _check_factor(func: PrimFunc, loop: For, factor, allowed: set[Var]) -> PrimExpr | None:
    """A factor as an expression of the loop's dtype. A symbolic factor is taken to be positive,
    as the dimensions it is made of are."""
    var = loop.loop_var
    if factor is None:
        return None
    if isinstance(factor, bool) or not isinstance(factor, (int, PrimExpr)):
        raise schedule_error(func, "split", f"factor {factor!r} of {loop_name(var)} is not an int, None or an "
                             "expression", loops=(var,), rule="split factors are positive ints, one None, or "
                             "symbolic expressions of the function's dimensions")
    if isinstance(factor, int):
        if factor <= 0:
            raise schedule_error(func, "split", f"factor {factor} of {loop_name(var)} is not positive",
                                 loops=(var,), rule="split factors must be positive")
        if var.dtype.bits < 64 and factor >= 1 << (var.dtype.bits - 1):
            raise schedule_error(func, "split", f"factor {factor} of {loop_name(var)} does not fit its "
                                 f"{var.dtype} loop variable", loops=(var,),
                                 rule="a split factor fits the loop variable's dtype",
                                 fix="split by a factor below 2**31, or write the loop with an int64 extent")
        return const(factor, var.dtype)
    if not factor.dtype.is_integer:
        raise schedule_error(func, "split", f"factor {expr_text(factor)} of {loop_name(var)} has dtype "
                             f"{factor.dtype}, not an integer type", loops=(var,),
                             rule="split factors are integers")
    stray = free_vars(factor) - allowed
    if stray:
        names = ", ".join(sorted(v.name for v in stray))
        raise schedule_error(func, "split", f"factor {expr_text(factor)} of {loop_name(var)} uses {names}, "
                             "which is not a parameter or dimension of the function", loops=(var,),
                             rule="a symbolic split factor may only use the function's dimensions and scalar "
                                  "parameters")
    if isinstance(factor, IntImm) and factor.value <= 0:
        raise schedule_error(func, "split", f"factor {factor.value} of {loop_name(var)} is not positive",
                             loops=(var,), rule="split factors must be positive")
    if isinstance(factor, IntImm) and factor.dtype != var.dtype:
        return _check_factor(func, loop, factor.value, allowed)  # an int64 constant: a plain number
    return factor if factor.dtype == var.dtype else _cast(factor, var.dtype)


def _cast(expr: PrimExpr, dtype) -> PrimExpr:
    from ...ir import Cast

    return Cast(dtype, expr)


def _function_vars(func: PrimFunc) -> set[Var]:
    out = {p for p in func.params if isinstance(p, Var)}
    for p in func.params:
        if isinstance(p, Buffer):
            for s in p.shape:
                out |= free_vars(s)
    return out


def _product(values: Sequence[PrimExpr]) -> PrimExpr:
    result = values[0]
    for v in values[1:]:
        result = result * v
    return result


def _infer_factors(func: PrimFunc, loop: For, factors: list[PrimExpr | None],
                   ranges) -> tuple[list[PrimExpr], bool]:
    """The factors with None filled in, and whether a predicate is needed."""
    var, extent = loop.loop_var, loop.extent
    known = [f for f in factors if f is not None]
    if all(isinstance(f, IntImm) for f in known) and isinstance(extent, IntImm):
        return _infer_const(func, loop, factors)
    if len(known) < len(factors):
        rest = _product(known) if known else const(1, var.dtype)
        inferred = simplify((extent + rest - 1) // rest, ranges)
        full = [inferred if f is None else f for f in factors]
    else:
        full = list(factors)  # type: ignore[arg-type]
        total = simplify(_product(full), ranges)
        if not prove(total >= extent, ranges):
            raise schedule_error(func, "split", f"cannot prove that the factors "
                                 f"[{', '.join(expr_text(f) for f in full)}] cover {loop_name(var)} of extent "
                                 f"{expr_text(extent)}", loops=(var,),
                                 rule="the product of the split factors must be at least the loop's extent",
                                 fix="leave one factor None to let tdsl infer it")
    needed = not prove(simplify(_product(full), ranges).eq(extent), ranges)
    return full, needed


def _infer_const(func: PrimFunc, loop: For, factors: list) -> tuple[list[PrimExpr], bool]:
    var, extent = loop.loop_var, loop.extent.value  # type: ignore[attr-defined]
    known = [f.value for f in factors if f is not None]
    rest = math.prod(known)
    if len(known) < len(factors):
        inferred = -(-extent // rest)
        full = [const(inferred, var.dtype) if f is None else f for f in factors]
        return full, inferred * rest != extent
    if rest > extent:
        return list(factors), True  # TVM's over-covering split: the tail is guarded by T.where
    if rest != extent:
        shown = "[" + ", ".join(str(k) for k in known) + "]"
        hint = "[None, " + ", ".join(str(k) for k in known[1:]) + "]"
        raise schedule_error(func, "split", f"factors {shown} multiply to {rest}, but {loop_name(var)} has "
                             f"extent {extent}", loops=(var,),
                             rule="without a None factor, the factors of a split must multiply to at least "
                                  "the loop's extent",
                             fix=f"write factors={hint} to let tdsl infer the outer factor (a non-dividing split "
                                 "adds a T.where predicate)")
    return list(factors), False


def _check_leaves_are_blocks(func: PrimFunc, loop: For) -> None:
    """A predicate can only guard blocks: every statement at loop level must be a loop or a block."""
    stack: list[Stmt] = [loop.body]
    while stack:
        node = stack.pop()
        if isinstance(node, (For, SeqStmt)):
            stack.extend(children(node))
        elif not isinstance(node, BlockRealize):
            raise schedule_error(func, "split", f"{loop_name(loop.loop_var)} holds a {type(node).__name__} "
                                 "outside any block, which a non-dividing split cannot guard",
                                 loops=(loop.loop_var,),
                                 rule="a non-dividing split adds a predicate to the blocks under the loop",
                                 fix="choose factors that divide the extent")


class _PredicateAdder:
    """Adds `cond` to the predicate of every block realize under a statement (not nested ones)."""

    def __init__(self, cond: PrimExpr):
        self.cond = cond

    def visit(self, node: Stmt) -> Stmt:
        if isinstance(node, BlockRealize):
            return and_predicate(node, self.cond)
        if isinstance(node, For):
            return dataclasses.replace(node, body=self.visit(node.body))
        if isinstance(node, SeqStmt):
            return dataclasses.replace(node, seq=tuple(self.visit(s) for s in node.seq))
        return node


def _check_unbound(func: PrimFunc, primitive: str, loop: For) -> None:
    """A loop bound to a thread axis or carrying annotations would lose them (TVM refuses too)."""
    if loop.thread_tag is not None or loop.annotations:
        what = f"is bound to {loop.thread_tag}" if loop.thread_tag is not None else \
            f"has annotations ({', '.join(repr(k) for k, _ in loop.annotations)})"
        raise schedule_error(func, primitive, f"{loop_name(loop.loop_var)} {what}, which the new loops would not "
                             "keep", loops=(loop.loop_var,),
                             rule=f"{primitive} applies to loops without a thread binding or annotations",
                             fix=f"{primitive} before sch.bind / sch.annotate, or sch.unannotate first")


def split(func: PrimFunc, loop_var: Var, factors: Sequence, disable_predication: bool = False,
          preserve_unit_iters: bool = False) -> tuple[PrimFunc, list[Var]]:
    """Split a loop into len(factors) nested loops, outer to inner. `disable_predication`
    (TVM's flag to leave the tail unguarded) is accepted where no guard is needed; where the
    factors over-cover the extent it is refused, since the unguarded tail would run iterations
    the program does not have. `preserve_unit_iters` keeps the variable of a new loop of
    extent 1 in the bindings (TVM's `i_0 * 16 + i_1`; else `i_1`)."""
    loop, path = find_loop(func, loop_var, "split")
    _check_unbound(func, "split", loop)
    factors = list(factors)
    if len(factors) < 2:
        raise schedule_error(func, "split", f"{loop_name(loop_var)} needs at least 2 factors, got {len(factors)}",
                             loops=(loop_var,), rule="split makes one loop per factor")
    if sum(f is None for f in factors) > 1:
        raise schedule_error(func, "split", f"factors {factors} of {loop_name(loop_var)} have more than one None",
                             loops=(loop_var,), rule="at most one split factor can be inferred (None)",
                             fix="give every factor but one")
    allowed = _function_vars(func)
    checked = [_check_factor(func, loop, f, allowed) for f in factors]
    ranges = path_ranges(path)
    full, needs_predicate = _infer_factors(func, loop, checked, ranges)
    taken = var_names(func)
    new_vars = [Var(fresh_name(f"{loop_var.name}_{k}", taken), loop_var.dtype) for k in range(len(full))]
    fused: PrimExpr = new_vars[0]
    for v, f in zip(new_vars[1:], full[1:]):
        fused = fused * f + v
    value = fused if isinstance(loop.min, IntImm) and loop.min.value == 0 else loop.min + fused
    body = substitute(loop.body, {loop_var: value})
    if needs_predicate and disable_predication:
        raise schedule_error(func, "split", f"factors {[expr_text(f) for f in full]} of {loop_name(loop_var)} "
                             f"cover more than its extent {expr_text(loop.extent)}, and disable_predication=True "
                             "would run the extra iterations unguarded", loops=(loop_var,),
                             rule="tdsl splits without a T.where guard only when the factors cover the extent "
                                  "exactly",
                             fix="leave disable_predication out (the tail gets a T.where), or pick factors whose "
                                 "product is the extent")
    if needs_predicate:
        _check_leaves_are_blocks(func, loop)
        body = _PredicateAdder(fused < loop.extent).visit(body)
    for v, f in reversed(list(zip(new_vars, full))):
        body = For(v, const(0, v.dtype), f, "serial", body)
    units = frozenset(f.loop_var for f in all_loops(body) if isinstance(f.extent, IntImm) and f.extent.value == 1)
    body = simplify_realizes(body, dict(ranges), units if preserve_unit_iters else frozenset())
    body = refresh_regions(body, {loop_var})
    return _replace(func, path, loop, body), new_vars


def add_unit_loop(func: PrimFunc, target: str | Var) -> tuple[PrimFunc, Var]:
    """A loop of extent 1 (named `u`) directly above a block (a name) or a loop (its Var)."""
    from ..tree import find_block

    old: BlockRealize | For
    if isinstance(target, str):
        old, path = find_block(func, target, "add_unit_loop")
        if func.root_block is not None and old is func.body:
            raise schedule_error(func, "add_unit_loop", f"{block_name(target)} is the root block",
                                 rule="a loop can only be added inside the root block")
    else:
        old, path = find_loop(func, target, "add_unit_loop")
    from ...dtypes import int32

    u = Var(fresh_name("u", var_names(func)), int32)
    return _replace(func, path, old, For(u, const(0, int32), const(1, int32), "serial", old)), u


def _replace(func: PrimFunc, path: Path, old: Stmt, new: Stmt) -> PrimFunc:
    from ...ir.tree import replace_at

    return replace_at(func, path, old, new)


def _check_distinct(func: PrimFunc, primitive: str, loop_vars: Sequence[Var]) -> None:
    seen: set[int] = set()
    for v in loop_vars:
        if id(v) in seen:
            names = ", ".join(x.name for x in loop_vars)
            raise schedule_error(func, primitive, f"{loop_name(v)} appears twice in {primitive}({names})",
                                 loops=(v,), rule=f"each loop appears once in a {primitive}")
        seen.add(id(v))


# fuse --------------------------------------------------------------------------------------

def fuse(func: PrimFunc, *loop_vars: Var) -> tuple[PrimFunc, Var]:
    """Fuse perfectly nested loops (outer to inner) into one loop."""
    if len(loop_vars) < 2:
        raise schedule_error(func, "fuse", f"fuse needs at least 2 loops, got {len(loop_vars)}",
                             loops=tuple(loop_vars), rule="fuse joins a chain of nested loops into one")
    _check_distinct(func, "fuse", loop_vars)
    outer, path = find_loop(func, loop_vars[0], "fuse")
    loops = [outer]
    for prev_var, var in itertools.pairwise(loop_vars):
        find_loop(func, var, "fuse")
        body = loops[-1].body
        if not (isinstance(body, For) and body.loop_var is var):
            between = (f"{loop_name(body.loop_var)} is in between" if isinstance(body, For)
                       else f"{loop_name(prev_var)} holds a {type(body).__name__}")
            raise schedule_error(
                func, "fuse", f"{loop_name(var)} is not the only statement directly inside {loop_name(prev_var)}: "
                f"{between}", loops=(prev_var, var),
                rule="fuse needs adjacent, perfectly nested loops given outer to inner",
                fix="list the loops in the order sch.get_loops returns them; move other statements out first")
        loops.append(body)
    for f in loops:
        _check_unbound(func, "fuse", f)
    fused_vars = {f.loop_var for f in loops}
    for f in loops[1:]:
        if uses_any(f.min, fused_vars) or uses_any(f.extent, fused_vars):
            raise schedule_error(func, "fuse", f"the range of {loop_name(f.loop_var)} depends on an outer loop "
                                 "being fused", loops=(f.loop_var,),
                                 rule="fused loops must have independent ranges")
    check_affine_bindings(func, "fuse", outer, outer.loop_var)
    taken = var_names(func)
    name = fresh_name("_".join(v.name for v in loop_vars) + "_fused", taken)
    fused = Var(name, loop_vars[0].dtype)
    ranges = path_ranges(path)
    extent = simplify(_product([f.extent for f in loops]), ranges)
    vmap: dict[Var, PrimExpr] = {}
    stride: PrimExpr | None = None
    for f in reversed(loops):
        # TVM's form: the outer digit is fused // stride, a middle one (fused % (stride * E)) // stride
        if stride is None:
            value = fused if f is loops[0] else fused % f.extent
        elif f is loops[0]:
            value = fused // stride
        else:
            value = fused % (stride * f.extent) // stride
        vmap[f.loop_var] = value if is_const(f.min, 0) else f.min + value
        stride = f.extent if stride is None else stride * f.extent
    body = substitute(loops[-1].body, vmap)
    new_loop: Stmt = For(fused, const(0, fused.dtype), extent, "serial", body)
    new_loop = simplify_realizes(new_loop, ranges)
    new_loop = refresh_regions(new_loop, fused_vars)
    return _replace(func, path, outer, new_loop), fused


# reorder -----------------------------------------------------------------------------------

def _chain(func: PrimFunc, loop_vars: Sequence[Var]) -> tuple[list[For], Path]:
    """The loops from the outermost to the innermost given one, checking they form one chain."""
    found = {v: find_loop(func, v, "reorder") for v in loop_vars}
    by_depth = sorted(loop_vars, key=lambda v: len(found[v][1]))
    top, top_path = found[by_depth[0]]
    bottom_var = by_depth[-1]
    bottom, bottom_path = found[bottom_var]
    for v in by_depth[1:]:
        if not any(p is top for p in found[v][1]):
            raise schedule_error(func, "reorder", f"{loop_name(v)} is not nested inside {loop_name(top.loop_var)}",
                                 loops=(top.loop_var, v),
                                 rule="reorder takes loops of one nest: each must be inside the others")
    chain_nodes = bottom_path[len(top_path):] + (bottom,)
    chain: list[For] = []
    for node in chain_nodes:
        if isinstance(node, Block):
            raise schedule_error(func, "reorder", f"{loop_name(bottom_var)} is inside {block_name(node.name)}, "
                                 f"below {loop_name(top.loop_var)}", loops=(top.loop_var, bottom_var),
                                 blocks=(node.name,),
                                 rule="reorder cannot move a loop past a block")
        if isinstance(node, For):
            chain.append(node)
    for outer, inner in itertools.pairwise(chain):
        if outer.body is not inner:
            raise schedule_error(
                func, "reorder", f"{loop_name(outer.loop_var)} holds more than {loop_name(inner.loop_var)} "
                f"(a {type(outer.body).__name__} between them), so the nest is not perfect there",
                loops=(outer.loop_var, inner.loop_var),
                rule="reorder only permutes a perfect nest: every loop between the outermost and the "
                     "innermost reordered loop must have exactly one child, the next loop")
    for v in by_depth:
        if sum(1 for f in chain if f.loop_var is v) != 1:
            raise schedule_error(func, "reorder", f"{loop_name(v)} is not in the nest of the other loops",
                                 loops=(v,), rule="reorder takes loops of one nest")
    return chain, top_path


def _check_no_carried_dependence(func: PrimFunc, chain: list[For], path: Path) -> None:
    """Blocks under the nest may not read elements that other iterations write: a new order
    could run the reader before the writer."""
    ranges = path_ranges(path + tuple(chain))
    conflict = find_conflict(chain[-1], ranges)
    if conflict is not None:
        writer, other, buf = conflict
        raise schedule_error(
            func, "reorder", f"{block_name(writer)} writes {buf} and {block_name(other)} accesses other elements "
            "of it inside the reordered loops; a new order could change what is read",
            loops=tuple(f.loop_var for f in chain), blocks=tuple(dict.fromkeys((writer, other))),
            rule="reorder needs the iterations of the nest to be independent (each touches its own elements)",
            fix="reorder before compute_at, or reorder the loops of each block separately")


def _check_init_order(func: PrimFunc, chain: list[For]) -> None:
    """A reduction's T.init runs at the first step of its reduction; a loop that feeds both a
    spatial and a reduction iterator (a fused or split-after-fuse loop) pins that first step to
    the current order, so such nests cannot be permuted."""
    for realize in all_realizes(chain[-1].body):
        block = realize.block
        if block.init is None:
            continue
        spatial: set[Var] = set()
        reduce: set[Var] = set()
        for iv, value in zip(block.iter_vars, realize.iter_values):
            (reduce if iv.kind == "R" else spatial).update(free_vars(value))
        mixed = [f.loop_var for f in chain if f.loop_var in spatial and f.loop_var in reduce]
        if mixed:
            raise schedule_error(
                func, "reorder", f"{loop_name(mixed[0])} feeds both spatial and reduction iterators of "
                f"{block_name(block.name)}, so a new order could run steps of the reduction before its "
                "T.init", loops=tuple(mixed), blocks=(block.name,),
                rule="reorder cannot permute loops above a reduction block when a loop mixes its spatial "
                     "and reduction iterators",
                fix="reorder before fusing spatial and reduction loops")


def reorder(func: PrimFunc, *loop_vars: Var) -> tuple[PrimFunc, None]:
    """Permute loops of one perfect nest; loops between them that are not named stay in place."""
    _check_distinct(func, "reorder", loop_vars)
    if len(loop_vars) < 2:
        for v in loop_vars:
            find_loop(func, v, "reorder")
        return func, None
    chain, path = _chain(func, loop_vars)
    named = {id(v) for v in loop_vars}
    by_var = {f.loop_var: f for f in chain}
    queue = iter(loop_vars)
    order = [by_var[next(queue)] if id(f.loop_var) in named else f for f in chain]
    for pos, f in enumerate(order):
        inner = {g.loop_var for g in order[pos + 1:]}
        if uses_any(f.min, inner) or uses_any(f.extent, inner):
            dep = next(g.loop_var for g in order[pos + 1:] if uses_any(f.min, {g.loop_var}) or
                       uses_any(f.extent, {g.loop_var}))
            raise schedule_error(func, "reorder", f"the range of {loop_name(f.loop_var)} depends on "
                                 f"{loop_name(dep)}, which the new order puts inside it",
                                 loops=(f.loop_var, dep), rule="a loop must stay inside the loops its range uses")
    if all(a is b for a, b in zip(order, chain)):
        return func, None
    check_affine_bindings(func, "reorder", chain[0], chain[0].loop_var)
    _check_init_order(func, chain)
    _check_no_carried_dependence(func, chain, path)
    body = chain[-1].body
    for f in reversed(order):
        body = dataclasses.replace(f, body=body)
    return _replace(func, path, chain[0], body), None


# loop kinds --------------------------------------------------------------------------------

def _set_kind(func: PrimFunc, loop_var: Var, primitive: str, kind: str, what: str,
              thread: str | None = None) -> tuple[PrimFunc, None]:
    loop, path = find_loop(func, loop_var, primitive)
    if kind != "unrolled":
        check_parallelizable(func, primitive, loop, what, path)
    new = dataclasses.replace(loop, kind=kind, thread_tag=thread)
    return _replace(func, path, loop, new), None


def parallel(func: PrimFunc, loop_var: Var) -> tuple[PrimFunc, None]:
    """Run the iterations of a loop on the CPU's threads."""
    return _set_kind(func, loop_var, "parallel", "parallel", "parallelized")


def vectorize(func: PrimFunc, loop_var: Var) -> tuple[PrimFunc, None]:
    """Run the iterations of a loop as SIMD lanes."""
    return _set_kind(func, loop_var, "vectorize", "vectorized", "vectorized")


def unroll(func: PrimFunc, loop_var: Var) -> tuple[PrimFunc, None]:
    """Unroll a loop (always legal)."""
    return _set_kind(func, loop_var, "unroll", "unrolled", "unrolled")


def bind(func: PrimFunc, loop_var: Var, thread_axis: str) -> tuple[PrimFunc, None]:
    """Bind a loop to a GPU thread axis (blockIdx.x, threadIdx.y, vthread.z, ...)."""
    loop, path = find_loop(func, loop_var, "bind")
    if thread_axis not in THREAD_TAGS:
        import difflib

        close = difflib.get_close_matches(str(thread_axis), THREAD_TAGS, n=1)
        raise schedule_error(func, "bind", f"unknown thread axis {thread_axis!r} for {loop_name(loop_var)}",
                             loops=(loop_var,), rule="thread axes are " + ", ".join(THREAD_TAGS),
                             fix=f"did you mean {close[0]!r}?" if close else None)
    if loop.kind == "thread_binding" and loop.thread_tag:
        raise schedule_error(func, "bind", f"{loop_name(loop_var)} is already bound to {loop.thread_tag!r}; "
                             f"binding it to {thread_axis!r} would replace that binding", loops=(loop_var,),
                             rule="a loop is bound to one thread axis, once",
                             fix="split the loop first (one part per axis), or bind another loop")
    for f in [f for f in path if isinstance(f, For)]:
        if f.thread_tag == thread_axis:
            _check_rebind(func, f, loop, thread_axis, loop_var)
    for f in _inner_loops(loop):
        if f.thread_tag == thread_axis:
            _check_rebind(func, loop, f, thread_axis, loop_var)
    if thread_axis.startswith("threadIdx") and _cross_thread_reduction(func, loop):
        # TVM's cross-thread reduction: the threads of the loop reduce together (see
        # tdsl.ir.reduction_form); on the CPU the loop stays an ordinary loop
        check_affine_bindings(func, "bind", loop, loop.loop_var)
        new = dataclasses.replace(loop, kind="thread_binding", thread_tag=thread_axis)
        return _replace(func, path, loop, new), None
    return _set_kind(func, loop_var, "bind", "thread_binding", f"bound to {thread_axis}", thread_axis)


def _cross_thread_reduction(func: PrimFunc, loop: For) -> bool:
    """Every block under `loop` is a simple reduction (tdsl.ir.reduction_form) whose
    reduction iterators, and only those, the loop drives."""
    from ...ir.reduction_form import simple_reduction

    realizes = list(all_realizes(loop.body))
    if not realizes:
        return False
    for r in realizes:
        uses = [(iv, v) for iv, v in zip(r.block.iter_vars, r.iter_values) if loop.loop_var in free_vars(v)]
        if not uses or any(iv.kind != "R" for iv, _ in uses) or simple_reduction(r.block) is None:
            return False
    return True


def _check_rebind(func: PrimFunc, outer: For, inner: For, axis: str, culprit: Var) -> None:
    """Two nested loops on one threadIdx axis are one thread index on the GPU (the CUDA backend
    guards the shorter): thread t runs iteration t of `inner` once, where the program runs all
    of `inner` at every iteration of `outer`. Both mean the same when `inner` is not longer than
    `outer` (every iteration has a thread), its code does not depend on `outer`, and rerunning
    it gives the same result (no block under it reads what it writes): a cooperative fetch of a
    shared tile, split over the threads that use it."""
    def refuse(why: str, fix: str) -> None:
        raise schedule_error(func, "bind", f"{loop_name(outer.loop_var)} around {loop_name(inner.loop_var)} is "
                             f"already bound to {axis}, and {why}", loops=(outer.loop_var, inner.loop_var),
                             rule="nested loops can share a threadIdx axis only when the inner one is a "
                                  "repeatable piece of work independent of the outer one (a cooperative fetch)",
                             fix=fix)

    if not axis.startswith("threadIdx"):
        refuse("only threadIdx axes can be shared by nested loops", "fuse the two loops first, or bind another axis")
    if not prove(inner.extent <= outer.extent):
        refuse(f"the inner extent {expr_text(inner.extent)} may exceed the outer {expr_text(outer.extent)}, so some "
               "of its iterations would have no thread", "split the inner loop by the outer loop's extent first")
    used: set[Var] = set()
    for r in all_realizes(inner.body):
        used |= set().union(*(free_vars(v) for v in r.iter_values)) | free_vars(r.predicate)
    for f in _inner_loops(inner):
        used |= free_vars(f.min) | free_vars(f.extent)
    if outer.loop_var in used:
        refuse(f"the code under {loop_name(inner.loop_var)} depends on {loop_name(outer.loop_var)}",
               "compute the inner work at a loop outside the outer one, or bind another axis")
    for r in all_realizes(inner.body):
        b = r.block
        again = {x.buffer for x in b.reads} & {x.buffer for x in b.writes}
        if b.init is not None or again:
            refuse(f"{block_name(b.name)} under it updates "
                   f"{', '.join(sorted(x.name for x in again)) or 'its output'} in place, so running it once per "
                   "thread would change the result", "bind another axis")


def _inner_loops(loop: For) -> list[For]:
    out: list[For] = []
    stack: list[Stmt] = [loop.body]
    while stack:
        node = stack.pop()
        if isinstance(node, For):
            out.append(node)
        stack.extend(children(node))  # loops inside child blocks still nest physically
    return out
