"""Einsum primitives (TensorIR semantics): reindex and pad_einsum.

reindex(block, buffer)
    A new buffer ``<buf>_reindex`` indexed by the block's own iterators: its dimensions are the
    iterators that the block's access to `buffer` uses, in the block's iterator order, with their
    domains as extents. For a read, a copy block ``<buf>_reindex`` (``R[v...] = X[f(v...)]``) runs
    right before the block's loop nest and the block reads ``R[v...]``; for a write, the block
    writes ``R[v...]`` and a copy block after its nest stores ``X[f(v...)] = R[v...]``. The block
    must access the buffer with one index pattern only; a written buffer's indices must be
    distinct spatial iterators or constants (the copy back then writes each element once).
    Used to turn ``X[n, c, h + r, w + s]`` of a convolution into the plain
    ``X_reindex[n, h, w, c, r, s]`` that padding and tensorize can work on.

pad_einsum(block, padding)
    Pad every iterator of an einsum block up to a multiple of its factor (``padding[i]`` for
    iterator i; 1 leaves it alone). An einsum block here: its iterators bound one to one to its
    own loops (from 0), no predicate, one store ``Y[v..] = Y[v..] + <product of loads>`` (or any
    expression when no reduction iterator is padded) with an optional T.init, every buffer
    indexed by plain iterators. Each input buffer with a padded dimension is read through a new
    ``<buf>_pad`` buffer filled by a block ``<buf>_pad`` before the nest (zero outside the old
    extents), the output is computed into ``<out>_pad`` over the padded domain and copied back by
    a block ``<out>_pad`` after the nest (a block without T.init that accumulates into its output
    first fills ``<out>_pad`` from it, block ``<out>_pad_in``). The padded terms of a reduction multiply a zero, so
    the sum over the old domain is unchanged; padded output elements are never copied back.
"""
from __future__ import annotations

import dataclasses

from ...arith import simplify
from ...ir import (
    TRUE,
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
    IRMutator,
    IterVar,
    PrimExpr,
    PrimFunc,
    Range,
    Stmt,
    Var,
    collect,
    const,
    free_vars,
    logical_and,
    replace_buffers,
    substitute,
)
from ...ir.tree import Path, block_names, fresh_name, loops_in_scope, replace_at, var_names
from ..analysis import expr_text
from ..errors import block_name, schedule_error
from ..tree import add_alloc, buffer_names, find_block, insert_beside, refresh_block, scope_of
from .cache import own_nest

# shared analysis ------------------------------------------------------------------------------

def _accesses(block: Block) -> list[tuple[Buffer, tuple[PrimExpr, ...], str]]:
    """Every (buffer, indices, "read"/"write") of the block's body and init."""
    out = []
    for stmt in (block.init, block.body):
        if stmt is None:
            continue
        for node in collect(stmt, BufferStore):
            out.append((node.buffer, node.indices, "write"))
        for node in collect(stmt, BufferLoad):
            out.append((node.buffer, node.indices, "read"))
    return out


def _single_pattern(func: PrimFunc, primitive: str, block: Block, buf: Buffer) -> tuple[PrimExpr, ...]:
    """The one index pattern the block accesses `buf` with (a ScheduleError when there are more)."""
    ranges = {iv.var: iv.dom for iv in block.iter_vars}
    patterns: list[tuple[PrimExpr, ...]] = []
    for b, idx, _ in _accesses(block):
        if b is not buf:
            continue
        idx = tuple(simplify(i, ranges) for i in idx)
        if not any(len(p) == len(idx) and all(_same(x, y) for x, y in zip(p, idx)) for p in patterns):
            patterns.append(idx)
    if len(patterns) != 1:
        shown = " and ".join(f"{buf.name}[{', '.join(expr_text(i) for i in p)}]" for p in patterns)
        raise schedule_error(func, primitive, f"{block_name(block.name)} accesses {buf.name} as {shown}",
                             blocks=(block.name,), rule=f"{primitive} needs one access pattern per buffer",
                             fix="compute the accesses in separate blocks, or cache_read the buffer")
    return patterns[0]


