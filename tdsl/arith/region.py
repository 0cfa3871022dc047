"""Region inference for blocks (TensorIR's rules) and region helpers for the schedule."""
from __future__ import annotations

from collections.abc import Iterable

from ..ir.buffer import Buffer, BufferRegion
from ..ir.expr import Binary, Broadcast, BufferLoad, Call, IntImm, PrimExpr, Ramp, Range, Var
from ..ir.functor import IRVisitor, substitute
from ..ir.opaque_calls import (
    CP_ASYNC,
    MBARRIER_CALLS,
    TMA_LOAD,
    TMA_STORE,
    WGMMA,
    pointer_effect,
    touches_memory,
    wgmma_box_axis,
)
from ..ir.stmt import Allocate, Block, BlockRealize, BufferStore, Evaluate, For, LetStmt
from .analyzer import Analyzer
from .relax import Relaxer

# per dimension: (lo, hi) inclusive, or None for "the whole dimension"
DimBound = tuple[PrimExpr, PrimExpr] | None


class _Accumulator:
    """Per buffer, the union of the accessed intervals, in order of first appearance."""

    def __init__(self, an: Analyzer):
        self.an = an
        self.dims: dict[Buffer, list[DimBound]] = {}

    def add(self, buffer: Buffer, bounds: list[DimBound]) -> None:
        old = self.dims.get(buffer)
        if old is None:
            self.dims[buffer] = list(bounds)
            return
        self.dims[buffer] = [self._union(a, b) for a, b in zip(old, bounds)]

    def _union(self, a: DimBound, b: DimBound) -> DimBound:
        if a is None or b is None:
            return None
        lo = _pick(self.an, "min", a[0], b[0])
        hi = _pick(self.an, "max", a[1], b[1])
        if lo is None or hi is None:
            return None
        return lo, hi

    def regions(self) -> tuple[BufferRegion, ...]:
        return tuple(BufferRegion(buf, tuple(_to_range(self.an, buf, d, b) for d, b in enumerate(bounds)))
                     for buf, bounds in self.dims.items())


