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

from ...arith import linear_form
from ...ir import (
    Binary,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    For,
    IntImm,
    IterVar,
    LetStmt,
    PrimExpr,
    PrimFunc,
    Range,
    SeqStmt,
    Stmt,
    Var,
    binary,
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
    child_realizes,
    fresh_name,
    loops_in_scope,
    replace_at,
    var_names,
)
from ..analysis import expr_text, is_quasi_affine, refuse_conditions
from ..errors import block_name, loop_name, schedule_error
from ..tree import add_alloc, buffer_names, find_block, find_loop, insert_beside, refresh_block, scope_of

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


# shared ---------------------------------------------------------------------------------------

def _loop_roles(realize: BlockRealize, loops: list[For]) -> dict[Var, str]:
    """Per loop: "S" (feeds only spatial iterators), "R" (only reduction ones), "SR" (both), ""."""
    roles = {f.loop_var: "" for f in loops}
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        for v in free_vars(value):
            if v in roles and iv.kind not in roles[v]:
                roles[v] = "".join(sorted(roles[v] + iv.kind))
    return roles


def _copy_loops(loops: list[For], keep, taken: set[str], serial: For | None = None) -> tuple[list[For], dict[Var, Var]]:
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


def _wrap(loops: list[For], body: Stmt) -> Stmt:
    for f in reversed(loops):
        body = dataclasses.replace(f, body=body)
    return body


# decompose_reduction -------------------------------------------------------------------------

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
    outer_roles = _loop_roles(realize, scope_loops[:at])
    above = [v for v, r in outer_roles.items() if "R" in r]
    if above:
        raise schedule_error(func, "decompose_reduction", f"{loop_name(above[0])}, around {loop_name(loop_var)}, "
                             f"drives a reduction iterator of {block_name(block)}, so an init placed before "
                             f"{loop_name(loop_var)} would run again in the middle of the reduction",
                             loops=(above[0], loop_var), blocks=(block,),
                             rule="decompose_reduction places the init before a loop that is outside every "
                                  "reduction loop of the block",
                             fix=f"decompose at {loop_name(above[0])} or a loop around it")
    roles = _loop_roles(realize, chain)
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
    new_loops, vmap = _copy_loops(chain, lambda f: roles[f.loop_var] == "S", taken)
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
    return insert_beside(func2, lpath2, loop2, _wrap(new_loops, init_realize), after=False), init_block.name


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
    return [p for c in conds for p in _conjuncts(c)]


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

    parts = [c for c in _conjuncts(realize.predicate) if not (isinstance(c, IntImm) and c.value == 1)]
    parts += guards
    if not parts:
        return realize.predicate
    dropped = [c for c in parts if free_vars(c) & skipped]
    if not dropped:
        return _all_of(parts)
    _, bpath = find_block(func, block, "decompose_reduction")
    ranges = path_ranges(bpath)
    mins = {f.loop_var: f.min for f in chain if f.loop_var in skipped}
    starts = all(prove(substitute(v, mins).eq(iv.dom.min), ranges)
                 for iv, v in zip(realize.block.iter_vars, realize.iter_values) if iv.kind == "R")
    if not (starts and all(prove(substitute(c, mins), ranges) for c in dropped)):
        raise schedule_error(func, "decompose_reduction", f"the condition {expr_text(_all_of(dropped))} "
                             f"of {block_name(block)} (its T.where or an `if` around it) uses a reduction loop below {loop_name(loop_var)} and does "
                             "not hold at the reduction's first iteration", loops=(loop_var,), blocks=(block,),
                             rule="the init block keeps only the spatial loops, so a condition on the others must "
                                  "hold where the init runs (as a split's tail guard does)",
                             fix="decompose at a loop below the reduction loops")
    kept = [c for c in parts if not free_vars(c) & skipped]
    return _all_of(kept) if kept else TRUE


# rfactor -------------------------------------------------------------------------------------

def _function_vars(func: PrimFunc) -> set[Var]:
    out = {p for p in func.params if isinstance(p, Var)}
    for p in func.params:
        if isinstance(p, Buffer):
            for s in p.shape:
                out |= free_vars(s)
    return out