def _resolve(func: PrimFunc, primitive: str, block: Block, buffer) -> tuple[Buffer, str]:
    """`buffer` as TVM names it: ("read", i), ("write", i) or a buffer name; and which it is."""
    if isinstance(buffer, (tuple, list)) and len(buffer) == 2 and buffer[0] in ("read", "write") \
            and isinstance(buffer[1], int) and not isinstance(buffer[1], bool):
        regions = block.reads if buffer[0] == "read" else block.writes
        if not 0 <= buffer[1] < len(regions):
            raise schedule_error(func, primitive, f"{block_name(block.name)} has {len(regions)} {buffer[0]} "
                                 f"region(s); index {buffer[1]} is out of range", blocks=(block.name,))
        return regions[buffer[1]].buffer, buffer[0]
    if isinstance(buffer, str):
        for which, regions in (("write", block.writes), ("read", block.reads)):
            for r in regions:
                if r.buffer.name == buffer:
                    return r.buffer, which
        names = ", ".join(dict.fromkeys(r.buffer.name for r in block.reads + block.writes))
        raise schedule_error(func, primitive, f"{block_name(block.name)} accesses no buffer named {buffer!r} "
                             f"(it accesses {names})", blocks=(block.name,))
    raise schedule_error(func, primitive, f"the buffer is ('read', i), ('write', i) or a name, not {buffer!r}",
                         blocks=(block.name,))


def _same(x: PrimExpr, y: PrimExpr) -> bool:
    """The same index (structural_equal would also pair different free variables)."""
    d = simplify(x - y)
    return isinstance(d, IntImm) and d.value == 0


def _is_unit(iv: IterVar) -> bool:
    return isinstance(iv.dom.extent, IntImm) and iv.dom.extent.value == 1


def _leaf(func: PrimFunc, primitive: str, name: str) -> tuple[BlockRealize, Path]:
    realize, path = find_block(func, name, primitive)
    if collect(realize.block.body, BlockRealize):
        raise schedule_error(func, primitive, f"{block_name(name)} holds other blocks", blocks=(name,),
                             rule=f"{primitive} applies to a block without nested blocks")
    return realize, path


def _nest(ivs, extents, body_of, name: str, taken: set[str]) -> Stmt:
    """Loops ax0.. over `extents` around a spatial block `name` with iterators `ivs` (fresh Vars
    over those extents), whose body is body_of(iterator vars)."""
    loops = [Var(fresh_name(f"ax{d}", taken), e.dtype) for d, e in enumerate(extents)]
    taken.update(v.name for v in loops)
    block = refresh_block(Block(name, tuple(ivs), (), (), body_of([iv.var for iv in ivs])))
    stmt: Stmt = BlockRealize(tuple(loops), TRUE, block)
    for ax, e in reversed(list(zip(loops, extents))):
        stmt = For(ax, const(0, e.dtype), e, "serial", stmt)
    return stmt


def _fresh_ivs(names: list[str], extents: list[PrimExpr], taken: set[str]) -> list[IterVar]:
    out = []
    for n, e in zip(names, extents):
        v = Var(fresh_name(n, taken), e.dtype)
        taken.add(v.name)
        out.append(IterVar(v, Range(const(0, e.dtype), e), "S"))
    return out


class _Redirect(IRMutator):
    """Loads (and, with `stores`, stores) of `old` become accesses of `new` at `indices`."""

    def __init__(self, old: Buffer, new: Buffer, indices: tuple[PrimExpr, ...], stores: bool):
        self.old, self.new, self.indices, self.stores = old, new, indices, stores

    def visit_BufferLoad(self, node: BufferLoad):
        node = self.generic_visit(node)
        return BufferLoad(self.new, self.indices) if node.buffer is self.old else node

    def visit_BufferStore(self, node: BufferStore):
        value = self.visit(node.value)
        if node.buffer is self.old and self.stores:
            return BufferStore(self.new, value, self.indices)
        return dataclasses.replace(node, value=value, indices=tuple(self.visit(i) for i in node.indices))


