"""Facts about one block that the rules decide on: its iterators, loops, accesses, and roles.

Everything is read from the schedule's current function by the block's name, so a rule can ask
after every step it took. Nothing here changes a function.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from ..ir import (
    Binary,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    For,
    IntImm,
    LetStmt,
    PrimFunc,
    Var,
    collect,
    free_vars,
)
from ..ir.tree import all_realizes, loops_in_scope
from ..schedule.tree import find_block

EXPENSIVE_CALLS = ("exp", "log", "tanh", "sigmoid", "erf", "pow", "sqrt", "rsqrt", "sin", "cos")


@dataclass(frozen=True)
class Iter:
    """A block iterator: its Var, "S" or "R", its extent (an int, or None when symbolic) and the
    loop Var that binds it alone (None when its binding is not a single loop)."""

    var: Var
    kind: str
    extent: int | None
    loop: Var | None


@dataclass(frozen=True)
class BlockInfo:
    """One block as the rules see it."""

    name: str
    block: Block
    realize: BlockRealize
    iters: tuple[Iter, ...]
    loops: tuple[Var, ...]            # the loops around the block in its scope, outer to inner
    loop_extents: tuple[int | None, ...]
    params: frozenset                 # the function's parameter buffers
    top_level: bool                   # directly under the root block (not nested in another)

    @property
    def spatial(self) -> list[Iter]:
        return [it for it in self.iters if it.kind == "S"]

    @property
    def reduction(self) -> list[Iter]:
        return [it for it in self.iters if it.kind == "R"]

    @property
    def is_spatial(self) -> bool:
        return not self.reduction

    @property
    def simple_bindings(self) -> bool:
        """Each iterator bound to one loop of its own, every loop binding one iterator."""
        bound = [it.loop for it in self.iters]
        return (all(b is not None for b in bound) and len({id(b) for b in bound}) == len(bound)
                and len(bound) == len(self.loops) and not _has_predicate(self.realize))

    @property
    def writes(self) -> list[Buffer]:
        return [r.buffer for r in self.block.writes]

    @property
    def reads(self) -> list[Buffer]:
        return [r.buffer for r in self.block.reads]

    @property
    def writes_output(self) -> bool:
        return any(b in self.params for b in self.writes)

    @property
    def store(self) -> BufferStore | None:
        """The block's one store (under let bindings, if any), or None."""
        body = self.block.body
        while isinstance(body, LetStmt):
            body = body.body
        return body if isinstance(body, BufferStore) else None

    @property
    def expensive(self) -> bool:
        """The body calls a transcendental function (worth computing once, not inlined twice)."""
        return any(c.op in EXPENSIVE_CALLS for c in collect(self.block.body, Call))

    @property
    def constant_extents(self) -> bool:
        return all(e is not None for e in self.loop_extents)


def _has_predicate(realize: BlockRealize) -> bool:
    p = realize.predicate
    return not (isinstance(p, IntImm) and p.value == 1)


def _extent(expr) -> int | None:
    return int(expr.value) if isinstance(expr, IntImm) else None


_INFO_CACHE: OrderedDict[tuple[int, str], tuple[PrimFunc, BlockInfo]] = OrderedDict()
_INFO_CACHE_SIZE = 512


def block_info(func: PrimFunc, name: str) -> BlockInfo:
    """The BlockInfo of block `name` in `func`. Functions are immutable, so the answer is kept
    per (function, block) -- the rules ask about the same block of the same function many times
    (a softmax space asked 1,441 times, a fifth of its build); the entry holds the function, so
    its id cannot be reused while it is cached."""
    key = (id(func), name)
    hit = _INFO_CACHE.get(key)
    if hit is not None and hit[0] is func:
        _INFO_CACHE.move_to_end(key)
        return hit[1]
    info = _block_info(func, name)
    _INFO_CACHE[key] = (func, info)
    if len(_INFO_CACHE) > _INFO_CACHE_SIZE:
        _INFO_CACHE.popitem(last=False)
    return info


def _block_info(func: PrimFunc, name: str) -> BlockInfo:
    realize, path = find_block(func, name, "auto")
    loops = loops_in_scope(path)
    loop_vars = [f.loop_var for f in loops]
    iters = []
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        loop = value if isinstance(value, Var) and any(value is v for v in loop_vars) else None
        iters.append(Iter(iv.var, iv.kind, _extent(iv.dom.extent), loop))
    params = frozenset(p for p in func.params if isinstance(p, Buffer))
    top = _top_level(path)
    return BlockInfo(name, realize.block, realize, tuple(iters), tuple(loop_vars),
                     tuple(_extent(f.extent) for f in loops), params, top)


def _top_level(path) -> bool:
    """No loop encloses the block's enclosing block: it is not nested in another block's loop nest
    (blocks directly in loop-less wrapper blocks count as top level)."""
    last = max((k for k, p in enumerate(path) if isinstance(p, BlockRealize)), default=-1)
    return not any(isinstance(p, For) for p in path[:last])


def top_level_blocks(func: PrimFunc) -> list[str]:
    """The blocks not nested in another block's loop nest, in program order (the root excluded)."""
    out = []
    for r in all_realizes(func.body):
        if r is func.body:
            continue
        _, path = find_block(func, r.block.name, "auto")
        if _top_level(path):
            out.append(r.block.name)
    return out


def consumers(func: PrimFunc, name: str) -> list[str]:
    """The blocks of the same scope that read what block `name` writes (no schedule step recorded)."""
    from ..schedule.primitives.lookup import get_consumers

    return get_consumers(func, name)[1]


