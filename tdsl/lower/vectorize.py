"""`vectorize`: rewrite `vectorized` loops into Ramp/Broadcast vector code, or leave them serial
with a note saying why."""
from __future__ import annotations

from collections.abc import Callable

from ..ir import (
    MATH_CALLS,
    Allocate,
    Binary,
    Broadcast,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    Evaluate,
    For,
    IfThenElse,
    IntImm,
    IRVisitor,
    LetStmt,
    Not,
    PrimExpr,
    PrimFunc,
    Ramp,
    Select,
    SeqStmt,
    Stmt,
    Var,
    collect,
    post_order_visit,
    substitute,
    uses_var,
)
from ..ir.attrs import VECTORIZE_BLOCKS
from ..ir.functor import replace_fields as replace
from ._util import StmtMutator, add_notes, arith, broadcast, cast_to, fresh_copy, promote_ints, same_expr, seq
from .index_checks import INDEX_CHECK
from .simplify import simplify_index

MAX_LANES = 64


class NotVectorizable(Exception):
    """Why a loop body cannot be rewritten to vector form."""


def _ramp_div_mod(op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
    """``ramp(x, 1, L) // c`` and ``% c`` for a constant c that L divides, where x is a multiple of
    L for every value of its variables: the lanes never cross a multiple of c, so the quotient is
    one value and the remainder a ramp (an index decoded from a fused loop, such as an im2col
    gather's ``k % channels``, stays contiguous)."""
    from ..arith.analyzer import Analyzer

    if op not in ("floordiv", "floormod") or not isinstance(a, Ramp) or not isinstance(b, IntImm):
        return None
    lanes = a.lanes
    if not (isinstance(a.stride, IntImm) and a.stride.value == 1 and b.value > 0 and b.value % lanes == 0):
        return None
    form = Analyzer().lin(a.base)
    if form.const % lanes or any(c % lanes for _, c in form.terms.values()):
        return None
    if op == "floordiv":
        return Broadcast(Binary(op, a.base, b), lanes)
    return Ramp(Binary(op, a.base, b), a.stride, lanes)


def _has_load(e: PrimExpr) -> bool:
    return bool(collect(e, BufferLoad))


def _may_trap(e: PrimExpr) -> bool:
    """Integer division by a non-constant may trap when a lane that did not need it runs it."""
    return any(b.op in ("div", "floordiv", "floormod") and b.dtype.is_integer and not isinstance(b.b, IntImm)
               for b in collect(e, Binary))


class _Lanes:
    """Rewrites one copy of a loop body with the loop variable standing for `lanes` lanes."""

    def __init__(self, var: Var, base: PrimExpr, lanes: int):
        self.var = var
        self.lanes = lanes
        self.env: dict[Var, PrimExpr] = {var: Ramp(base, IntImm(1, base.dtype), lanes)}
        self.inner_vars: list[Var] = []
        self.base = base
        self.scalar_parts: set[int] = set()  # lane-by-lane fallbacks, exempt from the lane checks

    # expressions -------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> PrimExpr:
        if e.dtype.lanes != 1:
            raise NotVectorizable(f"its body already has vector values ({e.dtype})")
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            raise NotVectorizable(f"it contains a {type(e).__name__} expression")
        return method(e)

    def expr_Var(self, e: Var) -> PrimExpr:
        return self.env.get(e, e)

    def expr_IntImm(self, e: IntImm) -> PrimExpr:
        return e

    expr_FloatImm = expr_IntImm

    def expr_Binary(self, e: Binary) -> PrimExpr:
        a, b = self.expr(e.a), self.expr(e.b)
        if a.dtype.lanes == 1 and b.dtype.lanes == 1:
            return e if a is e.a and b is e.b else Binary(e.op, a, b)
        if e.op in ("add", "sub", "mul") and a.dtype.is_integer:
            return arith(e.op, a, b)
        split = _ramp_div_mod(e.op, a, b)
        if split is not None:
            return split
        return Binary(e.op, broadcast(a, self.lanes), broadcast(b, self.lanes))

    def expr_Not(self, e: Not) -> PrimExpr:
        a = self.expr(e.a)
        return e if a is e.a else Not(a)

    def expr_Select(self, e: Select) -> PrimExpr:
        parts = [self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)]
        if all(p.dtype.lanes == 1 for p in parts):
            return Select(*parts)
        return Select(*(broadcast(p, self.lanes) for p in parts))

    def expr_Cast(self, e: Cast) -> PrimExpr:
        v = self.expr(e.value)
        if v.dtype.lanes == 1:
            return e if v is e.value else Cast(e.dtype, v)
        if isinstance(v, Ramp) and e.dtype.is_integer:
            return Ramp(cast_to(e.dtype, v.base), cast_to(e.dtype, v.stride), v.lanes)
        if isinstance(v, Broadcast):
            return Broadcast(cast_to(e.dtype, v.value), v.lanes)
        return Cast(e.dtype.with_lanes(self.lanes), v)

    def expr_Call(self, e: Call) -> PrimExpr:
        if e.op == "if_then_else":
            return self._if_then_else(e)
        if e.op == INDEX_CHECK:
            index, extent = self.expr(e.args[0]), self.expr(e.args[1])
            if index.dtype.lanes == 1 and extent.dtype.lanes == 1:
                return Call(e.dtype, e.op, (index, extent, *e.args[2:]))
            return Call(e.dtype.with_lanes(self.lanes), e.op,
                        (broadcast(index, self.lanes), extent, *e.args[2:]))
        if e.op not in MATH_CALLS:
            raise NotVectorizable(f"it calls {e.op!r}, which has no vector form")
        args = [self.expr(a) for a in e.args]
        if all(a.dtype.lanes == 1 for a in args):
            return Call(e.dtype, e.op, tuple(args))
        return Call(e.dtype.with_lanes(self.lanes), e.op, tuple(broadcast(a, self.lanes) for a in args))

    def _if_then_else(self, e: Call) -> PrimExpr:
        cond, t, f = (self.expr(a) for a in e.args)
        if all(a.dtype.lanes == 1 for a in (cond, t, f)):
            return Call(e.dtype, e.op, (cond, t, f))
        if cond.dtype.lanes == 1:
            # lane-uniform condition: still lazy, choosing between two vectors
            return Call(e.dtype.with_lanes(self.lanes), e.op, (cond, broadcast(t, self.lanes),
                                                               broadcast(f, self.lanes)))
        if _has_load(e.args[1]) or _has_load(e.args[2]):
            raise NotVectorizable("T.if_then_else with a condition that differs between lanes guards a load "
                                  "(evaluating every lane could read out of bounds)")
        if _may_trap(e.args[1]) or _may_trap(e.args[2]):
            raise NotVectorizable("T.if_then_else with a condition that differs between lanes guards an "
                                  "integer division")
        return Select(cond, broadcast(t, self.lanes), broadcast(f, self.lanes))

    def expr_BufferLoad(self, e: BufferLoad) -> PrimExpr:
        if e.buffer.dtype.lanes != 1:
            raise NotVectorizable(f"buffer {e.buffer.name!r} has a vector dtype")
        (index,) = e.indices
        idx = self.expr(index)
        if idx.dtype.lanes == 1:
            return e if idx is index else BufferLoad(e.buffer, (idx,))
        self._check_contiguous(idx, f"the load from {e.buffer.name!r}")
        return BufferLoad(e.buffer, (idx,))

    def _check_contiguous(self, idx: PrimExpr, what: str) -> None:
        if not (isinstance(idx, Ramp) and isinstance(idx.stride, IntImm) and idx.stride.value == 1):
            raise NotVectorizable(f"{what} is not contiguous in {self.var.name}")

    # statements -------------------------------------------------------------------
    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, BufferStore):
            return self._store(s)
        if isinstance(s, SeqStmt):
            return SeqStmt(tuple(self.stmt(x) for x in s.seq))
        if isinstance(s, LetStmt):
            value = self.expr(s.value)
            if isinstance(value, (Ramp, Broadcast)):
                # an affine index stays visible to the contiguity check below
                self.env[s.var] = value
                return self.stmt(s.body)
            var = Var(s.var.name, value.dtype, span=s.var.span)
            self.env[s.var] = var
            return LetStmt(var, value, self.stmt(s.body))
        if isinstance(s, IfThenElse):
            cond = self.expr(s.condition)
            if cond.dtype.lanes != 1:
                return self._lane_dependent_if(s, cond)
            else_case = None if s.else_case is None else self.stmt(s.else_case)
            return IfThenElse(cond, self.stmt(s.then_case), else_case)
        if isinstance(s, Evaluate) and isinstance(s.value, IntImm):
            return s
        if isinstance(s, For):
            return self._inner_loop(s)
        if isinstance(s, Allocate):
            raise NotVectorizable(f"its body allocates {s.buffer.name!r}")
        raise NotVectorizable(f"its body contains a {type(s).__name__} statement")

    def _lane_dependent_if(self, s: IfThenElse, cond: PrimExpr) -> Stmt:
        """`if c: body` where c differs between lanes (the tail guard of a non-dividing split):
        when c holds in every lane run the vector body, otherwise the lanes one by one."""
        what = f"an `if` condition differs between the lanes of {self.var.name}"
        if s.else_case is not None:
            return self._store(_if_else_as_select(s, what))
        if not _monotone(cond):
            raise NotVectorizable(f"{what} and is not a comparison affine in {self.var.name}")
        scalars = {}
        for v in free_vars_stmt(s):
            value = self.env.get(v)
            if v is not self.var and value is not None:
                if value.dtype.lanes != 1:
                    raise NotVectorizable(f"{what} and its body uses the vector value {v.name}")
                scalars[v] = value
        last = arith("add", self.base, IntImm(self.lanes - 1, self.base.dtype))
        every_lane = Binary("and", substitute(s.condition, {**scalars, self.var: self.base}),
                            substitute(s.condition, {**scalars, self.var: last}))
        lane = Var(self.var.name + "_l", self.var.dtype)
        one_by_one = For(lane, IntImm(0, lane.dtype), IntImm(self.lanes, lane.dtype), "serial",
                         fresh_copy(s, {**scalars, self.var: arith("add", self.base, lane)}))
        self.scalar_parts.add(id(one_by_one))
        return IfThenElse(every_lane, self.stmt(s.then_case), one_by_one)

    def _inner_loop(self, s: For) -> Stmt:
        """A loop inside runs once for all lanes (the loops are interchanged), which
        `_check_independent` makes sure is legal."""
        name = s.loop_var.name
        if s.kind not in ("serial", "unrolled"):
            raise NotVectorizable(f"its body contains the {s.kind} loop {name}")
        lo, ext = self.expr(s.min), self.expr(s.extent)
        if lo.dtype.lanes != 1 or ext.dtype.lanes != 1:
            raise NotVectorizable(f"the range of the inner loop {name} differs between lanes")
        var = Var(name, s.loop_var.dtype, span=s.loop_var.span)
        self.env[s.loop_var] = var
        self.inner_vars.append(var)
        return For(var, lo, ext, s.kind, self.stmt(s.body), annotations=s.annotations, span=s.span)

    def _store(self, s: BufferStore) -> Stmt:
        if s.buffer.dtype.lanes != 1:
            raise NotVectorizable(f"buffer {s.buffer.name!r} has a vector dtype")
        (index,) = s.indices
        idx = self.expr(index)
        value = self.expr(s.value)
        if idx.dtype.lanes == 1:
            raise NotVectorizable(f"every iteration stores into the same element of {s.buffer.name!r} "
                                  "(a reduction into a loop-invariant location)")
        self._check_contiguous(idx, f"the store into {s.buffer.name!r}")
        return BufferStore(s.buffer, broadcast(value, self.lanes), (idx,))


