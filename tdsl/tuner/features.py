"""Features of a candidate for the cost model, read from its lowered IR (tdsl.lower's output).

One fixed-length vector of floats per candidate (FEATURE_NAMES says what each is), about the
loop structure (loops, depth, innermost extents), parallelism (product of parallel extents),
vectorization (lanes, share of vector loads and stores), unrolling, the bytes each access
touches over the innermost 1..6 loops and over its whole nest, reuse (executions per byte
touched), access strides along the innermost loop, local buffers (register and cache tiles) and
the work (arithmetic lanes, loads, stores, calls). Counts and sizes are log2(1 + x).

    vector = features(tdsl.lower(sch))
"""
from __future__ import annotations

import math

from ..ir import (
    Allocate,
    Binary,
    Broadcast,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    Evaluate,
    FloatImm,
    For,
    IfThenElse,
    IntImm,
    LetStmt,
    PrimExpr,
    PrimFunc,
    Ramp,
    Select,
    SeqStmt,
    Var,
)
from ..ir.functor import expr_children

LEVELS = 6
FEATURE_NAMES = (
    ["float_ops", "int_ops", "stores", "loads", "calls", "ifs", "statements", "loops", "max_depth",
     "parallel_extent", "parallel_loops", "parallel_outermost", "max_store_lanes", "vector_store_share",
     "vector_load_share", "unrolled_product", "unrolled_loops", "innermost_extent", "local_bytes",
     "allocations", "reuse", "stride_one_share", "stride_zero_share", "stride_large_share", "nest_bytes"]
    + [f"bytes_inner_{k}" for k in range(1, LEVELS + 1)])


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, x))


def _extent(loop: For) -> int:
    return loop.extent.value if isinstance(loop.extent, IntImm) else 16   # a symbolic extent: a guess


class _Walk:
    def __init__(self):
        self.float_ops = self.int_ops = self.stores = self.loads = self.calls = self.ifs = 0.0
        self.statements = 0
        self.loops = 0
        self.max_depth = 0
        self.parallel_extent = 1.0
        self.parallel_loops = 0
        self.parallel_outermost = 0
        self.max_store_lanes = 1
        self.vector_stores = self.vector_loads = 0.0
        self.unrolled_product = 1
        self.unrolled_loops = 0
        self.innermost = []          # (executions, innermost extent)
        self.local_bytes = 0
        self.allocations = 0
        self.reuse = []              # (executions, reuse)
        self.strides = [0.0, 0.0, 0.0]   # executions of accesses with stride 1 / 0 / larger
        self.level_bytes = [0.0] * LEVELS
        self.nest_bytes = 0.0

    # statements -------------------------------------------------------------------------
    def stmt(self, s, loops: list[For], weight: float) -> None:
        self.statements += 1
        if isinstance(s, For):
            self.loops += 1
            self.max_depth = max(self.max_depth, len(loops) + 1)
            ext = _extent(s)
            if s.kind == "parallel":
                self.parallel_loops += 1
                self.parallel_extent = max(self.parallel_extent, math.prod(
                    _extent(lp) for lp in [*loops, s] if lp.kind == "parallel"))
                if not loops:
                    self.parallel_outermost = 1
            if s.kind == "unrolled":
                self.unrolled_loops += 1
                self.unrolled_product = max(self.unrolled_product, math.prod(
                    _extent(lp) for lp in [*loops, s] if lp.kind == "unrolled"))
            self.stmt(s.body, [*loops, s], weight * ext)
        elif isinstance(s, SeqStmt):
            for c in s.seq:
                self.stmt(c, loops, weight)
        elif isinstance(s, IfThenElse):
            self.ifs += weight
            self.expr(s.condition, loops, weight)
            self.stmt(s.then_case, loops, weight)
            if s.else_case is not None:
                self.stmt(s.else_case, loops, weight)
        elif isinstance(s, LetStmt):
            self.expr(s.value, loops, weight)
            self.stmt(s.body, loops, weight)
        elif isinstance(s, Allocate):
            self.allocations += 1
            size = math.prod(d.value if isinstance(d, IntImm) else 64 for d in s.buffer.shape)
            self.local_bytes += size * s.buffer.dtype.itemsize
            self.stmt(s.body, loops, weight)
        elif isinstance(s, BufferStore):
            lanes = s.value.dtype.lanes
            self.stores += weight
            self.max_store_lanes = max(self.max_store_lanes, lanes)
            if lanes > 1:
                self.vector_stores += weight
            if loops:
                self.innermost.append((weight, _extent(loops[-1])))
            self.access(s.buffer, s.indices, lanes, loops, weight)
            self.expr(s.value, loops, weight)
        elif isinstance(s, Evaluate):
            self.expr(s.value, loops, weight)

    # expressions ------------------------------------------------------------------------
    def expr(self, e: PrimExpr, loops: list[For], weight: float) -> None:
        stack = [e]
        while stack:
            node = stack.pop()
            if isinstance(node, Binary):
                lanes = node.dtype.lanes
                if node.a.dtype.is_float:
                    self.float_ops += weight * lanes
                else:
                    self.int_ops += weight * lanes
                stack += (node.a, node.b)
            elif isinstance(node, BufferLoad):
                lanes = node.dtype.lanes
                self.loads += weight
                if lanes > 1:
                    self.vector_loads += weight
                self.access(node.buffer, node.indices, lanes, loops, weight)
                stack += node.indices
            elif isinstance(node, Call):
                self.calls += weight
                stack += node.args
            elif isinstance(node, (Cast, Broadcast)):
                stack.append(node.value)
            elif isinstance(node, Ramp):
                stack += (node.base, node.stride)
            elif isinstance(node, Select):
                stack += (node.condition, node.true_value, node.false_value)
            else:
                for name in ("a", "value"):
                    child = getattr(node, name, None)
                    if isinstance(child, PrimExpr):
                        stack.append(child)

    def access(self, buffer, indices, lanes: int, loops: list[For], weight: float) -> None:
        elem = buffer.dtype.itemsize * lanes
        used = set()
        for idx in indices:
            used |= _vars(idx)
        footprint = float(elem)
        for k, loop in enumerate(reversed(loops)):
            if loop.loop_var in used:
                footprint *= _extent(loop)
            if k < LEVELS:
                self.level_bytes[k] += footprint
        for k in range(len(loops), LEVELS):
            self.level_bytes[k] += footprint
        self.nest_bytes += footprint
        executions = weight
        self.reuse.append((executions, executions * elem / footprint))
        if loops:
            stride = _stride(buffer, indices, loops[-1].loop_var)
            slot = 0 if stride == 1 else 1 if stride == 0 else 2
            self.strides[slot] += executions

    def vector(self) -> list[float]:
        accesses = sum(self.strides) or 1.0
        inner = sum(w for w, _ in self.innermost) or 1.0
        reuse = sum(w for w, _ in self.reuse) or 1.0
        values = [
            _log(self.float_ops), _log(self.int_ops), _log(self.stores), _log(self.loads), _log(self.calls),
            _log(self.ifs), _log(self.statements), _log(self.loops), float(self.max_depth),
            _log(self.parallel_extent), float(self.parallel_loops), float(self.parallel_outermost),
            float(self.max_store_lanes), self.vector_stores / (self.stores or 1.0),
            self.vector_loads / (self.loads or 1.0), _log(self.unrolled_product), float(self.unrolled_loops),
            sum(w * _log(x) for w, x in self.innermost) / inner, _log(self.local_bytes), float(self.allocations),
            sum(w * _log(r) for w, r in self.reuse) / reuse, self.strides[0] / accesses,
            self.strides[1] / accesses, self.strides[2] / accesses, _log(self.nest_bytes),
        ] + [_log(b) for b in self.level_bytes]
        return values