def _insert(func: PrimFunc, realize: BlockRealize, path: Path, before: list[Stmt], after: list[Stmt],
            allocs: list[Buffer], new_realize: BlockRealize) -> PrimFunc:
    """Replace the block, put `before`/`after` around its loop nest, allocate `allocs` in its scope."""
    func = replace_at(func, path, realize, new_realize)
    block_path = _path_to(func, new_realize.block.name)
    _, top, tpath = own_nest(block_path[0], block_path[1])
    for stmt in before:
        func = insert_beside(func, tpath, top, stmt, after=False)
        _, top, tpath = own_nest(*_path_to(func, new_realize.block.name))
    for stmt in reversed(after):
        func = insert_beside(func, tpath, top, stmt, after=True)
        _, top, tpath = own_nest(*_path_to(func, new_realize.block.name))
    scope = scope_of(path)[0]
    for buf in allocs:
        func = add_alloc(func, scope if scope is not func.body and scope is not None else None, buf)
    return func


def _path_to(func: PrimFunc, name: str) -> tuple[BlockRealize, Path]:
    return find_block(func, name, "internal")


# reindex ------------------------------------------------------------------------------------

def reindex(func: PrimFunc, block: str, buffer) -> tuple[PrimFunc, str]:
    """See the module docstring."""
    primitive = "reindex"
    realize, path = _leaf(func, primitive, block)
    b = realize.block
    buf, which = _resolve(func, primitive, b, buffer)
    pattern = _single_pattern(func, primitive, b, buf)
    raw = next(idx for bb, idx, _ in _accesses(b) if bb is buf)
    # the iterators the access uses (after simplification: co // 64 of co < 64 uses none), and
    # unit-extent ones written in it, which the simplifier replaces by their start (TVM keeps them)
    iters = [iv for iv in b.iter_vars if any(iv.var in free_vars(i) for i in pattern)
             or (_is_unit(iv) and any(iv.var in free_vars(i) for i in raw))]
    for iv in iters:
        if not (isinstance(iv.dom.min, IntImm) and iv.dom.min.value == 0):
            raise schedule_error(func, primitive, f"iterator {iv.var.name} of {block_name(block)} starts at "
                                 f"{expr_text(iv.dom.min)}", blocks=(block,),
                                 rule="reindex gives each iterator a dimension from 0")
    if which == "write":
        seen: set[Var] = set()
        for i in pattern:
            ok = isinstance(i, IntImm) or (isinstance(i, Var) and i not in seen
                                           and any(iv.var is i and iv.kind == "S" for iv in b.iter_vars))
            if not ok:
                raise schedule_error(func, primitive, f"{block_name(block)} writes {buf.name}"
                                     f"[{', '.join(expr_text(x) for x in pattern)}]", blocks=(block,),
                                     rule="a reindexed write needs distinct spatial iterators (or constants) as "
                                          "indices, so that the copy back writes each element once")
            if isinstance(i, Var):
                seen.add(i)
    names = buffer_names(func) | set(block_names(func))
    new_name = fresh_name(f"{buf.name}_reindex", names)
    shape = tuple(iv.dom.extent for iv in iters)
    new = Buffer(new_name, shape, buf.dtype, scope=buf.scope if buf.scope != "global" else "global")
    own_indices = tuple(iv.var for iv in iters)
    new_block = refresh_block(dataclasses.replace(
        b, body=_Redirect(buf, new, own_indices, which == "write").visit(b.body),
        init=None if b.init is None else _Redirect(buf, new, own_indices, which == "write").visit(b.init)))
    taken = var_names(func)
    ivs = _fresh_ivs([f"v{d}" for d in range(len(iters))], list(shape), taken)
    vmap: dict[Var, PrimExpr] = {iv.var: w.var for iv, w in zip(iters, ivs)}
    orig = tuple(substitute(i, vmap) for i in pattern)
    if which == "read":
        copy = _nest(ivs, shape, lambda vs: BufferStore(new, BufferLoad(buf, orig), tuple(vs)), new_name, taken)
        before, after = [copy], []
    else:
        copy = _nest(ivs, shape, lambda vs: BufferStore(buf, BufferLoad(new, tuple(vs)), orig), new_name, taken)
        before, after = [], [copy]
    func = _insert(func, realize, path, before, after, [new], dataclasses.replace(realize, block=new_block))
    return func, new_name


