"""compute_inline and reverse_compute_inline: fold a block into its consumers / its producer.

compute_inline replaces each read of the block's buffer by the block's expression;
reverse_compute_inline rewrites the producer's store into the consumer's. Both need one store
of plain iterator indices, refuse a buffer whose address is taken, and keep every other block's
view of the data.
"""
from __future__ import annotations

import dataclasses
import math

from ...arith import eval_array, prove, relax, simplify
from ...errors import ScheduleError
from ...ir import (
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    IRMutator,
    PrimExpr,
    PrimFunc,
    Var,
    collect,
    free_vars,
    logical_and,
    same_expr,
    substitute,
)
from ...ir.tree import Path, all_realizes, child_realizes, loops_in_scope, path_ranges, replace_at
from ..analysis import expr_text, index_as
from ..analysis.boxes import CELL_LIMIT, int_values, names_of, reads_of, shape_of, writes_of
from ..analysis.instances import written_mask
from ..analysis.legality import check_movable
from ..analysis.read_inverse import read_inverse
from ..errors import block_name, schedule_error
from ..tree import alloc_site, drop_unused_allocs, find_block, is_true, refresh_block, refresh_touching
from .compute_at import without_realize


def _single_store(func: PrimFunc, primitive: str, realize: BlockRealize, role: str,
                  consumer: str | None = None) -> BufferStore:
    b = realize.block
    if consumer is not None:
        try:
            return _single_store(func, primitive, realize, role)
        except ScheduleError as err:
            raise ScheduleError(str(err).replace(f"{primitive}: ", f"{primitive}: cannot fold "
                                                 f"{block_name(consumer)} into its producer: ", 1)) from None
    if child_realizes(realize):
        raise schedule_error(func, primitive, f"{block_name(b.name)} holds other blocks", blocks=(b.name,),
                             rule=f"{primitive} inlines a leaf block")
    if b.init is not None or any(iv.kind == "R" for iv in b.iter_vars):
        raise schedule_error(func, primitive, f"{block_name(b.name)} is a reduction", blocks=(b.name,),
                             rule=f"only a block computing each element once (no T.init, no reduce iterators) "
                                  f"can be inlined as {role}",
                             fix="keep the reduction as a block (compute_at it instead)")
    if not isinstance(b.body, BufferStore):
        raise schedule_error(func, primitive, f"{block_name(b.name)} does more than one store "
                             f"(its body is a {type(b.body).__name__})", blocks=(b.name,),
                             rule=f"{primitive} needs a block whose body is a single store")
    return b.body


def _check_no_address(func: PrimFunc, primitive: str, buf: Buffer, moved: str) -> None:
    """No block takes the address of an element of `buf` (`T.address_of`, `access_ptr`): such an
    opaque access sees memory, not values, so the stores the primitive removes must stay."""
    for r in all_realizes(func.body):
        if r is func.body:
            continue
        calls = [c for c in collect(r.block.body, Call) if c.op == "address_of" and
                 isinstance(c.args[0], BufferLoad) and c.args[0].buffer is buf]
        if calls and not child_realizes(r):
            raise schedule_error(func, primitive, f"{block_name(r.block.name)} takes the address of {buf.name} "
                                 f"(T.address_of / access_ptr), an opaque access to its memory",
                                 blocks=(moved, r.block.name),
                                 rule=f"{primitive} removes {buf.name}, so every access to it must read an element",
                                 fix="keep both blocks (or cache the buffer and pass the cache's address)")


def _writers(func: PrimFunc, buf: Buffer) -> list[Block]:
    return [r.block for r in all_realizes(func.body) if r is not func.body and buf in writes_of(r.block)]


def _readers(func: PrimFunc, buf: Buffer) -> list[Block]:
    return [r.block for r in all_realizes(func.body) if r is not func.body and buf in reads_of(r.block)]


class _Inliner(IRMutator):
    def __init__(self, buf: Buffer, iters: list[Var], value: PrimExpr):
        self.buf, self.iters, self.value = buf, iters, value

    def visit_BufferLoad(self, node: BufferLoad):
        node = self.generic_visit(node)
        if node.buffer is not self.buf:
            return node
        return substitute(self.value, dict(zip(self.iters, node.indices)))