def _if_else_as_select(s: IfThenElse, what: str) -> BufferStore:
    """`if c: X[i] = a else: X[i] = b` as `X[i] = Select(c, a, b)`, when evaluating both a and b
    in every lane is safe: their loads are X[i] itself or loads the condition already makes,
    and they divide integers only by constants."""
    then_case, else_case = s.then_case, s.else_case
    if not (isinstance(then_case, BufferStore) and isinstance(else_case, BufferStore)
            and then_case.buffer is else_case.buffer and same_expr(then_case.indices, else_case.indices)):
        raise NotVectorizable(f"{what} and its branches are not two stores to the same place")
    if _may_trap(then_case.value) or _may_trap(else_case.value):
        raise NotVectorizable(f"{what} and a branch divides integers (every lane would run it)")
    safe = collect(s.condition, BufferLoad)
    for load in collect(then_case.value, BufferLoad) + collect(else_case.value, BufferLoad):
        at_store = load.buffer is then_case.buffer and same_expr(load.indices, then_case.indices)
        if not at_store and not any(load.buffer is x.buffer and same_expr(load.indices, x.indices) for x in safe):
            raise NotVectorizable(f"{what} and a branch loads from {load.buffer.name!r} where the condition "
                                  "does not (every lane would run it)")
    return BufferStore(then_case.buffer, Select(s.condition, then_case.value, else_case.value), then_case.indices,
                       span=then_case.span)


