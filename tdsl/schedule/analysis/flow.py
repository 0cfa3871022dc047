"""Data-flow checks of compute_at and reverse_compute_at: what TVM leaves to the user's care.

Every element a moved consumer reads must have been written by the producers under the loop
at that iteration or an earlier one (`check_flow`), every instance of the moved block still
runs (`check_complete`), and no other block's view of the data changes (`check_under_loop`,
`check_final`). When constant, a check walks the loop iterations one by one; symbolic extents
are handled by proofs.
"""
from __future__ import annotations

import math

from ...arith import eval_int, prove, relax, simplify
from ...ir import (
    Binary,
    Block,
    BlockRealize,
    Buffer,
    For,
    IntImm,
    PrimExpr,
    PrimFunc,
    Range,
    SeqStmt,
    Var,
    free_vars,
    max_,
    min_,
    substitute,
)
from ...ir.functor import post_order_visit
from ...ir.tree import Path, path_ranges
from ..errors import block_name, loop_name, schedule_error
from ..tree import find_loop, is_true
from .boxes import (
    CELL_LIMIT,
    ENUM_LIMIT,
    Box,
    anchor_loops,
    body_items,
    box_inside,
    box_slices,
    buffer_box,
    child_realizes_with_paths,
    covers_symbolic,
    in_shape,
    inside_symbolic,
    int_values,
    names_of,
    reads_of,
    region_box,
    shape_of,
    walk_assignments,
    writes_of,
)
from .digits import fused_digits_cover


class _Site:
    """A block realize under the anchor loop: its position in the loop body and its path below."""

    def __init__(self, realize: BlockRealize, below: Path, pos: int):
        self.realize, self.below, self.pos = realize, below, pos
        self.block = realize.block


def sites_under(loop: For) -> list[_Site]:
    out = []
    for pos, item in enumerate(body_items(loop)):
        for realize, path in child_realizes_with_paths(item):
            out.append(_Site(realize, path, pos))
    return out


def produced_box(site: _Site, buf: Buffer) -> Box:
    """What one instance of the site's nest writes to `buf` per anchor iteration, relaxed, and
    kept inside the block's domain-implied write region when the block has a predicate."""
    region = buffer_box(site.block, site.block.writes, buf)
    return _clip_to_domain(site, region, region_box(site.realize, region, site.below))


def _span_box(block: Block, region, spans: dict[Var, tuple[PrimExpr, PrimExpr]]) -> Box:
    """A region of the moved block over the exact (lo, hi) of each of its iterators."""
    ranges = {v: Range(lo, simplify(hi - lo + 1)) for v, (lo, hi) in spans.items()}
    out = []
    for r in region.region:
        lo = relax(r.min, ranges)[0]
        hi = relax(r.min + r.extent - 1, ranges)[1]
        out.append((simplify(lo), simplify(hi)))
    return out


def needed_box(site: _Site, buf: Buffer, clip: bool = True) -> Box:
    """What the site reads of `buf` per anchor iteration (kept inside its domain-implied read
    region when the block has a predicate and `clip`)."""
    region = buffer_box(site.block, site.block.reads, buf)
    box = region_box(site.realize, region, site.below)
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


