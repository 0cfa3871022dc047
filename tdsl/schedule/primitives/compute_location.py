"""Compute location primitives: compute_at, reverse_compute_at, compute_inline, reverse_compute_inline.

compute_at / reverse_compute_at move a block under a loop of the same scope and give it new loops
(`ax0, ax1, ...`, one per iterator) over just the instances needed (compute_at: what the
consumers under the loop read) or possible (reverse_compute_at: what the producers under the
loop have written) at each iteration of that loop; compute_at places it right before the first
consumer under the loop, reverse_compute_at at the end of the loop body (TVM's index=-1). Whatever TVM leaves to the user's care is
checked here (see apache/tvm#15911): every element a moved consumer reads must have been written
by the producers under the loop at that iteration or an earlier one, every instance of the
block still runs, and no other block's view of the data changes. When constant, the check
walks the loop iterations one by one; symbolic extents are handled by proofs.

compute_at of a block writing a "shared" buffer relaxes the needed region over the
threadIdx-bound loops around the anchor (TensorIR's rule, analysis.thread_relaxed_loops): the
copy fills the tile of the whole thread block, so that its loops can then be spread over the
threads (a cooperative fetch: fuse, split by the thread count, bind to threadIdx).

compute_at reads the instances to compute off the producer's store indices: each is a spatial
iterator or one digit of it, as transform_layout leaves them (`B[j // 16, k, j % 16]`); the
needed box is inverted digit by digit (`_invert_box`), so packing a panel under a loop works.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

from ...arith import const_bound, eval_array, eval_int, linear_form, prove, relax, simplify
from ...errors import ScheduleError
from ...ir import (
    TRUE,
    Binary,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    For,
    IntImm,
    IRMutator,
    IterVar,
    PrimExpr,
    PrimFunc,
    Range,
    SeqStmt,
    Stmt,
    Var,
    as_expr,
    binary,
    collect,
    const,
    free_vars,
    logical_and,
    max_,
    min_,
    same_expr,
    substitute,
)
from ...ir.functor import post_order_visit
from ...ir.tree import (
    Path,
    all_realizes,
    child_realizes,
    children,
    fresh_name,
    loops_in_scope,
    path_ranges,
    replace_at,
    var_names,
)
from ..analysis import (
    check_affine_bindings,
    expr_text,
    index_as,
    refuse_conditions,
    same_width,
    simplify_realizes,
    thread_relaxed_loops,
)
from ..errors import block_name, loop_name, schedule_error
from ..tree import (
    alloc_site,
    drop_unused_allocs,
    find_block,
    find_loop,
    is_true,
    outer_ranges,
    refresh_block,
    refresh_touching,
    remove_realize,
)
from .instances import instance_grid as _instance_grid
from .instances import written_mask
from .read_inverse import instance_spans, read_inverse

Box = list[tuple[PrimExpr, PrimExpr]]  # inclusive (lo, hi) per dimension
_ENUM_LIMIT = 20_000  # loop iterations walked by the exact checks
_CELL_LIMIT = 2_000_000  # buffer elements tracked by the exact checks


# small helpers -------------------------------------------------------------------------------

def _reads(block: Block) -> set[Buffer]:
    return {r.buffer for r in block.reads}


def _writes(block: Block) -> set[Buffer]:
    return {r.buffer for r in block.writes}


def _names(buffers) -> str:
    return ", ".join(sorted(b.name for b in buffers))


def _below(path: Path, anchor: Stmt) -> Path:
    """The part of `path` strictly below `anchor`."""
    idx = next(i for i, p in enumerate(path) if p is anchor)
    return path[idx + 1:]


def _region_box(realize: BlockRealize, region, below: Path) -> Box:
    """A block's region with its bindings substituted, relaxed over the loops and iterators of
    `below` (the statements between an anchor loop and the block)."""
    vmap = {iv.var: v for iv, v in zip(realize.block.iter_vars, realize.iter_values)}
    ranges = path_ranges(below)
    out = []
    for r in region.region:
        lo = relax(substitute(r.min, vmap), ranges)[0]
        hi = relax(substitute(r.min + r.extent - 1, vmap), ranges)[1]
        out.append((simplify(lo), simplify(hi)))
    return out


def _buffer_box(block: Block, regions, buf: Buffer) -> object:
    return next(r for r in regions if r.buffer is buf)


def _child_realizes_with_paths(stmt: Stmt) -> list[tuple[BlockRealize, Path]]:
    """The block realizes under `stmt` (not inside other blocks), with paths relative to `stmt`."""
    out: list[tuple[BlockRealize, Path]] = []

    def walk(node: Stmt, path: Path) -> None:
        if isinstance(node, BlockRealize):
            out.append((node, path))
            return
        for c in children(node):
            walk(c, path + (node,))

    walk(stmt, ())
    return out


def _body_items(loop: For) -> list[Stmt]:
    return list(loop.body.seq) if isinstance(loop.body, SeqStmt) else [loop.body]


# legality shared by compute_at and reverse_compute_at ---------------------------------------

def _check_movable(func: PrimFunc, primitive: str, realize: BlockRealize, path: Path,
                   nested_ok: bool = False) -> None:
    """The block's instances can be regenerated from its iterator domains: no nested blocks
    (unless `nested_ok`: then its body may not use the loops around it), no predicate, affine
    bindings that visit every point of the domain once, and running an instance again gives the
    same result."""
    b = realize.block
    loops = loops_in_scope(path)
    if child_realizes(realize):
        if not nested_ok:
            raise schedule_error(func, primitive, f"{block_name(b.name)} holds other blocks", blocks=(b.name,),
                                 rule=f"{primitive} moves a block without nested blocks")
        outer = {f.loop_var for f in loops} & free_vars(b.body)
        if outer:
            name = sorted(v.name for v in outer)[0]
            raise schedule_error(func, primitive, f"the blocks inside {block_name(b.name)} use the loop {name} "
                                 "around it, which the move replaces", blocks=(b.name,),
                                 rule="the body of a moved block may use only its own iterators",
                                 fix="bind the inner blocks through the outer block's iterators")
    refuse_conditions(func, primitive, b.name, path)
    if loops:
        check_affine_bindings(func, primitive, loops[0], loops[0].loop_var)
    exact = _instances_are_domain(realize, loops)
    if exact is None and not is_true(realize.predicate):
        raise schedule_error(func, primitive, f"{block_name(b.name)} has the predicate "
                             f"T.where({expr_text(realize.predicate)}), which {primitive} cannot carry to new loops",
                             blocks=(b.name,), rule=f"{primitive} regenerates the loops of a block from its "
                             "iterator domains, so the block must run on its whole domain",
                             fix=f"apply {primitive} before the split that added the predicate")
    if exact is False:
        raise schedule_error(func, primitive, f"the loops of {block_name(b.name)} do not run every instance of "
                             "its iterator domains", blocks=(b.name,),
                             rule=f"{primitive} regenerates every instance of the domain",
                             fix="bind each iterator to its whole domain")
    if exact is None:
        _check_bindings_symbolic(func, primitive, realize, path, loops)
    if b.init is None and _reads(b) & _writes(b):
        shared = _names(_reads(b) & _writes(b))
        raise schedule_error(func, primitive, f"{block_name(b.name)} reads and updates {shared} without a "
                             "T.init, so running an instance again would change the result", blocks=(b.name,),
                             rule=f"{primitive} may run some instances more than once (overlapping regions)",
                             fix="give the reduction a T.init, or leave the block where it is")


def _check_bindings_symbolic(func: PrimFunc, primitive: str, realize: BlockRealize, path: Path,
                             loops: list[For]) -> None:
    b = realize.block
    ranges = path_ranges(path)
    used: set[Var] = set()
    for iv, value in zip(b.iter_vars, realize.iter_values):
        lo, hi = relax(value, {f.loop_var: Range(f.min, f.extent) for f in loops})
        inside = prove(lo >= iv.dom.min, ranges) and prove(hi <= iv.dom.min + iv.dom.extent - 1, ranges)
        if not (inside or _symbolic_digit_inside(value, iv.dom, loops, ranges)):
            raise schedule_error(func, primitive, f"{block_name(b.name)} binds {iv.var.name} to "
                                 f"{expr_text(value)}, which leaves its domain", blocks=(b.name,),
                                 rule="the bindings of a moved block must stay inside their domains")
        used |= free_vars(value) & {f.loop_var for f in loops}
    points = [f.extent for f in loops if f.loop_var in used]
    doms = [iv.dom.extent for iv in b.iter_vars]
    if all(isinstance(e, IntImm) for e in points + doms):
        n_loops = math.prod(e.value for e in points)
        n_dom = math.prod(e.value for e in doms)
        if n_loops != n_dom:
            raise schedule_error(func, primitive, f"the loops of {block_name(b.name)} run {n_loops} instances "
                                 f"but its iterator domains hold {n_dom}", blocks=(b.name,),
                                 rule=f"{primitive} regenerates every instance of the domain exactly once",
                                 fix="bind each iterator to its whole domain")


def _symbolic_digit_inside(value: PrimExpr, dom: Range, loops: list[For], ranges: dict[Var, Range]) -> bool:
    """`x // d` or `x % d` (a fused loop's digits over a symbolic size, `ax // n` with `ax` in
    [0, 32 * n)) stays in `dom`: x >= 0, d >= 1, and x <= (max + 1) * d - 1 for the division, d <=
    the domain's extent for the modulo. d >= 1 holds when proved, or when a loop running x has
    the extent c * d (c > 0): the body runs only when that extent is at least 1."""
    if not (isinstance(value, Binary) and value.op in ("floordiv", "floormod")):
        return False
    x, d = value.a, value.b
    own = {f.loop_var: Range(f.min, f.extent) for f in loops}
    if free_vars(d) & set(own) or not prove(dom.min.eq(0), ranges):
        return False
    xlo, xhi = relax(x, own)
    multiple = any(f.loop_var in free_vars(x) and isinstance(f.extent, Binary) and f.extent.op == "mul"
                   and any(same_expr(a, d) and isinstance(c, IntImm) and c.value > 0
                           for a, c in ((f.extent.a, f.extent.b), (f.extent.b, f.extent.a)))
                   for f in loops)
    if not (prove(xlo >= 0, ranges) and (multiple or prove(d >= 1, ranges))):
        return False
    if value.op == "floormod":
        return prove(d <= dom.extent, ranges)
    return prove(xhi <= dom.extent * d - 1, ranges)


def _instances_are_domain(realize: BlockRealize, loops: list[For]) -> bool | None:
    """Whether the instances the loops run (bindings where the predicate holds) are exactly the
    iterator domain, found by running the loops; None when they are not constant and small."""
    import numpy as np

    b = realize.block
    if not all(isinstance(x, IntImm) for iv in b.iter_vars for x in (iv.dom.min, iv.dom.extent)):
        return None
    dom = [iv.dom.extent.value for iv in b.iter_vars]
    if math.prod(dom) > _CELL_LIMIT:
        return None
    grid = _instance_grid(realize, loops)
    if grid is None:
        return None
    values, count = grid
    cols = [values[iv.var] - iv.dom.min.value for iv in b.iter_vars]
    if not cols:
        return count > 0
    if any(((c < 0) | (c >= n)).any() for c, n in zip(cols, dom)):
        return False
    return len(np.unique(np.ravel_multi_index(cols, dom))) == math.prod(dom)


def _same_scope(func: PrimFunc, primitive: str, block: Block, bpath: Path, loop: For, lpath: Path) -> None:
    bscope = next((p for p in reversed(bpath) if isinstance(p, Block)), None)
    lscope = next((p for p in reversed(lpath) if isinstance(p, Block)), None)
    if any(p is loop for p in bpath):
        raise schedule_error(func, primitive, f"{loop_name(loop.loop_var)} is an ancestor of {block_name(block.name)}: "
                             "the block is already under it",
                             loops=(loop.loop_var,), blocks=(block.name,),
                             rule=f"{primitive} moves a block under a loop of another loop nest")
    if bscope is not lscope:
        raise schedule_error(func, primitive, f"{loop_name(loop.loop_var)} and {block_name(block.name)} are not in "
                             "the same block scope (they are in different blocks)", loops=(loop.loop_var,),
                             blocks=(block.name,),
                             rule=f"{primitive} moves a block within its own scope (enclosing block)")


def _new_nest(func: PrimFunc, realize: BlockRealize, boxes: dict[Var, tuple[PrimExpr, PrimExpr]],
              ranges: dict[Var, Range], anchors: list[For],
              preserve_unit_loops: bool = False) -> tuple[Stmt, dict[Var, tuple[PrimExpr, PrimExpr]]]:
    """Loops `ax0, ...` (one per iterator, in order) around the block: an iterator in `boxes` runs
    over its (lo, hi) clipped to its domain (a T.where where the clip is not constant), the others
    over their whole domain; an iterator over one value gets no loop unless `preserve_unit_loops`.
    Also returns the clipped (lo, hi) of every iterator."""
    b = realize.block
    taken = var_names(func)
    loops: list[tuple[Var, PrimExpr]] = []
    values: list[PrimExpr] = []
    preds: list[PrimExpr] = []
    spans: dict[Var, tuple[PrimExpr, PrimExpr]] = {}
    for k, iv in enumerate(b.iter_vars):
        dt = iv.var.dtype
        dmin, dmax = iv.dom.min, simplify(iv.dom.min + iv.dom.extent - 1)
        lo, hi = boxes.get(iv.var, (dmin, dmax))
        lo, hi = index_as(lo, dt), index_as(hi, dt)  # a box found through int64 indices of int32 iterators
        low_ok, high_ok = prove(lo >= dmin, ranges), prove(hi <= dmax, ranges)
        if not (low_ok and high_ok) and same_expr(lo, hi) and _symbolic_digit_inside(lo, iv.dom, anchors, ranges):
            low_ok = high_ok = True  # a digit of a fused loop over a symbolic size (ax // n)
        spans[iv.var] = (lo if low_ok else simplify(max_(lo, dmin), ranges),
                         hi if high_ok else simplify(min_(hi, dmax), ranges))
        if not low_ok and not high_ok and prove(lo <= dmin, ranges) and prove(hi >= dmax, ranges):
            lo, hi, low_ok, high_ok = dmin, dmax, True, True  # the box holds the whole domain
        extent = simplify(hi - lo + 1, ranges)
        single = isinstance(extent, IntImm) and extent.value == 1 and not preserve_unit_loops
        ax = None if single else Var(fresh_name(f"ax{k}", taken), dt)
        value = lo if ax is None else simplify(lo + ax, ranges)
        if not low_ok:
            preds.append(value >= dmin)
        if not high_ok:
            preds.append(value <= dmax)
        values.append(value)
        if ax is None:
            continue
        if not isinstance(extent, IntImm):
            cb = _max_over(extent, anchors, ranges)
            if cb is not None:
                preds.append(ax < extent)
                extent = const(cb, dt)
        loops.append((ax, extent))
    pred: PrimExpr = TRUE
    for p in preds:
        pred = p if pred is TRUE else logical_and(pred, p)
    stmt: Stmt = BlockRealize(tuple(values), pred, b)
    for ax, extent in reversed(loops):
        stmt = For(ax, const(0, ax.dtype), extent, "serial", stmt)
    units = frozenset(ax for ax, extent in loops if isinstance(extent, IntImm) and extent.value == 1)
    return simplify_realizes(stmt, ranges, units if preserve_unit_loops else frozenset()), spans


def _max_over(expr: PrimExpr, anchors: list[For], ranges: dict[Var, Range]) -> int | None:
    """The largest value of `expr` over the anchor loops: by walking them when constant and small
    (tight where bounds of min/max expressions are loose), else its constant bound."""
    walk = _walk(anchors, ranges)
    if walk is not None:
        try:
            return max(eval_int(expr, env) for env in walk)
        except (ValueError, KeyError):
            pass
    return const_bound(expr, ranges)[1]


def _insert_in_loop(func: PrimFunc, loop_var: Var, pos: int, nest: Stmt) -> PrimFunc:
    loop, lpath = find_loop(func, loop_var, "insert")
    items = _body_items(loop)
    items.insert(pos, nest)
    return replace_at(func, lpath, loop, dataclasses.replace(loop, body=SeqStmt(tuple(items))))


def _without(func: PrimFunc, realize: BlockRealize) -> PrimFunc:
    body = remove_realize(func.body, realize)
    return func.with_body(body if body is not None else SeqStmt(()))


def _split_point(bfull: Path, lfull: Path) -> tuple[list[Stmt], int, int]:
    """The statements of the innermost sequence that holds both ends of the paths (root to the
    block's realize, root to the loop), and the indices of the ones holding each end; (the one
    statement, 0, 0) when no sequence separates them."""
    common = 0
    while common < min(len(bfull), len(lfull)) and bfull[common] is lfull[common]:
        common += 1
    parent = bfull[common - 1]
    if isinstance(parent, SeqStmt) and common < min(len(bfull), len(lfull)):
        items = list(parent.seq)
        return items, _index_of(items, bfull[common]), _index_of(items, lfull[common])
    return [bfull[common]] if common < len(bfull) else [parent], 0, 0


def _index_of(items: list[Stmt], stmt: Stmt) -> int:
    return next(i for i, s in enumerate(items) if s is stmt)


def _between_conflicts(func: PrimFunc, primitive: str, block: Block, bpath: Path, loop: For, lpath: Path,
                       moved_first: bool) -> None:
    """Blocks of the scope between the block's old place and the loop (those in the loop's nest but
    not under the loop included) must not share data with the moved block. The two are ordered
    in the innermost sequence holding both: the body of their block, or of a loop around both
    (nests already computed at a row loop)."""
    items, bidx, lidx = _split_point(bpath + (next(r for r in all_realizes(bpath[-1]) if r.block is block),),
                                     lpath + (loop,))
    lo, hi = (bidx, lidx) if moved_first else (lidx, bidx)
    if lo >= hi:
        where = "before" if moved_first else "after"
        other = "reverse_compute_at" if moved_first else "compute_at"
        output = moved_first and not any(_reads(r.block) & _writes(block) for s in items[bidx + 1:]
                                         for r in all_realizes(s))
        note = " (it is an output block: no later block reads what it writes)" if output else ""
        raise schedule_error(func, primitive, f"{block_name(block.name)} does not come {where} the loop nest of "
                             f"{loop_name(loop.loop_var)}{note}", loops=(loop.loop_var,), blocks=(block.name,),
                             rule=f"{primitive} moves a {'producer into a later' if moved_first else 'consumer into an earlier'} "
                                  "loop nest",
                             fix=f"use sch.{other}")
    between = [r for s in items[lo + 1:hi] for r in all_realizes(s)]
    # blocks sharing the moved block's own nest, on the side it moves across
    own = all_realizes(items[bidx])
    at = next(k for k, r in enumerate(own) if r.block is block)
    inside = {id(r) for r in all_realizes(own[at])}  # the moved block's own inner blocks move with it
    between += [r for r in (own[at + 1:] if moved_first else own[:at]) if id(r) not in inside]
    under = {id(r) for r in all_realizes(loop)}
    between += [r for r in all_realizes(items[lidx]) if id(r) not in under]
    for r in between:
        o = r.block
        if o is block:
            continue
        clash = (_writes(o) & (_reads(block) | _writes(block))) | (_reads(o) & _writes(block))
        if clash:
            raise schedule_error(func, primitive, f"{block_name(o.name)} uses {_names(clash)} between the place of "
                                 f"{block_name(block.name)} and {loop_name(loop.loop_var)}, so moving the block "
                                 "would change what one of them sees", loops=(loop.loop_var,),
                                 blocks=(block.name, o.name),
                                 rule=f"{primitive} cannot move a block across another that shares its data (a "
                                      "block moves alone when it is the complete block of what it writes)",
                                 fix=f"first move {block_name(o.name)} with sch.{primitive} (working from the "
                                     f"{'last consumer back' if moved_first else 'first producer on'}), or pick a "
                                     f"loop of a direct {'consumer' if moved_first else 'producer'}")


# the exact / symbolic checks of the new program ---------------------------------------------

class _Site:
    """A block realize under the anchor loop: its position in the loop body and its path below."""

    def __init__(self, realize: BlockRealize, below: Path, pos: int):
        self.realize, self.below, self.pos = realize, below, pos
        self.block = realize.block


def _sites(loop: For) -> list[_Site]:
    out = []
    for pos, item in enumerate(_body_items(loop)):
        for realize, path in _child_realizes_with_paths(item):
            out.append(_Site(realize, path, pos))
    return out


def _produced_box(site: _Site, buf: Buffer) -> Box:
    """What one instance of the site's nest writes to `buf` per anchor iteration, relaxed, and
    kept inside the block's domain-implied write region when the block has a predicate."""
    region = _buffer_box(site.block, site.block.writes, buf)
    return _clip_to_domain(site, region, _region_box(site.realize, region, site.below))


