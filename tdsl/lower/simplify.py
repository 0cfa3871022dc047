"""`simplify` (tdsl.arith on every integer expression) and `remove_no_op`."""
from __future__ import annotations

from collections.abc import Callable

from ..ir import (
    Allocate,
    Binary,
    Broadcast,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    Evaluate,
    For,
    IfThenElse,
    IntImm,
    IRMutator,
    IRVisitor,
    LetStmt,
    Not,
    PrimExpr,
    PrimFunc,
    Ramp,
    Range,
    Select,
    SeqStmt,
    Stmt,
    Var,
    as_expr,
    is_false,
    is_true,
    substitute,
    uses_var,
)
from ..ir.functor import expr_children
from ..ir.functor import replace_fields as replace
from ._util import StmtMutator, is_nop, nop, same_expr, seq

_SIMPLIFY: list = []   # tdsl.arith.simplify once imported (an import statement per call costs)


def _arith_simplify() -> Callable | None:
    """tdsl.arith.simplify, or None while that module is not available."""
    if not _SIMPLIFY:
        try:
            from ..arith import simplify
        except ImportError:
            return None
        _SIMPLIFY.append(simplify)
    return _SIMPLIFY[0]


def _arith_analyzer() -> Callable | None:
    """tdsl.arith's Analyzer class (ranges -> memoizing analyzer), or None without tdsl.arith."""
    try:
        from ..arith.analyzer import Analyzer
    except ImportError:
        return None
    return Analyzer


def simplify_index(e: PrimExpr, ranges: dict[Var, Range] | None = None) -> PrimExpr:
    """Simplify a scalar integer expression when tdsl.arith is available, else return it."""
    simplify = _arith_simplify()
    if simplify is None or e.dtype.lanes != 1 or not (e.dtype.is_integer or e.dtype.is_bool):
        return e
    return simplify(e, ranges or None)


def _int_scalar(e: PrimExpr) -> bool:
    """`e` is a scalar integer or boolean. Vector nodes and loads of non-integer buffers answer
    without computing their dtype (a property that walks down the operands)."""
    t = type(e)
    if t is Ramp or t is Broadcast:
        if e.lanes != 1:
            return False
    elif t is BufferLoad:
        bdt = e.buffer.dtype
        if not (bdt.is_integer or bdt.is_bool):
            return False
    dt = e.dtype
    return dt.lanes == 1 and (dt.is_integer or dt.is_bool)


def _wrapped(c: IntImm) -> bool:
    """`c`'s value is one its dtype holds (then simplification returns `c` itself)."""
    dt = c.dtype
    if dt.code == "bool":
        return c.value in (0, 1)
    if dt.code == "uint":
        return 0 <= c.value < (1 << dt.bits)
    if dt.code == "int":
        half = 1 << (dt.bits - 1)
        return -half <= c.value < half
    return False


def _dtype_range(dt) -> tuple[int, int]:
    """The values an integer or bool scalar dtype holds."""
    if dt.code == "bool":
        return 0, 1
    if dt.code == "uint":
        return 0, (1 << dt.bits) - 1
    half = 1 << (dt.bits - 1)
    return -half, half - 1


_OVERFLOWING = frozenset(("add", "sub", "mul", "floordiv", "floormod", "min", "max", "shift_left"))


def _cannot_wrap(analyzer, e: PrimExpr) -> bool:
    """No arithmetic node of `e` can leave its dtype's range under `analyzer`'s loop ranges, so
    the analyzer's no-overflow algebra is exact for it. Atoms (loads, Vars, constants) and
    comparisons never wrap; `floordiv`/`min`/`max` count because rewrites of them
    (`x // -3 -> (x * -1) // 3`, `max(x, x + 1) -> x + 1`) introduce or drop a wrap."""
    stack = [e]
    while stack:
        n = stack.pop()
        t = type(n)
        if t is Binary:
            if n.op in _OVERFLOWING and _int_scalar(n):
                lo, hi = analyzer.bound(n)
                dlo, dhi = _dtype_range(n.dtype)
                if lo is None or hi is None or lo < dlo or hi > dhi:
                    return False
            stack.append(n.a)
            stack.append(n.b)
        elif t is Cast:
            if _int_scalar(n) and n.dtype.code != "bool":
                lo, hi = analyzer.bound(n.value) if _int_scalar(n.value) else (None, None)
                dlo, dhi = _dtype_range(n.dtype)
                if lo is None or hi is None or lo < dlo or hi > dhi:
                    return False
            stack.append(n.value)
        elif t is BufferLoad or t is Ramp:
            continue   # an atom; its indices (a ramp's base and stride) are index arithmetic
        else:
            stack.extend(expr_children(n))
    return True


