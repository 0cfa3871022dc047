"""Tensorize primitives: blockize and tensorize, and the structural matcher behind them.

blockize(loop)
    The subtree under `loop` (loops down to exactly one block) becomes an inner block inside a
    new outer block `<name>_o` (TensorIR semantics). Each iterator binding of the block is
    divided into an outer part (the enclosing loops) and an inner part (the loops under
    `loop`): `v = vo * E + vi`, where E is the extent the inner loops cover. The outer block
    gets one iterator per outer part; the inner block keeps the inner parts. A block with a
    `T.init()` hands it to the outer block when the outer block has reduction iterators, as a
    loop nest `<name>_init` over the inner spatial loops, so that it still runs once before the
    first update of each tile; when the whole reduction is inside the tile, the init stays in
    the inner block (its condition is unchanged). The conjuncts of the block's predicate that
    use no loop under `loop` move to the outer block (TVM does the same): they decide whether
    the tile runs at all, and the outer iterators may leave their domains where they fail.

tensorize(block_or_loop, intrin)
    (A loop is blockized first.) The block's body must equal the intrinsic's description up to
    renaming, the order of the operands of `+` and `*`, and a base offset per buffer dimension:
    each dimension j of a description buffer D maps to one dimension k_j of the real buffer X,
    and every access `X[e_1, ..., e_n]` of the code is `D[d_1, ..., d_m]` of the description
    with `e_{k_j} = base_{k_j} + d_j`, the other real dimensions indexed by bases only, where
    the bases depend only on what is outside the block. The real dimensions are the innermost
    ones in order when that fits; else any others the indices fit and the intrinsic's constant
    strides allow, in order if possible: a tile of a packed layout, or one in non-adjacent
    dimensions (C = Y[b, k0:k0+MR, y, x0:x0+NR] of an NCHW output is an MR x NR tile with row
    stride H*W, which the implementation gets through its symbolic strides). The buffers'
    dtypes and scopes must agree, and constant strides declared by the intrinsic's buffers must
    be the real ones. A mismatch is a ScheduleError that says what differs and which primitive
    fixes it.
    Unit iterators: blockize gives an iterator whose inner part is a loop of extent 1 (after
    `split(i, [None, 1])`) to the outer block only, so the code's block can lack some of the
    description's extent-1 iterators; those match as the constant start of their domain (the
    code's outer iterator then shows up as a base offset).

Representation. A tensorized block keeps the description's computation as its body (the
user's own code, which matched it) and records the intrinsic in the block annotation
``"tdsl.tensor_intrin"``. So the meaning is never lost: `tdsl.interpret` and any backend that
cannot run the implementation compute through the description, and printing/parsing round
trips. Lowering (`tdsl.lower.tensorize.apply_tensor_intrinsics(func, target)`, the
first lowering pass) matches again and swaps in the implementation, with its buffers bound to
the matched regions, when the intrinsic's target is the one being built for (and the host CPU
has its features). An init the description does not cover stays ordinary code.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...arith import infer_block_regions, linear_form, prove, simplify
from ...errors import ScheduleError
from ...intrinsics.match import Mismatch, match
from ...intrinsics.registry import TensorIntrin
from ...ir import (
    TRUE,
    Binary,
    Block,
    BlockRealize,
    For,
    IntImm,
    IterVar,
    PrimExpr,
    PrimFunc,
    Range,
    Stmt,
    Var,
    collect,
    const,
    free_vars,
    is_const,
    is_true,
    substitute,
)
from ...ir.attrs import TENSOR_INTRIN
from ...ir.tree import block_names, child_realizes, fresh_name, path_ranges, replace_at
from ..analysis import expr_text
from ..errors import block_name, loop_name, schedule_error
from ..tree import find_block, find_loop

# blockize ----------------------------------------------------------------------------------

@dataclass
class _Division:
    """How one block iterator divides: outer binding/extent (None: no outer part), inner binding,
    inner extent, and the expression that replaces the iterator in the block's code."""

    iv: IterVar
    outer: PrimExpr | None = None
    outer_dom: Range | None = None
    inner: PrimExpr | None = None
    inner_extent: PrimExpr | None = None
    outer_var: Var | None = None
    inner_var: Var | None = None