@dataclass
class _RfactorPlan:
    """What the checks of rfactor establish, for the two blocks it builds."""

    loop: For
    realize: BlockRealize
    bpath: Path
    red: Reducer  # or an arg_reduction.ArgReducer (argmax / argmin)
    own: list[For]  # the reduction block's own loops, outer to inner
    roles: dict[Var, str]
    axis: int  # factor_axis, made non-negative
    wb_predicate: PrimExpr  # the write-back block's predicate
    wb_guard: PrimExpr | None  # which partials the write-back adds (a non-dividing split's tail guard)


def rfactor(func: PrimFunc, loop_var: Var, factor_axis: int) -> tuple[PrimFunc, str]:
    """Split a reduction over `loop` into partial results `<C>_rf` (one per iteration of `loop`,
    stored along `factor_axis`) and a write-back block that combines them into the output.

    before::

        for i, k in T.grid(128, 128):
            with T.block("B"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    B[vi] = 0.0
                B[vi] = B[vi] + A[vi, vk]

    `sch.rfactor(k, 0)` after::

        for i, k in T.grid(128, 128):
            with T.block("B_rf"):
                vi, vk = T.axis.remap("SS", [i, k])
                B_rf[vk, vi] = A[vi, vk]
        for i, k in T.grid(128, 128):
            with T.block("B"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    B[vi] = 0.0
                B[vi] = B[vi] + B_rf[vk, vi]
    """
    plan = _rfactor_checks(func, loop_var, factor_axis)
    name = plan.realize.block.name
    taken_names = set(block_names(func)) | buffer_names(func)
    rf_name = fresh_name(f"{name}_rf", taken_names)
    from .arg_reduction import ArgReducer, arg_rfactor

    if isinstance(plan.red, ArgReducer):
        return arg_rfactor(func, plan, rf_name)
    rf_buf_name = rf_name if rf_name not in buffer_names(func) else fresh_name(rf_name, taken_names)
    red, loop, axis = plan.red, plan.loop, plan.axis
    shape = red.buffer.shape[:axis] + (loop.extent,) + red.buffer.shape[axis:]
    rf_buf = Buffer(rf_buf_name, tuple(shape), red.buffer.dtype)
    taken = var_names(func)
    rf_realize = _rfactor_block(plan, rf_name, rf_buf, taken)
    new_loops, wb_realize = _write_back_block(plan, rf_buf, taken)
    func2 = replace_at(func, plan.bpath, plan.realize, rf_realize)
    top, tpath = _own_top(func2, rf_name, plan.own)
    func3 = insert_beside(func2, tpath, top, _wrap(new_loops, wb_realize), after=True)
    scope_realize = scope_of(find_block(func3, rf_name, "rfactor")[1])[0]
    return add_alloc(func3, scope_realize, rf_buf), rf_name