def _fold_trivial_init(func: PrimFunc, name: str, primitive: str) -> PrimFunc:
    """A block with a `T.init` but no reduce iterator runs its init before every update (TVM's
    `bmm` over spatial iterators only): `B[e] = 0; B[e] = B[e] + x` is the plain store
    `B[e] = 0 + x`. Other blocks come back unchanged."""
    realize, path = find_block(func, name, primitive)
    b = realize.block
    init, st = b.init, b.body
    if init is None or any(iv.kind == "R" for iv in b.iter_vars) or not isinstance(init, BufferStore) \
            or not isinstance(st, BufferStore) or init.buffer is not st.buffer:
        return func

    def at_element(indices) -> bool:
        return all(same_expr(a, c) for a, c in zip(indices, st.indices))

    loads = [ld for ld in collect(st.value, BufferLoad) if ld.buffer is st.buffer]
    if not at_element(init.indices) or not all(at_element(ld.indices) for ld in loads) \
            or any(ld.buffer is st.buffer for ld in collect(init.value, BufferLoad)):
        return func
    body = BufferStore(st.buffer, _replace_loads(st.value, st.buffer, init.value), st.indices)
    new_b = refresh_block(dataclasses.replace(b, init=None, body=body))
    return replace_at(func, path, realize, dataclasses.replace(realize, block=new_b))


def compute_inline(func: PrimFunc, block: str) -> tuple[PrimFunc, None]:
    """Replace every read of the block's output by the expression it stores; the block disappears."""
    func = _fold_trivial_init(func, block, "compute_inline")
    realize, _ = find_block(func, block, "compute_inline")
    b = realize.block
    store = _single_store(func, "compute_inline", realize, "a producer")
    buf = store.buffer
    idx = list(store.indices)
    iter_vars = [iv.var for iv in b.iter_vars]
    if not (all(isinstance(i, Var) and i in iter_vars for i in idx) and len(set(idx)) == len(idx)):
        raise schedule_error(func, "compute_inline", f"{block_name(block)} stores to {buf.name}"
                             f"[{', '.join(expr_text(i) for i in idx)}], not at distinct block iterators",
                             blocks=(block,), rule="compute_inline needs a store whose indices are distinct "
                             "iterators, so that each read names exactly one computed value")
    stray = (free_vars(store.value) & set(iter_vars)) - set(idx)
    if stray:
        raise schedule_error(func, "compute_inline", f"{block_name(block)} uses iterator "
                             f"{min(v.name for v in stray)}, which does not index {buf.name}",
                             blocks=(block,), rule="every iterator the stored value uses must index the store")
    if alloc_site(func, buf) is None:
        raise schedule_error(func, "compute_inline", f"{block_name(block)} writes {buf.name}, a parameter of "
                             f"{func.name}: its result must stay in memory", blocks=(block,),
                             rule="compute_inline removes the block, so it cannot produce a function output",
                             fix="keep the block, or fold it into its producer with reverse_compute_inline")
    others = [w.name for w in _writers(func, buf) if w is not b]
    if others:
        raise schedule_error(func, "compute_inline", f"{buf.name} is also written by {block_name(others[0])}",
                             blocks=(block, others[0]), rule="compute_inline needs the only writer of a buffer")
    if any(load.buffer is buf for load in collect(store.value, BufferLoad)):
        raise schedule_error(func, "compute_inline", f"{block_name(block)} reads {buf.name}, which it writes",
                             blocks=(block,), rule="an inlined value cannot depend on its own buffer")
    _check_no_address(func, "compute_inline", buf, block)
    _check_inputs_stable(func, realize, buf)
    new = without_realize(func, realize)
    new = func.with_body(_Inliner(buf, [i for i in idx if isinstance(i, Var)], store.value).visit(new.body))
    new = func.with_body(refresh_touching(new.body, {buf}))
    return drop_unused_allocs(new), None


def _check_inputs_stable(func: PrimFunc, realize: BlockRealize, buf: Buffer) -> None:
    """Between the producer and its last reader nothing overwrites what the producer reads, so
    the inlined expression reads the same values where it lands."""
    order = [r for r in all_realizes(func.body) if r is not func.body]
    at = order.index(realize)
    last = max((k for k, r in enumerate(order) if buf in reads_of(r.block)), default=at)
    inputs = reads_of(realize.block)
    for r in order[at + 1:last]:
        clash = writes_of(r.block) & inputs
        if clash:
            raise schedule_error(func, "compute_inline", f"{block_name(r.block.name)} overwrites {names_of(clash)} "
                                 f"after {block_name(realize.block.name)} reads it and before the readers of "
                                 f"{buf.name}", blocks=(realize.block.name, r.block.name),
                                 rule="an inlined expression must read the same values where it lands")