def _span_box(block: Block, region, spans: dict[Var, tuple[PrimExpr, PrimExpr]]) -> Box:
    """A region of the moved block over the exact (lo, hi) of each of its iterators."""
    ranges = {v: Range(lo, simplify(hi - lo + 1)) for v, (lo, hi) in spans.items()}
    out = []
    for r in region.region:
        lo = relax(r.min, ranges)[0]
        hi = relax(r.min + r.extent - 1, ranges)[1]
        out.append((simplify(lo), simplify(hi)))
    return out


def _needed_box(site: _Site, buf: Buffer, clip: bool = True) -> Box:
    """What the site reads of `buf` per anchor iteration (kept inside its domain-implied read
    region when the block has a predicate and `clip`)."""
    region = _buffer_box(site.block, site.block.reads, buf)
    box = _region_box(site.realize, region, site.below)
    return _clip_to_domain(site, region, box) if clip else box


def _clip_to_domain(site: _Site, region, box: Box) -> Box:
    if is_true(site.realize.predicate):
        return box
    dom = {iv.var: iv.dom for iv in site.block.iter_vars}
    out = []
    for (lo, hi), r in zip(box, region.region):
        dlo, dhi = relax(r.min, dom)[0], relax(r.min + r.extent - 1, dom)[1]
        out.append((simplify(max_(lo, dlo)), simplify(min_(hi, dhi))))
    return out


