"""Whether a block may move under a loop or into another block (compute_at, reverse_compute_at,
reverse_compute_inline): the block is movable (affine bindings, its instances are its domain,
no condition around it), the loop is in the block's scope, and no block between the old and the
new place uses what the moved block reads or writes.
"""
from __future__ import annotations

import math

from ...arith import prove, relax
from ...ir import Block, BlockRealize, For, PrimFunc, Range, SeqStmt, Stmt, Var, free_vars
from ...ir.tree import Path, all_realizes, child_realizes, loops_in_scope, path_ranges
from ..errors import block_name, loop_name, schedule_error
from ..tree import alloc_site, is_true, outer_ranges
from . import check_affine_bindings, expr_text, refuse_conditions
from .boxes import CELL_LIMIT, anchor_loops, int_values, names_of, reads_of, writes_of
from .digits import symbolic_digit_inside
from .instances import instance_grid as _instance_grid


def check_movable(func: PrimFunc, primitive: str, realize: BlockRealize, path: Path,
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
    if b.init is None and reads_of(b) & writes_of(b):
        shared = names_of(reads_of(b) & writes_of(b))
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
        if not (inside or symbolic_digit_inside(value, iv.dom, loops, ranges)):
            raise schedule_error(func, primitive, f"{block_name(b.name)} binds {iv.var.name} to "
                                 f"{expr_text(value)}, which leaves its domain", blocks=(b.name,),
                                 rule="the bindings of a moved block must stay inside their domains")
        used |= free_vars(value) & {f.loop_var for f in loops}
    points = [f.extent for f in loops if f.loop_var in used]
    doms = [iv.dom.extent for iv in b.iter_vars]
    point_values, dom_values = int_values(points), int_values(doms)
    if point_values is not None and dom_values is not None:
        n_loops = math.prod(point_values)
        n_dom = math.prod(dom_values)
        # (a copy run several times over, e.g. by every thread block of a row of blocks, TVM's
        # cache_read under fused blockIdx loops: running it again writes the same values)
        again = n_loops > n_dom and n_loops % n_dom == 0 and not (reads_of(b) & writes_of(b))
        if n_loops != n_dom and not again:
            raise schedule_error(func, primitive, f"the loops of {block_name(b.name)} run {n_loops} instances "
                                 f"but its iterator domains hold {n_dom}", blocks=(b.name,),
                                 rule=f"{primitive} regenerates every instance of the domain exactly once",
                                 fix="bind each iterator to its whole domain")


def _instances_are_domain(realize: BlockRealize, loops: list[For]) -> bool | None:
    """Whether the instances the loops run (bindings where the predicate holds) are exactly the
    iterator domain, found by running the loops; None when they are not constant and small."""
    import numpy as np

    b = realize.block
    mins = int_values(iv.dom.min for iv in b.iter_vars)
    dom = int_values(iv.dom.extent for iv in b.iter_vars)
    if mins is None or dom is None:
        return None
    if math.prod(dom) > CELL_LIMIT:
        return None
    grid = _instance_grid(realize, loops)
    if grid is None:
        return None
    values, count = grid
    cols = [values[iv.var] - lo for iv, lo in zip(b.iter_vars, mins)]
    if not cols:
        return count > 0
    if any(((c < 0) | (c >= n)).any() for c, n in zip(cols, dom)):
        return False
    return len(np.unique(np.ravel_multi_index(cols, dom))) == math.prod(dom)


def same_scope(func: PrimFunc, primitive: str, block: Block, bpath: Path, loop: For, lpath: Path) -> None:
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


def between_conflicts(func: PrimFunc, primitive: str, block: Block, bpath: Path, loop: For, lpath: Path,
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
        output = moved_first and not any(reads_of(r.block) & writes_of(block) for s in items[bidx + 1:]
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
        clash = (writes_of(o) & (reads_of(block) | writes_of(block))) | (reads_of(o) & writes_of(block))
        if clash:
            raise schedule_error(func, primitive, f"{block_name(o.name)} uses {names_of(clash)} between the place of "
                                 f"{block_name(block.name)} and {loop_name(loop.loop_var)}, so moving the block "
                                 "would change what one of them sees", loops=(loop.loop_var,),
                                 blocks=(block.name, o.name),
                                 rule=f"{primitive} cannot move a block across another that shares its data (a "
                                      "block moves alone when it is the complete block of what it writes)",
                                 fix=f"first move {block_name(o.name)} with sch.{primitive} (working from the "
                                     f"{'last consumer back' if moved_first else 'first producer on'}), or pick a "
                                     f"loop of a direct {'consumer' if moved_first else 'producer'}")


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


def check_outside_readers(func: PrimFunc, b: Block, bpath: Path, loop: For, lpath: Path, boxes) -> None:
    """When the producer's output is seen outside the loop (a parameter, or a later reader), the
    instances under the loop must still cover its whole domain."""
    later = [r.block.name for s in _statements_after(lpath + (loop,)) for r in all_realizes(s)
             if reads_of(r.block) & writes_of(b)]
    params = [buf for buf in writes_of(b) if alloc_site(func, buf) is None]
    if not later and not params:
        return
    anchors = anchor_loops(lpath, loop)
    relax_ranges = {f.loop_var: Range(f.min, f.extent) for f in anchors}
    ranges = outer_ranges(lpath)
    for iv in b.iter_vars:
        if iv.var not in boxes:
            continue
        lo, hi = boxes[iv.var]
        tlo, thi = relax(lo, relax_ranges)[0], relax(hi, relax_ranges)[1]
        if not (prove(tlo <= iv.dom.min, ranges) and prove(thi >= iv.dom.min + iv.dom.extent - 1, ranges)):
            who = f"{block_name(later[0])} reads it after the loop" if later else \
                f"{names_of(params)} is a parameter of {func.name}"
            raise schedule_error(func, "compute_at", f"the consumers under {loop_name(loop.loop_var)} need only "
                                 f"part of what {block_name(b.name)} writes, but {who}",
                                 loops=(loop.loop_var,), blocks=(b.name,),
                                 rule="compute_at may leave out elements only nobody else reads",
                                 fix="compute it at a loop around every reader")