# pad_einsum ----------------------------------------------------------------------------------

def _einsum_loops(func: PrimFunc, primitive: str, realize: BlockRealize, path: Path) -> list[For]:
    """The loop binding each iterator (one loop per iterator, from 0, over its whole domain)."""
    b = realize.block
    loops = {f.loop_var: f for f in loops_in_scope(path)}
    out = []
    for iv, value in zip(b.iter_vars, realize.iter_values):
        f = loops.get(value) if isinstance(value, Var) else None
        if f is None or f in out or not (isinstance(f.min, IntImm) and f.min.value == 0) \
                or not _same(f.extent, iv.dom.extent) \
                or not (isinstance(iv.dom.min, IntImm) and iv.dom.min.value == 0):
            raise schedule_error(func, primitive, f"iterator {iv.var.name} of {block_name(b.name)} is bound to "
                                 f"{expr_text(value)}, not to a loop of its own over its domain", blocks=(b.name,),
                                 rule=f"{primitive} needs each iterator bound to one loop (T.axis.remap)",
                                 fix=f"apply {primitive} before splitting or fusing the block's loops")
        out.append(f)
    if not (isinstance(realize.predicate, IntImm) and realize.predicate.value == 1):
        raise schedule_error(func, primitive, f"{block_name(b.name)} has a predicate", blocks=(b.name,),
                             rule=f"{primitive} needs a block without T.where")
    return out


def _factors(e: PrimExpr) -> list[PrimExpr]:
    if isinstance(e, Binary) and e.op == "mul":
        return _factors(e.a) + _factors(e.b)
    return [e]


def _load_of(e: PrimExpr) -> BufferLoad | None:
    while isinstance(e, Cast):
        e = e.value
    return e if isinstance(e, BufferLoad) else None


def _check_zero_safe(func: PrimFunc, b: Block, store: BufferStore, padded_r: list[IterVar],
                     padded_bufs: set[Buffer]) -> None:
    """Each padded reduction iterator must index a zero-padded factor of every term."""
    if not padded_r:
        return
    v = store.value
    rest = None
    if isinstance(v, Binary) and v.op == "add":
        for acc, other in ((v.a, v.b), (v.b, v.a)):
            if isinstance(acc, BufferLoad) and acc.buffer is store.buffer:
                rest = other
                break
    why = None
    if rest is None:
        why = f"its update is not {store.buffer.name}[...] + (a product)"
    else:
        for iv in padded_r:
            if not any((ld := _load_of(f)) is not None and ld.buffer in padded_bufs
                       and any(i is iv.var for i in ld.indices) for f in _factors(rest)):
                why = f"no factor of the product is a padded load indexed by the reduction iterator {iv.var.name}"
                break
    if why:
        raise schedule_error(func, "pad_einsum", f"{block_name(b.name)} cannot be padded along its reduction: {why}",
                             blocks=(b.name,), rule="padding a reduction adds terms that must be zero: a sum of "
                                                    "products with a factor read from a zero-padded input",
                             fix="pad only the spatial iterators (factor 1 for the reduction ones)")