def reverse_compute_inline(func: PrimFunc, block: str) -> tuple[PrimFunc, None]:
    """Fold a consumer into its producer: the producer stores the consumer's result directly."""
    c0 = find_block(func, block, "reverse_compute_inline")[0].block
    for w in {w.name for buf in reads_of(c0) if len(_writers(func, buf)) == 1 for w in _writers(func, buf)} - {block}:
        func = _fold_trivial_init(func, w, "reverse_compute_inline")
    realize, cpath = find_block(func, block, "reverse_compute_inline")
    c = realize.block
    store = _single_store(func, "reverse_compute_inline", realize, "a consumer")
    produced = [buf for buf in reads_of(c) if _writers(func, buf) and buf is not store.buffer]
    if len(produced) != 1:
        what = "no buffer written by another block" if not produced else f"several ({names_of(produced)})"
        raise schedule_error(func, "reverse_compute_inline", f"{block_name(block)} reads {what}",
                             blocks=(block,), rule="reverse_compute_inline folds a consumer into its one producer")
    buf = produced[0]
    writers = _writers(func, buf)
    if len(writers) != 1:
        raise schedule_error(func, "reverse_compute_inline", f"{buf.name} has {len(writers)} writers "
                             f"({', '.join(w.name for w in writers)})", blocks=(block,),
                             rule="reverse_compute_inline needs a buffer with a single producer")
    p_realize, ppath = find_block(func, writers[0].name, "reverse_compute_inline")
    p = p_realize.block
    p_store = _single_store(func, "reverse_compute_inline", p_realize, "the producer", consumer=block)
    loads = [ld for ld in collect(store.value, BufferLoad) if ld.buffer is buf]
    first = list(loads[0].indices)
    inverse = read_inverse(first, c)
    if inverse is None or not all(all(same_expr(a, b) for a, b in zip(ld.indices, first)) for ld in loads):
        raise schedule_error(func, "reverse_compute_inline", f"{block_name(block)} reads {buf.name}"
                             f"[{', '.join(expr_text(i) for i in loads[0].indices)}]"
                             + ("" if len(loads) == 1 else " among other index patterns"), blocks=(block,),
                             rule="reverse_compute_inline needs every read of the producer's buffer to use the same "
                                  "indices, one-to-one in the consumer's iterators: each index a digit of a "
                                  "mixed-radix number of them (vi, vi * 16 + vj with vj < 16, vi // 16 and "
                                  "vi % 16), every iterator in one number",
                             fix="compute_inline the producer instead, or keep both blocks")
    others = [r.name for r in _readers(func, buf) if r is not c]
    if others or alloc_site(func, buf) is None:
        who = f"{block_name(others[0])} reads it too" if others else f"it is a parameter of {func.name}"
        raise schedule_error(func, "reverse_compute_inline", f"{buf.name} must stay in memory: {who}",
                             blocks=(block,) + tuple(others[:1]),
                             rule="reverse_compute_inline removes the producer's buffer, so the consumer must be its "
                                  "only reader")
    if not is_true(realize.predicate):
        raise schedule_error(func, "reverse_compute_inline", f"{block_name(c.name)} has a T.where predicate",
                             blocks=(c.name,), rule="the consumer must run on its whole domain",
                             fix="reverse_compute_inline before the split that added the predicate")
    check_movable(func, "reverse_compute_inline", realize, cpath)
    _check_no_address(func, "reverse_compute_inline", buf, block)
    _check_reads_written(func, p_realize, ppath, p_store, c, buf, first)
    _check_order(func, p_realize, realize, store.buffer)
    element = list(p_store.indices)
    vmap = inverse.iterators(element)
    guards = inverse.guards(element, {iv.var: iv.dom for iv in p.iter_vars})
    value = substitute(_replace_loads(store.value, buf, p_store.value), vmap)
    indices = tuple(substitute(i, vmap) for i in store.indices)
    new_p = refresh_block(dataclasses.replace(p, body=BufferStore(store.buffer, value, indices)))
    predicate = p_realize.predicate
    if guards:  # an over-computing producer: only the consumer's elements are stored
        binding = dict(zip([iv.var for iv in p.iter_vars], p_realize.iter_values))
        for g in guards:
            g = substitute(g, binding)
            predicate = g if is_true(predicate) else logical_and(predicate, g)
        predicate = simplify(predicate, path_ranges(ppath))
    new = replace_at(func, ppath, p_realize, dataclasses.replace(p_realize, block=new_p, predicate=predicate))
    realize2, _ = find_block(new, block, "reverse_compute_inline")
    new = without_realize(new, realize2)
    return drop_unused_allocs(new), None


