"""Boxes of buffer elements and the small helpers the compute-location analyses share.

A `Box` is an inclusive `(lo, hi)` per buffer dimension: what a block's region covers below an
anchor loop (`region_box`), cut to the buffer (`in_shape`), compared by proof when symbolic
(`covers_symbolic`) or walked element by element when constant and small (`walk_assignments`,
`box_slices`; at most ENUM_LIMIT loop iterations and CELL_LIMIT buffer elements).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

from ...arith import eval_int, prove, relax, simplify
from ...ir import (
    Block,
    BlockRealize,
    Buffer,
    BufferRegion,
    For,
    IntImm,
    PrimExpr,
    Range,
    SeqStmt,
    Stmt,
    Var,
    as_expr,
    const,
    max_,
    min_,
    substitute,
)
from ...ir.tree import Path, children, loops_in_scope, path_ranges
from . import index_as, same_width

Box = list[tuple[PrimExpr, PrimExpr]]  # inclusive (lo, hi) per dimension


ENUM_LIMIT = 20_000  # loop iterations walked by the exact checks


CELL_LIMIT = 2_000_000  # buffer elements tracked by the exact checks


def reads_of(block: Block) -> set[Buffer]:
    return {r.buffer for r in block.reads}


def writes_of(block: Block) -> set[Buffer]:
    return {r.buffer for r in block.writes}


def names_of(buffers) -> str:
    return ", ".join(sorted(b.name for b in buffers))


def region_box(realize: BlockRealize, region, below: Path) -> Box:
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


def buffer_box(block: Block, regions, buf: Buffer) -> BufferRegion:
    return next(r for r in regions if r.buffer is buf)


def child_realizes_with_paths(stmt: Stmt) -> list[tuple[BlockRealize, Path]]:
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


def body_items(loop: For) -> list[Stmt]:
    return list(loop.body.seq) if isinstance(loop.body, SeqStmt) else [loop.body]


def anchor_loops(lpath: Path, loop: For) -> list[For]:
    """The anchor loop and the loops around it in its scope, outer to inner."""
    return loops_in_scope(lpath + (loop,))


def walk_assignments(loops: list[For], ranges: dict[Var, Range]):
    """Every assignment of `loops` in execution order, or None when not constant and small."""
    extents = []
    for f in loops:
        if not (isinstance(f.min, IntImm) and isinstance(f.extent, IntImm)):
            return None
        extents.append(range(f.min.value, f.min.value + f.extent.value))
    if math.prod(len(e) for e in extents) > ENUM_LIMIT:
        return None
    return [dict(zip([f.loop_var for f in loops], vals)) for vals in itertools.product(*extents)]


def shape_of(buf: Buffer) -> tuple[int, ...] | None:
    shape = int_values(buf.shape)
    if shape is not None and math.prod(shape) <= CELL_LIMIT:
        return tuple(shape)
    return None


def int_values(exprs: Iterable[PrimExpr]) -> list[int] | None:
    """The values of constant integers (IntImm), or None when one of `exprs` is not constant."""
    out = []
    for e in exprs:
        if not isinstance(e, IntImm):
            return None
        out.append(e.value)
    return out


def box_slices(box: Box, env, shape) -> tuple[slice, ...] | None:
    out = []
    for (lo, hi), n in zip(box, shape):
        a, b = eval_int(lo, env), eval_int(hi, env)
        if b < a:
            return None
        out.append(slice(max(a, 0), min(b, n - 1) + 1))
    return tuple(out)


def box_inside(box: Box, env, shape) -> bool:
    return all(0 <= eval_int(lo, env) and eval_int(hi, env) < n for (lo, hi), n in zip(box, shape))


def proved_le(a: PrimExpr, b, ranges) -> bool:
    a, b = same_width(a, as_expr(b, a.dtype))
    return prove(a <= b, ranges)


def covers_symbolic(outer: Box, inner: Box, ranges) -> bool:
    return all(proved_le(o_lo, i_lo, ranges) and proved_le(i_hi, o_hi, ranges) for (o_lo, o_hi), (i_lo, i_hi) in zip(outer, inner))


def inside_symbolic(box: Box, shape: tuple[int, ...], ranges) -> bool:
    return all(prove(lo >= 0, ranges) and proved_le(hi, n - 1, ranges) for (lo, hi), n in zip(box, shape))


def in_shape(box: Box, buf: Buffer) -> Box:
    """`box` clipped to the buffer: a read region past the buffer's edge (`T.reads(B[v:v + 2])`
    whose far element a `T.if_then_else` guards, a concat's other branch) names no element any
    block writes, and a program that ran such a read would be out of bounds anyway."""
    return [(simplify(max_(lo, const(0, lo.dtype))), simplify(min_(hi, index_as(n, hi.dtype) - 1)))
            for (lo, hi), n in zip(box, buf.shape)]