def _anchor_vars(lpath: Path, loop: For) -> list[For]:
    """The anchor loop and the loops around it in its scope, outer to inner."""
    return loops_in_scope(lpath + (loop,))


def _walk(loops: list[For], ranges: dict[Var, Range]):
    """Every assignment of `loops` in execution order, or None when not constant and small."""
    extents = []
    for f in loops:
        if not (isinstance(f.min, IntImm) and isinstance(f.extent, IntImm)):
            return None
        extents.append(range(f.min.value, f.min.value + f.extent.value))
    if math.prod(len(e) for e in extents) > _ENUM_LIMIT:
        return None
    return [dict(zip([f.loop_var for f in loops], vals)) for vals in itertools.product(*extents)]


def _shape_of(buf: Buffer) -> tuple[int, ...] | None:
    if all(isinstance(s, IntImm) for s in buf.shape) and math.prod(s.value for s in buf.shape) <= _CELL_LIMIT:
        return tuple(s.value for s in buf.shape)
    return None


def _box_slices(box: Box, env, shape) -> tuple[slice, ...] | None:
    out = []
    for (lo, hi), n in zip(box, shape):
        a, b = eval_int(lo, env), eval_int(hi, env)
        if b < a:
            return None
        out.append(slice(max(a, 0), min(b, n - 1) + 1))
    return tuple(out)


def _box_inside(box: Box, env, shape) -> bool:
    return all(0 <= eval_int(lo, env) and eval_int(hi, env) < n for (lo, hi), n in zip(box, shape))


def _site_writes(site: _Site, buf: Buffer, env: dict, shape, done, budget: list) -> bool:
    """Mark in `done` the elements of `buf` the site's instances write at the anchor iteration
    `env`, instance by instance (a fused and split producer writes a run of a row-major range,
    not the box of rows its relaxed region spans). False when the nest below the anchor is not
    plain constant-evaluable loops, or `budget` (instances left) runs out."""
    loops = [s for s in site.below if isinstance(s, For)]
    if any(not isinstance(s, (For, SeqStmt)) for s in site.below):
        return False
    region = _buffer_box(site.block, site.block.writes, buf)
    realize = site.realize

    def visit(k: int, env: dict) -> bool:
        if k == len(loops):
            budget[0] -= 1
            if budget[0] < 0:
                return False
            if not eval_int(realize.predicate, env):
                return True
            inner = dict(env)
            for iv, v in zip(realize.block.iter_vars, realize.iter_values):
                inner[iv.var] = eval_int(v, env)
            sl = []
            for r, n in zip(region.region, shape):
                lo = eval_int(r.min, inner)
                hi = lo + eval_int(r.extent, inner) - 1
                if hi < lo:
                    return True
                sl.append(slice(max(lo, 0), min(hi, n - 1) + 1))
            done[tuple(sl)] = True
            return True
        f = loops[k]
        lo = eval_int(f.min, env)
        for x in range(lo, lo + eval_int(f.extent, env)):
            env[f.loop_var] = x
            if not visit(k + 1, env):
                return False
        env.pop(f.loop_var, None)
        return True

    return visit(0, dict(env))


def _box_is_exact(site: _Site, buf: Buffer, predicate: bool = True) -> bool:
    """The relaxed box of what the site writes per anchor iteration is all written: no
    predicate (unless `predicate` is False: a tail guard of a symbolic split, whose readers are
    guarded alike), and no floor division or modulo of the loops below the anchor in its bindings
    (a fused loop's digits; digits of the anchor loops are fixed at each iteration)."""
    if predicate and not is_true(site.realize.predicate):
        return False
    below = {s.loop_var for s in site.below if isinstance(s, For)}
    found = []
    for v in site.realize.iter_values:
        post_order_visit(v, lambda n: found.append(n) if isinstance(n, Binary) and n.op in ("floordiv", "floormod")
                         and free_vars(n) & below else None)
    return not found


def _check_flow(func: PrimFunc, primitive: str, loop: For, lpath: Path, writer: _Site, reader: _Site,
                buf: Buffer, produced: Box, needed: Box, exact_writer: bool = False) -> None:
    """Every element of `buf` the reader reads at an iteration of the anchor loop (and its outer
    loops) was written by the writer at that iteration or an earlier one. With `exact_writer`
    (a block already under the anchor writes), its writes are enumerated instance by instance
    when they can be, since its relaxed box may hold elements it has not written yet."""
    fail = schedule_error(
        func, primitive, f"{block_name(reader.block.name)} would read elements of {buf.name} that "
        f"{block_name(writer.block.name)} has not written yet at that iteration of {loop_name(loop.loop_var)}",
        loops=(loop.loop_var,), blocks=(writer.block.name, reader.block.name),
        rule="a block moved under a loop must only read what the blocks under that loop have already produced",
        fix="choose an outer loop, or split the producer so that each iteration produces what the consumer "
            "reads (tdsl refuses the silent wrong result TVM gives here, apache/tvm#15911)")
    anchors = _anchor_vars(lpath, loop)
    ranges = path_ranges(lpath + (loop,))
    shape = _shape_of(buf)
    if shape is not None and (not exact_writer or _box_is_exact(writer, buf)) \
            and _covers_symbolic(produced, needed, ranges) and _inside_symbolic(needed, shape, ranges):
        return   # proved for every iteration at once: what is read there is written there, in bounds
    walk = _walk(anchors, ranges) if shape is not None else None
    if walk is not None:
        import numpy as np

        done = np.zeros(shape, dtype=bool)
        budget = [_ENUM_LIMIT * 10]
        try:
            for env in walk:
                if exact_writer and _site_writes(writer, buf, env, shape, done, budget):
                    pass
                elif exact_writer and not _box_is_exact(writer, buf):
                    raise fail
                else:
                    sl = _box_slices(produced, env, shape)
                    if sl is not None:
                        done[sl] = True
                need = _box_slices(needed, env, shape)
                if need is not None and not (_box_inside(needed, env, shape) and done[need].all()):
                    raise fail
            return
        except (ValueError, KeyError):
            pass  # an expression the evaluator does not know (or a symbolic size): fall back to proofs
    if (exact_writer and not _box_is_exact(writer, buf, predicate=False)) or not _covers_symbolic(produced, needed, ranges):
        raise fail


