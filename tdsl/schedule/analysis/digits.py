"""The digit algebra of compute_at and reverse_compute_at.

A store index is a spatial iterator or one digit `(v // s) % r` of it, as transform_layout
leaves them (`B[j // 16, k, j % 16]`); when the digits spell the iterator exactly, the box of
elements a consumer needs is inverted digit by digit (`invert_box`): whole periods below the
first digit the consumers do not pin (exact for aligned tiles, a superset clipped to the domain
otherwise).
"""
from __future__ import annotations

import dataclasses
import itertools

from ...arith import linear_form, prove, relax, simplify
from ...ir import (
    Binary,
    Block,
    BlockRealize,
    Buffer,
    BufferStore,
    For,
    IntImm,
    IterVar,
    PrimExpr,
    PrimFunc,
    Range,
    Var,
    binary,
    collect,
    const,
    free_vars,
    same_expr,
)
from ..errors import block_name, schedule_error
from . import expr_text
from .boxes import Box, buffer_box, child_realizes_with_paths, proved_le, region_box


def symbolic_digit_inside(value: PrimExpr, dom: Range, loops: list[For], ranges: dict[Var, Range]) -> bool:
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


def fused_digits_cover(box: Box, b: Block, anchors: list[For], ranges: dict[Var, Range]) -> bool:
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
        if not (isinstance(lo, Binary) and lo.op in ("floordiv", "floormod") and isinstance(lo.a, Var)
                and prove(lo.eq(hi), ranges) and lo.a in anchor_vars and prove(iv.dom.min.eq(0), ranges)):
            return False
        if lo.op in digits.setdefault(lo.a, {}):
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
    for inner, below in child_realizes_with_paths(block.body):
        for w in inner.block.writes:
            outer = next((r for r in block.writes if r.buffer is w.buffer), None)
            box = region_box(inner, w, below)
            ok = outer is not None and all(
                proved_le(r.min, lo, ranges) and proved_le(hi, simplify(r.min + r.extent - 1), ranges)
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


def store_iters(func: PrimFunc, primitive: str, block: Block) -> dict[Buffer, list[_Digit | None]]:
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


def invert_box(digits: list[_Digit | None], box: Box, shape, ranges) -> dict[Var, tuple[PrimExpr, PrimExpr]]:
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
        lo = const(0, v.dtype)
        hi = const(0, v.dtype)
        for d, (dlo, dhi) in sorted(ds, key=lambda x: -x[0].step):
            step = const(d.step, v.dtype)
            lo, hi = lo + dlo * step, hi + dhi * step
            if not prove(dlo.eq(dhi), ranges):
                hi = hi + (d.step - 1)
                break
        out[v] = (simplify(lo, ranges), simplify(hi, ranges))
    return out


def read_iters(block: Block, buf: Buffer) -> list[tuple[Var, PrimExpr, int] | None]:
    """Per dimension of `buf` in the block's read region: (spatial iterator v, offset c, width w)
    when the dimension is the window [v + c, v + c + w), else None."""
    spatial = [iv.var for iv in block.iter_vars if iv.kind == "S"]
    region = buffer_box(block, block.reads, buf)
    out: list[tuple[Var, PrimExpr, int] | None] = []
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


def read_digits(block: Block, buf: Buffer, hits) -> list[_Digit | None]:
    """Per dimension of `buf` that `hits` (read_iters) leaves out, the digit of one spatial
    iterator the block reads it at, when it reads one element there (else None)."""
    spatial = {iv.var for iv in block.iter_vars if iv.kind == "S"}
    region = buffer_box(block, block.reads, buf)
    out: list[_Digit | None] = []
    for r, hit in zip(region.region, hits):
        d = _digit(r.min) if hit is None and isinstance(r.extent, IntImm) and r.extent.value == 1 else None
        out.append(d if d is not None and d.var in spatial and (d.step, d.radix) != (1, None) else None)
    return out