def _check_einsum(func: PrimFunc, primitive: str, b: Block, padding) -> None:
    """The padding argument and the einsum form pad_einsum needs (module docstring)."""
    block = b.name
    if not isinstance(padding, (list, tuple)) or len(padding) != len(b.iter_vars) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 1 for p in padding):
        raise schedule_error(func, primitive, f"padding must be {len(b.iter_vars)} positive ints (one per iterator "
                             f"of {block_name(block)}: {', '.join(iv.var.name for iv in b.iter_vars)}), "
                             f"not {padding!r}", blocks=(block,))
    if not isinstance(b.body, BufferStore) or (b.init is not None and not isinstance(b.init, BufferStore)):
        raise schedule_error(func, primitive, f"{block_name(block)} is not a single store", blocks=(block,),
                             rule="pad_einsum takes a block whose body is one store (an einsum)")
    ivars = {iv.var for iv in b.iter_vars}
    for buf, idx, _ in _accesses(b):
        if not all(isinstance(i, Var) and i in ivars for i in idx):
            shown = f"{buf.name}[{', '.join(expr_text(i) for i in idx)}]"
            raise schedule_error(func, primitive, f"{block_name(block)} accesses {shown}, whose indices are not all "
                                 "plain iterators", blocks=(block,), rule="pad_einsum needs an einsum: every index a "
                                 "block iterator", fix=f"sch.reindex(block, {buf.name!r}) first")