def _le(a: PrimExpr, b, ranges) -> bool:
    a, b = same_width(a, as_expr(b, a.dtype))
    return prove(a <= b, ranges)


def _covers_symbolic(outer: Box, inner: Box, ranges) -> bool:
    return all(_le(o_lo, i_lo, ranges) and _le(i_hi, o_hi, ranges) for (o_lo, o_hi), (i_lo, i_hi) in zip(outer, inner))


def _inside_symbolic(box: Box, shape: tuple[int, ...], ranges) -> bool:
    return all(prove(lo >= 0, ranges) and _le(hi, n - 1, ranges) for (lo, hi), n in zip(box, shape))


def _check_under_loop(func: PrimFunc, primitive: str, loop_var: Var, moved: str, moved_first: bool,
                      spans: dict[Var, tuple[PrimExpr, PrimExpr]]) -> None:
    """Dependences between the moved block and every other block under the anchor loop."""
    loop, lpath = find_loop(func, loop_var, primitive)
    sites = _sites(loop)
    me = next(s for s in sites if s.block.name == moved)
    for other in sites:
        if other is me:
            continue
        first, second = (me, other) if moved_first else (other, me)
        anti = _reads(first.block) & _writes(second.block)
        out = _writes(first.block) & _writes(second.block)
        if anti or out:
            raise schedule_error(func, primitive, f"{block_name(second.block.name)} overwrites {_names(anti | out)}, "
                                 f"which {block_name(first.block.name)} uses, and both would run under "
                                 f"{loop_name(loop_var)}", loops=(loop_var,),
                                 blocks=(first.block.name, second.block.name),
                                 rule="a moved block cannot interleave with blocks that overwrite its data")
        for buf in _writes(first.block) & _reads(second.block):
            if first is not me:
                _check_final(func, primitive, loop, lpath, first, second, buf)
            if first.pos > second.pos:
                raise schedule_error(func, primitive, f"{block_name(first.block.name)} must run before "
                                     f"{block_name(second.block.name)} under {loop_name(loop_var)} but cannot",
                                     loops=(loop_var,), blocks=(first.block.name, second.block.name),
                                     rule="a producer stays before its consumers")
            produced = _span_box(me.block, _buffer_box(me.block, me.block.writes, buf), spans) \
                if first is me else _produced_box(first, buf)
            needed = _in_shape(_span_box(me.block, _buffer_box(me.block, me.block.reads, buf), spans)
                               if second is me else _needed_box(second, buf), buf)
            _check_flow(func, primitive, loop, lpath, first, second, buf, produced, needed,
                        exact_writer=first is not me)


def _in_shape(box: Box, buf: Buffer) -> Box:
    """`box` clipped to the buffer: a read region past the buffer's edge (`T.reads(B[v:v + 2])`
    whose far element a `T.if_then_else` guards, a concat's other branch) names no element any
    block writes, and a program that ran such a read would be out of bounds anyway."""
    return [(simplify(max_(lo, const(0, lo.dtype))), simplify(min_(hi, index_as(n, hi.dtype) - 1)))
            for (lo, hi), n in zip(box, buf.shape)]


def _check_final(func: PrimFunc, primitive: str, loop: For, lpath: Path, writer: _Site, reader: _Site,
                 buf: Buffer) -> None:
    """A block that updates the same element over iterations of the anchor loop (or a loop around
    it), such as a reduction, has only partial results at any one iteration: nothing under the
    loop may read them."""
    anchors = {f.loop_var for f in _anchor_vars(lpath, loop)}
    region = _buffer_box(writer.block, writer.block.writes, buf)
    indexing = set().union(*(free_vars(r.min) | free_vars(r.extent) for r in region.region))
    for iv, value in zip(writer.block.iter_vars, writer.realize.iter_values):
        # an iterator that does not pick the element written revisits it: the last visit is final
        if (iv.kind == "R" or iv.var not in indexing) and free_vars(value) & anchors:
            raise schedule_error(func, primitive, f"{block_name(writer.block.name)} is still accumulating "
                                 f"{buf.name} across iterations of {loop_name(loop.loop_var)}, so "
                                 f"{block_name(reader.block.name)} would read partial results",
                                 loops=(loop.loop_var,), blocks=(writer.block.name, reader.block.name),
                                 rule="a consumer under a loop can only read results that are final at that "
                                      "iteration", fix="choose a loop outside the reduction loops")


def _check_complete(func: PrimFunc, primitive: str, loop_var: Var, moved: str,
                    spans: dict[Var, tuple[PrimExpr, PrimExpr]]) -> None:
    """Over all iterations of the anchor loop and its outer loops, the moved block's new nest still
    visits every point of its domain (the regions of consecutive iterations leave no gap)."""
    loop, lpath = find_loop(func, loop_var, primitive)
    me = next(s for s in _sites(loop) if s.block.name == moved)
    b = me.block
    vmap_box = [spans[iv.var] for iv in b.iter_vars]
    anchors = _anchor_vars(lpath, loop)
    ranges = path_ranges(lpath + (loop,))
    dom_shape = [iv.dom.extent.value if isinstance(iv.dom.extent, IntImm) else None for iv in b.iter_vars]
    fail = schedule_error(func, primitive, f"the new loops of {block_name(moved)} under {loop_name(loop_var)} "
                          "would skip some of its instances", loops=(loop_var,), blocks=(moved,),
                          rule="every instance of the moved block must still run",
                          fix="choose another loop")
    walk = _walk(anchors, ranges)
    mins = [iv.dom.min.value if isinstance(iv.dom.min, IntImm) else None for iv in b.iter_vars]
    if walk is not None and None not in dom_shape and None not in mins and math.prod(dom_shape) <= _CELL_LIMIT:
        import numpy as np

        seen = np.zeros(dom_shape or [1], dtype=bool)
        try:
            shifted = [(simplify(lo - m), simplify(hi - m)) for (lo, hi), m in zip(vmap_box, mins)]
            for env in walk:
                sl = _box_slices(shifted, env, dom_shape)
                if sl is not None:
                    seen[sl] = True
            if not seen.all():
                raise fail
            return
        except ValueError:
            pass
    if _fused_digits_cover(vmap_box, b, anchors, ranges):
        return
    relax_ranges = {f.loop_var: Range(f.min, f.extent) for f in anchors}
    for (lo, hi), iv in zip(vmap_box, b.iter_vars):
        tlo, thi = relax(lo, relax_ranges)[0], relax(hi, relax_ranges)[1]
        if not (prove(tlo <= iv.dom.min, ranges) and prove(thi >= iv.dom.min + iv.dom.extent - 1, ranges)):
            raise fail
        step = substitute(lo, {loop_var: loop_var + 1})
        if free_vars(lo) & {loop_var} and not prove(step <= hi + 1, ranges):
            raise fail


def _fused_digits_cover(box: Box, b: Block, anchors: list[For], ranges: dict[Var, Range]) -> bool:
    """The moved block's new instances are its whole domain because the anchor loops enter only
    as the digits `x // d`, `x % d` of a loop x over [0, e * d) (a fused loop, symbolic sizes
    included) with iterators over [0, e) and [0, d), and every other iterator runs its whole
    domain at every iteration."""
    anchor_vars = {f.loop_var: f for f in anchors}
    digits: dict[Var, dict[str, tuple[PrimExpr, IterVar]]] = {}
    for (lo, hi), iv in zip(box, b.iter_vars):
        if not free_vars(lo) & set(anchor_vars) and not free_vars(hi) & set(anchor_vars):
            if prove(lo <= iv.dom.min, ranges) and prove(hi >= iv.dom.min + iv.dom.extent - 1, ranges):
                continue
            return False
        # the clip to the domain _new_nest adds where it cannot prove the digit inside it
        lo = lo.a if isinstance(lo, Binary) and lo.op == "max" else lo
        hi = hi.a if isinstance(hi, Binary) and hi.op == "min" else hi
        ok = prove(lo.eq(hi), ranges) and isinstance(lo, Binary) and lo.op in ("floordiv", "floormod") \
            and isinstance(lo.a, Var) and lo.a in anchor_vars and prove(iv.dom.min.eq(0), ranges)
        if not ok or lo.op in digits.setdefault(lo.a, {}):
            return False
        digits[lo.a][lo.op] = (lo.b, iv)
    for x, pair in digits.items():
        if set(pair) != {"floordiv", "floormod"}:
            return False
        (d, div_iv), (d2, mod_iv) = pair["floordiv"], pair["floormod"]
        f = anchor_vars[x]
        if not (same_expr(d, d2) and prove(f.min.eq(0), ranges) and prove(mod_iv.dom.extent.eq(d), ranges)
                and prove(f.extent.eq(div_iv.dom.extent * d), ranges)):
            return False
    return True


