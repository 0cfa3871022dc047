"""reindex_cache_read / reindex_cache_write: a cache laid out by the block's own iterators
(TVM's primitives of those names).

`reindex_cache_read(block, buffer, scope, lambda vi, vj: (vj, vi // 2, vi % 2))` makes a cache
whose element `index_map(v)` holds what the block reads at iteration `v`: the copy block repeats
the block's iterators that the access uses (as spatial iterators, bound as the block binds them,
over copies of the loops that feed them) and stores `cache[index_map(v)] = buffer[indices(v)]`;
the block then reads `cache[index_map(v)]`. reindex_cache_write is the mirror image: the block
writes the cache, and a copy block after its loop nest stores `buffer[indices(v)] =
cache[index_map(v)]`. The copies sit where cache_read / cache_write put theirs (cache.py).

As in TVM the access must be a single point (one element per iteration) and the map must use
exactly the iterators the original indices use. tdsl also requires the map to be one-to-one on
those iterators (else two elements would share a cache slot; TVM does not check).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ...ir import (
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferRegion,
    BufferStore,
    Call,
    For,
    IntImm,
    IRMutator,
    IterVar,
    PrimExpr,
    PrimFunc,
    Stmt,
    Var,
    collect,
    free_vars,
    same_expr,
    substitute,
)
from ...ir.tree import block_names, child_realizes, fresh_name, replace_at, var_names
from ..analysis import expr_text, refuse_conditions
from ..errors import block_name, schedule_error
from ..tree import add_alloc, buffer_names, find_block, insert_beside, refresh_block, scope_of
from .cache import (
    check_scope,
    find_path_to,
    hoist_copy_point,
    located,
    own_nest,
    refresh_scope_regions,
    resolve_buffer,
)
from .layout import call_index_map, check_one_to_one, new_layout_shape


class _Reaccess(IRMutator):
    """Loads (and, for a write cache, stores) of `old` become accesses of `new` at `indices`."""

    def __init__(self, old: Buffer, new: Buffer, indices: tuple[PrimExpr, ...], stores: bool):
        self.old, self.new, self.indices, self.stores = old, new, indices, stores

    def visit_BufferLoad(self, node: BufferLoad):
        node = self.generic_visit(node)
        return BufferLoad(self.new, self.indices) if node.buffer is self.old else node

    def visit_BufferStore(self, node: BufferStore):
        node = self.generic_visit(node)
        if self.stores and node.buffer is self.old:
            return BufferStore(self.new, node.value, self.indices)
        return node


def reindex_cache_read(func: PrimFunc, block: str, read_buffer_index, storage_scope: str,
                       index_map: Callable) -> tuple[PrimFunc, str]:
    """Read a buffer through a `storage_scope` cache indexed by index_map(block iterators)."""
    return _reindex_cache(func, block, read_buffer_index, storage_scope, index_map, "read")


def reindex_cache_write(func: PrimFunc, block: str, write_buffer_index, storage_scope: str,
                        index_map: Callable) -> tuple[PrimFunc, str]:
    """Write a buffer through a `storage_scope` cache indexed by index_map(block iterators)."""
    return _reindex_cache(func, block, write_buffer_index, storage_scope, index_map, "write")


def _reindex_cache(func: PrimFunc, block: str, buffer, scope: str, index_map: Callable,
                   which: str) -> tuple[PrimFunc, str]:
    primitive = f"reindex_cache_{which}"
    realize, path = find_block(func, block, primitive)
    b = realize.block
    buf = resolve_buffer(func, b, buffer, primitive, which)
    scope = check_scope(func, primitive, scope)
    if child_realizes(realize):
        raise schedule_error(func, primitive, f"{block_name(block)} holds other blocks", blocks=(block,),
                             rule=f"{primitive} applies to a block without nested blocks")
    if which == "read" and any(r.buffer is buf for r in b.writes):
        raise schedule_error(func, primitive, f"{block_name(block)} also writes {buf.name}, so a read cache would "
                             "hide its own updates from it", blocks=(block,),
                             rule="reindex_cache_read needs a block that only reads the buffer",
                             fix="use sch.reindex_cache_write for a buffer the block updates")
    if which == "write" and any(r.buffer is buf for r in b.reads) and b.init is None:
        raise schedule_error(func, primitive, f"{block_name(block)} reads {buf.name} before writing it and has no "
                             "T.init, so a fresh cache would start from garbage", blocks=(block,),
                             rule="reindex_cache_write needs a block whose result does not depend on the old "
                                  "contents of the buffer (a plain store, or a reduction with T.init)")
    if which == "read" and _guarded_read(b, buf):
        raise schedule_error(func, primitive, f"{block_name(block)} reads {buf.name} under a "
                             "T.if_then_else guard; the copy would read it unguarded (outside its shape, say, "
                             "where the guard is false)", blocks=(block,),
                             rule="reindex_cache_read copies every element the block's access names",
                             fix="write the guarded value as a block of its own (a padded copy) and cache that")
    region = next(r for r in (b.reads if which == "read" else b.writes) if r.buffer is buf)
    old = _single_point(func, primitive, block, b, buf, region, which)
    params, outputs = call_index_map(func, primitive, block, index_map, [iv.var.dtype for iv in b.iter_vars],
                                     f"{block_name(block)} has {len(b.iter_vars)} iterators",
                                     "one index per iterator of the block")
    to_iters: dict[Var, PrimExpr] = dict(zip(params, (iv.var for iv in b.iter_vars)))
    new = tuple(substitute(o, to_iters) for o in outputs)
    used_old = set().union(*(free_vars(i) for i in old)) if old else set()
    used_new = set().union(*(free_vars(i) for i in new)) if new else set()
    for iv in b.iter_vars:
        if (iv.var in used_old) != (iv.var in used_new):
            where = "the original indices" if iv.var in used_old else "the index map"
            other = "the index map" if iv.var in used_old else "the original indices"
            raise schedule_error(func, primitive, f"iterator {iv.var.name} of {block_name(block)} appears in "
                                 f"{where} but not in {other}: {buf.name}[{_text(old)}] vs "
                                 f"({_text(new)})", blocks=(block,),
                                 rule="the index map must use exactly the iterators the original access uses")
    used = [(p, iv) for p, iv in zip(params, b.iter_vars) if iv.var in used_old]
    if any(not (isinstance(iv.dom.min, IntImm) and iv.dom.min.value == 0) for _, iv in used):
        raise schedule_error(func, primitive, f"an iterator of {block_name(block)} that the access uses does not "
                             "start at 0", blocks=(block,), rule="the cache is laid out over the iterators' domains")
    box = Buffer(f"the iterators ({', '.join(iv.var.name for _, iv in used)}) of {block_name(block)}",
                 tuple(iv.dom.extent for _, iv in used), buf.dtype)
    used_params = [p for p, _ in used]
    shape = new_layout_shape(func, block, box, used_params, outputs, primitive)
    check_one_to_one(func, block, box, used_params, outputs, shape, primitive)

    if which == "write":
        refuse_conditions(func, primitive, block, path)
    if which == "read":
        def conflicts(o) -> bool:
            return any(x.buffer is buf for x in o.writes)
    else:
        def conflicts(o) -> bool:
            return any(x.buffer is buf for x in o.reads + o.writes)
    own, top, tpath = hoist_copy_point(realize, *own_nest(realize, path), conflicts)
    name = fresh_name(f"{buf.name}_{scope.replace('.', '_')}", buffer_names(func) | set(block_names(func)))
    cache = Buffer(name, shape, buf.dtype, scope=scope)
    copy = _copy_stage(func, realize, own, [iv for _, iv in used], name, buf, cache, old, new, which)
    new_block = refresh_block(dataclasses.replace(
        b, body=_Reaccess(buf, cache, new, which == "write").visit(b.body),
        init=None if b.init is None else _Reaccess(buf, cache, new, which == "write").visit(b.init)))
    new_realize = dataclasses.replace(realize, block=new_block)
    func2 = replace_at(func, path, realize, new_realize)
    top2 = new_realize if top is realize else find_path_to(func2, new_realize, top)  # type: ignore[arg-type]
    _, tpath2 = located(func2, top2)
    func3 = insert_beside(func2, tpath2, top2, copy, after=which == "write")
    func4 = add_alloc(func3, scope_of(path)[0] if scope_of(path)[0] is not func.body else None, cache)
    return refresh_scope_regions(func4, {buf, cache}), name


def _guarded_read(b, buf: Buffer) -> bool:
    """Whether a load of `buf` in block `b` sits in a branch of T.if_then_else."""
    stmts = [b.body] + ([b.init] if b.init is not None else [])
    for s in stmts:
        for call in collect(s, Call):
            if call.op == "if_then_else" and any(x.buffer is buf for a in call.args[1:]
                                                 for x in collect(a, BufferLoad)):
                return True
    return False


def _text(indices) -> str:
    return ", ".join(expr_text(i) for i in indices)


def _single_point(func: PrimFunc, primitive: str, block: str, b, buf: Buffer, region: BufferRegion,
                  which: str) -> tuple[PrimExpr, ...]:
    """The indices of the one element per iteration that the block accesses in `buf`."""
    if not all(isinstance(r.extent, IntImm) and r.extent.value == 1 for r in region.region):
        raise schedule_error(func, primitive, f"{block_name(block)} {'reads' if which == 'read' else 'writes'} "
                             f"a region of {buf.name} ({_region_text(region)}), not a single element",
                             blocks=(block,), rule=f"{primitive} needs an access of one element per iteration")
    old = tuple(r.min for r in region.region)
    stmts = [b.body] + ([b.init] if b.init is not None else [])
    accesses = [x for s in stmts for kind in (BufferLoad, BufferStore) for x in collect(s, kind) if x.buffer is buf]
    if any(not all(same_expr(a, o) for a, o in zip(x.indices, old)) for x in accesses):
        raise schedule_error(func, primitive, f"{block_name(block)} accesses {buf.name} at more than one element",
                             blocks=(block,), rule=f"{primitive} needs an access of one element per iteration")
    return old


def _region_text(region: BufferRegion) -> str:
    return ", ".join(f"{expr_text(r.min)}:{expr_text(r.min + r.extent)}" for r in region.region)


def _copy_stage(func: PrimFunc, realize: BlockRealize, own: list[For], used: list[IterVar], name: str,
                buf: Buffer, cache: Buffer, old, new, which: str) -> Stmt:
    """The copy block: the used iterators (spatial), bound as the block binds them, over fresh copies
    of the block's own loops that feed them (or its predicate)."""
    b = realize.block
    bound = {iv.var: v for iv, v in zip(b.iter_vars, realize.iter_values)}
    feeding = set().union(*(free_vars(bound[iv.var]) for iv in used)) if used else set()
    feeding |= free_vars(realize.predicate)
    taken = var_names(func)
    kept = [f for f in own if f.loop_var in feeding]
    new_loop = {f.loop_var: Var(fresh_name(f.loop_var.name, taken), f.loop_var.dtype) for f in kept}
    lmap: dict[Var, PrimExpr] = dict(new_loop)
    fresh = {iv.var: Var(fresh_name(iv.var.name, taken), iv.var.dtype) for iv in used}
    ivmap: dict[Var, PrimExpr] = dict(fresh)
    src, dst = (buf, cache) if which == "read" else (cache, buf)
    src_idx, dst_idx = (old, new) if which == "read" else (new, old)
    body = BufferStore(dst, BufferLoad(src, tuple(substitute(i, ivmap) for i in src_idx)),
                       tuple(substitute(i, ivmap) for i in dst_idx))
    copy = refresh_block(dataclasses.replace(
        b, name=name, iter_vars=tuple(IterVar(fresh[iv.var], iv.dom, "S") for iv in used), reads=(), writes=(),
        body=body, init=None, alloc_buffers=(), annotations=()))
    stmt: Stmt = BlockRealize(tuple(substitute(bound[iv.var], lmap) for iv in used),
                              substitute(realize.predicate, lmap), copy)
    for f in reversed(kept):
        stmt = For(new_loop[f.loop_var], f.min, f.extent, "serial", stmt)
    return stmt