def _check_reads_written(func: PrimFunc, p_realize: BlockRealize, ppath: Path, p_store: BufferStore,
                         c: Block, buf: Buffer, first: list[PrimExpr]) -> None:
    """Every element the consumer reads is one the producer writes (the consumer runs its whole
    domain): by the boxes when the producer stores at distinct iterators over its whole domain,
    else by running both when their loops are constant and small."""
    import numpy as np

    p = p_realize.block
    cdoms = {iv.var: iv.dom for iv in c.iter_vars}
    read_box = [relax(i, cdoms) for i in first]
    pvars = [iv.var for iv in p.iter_vars]
    pdoms = {iv.var: iv.dom for iv in p.iter_vars}
    fail = None
    if is_true(p_realize.predicate) and all(isinstance(i, Var) and i in pvars for i in p_store.indices) \
            and len(set(p_store.indices)) == len(p_store.indices):
        for d, (i, (lo, hi)) in enumerate(zip(p_store.indices, read_box)):
            plo, phi = (index_as(x, lo.dtype) for x in relax(i, pdoms))
            if not (prove(plo <= lo) and prove(hi <= phi)):
                fail = (f"reads {buf.name} over [{expr_text(lo)}, {expr_text(hi)}] in dimension {d}, but "
                        f"{block_name(p.name)} writes only [{expr_text(plo)}, {expr_text(phi)}]")
                break
        else:
            return
    shape = shape_of(buf)
    written = written_mask(p_realize, loops_in_scope(ppath), buf, shape) if shape is not None and fail is None \
        else None
    cmins = int_values(iv.dom.min for iv in c.iter_vars)
    cdom = int_values(iv.dom.extent for iv in c.iter_vars)
    if written is not None and shape is not None and cmins is not None and cdom is not None \
            and math.prod(cdom) <= CELL_LIMIT:
        cgrid = np.meshgrid(*[np.arange(lo, lo + n) for lo, n in zip(cmins, cdom)], indexing="ij")
        try:
            cenv = {iv.var: g.ravel() for iv, g in zip(c.iter_vars, cgrid)}
            size = cgrid[0].size if cgrid else 1
            rcols = [np.broadcast_to(np.asarray(eval_array(i, cenv)), (size,)) for i in first]
            inside = np.ones(size, dtype=bool)
            for col, n in zip(rcols, shape):
                inside &= (col >= 0) & (col < n)
            if inside.all() and written[tuple(rcols)].all():
                return
            fail = f"reads elements of {buf.name} that {block_name(p.name)} does not write"
        except (ValueError, KeyError):
            pass
    raise schedule_error(func, "reverse_compute_inline", f"{block_name(c.name)} "
                         + (fail or f"reads {buf.name} where tdsl cannot show that {block_name(p.name)} wrote it"),
                         blocks=(p.name, c.name),
                         rule="every element the consumer reads must be one the producer writes",
                         fix="keep both blocks, or shrink the consumer to what the producer writes")


def _replace_loads(expr: PrimExpr, buf: Buffer, value: PrimExpr) -> PrimExpr:
    class _R(IRMutator):
        def visit_BufferLoad(self, node):
            return value if node.buffer is buf else self.generic_visit(node)

    return _R().visit(expr)


def _check_order(func: PrimFunc, p_realize: BlockRealize, c_realize: BlockRealize, out: Buffer) -> None:
    """No block between producer and consumer touches the consumer's data."""
    order = [r for r in all_realizes(func.body) if r is not func.body]
    i, j = order.index(p_realize), order.index(c_realize)
    c = c_realize.block
    for r in order[i + 1:j]:
        o = r.block
        clash = (writes_of(o) & reads_of(c)) | ((reads_of(o) | writes_of(o)) & {out})
        if clash:
            raise schedule_error(func, "reverse_compute_inline", f"{block_name(o.name)} uses {names_of(clash)} between "
                                 f"{block_name(p_realize.block.name)} and {block_name(c.name)}",
                                 blocks=(o.name, c.name), rule="the consumer's work would move before that block")
    if out in reads_of(p_realize.block):
        raise schedule_error(func, "reverse_compute_inline", f"{block_name(p_realize.block.name)} reads {out.name}",
                             blocks=(p_realize.block.name,), rule="the producer cannot read the consumer's output")
