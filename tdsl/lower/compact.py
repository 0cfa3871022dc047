"""`compact_buffers` (CPU): shrink each intermediate buffer to the part one iteration of a loop
touches, allocated inside that loop (TVM's CompactBufferAllocation).

A buffer computed at a row loop (`compute_at`) keeps the shape its function gave it, e.g. the
whole 4096 x 1024 matrix of a softmax's exponentials, although one iteration only touches one
row and no value crosses from one row to the next. This pass finds, for every `Allocate`d
buffer, the innermost loop around all its accesses through which no value can flow from one
iteration to another, relaxes the accessed box over the loops inside that loop, and allocates
a buffer of the box's shape inside the loop, with every index shifted by the box's corner.
No value flows when the iterations touch disjoint boxes (`_Planner.disjoint`), or when each
iteration writes a whole box covering everything it reads before it reads it
(`_Planner.written_first`: a stencil's producer recomputed per row, or a GotoBLAS pack of B
computed at the k loop under a parallel row loop, whose re-laid-out store `(j // 16, k, j % 16)`
writes a whole box because the digits of j cover it, `_digit_boxes`). A buffer moves into a
parallel loop even when it does not shrink: each iteration then has its own copy (`storage`
keeps heap buffers per parallel iteration, small ones on the stack) instead of all threads
writing one shared buffer.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..arith import linear_form, prove, simplify
from ..arith.analyzer import Analyzer, Lin
from ..arith.relax import Relaxer
from ..dtypes import int32
from ..ir import (
    Allocate,
    Binary,
    Broadcast,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    For,
    IfThenElse,
    IntImm,
    IRMutator,
    IRVisitor,
    LetStmt,
    PrimExpr,
    PrimFunc,
    Ramp,
    Range,
    SeqStmt,
    Stmt,
    Var,
    as_expr,
    collect,
    free_vars,
    substitute,
)
from ..ir.functor import replace_fields as replace
from ..ir.opaque_calls import touches_memory
from ._util import arith, cast_to, common_prefix, promote_ints

# Symbolic dimensions are positive int32 values; proofs about region sizes may assume so.
_DIM_RANGE = Range(IntImm(1, int32), IntImm((1 << 31) - 2, int32))


@dataclass
class _Use:
    indices: tuple[PrimExpr, ...]   # let-bound variables replaced by their values
    loops: tuple[For, ...]          # the loops around the access, outermost first
    path: tuple[Stmt, ...]          # the statements around the access, outermost first
    store: bool


@dataclass
class _Alloc:
    node: Allocate
    loops: tuple[For, ...]          # the loops around the allocation
    uses: list[_Use]


class _Collector(IRVisitor):
    """Every Allocate with the loops around it, and every access to its buffer with the loops
    around that access. Buffers allocated twice are left out (`twice`)."""

    def __init__(self):
        self.stack: list[For] = []
        self.path: list[Stmt] = []
        self.lets: dict[Var, PrimExpr] = {}
        self.ranges: dict[For, Range] = {}   # each loop's range, let-bound variables replaced
        self.allocs: dict[Buffer, _Alloc] = {}
        self.twice: set[Buffer] = set()
        self.addressed: set[Buffer] = set()   # passed by address to a call that may touch any element

    def _inline(self, e: PrimExpr) -> PrimExpr:
        return substitute(e, self.lets) if self.lets else e

    def visit(self, node):
        if not isinstance(node, Stmt):
            return super().visit(node)
        self.path.append(node)
        try:
            return super().visit(node)
        finally:
            self.path.pop()

    def visit_For(self, op: For) -> None:
        self.visit(op.min)
        self.visit(op.extent)
        self.ranges[op] = Range(self._inline(op.min), self._inline(op.extent))
        self.stack.append(op)
        self.visit(op.body)
        self.stack.pop()

    def visit_LetStmt(self, op: LetStmt) -> None:
        self.visit(op.value)
        self.lets[op.var] = self._inline(op.value)
        self.visit(op.body)

    def visit_Allocate(self, op: Allocate) -> None:
        if op.buffer in self.allocs:
            self.twice.add(op.buffer)
        self.allocs[op.buffer] = _Alloc(op, tuple(self.stack), [])
        self.visit(op.body)

    def _use(self, buf: Buffer, indices, store: bool) -> None:
        alloc = self.allocs.get(buf)
        if alloc is not None:
            alloc.uses.append(_Use(tuple(self._inline(i) for i in indices), tuple(self.stack), tuple(self.path),
                                   store))

    def visit_BufferLoad(self, op: BufferLoad) -> None:
        self._use(op.buffer, op.indices, store=False)
        self.generic_visit(op)

    def visit_BufferStore(self, op: BufferStore) -> None:
        self._use(op.buffer, op.indices, store=True)
        self.generic_visit(op)

    def visit_Call(self, op: Call) -> None:
        if touches_memory(op.op):
            for arg in op.args:
                if isinstance(arg, Call) and arg.op == "address_of" and isinstance(arg.args[0], BufferLoad):
                    self.addressed.add(arg.args[0].buffer)
        self.generic_visit(op)


@dataclass
class _Plan:
    new: Buffer
    mins: tuple[PrimExpr, ...]
    anchor: For | None              # the loop whose body allocates `new`; None: where it was


class _Planner:
    """Chooses where and how small each buffer can be."""

    def __init__(self, func: PrimFunc, ranges: dict[For, Range]):
        self.ranges = ranges
        self.func_vars: set[Var] = set()
        for p in func.params:
            if isinstance(p, Var):
                self.func_vars.add(p)
            else:
                for e in p.shape + p.strides + ((p.elem_offset,) if p.elem_offset is not None else ()):
                    self.func_vars |= free_vars(e)
        self.dim_ranges = {v: _DIM_RANGE for v in self.func_vars if v.dtype == int32}
        # structural keys depend on the node only: every analyzer of the pass shares them
        self.keys: dict = {}
        self.key_of = Analyzer(keys=self.keys)

    def prove(self, cond: PrimExpr, loops: tuple[For, ...] = ()) -> bool:
        ranges = dict(self.dim_ranges)
        ranges.update({f.loop_var: self.ranges[f] for f in loops})
        if not ranges:
            return prove(cond)
        return Analyzer(ranges, keys=self.keys).prove(as_expr(cond))

    def plan(self, alloc: _Alloc, addressed: bool = False) -> _Plan | None:
        buf = alloc.node.buffer
        if not alloc.uses or not buf.shape or buf.strides or buf.elem_offset is not None:
            return None
        if any(len(u.indices) != len(buf.shape) for u in alloc.uses):
            return None  # flatten_buffers reports the mismatch
        common = common_prefix([u.loops for u in alloc.uses])
        top = len(alloc.loops)
        # never allocate inside a vectorized loop: `vectorize` refuses bodies that allocate
        deepest = top
        while deepest < len(common) and common[deepest].kind != "vectorized":
            deepest += 1
        for depth in range(deepest, top, -1):
            region = self.region(buf, alloc.uses, depth, common, addressed)
            if region is not None and (self.disjoint(region, common[top:depth], common[:depth])
                                       or self.written_first(alloc.uses, common[:depth])):
                private = any(f.kind == "parallel" for f in common[top:depth])
                return self._make(buf, region, common[depth - 1], private)
        region = self.region(buf, alloc.uses, top, common, addressed)
        return None if region is None else self._make(buf, region, None)

    def _make(self, buf: Buffer, region: list[tuple[PrimExpr, PrimExpr]], anchor: For | None,
              private: bool = False) -> _Plan | None:
        """The plan, or None when it gains nothing: the buffer does not shrink and does not move
        into a parallel loop (where each iteration gets its own copy instead of all threads
        writing one shared buffer)."""
        if not private and all(self.prove(Binary("ge", *promote_ints([ext, dim])))
                               for (_, ext), dim in zip(region, buf.shape)):
            return None
        shape = tuple(cast_to(dim.dtype, ext) for (_, ext), dim in zip(region, buf.shape))
        return _Plan(buf.with_(shape=shape), tuple(lo for lo, _ in region), anchor)

    def region(self, buf: Buffer, uses: list[_Use], depth: int, common: tuple[For, ...],
               addressed: bool = False) -> list[tuple[PrimExpr, PrimExpr]] | None:
        """(min, extent) per dimension of what `uses` touch while the loops common[:depth] stay
        fixed; a dimension whose bounds are unknown (or not smaller) is the whole dimension, and
        so is every dimension but the first of an `addressed` buffer (a call given its address
        computed its strides from the whole shape). None when the box cannot be a fixed-size
        allocation at that depth."""
        kept = common[:depth]
        lows: list[list[PrimExpr | None]] = [[] for _ in buf.shape]
        highs: list[list[PrimExpr | None]] = [[] for _ in buf.shape]
        relaxers: dict[tuple[For, ...], Relaxer] = {}   # one (memoizing) relaxer per loop nest
        for use in uses:
            relaxer = relaxers.get(use.loops)
            if relaxer is None:
                ranges = dict(self.dim_ranges)
                ranges.update({f.loop_var: self.ranges[f] for f in use.loops})
                relaxer = relaxers[use.loops] = Relaxer(ranges, keep=[f.loop_var for f in kept] + list(self.dim_ranges),
                                                        keys=self.keys)
            for d, idx in enumerate(use.indices):
                lo, hi = _index_bounds(idx, relaxer)
                lows[d].append(lo)
                highs[d].append(hi)
        out: list[tuple[PrimExpr, PrimExpr]] = []
        for d, dim in enumerate(buf.shape):
            if addressed and d > 0:
                out.append((IntImm(0, dim.dtype), dim))
                continue
            box = self._dim_box(lows[d], highs[d], dim, kept)
            if box is None:
                return None
            out.append(box)
        return out

    def _dim_box(self, lows, highs, dim: PrimExpr, kept: tuple[For, ...]) -> tuple[PrimExpr, PrimExpr] | None:
        whole = (IntImm(0, dim.dtype), dim)
        lo = None if None in lows else self._extreme(lows, "le", kept)
        hi = None if None in highs else self._extreme(highs, "ge", kept)
        if lo is None or hi is None:
            return whole
        lo, hi = promote_ints([lo, hi])
        ext = simplify(hi - lo + IntImm(1, lo.dtype))
        if not free_vars(ext) <= self.func_vars:
            # a size that changes from iteration to iteration: allocate the whole dimension
            return whole if free_vars(dim) <= self.func_vars else None
        if isinstance(ext, IntImm) and ext.value < 1:
            return whole
        if not self.prove(Binary("le", *promote_ints([ext, dim])), kept):
            return whole
        if collect(lo, (BufferLoad, Call)) or not free_vars(lo) <= self.func_vars | {f.loop_var for f in kept}:
            return whole  # the corner must be the same at every access of one allocation
        return lo, ext

    def _extreme(self, values: list[PrimExpr], op: str, kept: tuple[For, ...]) -> PrimExpr | None:
        """The value among `values` that is <= (op "le") or >= (op "ge") all others, if provable."""
        base = values[0]
        # accesses repeat their bounds: one offset per distinct (structurally) value
        distinct: dict = {}
        for v in values:
            distinct.setdefault(self.key_of.key(v), v)
        offsets = [simplify(Binary("sub", *promote_ints([v, base]))) for v in distinct.values()]
        if all(isinstance(o, IntImm) for o in offsets):
            pick = min if op == "le" else max
            off = pick(o.value for o in offsets)
            return simplify(base + IntImm(off, base.dtype)) if off else base
        for cand in values:
            if all(v is cand or self.prove(Binary(op, *promote_ints([cand, v])), kept) for v in values):
                return cand
        return None

    def disjoint(self, region: list[tuple[PrimExpr, PrimExpr]], loops: tuple[For, ...],
                 kept: tuple[For, ...]) -> bool:
        """Two different iterations of the nest `loops` (with the loops outside them fixed) touch
        disjoint boxes, so no value flows from one to another through the buffer: every loop
        that runs more than once moves the box's corner, in some dimension, by at least the
        box's extent, in a mixed-radix way (like i * 16 + j over a 16-wide j).

        A dimension whose radix chain breaks (coefficients 3 and 2 over a 2-wide box) separates
        iterations by its chain's variables only where they agree on the rest of its variables,
        which must be separated first by other dimensions (a fixpoint): taking the union of the
        chains would call (3i + 2j, 4i + 5j) with 2x2 boxes disjoint, yet (0, 1) and (1, 0) overlap."""
        loop_vars = [f.loop_var for f in loops]
        extents = {f.loop_var: self.ranges[f].extent for f in loops}
        chains: list[tuple[set[Var], set[Var]]] = []   # per dimension: (radix chain, the rest)
        for lo, ext in region:
            form = linear_form(lo, loop_vars)
            if form is None:
                continue
            coeffs = sorted(((abs(c), v) for v, c in form[0].items() if c != 0), key=lambda cv: cv[0])
            span = ext
            ok = []
            for c, v in coeffs:
                span, c_expr = promote_ints([span, IntImm(c, span.dtype)])
                if not self.prove(Binary("ge", c_expr, span), kept):
                    break
                ok.append(v)
                step = Binary("mul", *promote_ints([c_expr, extents[v] - IntImm(1, extents[v].dtype)]))
                span = simplify(Binary("add", *promote_ints([span, step])))
            chains.append((set(ok), {v for _, v in coeffs} - set(ok)))
        # covered: iterations that differ in any of these variables touch disjoint boxes
        covered = {v for v in loop_vars if self.prove(_is_one(extents[v]), kept)}   # never differ
        grew = True
        while grew:
            grew = False
            for chain, rest in chains:
                if rest <= covered and not chain <= covered:
                    covered |= chain
                    grew = True
        return all(f.loop_var in covered for f in loops)

    def written_first(self, uses: list[_Use], kept: tuple[For, ...]) -> bool:
        """Each iteration of kept[-1] writes every element it reads before reading it, so it
        never sees a value from another iteration (a stencil's producer recomputed per row):
        the statements of the loop body before the first one that reads the buffer hold a
        store, not under an `if`, whose loops write a whole box (`_exact_box`) covering the
        box of every read."""
        loop = kept[-1]
        units = [_unit(use.path, loop) for use in uses]
        if None in units:
            return False
        reads = [(use, unit) for use, unit in zip(uses, units) if not use.store]
        if not reads:
            return False
        first_read = min(unit for _, unit in reads)
        covers = [self._exact_box(use, kept) for use, unit in zip(uses, units) if use.store and unit < first_read]
        covers = [box for box in covers if box is not None]
        return bool(covers) and all(any(self._inside(use, box, kept) for box in covers) for use, _ in reads)

    def _exact_box(self, use: _Use, kept: tuple[For, ...]) -> list[tuple[PrimExpr, PrimExpr]] | None:
        """(lo, hi) per dimension of the elements a store writes, when it writes all of them: no
        `if` around it inside the loop kept[-1], every loop inside runs at least once over a
        range that no other of them changes, every index is a part fixed during the iteration
        plus digits of its own loops' variables (`_Digit`, coefficient 1, each digit in one
        index only), and the digits of each variable cover their whole box (`_digit_boxes`)."""
        start = _position(use.path, kept[-1]) + 1
        if any(isinstance(s, IfThenElse) for s in use.path[start:]):
            return None
        inner = use.loops[len(kept):]
        inner_vars = [f.loop_var for f in inner]
        for f in inner:
            r = self.ranges[f]
            if (free_vars(r.min) | free_vars(r.extent)) & set(inner_vars):
                return None
            if not self.prove(Binary("ge", r.extent, IntImm(1, r.extent.dtype)), kept):
                return None
        an = Analyzer(keys=self.keys)
        parts = [_digits(an, idx, inner_vars) for idx in use.indices]
        if None in parts:
            return None
        bounds: dict[_Digit, tuple[PrimExpr, PrimExpr]] = {}
        for f in inner:
            mine = [d for _, digits in parts for d in digits if d.var is f.loop_var]
            if len({(d.lower, d.upper) for d in mine}) != len(mine):
                return None  # one digit in two places: only the diagonal is written
            boxes = self._digit_boxes(mine, self.ranges[f], kept) if mine else []
            if boxes is None:
                return None
            bounds.update(zip(mine, boxes))
        box = []
        for fixed, digits in parts:
            lo = hi = fixed
            for d in digits:
                lo = _op("add", lo, bounds[d][0])
                hi = _op("add", hi, bounds[d][1])
            box.append((simplify(lo), simplify(hi)))
        return box

    def _digit_boxes(self, digits: list[_Digit], r: Range,
                     kept: tuple[For, ...]) -> list[tuple[PrimExpr, PrimExpr]] | None:
        """(lo, hi) of each digit of x = offset + v, v over `r`, when x takes every combination
        of those values (so the digits' indices write a whole box); None when not provable.
        The digits must be non-overlapping places of one mixed radix (v // 16 and v % 16, not
        v // 4 and v % 16). Then x covers every combination when it runs over a whole number
        of periods of the top digit's modulus, or over whole, aligned steps of the top digit
        (x in [16 t, 16 t + 16 m) for x // 16) without wrapping around its modulus."""
        last = _op("sub", _op("add", r.min, r.extent), 1)
        if len(digits) == 1 and digits[0].plain:
            d = digits[0]
            return [(simplify(_op("add", d.offset, r.min)), simplify(_op("add", d.offset, last)))]
        offset = digits[0].offset
        if any(d.plain or not _same_value(d.offset, offset) for d in digits):
            return None  # v itself next to a digit of v, or digits of different sums
        chain = sorted(digits, key=lambda d: d.lower)
        for below, above in zip(chain, chain[1:]):
            if below.upper is None or above.lower % (below.lower * below.upper):
                return None
        top = chain[-1]
        full = {d: (IntImm(0, d.offset.dtype), IntImm(d.upper - 1, d.offset.dtype)) for d in chain[:-1]}
        if top.upper is not None and self._divides(top.lower * top.upper, r.extent, kept):
            full[top] = (IntImm(0, top.offset.dtype), IntImm(top.upper - 1, top.offset.dtype))
            return [full[d] for d in digits]
        start = _op("add", offset, r.min)
        if not (self._divides(top.lower, start, kept) and self._divides(top.lower, r.extent, kept)):
            return None
        first, count = _op("floordiv", start, top.lower), _op("floordiv", r.extent, top.lower)
        if top.upper is not None:
            first = _op("floormod", first, top.upper)
            if not self.prove(_op("le", _op("add", first, count), top.upper), kept):
                return None  # the top digit wraps around: not one contiguous range
        full[top] = (simplify(first), simplify(_op("sub", _op("add", first, count), 1)))
        return [full[d] for d in digits]

    def _divides(self, c: int, e: PrimExpr, kept: tuple[For, ...]) -> bool:
        return c == 1 or self.prove(_op("eq", _op("floormod", e, c), 0), kept)

    def _inside(self, use: _Use, box: list[tuple[PrimExpr, PrimExpr]], kept: tuple[For, ...]) -> bool:
        """The elements `use` may touch during one iteration of kept[-1] lie in `box`."""
        ranges = dict(self.dim_ranges)
        ranges.update({f.loop_var: self.ranges[f] for f in use.loops})
        relaxer = Relaxer(ranges, keep=[f.loop_var for f in kept] + list(self.dim_ranges), keys=self.keys)
        for idx, (lo_w, hi_w) in zip(use.indices, box):
            lo, hi = _index_bounds(idx, relaxer)
            if lo is None or hi is None or collect(lo, (BufferLoad, Call)) or collect(hi, (BufferLoad, Call)):
                return False
            if not (self.prove(Binary("le", *promote_ints([lo_w, lo])), kept)
                    and self.prove(Binary("le", *promote_ints([hi, hi_w])), kept)):
                return False
        return True



@dataclass(eq=False)
class _Digit:
    """`(offset + var) // lower % upper` (upper None: no modulo), a term of a store's index;
    `offset` is fixed during the iteration. The plain `var` is offset 0, lower 1, no upper."""
    var: Var
    offset: PrimExpr
    lower: int
    upper: int | None

    @property
    def plain(self) -> bool:
        return self.lower == 1 and self.upper is None


def _digits(an: Analyzer, idx: PrimExpr, inner_vars: list[Var]) -> tuple[PrimExpr, list[_Digit]] | None:
    """(fixed part, digits) with idx == fixed part + sum of the digits, every digit of one of
    `inner_vars` with coefficient 1; None when idx is not of that form (or is a vector)."""
    if idx.dtype.lanes != 1:
        return None
    form = an.lin(idx)
    moving = set(inner_vars)
    fixed_terms, digits = {}, []
    for key, (term, coeff) in form.terms.items():
        if not free_vars(term.src) & moving:
            fixed_terms[key] = (term, coeff)
            continue
        lin = linear_form(term.src, inner_vars)
        if coeff != 1 or lin is None or collect(lin[1], (BufferLoad, Call)):
            return None
        used = [v for v, c in lin[0].items() if c != 0]
        if len(used) != 1 or lin[0][used[0]] != 1:
            return None
        digits.append(_Digit(used[0], lin[1], term.lower, term.upper))
    fixed = an.emit(Lin(fixed_terms, form.const, form.dtype))
    return None if collect(fixed, (BufferLoad, Call)) else (fixed, digits)


def _same_value(a: PrimExpr, b: PrimExpr) -> bool:
    diff = simplify(_op("sub", a, b))
    return isinstance(diff, IntImm) and diff.value == 0


def _op(op: str, a: PrimExpr, b: PrimExpr | int) -> PrimExpr:
    """a `op` b with b an int or an expression, in the wider integer type of the two."""
    if isinstance(b, int):
        b = IntImm(b, a.dtype)
    return Binary(op, *promote_ints([a, b]))


def _is_one(e: PrimExpr) -> PrimExpr:
    return Binary("eq", e, IntImm(1, e.dtype))


def _position(path: tuple[Stmt, ...], node: Stmt) -> int:
    return next(k for k, s in enumerate(path) if s is node)


def _unit(path: tuple[Stmt, ...], loop: For) -> int | None:
    """Which statement of `loop`'s body (in order, looking through allocations and lets) holds
    the access at the end of `path`; None when the body is neither a sequence nor one statement
    around the access."""
    k = _position(path, loop) + 1
    while k < len(path) and isinstance(path[k], (Allocate, LetStmt)):
        k += 1
    if k >= len(path):
        return None
    if not isinstance(path[k], SeqStmt):
        return 0
    return next(i for i, s in enumerate(path[k].seq) if k + 1 < len(path) and s is path[k + 1])

def _index_bounds(idx: PrimExpr, relaxer: Relaxer) -> tuple[PrimExpr | None, PrimExpr | None]:
    """Inclusive bounds of a scalar or vector index (Ramp with a constant stride, Broadcast)."""
    if isinstance(idx, Broadcast):
        idx = idx.value
    if idx.dtype.lanes == 1:
        return relaxer.relax(idx)
    if isinstance(idx, Ramp) and isinstance(idx.stride, IntImm) and idx.base.dtype.lanes == 1:
        lo, hi = relaxer.relax(idx.base)
        span = IntImm(idx.stride.value * (idx.lanes - 1), idx.base.dtype)
        if lo is None or hi is None:
            return None, None
        return (lo, hi + span) if span.value >= 0 else (lo + span, hi)
    return None, None


class _Rewriter(IRMutator):
    """Applies the plans: moves each Allocate to its anchor loop, shifts the indices."""

    def __init__(self, plans: dict[Allocate, _Plan]):
        self.plans = plans
        self.by_buffer = {a.buffer: p for a, p in plans.items()}
        self.at_loop: dict[For, list[Buffer]] = {}
        for p in plans.values():
            if p.anchor is not None:
                self.at_loop.setdefault(p.anchor, []).append(p.new)

    def _shift(self, plan: _Plan, indices) -> tuple[PrimExpr, ...]:
        out: list[PrimExpr] = []
        for idx, lo in zip(indices, plan.mins):
            idx = self.visit(idx)
            if not (isinstance(lo, IntImm) and lo.value == 0):
                idx, lo = _match_index_type(idx, lo)
                idx = arith("sub", idx, lo)
            out.append(idx)
        return tuple(out)

    def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
        plan = self.by_buffer.get(op.buffer)
        if plan is None:
            return self.generic_visit(op)
        return BufferLoad(plan.new, self._shift(plan, op.indices), span=op.span)

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        plan = self.by_buffer.get(op.buffer)
        if plan is None:
            return self.generic_visit(op)
        return BufferStore(plan.new, self.visit(op.value), self._shift(plan, op.indices), span=op.span)

    def visit_Allocate(self, op: Allocate) -> Stmt:
        body = self.visit(op.body)
        plan = self.plans.get(op)
        if plan is None:
            return op if body is op.body else replace(op, body=body)
        return body if plan.anchor is not None else Allocate(plan.new, body, span=op.span)

    def visit_For(self, op: For) -> Stmt:
        new = self.generic_visit(op)
        body = new.body
        for buf in reversed(self.at_loop.get(op, ())):
            body = Allocate(buf, body)
        return new if body is new.body else replace(new, body=body)


def _match_index_type(idx: PrimExpr, lo: PrimExpr) -> tuple[PrimExpr, PrimExpr]:
    """`idx` and `lo` in the same integer type (the wider), lanes of `idx` kept."""
    if idx.dtype.element == lo.dtype:
        return idx, lo
    if idx.dtype.bits >= lo.dtype.bits:
        return idx, cast_to(idx.dtype.element, lo)
    wide = lo.dtype
    if isinstance(idx, Ramp):
        return Ramp(cast_to(wide, idx.base), cast_to(wide, idx.stride), idx.lanes), lo
    if isinstance(idx, Broadcast):
        return Broadcast(cast_to(wide, idx.value), idx.lanes), lo
    return cast_to(wide.with_lanes(idx.dtype.lanes), idx), lo


def compact_buffers(func: PrimFunc) -> PrimFunc:
    """Each intermediate (Allocate'd, never a parameter) buffer shrinks to the box its accesses
    touch during one iteration of the innermost loop around all of them that no value crosses
    (iterations touch disjoint boxes, or each writes all it reads first), and is allocated
    inside that loop (never inside a vectorized loop; inside a parallel one even when it does
    not shrink, to be private to each iteration); with no such loop, to the box all
    accesses touch, where it was. Indices are shifted by the box's corner. Dimensions whose
    accessed range is unknown stay whole; sizes are constant or use only the function's own
    dimensions. A buffer whose address a call takes (`T.address_of`, e.g. an AMX tile store with
    the row stride baked in) may shrink along its first dimension only: its strides stay."""
    collector = _Collector()
    collector.visit(func.body)
    planner = _Planner(func, collector.ranges)
    plans: dict[Allocate, _Plan] = {}
    for buf, alloc in collector.allocs.items():
        if buf in collector.twice:
            continue
        plan = planner.plan(alloc, addressed=buf in collector.addressed)
        if plan is not None:
            plans[alloc.node] = plan
    if not plans:
        return func
    return func.with_body(_Rewriter(plans).visit(func.body))