def _padded_extents(func: PrimFunc, primitive: str, b: Block, padding) -> dict[Var, PrimExpr]:
    """The iterators whose extent grows, and to what."""
    new_ext: dict[Var, PrimExpr] = {}
    for iv, p in zip(b.iter_vars, padding):
        ext = simplify(iv.dom.extent)
        if p > 1:
            if not isinstance(ext, IntImm):
                raise schedule_error(func, primitive, f"iterator {iv.var.name} has the symbolic extent "
                                     f"{expr_text(ext)}", blocks=(b.name,), rule="pad_einsum pads constant extents")
            if ext.value % p:
                new_ext[iv.var] = const((ext.value + p - 1) // p * p, ext.dtype)
    return new_ext


def _padded_buffers(func: PrimFunc, primitive: str, b: Block, new_ext: dict[Var, PrimExpr]) -> dict[Buffer, Buffer]:
    """Each buffer with a padded dimension -> its padded copy `<buf>_pad`."""
    ivars = {iv.var: iv for iv in b.iter_vars}
    patterns: dict[Buffer, tuple[PrimExpr, ...]] = {}
    for buf, idx, _ in _accesses(b):
        patterns.setdefault(buf, idx)
        if not all(x is y for x, y in zip(patterns[buf], idx)):
            raise schedule_error(func, primitive, f"{block_name(b.name)} accesses {buf.name} with two index "
                                 "patterns", blocks=(b.name,), rule="pad_einsum needs one pattern per buffer")
    names = buffer_names(func) | set(block_names(func))
    bmap: dict[Buffer, Buffer] = {}
    for buf, idx in patterns.items():
        if not any(i in new_ext for i in idx):
            continue
        for d, i in enumerate(idx):
            if i in new_ext and not _same(buf.shape[d], ivars[i].dom.extent):
                raise schedule_error(func, primitive, f"dimension {d} of {buf.name} has {expr_text(buf.shape[d])} "
                                     f"elements where iterator {i.name} ranges over {expr_text(ivars[i].dom.extent)}",
                                     blocks=(b.name,), rule="pad_einsum pads buffers the iterators cover exactly")
        shape = tuple(new_ext[i] if isinstance(i, Var) and i in new_ext else buf.shape[d] for d, i in enumerate(idx))
        name = fresh_name(f"{buf.name}_pad", names)
        names.add(name)
        bmap[buf] = Buffer(name, shape, buf.dtype, scope=buf.scope)
    return bmap


def _fill(buf: Buffer, new: Buffer):
    """The body maker of the block that fills `new` from `buf`, zero outside `buf`."""
    def body(vs):
        conds = [v < old for v, old, e in zip(vs, buf.shape, new.shape) if not _same(old, e)]
        cond = conds[0]
        for c in conds[1:]:
            cond = logical_and(cond, c)
        value = Call(buf.dtype, "if_then_else", (cond, BufferLoad(buf, tuple(vs)), const(0, buf.dtype)))
        return BufferStore(new, value, tuple(vs))
    return body


def _copy_back(buf: Buffer, new: Buffer):
    return lambda vs: BufferStore(buf, BufferLoad(new, tuple(vs)), tuple(vs))


def pad_einsum(func: PrimFunc, block: str, padding) -> tuple[PrimFunc, None]:
    """See the module docstring."""
    primitive = "pad_einsum"
    realize, path = _leaf(func, primitive, block)
    b = realize.block
    _check_einsum(func, primitive, b, padding)
    loops = _einsum_loops(func, primitive, realize, path)
    new_ext = _padded_extents(func, primitive, b, padding)
    if not new_ext:
        return func, None
    store = b.body
    assert isinstance(store, BufferStore)   # _check_einsum
    out = store.buffer
    # a block that accumulates into its output without T.init starts from the output's values:
    # its padded copy is filled from it (zero outside) before the nest, like an input's
    accumulates = b.init is None and any(buf is out for buf, _, w in _accesses(b) if w == "read")
    bmap = _padded_buffers(func, primitive, b, new_ext)
    padded_r = [iv for iv in b.iter_vars if iv.kind == "R" and iv.var in new_ext]
    _check_zero_safe(func, b, store, padded_r, {buf for buf in bmap if buf is not out})
    taken = var_names(func)
    before: list[Stmt] = []
    after: list[Stmt] = []
    for buf, new in bmap.items():
        if buf is out:   # the copy back covers the old shape
            ivs = _fresh_ivs([f"v{d}" for d in range(len(buf.shape))], list(buf.shape), taken)
            after.append(_nest(ivs, buf.shape, _copy_back(buf, new), new.name, taken))
        if buf is out and accumulates:
            ivs = _fresh_ivs([f"v{d}" for d in range(len(new.shape))], list(new.shape), taken)
            names = buffer_names(func) | set(block_names(func)) | {n.name for n in bmap.values()}
            before.append(_nest(ivs, new.shape, _fill(buf, new), fresh_name(f"{new.name}_in", names), taken))
        elif buf is not out:
            ivs = _fresh_ivs([f"v{d}" for d in range(len(new.shape))], list(new.shape), taken)
            before.append(_nest(ivs, new.shape, _fill(buf, new), new.name, taken))
    new_ivs = tuple(dataclasses.replace(iv, dom=Range(iv.dom.min, new_ext[iv.var])) if iv.var in new_ext else iv
                    for iv in b.iter_vars)
    new_block = refresh_block(dataclasses.replace(replace_buffers(b, bmap), iter_vars=new_ivs))
    # the loops take the padded extents
    loop_ext = {f.loop_var: new_ext[iv.var] for f, iv in zip(loops, b.iter_vars) if iv.var in new_ext}
    func = replace_at(func, path, realize, dataclasses.replace(realize, block=new_block))
    func = _LoopExtents(loop_ext).apply(func)
    realize2, path2 = _path_to(func, block)
    return _insert(func, realize2, path2, before, after, list(bmap.values()), realize2), None


class _LoopExtents(IRMutator):
    def __init__(self, extents: dict[Var, PrimExpr]):
        self.extents = extents

    def apply(self, func: PrimFunc) -> PrimFunc:
        return func.with_body(self.visit(func.body))

    def visit_For(self, node: For):
        node = self.generic_visit(node)
        if node.loop_var in self.extents:
            return dataclasses.replace(node, extent=self.extents[node.loop_var])
        return node

    def generic_visit(self, node):
        if not isinstance(node, Stmt):
            return node
        return super().generic_visit(node)
