"""transform_block_layout: re-lay out a block's iteration space through an index map (TVM's
primitive of that name).

`transform_block_layout(block, lambda i, j: (i * 128 + j,))` gives the block new iterators
`v0, ...`, one per output of the map, with the domain the map's image spans, and a new loop nest
`ax0, ...` binding them one to one; the body reads the old iterators back through the inverse of
the map. As in TVM the block must be alone in its loop nest, its loops start at 0 and bind its
iterators trivially (iterator k = loop k), and the map must be a bijection of the iteration box
onto the new box (fusions, splits and permutations of the iterators: `i * 128 + j`, `i // 4`,
`i % 4`); each new iterator must mix iterators of one kind only (spatial or reduction).
The inverse comes from tdsl's mixed-radix proof (layout.py): each output is a number whose
digits are slices of the indices, every digit in exactly one output, with no gaps between weights.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable

from ...arith import prove, simplify
from ...ir import (
    TRUE,
    BlockRealize,
    BufferLoad,
    BufferStore,
    For,
    IntImm,
    IRMutator,
    IterVar,
    PrimExpr,
    PrimFunc,
    Range,
    Stmt,
    Var,
    const,
    substitute,
)
from ...ir.tree import fresh_name, loops_in_scope, replace_at, var_names
from ..analysis import expr_text
from ..errors import block_name, schedule_error
from ..tree import find_block, is_true, refresh_block
from .layout import (
    call_index_map,
    decomposition_holds,
    digit_row,
    is_permutation,
    shape_vars,
    slice_digits,
    slice_form,
)


def exact_inverse(params: list[Var], outputs: list[PrimExpr], extents: list[PrimExpr]):
    """For a map that is a bijection of the box `extents` onto a box: (the new extents, a function
    from new indices to the old ones). None when tdsl cannot show the map is one (constant
    extents: mixed-radix maps; symbolic ones: permutations)."""
    if is_permutation(params, outputs):
        pos = {id(o): k for k, o in enumerate(outputs)}
        new_extents = [extents[next(d for d, p in enumerate(params) if p is o)] for o in outputs]
        return new_extents, lambda new: [new[pos[id(p)]] for p in params]
    if not all(isinstance(e, IntImm) for e in extents):
        return _symbolic_fusion(params, outputs, extents)
    ext = [e.value for e in extents]  # type: ignore[attr-defined]
    maybe = [slice_form(o, params, ext) for o in outputs]
    forms = [f for f in maybe if f is not None]
    if len(forms) != len(maybe):
        return None
    digits = slice_digits(forms, ext)
    if digits is None:
        return None
    rows = [digit_row(f, digits) for f in forms]
    if not decomposition_holds(params, outputs, forms, digits, rows, ext):
        return None
    ranges = {key: r for ds in digits for key, r in ds}
    owner: dict[tuple[int, int], tuple[int, int]] = {}  # digit -> (output, weight)
    new_ext: list[int] = []
    for o, (form, row) in enumerate(zip(forms, rows)):
        if form[1] != 0:
            return None
        weight = 1
        for key, w in sorted(row.items(), key=lambda kv: kv[1]):
            if w != weight or key in owner:  # a gap (padding) or a digit used twice
                return None
            owner[key] = (o, w)
            weight *= ranges[key]
        new_ext.append(weight)
    if set(owner) != set(ranges) or math.prod(ranges.values()) != math.prod(ext):
        return None

    def inverse(new: list[PrimExpr]) -> list[PrimExpr]:
        olds: list[PrimExpr] = []
        for d, p in enumerate(params):
            total: PrimExpr = const(0, p.dtype)
            for (dd, c), r in digits[d]:
                o, w = owner[(dd, c)]
                digit = new[o] // w if w > 1 else new[o]
                if w * r < new_ext[o]:
                    digit = digit % r
                total = total + digit * c if c > 1 else total + digit
            olds.append(total)
        return olds

    return [const(n, o.dtype) for n, o in zip(new_ext, outputs)], inverse


def _symbolic_fusion(params: list[Var], outputs: list[PrimExpr], extents: list[PrimExpr]):
    """exact_inverse for symbolic extents: every output fuses whole iterators, `a * ext(b) + b`,
    each iterator in one output (unit-extent ones may be left out or appear anywhere)."""
    ranges = {p: Range(const(0, e.dtype), e) for p, e in zip(params, extents)}
    unit = {id(p) for p, e in zip(params, extents) if _is_one(e)}
    ext_of = {id(p): e for p, e in zip(params, extents)}
    orders: list[list[Var]] = []
    seen: set[int] = set()
    for o in outputs:
        used = [p for p in params if _uses(o, p) and id(p) not in unit]
        if len(used) > 5 or any(id(p) in seen for p in used):
            return None
        seen |= {id(p) for p in used}
        for perm in itertools.permutations(used):  # outer to inner
            fused: PrimExpr = const(0, o.dtype)
            for p in perm:
                fused = fused * ext_of[id(p)] + p
            if _is_zero(simplify(o - fused, ranges)):
                orders.append(list(perm))
                break
        else:
            return None
    if any(id(p) not in seen and id(p) not in unit for p in params):
        return None
    new_extents = []
    for o, order in zip(outputs, orders):
        n: PrimExpr = const(1, o.dtype)
        for p in order:
            n = n * ext_of[id(p)]
        new_extents.append(simplify(n))

    def inverse(new: list[PrimExpr]) -> list[PrimExpr]:
        olds: dict[int, PrimExpr] = {id(p): const(0, p.dtype) for p in params}
        for v, order in zip(new, orders):
            stride: PrimExpr = const(1, v.dtype)
            for k, p in enumerate(reversed(order)):
                digit = v // stride if k else v
                olds[id(p)] = digit % ext_of[id(p)] if k + 1 < len(order) else digit
                stride = stride * ext_of[id(p)]
        return [olds[id(p)] for p in params]

    return new_extents, inverse


def _is_one(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 1


def _is_zero(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 0


class _IndexSimplifier(IRMutator):
    """Simplify buffer indices (TVM's BlockBufferAccessSimplifier) knowing the new iterators' ranges."""

    def __init__(self, ranges: dict[Var, Range]):
        self.ranges = ranges

    def visit_BufferLoad(self, node: BufferLoad):
        node = self.generic_visit(node)
        return BufferLoad(node.buffer, tuple(simplify(i, self.ranges) for i in node.indices))

    def visit_BufferStore(self, node: BufferStore):
        node = self.generic_visit(node)
        return BufferStore(node.buffer, node.value, tuple(simplify(i, self.ranges) for i in node.indices))


def transform_block_layout(func: PrimFunc, block: str, index_map: Callable) -> tuple[PrimFunc, None]:
    """Give `block` the iterators index_map(iterators) and a new loop nest over them."""
    realize, path = find_block(func, block, "transform_block_layout")
    b = realize.block
    loops = loops_in_scope(path)
    rule = "transform_block_layout needs a block alone in its loop nest, whose loops start at 0 and bind " \
           "its iterators one to one in order (iterator k = loop k)"
    for f in loops:
        if not (isinstance(f.min, IntImm) and f.min.value == 0):
            raise schedule_error(func, "transform_block_layout", f"loop {f.loop_var.name} around "
                                 f"{block_name(block)} starts at {expr_text(f.min)}, not 0", blocks=(block,),
                                 loops=(f.loop_var,), rule=rule)
    for f, inner in zip(loops, loops[1:] + [realize]):
        if f.body is not inner:
            raise schedule_error(func, "transform_block_layout", f"loop {f.loop_var.name} around "
                                 f"{block_name(block)} holds more than the block's own loop nest",
                                 blocks=(block,), loops=(f.loop_var,), rule=rule,
                                 fix="move the other statements out of the nest first")
    trivial = len(loops) == len(b.iter_vars) and all(v is f.loop_var for v, f in zip(realize.iter_values, loops))
    if not trivial or not is_true(realize.predicate):
        raise schedule_error(func, "transform_block_layout", f"{block_name(block)} is not bound trivially: its "
                             "iterators must be exactly its loops, in order, without a T.where",
                             blocks=(block,), rule=rule,
                             fix="apply it before split / fuse / reorder change the block's loops")
    for iv in b.iter_vars:
        if not (isinstance(iv.dom.min, IntImm) and iv.dom.min.value == 0):
            raise schedule_error(func, "transform_block_layout", f"iterator {iv.var.name} of {block_name(block)} "
                                 "does not start at 0", blocks=(block,), rule=rule)
    for f, iv in zip(loops, b.iter_vars):
        if not prove(f.extent.eq(iv.dom.extent)):  # the new nest runs the whole domain
            raise schedule_error(func, "transform_block_layout", f"loop {f.loop_var.name} runs "
                                 f"{expr_text(f.extent)} iterations but iterator {iv.var.name} of "
                                 f"{block_name(block)} has the domain [0, {expr_text(iv.dom.extent)})",
                                 blocks=(block,), loops=(f.loop_var,), rule=rule + ", over its whole domain")
        if f.kind != "serial" or f.annotations:
            raise schedule_error(func, "transform_block_layout", f"loop {f.loop_var.name} around "
                                 f"{block_name(block)} is {f.thread_tag or f.kind}"
                                 + (" with annotations" if f.kind == "serial" else "")
                                 + ", which the new serial loops would drop", blocks=(block,), loops=(f.loop_var,),
                                 rule=rule + ", and plain serial loops",
                                 fix="apply it before parallel / vectorize / bind / annotate")
    params, outputs = call_index_map(func, "transform_block_layout", block, index_map,
                                     [iv.var.dtype for iv in b.iter_vars],
                                     f"{block_name(block)} has {len(b.iter_vars)} iterators",
                                     "one index per iterator of the block", _dimensions(func))
    extents = [iv.dom.extent for iv in b.iter_vars]
    got = exact_inverse(params, outputs, extents)
    shown = ", ".join(expr_text(o) for o in outputs) + ("," if len(outputs) == 1 else "")
    if got is None:
        raise schedule_error(func, "transform_block_layout", f"the index map ({shown}) is not a one-to-one "
                             f"map of the iteration space of {block_name(block)} onto a box that tdsl can invert",
                             blocks=(block,),
                             rule="the map must be a bijective affine map of the iterators: fusions "
                                  "(i * 128 + j), splits (i // 4, i % 4) and permutations, without padding "
                                  "(symbolic extents: fusions and permutations)")
    new_extents, inverse = got
    kinds = {p: iv.kind for p, iv in zip(params, b.iter_vars)}
    new_ivs = []
    taken = var_names(func)
    for k, (o, ext) in enumerate(zip(outputs, new_extents)):
        used = {kinds[p] for p in params if _uses(o, p)}
        if len(used) != 1:
            what = "no iterator" if not used else "spatial and reduction iterators"
            raise schedule_error(func, "transform_block_layout", f"the new iterator {expr_text(o)} of "
                                 f"{block_name(block)} mixes {what}", blocks=(block,),
                                 rule="each new iterator is made of iterators of one kind (spatial or reduction)")
        v = Var(fresh_name(f"v{k}", taken), o.dtype)
        new_ivs.append(IterVar(v, Range(const(0, ext.dtype), ext), used.pop()))
    olds = inverse([iv.var for iv in new_ivs])
    vmap = {iv.var: simplify(old, _ranges(new_ivs)) for iv, old in zip(b.iter_vars, olds)}
    simp = _IndexSimplifier(_ranges(new_ivs))
    body = simp.visit(substitute(b.body, vmap))
    init = None if b.init is None else simp.visit(substitute(b.init, vmap))
    new_block = refresh_block(dataclasses.replace(b, iter_vars=tuple(new_ivs), body=body, init=init), keep_order=True)
    axes = [Var(fresh_name(f"ax{k}", taken), iv.var.dtype) for k, iv in enumerate(new_ivs)]
    stmt: Stmt = BlockRealize(tuple(axes), TRUE, new_block)
    for ax, iv in reversed(list(zip(axes, new_ivs))):
        stmt = For(ax, const(0, ax.dtype), iv.dom.extent, "serial", stmt)
    top = loops[0] if loops else realize
    top_idx = next(i for i, p in enumerate(path) if p is top) if loops else len(path)
    return replace_at(func, path[:top_idx], top, stmt), None


def _dimensions(func: PrimFunc) -> frozenset:
    """The function's scalar parameters and the variables of its buffers' shapes."""
    return frozenset(p for p in func.params if isinstance(p, Var)) | shape_vars(func)


def _uses(e: PrimExpr, v: Var) -> bool:
    from ...ir import free_vars

    return v in free_vars(e)


def _ranges(ivs: list[IterVar]) -> dict[Var, Range]:
    return {iv.var: iv.dom for iv in ivs}