# compute_at ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Digit:
    """A store index `(var // step) % radix` (radix None: no modulo), one digit of `var` in a
    mixed-radix layout such as transform_layout's ``lambda i: (i // 16, i % 16)``; `mirror` c
    stands for the reversed index `c - var` (TVM's `Y[9 - vi, 9 - vj]`), which is its only digit;
    `tile` t for the run `var * t .. var * t + t - 1` a block holding blocks writes (a blockized
    producer's `T.writes(B[vio * 16 : vio * 16 + 16])`), also its only digit."""
    var: Var
    step: int
    radix: int | None
    mirror: int | None = None
    tile: int | None = None


def _tile_digit(r: Range) -> _Digit | None:
    """The digit of a write region `v * t : v * t + t` (t constant), or of a point `v`."""
    if isinstance(r.extent, IntImm) and r.extent.value == 1:
        return _digit(r.min)
    if not (isinstance(r.extent, IntImm) and isinstance(r.min, Binary) and r.min.op == "mul"):
        return None
    a, b = r.min.a, r.min.b
    v, t = (a, b) if isinstance(a, Var) else (b, a)
    if isinstance(v, Var) and isinstance(t, IntImm) and t.value == r.extent.value > 0:
        return _Digit(v, 1, None, tile=t.value)
    return None