def _vars(e: PrimExpr) -> set:
    """The Vars in `e`, through every node kind (ir.functor.expr_children: a load's indices too)."""
    out, stack = set(), [e]
    while stack:
        node = stack.pop()
        if isinstance(node, Var):
            out.add(node)
        else:
            stack.extend(expr_children(node))
    return out


def _coefficient(e: PrimExpr, var: Var):
    """The constant coefficient of `var` in `e` when `e` is linear in it, else None."""
    if isinstance(e, Var):
        return 1 if e is var else 0
    if isinstance(e, (IntImm, FloatImm)):
        return 0
    if isinstance(e, Ramp):
        base = _coefficient(e.base, var)
        return base
    if isinstance(e, (Cast, Broadcast)):
        return _coefficient(e.value, var)
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        a, b = _coefficient(e.a, var), _coefficient(e.b, var)
        return None if a is None or b is None else a + b if e.op == "add" else a - b
    if isinstance(e, Binary) and e.op == "mul":
        a, b = _coefficient(e.a, var), _coefficient(e.b, var)
        if a == 0 and b == 0:
            return 0
        if isinstance(e.b, IntImm) and a is not None:
            return a * e.b.value
        if isinstance(e.a, IntImm) and b is not None:
            return b * e.a.value
        return None
    return None if var in _vars(e) else 0


def _stride(buffer, indices, var: Var):
    """Elements moved per step of `var` (row-major over a constant shape), None when not linear."""
    total, step = 0, 1
    for dim, idx in zip(reversed(buffer.shape), reversed(indices)):
        c = _coefficient(idx, var)
        if c is None:
            return None
        total += c * step
        step *= dim.value if isinstance(dim, IntImm) else 1 << 10
    return total


def features(lowered: PrimFunc) -> list[float]:
    """The feature vector of a lowered function (len(FEATURE_NAMES) floats)."""
    walk = _Walk()
    walk.stmt(lowered.body, [], 1.0)
    return walk.vector()