def _rfactor_checks(func: PrimFunc, loop_var: Var, factor_axis: int) -> _RfactorPlan:
    """Every rule rfactor needs to preserve the meaning, or the ScheduleError of the first broken one."""
    loop, _lpath = find_loop(func, loop_var, "rfactor")
    inside = all_realizes(loop.body)
    if len(inside) != 1:
        names = ", ".join(f'"{r.block.name}"' for r in inside) or "none"
        raise schedule_error(func, "rfactor", f"{loop_name(loop_var)} holds {len(inside)} blocks ({names})",
                             loops=(loop_var,), rule="rfactor factors the loop of exactly one reduction block")
    realize = inside[0]
    b = realize.block
    name = b.name
    _, bpath = find_block(func, name, "rfactor")
    refuse_conditions(func, "rfactor", name, bpath)
    if child_realizes(realize):
        raise schedule_error(func, "rfactor", f"{block_name(name)} holds other blocks", blocks=(name,),
                             rule="rfactor applies to a leaf reduction block")
    from .arg_reduction import looks_multi, recognize_arg

    red = recognize_arg(func, b) if looks_multi(b) else recognize(func, b, "rfactor", decomposed=True)
    scope_loops = loops_in_scope(bpath)
    roles = _loop_roles(realize, scope_loops)
    own_loops = [f for f in scope_loops if [r.block for r in all_realizes(f)] == [b]]
    for f in own_loops:  # a unit loop of the block's own (a fused loop split by 1) reduces trivially
        if roles.get(f.loop_var, "") == "" and isinstance(f.extent, IntImm) and f.extent.value == 1:
            roles[f.loop_var] = "R"
    if roles.get(loop_var) != "R":
        what = {"S": "a spatial iterator", "RS": "both spatial and reduction iterators", "": "no iterator"}[
            roles.get(loop_var, "")]
        raise schedule_error(func, "rfactor", f"{loop_name(loop_var)} drives {what} of {block_name(name)}",
                             loops=(loop_var,), blocks=(name,),
                             rule="rfactor needs a loop that drives only reduction iterators",
                             fix="pick a loop bound to the reduction (split it first to factor part of it)")
    own_start = next(i for i, f in enumerate(scope_loops) if [r.block for r in all_realizes(f)] == [b])
    shared, own = scope_loops[:own_start], scope_loops[own_start:]
    bad = [f.loop_var for f in shared if "R" in roles[f.loop_var]] + \
          [f.loop_var for f in own if roles[f.loop_var] == "RS"]
    if bad:
        raise schedule_error(func, "rfactor", f"{loop_name(bad[0])} drives reduction iterators of "
                             f"{block_name(name)} but is shared with other blocks or also drives spatial ones",
                             loops=(bad[0],), blocks=(name,),
                             rule="rfactor rebuilds the reduction's own loops: the reduction loops must be the "
                                  "block's own and purely reducing")
    reduce_loops = [f for f in own if roles[f.loop_var] == "R"]
    wb_predicate, wb_guard = _split_guard(func, realize, own, {f.loop_var for f in reduce_loops}, loop_var, name)
    if free_vars(loop.extent) - _function_vars(func) or free_vars(loop.min) - _function_vars(func):
        raise schedule_error(func, "rfactor", f"the extent of {loop_name(loop_var)} depends on other loops",
                             loops=(loop_var,), rule="the rfactor buffer has one slot per iteration of the loop")
    if red.init is not None:
        _check_init_runs_once(func, realize, reduce_loops, loop_var)
    ndim = len(red.buffer.shape)
    if isinstance(factor_axis, bool) or not isinstance(factor_axis, int) or not -(ndim + 1) <= factor_axis <= ndim:
        raise schedule_error(func, "rfactor", f"factor_axis {factor_axis!r} is out of range for the "
                             f"{ndim}-d buffer {red.buffer.name}", loops=(loop_var,),
                             rule=f"factor_axis is a position in the rfactor buffer: -{ndim + 1} .. {ndim}")
    axis = factor_axis if factor_axis >= 0 else factor_axis + ndim + 1
    return _RfactorPlan(loop, realize, bpath, red, own, roles, axis, wb_predicate, wb_guard)


_ENUMERATE_LIMIT = 1 << 20


def _check_init_runs_once(func: PrimFunc, realize: BlockRealize, reduce_loops: list[For], culprit: Var) -> None:
    """The T.init of the block runs once per output element, on the first iteration of its
    reduction loops (where every reduction iterator is at the start of its domain), as rfactor's
    write-back does. A binding such as `vk = T.axis.reduce(128, k * k // 2)` is at 0 for k = 0 and
    k = 1, so the original program starts over at k = 1; splitting it into partials would not."""
    b = realize.block
    ivs = [(iv, v) for iv, v in zip(b.iter_vars, realize.iter_values) if iv.kind == "R"]
    loop_vars = {f.loop_var for f in reduce_loops}
    culprit_iv = next((iv for iv, v in ivs if not is_quasi_affine(v, loop_vars)), None)
    reason = None
    if culprit_iv is not None:
        value = {iv.var: v for iv, v in ivs}[culprit_iv.var]
        reason = f"binds its reduction iterator {culprit_iv.var.name} to {expr_text(value)}, which is not an " \
                 "affine function of the loops"
    else:
        verdict = _init_runs_once_linear(ivs, reduce_loops)
        if verdict is None:
            verdict = _init_runs_once_enumerated(ivs, reduce_loops)
        if verdict is None:
            reason = "binds its reduction iterators in a way tdsl cannot prove to start once per element"
        elif not verdict:
            reason = "starts its reduction (T.init) more than once per element, or not on the first iteration"
    if reason is not None:
        raise schedule_error(func, "rfactor", f"{block_name(b.name)} {reason}", loops=(culprit,),
                             blocks=(b.name,),
                             rule="rfactor needs the T.init of the block to run exactly once per output element, "
                                  "on the first iteration of its reduction loops (an affine, one-to-one binding "
                                  "of the reduction iterators)",
                             fix="bind the reduction iterators to the loops affinely, "
                                 "e.g. T.axis.reduce(128, ko * 4 + ki)")