def _digit(index: PrimExpr) -> _Digit | None:
    if isinstance(index, Var):
        return _Digit(index, 1, None)
    if isinstance(index, Binary) and index.op == "sub" and isinstance(index.a, IntImm) and isinstance(index.b, Var):
        return _Digit(index.b, 1, None, mirror=index.a.value)
    if isinstance(index, Binary) and index.op in ("floordiv", "floormod") and isinstance(index.b, IntImm) \
            and index.b.value > 0:
        inner, c = _digit(index.a), index.b.value
        if inner is None or inner.mirror is not None or (inner.radix is not None and inner.radix % c != 0):
            return None  # a digit that straddles the period of the inner modulo
        if index.op == "floordiv":  # (v // s) % r // c == (v // (s * c)) % (r / c)
            return _Digit(inner.var, inner.step * c, None if inner.radix is None else inner.radix // c)
        return _Digit(inner.var, inner.step, c)
    return None


def _complete_radix(digits: list[_Digit]) -> bool:
    """The digits of one iterator (any order) spell it out exactly once: steps 1, m0, m0*m1, ...
    with no modulo on the last, so the store is one-to-one in that iterator."""
    if any(d.tile for d in digits):
        return len(digits) == 1
    digits = sorted(digits, key=lambda d: d.step)
    if digits[0].step != 1 or digits[-1].radix is not None:
        return False
    return all(d.radix is not None and d.step * d.radix == nxt.step for d, nxt in itertools.pairwise(digits))


def _check_regions_cover(func: PrimFunc, primitive: str, block: Block) -> None:
    """The write regions of a block holding blocks (which may be written by hand) hold what its
    inner blocks write, at every level of nesting."""
    ranges = {iv.var: iv.dom for iv in block.iter_vars}
    for inner, below in _child_realizes_with_paths(block.body):
        for w in inner.block.writes:
            outer = next((r for r in block.writes if r.buffer is w.buffer), None)
            box = _region_box(inner, w, below)
            ok = outer is not None and all(
                _le(r.min, lo, ranges) and _le(hi, simplify(r.min + r.extent - 1), ranges)
                for r, (lo, hi) in zip(outer.region, box))
            if not ok:
                raise schedule_error(func, primitive, f"{block_name(inner.block.name)} writes {w.buffer.name} "
                                     f"outside the T.writes region of {block_name(block.name)}",
                                     blocks=(block.name, inner.block.name),
                                     rule=f"{primitive} moves a block holding blocks by its write regions, so "
                                          "they must hold every element its inner blocks write",
                                     fix=f"widen the T.writes of {block_name(block.name)}")
        if collect(inner.block.body, BlockRealize):
            _check_regions_cover(func, primitive, inner.block)


def _store_iters(func: PrimFunc, primitive: str, block: Block) -> dict[Buffer, list[_Digit | None]]:
    """For each buffer the block writes, the digit of a spatial iterator indexing each dimension
    (None for a constant index): a plain iterator, or a digit map like transform_layout's. A block
    holding blocks is read through its write regions (whole tiles of its iterators)."""
    spatial = {iv.var for iv in block.iter_vars if iv.kind == "S"}
    out: dict[Buffer, list[_Digit | None]] = {}
    nested = bool(collect(block.body, BlockRealize))
    stores: list[tuple[Buffer, list[PrimExpr], list[_Digit | None]]] = []
    if nested:
        _check_regions_cover(func, primitive, block)
        for w in block.writes:
            mins = [r.min for r in w.region]
            stores.append((w.buffer, mins, [None if not free_vars(r.min) and isinstance(r.extent, IntImm)
                                            and r.extent.value == 1 else _tile_digit(r) for r in w.region]))
    else:
        for st in collect(block.body, BufferStore) + (collect(block.init, BufferStore) if block.init else []):
            # a constant pins its dimension
            stores.append((st.buffer, list(st.indices), [None if not free_vars(i) else _digit(i) for i in st.indices]))
    for buffer, indices, idx in stores:
        ok = all(d is not None for d, i in zip(idx, indices) if free_vars(i))
        ok = ok and (not nested or all(d is not None or not free_vars(i) for d, i in zip(idx, indices)))
        named = [d for d in idx if d is not None]
        by_var: dict[Var, list[_Digit]] = {}
        for d in named:
            by_var.setdefault(d.var, []).append(d)
        ok = ok and all(v in spatial for v in by_var) and all(_complete_radix(ds) for ds in by_var.values()) \
            and all(len(ds) == 1 for ds in by_var.values() if any(d.mirror is not None or d.tile for d in ds))
        if not ok or (buffer in out and out[buffer] != idx):
            raise schedule_error(func, primitive, f"{block_name(block.name)} stores to {buffer.name}"
                                 f"[{', '.join(expr_text(i) for i in indices)}], not at distinct spatial "
                                 "iterators", blocks=(block.name,),
                                 rule=f"{primitive} derives the instances to compute from the written elements, "
                                      "so each index of a store must be its own spatial iterator (or one digit "
                                      "of it, as in i // 16, i % 16; a block holding blocks writes whole tiles "
                                      "`v * t : v * t + t`)")
        out[buffer] = idx
    return out


def _invert_box(digits: list[_Digit | None], box: Box, shape, ranges) -> dict[Var, tuple[PrimExpr, PrimExpr]]:
    """Per iterator, the (lo, hi) whose instances write every element of `box` they can write.

    Digits are read from the most significant down while the box pins them to one value; the
    first digit with a range contributes whole periods of the digits below it (a superset of the
    box when it is not aligned, exact for the usual tiles: `i // 16` over [2t, 2t + 1] gives i in
    [32t, 32t + 31])."""
    by_var: dict[Var, list[tuple[_Digit, tuple[PrimExpr, PrimExpr]]]] = {}
    for d, (lo, hi), extent in zip(digits, box, shape):
        if d is None:
            continue
        if d.step != 1 or d.radix is not None:
            # a constant bound past the buffer (an index the relaxation could not bound) would
            # only grow when scaled by the step: keep it inside the dimension
            lo = const(0, lo.dtype) if isinstance(lo, IntImm) and lo.value < 0 else lo
            if isinstance(hi, IntImm) and isinstance(extent, IntImm) and hi.value >= extent.value:
                hi = const(extent.value - 1, hi.dtype)
        by_var.setdefault(d.var, []).append((d, (lo, hi)))
    out: dict[Var, tuple[PrimExpr, PrimExpr]] = {}
    for v, ds in by_var.items():
        if len(ds) == 1 and ds[0][0].tile:  # the tiles holding the box
            (d, (lo, hi)), = ds
            t = const(d.tile, v.dtype)
            out[v] = (simplify(binary("floordiv", lo, t), ranges), simplify(binary("floordiv", hi, t), ranges))
            continue
        if len(ds) == 1 and ds[0][0].step == 1:  # the iterator itself indexes the dimension
            (d, (lo, hi)), = ds
            out[v] = (lo, hi) if d.mirror is None else \
                (simplify(const(d.mirror, v.dtype) - hi, ranges), simplify(const(d.mirror, v.dtype) - lo, ranges))
            continue
        lo: PrimExpr = const(0, v.dtype)
        hi: PrimExpr = const(0, v.dtype)
        for d, (dlo, dhi) in sorted(ds, key=lambda x: -x[0].step):
            step = const(d.step, v.dtype)
            lo, hi = lo + dlo * step, hi + dhi * step
            if not prove(dlo.eq(dhi), ranges):
                hi = hi + (d.step - 1)
                break
        out[v] = (simplify(lo, ranges), simplify(hi, ranges))
    return out


def _last_writer(items: list[Stmt], b: Block) -> int:
    """The index of the last of `items` writing what `b` reads (-1: none)."""
    return max((i for i, it in enumerate(items) for r in all_realizes(it) if _writes(r.block) & _reads(b)),
               default=-1)


def _first_user(items: list[Stmt], b: Block, after: int = -1) -> int:
    """The index of the first of `items` after `after` reading or writing what `b` writes
    (len(items): none)."""
    return min((i for i, it in enumerate(items) if i > after for r in all_realizes(it)
                if (_reads(r.block) | _writes(r.block)) & _writes(b)), default=len(items))


def _insertion_point(func: PrimFunc, primitive: str, block: str, loop_var: Var, index: int,
                     first: int, last: int) -> int:
    """The position among the loop body's statements for TVM's `index`: -1 the last legal place
    (`last`), -2 the first (`first`), k >= 0 position k, which must lie in [first, last]."""
    if index == -1:
        return last
    if index == -2:
        return first
    if isinstance(index, int) and not isinstance(index, bool) and first <= index <= last:
        return index
    where = f"{first}" if first == last else f"{first} to {last}"
    raise schedule_error(func, primitive, f"index={index!r} is not a legal place for {block_name(block)} under "
                         f"{loop_name(loop_var)}: the legal positions among its statements are {where}",
                         loops=(loop_var,), blocks=(block,),
                         rule=f"{primitive} places the block after the blocks it reads from and before the "
                              "blocks that read what it writes",
                         fix="index=-1 (the last legal place), -2 (the first) or a position in that range")


def compute_at(func: PrimFunc, block: str, loop_var: Var, preserve_unit_loops: bool = False,
               index: int = -1) -> tuple[PrimFunc, None]:
    """Move a producer under `loop`, computing at each iteration what the consumers there read;
    TVM's `preserve_unit_loops` and `index` (see _insertion_point)."""
    realize, bpath = find_block(func, block, "compute_at")
    loop, lpath = find_loop(func, loop_var, "compute_at")
    b = realize.block
    _same_scope(func, "compute_at", b, bpath, loop, lpath)
    _between_conflicts(func, "compute_at", b, bpath, loop, lpath, moved_first=True)
    _check_movable(func, "compute_at", realize, bpath, nested_ok=True)
    iters = _store_iters(func, "compute_at", b)
    consumers = [s for s in _sites(loop) if _reads(s.block) & _writes(b)]
    if not consumers:
        raise schedule_error(func, "compute_at", f"no block under {loop_name(loop_var)} reads what "
                             f"{block_name(block)} writes ({_names(_writes(b))})", loops=(loop_var,),
                             blocks=(block,), rule="compute_at places a producer next to its consumers",
                             fix="pick a loop around a consumer (sch.get_consumers(block))")
    ranges = path_ranges(lpath + (loop,))
    boxes: dict[Var, tuple[PrimExpr, PrimExpr]] = {}
    anchors = _anchor_vars(lpath, loop)
    for site in consumers:
        for buf in _reads(site.block) & _writes(b):
            # the threads sharing the buffer (see thread_relaxed_loops) need it all
            shared = {f.loop_var: Range(f.min, f.extent) for f in thread_relaxed_loops(anchors, buf.scope)}
            needed = _invert_box(iters.get(buf, []), _needed_box(site, buf, clip=False), buf.shape, ranges)
            for v, (lo, hi) in needed.items():
                if shared:
                    lo, hi = simplify(relax(lo, shared)[0], ranges), simplify(relax(hi, shared)[1], ranges)
                if v in boxes:
                    lo = simplify(min_(boxes[v][0], lo), ranges)
                    hi = simplify(max_(boxes[v][1], hi), ranges)
                boxes[v] = (lo, hi)
    _check_outside_readers(func, b, bpath, loop, lpath, boxes)
    nest, spans = _new_nest(func, realize, boxes, ranges, _anchor_vars(lpath, loop), preserve_unit_loops)
    items = _body_items(loop)
    last_w, first_r = _last_writer(items, b), _first_user(items, b)
    if last_w >= first_r:
        raise schedule_error(func, "compute_at", f"under {loop_name(loop_var)}, a block writing what "
                             f"{block_name(block)} reads comes after a block reading what it writes",
                             loops=(loop_var,), blocks=(block,),
                             rule="compute_at needs a place after the producers and before the consumers")
    pos = _insertion_point(func, "compute_at", block, loop_var, index, last_w + 1, first_r)
    new = _insert_in_loop(_without(func, realize), loop_var, pos, nest)
    _check_under_loop(new, "compute_at", loop_var, block, True, spans)
    return new, None


def _statements_after(full: Path) -> list[Stmt]:
    """The statements that run after the last node of `full` (a path from the root) in its
    scope: those after it in every sequence around it, up to the enclosing block."""
    out: list[Stmt] = []
    for k in range(len(full) - 1, 0, -1):
        parent = full[k - 1]
        if isinstance(parent, Block):
            break
        if isinstance(parent, SeqStmt):
            items = list(parent.seq)
            out += items[_index_of(items, full[k]) + 1:]
    return out


def _check_outside_readers(func: PrimFunc, b: Block, bpath: Path, loop: For, lpath: Path, boxes) -> None:
    """When the producer's output is seen outside the loop (a parameter, or a later reader), the
    instances under the loop must still cover its whole domain."""
    later = [r.block.name for s in _statements_after(lpath + (loop,)) for r in all_realizes(s)
             if _reads(r.block) & _writes(b)]
    params = [buf for buf in _writes(b) if alloc_site(func, buf) is None]
    if not later and not params:
        return
    anchors = _anchor_vars(lpath, loop)
    relax_ranges = {f.loop_var: Range(f.min, f.extent) for f in anchors}
    ranges = outer_ranges(lpath)
    for iv in b.iter_vars:
        if iv.var not in boxes:
            continue
        lo, hi = boxes[iv.var]
        tlo, thi = relax(lo, relax_ranges)[0], relax(hi, relax_ranges)[1]
        if not (prove(tlo <= iv.dom.min, ranges) and prove(thi >= iv.dom.min + iv.dom.extent - 1, ranges)):
            who = f"{block_name(later[0])} reads it after the loop" if later else \
                f"{_names(params)} is a parameter of {func.name}"
            raise schedule_error(func, "compute_at", f"the consumers under {loop_name(loop.loop_var)} need only "
                                 f"part of what {block_name(b.name)} writes, but {who}",
                                 loops=(loop.loop_var,), blocks=(b.name,),
                                 rule="compute_at may leave out elements only nobody else reads",
                                 fix="compute it at a loop around every reader")


# reverse_compute_at --------------------------------------------------------------------------

def _read_iters(block: Block, buf: Buffer) -> list[tuple[Var, PrimExpr, int] | None]:
    """Per dimension of `buf` in the block's read region: (spatial iterator v, offset c, width w)
    when the dimension is the window [v + c, v + c + w), else None."""
    spatial = [iv.var for iv in block.iter_vars if iv.kind == "S"]
    region = _buffer_box(block, block.reads, buf)
    out: list[tuple[Var, PrimExpr] | None] = []
    for r in region.region:
        if not (isinstance(r.extent, IntImm) and r.extent.value >= 1):
            out.append(None)
            continue
        form = linear_form(r.min, [iv.var for iv in block.iter_vars])
        if form is None:
            out.append(None)
            continue
        coeffs, rest = form
        hits = [v for v, c in coeffs.items() if c != 0]
        if len(hits) == 1 and coeffs[hits[0]] == 1 and hits[0] in spatial:
            out.append((hits[0], rest, r.extent.value))
        else:
            out.append(None)
    return out


def _read_digits(block: Block, buf: Buffer, hits) -> list[_Digit | None]:
    """Per dimension of `buf` that `hits` (_read_iters) leaves out, the digit of one spatial
    iterator the block reads it at, when it reads one element there (else None)."""
    spatial = {iv.var for iv in block.iter_vars if iv.kind == "S"}
    region = _buffer_box(block, block.reads, buf)
    out: list[_Digit | None] = []
    for r, hit in zip(region.region, hits):
        d = _digit(r.min) if hit is None and isinstance(r.extent, IntImm) and r.extent.value == 1 else None
        out.append(d if d is not None and d.var in spatial and (d.step, d.radix) != (1, None) else None)
    return out


def reverse_compute_at(func: PrimFunc, block: str, loop_var: Var, preserve_unit_loops: bool = False,
                       index: int = -1) -> tuple[PrimFunc, None]:
    """Move a consumer under `loop`, computing at each iteration what the producers there wrote;
    TVM's `preserve_unit_loops` and `index` (see _insertion_point)."""
    realize, bpath = find_block(func, block, "reverse_compute_at")
    loop, lpath = find_loop(func, loop_var, "reverse_compute_at")
    b = realize.block
    _same_scope(func, "reverse_compute_at", b, bpath, loop, lpath)
    _between_conflicts(func, "reverse_compute_at", b, bpath, loop, lpath, moved_first=False)
    _check_movable(func, "reverse_compute_at", realize, bpath)
    producers = [s for s in _sites(loop) if _writes(s.block) & _reads(b)]
    if not producers:
        raise schedule_error(func, "reverse_compute_at", f"no block under {loop_name(loop_var)} writes what "
                             f"{block_name(block)} reads ({_names(_reads(b))})", loops=(loop_var,),
                             blocks=(block,), rule="reverse_compute_at places a consumer next to its producers",
                             fix="pick a loop around a producer (sch.get_producers(block))")
    ranges = path_ranges(lpath + (loop,))
    boxes: dict[Var, tuple[PrimExpr, PrimExpr]] = {}
    for site in producers:
        for buf in sorted(_writes(site.block) & _reads(b), key=lambda x: x.name):
            produced = _produced_box(site, buf)
            hits = _read_iters(b, buf)
            for (lo, hi), hit in zip(produced, hits):
                if hit is not None and hit[0] not in boxes:
                    v, c, ext = hit
                    c = index_as(c, hi.dtype)
                    last = simplify(hi - c - (ext - 1), ranges)
                    point = ext == 1 and prove(lo.eq(hi), ranges)  # one element per iteration
                    if loop_var in free_vars(hi) and not point:
                        # the instances whose window became complete at this iteration
                        first = simplify(substitute(hi, {loop_var: loop_var - 1}) - c - (ext - 1) + 1, ranges)
                    else:
                        first = simplify(lo - c, ranges)
                    boxes[v] = (first, last)
            # dimensions read at digits of an iterator (temp[vi // 16, vi % 16]): the instances
            # whose elements were produced, inverted digit by digit (a superset is refused by
            # the checks below)
            digits = _read_digits(b, buf, hits)
            for v, span in _invert_box(digits, produced, buf.shape, ranges).items():
                boxes.setdefault(v, span)
            # indices that are digits of a number of several iterators (a layout transform's
            # `(v1 * 8 + v4) // 16`, `(v1 * 8 + v4) % 16`)
            region = _buffer_box(b, b.reads, buf)
            if all(isinstance(r.extent, IntImm) and r.extent.value == 1 for r in region.region):
                inverse = read_inverse([r.min for r in region.region], b)
                if inverse is not None:
                    for v, span in instance_spans(inverse, produced, ranges).items():
                        boxes.setdefault(v, span)
    nest, spans = _new_nest(func, realize, boxes, ranges, _anchor_vars(lpath, loop), preserve_unit_loops)
    items = _body_items(loop)
    last_w = _last_writer(items, b)
    first_r = _first_user(items, b, after=last_w)
    pos = _insertion_point(func, "reverse_compute_at", block, loop_var, index, last_w + 1, first_r)
    new = _insert_in_loop(_without(func, realize), loop_var, pos, nest)
    _check_complete(new, "reverse_compute_at", loop_var, block, spans)
    _check_under_loop(new, "reverse_compute_at", loop_var, block, False, spans)
    return new, None


# compute_inline ------------------------------------------------------------------------------

def _single_store(func: PrimFunc, primitive: str, realize: BlockRealize, role: str,
                  consumer: str | None = None) -> BufferStore:
    b = realize.block
    if consumer is not None:
        try:
            return _single_store(func, primitive, realize, role)
        except ScheduleError as err:
            raise ScheduleError(str(err).replace(f"{primitive}: ", f"{primitive}: cannot fold "
                                                 f"{block_name(consumer)} into its producer: ", 1)) from None
    if child_realizes(realize):
        raise schedule_error(func, primitive, f"{block_name(b.name)} holds other blocks", blocks=(b.name,),
                             rule=f"{primitive} inlines a leaf block")
    if b.init is not None or any(iv.kind == "R" for iv in b.iter_vars):
        raise schedule_error(func, primitive, f"{block_name(b.name)} is a reduction", blocks=(b.name,),
                             rule=f"only a block computing each element once (no T.init, no reduce iterators) "
                                  f"can be inlined as {role}",
                             fix="keep the reduction as a block (compute_at it instead)")
    if not isinstance(b.body, BufferStore):
        raise schedule_error(func, primitive, f"{block_name(b.name)} does more than one store "
                             f"(its body is a {type(b.body).__name__})", blocks=(b.name,),
                             rule=f"{primitive} needs a block whose body is a single store")
    return b.body


def _check_no_address(func: PrimFunc, primitive: str, buf: Buffer, moved: str) -> None:
    """No block takes the address of an element of `buf` (`T.address_of`, `access_ptr`): such an
    opaque access sees memory, not values, so the stores the primitive removes must stay."""
    for r in all_realizes(func.body):
        if r is func.body:
            continue
        calls = [c for c in collect(r.block.body, Call) if c.op == "address_of" and
                 isinstance(c.args[0], BufferLoad) and c.args[0].buffer is buf]
        if calls and not child_realizes(r):
            raise schedule_error(func, primitive, f"{block_name(r.block.name)} takes the address of {buf.name} "
                                 f"(T.address_of / access_ptr), an opaque access to its memory",
                                 blocks=(moved, r.block.name),
                                 rule=f"{primitive} removes {buf.name}, so every access to it must read an element",
                                 fix="keep both blocks (or cache the buffer and pass the cache's address)")


def _writers(func: PrimFunc, buf: Buffer) -> list[Block]:
    return [r.block for r in all_realizes(func.body) if r is not func.body and buf in _writes(r.block)]


def _readers(func: PrimFunc, buf: Buffer) -> list[Block]:
    return [r.block for r in all_realizes(func.body) if r is not func.body and buf in _reads(r.block)]


class _Inliner(IRMutator):
    def __init__(self, buf: Buffer, iters: list[Var], value: PrimExpr):
        self.buf, self.iters, self.value = buf, iters, value

    def visit_BufferLoad(self, node: BufferLoad):
        node = self.generic_visit(node)
        if node.buffer is not self.buf:
            return node
        return substitute(self.value, dict(zip(self.iters, node.indices)))


def _fold_trivial_init(func: PrimFunc, name: str, primitive: str) -> PrimFunc:
    """A block with a `T.init` but no reduce iterator runs its init before every update (TVM's
    `bmm` over spatial iterators only): `B[e] = 0; B[e] = B[e] + x` is the plain store
    `B[e] = 0 + x`. Other blocks come back unchanged."""
    realize, path = find_block(func, name, primitive)
    b = realize.block
    init, st = b.init, b.body
    if init is None or any(iv.kind == "R" for iv in b.iter_vars) or not isinstance(init, BufferStore) \
            or not isinstance(st, BufferStore) or init.buffer is not st.buffer:
        return func

    def at_element(indices) -> bool:
        return all(same_expr(a, c) for a, c in zip(indices, st.indices))

    loads = [ld for ld in collect(st.value, BufferLoad) if ld.buffer is st.buffer]
    if not at_element(init.indices) or not all(at_element(ld.indices) for ld in loads) \
            or any(ld.buffer is st.buffer for ld in collect(init.value, BufferLoad)):
        return func
    body = BufferStore(st.buffer, _replace_loads(st.value, st.buffer, init.value), st.indices)
    new_b = refresh_block(dataclasses.replace(b, init=None, body=body))
    return replace_at(func, path, realize, dataclasses.replace(realize, block=new_b))


def compute_inline(func: PrimFunc, block: str) -> tuple[PrimFunc, None]:
    """Replace every read of the block's output by the expression it stores; the block disappears."""
    func = _fold_trivial_init(func, block, "compute_inline")
    realize, _ = find_block(func, block, "compute_inline")
    b = realize.block
    store = _single_store(func, "compute_inline", realize, "a producer")
    buf = store.buffer
    idx = list(store.indices)
    iter_vars = [iv.var for iv in b.iter_vars]
    if not (all(isinstance(i, Var) and i in iter_vars for i in idx) and len(set(idx)) == len(idx)):
        raise schedule_error(func, "compute_inline", f"{block_name(block)} stores to {buf.name}"
                             f"[{', '.join(expr_text(i) for i in idx)}], not at distinct block iterators",
                             blocks=(block,), rule="compute_inline needs a store whose indices are distinct "
                             "iterators, so that each read names exactly one computed value")
    stray = (free_vars(store.value) & set(iter_vars)) - set(idx)
    if stray:
        raise schedule_error(func, "compute_inline", f"{block_name(block)} uses iterator "
                             f"{min(v.name for v in stray)}, which does not index {buf.name}",
                             blocks=(block,), rule="every iterator the stored value uses must index the store")
    if alloc_site(func, buf) is None:
        raise schedule_error(func, "compute_inline", f"{block_name(block)} writes {buf.name}, a parameter of "
                             f"{func.name}: its result must stay in memory", blocks=(block,),
                             rule="compute_inline removes the block, so it cannot produce a function output",
                             fix="keep the block, or fold it into its producer with reverse_compute_inline")
    others = [w.name for w in _writers(func, buf) if w is not b]
    if others:
        raise schedule_error(func, "compute_inline", f"{buf.name} is also written by {block_name(others[0])}",
                             blocks=(block, others[0]), rule="compute_inline needs the only writer of a buffer")
    if any(load.buffer is buf for load in collect(store.value, BufferLoad)):
        raise schedule_error(func, "compute_inline", f"{block_name(block)} reads {buf.name}, which it writes",
                             blocks=(block,), rule="an inlined value cannot depend on its own buffer")
    _check_no_address(func, "compute_inline", buf, block)
    _check_inputs_stable(func, realize, buf)
    new = _without(func, realize)
    new = func.with_body(_Inliner(buf, idx, store.value).visit(new.body))
    new = func.with_body(refresh_touching(new.body, {buf}))
    return drop_unused_allocs(new), None


def _check_inputs_stable(func: PrimFunc, realize: BlockRealize, buf: Buffer) -> None:
    """Between the producer and its last reader nothing overwrites what the producer reads, so
    the inlined expression reads the same values where it lands."""
    order = [r for r in all_realizes(func.body) if r is not func.body]
    at = order.index(realize)
    last = max((k for k, r in enumerate(order) if buf in _reads(r.block)), default=at)
    inputs = _reads(realize.block)
    for r in order[at + 1:last]:
        clash = _writes(r.block) & inputs
        if clash:
            raise schedule_error(func, "compute_inline", f"{block_name(r.block.name)} overwrites {_names(clash)} "
                                 f"after {block_name(realize.block.name)} reads it and before the readers of "
                                 f"{buf.name}", blocks=(realize.block.name, r.block.name),
                                 rule="an inlined expression must read the same values where it lands")


# reverse_compute_inline ----------------------------------------------------------------------

def reverse_compute_inline(func: PrimFunc, block: str) -> tuple[PrimFunc, None]:
    """Fold a consumer into its producer: the producer stores the consumer's result directly."""
    c0 = find_block(func, block, "reverse_compute_inline")[0].block
    for w in {w.name for buf in _reads(c0) if len(_writers(func, buf)) == 1 for w in _writers(func, buf)} - {block}:
        func = _fold_trivial_init(func, w, "reverse_compute_inline")
    realize, cpath = find_block(func, block, "reverse_compute_inline")
    c = realize.block
    store = _single_store(func, "reverse_compute_inline", realize, "a consumer")
    produced = [buf for buf in _reads(c) if _writers(func, buf) and buf is not store.buffer]
    if len(produced) != 1:
        what = "no buffer written by another block" if not produced else f"several ({_names(produced)})"
        raise schedule_error(func, "reverse_compute_inline", f"{block_name(block)} reads {what}",
                             blocks=(block,), rule="reverse_compute_inline folds a consumer into its one producer")
    buf = produced[0]
    writers = _writers(func, buf)
    if len(writers) != 1:
        raise schedule_error(func, "reverse_compute_inline", f"{buf.name} has {len(writers)} writers "
                             f"({', '.join(w.name for w in writers)})", blocks=(block,),
                             rule="reverse_compute_inline needs a buffer with a single producer")
    p_realize, ppath = find_block(func, writers[0].name, "reverse_compute_inline")
    p = p_realize.block
    p_store = _single_store(func, "reverse_compute_inline", p_realize, "the producer", consumer=block)
    loads = [ld for ld in collect(store.value, BufferLoad) if ld.buffer is buf]
    first = list(loads[0].indices)
    inverse = read_inverse(first, c)
    if inverse is None or not all(all(same_expr(a, b) for a, b in zip(ld.indices, first)) for ld in loads):
        raise schedule_error(func, "reverse_compute_inline", f"{block_name(block)} reads {buf.name}"
                             f"[{', '.join(expr_text(i) for i in loads[0].indices)}]"
                             + ("" if len(loads) == 1 else " among other index patterns"), blocks=(block,),
                             rule="reverse_compute_inline needs every read of the producer's buffer to use the same "
                                  "indices, one-to-one in the consumer's iterators: each index a digit of a "
                                  "mixed-radix number of them (vi, vi * 16 + vj with vj < 16, vi // 16 and "
                                  "vi % 16), every iterator in one number",
                             fix="compute_inline the producer instead, or keep both blocks")
    others = [r.name for r in _readers(func, buf) if r is not c]
    if others or alloc_site(func, buf) is None:
        who = f"{block_name(others[0])} reads it too" if others else f"it is a parameter of {func.name}"
        raise schedule_error(func, "reverse_compute_inline", f"{buf.name} must stay in memory: {who}",
                             blocks=(block,) + tuple(others[:1]),
                             rule="reverse_compute_inline removes the producer's buffer, so the consumer must be its "
                                  "only reader")
    if not is_true(realize.predicate):
        raise schedule_error(func, "reverse_compute_inline", f"{block_name(c.name)} has a T.where predicate",
                             blocks=(c.name,), rule="the consumer must run on its whole domain",
                             fix="reverse_compute_inline before the split that added the predicate")
    _check_movable(func, "reverse_compute_inline", realize, cpath)
    _check_no_address(func, "reverse_compute_inline", buf, block)
    _check_reads_written(func, p_realize, ppath, p_store, c, buf, first)
    _check_order(func, p_realize, realize, store.buffer)
    element = list(p_store.indices)
    vmap = inverse.iterators(element)
    guards = inverse.guards(element, {iv.var: iv.dom for iv in p.iter_vars})
    value = substitute(_replace_loads(store.value, buf, p_store.value), vmap)
    indices = tuple(substitute(i, vmap) for i in store.indices)
    new_p = refresh_block(dataclasses.replace(p, body=BufferStore(store.buffer, value, indices)))
    predicate = p_realize.predicate
    if guards:  # an over-computing producer: only the consumer's elements are stored
        binding = dict(zip([iv.var for iv in p.iter_vars], p_realize.iter_values))
        for g in guards:
            g = substitute(g, binding)
            predicate = g if is_true(predicate) else logical_and(predicate, g)
        predicate = simplify(predicate, path_ranges(ppath))
    new = replace_at(func, ppath, p_realize, dataclasses.replace(p_realize, block=new_p, predicate=predicate))
    realize2, _ = find_block(new, block, "reverse_compute_inline")
    new = _without(new, realize2)
    return drop_unused_allocs(new), None


def _check_reads_written(func: PrimFunc, p_realize: BlockRealize, ppath: Path, p_store: BufferStore,
                         c: Block, buf: Buffer, first: list[PrimExpr]) -> None:
    """Every element the consumer reads is one the producer writes (the consumer runs its whole
    domain): by the boxes when the producer stores at distinct iterators over its whole domain,
    else by running both when their loops are constant and small."""
    import numpy as np

    p = p_realize.block
    cdoms = {iv.var: iv.dom for iv in c.iter_vars}
    read_box = [relax(i, cdoms) for i in first]
    pvars = [iv.var for iv in p.iter_vars]
    pdoms = {iv.var: iv.dom for iv in p.iter_vars}
    fail = None
    if is_true(p_realize.predicate) and all(isinstance(i, Var) and i in pvars for i in p_store.indices) \
            and len(set(p_store.indices)) == len(p_store.indices):
        for d, (i, (lo, hi)) in enumerate(zip(p_store.indices, read_box)):
            plo, phi = (index_as(x, lo.dtype) for x in relax(i, pdoms))
            if not (prove(plo <= lo) and prove(hi <= phi)):
                fail = (f"reads {buf.name} over [{expr_text(lo)}, {expr_text(hi)}] in dimension {d}, but "
                        f"{block_name(p.name)} writes only [{expr_text(plo)}, {expr_text(phi)}]")
                break
        else:
            return
    shape = _shape_of(buf)
    written = written_mask(p_realize, loops_in_scope(ppath), buf, shape) if shape is not None and fail is None \
        else None
    if written is not None and all(isinstance(x, IntImm) for iv in c.iter_vars for x in (iv.dom.min, iv.dom.extent)) \
            and math.prod(iv.dom.extent.value for iv in c.iter_vars) <= _CELL_LIMIT:
        cgrid = np.meshgrid(*[np.arange(iv.dom.min.value, iv.dom.min.value + iv.dom.extent.value)
                              for iv in c.iter_vars], indexing="ij")
        try:
            cenv = {iv.var: g.ravel() for iv, g in zip(c.iter_vars, cgrid)}
            size = cgrid[0].size if cgrid else 1
            rcols = [np.broadcast_to(np.asarray(eval_array(i, cenv)), (size,)) for i in first]
            inside = np.ones(size, dtype=bool)
            for col, n in zip(rcols, shape):
                inside &= (col >= 0) & (col < n)
            if inside.all() and written[tuple(rcols)].all():
                return
            fail = f"reads elements of {buf.name} that {block_name(p.name)} does not write"
        except (ValueError, KeyError):
            pass
    raise schedule_error(func, "reverse_compute_inline", f"{block_name(c.name)} "
                         + (fail or f"reads {buf.name} where tdsl cannot show that {block_name(p.name)} wrote it"),
                         blocks=(p.name, c.name),
                         rule="every element the consumer reads must be one the producer writes",
                         fix="keep both blocks, or shrink the consumer to what the producer writes")


def _replace_loads(expr: PrimExpr, buf: Buffer, value: PrimExpr) -> PrimExpr:
    class _R(IRMutator):
        def visit_BufferLoad(self, node):
            return value if node.buffer is buf else self.generic_visit(node)

    return _R().visit(expr)


def _check_order(func: PrimFunc, p_realize: BlockRealize, c_realize: BlockRealize, out: Buffer) -> None:
    """No block between producer and consumer touches the consumer's data."""
    order = [r for r in all_realizes(func.body) if r is not func.body]
    i, j = order.index(p_realize), order.index(c_realize)
    c = c_realize.block
    for r in order[i + 1:j]:
        o = r.block
        clash = (_writes(o) & _reads(c)) | ((_reads(o) | _writes(o)) & {out})
        if clash:
            raise schedule_error(func, "reverse_compute_inline", f"{block_name(o.name)} uses {_names(clash)} between "
                                 f"{block_name(p_realize.block.name)} and {block_name(c.name)}",
                                 blocks=(o.name, c.name), rule="the consumer's work would move before that block")
    if out in _reads(p_realize.block):
        raise schedule_error(func, "reverse_compute_inline", f"{block_name(p_realize.block.name)} reads {out.name}",
                             blocks=(p_realize.block.name,), rule="the producer cannot read the consumer's output")