def _site_writes(site: _Site, buf: Buffer, env: dict, shape, done, budget: list) -> bool:
    """Mark in `done` the elements of `buf` the site's instances write at the anchor iteration
    `env`, instance by instance (a fused and split producer writes a run of a row-major range,
    not the box of rows its relaxed region spans). False when the nest below the anchor is not
    plain constant-evaluable loops, or `budget` (instances left) runs out."""
    loops = [s for s in site.below if isinstance(s, For)]
    if any(not isinstance(s, (For, SeqStmt)) for s in site.below):
        return False
    region = buffer_box(site.block, site.block.writes, buf)
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
    anchors = anchor_loops(lpath, loop)
    ranges = path_ranges(lpath + (loop,))
    shape = shape_of(buf)
    if shape is not None and (not exact_writer or _box_is_exact(writer, buf)) \
            and covers_symbolic(produced, needed, ranges) and inside_symbolic(needed, shape, ranges):
        return   # proved for every iteration at once: what is read there is written there, in bounds
    walk = walk_assignments(anchors, ranges) if shape is not None else None
    if walk is not None and shape is not None:
        import numpy as np

        done = np.zeros(shape, dtype=np.bool_)
        budget = [ENUM_LIMIT * 10]
        try:
            for env in walk:
                if exact_writer and _site_writes(writer, buf, env, shape, done, budget):
                    pass
                elif exact_writer and not _box_is_exact(writer, buf):
                    raise fail
                else:
                    sl = box_slices(produced, env, shape)
                    if sl is not None:
                        done[sl] = True
                need = box_slices(needed, env, shape)
                if need is not None and not (box_inside(needed, env, shape) and done[need].all()):
                    raise fail
            return
        except (ValueError, KeyError):
            pass  # an expression the evaluator does not know (or a symbolic size): fall back to proofs
    if (exact_writer and not _box_is_exact(writer, buf, predicate=False)) or not covers_symbolic(produced, needed, ranges):
        raise fail


def check_under_loop(func: PrimFunc, primitive: str, loop_var: Var, moved: str, moved_first: bool,
                      spans: dict[Var, tuple[PrimExpr, PrimExpr]]) -> None:
    """Dependences between the moved block and every other block under the anchor loop."""
    loop, lpath = find_loop(func, loop_var, primitive)
    sites = sites_under(loop)
    me = next(s for s in sites if s.block.name == moved)
    for other in sites:
        if other is me:
            continue
        first, second = (me, other) if moved_first else (other, me)
        anti = reads_of(first.block) & writes_of(second.block)
        out = writes_of(first.block) & writes_of(second.block)
        if anti or out:
            raise schedule_error(func, primitive, f"{block_name(second.block.name)} overwrites {names_of(anti | out)}, "
                                 f"which {block_name(first.block.name)} uses, and both would run under "
                                 f"{loop_name(loop_var)}", loops=(loop_var,),
                                 blocks=(first.block.name, second.block.name),
                                 rule="a moved block cannot interleave with blocks that overwrite its data")
        for buf in writes_of(first.block) & reads_of(second.block):
            if first is not me:
                _check_final(func, primitive, loop, lpath, first, second, buf)
            if first.pos > second.pos:
                raise schedule_error(func, primitive, f"{block_name(first.block.name)} must run before "
                                     f"{block_name(second.block.name)} under {loop_name(loop_var)} but cannot",
                                     loops=(loop_var,), blocks=(first.block.name, second.block.name),
                                     rule="a producer stays before its consumers")
            produced = _span_box(me.block, buffer_box(me.block, me.block.writes, buf), spans) \
                if first is me else produced_box(first, buf)
            needed = in_shape(_span_box(me.block, buffer_box(me.block, me.block.reads, buf), spans)
                               if second is me else needed_box(second, buf), buf)
            _check_flow(func, primitive, loop, lpath, first, second, buf, produced, needed,
                        exact_writer=first is not me)


def _check_final(func: PrimFunc, primitive: str, loop: For, lpath: Path, writer: _Site, reader: _Site,
                 buf: Buffer) -> None:
    """A block that updates the same element over iterations of the anchor loop (or a loop around
    it), such as a reduction, has only partial results at any one iteration: nothing under the
    loop may read them."""
    anchors = {f.loop_var for f in anchor_loops(lpath, loop)}
    region = buffer_box(writer.block, writer.block.writes, buf)
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


