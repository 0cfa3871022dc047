"""Helpers shared by the lowering passes: lane-aware index arithmetic, statement building,
fresh copies of statements, expression identity, function attributes."""
from __future__ import annotations

from ..arith.analyzer import fold_binary
from ..dtypes import DataType, int32
from ..ir import (
    Allocate,
    Binary,
    Broadcast,
    Buffer,
    Cast,
    Evaluate,
    For,
    IntImm,
    IRMutator,
    IRVisitor,
    LetStmt,
    PrimExpr,
    PrimFunc,
    Ramp,
    SeqStmt,
    Stmt,
    Var,
    is_const,
)
from ..ir.attrs import LOWER_NOTES, get_attr, set_attr
from ..ir.functor import replace_fields as replace
from ..ir.structural import same_expr  # noqa: F401 - re-exported for the passes

# ----------------------------------------------------------------------------- attributes

def add_notes(func: PrimFunc, notes: list[str]) -> PrimFunc:
    """Append lowering notes (things the user may want to know, e.g. a loop left scalar)."""
    if not notes:
        return func
    old = tuple(get_attr(func, LOWER_NOTES, ()))
    new = tuple(dict.fromkeys(n for n in notes if n not in old))  # unrolled copies repeat a note
    return set_attr(func, LOWER_NOTES, old + new)


# ----------------------------------------------------------------------------- statements

def nop() -> Stmt:
    """The statement that does nothing."""
    return Evaluate(IntImm(0, int32))


def is_nop(stmt: Stmt | None) -> bool:
    if stmt is None:
        return True
    if isinstance(stmt, Evaluate) and isinstance(stmt.value, IntImm):
        return True
    return isinstance(stmt, SeqStmt) and all(is_nop(s) for s in stmt.seq)