def _init_runs_once_linear(ivs, reduce_loops: list[For]) -> bool | None:
    """True when every reduction iterator is `dom.min + sum(c * (loop - loop.min))` with every
    c > 0 and every reduction loop in some iterator: then all iterators are at their minimum
    exactly when all loops are. None when the bindings are not of that form."""
    from ...arith import prove, simplify

    loop_vars = [f.loop_var for f in reduce_loops]
    at_min = {f.loop_var: f.min for f in reduce_loops}
    used: set[Var] = set()
    for iv, value in ivs:
        form = linear_form(value, loop_vars)
        if form is None:
            return None
        coeffs, _rest = form
        if any(c < 0 for c in coeffs.values()):
            return None
        used |= {v for v, c in coeffs.items() if c > 0}
        start = simplify(substitute(value, at_min))
        if not prove(binary("eq", start, iv.dom.min)):
            return False
    return used == set(loop_vars) or None


def _init_runs_once_enumerated(ivs, reduce_loops: list[For]) -> bool | None:
    """Count, over every iteration of the reduction loops (constant extents, at most
    _ENUMERATE_LIMIT points), where all reduction iterators are at their minimum: once, first."""
    import numpy as np

    if not all(isinstance(f.extent, IntImm) and isinstance(f.min, IntImm) for f in reduce_loops):
        return None
    sizes = [f.extent.value for f in reduce_loops]
    if int(np.prod(sizes, dtype=np.int64)) > _ENUMERATE_LIMIT or not all(s > 0 for s in sizes):
        return None
    axes: list = [np.arange(f.min.value, f.min.value + f.extent.value, dtype=np.int64) for f in reduce_loops]
    grids = np.meshgrid(*axes, indexing="ij")
    env = {f.loop_var: g.ravel() for f, g in zip(reduce_loops, grids)}
    at_start = np.ones(int(np.prod(sizes, dtype=np.int64)), dtype=bool)
    for iv, value in ivs:
        got = _evaluate(value, env)
        lo = _evaluate(iv.dom.min, env)
        if got is None or lo is None:
            return None
        at_start &= got == lo
    return bool(at_start[0]) and int(at_start.sum()) == 1


def _evaluate(e: PrimExpr, env: dict):
    """`e` over numpy arrays of loop values (integer + - * // % min max only), or None."""
    import numpy as np

    if isinstance(e, IntImm):
        return np.int64(e.value)
    if isinstance(e, Var):
        return env.get(e)
    if isinstance(e, Binary):
        a, b = _evaluate(e.a, env), _evaluate(e.b, env)
        if a is None or b is None:
            return None
        ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum}
        if e.op in ops:
            return ops[e.op](a, b)
        if e.op in ("floordiv", "floormod"):
            if np.any(b == 0):
                return None
            return np.floor_divide(a, b) if e.op == "floordiv" else np.mod(a, b)
    return None


def _rfactor_block(plan: _RfactorPlan, rf_name: str, rf_buf: Buffer, taken: set[str]) -> BlockRealize:
    """The block computing the partial results: the loop's share of the reduction becomes a
    spatial iterator indexing `rf_buf` along the factor axis."""
    realize, red, axis = plan.realize, plan.red, plan.axis
    b = realize.block
    v_rf, new_ivs, new_vals, remap = rf_iterators(plan, taken)
    rf_idx = red.indices[:axis] + (_slot(v_rf, plan.loop),) + red.indices[axis:]
    rf_load = BufferLoad(rf_buf, rf_idx)
    rhs = substitute(red.rhs, remap)
    if any(iv.kind == "R" for iv in new_ivs):
        rf_init, rf_value = BufferStore(rf_buf, red.identity(), rf_idx), red.combine(rf_load, rhs)
    else:  # one term per partial result: no reduction left in the rfactor block
        plain = red.op in ("add", "mul") or red.init is None  # the identity is exact: leave it out
        rf_init, rf_value = None, rhs if plain else red.combine(red.identity(), rhs)
    rf_block = dataclasses.replace(b, name=rf_name, iter_vars=tuple(new_ivs), init=rf_init,
                                   body=BufferStore(rf_buf, rf_value, rf_idx))
    return BlockRealize(tuple(new_vals), realize.predicate, refresh_block(rf_block))