def _has_load(e: PrimExpr) -> bool:
    """`e` reads a buffer outside of an index (a data-dependent value)."""
    stack = [e]
    while stack:
        n = stack.pop()
        if type(n) is BufferLoad:
            return True
        if type(n) is not Ramp:   # a ramp's base and stride are index arithmetic, like load indices
            stack.extend(expr_children(n))
    return False


class _Simplifier(IRMutator):
    """Simplifies each maximal scalar integer/bool expression, knowing the enclosing loop ranges.
    Float expressions are only simplified inside (their integer indices): rewriting float
    arithmetic could change rounding or signed zeros.

    One analyzer serves the whole function: its ranges are every loop met so far. An
    expression's simplification depends only on the ranges of the Vars it reaches (its own and
    those in their ranges, all of enclosing loops), so the ranges of loops already left change
    nothing, while the memo tables then serve every scope (the same index subexpressions recur
    in every loop nest of a GEMM). A Var bound a second time (two loops over one Var, a let of
    a loop's Var) or met before its loop would see stale memo entries: then a fresh analyzer
    starts from the enclosing loops' ranges, as a per-scope analyzer would. (A loop's Var used
    after its loop, which verification and codegen reject, would still see its range.)

    Index arithmetic (buffer indices, loop bounds, and conditions that read no buffer) is
    simplified assuming no overflow (docs/script.md). Integer *values* (stored values, lets,
    call arguments, conditions on data) wrap: their simplified form is kept only where no
    arithmetic node can wrap (`_cannot_wrap`, on both forms); otherwise the simplifier goes
    down into the operands, so `x // -3` stays as written and `max(x, x + 1)` is not `x + 1`."""

    def __init__(self, make_analyzer: Callable):
        self.make_analyzer = make_analyzer
        self.index = False   # inside index arithmetic
        self.scope: dict[Var, Range] = {}    # the enclosing loops' ranges
        self.ranges: dict[Var, Range] = {}   # every loop met since `analyzer` was made (its ranges)
        self.analyzer = None

    def _restart(self) -> None:
        self.ranges = dict(self.scope)
        self.analyzer = None

    def visit(self, node):
        if isinstance(node, PrimExpr) and _int_scalar(node):
            if type(node) is IntImm and _wrapped(node):
                return node   # what the analyzer gives back for a constant that fits its type
            if self.analyzer is None:
                self.analyzer = self.make_analyzer(self.ranges)
            if self.index:
                return self.analyzer.simplify(as_expr(node))
            out = self.analyzer.simplify(as_expr(node))
            if out is node or (_cannot_wrap(self.analyzer, node) and _cannot_wrap(self.analyzer, out)):
                return out
        return super().visit(node)

    def _visit_index(self, e: PrimExpr) -> PrimExpr:
        outer, self.index = self.index, True
        try:
            return self.visit(e)
        finally:
            self.index = outer

    def _visit_indices(self, indices: tuple) -> tuple:
        new = tuple(self._visit_index(i) for i in indices)
        return indices if all(a is b for a, b in zip(new, indices)) else new

    def visit_BufferLoad(self, e: BufferLoad) -> PrimExpr:
        indices = self._visit_indices(e.indices)
        return e if indices is e.indices else BufferLoad(e.buffer, indices, span=e.span)

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        value = self.visit(op.value)
        indices = self._visit_indices(op.indices)
        if value is op.value and indices is op.indices:
            return op
        return replace(op, value=value, indices=indices)

    def visit_IfThenElse(self, op: IfThenElse) -> Stmt:
        cond = op.condition
        cond = self.visit(cond) if _has_load(cond) else self._visit_index(cond)
        then_case = self.visit(op.then_case)
        else_case = None if op.else_case is None else self.visit(op.else_case)
        if cond is op.condition and then_case is op.then_case and else_case is op.else_case:
            return op
        return replace(op, condition=cond, then_case=then_case, else_case=else_case)

    def visit_For(self, loop: For) -> Stmt:
        lo, ext = self._visit_index(loop.min), self._visit_index(loop.extent)
        var = loop.loop_var
        again = var in self.ranges or (self.analyzer is not None and self.analyzer.has_seen(var))
        if again:
            self._restart()
        rng = Range(lo, ext)
        outer = self.scope.get(var)   # a loop over the Var of an enclosing loop
        self.scope[var] = rng
        self.ranges[var] = rng
        body = self.visit(loop.body)
        if outer is None:
            del self.scope[var]
        else:
            self.scope[var] = outer
        if again:
            self._restart()   # what follows must not see this binding's range either
        if lo is loop.min and ext is loop.extent and body is loop.body:
            return loop
        return replace(loop, min=lo, extent=ext, body=body)

    def visit_Call(self, e: Call) -> PrimExpr:
        # a non-integer T.if_then_else whose condition folded to a constant (inlined padding
        # away from the border, an unrolled offset) is the branch it picks: exact, no rounding
        out = self.generic_visit(e)
        if isinstance(out, Call) and out.op == "if_then_else":
            return _pick(out.args[0], out.args[1], out.args[2], out)
        return out

    def visit_Select(self, e: Select) -> PrimExpr:
        out = self.generic_visit(e)
        if isinstance(out, Select):
            return _pick(out.condition, out.true_value, out.false_value, out)
        return out

    def visit_LetStmt(self, op: LetStmt) -> Stmt:
        value = self.visit(op.value)
        if op.var in self.ranges:
            self._restart()   # the let's Var has no range in its body
        body = self.visit(op.body)
        return op if value is op.value and body is op.body else replace(op, value=value, body=body)