def _loop_chain(func: PrimFunc, loop: For, primitive: str) -> tuple[list[For], BlockRealize]:
    """The loops from `loop` down to the single block under it."""
    chain = [loop]
    node: Stmt = loop.body
    while isinstance(node, For):
        chain.append(node)
        node = node.body
    if isinstance(node, BlockRealize):
        return chain, node
    inner = child_realizes(loop)
    names = ", ".join(f'"{r.block.name}"' for r in inner) or "none"
    raise schedule_error(
        func, primitive, f"the body of {loop_name(loop.loop_var)} is not a perfect loop nest around one block "
        f"(a {type(node).__name__} under {loop_name(chain[-1].loop_var)}; blocks inside: {names})",
        loops=(loop.loop_var,),
        rule=f"{primitive} takes a loop whose body is a perfect loop nest around exactly one block",
        fix="choose a loop inside the nest of one block, or split the other statements out first")


def _divide(func: PrimFunc, primitive: str, loop: For, iv: IterVar, value: PrimExpr, inner: list[For],
            ranges: dict, outer_ranges: dict) -> _Division:
    """`value` = outer * E + inner; the outer part is simplified knowing `outer_ranges`."""
    inner_vars = [f.loop_var for f in inner]
    form = linear_form(value, inner_vars)
    if form is None:
        raise schedule_error(func, primitive, f"the binding {iv.var.name} = {expr_text(value)} is not an affine "
                             f"function of the loops under {loop_name(loop.loop_var)}", loops=(loop.loop_var,),
                             rule="blockize divides each binding into outer and inner parts (v = vo * E + vi)",
                             fix="blockize a loop above the non-affine part")
    coeffs, rest = form
    terms = sorted(((c, f) for f, c in zip(inner, (coeffs[v] for v in inner_vars)) if c != 0), key=lambda t: t[0])
    div = _Division(iv)
    if not terms:  # bound by the outer loops only
        div.outer, div.outer_dom = value, iv.dom
        return div
    expected = 1
    for c, f in terms:
        ext = simplify(f.extent)
        if c != expected or not isinstance(ext, IntImm) or not is_const(f.min, 0):
            raise schedule_error(
                func, primitive, f"the inner part of {iv.var.name} = {expr_text(value)} does not cover a "
                f"contiguous range (coefficient {c} of {loop_name(f.loop_var)}, expected {expected})",
                loops=(loop.loop_var,), rule="the loops under the blockized loop must cover 0 .. E-1 of each "
                "iterator they drive, like the loops a split makes", fix="fuse or reorder the inner loops first")
        expected *= ext.value
    extent = const(expected, value.dtype)
    inner_value = simplify(sum((f.loop_var * c for c, f in terms[1:]), terms[0][1].loop_var * terms[0][0]))
    loop_vars_outside = {v for v in ranges}
    if not (free_vars(rest) & loop_vars_outside):  # the inner loops alone (plus a constant)
        div.inner = simplify(inner_value + rest) if not is_const(rest, 0) else inner_value
        div.inner_extent = iv.dom.extent
        return div
    if not (is_const(iv.dom.min, 0) and prove(Binary("eq", simplify(rest % extent, ranges), const(0, rest.dtype)),
                                           ranges)
            and prove(Binary("eq", simplify(iv.dom.extent % extent), const(0, extent.dtype)))):
        raise schedule_error(
            func, primitive, f"{iv.var.name} = {expr_text(value)} does not divide into an outer part times "
            f"{expected} plus the inner loops", loops=(loop.loop_var,),
            rule="blockize needs v = vo * E + vi with E the extent the inner loops cover",
            fix=f"split the loops so that their factors divide the iterator's extent ({expr_text(iv.dom.extent)})")
    div.outer = simplify(rest // extent, outer_ranges)
    div.outer_dom = Range(const(0, extent.dtype), simplify(iv.dom.extent // extent))
    div.inner, div.inner_extent = inner_value, extent
    return div


def blockize(func: PrimFunc, loop_var: Var, preserve_unit_iters: bool = False) -> tuple[PrimFunc, str]:
    """Turn the subtree under `loop_var` into an inner block of a new outer block `<name>_o`;
    `preserve_unit_iters` binds an outer iterator to a loop of extent 1 (`vi_o = i0`, TVM's
    default form) instead of its value (`vi_o = 0`)."""
    return _blockize(func, loop_var, "blockize", preserve_unit_iters)


def _blockize(func: PrimFunc, loop_var: Var, primitive: str, preserve_unit_iters: bool = False) -> tuple[PrimFunc, str]:
    loop, path = find_loop(func, loop_var, primitive)
    chain, realize = _loop_chain(func, loop, primitive)
    block = realize.block
    ranges = path_ranges(path)
    outer_ranges = {v: r for v, r in ranges.items()
                    if not (preserve_unit_iters and isinstance(r.extent, IntImm) and r.extent.value == 1)}
    divs = [_divide(func, primitive, loop, iv, v, chain, ranges, outer_ranges)
            for iv, v in zip(block.iter_vars, realize.iter_values)]
    # the conditions on the outer loops only guard the whole tile: they go to the outer block,
    # whose iterators would otherwise be bound outside their domains where they fail
    outer_pred, inner_pred = _split_predicate(realize.predicate, {f.loop_var for f in chain})
    # a predicate mixing outer and inner loops stays inside (i_0 * 6 + i_1 * 2 + i_2 < 16 of a
    # 3-way split of 16 by 3 and 2): the outer block then guards its own iterators' domains; a
    # tile outside them holds only instances outside the block's domain, which that predicate
    # switched off
    for d in divs if not is_true(inner_pred) else ():
        if d.outer is not None and not prove(Binary("lt", d.outer, d.outer_dom.extent), ranges):
            guard = Binary("lt", d.outer, d.outer_dom.extent)
            outer_pred = guard if is_true(outer_pred) else Binary("and", outer_pred, guard)
    realize = dataclasses.replace(realize, predicate=inner_pred)
    taken = {v.name for v in collect(func.body, Var)}
    vmap: dict[Var, PrimExpr] = {}
    outer_ivs: list[IterVar] = []
    outer_values: list[PrimExpr] = []
    inner_ivs: list[IterVar] = []
    inner_values: list[PrimExpr] = []
    for d in divs:
        iv = d.iv
        if d.outer is not None:
            d.outer_var = Var(fresh_name(f"{iv.var.name}_o", taken), iv.var.dtype)
            outer_ivs.append(IterVar(d.outer_var, d.outer_dom, iv.kind))
            outer_values.append(d.outer)
        if d.inner is None:
            vmap[iv.var] = d.outer_var
            continue
        if d.outer is None:
            inner_ivs.append(iv)
            inner_values.append(d.inner)
            continue
        d.inner_var = Var(fresh_name(f"{iv.var.name}_i", taken), iv.var.dtype)
        inner_ivs.append(IterVar(d.inner_var, Range(const(0, d.inner_extent.dtype), d.inner_extent), iv.kind))
        inner_values.append(d.inner)
        vmap[iv.var] = d.outer_var * d.inner_extent + d.inner_var
    body = substitute(block.body, vmap)
    # With every reduction iterator inside the tile the init's condition is unchanged: it stays
    # in the inner block (as in TensorIR; an outer block without reduction has no init).
    keep = block.init is not None and not any(d.iv.kind == "R" and d.outer is not None for d in divs)
    inner_init = substitute(block.init, vmap) if keep else None
    inner_block = dataclasses.replace(block, iter_vars=tuple(inner_ivs), body=body, init=inner_init)
    reads, writes = infer_block_regions(inner_block)
    # in the block's declared order (TVM's te GEMM reads A, B before the C it updates: a
    # cache_read by index names the same buffer after blockize)
    order = [r.buffer for r in block.reads]
    reads = tuple(sorted(reads, key=lambda r: order.index(r.buffer) if r.buffer in order else len(order)))
    inner_block = dataclasses.replace(inner_block, reads=reads, writes=writes)
    inner_realize = BlockRealize(tuple(inner_values), realize.predicate, inner_block)
    nest: Stmt = inner_realize
    for f in reversed(chain):
        nest = dataclasses.replace(f, body=nest)
    init = None
    if block.init is not None and not keep:
        init = _lift_init(func, primitive, realize, chain, divs, taken)
    names = set(block_names(func))
    outer_name = fresh_name(f"{block.name}_o", names)
    outer = Block(outer_name, tuple(outer_ivs), (), (), nest, init)
    reads, writes = infer_block_regions(outer)
    outer = dataclasses.replace(outer, reads=reads, writes=writes)
    new_realize = BlockRealize(tuple(outer_values), outer_pred, outer)
    return replace_at(func, path, loop, new_realize), outer_name


def blockize_blocks(func: PrimFunc, names: list[str]) -> tuple[PrimFunc, str]:
    """Wrap sibling blocks (each with the loops above it, up to their common parent) in one new
    block without iterators, `outer_<names>_` (TVM's `blockize([b1, b2])`): the subtrees are
    consecutive statements of the parent and hold no other block."""
    from ...ir import SeqStmt

    primitive = "blockize"
    if len(names) < 1 or len(set(names)) != len(names):
        raise schedule_error(func, primitive, f"expected distinct blocks, got {names}",
                             rule="blockize takes a loop, or a list of distinct sibling blocks")
    paths = [find_block(func, n, primitive) for n in names]
    # the common parent: the deepest SeqStmt on every path
    first = paths[0][1]
    depth = 0
    while all(len(p) > depth and p[depth] is first[depth] for _, p in paths):
        depth += 1
    parent = first[depth - 1] if depth else None
    if not isinstance(parent, SeqStmt) or len(names) < 2:
        raise schedule_error(func, primitive, f"blocks {', '.join(names)} are not siblings under one sequence "
                             "of statements", blocks=tuple(names),
                             rule="the blocks (with their loops) must be consecutive statements of one scope",
                             fix="blockize a loop above them instead")
    tops = [(p + (r,))[depth] for r, p in paths]
    index = [next(k for k, c in enumerate(parent.seq) if c is t) for t in tops]
    order = sorted(range(len(index)), key=lambda k: index[k])
    lo, hi = index[order[0]], index[order[-1]]
    if sorted(index) != list(range(lo, hi + 1)):
        raise schedule_error(func, primitive, f"blocks {', '.join(names)} are not consecutive statements: another "
                             "statement sits between them", blocks=tuple(names),
                             rule="blockize of blocks wraps consecutive statements of one scope")
    for t, n in zip(tops, names):
        others = [b for b in block_names_in(t) if b != n]
        if others:
            raise schedule_error(func, primitive, f"the loops above {block_name(n)} also hold {block_name(others[0])}",
                                 blocks=(n, others[0]), rule="each listed block's subtree holds only that block",
                                 fix="list every block of those loops")
    stmts = parent.seq[lo:hi + 1]
    taken = set(block_names(func))
    outer_name = fresh_name("outer_" + "".join(f"{n}_" for n in (names[k] for k in order)), taken)
    body = stmts[0] if len(stmts) == 1 else SeqStmt(tuple(stmts))
    outer = Block(outer_name, (), (), (), body)
    reads, writes = infer_block_regions(outer)
    outer = dataclasses.replace(outer, reads=reads, writes=writes)
    new_seq = parent.seq[:lo] + (BlockRealize((), TRUE, outer),) + parent.seq[hi + 1:]
    new_parent: Stmt = new_seq[0] if len(new_seq) == 1 else SeqStmt(new_seq)
    return replace_at(func, first[:depth - 1], parent, new_parent), outer_name


def block_names_in(stmt: Stmt) -> list[str]:
    return [r.block.name for r in collect(stmt, BlockRealize)]


def _split_predicate(pred: PrimExpr, inner: set[Var]) -> tuple[PrimExpr, PrimExpr]:
    """(the conjuncts of `pred` free of the `inner` loops, the others), each TRUE when empty."""
    conjuncts: list[PrimExpr] = []
    stack = [pred]
    while stack:
        e = stack.pop()
        if isinstance(e, Binary) and e.op == "and":
            stack.extend((e.b, e.a))
        elif not is_true(e):
            conjuncts.append(e)
    outer = [c for c in conjuncts if not (free_vars(c) & inner)]
    rest = [c for c in conjuncts if free_vars(c) & inner]

    def join(parts: list[PrimExpr]) -> PrimExpr:
        out: PrimExpr = TRUE
        for p in parts:
            out = p if out is TRUE else Binary("and", out, p)
        return out

    return join(outer), join(rest)


def _lift_init(func: PrimFunc, primitive: str, realize: BlockRealize, chain: list[For], divs: list[_Division],
               taken: set[str]) -> Stmt:
    """The block's init as a loop nest over the inner spatial loops, for the outer block (under
    the block's predicate, so that a partial tile initialises only its own elements)."""
    block = realize.block
    spatial_loops: set[Var] = set()
    reduce_loops: set[Var] = set()
    for d in divs:
        if d.inner is not None:
            (reduce_loops if d.iv.kind == "R" else spatial_loops).update(free_vars(d.inner))
    mixed = spatial_loops & reduce_loops
    if mixed:
        v = next(iter(mixed))
        raise schedule_error(func, primitive, f"{loop_name(v)} drives both spatial and reduction iterators of "
                             f"{block_name(block.name)}, so its T.init cannot be separated",
                             loops=(v,), blocks=(block.name,),
                             rule="blockize moves the init over the inner spatial loops only",
                             fix="split spatial and reduction loops apart before blockize")
    loops = [f for f in chain if f.loop_var in spatial_loops]
    lmap = {f.loop_var: Var(fresh_name(f"{f.loop_var.name}_init", taken), f.loop_var.dtype) for f in loops}
    ivs: list[IterVar] = []
    values: list[PrimExpr] = []
    init_map: dict[Var, PrimExpr] = {}
    for d in divs:
        if d.inner is None:
            init_map[d.iv.var] = d.outer_var
        elif d.iv.kind == "S":
            var = Var(fresh_name(f"{d.iv.var.name}_init", taken), d.iv.var.dtype)
            dom = d.iv.dom if d.outer is None else Range(const(0, d.inner_extent.dtype), d.inner_extent)
            ivs.append(IterVar(var, dom, "S"))
            values.append(substitute(d.inner, lmap))
            init_map[d.iv.var] = var if d.outer is None else d.outer_var * d.inner_extent + var
    init_body = substitute(block.init, init_map)
    stray = set(collect(init_body, Var)) & {d.iv.var for d in divs}
    if stray:
        raise schedule_error(func, primitive, f"the T.init of {block_name(block.name)} uses the reduction iterator "
                             f"{next(iter(stray)).name}", blocks=(block.name,),
                             rule="an init may only use the spatial iterators of its block")
    inner_loops = {f.loop_var for f in chain}
    if free_vars(realize.predicate) & (inner_loops - spatial_loops):
        raise schedule_error(func, primitive, f"the predicate of {block_name(block.name)} depends on its inner "
                             "reduction loops, so its T.init cannot be moved out of them", blocks=(block.name,),
                             rule="blockize moves the init over the inner spatial loops only",
                             fix="split the reduction loop by a factor that divides its extent")
    init_name = fresh_name(f"{block.name}_init", set(block_names(func)))
    init_block = Block(init_name, tuple(ivs), (), (), init_body)
    reads, writes = infer_block_regions(init_block)
    init_block = dataclasses.replace(init_block, reads=reads, writes=writes)
    predicate = substitute(realize.predicate, lmap) if not is_true(realize.predicate) else TRUE
    stmt: Stmt = BlockRealize(tuple(values), predicate, init_block)
    for f in reversed(loops):
        stmt = For(lmap[f.loop_var], f.min, f.extent, "serial", stmt)
    return stmt


# tensorize ---------------------------------------------------------------------------------

def tensorize(func: PrimFunc, target: str | Var, intrin_name: str,
              preserve_unit_iters: bool = False) -> tuple[PrimFunc, None]:
    """Mark a block (or the block blockize makes of a loop) as computed by tensor intrinsic
    `intrin_name` after checking that it computes the intrinsic's description
    (`preserve_unit_iters` as in blockize)."""
    if not isinstance(intrin_name, str):
        raise schedule_error(func, "tensorize", f"the intrinsic name must be a string, not {intrin_name!r}")
    try:
        intrin = TensorIntrin.get(intrin_name)
    except ScheduleError as exc:  # unknown name: re-raise with the schedule's context
        culprit = {"loops": (target,)} if isinstance(target, Var) else {"blocks": (target,)}
        raise schedule_error(func, "tensorize", str(exc), **culprit) from None
    original = func
    if isinstance(target, Var):
        find_loop(func, target, "tensorize")
        func, name = _blockize(func, target, "tensorize", preserve_unit_iters)
        culprit = {"loops": (target,)}
    else:
        name = target
        culprit = {"blocks": (target,)}
    realize, path = find_block(func, name, "tensorize")
    block = realize.block
    intrin = _form_for(intrin, block)
    try:
        match(intrin, block, path + (realize,))
    except Mismatch as m:
        loops = m.loops or culprit.get("loops", ())
        blocks = m.blocks if not loops else ()
        shown_blocks = tuple(b for b in blocks if b in block_names(original)) or culprit.get("blocks", ())
        raise schedule_error(original, "tensorize",
                             f"{_where(target)} does not match the description of {intrin_name!r}: {m.message}",
                             rule="tensorize replaces code that computes exactly the intrinsic's description (up to "
                                  "renaming and a base offset per buffer dimension)",
                             fix=m.fix, loops=tuple(v for v in loops if _has_loop(original, v)),
                             blocks=shown_blocks) from None
    # the implementation's root-block annotations (TVM's T.block_attr in the intrinsic) go to the block
    impl_root = intrin.impl.root_block
    extra = tuple(impl_root.annotations) if impl_root is not None else ()
    keys = {k for k, _ in extra} | {TENSOR_INTRIN}
    pairs = tuple((k, v) for k, v in block.annotations if k not in keys) + extra + ((TENSOR_INTRIN, intrin.name),)
    new_block = dataclasses.replace(block, annotations=pairs)
    return replace_at(func, path, realize, dataclasses.replace(realize, block=new_block)), None


def _form_for(intrin: TensorIntrin, block: Block) -> TensorIntrin:
    """Of the intrinsic's forms (`TensorIntrin.forms`), the first whose buffer scopes the block
    uses (TVM's "warp" tiles or tdsl's fragment scopes); the intrinsic itself if none fits."""
    forms = TensorIntrin.forms(intrin.name)
    if len(forms) == 1:
        return intrin
    used = {r.buffer.scope for r in block.reads + block.writes}
    return next((f for f in forms if f.scopes() <= used), intrin)


def _where(target) -> str:
    return loop_name(target) if isinstance(target, Var) else block_name(target)


def _has_loop(func: PrimFunc, var: Var) -> bool:
    return any(f.loop_var is var for f in collect(func.body, For))