def rf_iterators(plan: _RfactorPlan, taken: set[str]) -> tuple[Var, list[IterVar], list[PrimExpr], dict]:
    """The rfactor block's iterators: (the factored one, all of them, their bindings, the map from
    the old reduction iterators to expressions of the new ones)."""
    realize, loop = plan.realize, plan.loop
    b, loop_var = realize.block, plan.loop.loop_var
    v_rf = Var(fresh_name(f"v{loop_var.name}", taken), loop_var.dtype)
    new_ivs: list[IterVar] = []
    new_vals: list[PrimExpr] = []
    remap: dict[Var, PrimExpr] = {}
    made: dict[Var, Var] = {loop_var: v_rf}
    placed_rf = False
    for iv, value in zip(b.iter_vars, realize.iter_values):
        if iv.kind == "S" or loop_var not in free_vars(value):
            new_ivs.append(iv)
            new_vals.append(value)
            continue
        if not placed_rf:  # the factored iterator comes first, as in TVM
            new_ivs.insert(0, IterVar(v_rf, Range(loop.min, loop.extent), "S"))
            new_vals.insert(0, loop_var)
            placed_rf = True
        for f in plan.own:
            if f.loop_var in free_vars(value) and f.loop_var not in made:
                r = Var(fresh_name(f"v{f.loop_var.name}", taken), f.loop_var.dtype)
                made[f.loop_var] = r
                new_ivs.append(IterVar(r, Range(f.min, f.extent), "R"))
                new_vals.append(f.loop_var)
        remap[iv.var] = substitute(value, made)
    if not placed_rf:  # a unit loop that drives no iterator: its one partial holds the whole reduction
        new_ivs.insert(0, IterVar(v_rf, Range(loop.min, loop.extent), "S"))
        new_vals.insert(0, loop_var)
    return v_rf, new_ivs, new_vals, remap


def _slot(v: Var, loop: For) -> PrimExpr:
    """The position of iteration `v` of `loop` along the factor axis."""
    return v if isinstance(loop.min, IntImm) and loop.min.value == 0 else v - loop.min


def _write_back_block(plan: _RfactorPlan, rf_buf: Buffer, taken: set[str]) -> tuple[list[For], BlockRealize]:
    """The block that folds the partial results into the output; it keeps the name (and the
    handle) of the original block. Returns its loops (the spatial ones and the factored one)."""
    realize, loop, red, axis = plan.realize, plan.loop, plan.red, plan.axis
    b, loop_var = realize.block, loop.loop_var
    new_loops, lmap, spatial, smap, v_wb = write_back_iterators(plan, taken)
    wb_idx = tuple(substitute(i, smap) for i in red.indices)
    wb_rf_idx = wb_idx[:axis] + (_slot(v_wb, loop),) + wb_idx[axis:]
    wb_value: PrimExpr = BufferLoad(rf_buf, wb_rf_idx)
    if plan.wb_guard is not None:
        wb_value = Call(red.buffer.dtype, "if_then_else", (substitute(plan.wb_guard, {loop_var: v_wb}), wb_value,
                                                           red.identity()))
    wb_block = Block(b.name, (IterVar(v_wb, Range(loop.min, loop.extent), "R"),) +
                     tuple(IterVar(smap[iv.var], iv.dom, "S") for iv, _ in spatial), (), (),
                     BufferStore(red.buffer, red.combine(BufferLoad(red.buffer, wb_idx), wb_value), wb_idx),
                     init=None if red.init is None else BufferStore(red.buffer, substitute(red.init, smap), wb_idx))
    wb_realize = BlockRealize((lmap[loop_var],) + tuple(substitute(v, lmap) for _, v in spatial),
                              substitute(plan.wb_predicate, lmap), refresh_block(wb_block))
    return new_loops, wb_realize


