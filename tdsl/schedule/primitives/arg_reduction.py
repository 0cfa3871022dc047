"""argmax / argmin: reductions that update two buffers at once (TVM's two-buffer comm_reducer),
recognised and rfactored.

The form (TVM's, with `T.let` bindings)::

    with T.init():
        I[i] = -1                       # the index buffer and
        V[i] = T.min_value("float32")   # the value buffer, in either order
    v_i: T.let[T.int32] = T.Select(V[i] >= val[i, k], I[i], idx[i, k])
    v_v: T.let[T.float32] = T.Select(V[i] >= val[i, k], V[i], val[i, k])
    I[i] = v_i
    V[i] = v_v

with `>=` / `>` for argmax and `<=` / `<` for argmin (either operand order), both buffers of one
shape and stored at one element. Parsing, the interpreter, the backends and decompose_reduction
need nothing special (the body is ordinary code); rfactor needs the combiner. Its partial
results start from the init (the combiner is idempotent on it) and the write-back folds them in
the order of the factored loop, so the result, ties included, is the original's only when the
factored loop is the outermost reduction loop of the block: tdsl refuses the others (on a tie
they would return another index; TVM accepts them). With `>` / `<` (a tie takes the new index),
a partial result that no candidate beat is still the init, and folding it in would replace an
earlier tie with the init: tdsl refuses that rfactor unless no value lies beyond the init (the
dtype's lowest value for argmax: an integer's minimum or -inf; the highest for argmin).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import (
    Binary,
    Block,
    Buffer,
    BufferLoad,
    BufferStore,
    LetStmt,
    PrimExpr,
    PrimFunc,
    Select,
    SeqStmt,
    Stmt,
    Var,
    collect,
    free_vars,
    same_expr,
    substitute,
)
from ...ir.tree import fresh_name
from ..errors import block_name, schedule_error

RULE = ("rfactor factors a block with one reduction store (`C[..] = C[..] + v`, or another commutative "
        "reducer) or an argmax/argmin; an argmax/argmin block is `with T.init(): I[..] = i0; V[..] = v0` then "
        "`a: T.let = T.Select(V[..] >= v, "
        "I[..], i)`, `b: T.let = T.Select(V[..] >= v, V[..], v)`, `I[..] = a`, `V[..] = b` (>= or > for argmax, "
        "<= or < for argmin; I and V of one shape, at one element)")


_FLIP = {"ge": "le", "gt": "lt", "le": "ge", "lt": "gt"}


@dataclass(frozen=True)
class ArgReducer:
    """(I, V)[indices] = combine((I, V)[indices], (rhs_index, rhs_value)), from (init_index, init_value);
    combine keeps the old pair when `old_value <op> new_value` holds."""

    index_buffer: Buffer
    value_buffer: Buffer
    indices: tuple[PrimExpr, ...]
    op: str  # the comparison with the old value on the left: ge / gt (argmax), le / lt (argmin)
    init_index: PrimExpr
    init_value: PrimExpr
    rhs_index: PrimExpr
    rhs_value: PrimExpr
    names: tuple[str, str]  # the let-bound names, for the index and the value

    @property
    def buffer(self) -> Buffer:
        return self.value_buffer

    @property
    def init(self) -> tuple[PrimExpr, PrimExpr]:
        return self.init_index, self.init_value

    def init_stmt(self, bufs: tuple[Buffer, Buffer], idx, vmap: dict) -> Stmt:
        return SeqStmt((BufferStore(bufs[0], substitute(self.init_index, vmap), idx),
                        BufferStore(bufs[1], substitute(self.init_value, vmap), idx)))

    def update_stmt(self, bufs: tuple[Buffer, Buffer], idx, cand: tuple[PrimExpr, PrimExpr],
                    names: tuple[str, str], taken: set[str]) -> Stmt:
        old_i, old_v = BufferLoad(bufs[0], idx), BufferLoad(bufs[1], idx)
        keep = Binary(self.op, old_v, cand[1])
        a = Var(fresh_name(names[0], taken), bufs[0].dtype)
        b = Var(fresh_name(names[1], taken), bufs[1].dtype)
        stores = SeqStmt((BufferStore(bufs[0], a, idx), BufferStore(bufs[1], b, idx)))
        return LetStmt(a, Select(keep, old_i, cand[0]), LetStmt(b, Select(keep, old_v, cand[1]), stores))


def looks_multi(block: Block) -> bool:
    """Whether the block is written in the multi-buffer form (let bindings or several stores)."""
    single_let = isinstance(block.body, LetStmt) and isinstance(block.body.body, BufferStore)
    return (isinstance(block.body, (LetStmt, SeqStmt)) and not single_let) or \
        isinstance(block.init, (LetStmt, SeqStmt))


def recognize_arg(func: PrimFunc, block: Block, primitive: str = "rfactor") -> ArgReducer:
    """The argmax/argmin reducer of `block`, or a ScheduleError naming what does not fit."""
    name = block.name

    def refuse(why: str):
        return schedule_error(func, primitive, f"{block_name(name)} {why}", blocks=(name,), rule=RULE)

    inits, lets, stores = _parts(block, refuse)
    let_vars = [v for v, _ in lets]
    idx = stores[0].indices
    b0, b1 = stores[0].buffer, stores[1].buffer
    if len(b0.shape) != len(b1.shape) or not all(same_expr(x, y) for x, y in zip(b0.shape, b1.shape)):
        raise refuse(f"reduces into {b0.name} and {b1.name} of different shapes")
    value_of = {id(s.buffer): next(e for v, e in lets if v is s.value) for s in stores}
    if any(free_vars(e) & set(let_vars) for _, e in lets):
        raise refuse("binds a value from another let-bound value")
    init_of = {id(s.buffer): s.value for s in inits}
    for ib, vb in ((b0, b1), (b1, b0)):
        got = _match(value_of[id(ib)], value_of[id(vb)], ib, vb, idx)
        if got is not None:
            op, rhs_i, rhs_v = got
            break
    else:
        raise refuse("does not update its two buffers as argmax/argmin does")
    for e in (rhs_i, rhs_v, init_of[id(ib)], init_of[id(vb)]):
        if any(ld.buffer is ib or ld.buffer is vb for ld in collect(e, BufferLoad)):
            raise refuse("reduces a value that reads its own output buffers")
    reduce_vars = {iv.var for iv in block.iter_vars if iv.kind == "R"}
    if any(free_vars(i) & reduce_vars for i in idx) or \
            (free_vars(init_of[id(ib)]) | free_vars(init_of[id(vb)])) & reduce_vars:
        raise refuse("has an init or a stored element that depends on a reduction iterator")
    index_name, value_name = (next(v.name for v, e in lets if e is value_of[id(b)]) for b in (ib, vb))
    return ArgReducer(ib, vb, tuple(idx), op, init_of[id(ib)], init_of[id(vb)], rhs_i, rhs_v,
                      (index_name, value_name))


def _parts(block: Block, refuse) -> tuple[list[BufferStore], list[tuple[Var, PrimExpr]], list[BufferStore]]:
    """The init stores, the let bindings and the update stores, checked for the two-buffer shape."""
    if block.init is None:
        raise refuse("has no T.init (rfactor of a two-buffer reduction needs it)")
    inits: list = list(block.init.seq) if isinstance(block.init, SeqStmt) else [block.init]
    lets: list[tuple[Var, PrimExpr]] = []
    body = block.body
    while isinstance(body, LetStmt):
        lets.append((body.var, body.value))
        body = body.body
    stmts = list(body.seq) if isinstance(body, SeqStmt) else [body]
    init_stmts = inits
    inits = [x for x in init_stmts if isinstance(x, BufferStore)]
    stores = [x for x in stmts if isinstance(x, BufferStore)]
    if len(inits) != len(init_stmts):
        raise refuse("has a T.init that is not a sequence of stores")
    if len(stores) != len(stmts):
        raise refuse("has a body that is not let bindings followed by stores")
    if (len(inits), len(lets), len(stores)) != (2, 2, 2):
        raise refuse(f"initialises {len(inits)} element(s), binds {len(lets)} value(s) and stores {len(stores)}; "
                     "an argmax/argmin has two of each")
    for what, group in (("T.init", inits), ("update", stores)):
        if group[0].buffer is group[1].buffer:
            raise refuse(f"stores twice to {group[0].buffer.name} in its {what}")
    if {id(s.buffer) for s in inits} != {id(s.buffer) for s in stores}:
        raise refuse("initialises and updates different buffers")
    let_vars = [v for v, _ in lets]
    for s in stores:
        if not (isinstance(s.value, Var) and any(s.value is v for v in let_vars)):
            raise refuse(f"stores a value to {s.buffer.name} that is not one of its let-bound values")
    if stores[0].value is stores[1].value:
        raise refuse("stores one let-bound value to both buffers")
    idx = stores[0].indices
    if not all(len(s.indices) == len(idx) and all(same_expr(a, b) for a, b in zip(s.indices, idx))
               for s in inits + stores):
        raise refuse("stores to different elements")
    return inits, lets, stores


def _match(e_index: PrimExpr, e_value: PrimExpr, ib: Buffer, vb: Buffer, idx):
    """(op, new index, new value) when e_index / e_value are argmax/argmin updates of (ib, vb)."""
    def is_old(e, buf) -> bool:
        return isinstance(e, BufferLoad) and e.buffer is buf and all(same_expr(a, b) for a, b in zip(e.indices, idx))

    if not (isinstance(e_index, Select) and isinstance(e_value, Select)):
        return None
    if not same_expr(e_index.condition, e_value.condition):
        return None
    if not (is_old(e_index.true_value, ib) and is_old(e_value.true_value, vb)):
        return None
    cond, new_v = e_value.condition, e_value.false_value
    if not (isinstance(cond, Binary) and cond.op in _FLIP):
        return None
    if is_old(cond.a, vb) and same_expr(cond.b, new_v):
        op = cond.op
    elif is_old(cond.b, vb) and same_expr(cond.a, new_v):
        op = _FLIP[cond.op]
    else:
        return None
    return op, e_index.false_value, new_v