def _pick(an: Analyzer, op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
    """min/max of two bounds when the analyzer can decide which one it is; else None."""
    if a.dtype != b.dtype:
        return None
    if an.same(a, b):
        return a
    r = an.simplify(Binary(op, a, b))
    if isinstance(r, Binary) and r.op == op:
        return None
    return r


def _to_range(an: Analyzer, buf: Buffer, dim: int, b: DimBound) -> Range:
    shape = buf.shape[dim]
    if b is not None and b[0].dtype == b[1].dtype:
        lo, hi = b
        if an.same(lo, hi):  # a single point: the common case, skip the arithmetic
            return Range(lo, IntImm(1, lo.dtype))
        return Range(lo, an.simplify(hi - lo + 1))
    return Range(IntImm(0, shape.dtype), shape)


def _is_address(e) -> bool:
    return isinstance(e, Call) and e.op == "address_of" and isinstance(e.args[0], BufferLoad)


class _Detector(IRVisitor):
    """Walks a block's body and init, relaxing the loops and lets inside the block."""

    def __init__(self, block: Block):
        self.iter_ranges = {iv.var: iv.dom for iv in block.iter_vars}
        self.keep = tuple(self.iter_ranges)
        self.loop_ranges: dict[Var, Range] = {}
        self.lets: dict[Var, PrimExpr] = {}
        self.excluded: set[Buffer] = set(block.alloc_buffers)
        self.an = Analyzer(self.iter_ranges, keep=self.keep)
        self.reads = _Accumulator(self.an)
        self.writes = _Accumulator(self.an)
        self._relaxer: Relaxer | None = None

    # helpers -------------------------------------------------------------------------
    def relaxer(self) -> Relaxer:
        if self._relaxer is None:
            self._relaxer = Relaxer({**self.iter_ranges, **self.loop_ranges}, keep=self.keep)
        return self._relaxer

    def _scoped(self, table: dict, var: Var, value, body) -> None:
        old = table.get(var)
        table[var] = value
        self._relaxer = None
        try:
            self.visit(body)
        finally:
            if old is None:
                del table[var]
            else:
                table[var] = old
            self._relaxer = None

    def _subst(self, e: PrimExpr) -> PrimExpr:
        return substitute(e, self.lets) if self.lets else e

    def _point(self, index: PrimExpr) -> DimBound:
        if isinstance(index, Broadcast):
            return self._point(index.value)
        if isinstance(index, Ramp) and isinstance(index.stride, IntImm):
            # the lanes span base .. base + stride * (lanes - 1)
            first, last = self._point(index.base), self._point(index.base + index.stride * (index.lanes - 1))
            if first is None or last is None:
                return None
            return (first[0], last[1]) if index.stride.value >= 0 else (last[0], first[1])
        if not (index.dtype.lanes == 1 and index.dtype.is_integer):
            return None  # another vector index or an odd type: the whole dimension
        lo, hi = self.relaxer().relax(self._subst(index))
        return None if lo is None or hi is None else (lo, hi)

    def _interval(self, r: Range) -> DimBound:
        if r.min.dtype != r.extent.dtype or not r.min.dtype.is_integer:
            return None
        lo = self.relaxer().relax(self._subst(r.min))[0]
        hi = self.relaxer().relax(self._subst(r.min + r.extent - 1))[1]
        return None if lo is None or hi is None else (lo, hi)

    def _record(self, acc: _Accumulator, buffer: Buffer, bounds: list[DimBound]) -> None:
        if buffer not in self.excluded:
            acc.add(buffer, bounds)

    # visitors ------------------------------------------------------------------------
    def visit_BufferLoad(self, node: BufferLoad) -> None:
        self._record(self.reads, node.buffer, [self._point(i) for i in node.indices])
        self.generic_visit(node)

    def _address(self, address: PrimExpr, effect: str) -> None:
        """An address taken is an opaque access of the whole buffer (tdsl.ir.opaque_calls)."""
        assert isinstance(address, Call)
        load = address.args[0]
        assert isinstance(load, BufferLoad)
        for i in load.indices:
            self.visit(i)
        whole: list[DimBound] = [None] * len(load.buffer.shape)
        if "r" in effect:
            self._record(self.reads, load.buffer, list(whole))
        if "w" in effect:
            self._record(self.writes, load.buffer, list(whole))

    def visit_Call(self, node: Call) -> None:
        if _is_address(node):  # not a call's argument (a let's value, ...): it may be used for anything
            self._address(node, "rw")
            return
        if node.op == CP_ASYNC:   # (dst, src, bytes): writes bytes from dst on, along its last axis
            dst, src, nbytes = node.args
            assert isinstance(dst, BufferLoad) and isinstance(nbytes, IntImm)
            self.visit(src)
            for i in dst.indices:
                self.visit(i)
            count = max(1, nbytes.value // dst.buffer.dtype.itemsize)
            *outer, last = dst.indices
            for k in range(count):
                self._record(self.writes, dst.buffer, [self._point(i) for i in (*outer, last + k if k else last)])
            return
        if node.op in MBARRIER_CALLS or node.op == TMA_LOAD:
            self._hopper_call(node)
            return
        if node.op == TMA_STORE:
            self._tma_store(node)
            return
        if node.op == WGMMA:   # (D, A, B, n, lane): reads the tiles from their corners, updates D from its own
            for arg in node.args:
                for i in (arg.indices if isinstance(arg, BufferLoad) else ()):
                    self.visit(i)
            self.visit(node.args[4])
            b_tile = node.args[2]
            mn_box = wgmma_box_axis(tuple(b_tile.buffer.shape)) \
                if len(node.args) == 8 and isinstance(b_tile, BufferLoad) else None
            for pos, kinds in ((0, (self.reads, self.writes)), (1, (self.reads,)), (2, (self.reads,))):
                load = node.args[pos]
                assert isinstance(load, BufferLoad)
                keep = len(load.indices) - (1 if pos == 0 else 2) if len(load.indices) == len(load.buffer.shape) else 0
                if pos == 2 and mn_box is not None:   # (an N-major B: its column boxes too)
                    keep = min(keep, mn_box)
                bounds: list[DimBound] = [self._point(i) for i in load.indices[:max(0, keep)]]
                for kind in kinds:
                    self._record(kind, load.buffer, bounds + [None] * (len(load.buffer.shape) - len(bounds)))
            return
        for k, arg in enumerate(node.args):
            if _is_address(arg):
                self._address(arg, pointer_effect(node.op, k) if touches_memory(node.op) else "")
            else:
                self.visit(arg)

    def _tma_store(self, node: Call) -> None:
        """A TMA store (dst, src, tmap, *coords) reads src's box (its last len(coords) axes from
        src's other indices on) and the map, and writes the destination tensor."""
        for arg in node.args:
            for i in (arg.indices if isinstance(arg, BufferLoad) else ()):
                self.visit(i)
            if not isinstance(arg, BufferLoad):
                self.visit(arg)
        dst, src, tmap = node.args[:3]
        assert isinstance(dst, BufferLoad) and isinstance(src, BufferLoad) and isinstance(tmap, BufferLoad)
        keep = max(0, len(src.indices) - (len(node.args) - 3))
        outer: list[DimBound] = [self._point(i) for i in src.indices[:keep]]
        self._record(self.reads, src.buffer, outer + [None] * (len(src.buffer.shape) - keep))
        self._record(self.reads, tmap.buffer, [None] * len(tmap.buffer.shape))
        self._record(self.writes, dst.buffer, [None] * len(dst.buffer.shape))

    def _hopper_call(self, node: Call) -> None:
        """An mbarrier call reads and writes its barrier; a TMA load (dst, src, tensor_map, bar,
        *coords) writes dst's last len(coords) axes from dst's other indices on and reads the whole
        source tensor and tensor map."""
        for arg in node.args:
            if isinstance(arg, BufferLoad):
                for i in arg.indices:
                    self.visit(i)
            else:
                self.visit(arg)
        bar = node.args[0] if node.op != TMA_LOAD else node.args[3]
        assert isinstance(bar, BufferLoad)
        point = [self._point(i) for i in bar.indices]
        self._record(self.reads, bar.buffer, list(point))
        self._record(self.writes, bar.buffer, list(point))
        if node.op == TMA_LOAD:
            dst, src, tmap = node.args[:3]
            assert isinstance(dst, BufferLoad) and isinstance(src, BufferLoad) and isinstance(tmap, BufferLoad)
            rank = len(node.args) - 4
            keep = max(0, len(dst.indices) - rank)   # (all of a flattened buffer)
            outer: list[DimBound] = [self._point(i) for i in dst.indices[:keep]]
            self._record(self.writes, dst.buffer, outer + [None] * (len(dst.buffer.shape) - keep))
            self._record(self.reads, src.buffer, [None] * len(src.buffer.shape))
            self._record(self.reads, tmap.buffer, [None] * len(tmap.buffer.shape))

    def visit_Evaluate(self, node: Evaluate) -> None:
        if _is_address(node.value):  # T.evaluate(A.access_ptr("r")): touches nothing; listed as read, as TVM does
            self._address(node.value, "r")
        else:
            self.visit(node.value)

    def visit_BufferStore(self, node: BufferStore) -> None:
        self.visit(node.value)
        for i in node.indices:
            self.visit(i)
        self._record(self.writes, node.buffer, [self._point(i) for i in node.indices])

    def visit_For(self, node: For) -> None:
        self.visit(node.min)
        self.visit(node.extent)
        self._scoped(self.loop_ranges, node.loop_var, Range(self._subst(node.min), self._subst(node.extent)),
                     node.body)

    def visit_LetStmt(self, node: LetStmt) -> None:
        self.visit(node.value)
        self._scoped(self.lets, node.var, self._subst(node.value), node.body)

    def visit_Allocate(self, node: Allocate) -> None:
        self.excluded.add(node.buffer)
        self.visit(node.body)

    def visit_BlockRealize(self, node: BlockRealize) -> None:
        for v in node.iter_values:
            self.visit(v)
        self.visit(node.predicate)
        inner = node.block
        reads, writes = inner.reads, inner.writes
        if not reads and not writes:
            reads, writes = infer_block_regions(inner)
        vmap = {iv.var: self._subst(v) for iv, v in zip(inner.iter_vars, node.iter_values)}
        for acc, regions in ((self.reads, reads), (self.writes, writes)):
            for region in regions:
                bounds = [self._interval(substitute(r, vmap)) for r in region.region]
                self._record(acc, region.buffer, bounds)

    def visit_Block(self, node: Block) -> None:
        # only reached for the block being inferred: nested blocks come through BlockRealize
        if node.init is not None:
            self.visit(node.init)
        self.visit(node.body)


def infer_block_regions(block: Block) -> tuple[tuple[BufferRegion, ...], tuple[BufferRegion, ...]]:
    """(reads, writes) of `block` inferred from its body and init, as TensorIR does.

    Loops and lets inside the block are relaxed over their ranges; the block's own iterators
    stay symbolic; nested blocks contribute their declared regions; the block's own
    alloc_buffers are left out. One region per buffer per list, in order of first appearance;
    a dimension whose bounds cannot be compared symbolically covers the whole dimension.
    """
    det = _Detector(block)
    det.visit_Block(block)
    return det.reads.regions(), det.writes.regions()


def region_union(regions: Iterable[BufferRegion], ranges: dict | None = None) -> BufferRegion:
    """The smallest region covering all `regions` (all of one buffer), dimension by dimension;
    a dimension whose bounds cannot be ordered symbolically covers the whole buffer dimension."""
    regions = list(regions)
    if not regions:
        raise ValueError("region_union needs at least one region")
    buffer = regions[0].buffer
    for r in regions[1:]:
        if r.buffer is not buffer:
            raise ValueError(f"region_union of different buffers: {buffer.name!r} and {r.buffer.name!r}")
    an = Analyzer(ranges)
    acc = _Accumulator(an)
    for r in regions:
        acc.add(buffer, [_closed(an, rng) for rng in r.region])
    return acc.regions()[0]


def _closed(an: Analyzer, r: Range) -> DimBound:
    if r.min.dtype != r.extent.dtype:
        return None
    return an.simplify(r.min), an.simplify(r.min + r.extent - 1)


def region_covers(outer: BufferRegion, inner: BufferRegion, ranges: dict | None = None) -> bool:
    """True when `outer` provably contains `inner` for every assignment within `ranges`
    (an empty inner dimension is covered by anything)."""
    if outer.buffer is not inner.buffer or len(outer.region) != len(inner.region):
        return False
    an = Analyzer(ranges)
    for o, i in zip(outer.region, inner.region):
        if o.min.dtype != i.min.dtype or o.extent.dtype != i.extent.dtype:
            return False
        if an.prove(i.extent <= 0):
            continue
        if not (an.prove(o.min <= i.min) and an.prove(i.min + i.extent <= o.min + o.extent)):
            return False
    return True
