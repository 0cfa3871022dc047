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
    IterVar,
    PrimExpr,
    PrimFunc,
    Range,
    SeqStmt,
    Stmt,
    Var,
    collect,
    const,
    free_vars,
    structural_equal,
    substitute,
)
from ...ir.tree import Path, all_realizes, child_realizes, fresh_name, loops_in_scope, replace_at, var_names
from ..analysis import expr_text
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
    return len(a) == len(b) and all(structural_equal(x, y) for x, y in zip(a, b))


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
    init, body = block.init, block.body
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
    if free_vars(realize.predicate) & skipped:
        raise schedule_error(func, "decompose_reduction", f"the predicate of {block_name(block)} uses a "
                             f"reduction loop below {loop_name(loop_var)}", loops=(loop_var,), blocks=(block,),
                             rule="the init block keeps only the spatial loops, so its predicate cannot use the "
                                  "others", fix="decompose at a loop below the reduction loops' split")
    taken = var_names(func)
    new_loops, vmap = _copy_loops(chain, lambda f: roles[f.loop_var] == "S", taken)
    spatial = [(iv, v) for iv, v in zip(b.iter_vars, realize.iter_values) if iv.kind == "S"]
    ivmap = {iv.var: Var(fresh_name(iv.var.name, taken), iv.var.dtype) for iv, _ in spatial}
    init_block = Block(fresh_name(f"{block}_init", set(_block_names(func)) | buffer_names(func)),
                       tuple(IterVar(ivmap[iv.var], iv.dom, "S") for iv, _ in spatial), (), (),
                       substitute(b.init, ivmap))
    init_realize = BlockRealize(tuple(substitute(v, vmap) for _, v in spatial),
                                substitute(realize.predicate, vmap), refresh_block(init_block))
    update = refresh_block(dataclasses.replace(b, init=None))
    func2 = replace_at(func, bpath, realize, dataclasses.replace(realize, block=update))
    loop2, lpath2 = find_loop(func2, loop_var, "decompose_reduction")
    return insert_beside(func2, lpath2, loop2, _wrap(new_loops, init_realize), after=False), init_block.name


def _block_names(func: PrimFunc) -> list[str]:
    return [r.block.name for r in all_realizes(func.body)]


# rfactor -------------------------------------------------------------------------------------

def _function_vars(func: PrimFunc) -> set[Var]:
    out = {p for p in func.params if isinstance(p, Var)}
    for p in func.params:
        if isinstance(p, Buffer):
            for s in p.shape:
                out |= free_vars(s)
    return out


