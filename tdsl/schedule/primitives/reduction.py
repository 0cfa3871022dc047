"""Reduction primitives: decompose_reduction, rfactor, and the reducer recognition they share.

A reduction block is `with T.init(): C[idx] = c` followed by `C[idx] = combine(C[idx], x)` with
combine one of `+`, `*`, `T.min`, `T.max` (either operand order). The init value `c` may be any
expression of the spatial iterators (a literal such as -3.4e38 or -inf counts, not only
T.min_value): rfactor starts its partial results from the combiner's identity for `+`/`*` and
from `c` itself for min/max (which ignore a repeated operand), and the final write-back starts
from `c`, so the result is the same for every `c`.

rfactor also takes the update block decompose_reduction leaves behind (no T.init: another block
wrote the start value `c` earlier). Its partial results start from the combiner's true identity
(0, 1, +-inf or the integer limits) and the write-back has no T.init either, so it folds the
partials into whatever the output holds: `C = c + sum(partials)` with `c` from the init block.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...ir import (
    Binary,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    For,
    IntImm,
    IterVar,
    LetStmt,
    PrimExpr,
    PrimFunc,
    SeqStmt,
    Stmt,
    Var,
    collect,
    const,
    free_vars,
    same_expr,
    substitute,
)
from ...ir.tree import (
    Path,
    all_realizes,
    block_names,
    fresh_name,
    loops_in_scope,
    replace_at,
    var_names,
)
from ..analysis import expr_text
from ..errors import block_name, loop_name, schedule_error
from ..tree import buffer_names, find_block, find_loop, insert_beside, refresh_block

COMBINERS = ("add", "mul", "min", "max")


@dataclass(frozen=True)
class Reducer:
    """A recognised reduction: buffer[indices] = combine(buffer[indices], rhs), starting from init."""

    op: str
    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    init: PrimExpr | None  # None: the update of a decomposed reduction (its init is another block)
    rhs: PrimExpr

    def identity(self) -> PrimExpr:
        """What a fresh partial result starts from (see the module docstring)."""
        if self.op == "add":
            return const(0, self.buffer.dtype)
        if self.op == "mul":
            return const(1, self.buffer.dtype)
        if self.init is not None:
            return self.init
        return _extreme(self.buffer.dtype, largest=self.op == "min")

    def combine(self, a: PrimExpr, b: PrimExpr) -> PrimExpr:
        return Binary(self.op, a, b)


def _extreme(dtype, largest: bool) -> PrimExpr:
    """The identity of min (largest) or max (smallest) in `dtype`: +-inf for floats."""
    import numpy as np

    if dtype.is_float:
        return const(float("inf") if largest else float("-inf"), dtype)
    if dtype.is_bool:
        return const(largest, dtype)
    info = np.iinfo(dtype.numpy)
    return const(int(info.max if largest else info.min), dtype)


def _same_indices(a, b) -> bool:
    return len(a) == len(b) and all(same_expr(x, y) for x, y in zip(a, b))


def recognize(func: PrimFunc, block: Block, primitive: str, decomposed: bool = False) -> Reducer:
    """The reducer of a block with T.init (or, when `decomposed`, of an update block without one,
    as decompose_reduction leaves it), or a ScheduleError saying what does not fit."""
    rule = ("a reduction block is `with T.init(): C[...] = init` then `C[...] = C[...] op x` with op one of "
            "+, *, T.min, T.max and x not reading C")
    if decomposed:
        rule += " (or that update alone, as decompose_reduction leaves it)"
    if block.init is None and not decomposed:
        raise schedule_error(func, primitive, f"{block_name(block.name)} has no T.init, so it is not a reduction "
                             "tdsl can recognise", blocks=(block.name,), rule=rule)
    init, body = block.init, _without_let(block.body)
    if init is None and not isinstance(body, BufferStore):
        raise schedule_error(func, primitive, f"{block_name(block.name)} has no T.init and its body is not a single "
                             "store", blocks=(block.name,), rule=rule)
    if init is not None and not (isinstance(init, BufferStore) and isinstance(body, BufferStore)
                                 and init.buffer is body.buffer and _same_indices(init.indices, body.indices)):
        raise schedule_error(func, primitive, f"the init and the update of {block_name(block.name)} are not single "
                             "stores to the same element", blocks=(block.name,), rule=rule)
    assert isinstance(body, BufferStore)   # both cases above refused anything else
    buf, idx, value = body.buffer, body.indices, body.value

    def is_self(e) -> bool:
        return isinstance(e, BufferLoad) and e.buffer is buf and _same_indices(e.indices, idx)

    if not (isinstance(value, Binary) and value.op in COMBINERS and (is_self(value.a) or is_self(value.b))):
        raise schedule_error(func, primitive, f"{block_name(block.name)} updates {buf.name} with "
                             f"{expr_text(value)}, which is not a sum, product, min or max with "
                             f"{buf.name}[{', '.join(expr_text(i) for i in idx)}]", blocks=(block.name,), rule=rule)
    rhs = value.b if is_self(value.a) else value.a
    init_value = None if init is None else init.value
    if any(ld.buffer is buf for ld in collect(rhs, BufferLoad)) or \
            (init_value is not None and any(ld.buffer is buf for ld in collect(init_value, BufferLoad))):
        raise schedule_error(func, primitive, f"the reduced value of {block_name(block.name)} reads {buf.name} "
                             "itself", blocks=(block.name,), rule=rule)
    reduce_vars = {iv.var for iv in block.iter_vars if iv.kind == "R"}
    if (init_value is not None and free_vars(init_value) & reduce_vars) or \
            any(free_vars(i) & reduce_vars for i in idx):
        raise schedule_error(func, primitive, f"the init or the stored element of {block_name(block.name)} "
                             "depends on a reduction iterator", blocks=(block.name,), rule=rule)
    return Reducer(value.op, buf, tuple(idx), init_value, rhs)


def _without_let(body: Stmt) -> Stmt:
    """`v: T.let = e; C[idx] = v` (TVM's transformed_matmul_with_let) as the store `C[idx] = e`."""
    if isinstance(body, LetStmt) and isinstance(body.body, BufferStore) and body.body.value is body.var and \
            not any(body.var in free_vars(i) for i in body.body.indices):
        return BufferStore(body.body.buffer, body.value, body.body.indices)
    return body


def loop_roles(realize: BlockRealize, loops: list[For]) -> dict[Var, str]:
    """Per loop: "S" (feeds only spatial iterators), "R" (only reduction ones), "SR" (both), ""."""
    roles = {f.loop_var: "" for f in loops}
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        for v in free_vars(value):
            if v in roles and iv.kind not in roles[v]:
                roles[v] = "".join(sorted(roles[v] + iv.kind))
    return roles


def copy_loops(loops: list[For], keep, taken: set[str], serial: For | None = None) -> tuple[list[For], dict[Var, Var]]:
    """Fresh copies of the loops `keep` selects (outer to inner) and the renaming. A copied
    spatial loop keeps its kind (a GPU thread binding must stay bound); `serial` becomes serial."""
    out, vmap = [], {}
    for f in loops:
        if keep(f):
            v = Var(fresh_name(f.loop_var.name, taken), f.loop_var.dtype)
            vmap[f.loop_var] = v
            if f is serial:
                out.append(For(v, f.min, f.extent, "serial", SeqStmt(())))
            else:
                out.append(For(v, f.min, f.extent, f.kind, SeqStmt(()), f.thread_tag, f.annotations))
    return out, vmap


def wrap_loops(loops: list[For], body: Stmt) -> Stmt:
    for f in reversed(loops):
        body = dataclasses.replace(f, body=body)
    return body


def decompose_reduction(func: PrimFunc, block: str, loop_var: Var) -> tuple[PrimFunc, str]:
    """Move the T.init of a reduction into its own block `<name>_init`, placed right before `loop`."""
    realize, bpath = find_block(func, block, "decompose_reduction")
    b = realize.block
    if b.init is None:
        raise schedule_error(func, "decompose_reduction", f"{block_name(block)} has no T.init to decompose",
                             blocks=(block,), rule="decompose_reduction splits a reduction block with T.init",
                             fix="it may have been decomposed already (see sch.trace)")
    loop, _lpath = find_loop(func, loop_var, "decompose_reduction")
    scope_loops = loops_in_scope(bpath)
    if not any(f is loop for f in scope_loops):
        raise schedule_error(func, "decompose_reduction", f"{loop_name(loop_var)} is not a loop around "
                             f"{block_name(block)}", loops=(loop_var,), blocks=(block,),
                             rule="the init block is placed before one of the loops of the reduction",
                             fix="take the loop from sch.get_loops(block)")
    at = next(i for i, f in enumerate(scope_loops) if f is loop)
    chain = scope_loops[at:]
    outer_roles = loop_roles(realize, scope_loops[:at])
    above = [v for v, r in outer_roles.items() if "R" in r]
    if above:
        raise schedule_error(func, "decompose_reduction", f"{loop_name(above[0])}, around {loop_name(loop_var)}, "
                             f"drives a reduction iterator of {block_name(block)}, so an init placed before "
                             f"{loop_name(loop_var)} would run again in the middle of the reduction",
                             loops=(above[0], loop_var), blocks=(block,),
                             rule="decompose_reduction places the init before a loop that is outside every "
                                  "reduction loop of the block",
                             fix=f"decompose at {loop_name(above[0])} or a loop around it")
    roles = loop_roles(realize, chain)
    mixed = [v for v, r in roles.items() if r == "RS"]
    if mixed:
        raise schedule_error(func, "decompose_reduction", f"{loop_name(mixed[0])} drives both spatial and "
                             f"reduction iterators of {block_name(block)}", loops=(mixed[0],), blocks=(block,),
                             rule="the init block repeats the spatial loops below the chosen loop, so none of them "
                                  "may also drive a reduction iterator")
    written = {r.buffer for r in b.writes}
    # blocks nested in this one (the inner block of a blockize, the init nest it lifted) are part of it
    nested = {id(r) for r in all_realizes(realize)}
    others = [r.block.name for r in all_realizes(loop) if r is not realize and id(r) not in nested and
              {x.buffer for x in r.block.reads + r.block.writes} & written]
    if others:
        raise schedule_error(func, "decompose_reduction", f"{block_name(others[0])} under {loop_name(loop_var)} "
                             f"uses what {block_name(block)} initialises", loops=(loop_var,),
                             blocks=(block, others[0]),
                             rule="the init block runs before the whole loop, so no other block under it may see "
                                  "the reduction's buffer")
    skipped = {v for v, r in roles.items() if r != "S"}
    guards = _guards_below(func, block, realize, bpath, loop, chain)
    init_predicate = _init_predicate(func, block, realize, chain, skipped, loop_var, guards)
    taken = var_names(func)
    new_loops, vmap = copy_loops(chain, lambda f: roles[f.loop_var] == "S", taken)
    spatial = [(iv, v) for iv, v in zip(b.iter_vars, realize.iter_values) if iv.kind == "S"]
    ivmap = {iv.var: Var(fresh_name(iv.var.name, taken), iv.var.dtype) for iv, _ in spatial}
    init_block = Block(fresh_name(f"{block}_init", set(block_names(func)) | buffer_names(func)),
                       tuple(IterVar(ivmap[iv.var], iv.dom, "S") for iv, _ in spatial), (), (),
                       substitute(b.init, ivmap))
    init_realize = BlockRealize(tuple(substitute(v, vmap) for _, v in spatial),
                                substitute(init_predicate, vmap), refresh_block(init_block))
    update = refresh_block(dataclasses.replace(b, init=None))
    func2 = replace_at(func, bpath, realize, dataclasses.replace(realize, block=update))
    loop2, lpath2 = find_loop(func2, loop_var, "decompose_reduction")
    return insert_beside(func2, lpath2, loop2, wrap_loops(new_loops, init_realize), after=False), init_block.name


def _guards_below(func: PrimFunc, block: str, realize: BlockRealize, bpath: Path, loop: For,
                  chain: list[For]) -> list[PrimExpr]:
    """The conditions of the `if` statements between `loop` and the block (negated in an else
    branch): the init block must run only where they hold, as the original's init does."""
    from ...ir import Not
    from ...ir.tree import conditions_in_scope

    ifs = conditions_in_scope(bpath, realize, below=loop)
    conds = [node.condition if then else Not(node.condition) for node, then in ifs]
    loop_vars = {f.loop_var for f in chain}
    lets = {n.var for n in bpath[bpath.index(loop):] if isinstance(n, LetStmt)}
    for c in conds:
        if free_vars(c) & lets:
            raise schedule_error(func, "decompose_reduction", f"the condition `if {expr_text(c)}` around "
                                 f"{block_name(block)} uses a value bound below {loop_name(loop.loop_var)}",
                                 loops=(loop.loop_var,), blocks=(block,),
                                 rule="the init block placed before the loop repeats the condition, so it may "
                                      f"use only the loops ({', '.join(v.name for v in loop_vars)}) and outer values",
                                 fix="decompose at a loop below the binding")
    return [p for c in conds for p in conjuncts(c)]


def _init_predicate(func: PrimFunc, block: str, realize: BlockRealize, chain: list[For], skipped: set[Var],
                    loop_var: Var, guards: list[PrimExpr]) -> PrimExpr:
    """The init block's predicate: the block's and the conditions of the `if`s around it below
    the loop (`guards`), less the conjuncts on the reduction loops it drops. Those may go when
    they hold where the init runs in the original (the reduction loops at their minimum, which
    binds every reduction iterator to its domain's minimum: a split's tail guard
    `k_0 * 7 + k_1 < 128`), so the init still runs for every element."""
    from ...arith import prove
    from ...ir.stmt import TRUE
    from ...ir.tree import path_ranges

    parts = [c for c in conjuncts(realize.predicate) if not (isinstance(c, IntImm) and c.value == 1)]
    parts += guards
    if not parts:
        return realize.predicate
    dropped = [c for c in parts if free_vars(c) & skipped]
    if not dropped:
        return all_of(parts)
    _, bpath = find_block(func, block, "decompose_reduction")
    ranges = path_ranges(bpath)
    mins = {f.loop_var: f.min for f in chain if f.loop_var in skipped}
    starts = all(prove(substitute(v, mins).eq(iv.dom.min), ranges)
                 for iv, v in zip(realize.block.iter_vars, realize.iter_values) if iv.kind == "R")
    if not (starts and all(prove(substitute(c, mins), ranges) for c in dropped)):
        raise schedule_error(func, "decompose_reduction", f"the condition {expr_text(all_of(dropped))} "
                             f"of {block_name(block)} (its T.where or an `if` around it) uses a reduction loop below {loop_name(loop_var)} and does "
                             "not hold at the reduction's first iteration", loops=(loop_var,), blocks=(block,),
                             rule="the init block keeps only the spatial loops, so a condition on the others must "
                                  "hold where the init runs (as a split's tail guard does)",
                             fix="decompose at a loop below the reduction loops")
    kept = [c for c in parts if not free_vars(c) & skipped]
    return all_of(kept) if kept else TRUE


def function_vars(func: PrimFunc) -> set[Var]:
    out = {p for p in func.params if isinstance(p, Var)}
    for p in func.params:
        if isinstance(p, Buffer):
            for s in p.shape:
                out |= free_vars(s)
    return out


def conjuncts(pred: PrimExpr) -> list[PrimExpr]:
    from ...ir import Binary

    if isinstance(pred, Binary) and pred.op == "and":
        return conjuncts(pred.a) + conjuncts(pred.b)
    return [pred]


def all_of(parts: list[PrimExpr]) -> PrimExpr:
    from ...ir import Binary

    out = parts[0]
    for p in parts[1:]:
        out = Binary("and", out, p)
    return out