def _monotone(cond: PrimExpr) -> bool:
    """True for conjunctions of <, <=, >, >= between lane-affine values: such a condition holds
    in every lane exactly when it holds in the first and the last."""
    if not isinstance(cond, Binary):
        return False
    if cond.op == "and":
        return _monotone(cond.a) and _monotone(cond.b)
    return cond.op in ("lt", "le", "gt", "ge") and all(
        x.dtype.lanes == 1 or isinstance(x, (Ramp, Broadcast)) for x in (cond.a, cond.b))


def free_vars_stmt(stmt: Stmt) -> set[Var]:
    out: set[Var] = set()
    post_order_visit(stmt, lambda n: out.add(n) if isinstance(n, Var) else None)
    return out


def _vector_accesses(stmt: Stmt, skip: set[int]) -> list:
    out: list = []

    class _Collect(IRVisitor):
        def visit(self, node):
            if id(node) in skip:
                return
            self.generic_visit(node)  # children first: the order in which accesses happen
            if isinstance(node, (BufferStore, BufferLoad)):
                out.append(node)

    _Collect().visit(stmt)
    return out


def _check_independent(stmt: Stmt, var: Var, inner_vars: list[Var], skip: set[int], lanes: int) -> None:
    """All lanes of one statement run before the next statement, so two accesses to a written
    buffer, the first at lane p and the second at lane q < p, must not meet: their places may
    differ by 0, by <= 0 or by >= lanes. With loops inside, the place must also stay put."""
    accesses: dict = {}
    for node in _vector_accesses(stmt, skip):
        accesses.setdefault(node.buffer, []).append(node)
    for buf, nodes in accesses.items():
        if not any(isinstance(n, BufferStore) for n in nodes):
            continue
        clash = f"its iterations depend on each other through buffer {buf.name!r} " \
                f"(it is written and read at places that overlap across the lanes of {var.name})"
        if inner_vars:
            first = nodes[0].indices[0]
            if not all(same_expr(n.indices[0], first) for n in nodes[1:]):
                raise NotVectorizable(clash)
            moving = [v.name for v in inner_vars if uses_var(first, v)]
            if moving:
                raise NotVectorizable(f"buffer {buf.name!r} is written at a place that moves with the inner "
                                      f"loop {moving[0]}, so the lanes could overlap")
            continue
        for i, a in enumerate(nodes):
            for b in nodes[i + 1:]:
                if isinstance(a, BufferLoad) and isinstance(b, BufferLoad):
                    continue
                d = _distance(a.indices[0], b.indices[0])
                if d is None or 0 < d < lanes:
                    raise NotVectorizable(clash)