def rfactor(func: PrimFunc, loop_var: Var, factor_axis: int) -> tuple[PrimFunc, str]:
    """Split a reduction over `loop` into partial results `<C>_rf` (one per iteration of `loop`,
    stored along `factor_axis`) and a write-back block that combines them into the output."""
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
    if child_realizes(realize):
        raise schedule_error(func, "rfactor", f"{block_name(name)} holds other blocks", blocks=(name,),
                             rule="rfactor applies to a leaf reduction block")
    red = recognize(func, b, "rfactor", decomposed=True)
    scope_loops = loops_in_scope(bpath)
    roles = _loop_roles(realize, scope_loops)
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
    reduce_loops = {f.loop_var for f in own if roles[f.loop_var] == "R"}
    if free_vars(realize.predicate) & reduce_loops:
        raise schedule_error(func, "rfactor", f"the predicate T.where({expr_text(realize.predicate)}) of "
                             f"{block_name(name)} uses a reduction loop", loops=(loop_var,), blocks=(name,),
                             rule="every partial result must be computed, so the reduction loops cannot be "
                                  "guarded", fix="split the reduction loop by a factor that divides it")
    if free_vars(loop.extent) - _function_vars(func) or free_vars(loop.min) - _function_vars(func):
        raise schedule_error(func, "rfactor", f"the extent of {loop_name(loop_var)} depends on other loops",
                             loops=(loop_var,), rule="the rfactor buffer has one slot per iteration of the loop")
    ndim = len(red.buffer.shape)
    if isinstance(factor_axis, bool) or not isinstance(factor_axis, int) or not -(ndim + 1) <= factor_axis <= ndim:
        raise schedule_error(func, "rfactor", f"factor_axis {factor_axis!r} is out of range for the "
                             f"{ndim}-d buffer {red.buffer.name}", loops=(loop_var,),
                             rule=f"factor_axis is a position in the rfactor buffer: -{ndim + 1} .. {ndim}")
    axis = factor_axis if factor_axis >= 0 else factor_axis + ndim + 1
    taken_names = set(_block_names(func)) | buffer_names(func)
    rf_name = fresh_name(f"{name}_rf", taken_names)
    rf_buf_name = rf_name if rf_name not in buffer_names(func) else fresh_name(rf_name, taken_names)
    shape = red.buffer.shape[:axis] + (loop.extent,) + red.buffer.shape[axis:]
    rf_buf = Buffer(rf_buf_name, tuple(shape), red.buffer.dtype)
    taken = var_names(func)

    # the rfactor block: the loop's share of the reduction becomes a spatial iterator
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
        if not placed_rf:
            new_ivs.append(IterVar(v_rf, Range(loop.min, loop.extent), "S"))
            new_vals.append(loop_var)
            placed_rf = True
        for f in own:
            if f.loop_var in free_vars(value) and f.loop_var not in made:
                r = Var(fresh_name(f"v{f.loop_var.name}", taken), f.loop_var.dtype)
                made[f.loop_var] = r
                new_ivs.append(IterVar(r, Range(f.min, f.extent), "R"))
                new_vals.append(f.loop_var)
        remap[iv.var] = substitute(value, made)
    slot = v_rf - loop.min if not (hasattr(loop.min, "value") and loop.min.value == 0) else v_rf
    rf_idx = red.indices[:axis] + (slot,) + red.indices[axis:]
    rf_load = BufferLoad(rf_buf, rf_idx)
    rhs = substitute(red.rhs, remap)
    if any(iv.kind == "R" for iv in new_ivs):
        rf_init, rf_value = BufferStore(rf_buf, red.identity(), rf_idx), red.combine(rf_load, rhs)
    else:  # one term per partial result: no reduction left in the rfactor block
        plain = red.op in ("add", "mul") or red.init is None  # the identity is exact: leave it out
        rf_init, rf_value = None, rhs if plain else red.combine(red.identity(), rhs)
    rf_block = dataclasses.replace(b, name=rf_name, iter_vars=tuple(new_ivs), init=rf_init,
                                   body=BufferStore(rf_buf, rf_value, rf_idx))
    rf_realize = BlockRealize(tuple(new_vals), realize.predicate, refresh_block(rf_block))

    # the write-back block keeps the name (and the handle) of the original block
    new_loops, lmap = _copy_loops(own, lambda f: roles[f.loop_var] == "S" or f is loop, taken, serial=loop)
    spatial = [(iv, v) for iv, v in zip(b.iter_vars, realize.iter_values) if iv.kind == "S"]
    smap = {iv.var: Var(fresh_name(iv.var.name, taken), iv.var.dtype) for iv, _ in spatial}
    v_wb = Var(fresh_name(f"v{loop_var.name}", taken), loop_var.dtype)
    wb_idx = tuple(substitute(i, smap) for i in red.indices)
    wb_slot = v_wb - loop.min if slot is not v_rf else v_wb
    wb_rf_idx = wb_idx[:axis] + (wb_slot,) + wb_idx[axis:]
    wb_block = Block(name, tuple(IterVar(smap[iv.var], iv.dom, "S") for iv, _ in spatial) +
                     (IterVar(v_wb, Range(loop.min, loop.extent), "R"),), (), (),
                     BufferStore(red.buffer, red.combine(BufferLoad(red.buffer, wb_idx),
                                                         BufferLoad(rf_buf, wb_rf_idx)), wb_idx),
                     init=None if red.init is None else BufferStore(red.buffer, substitute(red.init, smap), wb_idx))
    wb_realize = BlockRealize(tuple(substitute(v, lmap) for _, v in spatial) + (lmap[loop_var],),
                              substitute(realize.predicate, lmap), refresh_block(wb_block))

    func2 = replace_at(func, bpath, realize, rf_realize)
    top, tpath = _own_top(func2, rf_name, own)
    func3 = insert_beside(func2, tpath, top, _wrap(new_loops, wb_realize), after=True)
    scope_realize = scope_of(find_block(func3, rf_name, "rfactor")[1])[0]
    return add_alloc(func3, scope_realize, rf_buf), rf_name


def _own_top(func: PrimFunc, block: str, own: list[For]) -> tuple[Stmt, Path]:
    """The outermost of the block's own loops (or its realize), with its path."""
    realize, path = find_block(func, block, "rfactor")
    if not own:
        return realize, path
    idx = next(i for i, p in enumerate(path) if isinstance(p, For) and p.loop_var is own[0].loop_var)
    return path[idx], path[:idx]