def producers(func: PrimFunc, name: str) -> list[str]:
    """The blocks of the same scope that write what block `name` reads."""
    from ..schedule.primitives.lookup import get_producers

    return get_producers(func, name)[1]


def writer_of(func: PrimFunc, buffer: Buffer) -> str | None:
    """The one top-level block that writes `buffer` (None when there is not exactly one)."""
    names = [n for n in top_level_blocks(func)
             if any(r.buffer is buffer for r in find_block(func, n, "auto")[0].block.writes)]
    return names[0] if len(names) == 1 else None


def loop_node(func: PrimFunc, var: Var):
    """The For statement of loop `var`."""
    from ..schedule.tree import find_loop

    return find_loop(func, var, "auto")[0]


def blocks_in_nest(func: PrimFunc, name: str) -> list[str]:
    """The blocks in the root loop nest of block `name` (itself when it has no loop), in order."""
    info = block_info(func, name)
    if not info.loops:
        return [name]
    return [r.block.name for r in all_realizes(loop_node(func, info.loops[0]))]


# -- roles of a matmul-like block ----------------------------------------------------------------

@dataclass(frozen=True)
class MatmulRoles:
    """`C[.., i, .., j] += A[.., i, .., k, ..] * B[.., k, .., j .. ]` (or A, B swapped): `i`, `j`, `k`
    are the iterators the fp32 micro-kernel's MR, NR, KC run over; `j` is C's last index (unit
    stride), `i` a spatial iterator of C and of A only, `k` the largest reduction iterator that
    both operands use; `a` and `b` are the operand buffers (`b` the one indexed by `j`)."""

    i: Iter
    j: Iter
    k: Iter
    a: Buffer
    b: Buffer
    c: Buffer
    a_indices: tuple
    b_indices: tuple
    c_indices: tuple


def _vars(indices) -> set[Var]:
    out: set[Var] = set()
    for e in indices:
        out |= free_vars(e)
    return out


def matmul_roles(info: BlockInfo, out_dtypes: tuple[str, ...] = ("float32",)) -> MatmulRoles | None:
    """The roles when the block is a multiply-accumulate into its output of one of `out_dtypes`
    (fp32 by default; ("int32",) for an int8 GEMM's `C += cast(A) * cast(B)`), else None."""
    store = info.store
    if store is None or str(store.buffer.dtype) not in out_dtypes or not isinstance(store.value, Binary) \
            or store.value.op != "add" or not info.reduction or len(info.spatial) < 2:
        return None
    acc, prod = store.value.a, store.value.b
    if not (isinstance(acc, BufferLoad) and acc.buffer is store.buffer):
        acc, prod = prod, acc
    if not (isinstance(acc, BufferLoad) and acc.buffer is store.buffer and isinstance(prod, Binary)
            and prod.op == "mul"):
        return None
    x, y = prod.a, prod.b
    while isinstance(x, Cast):
        x = x.value
    while isinstance(y, Cast):
        y = y.value
    if not (isinstance(x, BufferLoad) and isinstance(y, BufferLoad)) or x.buffer is y.buffer:
        return None
    if any(not (isinstance(e, Var)) for e in store.indices):
        return None
    by_var = {id(it.var): it for it in info.iters}
    c_vars = [by_var.get(id(e)) for e in store.indices]
    if any(it is None or it.kind != "S" for it in c_vars):
        return None
    j = c_vars[-1]
    xv, yv = _vars(x.indices), _vars(y.indices)
    last = lambda load: load.indices[-1]
    # B is the operand whose last index uses j (unit stride along j)
    if j.var in free_vars(last(y)):
        a, b = x, y
    elif j.var in free_vars(last(x)):
        a, b = y, x
    else:
        return None
    av, bv = (xv, yv) if a is x else (yv, xv)
    i_cands = [it for it in c_vars[:-1] if it.var in av and it.var not in bv]
    k_cands = [it for it in info.reduction if it.var in av and it.var in bv]
    if not i_cands or not k_cands:
        return None
    k = max(k_cands, key=lambda it: it.extent or 0)
    return MatmulRoles(i_cands[-1], j, k, a.buffer, b.buffer, store.buffer, a.indices, b.indices,
                       tuple(store.indices))


def vector_obstacle(block: Block, var: Var) -> str | None:
    """Why `vectorize` of a loop running the block iterator `var` (with stride 1) would be left
    scalar when lowering, or None when it vectorizes: every access that depends on `var` must be
    contiguous in it (only its last index depends on `var`, with coefficient 1: a clamped
    `A[T.min(vj + 1, n - 1)]`, a transpose or a gather is not), every call it reaches must have a
    vector form. The rules ask this before they vectorize, so that their own choices never come
    back as a PerformanceWarning."""
    from ..arith import linear_form
    from ..ir.expr import MATH_CALLS

    for node in collect(block.body, (BufferLoad, BufferStore)):
        idx = node.indices
        if not any(var in free_vars(e) for e in idx):
            continue
        what = f"the {'load from' if isinstance(node, BufferLoad) else 'store into'} {node.buffer.name!r}"
        if any(var in free_vars(e) for e in idx[:-1]):
            return f"{what} is not contiguous in {var.name} (an outer index depends on it)"
        form = linear_form(idx[-1], [var])
        if form is None or form[0][var] != 1:
            return f"{what} is not contiguous in {var.name}"
    for call in collect(block.body, Call):
        if call.op not in MATH_CALLS and call.op != "if_then_else" and any(
                var in free_vars(a) for a in call.args if hasattr(a, "dtype")):
            return f"it calls {call.op!r}, which has no vector form"
    return None