def seq(*stmts: Stmt | None) -> Stmt:
    """A flat SeqStmt of the non-empty statements (the statement itself when only one)."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None or is_nop(s):
            continue
        if isinstance(s, SeqStmt):
            flat.extend(s.seq)
        else:
            flat.append(s)
    if not flat:
        return nop()
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))


# ----------------------------------------------------------------------------- expressions


def cast_to(dtype: DataType, e: PrimExpr) -> PrimExpr:
    """`e` converted to `dtype` (constants folded; a no-op when the dtype already matches)."""
    if e.dtype == dtype:
        return e
    if isinstance(e, IntImm) and dtype.is_integer and dtype.lanes == 1:
        return IntImm(e.value, dtype)
    return Cast(dtype, e)


def _int_lanes(e: PrimExpr) -> int:
    return e.dtype.lanes


def broadcast(e: PrimExpr, lanes: int) -> PrimExpr:
    """A scalar expression repeated over `lanes` (vectors pass through)."""
    if lanes == 1 or e.dtype.lanes == lanes:
        return e
    if e.dtype.lanes != 1:
        raise ValueError(f"cannot broadcast a {e.dtype} value to {lanes} lanes")
    return Broadcast(e, lanes)


def _fold(op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
    """Fold integer constants (as the machine computes them: `tdsl.arith.fold_binary`, which
    wraps around) and the identities x+0, x*1, x*0 on scalars."""
    if a.dtype.lanes != 1 or b.dtype.lanes != 1 or not a.dtype.is_integer:
        return None
    ca = a.value if isinstance(a, IntImm) else None
    cb = b.value if isinstance(b, IntImm) else None
    if ca is not None and cb is not None:
        return fold_binary(op, a, b)
    if op == "add":
        if ca == 0:
            return b
        if cb == 0:
            return a
    if op == "sub" and cb == 0:
        return a
    if op == "mul":
        if ca == 1:
            return b
        if cb == 1:
            return a
        if ca == 0 or cb == 0:
            return IntImm(0, a.dtype)
    return None


def ramp(base: PrimExpr, stride: PrimExpr, lanes: int) -> PrimExpr:
    """Ramp(base, stride, lanes); a zero stride is a Broadcast."""
    if isinstance(stride, IntImm) and stride.value == 0:
        return Broadcast(base, lanes)
    return Ramp(base, stride, lanes)


def arith(op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """`a op b` for add/sub/mul keeping Ramp/Broadcast form where it is affine, folding constants,
    and broadcasting a scalar operand against a vector one."""
    la, lb = _int_lanes(a), _int_lanes(b)
    if la == 1 and lb == 1:
        folded = _fold(op, a, b)
        return folded if folded is not None else Binary(op, a, b)
    if la != 1 and lb != 1 and la != lb:
        raise ValueError(f"lane counts differ: {a.dtype} and {b.dtype}")
    lanes = max(la, lb)
    sa, sb = _affine(a), _affine(b)
    if sa is not None and sb is not None:
        (ba, ta), (bb, tb) = sa, sb
        if op in ("add", "sub"):
            return ramp(arith(op, ba, bb), arith(op, ta, tb), lanes)
        if op == "mul":
            # (ba + ta*l) * (bb + tb*l) is affine in the lane l only when one side is uniform
            if is_const(tb, 0):
                return ramp(arith("mul", ba, bb), arith("mul", ta, bb), lanes)
            if is_const(ta, 0):
                return ramp(arith("mul", ba, bb), arith("mul", ba, tb), lanes)
    return Binary(op, broadcast(a, lanes), broadcast(b, lanes))


def _affine(e: PrimExpr) -> tuple[PrimExpr, PrimExpr] | None:
    """(base, stride) of a value that is `base + stride * lane`, for scalars, Ramp and Broadcast."""
    if e.dtype.lanes == 1:
        return e, IntImm(0, e.dtype)
    if isinstance(e, Ramp):
        return e.base, e.stride
    if isinstance(e, Broadcast):
        return e.value, IntImm(0, e.value.dtype)
    return None


def promote_ints(exprs: list[PrimExpr]) -> list[PrimExpr]:
    """Cast integer index expressions to the widest integer type among them (lanes kept)."""
    # a Binary's dtype walks down its operands: ask each expression once
    dtypes = [e.dtype for e in exprs]
    bits = max((dt.bits for dt in dtypes if dt.is_integer), default=32)
    code = "int"
    out = []
    for e, dt in zip(exprs, dtypes):
        target = DataType(code, bits, dt.lanes)
        out.append(e if dt == target else _cast_lanes(target, e))
    return out


def _cast_lanes(dtype: DataType, e: PrimExpr) -> PrimExpr:
    if isinstance(e, Ramp):
        scalar = dtype.element
        return Ramp(cast_to(scalar, e.base), cast_to(scalar, e.stride), e.lanes)
    if isinstance(e, Broadcast):
        return Broadcast(cast_to(dtype.element, e.value), e.lanes)
    return cast_to(dtype, e)


# ----------------------------------------------------------------------------- fresh copies

class _Freshener(IRMutator):
    """Copies a statement giving every variable and buffer it defines a new identity, so that
    duplicated code (unrolled or chunked loop bodies) never defines one Var twice."""

    def __init__(self, vmap: dict[Var, PrimExpr]):
        self.vmap: dict[Var, PrimExpr] = dict(vmap)
        self.bmap: dict[Buffer, Buffer] = {}

    def visit_Var(self, var: Var) -> PrimExpr:
        return self.vmap.get(var, var)

    def visit_buffer(self, buffer: Buffer) -> Buffer:
        return self.bmap.get(buffer, buffer)

    def _fresh(self, var: Var) -> Var:
        new = Var(var.name, var.dtype, span=var.span)
        self.vmap[var] = new
        return new

    def visit_For(self, op: For) -> Stmt:
        lo, ext = self.visit(op.min), self.visit(op.extent)
        var = self._fresh(op.loop_var)
        return replace(op, loop_var=var, min=lo, extent=ext, body=self.visit(op.body))

    def visit_LetStmt(self, op: LetStmt) -> Stmt:
        value = self.visit(op.value)
        var = self._fresh(op.var)
        return replace(op, var=var, value=value, body=self.visit(op.body))

    def visit_Allocate(self, op: Allocate) -> Stmt:
        buf = op.buffer
        shape = tuple(self.visit(s) for s in buf.shape)
        self.bmap[buf] = buf.with_(shape=shape)
        return replace(op, buffer=self.bmap[buf], body=self.visit(op.body))


def fresh_copy(stmt: Stmt, vmap: dict[Var, PrimExpr]) -> Stmt:
    """`stmt` with `vmap` substituted and every variable/buffer it defines renewed."""
    return _Freshener(vmap).visit(stmt)


class StmtMutator(IRMutator):
    """An IRMutator that rewrites statements only: expressions, regions and iterators come back
    as they are, unvisited (no statement lives inside them), which saves walking most of the
    tree in passes that change loops or blocks."""

    def visit(self, node):
        if isinstance(node, Stmt):
            return super().visit(node)
        return node


class _StmtCollector(IRVisitor):
    def __init__(self, cls):
        self.cls = cls
        self.out: list = []

    def visit(self, node):
        if isinstance(node, Stmt):
            self.generic_visit(node)
            if isinstance(node, self.cls):
                self.out.append(node)


def collect_stmts(stmt: Stmt, cls) -> list:
    """Every statement of class `cls` under `stmt`, in post order (`collect` for statement
    classes, without walking the expressions)."""
    collector = _StmtCollector(cls)
    collector.visit(stmt)
    return collector.out


def common_prefix(stacks: list[tuple[For, ...]]) -> tuple[For, ...]:
    """The loops (outer to inner) that every stack of enclosing loops starts with."""
    out = []
    for loops in zip(*stacks):
        if not all(f is loops[0] for f in loops):
            break
        out.append(loops[0])
    return tuple(out)
