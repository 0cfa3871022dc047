"""compute_at and reverse_compute_at (compute_inline and its reverse: compute_inline.py; the
legality, flow and digit analyses: ../analysis/).

compute_at / reverse_compute_at move a block under a loop of the same scope and give it new loops
(`ax0, ax1, ...`, one per iterator) over just the instances needed (compute_at: what the
consumers under the loop read) or possible (reverse_compute_at: what the producers under the
loop have written) at each iteration of that loop; compute_at places it right before the first
consumer under the loop, reverse_compute_at at the end of the loop body (TVM's index=-1). Whatever TVM leaves to the user's care is
checked (analysis/flow.py; see apache/tvm#15911): every element a moved consumer reads must have been written
by the producers under the loop at that iteration or an earlier one, every instance of the
block still runs, and no other block's view of the data changes. When constant, the check
walks the loop iterations one by one; symbolic extents are handled by proofs.

compute_at of a block writing a "shared" buffer relaxes the needed region over the
threadIdx-bound loops around the anchor (TensorIR's rule, analysis.thread_relaxed_loops): the
copy fills the tile of the whole thread block, so that its loops can then be spread over the
threads (a cooperative fetch: fuse, split by the thread count, bind to threadIdx).

compute_at reads the instances to compute off the producer's store indices: each is a spatial
iterator or one digit of it, as transform_layout leaves them (`B[j // 16, k, j % 16]`); the
needed box is inverted digit by digit (`analysis.digits.invert_box`), so packing a panel under a loop works.
"""
from __future__ import annotations

import dataclasses

from ...arith import const_bound, eval_int, prove, relax, simplify
from ...ir import (
    TRUE,
    Block,
    BlockRealize,
    For,
    IntImm,
    PrimExpr,
    PrimFunc,
    Range,
    SeqStmt,
    Stmt,
    Var,
    const,
    free_vars,
    logical_and,
    max_,
    min_,
    same_expr,
    substitute,
)
from ...ir.tree import all_realizes, fresh_name, path_ranges, replace_at, var_names
from ..analysis import index_as, simplify_realizes, thread_relaxed_loops
from ..analysis.boxes import anchor_loops, body_items, buffer_box, names_of, reads_of, walk_assignments, writes_of
from ..analysis.digits import invert_box, read_digits, read_iters, store_iters, symbolic_digit_inside
from ..analysis.flow import check_complete, check_under_loop, needed_box, produced_box, sites_under
from ..analysis.legality import between_conflicts, check_movable, check_outside_readers, same_scope
from ..analysis.read_inverse import instance_spans, read_inverse
from ..errors import block_name, loop_name, schedule_error
from ..tree import find_block, find_loop, remove_realize


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
        if not (low_ok and high_ok) and same_expr(lo, hi) and symbolic_digit_inside(lo, iv.dom, anchors, ranges):
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
    walk = walk_assignments(anchors, ranges)
    if walk is not None:
        try:
            return max(eval_int(expr, env) for env in walk)
        except (ValueError, KeyError):
            pass
    return const_bound(expr, ranges)[1]


def _insert_in_loop(func: PrimFunc, loop_var: Var, pos: int, nest: Stmt) -> PrimFunc:
    loop, lpath = find_loop(func, loop_var, "insert")
    items = body_items(loop)
    items.insert(pos, nest)
    return replace_at(func, lpath, loop, dataclasses.replace(loop, body=SeqStmt(tuple(items))))


def without_realize(func: PrimFunc, realize: BlockRealize) -> PrimFunc:
    body = remove_realize(func.body, realize)
    return func.with_body(body if body is not None else SeqStmt(()))


def _last_writer(items: list[Stmt], b: Block) -> int:
    """The index of the last of `items` writing what `b` reads (-1: none)."""
    return max((i for i, it in enumerate(items) for r in all_realizes(it) if writes_of(r.block) & reads_of(b)),
               default=-1)


