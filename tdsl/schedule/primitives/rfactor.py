"""rfactor: factor a reduction loop out into partial results (an rfactor block writing a new
buffer with the loop as one more dimension) and a write-back block that combines them. The rules
that keep the meaning (`_rfactor_checks`), the rfactor and write-back blocks, and the argmax /
argmin form (two rfactor buffers, combined in the factored loop's order, `arg_rfactor`).
The reductions themselves are recognised by `reduction.recognize` and `arg_reduction.recognize_arg`.
"""
from __future__ import annotations

import dataclasses
import math
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
    FloatImm,
    For,
    IntImm,
    IterVar,
    PrimExpr,
    PrimFunc,
    Range,
    SeqStmt,
    Stmt,
    Var,
    binary,
    free_vars,
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
from ..analysis.boxes import int_values
from ..errors import block_name, loop_name, schedule_error
from ..tree import add_alloc, buffer_names, find_block, find_loop, insert_beside, refresh_block, scope_of
from .arg_reduction import ArgReducer, looks_multi, recognize_arg
from .reduction import Reducer, all_of, conjuncts, copy_loops, function_vars, loop_roles, recognize, wrap_loops


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
    func3 = insert_beside(func2, tpath, top, wrap_loops(new_loops, wb_realize), after=True)
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
    red = recognize_arg(func, b) if looks_multi(b) else recognize(func, b, "rfactor", decomposed=True)
    scope_loops = loops_in_scope(bpath)
    roles = loop_roles(realize, scope_loops)
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
    dropped = [f.loop_var for f in own if roles[f.loop_var] == "" and f.loop_var in free_vars(wb_predicate)]
    if dropped:   # the write-back keeps the spatial loops only: its predicate could not name this one
        raise schedule_error(func, "rfactor", f"the predicate T.where({expr_text(realize.predicate)}) of "
                             f"{block_name(name)} uses {loop_name(dropped[0])}, which drives no iterator of the block",
                             loops=(dropped[0],), blocks=(name,),
                             rule="the write-back block is built over the spatial loops, so its guard may only use "
                                  "those and the reduction loops",
                             fix="split by factors that divide the loop (no guard), or fuse the unit loops first")
    if free_vars(loop.extent) - function_vars(func) or free_vars(loop.min) - function_vars(func):
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
    return _RfactorPlan(loop, realize, bpath, red, own, roles, axis, wb_predicate, wb_guard)  # type: ignore[arg-type]


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

    sizes, mins = int_values(f.extent for f in reduce_loops), int_values(f.min for f in reduce_loops)
    if sizes is None or mins is None:
        return None
    if int(np.prod(sizes, dtype=np.int64)) > _ENUMERATE_LIMIT or not all(s > 0 for s in sizes):
        return None
    axes: list = [np.arange(lo, lo + n, dtype=np.int64) for lo, n in zip(mins, sizes)]
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
    made: dict[Var, PrimExpr] = {loop_var: v_rf}
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
    new_loops, lmap = copy_loops(plan.own, lambda f: plan.roles[f.loop_var] == "S" or f is loop, taken,
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
        guard_vars = free_vars(realize.predicate) - reduce_loops - function_vars(func)
        if not _tail_guard(realize.predicate, others) or any(
                free_vars(c) & reduce_loops and free_vars(c) & guard_vars for c in conjuncts(realize.predicate)):
            raise schedule_error(func, "rfactor", f"the predicate T.where({expr_text(realize.predicate)}) of "
                                 f"{block_name(name)} uses a reduction loop in a way that is not the tail guard of a "
                                 "split", loops=(loop_var,), blocks=(name,),
                                 rule="a guard on the reduction loops must be a conjunction of `affine < bound` with "
                                      "non-negative coefficients (what split makes), so that every slot used is "
                                      "initialised", fix="split the reduction loop by a factor that divides it")
        from ...arith import simplify

        parts = conjuncts(realize.predicate)
        guard = [c for c in parts if free_vars(c) & reduce_loops]
        keep = [c for c in parts if not free_vars(c) & reduce_loops]
        from ...ir.stmt import TRUE

        wb_predicate = all_of(keep) if keep else TRUE
        wb_guard = simplify(substitute(all_of(guard), {f.loop_var: f.min for f in own if f.loop_var in others}))
    return wb_predicate, wb_guard


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


def arg_rfactor(func: PrimFunc, plan, rf_name: str) -> tuple[PrimFunc, str]:
    """rfactor of an argmax/argmin: two rfactor buffers, and a write-back in the factored loop's order."""
    red: ArgReducer = plan.red
    loop, realize, axis = plan.loop, plan.realize, plan.axis
    name = realize.block.name
    reduce_loops = [f for f in plan.own if plan.roles[f.loop_var] == "R"]
    if reduce_loops[0] is not loop:
        raise schedule_error(func, "rfactor", f"{loop_name(loop.loop_var)} is not the outermost reduction loop of "
                             f"{block_name(name)} ({loop_name(reduce_loops[0].loop_var)} is): the partial results "
                             "of an argmax/argmin would be combined in another order, and on a tie the index kept "
                             "would change", loops=(loop.loop_var,), blocks=(name,),
                             rule="rfactor of an argmax/argmin factors its outermost reduction loop",
                             fix=f"rfactor {loop_name(reduce_loops[0].loop_var)}, or reorder the loops first")
    if plan.wb_guard is not None:
        raise schedule_error(func, "rfactor", f"{block_name(name)} is an argmax/argmin with a split's tail guard",
                             loops=(loop.loop_var,), blocks=(name,),
                             rule="rfactor of an argmax/argmin needs reduction loops that divide evenly")
    taken_names = buffer_names(func) | set(block_names(func))
    bufs = (red.index_buffer, red.value_buffer)
    rf_i, rf_v = (Buffer(fresh_name(f"{b.name}_rf", taken_names),
                         tuple(b.shape[:axis]) + (loop.extent,) + tuple(b.shape[axis:]), b.dtype) for b in bufs)
    rf_bufs = (rf_i, rf_v)
    taken = var_names(func)
    # the rfactor block
    v_rf, new_ivs, new_vals, remap = rf_iterators(plan, taken)
    rf_idx = red.indices[:axis] + (_slot(v_rf, loop),) + red.indices[axis:]
    cand = (substitute(red.rhs_index, remap), substitute(red.rhs_value, remap))
    if any(iv.kind == "R" for iv in new_ivs):
        if red.op in ("gt", "lt"):  # the partial results start from the init
            _refuse_strict_init(func, red, name, loop)
        rf_init: Stmt | None = red.init_stmt(rf_bufs, rf_idx, {})
        rf_body = red.update_stmt(rf_bufs, rf_idx, cand, (f"{red.names[0]}_rf", f"{red.names[1]}_rf"),
                                  taken)
    else:  # one candidate per partial result: combine(init, combine(init, x)) == combine(init, x)
        rf_init = None
        rf_body = SeqStmt(tuple(BufferStore(b, c, rf_idx) for b, c in zip(rf_bufs, cand)))
    rf_block = dataclasses.replace(realize.block, name=rf_name, iter_vars=tuple(new_ivs), init=rf_init, body=rf_body)
    rf_realize = BlockRealize(tuple(new_vals), realize.predicate, refresh_block(rf_block))
    # the write-back block
    new_loops, lmap, spatial, smap, v_wb = write_back_iterators(plan, taken)
    wb_idx = tuple(substitute(i, smap) for i in red.indices)
    wb_rf_idx = wb_idx[:axis] + (_slot(v_wb, loop),) + wb_idx[axis:]
    wb_cand = (BufferLoad(rf_bufs[0], wb_rf_idx), BufferLoad(rf_bufs[1], wb_rf_idx))
    wb_block = Block(name, (IterVar(v_wb, Range(loop.min, loop.extent), "R"),) +
                     tuple(IterVar(smap[iv.var], iv.dom, "S") for iv, _ in spatial), (), (),
                     red.update_stmt(bufs, wb_idx, wb_cand, red.names, taken),
                     init=red.init_stmt(bufs, wb_idx, smap))
    wb_realize = BlockRealize((lmap[loop.loop_var],) + tuple(substitute(v, lmap) for _, v in spatial),
                              substitute(plan.wb_predicate, lmap), refresh_block(wb_block))
    func2 = replace_at(func, plan.bpath, realize, rf_realize)
    top, tpath = _own_top(func2, rf_name, plan.own)
    func3 = insert_beside(func2, tpath, top, wrap_loops(new_loops, wb_realize), after=True)
    scope_realize = scope_of(find_block(func3, rf_name, "rfactor")[1])[0]
    for b in rf_bufs:
        func3 = add_alloc(func3, scope_realize, b)
        scope_realize = scope_of(find_block(func3, rf_name, "rfactor")[1])[0]
    return func3, rf_name


def _refuse_strict_init(func: PrimFunc, red: ArgReducer, name: str, loop) -> None:
    """A strict comparison folds partial results exactly only when no value lies beyond the init."""
    import numpy as np

    dt, init, lowest = red.value_buffer.dtype, red.init_value, red.op == "gt"
    if isinstance(init, FloatImm):
        exact = init.value == (-math.inf if lowest else math.inf)
    elif isinstance(init, IntImm) and dt.is_integer:
        info = np.iinfo(dt.numpy)
        exact = init.value == (info.min if lowest else info.max)
    else:
        exact = False
    if not exact:
        which, limit = ("argmax", "lowest") if lowest else ("argmin", "highest")
        extreme = "-inf" if lowest else "inf"
        raise schedule_error(func, "rfactor", f"{block_name(name)} is an {which} with "
                             f"{'>' if lowest else '<'}: ties take the new index, so a partial result still "
                             f"at the init ({red.value_buffer.name} = {expr_text(init)}) would replace an "
                             "earlier tie with the init's index", loops=(loop.loop_var,), blocks=(name,),
                             rule=f"rfactor of an {which} with a strict comparison needs the init to be the "
                                  f"dtype's {limit} value (no value beyond it)",
                             fix=f"compare with {'>= instead of >' if lowest else '<= instead of <'} (a tie keeps "
                                 f"the first index), or init {red.value_buffer.name} with "
                                 f"{'T.min_value' if lowest else 'T.max_value'} of an integer dtype or "
                                 f'T.float32("{extreme}")')