def _distance(first: PrimExpr, second: PrimExpr) -> int | None:
    """second's place minus first's, when both are unit-stride ramps a constant apart."""
    if same_expr(first, second):
        return 0
    if not (isinstance(first, Ramp) and isinstance(second, Ramp)):
        return None
    a, b = promote_ints([first.base, second.base])
    d = simplify_index(arith("sub", b, a))
    return d.value if isinstance(d, IntImm) else None


def _pieces(extent: int, max_lanes: int) -> list[tuple[int, int, int]]:
    """(offset, lanes, count) chunks covering [0, extent): `count` chunks of `lanes` from
    `offset`; lane counts are powers of two <= max_lanes."""
    width = 1
    while width * 2 <= min(extent, max_lanes):
        width *= 2
    out = [(0, width, extent // width)]
    offset, rest = (extent // width) * width, extent % width
    piece = width // 2
    while rest:
        if rest >= piece:
            out.append((offset, piece, 1))
            offset, rest = offset + piece, rest - piece
        piece //= 2
    return out


def _vector_body(loop: For, base: PrimExpr, lanes: int) -> Stmt:
    if lanes == 1:
        return fresh_copy(loop.body, {loop.loop_var: base})
    rewriter = _Lanes(loop.loop_var, base, lanes)
    body = rewriter.stmt(loop.body)
    _check_independent(body, loop.loop_var, rewriter.inner_vars, rewriter.scalar_parts, lanes)
    return body


def vectorize_loop(loop: For, max_lanes: int = MAX_LANES) -> Stmt:
    """The vector form of one `vectorized` loop; raises NotVectorizable."""
    if not isinstance(loop.extent, IntImm):
        raise NotVectorizable("its extent is not a constant")
    extent = loop.extent.value
    if extent <= 0:
        return seq()
    parts: list[Stmt] = []
    for offset, lanes, count in _pieces(extent, max_lanes):
        start = arith("add", loop.min, IntImm(offset, loop.min.dtype))
        if count == 1:
            parts.append(_vector_body(loop, start, lanes))
            continue
        chunk = Var(loop.loop_var.name + "_c", loop.loop_var.dtype)
        base = arith("add", start, arith("mul", chunk, IntImm(lanes, chunk.dtype)))
        parts.append(For(chunk, IntImm(0, chunk.dtype), IntImm(count, chunk.dtype), "serial",
                         _vector_body(loop, base, lanes), annotations=loop.annotations))
    return seq(*parts)


def _widest_access(loop: For) -> int:
    """The widest element, in bytes, that the body of `loop` loads or stores (0 when none)."""
    sizes = [n.buffer.dtype.itemsize for n in collect(loop.body, (BufferLoad, BufferStore))]
    return max(sizes, default=0)


class _Vectorizer(StmtMutator):
    def __init__(self, max_lanes: int, max_bytes: int | None):
        self.max_lanes = max_lanes
        self.max_bytes = max_bytes
        self.notes: list[str] = []

    def visit_For(self, loop: For) -> Stmt:
        body = self.visit(loop.body)
        if body is not loop.body:
            loop = replace(loop, body=body)
        if loop.kind != "vectorized":
            return loop
        blocks = dict(loop.annotations).get(VECTORIZE_BLOCKS)
        loop = replace(loop, annotations=tuple(kv for kv in loop.annotations if kv[0] != VECTORIZE_BLOCKS))
        try:
            return vectorize_loop(loop, self.lane_limit(loop))
        except NotVectorizable as exc:
            where = f" in block {blocks}" if blocks else ""
            self.notes.append(f"loop {loop.loop_var.name}{where} was not vectorized: {exc}")
            return replace(loop, kind="serial")

    def lane_limit(self, loop: For) -> int:
        widest = _widest_access(loop) if self.max_bytes else 0
        if not widest:
            return self.max_lanes
        assert self.max_bytes is not None
        return max(self.max_lanes, self.max_bytes // widest)


def make_vectorize(max_lanes: int = MAX_LANES, max_bytes: int | None = None) -> Callable[[PrimFunc], PrimFunc]:
    """The vectorize pass with vectors of at most `max_lanes` lanes, or, with `max_bytes`, as many
    lanes of the widest element the loop loads or stores as fit in `max_bytes` where that is more
    (CUDA: 4 lanes, 16 bytes: 4 floats, 8 halves, 16 int8)."""

    def vectorize(func: PrimFunc) -> PrimFunc:
        """`vectorized` loops -> Ramp/Broadcast vector code, or serial loops with a note."""
        vectorizer = _Vectorizer(max_lanes, max_bytes)
        body = vectorizer.visit(func.body)
        return add_notes(func.with_body(body), vectorizer.notes)

    return vectorize


vectorize = make_vectorize()