def write_back_iterators(plan: _RfactorPlan, taken: set[str]):
    """The write-back block's loops (the spatial ones and the factored one, fresh), the loop
    renaming, the spatial (iterator, binding) pairs, their renaming and the factored iterator."""
    realize, loop = plan.realize, plan.loop
    new_loops, lmap = _copy_loops(plan.own, lambda f: plan.roles[f.loop_var] == "S" or f is loop, taken,
                                  serial=loop)
    spatial = [(iv, v) for iv, v in zip(realize.block.iter_vars, realize.iter_values) if iv.kind == "S"]
    smap = {iv.var: Var(fresh_name(iv.var.name, taken), iv.var.dtype) for iv, _ in spatial}
    v_wb = Var(fresh_name(f"v{loop.loop_var.name}", taken), loop.loop_var.dtype)
    return new_loops, lmap, spatial, smap, v_wb


def _split_guard(func: PrimFunc, realize: BlockRealize, own: list[For], reduce_loops: set[Var], loop_var: Var,
                 name: str) -> tuple[PrimExpr, PrimExpr | None]:
    """(the write-back's predicate, the guard of the slot it adds, or None)."""
    wb_predicate, wb_guard = realize.predicate, None
    others = (free_vars(realize.predicate) & reduce_loops) - {loop_var}
    if others:
        # a non-dividing split's tail guard (k_0 * 32 + k_1 < m): a slot of the rfactor buffer is
        # used iff the guard holds at the first iteration of the other reduction loops (where its
        # init runs); the write-back adds only those slots (`if_then_else(guard, slot, identity)`),
        # so it needs a guard that only turns false later
        guard_vars = free_vars(realize.predicate) - reduce_loops - _function_vars(func)
        if not _tail_guard(realize.predicate, others) or any(
                free_vars(c) & reduce_loops and free_vars(c) & guard_vars for c in _conjuncts(realize.predicate)):
            raise schedule_error(func, "rfactor", f"the predicate T.where({expr_text(realize.predicate)}) of "
                                 f"{block_name(name)} uses a reduction loop in a way that is not the tail guard of a "
                                 "split", loops=(loop_var,), blocks=(name,),
                                 rule="a guard on the reduction loops must be a conjunction of `affine < bound` with "
                                      "non-negative coefficients (what split makes), so that every slot used is "
                                      "initialised", fix="split the reduction loop by a factor that divides it")
        from ...arith import simplify

        parts = _conjuncts(realize.predicate)
        guard = [c for c in parts if free_vars(c) & reduce_loops]
        keep = [c for c in parts if not free_vars(c) & reduce_loops]
        from ...ir.stmt import TRUE

        wb_predicate = _all_of(keep) if keep else TRUE
        wb_guard = simplify(substitute(_all_of(guard), {f.loop_var: f.min for f in own if f.loop_var in others}))
    return wb_predicate, wb_guard


def _conjuncts(pred: PrimExpr) -> list[PrimExpr]:
    from ...ir import Binary

    if isinstance(pred, Binary) and pred.op == "and":
        return _conjuncts(pred.a) + _conjuncts(pred.b)
    return [pred]


def _all_of(parts: list[PrimExpr]) -> PrimExpr:
    from ...ir import Binary

    out = parts[0]
    for p in parts[1:]:
        out = Binary("and", out, p)
    return out


def _tail_guard(pred: PrimExpr, loops: set[Var]) -> bool:
    """`pred` is a conjunction of `a < b` / `a <= b` where `a - b` is affine in `loops` with
    non-negative coefficients (so if it holds somewhere it holds at the loops' minimum)."""
    from ...arith import linear_form
    from ...ir import Binary

    if isinstance(pred, Binary) and pred.op == "and":
        return _tail_guard(pred.a, loops) and _tail_guard(pred.b, loops)
    if not free_vars(pred) & loops:
        return True
    if not (isinstance(pred, Binary) and pred.op in ("lt", "le")):
        return False
    form = linear_form(pred.a - pred.b, list(loops))
    return form is not None and all(c >= 0 for c in form[0].values())


def _own_top(func: PrimFunc, block: str, own: list[For]) -> tuple[Stmt, Path]:
    """The outermost of the block's own loops (or its realize), with its path."""
    realize, path = find_block(func, block, "rfactor")
    if not own:
        return realize, path
    idx = next(i for i, p in enumerate(path) if isinstance(p, For) and p.loop_var is own[0].loop_var)
    return path[idx], path[:idx]