def check_complete(func: PrimFunc, primitive: str, loop_var: Var, moved: str,
                    spans: dict[Var, tuple[PrimExpr, PrimExpr]]) -> None:
    """Over all iterations of the anchor loop and its outer loops, the moved block's new nest still
    visits every point of its domain (the regions of consecutive iterations leave no gap)."""
    loop, lpath = find_loop(func, loop_var, primitive)
    me = next(s for s in sites_under(loop) if s.block.name == moved)
    b = me.block
    vmap_box = [spans[iv.var] for iv in b.iter_vars]
    anchors = anchor_loops(lpath, loop)
    ranges = path_ranges(lpath + (loop,))
    dom_shape = int_values(iv.dom.extent for iv in b.iter_vars)
    fail = schedule_error(func, primitive, f"the new loops of {block_name(moved)} under {loop_name(loop_var)} "
                          "would skip some of its instances", loops=(loop_var,), blocks=(moved,),
                          rule="every instance of the moved block must still run",
                          fix="choose another loop")
    walk = walk_assignments(anchors, ranges)
    mins = int_values(iv.dom.min for iv in b.iter_vars)
    if walk is not None and dom_shape is not None and mins is not None and math.prod(dom_shape) <= CELL_LIMIT:
        import numpy as np

        seen = np.zeros(dom_shape or [1], dtype=np.bool_)
        try:
            shifted = [(simplify(lo - m), simplify(hi - m)) for (lo, hi), m in zip(vmap_box, mins)]
            for env in walk:
                sl = box_slices(shifted, env, dom_shape)
                if sl is not None:
                    seen[sl] = True
            if not seen.all():
                raise fail
            return
        except ValueError:
            pass
    if fused_digits_cover(vmap_box, b, anchors, ranges):
        return
    if dom_shape is not None and mins is not None and _tiles_cover(vmap_box, dom_shape, mins, anchors):
        return
    relax_ranges = {f.loop_var: Range(f.min, f.extent) for f in anchors}
    for (lo, hi), iv in zip(vmap_box, b.iter_vars):
        tlo, thi = relax(lo, relax_ranges)[0], relax(hi, relax_ranges)[1]
        if not (prove(tlo <= iv.dom.min, ranges) and prove(thi >= iv.dom.min + iv.dom.extent - 1, ranges)):
            raise fail
        step = substitute(lo, {loop_var: loop_var + 1})
        if free_vars(lo) & {loop_var} and not prove(step <= hi + 1, ranges):
            raise fail


def _tiles_cover(box, dom_shape: list[int], mins: list[int], anchors: list[For]) -> bool:
    """The boxes of the anchor loops' iterations are tiles of constant extents, each at a multiple
    of its extent, and as many distinct ones as the domain holds: they cover it (a domain too
    large for the element-wise check; the anchors' iterations are run, not the elements)."""
    import numpy as np

    from ...arith import eval_array

    extents: list[int] = []
    for (lo, hi), n in zip(box, dom_shape):
        ext = simplify(hi - lo + 1)
        if not isinstance(ext, IntImm) or ext.value <= 0 or n % ext.value:
            return False
        extents.append(ext.value)
    spans = []
    for f in anchors:
        if not (isinstance(f.min, IntImm) and isinstance(f.extent, IntImm)):
            return False
        spans.append(np.arange(f.min.value, f.min.value + f.extent.value))
    if math.prod(len(a) for a in spans) > ENUM_LIMIT * 50:
        return False
    grids = np.meshgrid(*spans, indexing="ij") if spans else []
    env = {f.loop_var: g.ravel() for f, g in zip(anchors, grids)}
    size = grids[0].size if grids else 1
    digits = []
    try:
        for (lo, _), e, m, n in zip(box, extents, mins, dom_shape):
            at = np.broadcast_to(np.asarray(eval_array(lo, env), dtype=np.int64), (size,)) - m
            if ((at % e) != 0).any() or (at < 0).any() or (at >= n).any():
                return False
            digits.append(at // e)
    except (ValueError, KeyError):
        return False
    tiles = math.prod(n // e for n, e in zip(dom_shape, extents))
    return len(set(zip(*digits))) == tiles if digits else tiles == 1