def _first_user(items: list[Stmt], b: Block, after: int = -1) -> int:
    """The index of the first of `items` after `after` reading or writing what `b` writes
    (len(items): none)."""
    return min((i for i, it in enumerate(items) if i > after for r in all_realizes(it)
                if (reads_of(r.block) | writes_of(r.block)) & writes_of(b)), default=len(items))


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
    same_scope(func, "compute_at", b, bpath, loop, lpath)
    between_conflicts(func, "compute_at", b, bpath, loop, lpath, moved_first=True)
    check_movable(func, "compute_at", realize, bpath, nested_ok=True)
    iters = store_iters(func, "compute_at", b)
    consumers = [s for s in sites_under(loop) if reads_of(s.block) & writes_of(b)]
    if not consumers:
        raise schedule_error(func, "compute_at", f"no block under {loop_name(loop_var)} reads what "
                             f"{block_name(block)} writes ({names_of(writes_of(b))})", loops=(loop_var,),
                             blocks=(block,), rule="compute_at places a producer next to its consumers",
                             fix="pick a loop around a consumer (sch.get_consumers(block))")
    ranges = path_ranges(lpath + (loop,))
    boxes: dict[Var, tuple[PrimExpr, PrimExpr]] = {}
    anchors = anchor_loops(lpath, loop)
    for site in consumers:
        for buf in reads_of(site.block) & writes_of(b):
            # the threads sharing the buffer (see thread_relaxed_loops) need it all
            shared = {f.loop_var: Range(f.min, f.extent) for f in thread_relaxed_loops(anchors, buf.scope)}
            needed = invert_box(iters.get(buf, []), needed_box(site, buf, clip=False), buf.shape, ranges)
            for v, (lo, hi) in needed.items():
                if shared:
                    lo, hi = simplify(relax(lo, shared)[0], ranges), simplify(relax(hi, shared)[1], ranges)
                if v in boxes:
                    lo = simplify(min_(boxes[v][0], lo), ranges)
                    hi = simplify(max_(boxes[v][1], hi), ranges)
                boxes[v] = (lo, hi)
    check_outside_readers(func, b, bpath, loop, lpath, boxes)
    nest, spans = _new_nest(func, realize, boxes, ranges, anchor_loops(lpath, loop), preserve_unit_loops)
    items = body_items(loop)
    last_w, first_r = _last_writer(items, b), _first_user(items, b)
    if last_w >= first_r:
        raise schedule_error(func, "compute_at", f"under {loop_name(loop_var)}, a block writing what "
                             f"{block_name(block)} reads comes after a block reading what it writes",
                             loops=(loop_var,), blocks=(block,),
                             rule="compute_at needs a place after the producers and before the consumers")
    pos = _insertion_point(func, "compute_at", block, loop_var, index, last_w + 1, first_r)
    new = _insert_in_loop(without_realize(func, realize), loop_var, pos, nest)
    check_under_loop(new, "compute_at", loop_var, block, True, spans)
    return new, None


def reverse_compute_at(func: PrimFunc, block: str, loop_var: Var, preserve_unit_loops: bool = False,
                       index: int = -1) -> tuple[PrimFunc, None]:
    """Move a consumer under `loop`, computing at each iteration what the producers there wrote;
    TVM's `preserve_unit_loops` and `index` (see _insertion_point)."""
    realize, bpath = find_block(func, block, "reverse_compute_at")
    loop, lpath = find_loop(func, loop_var, "reverse_compute_at")
    b = realize.block
    same_scope(func, "reverse_compute_at", b, bpath, loop, lpath)
    between_conflicts(func, "reverse_compute_at", b, bpath, loop, lpath, moved_first=False)
    check_movable(func, "reverse_compute_at", realize, bpath)
    producers = [s for s in sites_under(loop) if writes_of(s.block) & reads_of(b)]
    if not producers:
        raise schedule_error(func, "reverse_compute_at", f"no block under {loop_name(loop_var)} writes what "
                             f"{block_name(block)} reads ({names_of(reads_of(b))})", loops=(loop_var,),
                             blocks=(block,), rule="reverse_compute_at places a consumer next to its producers",
                             fix="pick a loop around a producer (sch.get_producers(block))")
    ranges = path_ranges(lpath + (loop,))
    boxes: dict[Var, tuple[PrimExpr, PrimExpr]] = {}
    for site in producers:
        for buf in sorted(writes_of(site.block) & reads_of(b), key=lambda x: x.name):
            produced = produced_box(site, buf)
            hits = read_iters(b, buf)
            for (lo, hi), hit in zip(produced, hits):
                if hit is not None and hit[0] not in boxes:
                    v, c, ext = hit
                    c = index_as(c, hi.dtype)
                    last = simplify(hi - c - (ext - 1), ranges)
                    point = ext == 1 and prove(lo.eq(hi), ranges)  # one element per iteration
                    # (iterations of a thread or parallel loop run side by side, never one after
                    # another: each computes what its own producers wrote)
                    if loop_var in free_vars(hi) and not point and loop.kind not in ("thread_binding", "parallel"):
                        # the instances whose window became complete at this iteration
                        first = simplify(substitute(hi, {loop_var: loop_var - 1}) - c - (ext - 1) + 1, ranges)
                    else:
                        first = simplify(lo - c, ranges)
                    boxes[v] = (first, last)
            # dimensions read at digits of an iterator (temp[vi // 16, vi % 16]): the instances
            # whose elements were produced, inverted digit by digit (a superset is refused by
            # the checks below)
            digits = read_digits(b, buf, hits)
            for v, span in invert_box(digits, produced, buf.shape, ranges).items():
                boxes.setdefault(v, span)
            # indices that are digits of a number of several iterators (a layout transform's
            # `(v1 * 8 + v4) // 16`, `(v1 * 8 + v4) % 16`)
            region = buffer_box(b, b.reads, buf)
            if all(isinstance(r.extent, IntImm) and r.extent.value == 1 for r in region.region):
                inverse = read_inverse([r.min for r in region.region], b)
                if inverse is not None:
                    for v, span in instance_spans(inverse, produced, ranges).items():
                        boxes.setdefault(v, span)
    nest, spans = _new_nest(func, realize, boxes, ranges, anchor_loops(lpath, loop), preserve_unit_loops)
    items = body_items(loop)
    last_w = _last_writer(items, b)
    first_r = _first_user(items, b, after=last_w)
    pos = _insertion_point(func, "reverse_compute_at", block, loop_var, index, last_w + 1, first_r)
    new = _insert_in_loop(without_realize(func, realize), loop_var, pos, nest)
    check_complete(new, "reverse_compute_at", loop_var, block, spans)
    check_under_loop(new, "reverse_compute_at", loop_var, block, False, spans)
    return new, None