def _pick(cond: PrimExpr, then: PrimExpr, other: PrimExpr, default: PrimExpr) -> PrimExpr:
    """The branch a scalar constant condition selects (`default` when it is not constant)."""
    if type(cond) is IntImm and cond.dtype.lanes == 1 and then.dtype == other.dtype == default.dtype:
        return then if cond.value else other
    return default


def simplify(func: PrimFunc) -> PrimFunc:
    """Run tdsl.arith.simplify on every integer and boolean expression (a no-op while
    tdsl.arith is not available)."""
    make_analyzer = _arith_analyzer()
    if make_analyzer is None:
        return func
    return func.with_body(_Simplifier(make_analyzer).visit(func.body))


class _Found(Exception):
    """Ends a search at its first hit."""


class _BufferFinder(IRVisitor):
    """Raises _Found at the first reference to `buf`: an allocation's first use is usually its
    body's first statement, so the search rarely walks the whole body (it did, once per
    allocation, in remove_no_op: ~5 ms of the GEMM's build)."""

    def __init__(self, buf: Buffer):
        self.buf = buf

    def visit_buffer(self, b: Buffer) -> None:
        if b is self.buf:
            raise _Found


def _uses_buffer(stmt: Stmt, buf: Buffer) -> bool:
    try:
        _BufferFinder(buf).visit(stmt)
    except _Found:
        return True
    return False


class _NoOpRemover(StmtMutator):
    def visit_SeqStmt(self, op: SeqStmt) -> Stmt:
        return seq(*(self.visit(s) for s in op.seq))

    def visit_Evaluate(self, op: Evaluate) -> Stmt:
        return nop() if isinstance(op.value, IntImm) else op

    def visit_For(self, loop: For) -> Stmt:
        body = self.visit(loop.body)
        ext = loop.extent
        if is_nop(body) or (isinstance(ext, IntImm) and ext.value <= 0):
            return nop()
        # a one-trip loop is its body, except thread bindings, which set launch dimensions
        if isinstance(ext, IntImm) and ext.value == 1 and loop.kind != "thread_binding":
            return substitute(body, {loop.loop_var: loop.min}, buffers=True)
        return loop if body is loop.body else replace(loop, body=body)

    def visit_IfThenElse(self, op: IfThenElse) -> Stmt:
        then_case = self.visit(op.then_case)
        else_case = None if op.else_case is None else self.visit(op.else_case)
        if is_nop(else_case):
            else_case = None
        if is_true(op.condition):
            return then_case
        if is_false(op.condition):
            return else_case if else_case is not None else nop()
        if is_nop(then_case):
            return nop() if else_case is None else IfThenElse(Not(op.condition), else_case, span=op.span)
        if then_case is op.then_case and else_case is op.else_case:
            return op
        return replace(op, then_case=then_case, else_case=else_case)

    def visit_LetStmt(self, op: LetStmt) -> Stmt:
        body = self.visit(op.body)
        if not uses_var(body, op.var):
            return body
        return op if body is op.body else replace(op, body=body)

    def visit_Allocate(self, op: Allocate) -> Stmt:
        body = self.visit(op.body)
        if is_nop(body) or not _uses_buffer(body, op.buffer):
            return body
        return op if body is op.body else replace(op, body=body)

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        # X[i] = X[i] stores what is already there
        v = op.value
        if (isinstance(v, BufferLoad) and v.buffer is op.buffer and len(v.indices) == len(op.indices)
                and all(same_expr(a, b) for a, b in zip(v.indices, op.indices))):
            return nop()
        return op


def remove_no_op(func: PrimFunc) -> PrimFunc:
    """Drop statements that do nothing: empty or zero-trip loops, constant-false branches,
    unused lets and allocations, `X[i] = X[i]`; one-trip loops become their body."""
    return func.with_body(_NoOpRemover().visit(func.body))
