"""Caching primitives: cache_read, cache_write, set_scope; and the block-tree helpers the other
dataflow families (compute location, reduction, layout) share.

A cache is a new buffer of the chosen scope plus a copy block named TVM-style after it
(`A_shared`, `C_local`), placed right before the reading block's loop nest (cache_read) or right
after the writing block's loop nest (cache_write), in the same scope. The copy covers the region
the block touches, relaxed over its loops and clipped to the buffer. A cache_read copy stays
inside a loop only when a block under that loop writes the buffer, so its region is never
widened over threadIdx loops there (it would read what other threads have not produced yet);
compute_at widens a "shared" copy instead, where the dataflow checks guard it.
"""
from __future__ import annotations

import dataclasses
import difflib

from ...arith import const_bound, linear_form, prove, relax, simplify
from ...ir import (
    SCOPES,
    TRUE,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferRegion,
    BufferStore,
    For,
    IfThenElse,
    IntImm,
    IterVar,
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
    logical_and,
    replace_buffers,
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
    path_ranges,
    replace_at,
    var_names,
)
from ..analysis import index_as, refuse_conditions, simplify_realizes
from ..analysis.boxes import int_values
from ..analysis.instances import written_mask
from ..errors import block_name, schedule_error
from ..tree import (
    add_alloc,
    alloc_site,
    buffer_names,
    find_block,
    insert_beside,
    is_true,
    refresh_block,
    refresh_touching,
    scope_of,
    seq_insert,
    top_index,
)
from .cache_convert import ConvertingRedirect, check_dtype, check_reads_are_casts, converted

# shared helpers ------------------------------------------------------------------------------


def resolve_buffer(func: PrimFunc, block: Block, buffer, primitive: str, which: str = "any",
                   names_in: str | None = None) -> Buffer:
    """The buffer a primitive's `buffer` argument names: an index among the block's reads
    (which="read") or writes (which="write"), TVM's `("read", i)` / `("write", i)`, or a buffer
    name, looked up among the `names_in` regions (default: `which`)."""
    if isinstance(buffer, (tuple, list)) and len(buffer) == 2 and buffer[0] in ("read", "write") \
            and isinstance(buffer[1], int):
        which, buffer = buffer
    elif isinstance(buffer, str) and names_in is not None:
        which = names_in
    regions = {"read": block.reads, "write": block.writes, "any": block.reads + block.writes}[which]
    listed = [r.buffer for r in regions]
    shown = ", ".join(dict.fromkeys(b.name for b in listed)) or "nothing"
    where = {"read": "reads", "write": "writes", "any": "reads or writes"}[which]
    if isinstance(buffer, bool) or not isinstance(buffer, (int, str)):
        raise schedule_error(func, primitive, f"a buffer is named by its name or its index among the {where} of "
                             f"{block_name(block.name)}, not {type(buffer).__name__} {buffer!r}",
                             blocks=(block.name,))
    if isinstance(buffer, int):
        if not 0 <= buffer < len(listed):
            raise schedule_error(func, primitive, f"{block_name(block.name)} {where} {len(listed)} buffer(s) "
                                 f"({shown}); index {buffer} is out of range", blocks=(block.name,),
                                 rule=f"a buffer index counts the block's T.{where.split()[0]}(...) entries from 0")
        return listed[buffer]
    for b in listed:
        if b.name == buffer:
            return b
    close = difflib.get_close_matches(buffer, [b.name for b in listed], n=1)
    raise schedule_error(func, primitive, f"{block_name(block.name)} {where} no buffer named {buffer!r}; it "
                         f"{where} {shown}", blocks=(block.name,),
                         fix=f"did you mean {close[0]!r}?" if close else None)


def check_scope(func: PrimFunc, primitive: str, scope) -> str:
    """A storage scope: global, shared, local, TVM's "warp" (mma fragments laid out (lane,
    element) by transform_layout), or an intrinsic's dotted scope (wmma.accumulator)."""
    if isinstance(scope, str) and (scope in SCOPES or scope == "warp" or (
            "." in scope and scope.replace(".", "").replace("_", "").isalnum())):
        return scope
    close = difflib.get_close_matches(str(scope), SCOPES, n=1)
    raise schedule_error(func, primitive, f"unknown storage scope {scope!r}",
                         rule="scopes are " + ", ".join(f'"{s}"' for s in SCOPES) +
                              ", or the dotted scope a tensor intrinsic declares (\"wmma.accumulator\")",
                         fix=f"did you mean {close[0]!r}?" if close else None)


def relaxed_region(region: BufferRegion, realize: BlockRealize, loops: list[For],
                   ranges: dict[Var, Range] | None = None) -> list[tuple[PrimExpr, PrimExpr]]:
    """Inclusive (lo, hi) per dimension of a block's region, its iterators replaced by their
    bindings and `loops` relaxed over their ranges (other variables stay symbolic)."""
    vmap = {iv.var: v for iv, v in zip(realize.block.iter_vars, realize.iter_values)}
    relax_ranges = {f.loop_var: Range(f.min, f.extent) for f in loops}
    out = []
    for r in region.region:
        lo_e = substitute(r.min, vmap)
        hi_e = substitute(r.min + r.extent - 1, vmap)
        lo = relax(lo_e, relax_ranges)[0]
        hi = relax(hi_e, relax_ranges)[1]
        out.append((simplify(lo, ranges), simplify(hi, ranges)))
    return out


def clip(bounds: list[tuple[PrimExpr, PrimExpr]], buffer: Buffer,
         ranges: dict[Var, Range]) -> list[tuple[PrimExpr, PrimExpr]]:
    """Per dimension bounds inside the buffer: the whole dimension where they cannot be shown to fit."""
    out = []
    for (lo, hi), dim in zip(bounds, buffer.shape):
        # indices may be narrower than the buffer's shape (int32 indices into an int64-shaped
        # buffer, as TVM allows): the copy runs in the shape's dtype
        lo, hi = index_as(lo, dim.dtype), index_as(hi, dim.dtype)
        if prove(lo >= 0, ranges) and prove(hi < dim, ranges):
            out.append((lo, hi))
        else:
            out.append((const(0, dim.dtype), simplify(dim - 1)))
    return out


def copy_nest(func: PrimFunc, name: str, src: Buffer, dst: Buffer, bounds: list[tuple[PrimExpr, PrimExpr]],
              ranges: dict[Var, Range]) -> BlockRealize | For:
    """Loops `ax0, ax1, ...` over `bounds` around a block `name` doing dst[v] = src[v] (cast to
    dst's dtype when cache_read was given one); a loop whose
    extent is not constant runs to its upper bound under a T.where."""
    taken = var_names(func)
    loops: list[tuple[Var, PrimExpr]] = []
    ivs: list[IterVar] = []
    values: list[PrimExpr] = []
    preds: list[PrimExpr] = []
    for d, ((lo, hi), dim) in enumerate(zip(bounds, src.shape)):
        extent = simplify(hi - lo + 1, ranges)
        ax = Var(fresh_name(f"ax{d}", taken), dim.dtype)
        if not isinstance(extent, IntImm):
            cb = const_bound(extent, ranges)[1]
            if cb is not None:
                preds.append(ax < extent)
                extent = const(cb, dim.dtype)
        loops.append((ax, extent))
        v = Var(fresh_name(f"v{d}", taken), dim.dtype)
        ivs.append(IterVar(v, Range(const(0, dim.dtype), dim), "S"))
        values.append(simplify(lo + ax, ranges))
    indices = tuple(iv.var for iv in ivs)
    body = BufferStore(dst, converted(BufferLoad(src, indices), dst), indices)
    block = refresh_block(Block(name, tuple(ivs), (), (), body))
    pred: PrimExpr = TRUE
    for p in preds:
        pred = p if pred is TRUE else logical_and(pred, p)
    stmt: Stmt = BlockRealize(tuple(values), pred, block)
    for ax, extent in reversed(loops):
        stmt = For(ax, const(0, ax.dtype), extent, "serial", stmt)
    return simplify_realizes(stmt, ranges)  # type: ignore[return-value]


def own_nest(realize: BlockRealize, path: Path) -> tuple[list[For], Stmt, Path]:
    """The block's own loops (the innermost loops of its scope that hold nothing else), the
    outermost statement of that nest (a loop, or the realize itself) and the path to it."""
    loops = loops_in_scope(path)
    mine = [r.block for r in all_realizes(realize)]  # the block and the blocks nested in it
    own = [f for f in loops if [r.block for r in all_realizes(f)] == mine]
    if not own:
        return [], realize, path
    idx = next(i for i, p in enumerate(path) if p is own[0])
    return own, own[0], path[:idx]


def accessed_region(realize: BlockRealize, path: Path, buffer: Buffer, which: str, loops: list[For],
                    ranges: dict[Var, Range]) -> list[tuple[PrimExpr, PrimExpr]]:
    """The part of `buffer` a block reads/writes over `loops` (the others stay symbolic), clipped."""
    regions = realize.block.reads if which == "read" else realize.block.writes
    region = next(r for r in regions if r.buffer is buffer)
    return clip(relaxed_region(region, realize, loops, ranges), buffer, ranges)


# cache_read / cache_write --------------------------------------------------------------------

def _insert_at_scope(func: PrimFunc, path: Path, stmt: Stmt, new: Stmt, after: bool) -> PrimFunc:
    """Insert `new` right before (or after) the top statement of `stmt`'s scope that holds it."""
    scope_path, idx = top_index(path, stmt)
    container = scope_path[-1]  # the Block whose body is the scope body
    assert isinstance(container, Block)   # top_index's path ends at the enclosing Block
    new_body = seq_insert(container.body, idx + (1 if after else 0), new)
    return replace_at(func, scope_path[:-1], container, dataclasses.replace(container, body=new_body))


def cache_read(func: PrimFunc, block: str, buffer, scope: str,
               consumer_blocks: list[str] | None = None, dtype: str | None = None) -> tuple[PrimFunc, str]:
    """Read `buffer` through a `scope` copy made before `block`'s loop nest, as far out as no other
    block writes the buffer in between (after a compute_at that can be once per iteration of the
    loops the block shares with the writer). With `consumer_blocks` (TVM's argument), `block`
    names the buffer and the listed blocks read the copy (see _cache_read_many). With `dtype`,
    the copy widens the elements exactly and the readers' casts to it go (see cache_convert)."""
    realize, path = find_block(func, block, "cache_read")
    buf = resolve_buffer(func, realize.block, buffer, "cache_read", "read")
    scope = check_scope(func, "cache_read", scope)
    wide = buf.dtype if dtype is None else check_dtype(func, buf, dtype, block)
    if consumer_blocks is not None:
        consumers = _consumers(func, "cache_read", buf, consumer_blocks, block)
        if len(consumers) > 1:
            for name in consumers:
                _check_converting_reader(func, name, buf, wide)
            return _cache_read_many(func, buf, scope, consumers, wide)
        if consumers[0] != block:
            return cache_read(func, consumers[0], buf.name, scope, dtype=dtype)
    if any(r.buffer is buf for r in realize.block.writes):
        raise schedule_error(func, "cache_read", f"{block_name(block)} also writes {buf.name}, so a read cache "
                             "would hide its own updates from it", blocks=(block,),
                             rule="cache_read needs a block that only reads the buffer",
                             fix=f"use sch.cache_write(block, {buf.name!r}, {scope!r}) for a buffer the block "
                                 "updates")
    _check_converting_reader(func, block, buf, wide)
    name = fresh_name(f"{buf.name}_{scope.replace('.', '_')}", buffer_names(func) | set(block_names(func)))
    cache = Buffer(name, buf.shape, wide, scope=scope)
    func2 = _copy_for(func, block, buf, cache, name)
    func3 = add_alloc(func2, scope_of(path)[0] if scope_of(path)[0] is not func.body else None, cache)
    return refresh_scope_regions(func3, {buf, cache}), name


def _check_converting_reader(func: PrimFunc, block: str, buf: Buffer, wide) -> None:
    """A converting cache (dtype wider than the buffer's) needs `block` to read `buf` only through
    casts to that dtype, in it and in the blocks nested in it."""
    if wide == buf.dtype:
        return
    realize, _ = find_block(func, block, "cache_read")
    for r in all_realizes(realize):
        check_reads_are_casts(func, r.block, buf, wide)


def _copy_for(func: PrimFunc, block: str, buf: Buffer, cache: Buffer, name: str) -> PrimFunc:
    """`block` reads `cache`, filled by a copy block `name` before its loop nest (hoisted as far
    out as no other block writes `buf` in between)."""
    realize, path = find_block(func, block, "cache_read")

    def writes(o: Block) -> bool:
        return any(x.buffer is buf for x in o.writes)

    own, top, tpath = hoist_copy_point(realize, *own_nest(realize, path), writes)
    ranges = path_ranges(tpath)
    bounds = accessed_region(realize, path, buf, "read", own, ranges)
    nest = copy_nest(func, name, buf, cache, bounds, ranges)
    redirect = ConvertingRedirect(buf, cache)
    b = realize.block
    new_block = refresh_block(dataclasses.replace(b, body=redirect.visit(b.body),
                                                  init=None if b.init is None else redirect.visit(b.init)),
                              keep_order=True)
    new_realize = dataclasses.replace(realize, block=new_block)
    func2 = replace_at(func, path, realize, new_realize)
    top2 = new_realize if top is realize else find_path_to(func2, new_realize, top)  # type: ignore[arg-type]
    _, tpath2 = located(func2, top2)
    return insert_beside(func2, tpath2, top2, nest, after=False)


def find_path_to(func: PrimFunc, realize: BlockRealize, old_top: For) -> For:
    """The loop of `func` that replaced `old_top` (same loop variable) above `realize`."""
    from ...ir.tree import find_path

    found = find_path(func.body, lambda x: isinstance(x, For) and x.loop_var is old_top.loop_var)
    assert found is not None
    return found[0]  # type: ignore[return-value]


def located(func: PrimFunc, stmt: Stmt) -> tuple[Stmt, Path]:
    from ...ir.tree import find_path

    found = find_path(func.body, lambda x: x is stmt)
    assert found is not None
    return found


def refresh_scope_regions(func: PrimFunc, buffers: set[Buffer]) -> PrimFunc:
    return func.with_body(refresh_touching(func.body, buffers, keep_order=True))


def cache_write(func: PrimFunc, block: str, buffer, scope: str,
                consumer_blocks: list[str] | None = None) -> tuple[PrimFunc, str]:
    """Write `buffer` through a `scope` buffer copied back after `block`'s loop nest, as far out as
    no other block uses the buffer in between (after a compute_at that can be once per iteration
    of the loops the block shares with a reader). The blocks in `consumer_blocks` (TVM's
    argument) read the cache instead of the buffer, so the copy back may move out past them."""
    realize, path = find_block(func, block, "cache_write")
    b = realize.block
    buf = resolve_buffer(func, b, buffer, "cache_write", "write")
    scope = check_scope(func, "cache_write", scope)
    refuse_conditions(func, "cache_write", block, path)
    readers = [] if consumer_blocks is None else \
        [c for c in _consumers(func, "cache_write", buf, consumer_blocks, block) if c != block]
    if readers:
        _check_write_consumers(func, realize, buf, readers)
    if any(r.buffer is buf for r in b.reads) and b.init is None and not _reads_only_its_own_writes(func, realize, buf):
        raise schedule_error(func, "cache_write", f"{block_name(block)} reads {buf.name} before writing it and "
                             "has no T.init, so a fresh cache would start from garbage", blocks=(block,),
                             rule="cache_write needs a block whose result does not depend on the old contents "
                                  "of the buffer (a plain store, or a reduction with T.init)",
                             fix="cache_read the buffer first, or keep the block writing it directly")
    def uses(o: Block) -> bool:
        return o.name not in readers and any(x.buffer is buf for x in o.reads + o.writes)

    own, top, tpath = hoist_copy_point(realize, *own_nest(realize, path), uses)
    ranges = path_ranges(tpath)
    _check_dense_write(func, realize, path, buf, own, ranges)
    bounds = accessed_region(realize, path, buf, "write", own, ranges)
    name = fresh_name(f"{buf.name}_{scope.replace('.', '_')}", buffer_names(func) | set(block_names(func)))
    cache = Buffer(name, buf.shape, buf.dtype, scope=scope)
    nest = copy_nest(func, name, cache, buf, bounds, ranges)
    new_realize = dataclasses.replace(realize, block=refresh_block(replace_buffers(b, {buf: cache}), keep_order=True))
    func2 = replace_at(func, path, realize, new_realize)
    top2 = new_realize if top is realize else find_path_to(func2, new_realize, top)  # type: ignore[arg-type]
    _, tpath2 = located(func2, top2)
    func3 = insert_beside(func2, tpath2, top2, nest, after=True)
    for reader in readers:
        func3 = _redirect_loads(func3, reader, buf, cache)
    func4 = add_alloc(func3, scope_of(path)[0] if scope_of(path)[0] is not func.body else None, cache)
    return refresh_scope_regions(func4, {buf, cache}), name


# consumer_blocks -----------------------------------------------------------------------------

def _consumers(func: PrimFunc, primitive: str, buf: Buffer, names, block: str) -> list[str]:
    """The blocks `consumer_blocks` names (deduplicated, in the order given), each checked to read
    `buf` without writing it (the block the primitive is given may be listed too)."""
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise schedule_error(func, primitive, f"consumer_blocks must be a list of blocks (handles or names), not "
                             f"{names!r}", blocks=(block,))
    out = list(dict.fromkeys(names))
    if not out:
        return [block]
    for name in out:
        if name == block:
            continue
        b = find_block(func, name, primitive)[0].block
        if not any(r.buffer is buf for r in b.reads):
            raise schedule_error(func, primitive, f"consumer_blocks names {block_name(name)}, which does not read "
                                 f"{buf.name}", blocks=(block, name),
                                 rule="consumer_blocks lists blocks that read the cached buffer")
        if any(r.buffer is buf for r in b.writes):
            raise schedule_error(func, primitive, f"consumer_blocks names {block_name(name)}, which also writes "
                                 f"{buf.name}", blocks=(block, name),
                                 rule="a consumer of a cache only reads the buffer")
    return out


def _redirect_loads(func: PrimFunc, name: str, buf: Buffer, cache: Buffer) -> PrimFunc:
    realize, path = find_block(func, name, "cache")
    b = realize.block
    redirect = ConvertingRedirect(buf, cache)
    new_block = refresh_block(dataclasses.replace(b, body=redirect.visit(b.body),
                                                  init=None if b.init is None else redirect.visit(b.init)),
                              keep_order=True)
    return replace_at(func, path, realize, dataclasses.replace(realize, block=new_block))


def _program_order(func: PrimFunc) -> dict[str, int]:
    return {r.block.name: k for k, r in enumerate(all_realizes(func.body))}


def _check_write_consumers(func: PrimFunc, realize: BlockRealize, buf: Buffer, readers: list[str]) -> None:
    """The listed readers see the cache, which holds only what the writer stores: so the writer
    must be the buffer's only writer, the buffer not a parameter (whose old contents a reader
    could see), and every reader after the writer."""
    name = realize.block.name
    if alloc_site(func, buf) is None:
        raise schedule_error(func, "cache_write", f"{buf.name} is a parameter of {func.name}: a consumer reading the "
                             "cache would not see the elements the caller passed in", blocks=(name,),
                             rule="cache_write(..., consumer_blocks=...) redirects readers of a buffer the function "
                                  "allocates", fix="leave consumer_blocks out: the readers then see the copy back")
    others = [r.block.name for r in all_realizes(func.body)  # blocks around the writer write what it writes
              if not any(x.block is realize.block for x in all_realizes(r)) and any(x.buffer is buf for x in r.block.writes)]
    if others:
        raise schedule_error(func, "cache_write", f"{block_name(others[0])} also writes {buf.name}; a consumer "
                             f"reading the cache would miss what it stores", blocks=(name, others[0]),
                             rule="cache_write(..., consumer_blocks=...) needs the block to be the buffer's only "
                                  "writer")
    scope = scope_of(find_block(func, name, "cache_write")[1])[1]
    outside = [r for r in readers if scope_of(find_block(func, r, "cache_write")[1])[1] is not scope]
    if outside:
        raise schedule_error(func, "cache_write", f"consumer {block_name(outside[0])} is in another scope (enclosing "
                             f"block) than {block_name(name)}", blocks=(name, outside[0]),
                             rule="the cache is allocated in the writer's scope, so its consumers must be there too")
    order = _program_order(func)
    early = [r for r in readers if order[r] < order[name]]
    if early:
        raise schedule_error(func, "cache_write", f"consumer {block_name(early[0])} runs before "
                             f"{block_name(name)}", blocks=(name, early[0]),
                             rule="the consumers of a write cache come after the block that writes it")


def _cache_read_many(func: PrimFunc, buf: Buffer, scope: str, names: list[str], wide) -> tuple[PrimFunc, str]:
    """One `scope` cache of `buf` read by several blocks of one scope (see _copy_many)."""
    found = [find_block(func, n, "cache_read") for n in names]
    if len({id(scope_of(p)[1]) for _, p in found}) != 1:
        raise schedule_error(func, "cache_read", "consumer_blocks names blocks of different scopes (enclosing "
                             "blocks)", blocks=tuple(names), rule="one cache serves blocks of one scope")
    taken = buffer_names(func) | set(block_names(func))
    name = fresh_name(f"{buf.name}_{scope.replace('.', '_')}", taken)
    cache = Buffer(name, buf.shape, wide, scope=scope)
    out = _copy_many(func, buf, cache, names, taken, name)
    scope_realize = scope_of(found[0][1])[0]
    out = add_alloc(out, scope_realize if scope_realize is not func.body else None, cache)
    return refresh_scope_regions(out, {buf, cache}), name


def _copy_many(func: PrimFunc, buf: Buffer, cache: Buffer, names: list[str], taken: set[str],
               name: str | None = None) -> PrimFunc:
    """The blocks `names` read `cache`. At their innermost common sequence, one copy goes right
    before the first statement holding one of them, covering what they all read, when no block
    at or after that point writes `buf`. When blocks in that first statement write it (TVM's
    func_multi_consumer: the writer and one consumer share a loop), the consumers inside get
    their copy in there (recursively) and those after it a second copy, after the writes."""
    name = name or fresh_name(cache.name, taken)
    if len(names) == 1:
        return _copy_for(func, names[0], buf, cache, name)
    found = [find_block(func, n, "cache_read") for n in names]
    fulls = [p + (r,) for r, p in found]
    depth = 0
    while all(len(f) > depth for f in fulls) and all(f[depth] is fulls[0][depth] for f in fulls):
        depth += 1
    container = fulls[0][depth - 1]
    if not isinstance(container, SeqStmt):  # two distinct blocks part at a sequence
        raise schedule_error(func, "cache_read", "consumer_blocks names one block twice", blocks=tuple(names))
    items = list(container.seq)
    first = min(items.index(f[depth]) for f in fulls)

    def writers(stmts) -> list[str]:
        return [r.block.name for item in stmts for r in all_realizes(item)
                if any(x.buffer is buf for x in r.block.writes)]

    later = writers(items[first + 1:])
    if later:
        raise schedule_error(func, "cache_read", f"{block_name(later[0])} writes {buf.name} after the first of the "
                             "consumers, so a shared copy before them would go stale",
                             blocks=tuple(names) + (later[0],),
                             rule="a cache shared by several consumers is made before them, after every write",
                             fix="call sch.cache_read once per consumer")
    if writers(items[first:first + 1]):
        inside = [n for n, f in zip(names, fulls) if f[depth] is items[first]]
        after = [n for n in names if n not in inside]
        func = _copy_many(func, buf, cache, inside, taken, name)
        return _copy_many(func, buf, cache, after, taken) if after else func
    cpath = fulls[0][:depth]
    ranges = path_ranges(cpath)
    bounds: list[tuple[PrimExpr, PrimExpr]] | None = None
    for (realize, _path), full in zip(found, fulls):
        loops = [x for x in full[depth:] if isinstance(x, For)]
        region = next(r for r in realize.block.reads if r.buffer is buf)
        mine = clip(relaxed_region(region, realize, loops, ranges), buf, ranges)
        bounds = mine if bounds is None else [(simplify(binary("min", a, c), ranges), simplify(binary("max", b, d), ranges))
                                              for (a, b), (c, d) in zip(bounds, mine)]
    assert bounds is not None
    nest = copy_nest(func, name, buf, cache, bounds, ranges)
    out = insert_beside(func, cpath, items[first], nest, after=False)
    for n in names:
        out = _redirect_loads(out, n, buf, cache)
    return out


def _reads_only_its_own_writes(func: PrimFunc, realize: BlockRealize, buf: Buffer) -> bool:
    """A block with nested blocks (TVM's `scope`: one inner block writes A, the next reads it) whose
    buffer is allocated and written by no other block: every element it reads is one it wrote
    before (now in the cache), or one nothing wrote, garbage in the original as well."""
    if not child_realizes(realize) or alloc_site(func, buf) is None:
        return False
    mine = {id(r) for r in all_realizes(realize)}
    return not any(w.buffer is buf for r in all_realizes(func.body) if id(r) not in mine for w in r.block.writes)


def hoist_copy_point(realize: BlockRealize, own: list[For], top: Stmt, tpath: Path,
           conflicts) -> tuple[list[For], Stmt, Path]:
    """Move a copy point from the block's own nest out through the enclosing loops of its scope,
    as far as no other block under a loop `conflicts` (touches the buffer in a way the copy would
    reorder); the copy then covers those loops too, once."""
    mine = {id(r) for r in all_realizes(realize)}
    while True:
        idx = max((i for i, p in enumerate(tpath) if isinstance(p, (For, Block))), default=-1)
        if idx < 0 or not isinstance(tpath[idx], For):
            return own, top, tpath
        loop = tpath[idx]
        assert isinstance(loop, For)   # checked just above
        if any(conflicts(r.block) for r in all_realizes(loop) if id(r) not in mine):
            return own, top, tpath
        own, top, tpath = [loop, *own], loop, tpath[:idx]


def _offset_iterator(index: PrimExpr, b: Block, loops: list[For]) -> Var | None:
    """The iterator v of a store index `v + e`, e free of the block's iterators and of `loops`
    (the loops the copy stage repeats); else None."""
    own = [iv.var for iv in b.iter_vars]
    form = linear_form(index, own)
    if form is None:
        return None
    hits = [v for v, c in form[0].items() if c != 0]
    fixed = not free_vars(form[1]) & (set(own) | {f.loop_var for f in loops})
    return hits[0] if len(hits) == 1 and form[0][hits[0]] == 1 and fixed else None


def _check_dense_write(func: PrimFunc, realize: BlockRealize, path: Path, buf: Buffer, own: list[For],
                       ranges: dict[Var, Range]) -> None:
    """The copy back writes every element of the written box, so the block must write all of them:
    each index a distinct spatial iterator or a constant, and (for constant nests) no more box
    elements than iterations."""
    b = realize.block
    if child_realizes(realize):  # the stores are the nested blocks': run the loops to see them
        bounds = accessed_region(realize, path, buf, "write", own, ranges)
        if not _box_all_written(realize, own, buf, bounds, ranges) and \
                not _tiles_fill(realize, own, buf, bounds, ranges):
            raise schedule_error(func, "cache_write", f"{block_name(b.name)} holds other blocks, and tdsl cannot "
                                 f"show that they write every element of the part of {buf.name} it touches "
                                 "(a T.where skips some, or the loops are not constant and small)",
                                 blocks=(b.name,), rule="the copy back writes a whole box, so the block must fill it",
                                 fix="cache_write the inner block that stores the buffer")
        return
    spatial = {iv.var for iv in b.iter_vars if iv.kind == "S"}
    stores = [s for s in collect(b.body, BufferStore) if s.buffer is buf]
    ok = bool(stores)
    for s in stores:
        # constant indices pin a dimension; an offset of outer values (an enclosing block's
        # `v_o * 32 + v_i`) is fixed while the block's loops run
        named = [_offset_iterator(i, b, own) for i in s.indices if free_vars(i) & {iv.var for iv in b.iter_vars}]
        ok = ok and all(v is not None and v in spatial for v in named) and len(set(named)) == len(named)
    if ok:
        bounds = accessed_region(realize, path, buf, "write", own, ranges)
        points: int | None = 1
        for lo, hi in bounds:
            ext = simplify(hi - lo + 1, ranges)
            points = points * ext.value if isinstance(ext, IntImm) and points is not None else None
        feeding = set().union(*(free_vars(v) for iv, v in zip(b.iter_vars, realize.iter_values) if iv.kind == "S"))
        iters: int | None = 1
        for f in (f for f in own if f.loop_var in feeding):
            iters = iters * f.extent.value if isinstance(f.extent, IntImm) and iters is not None else None
        if points is not None and iters is not None and points > iters:
            ok = False
        if ok and not is_true(realize.predicate) and not _guards_only_the_domain(realize, stores):
            ok = _box_all_written(realize, own, buf, bounds, ranges)
    if not ok:
        raise schedule_error(func, "cache_write", f"{block_name(b.name)} does not write every element of the "
                             f"part of {buf.name} it touches (its store indices are not distinct spatial "
                             "iterators covering that part, or a T.where predicate skips some of it)",
                             blocks=(b.name,),
                             rule="the copy back writes a whole box, so the block must fill it",
                             fix="cache_write a block that stores to buf[vi, vj, ...] with its spatial iterators")


def _guards_only_the_domain(realize: BlockRealize, stores: list[BufferStore]) -> bool:
    """Every conjunct of the predicate is a split's tail guard `binding < n` on an iterator that
    indexes every store, with n at least the end of its domain: it skips only instances outside the
    domain, which write nothing of the (clipped) box."""
    from ...ir import Binary

    def conjuncts(e):
        return conjuncts(e.a) + conjuncts(e.b) if isinstance(e, Binary) and e.op == "and" else [e]

    b = realize.block
    indexing = [iv for iv, v in zip(b.iter_vars, realize.iter_values)
                if iv.kind == "S" and all(any(i is iv.var for i in s.indices) for s in stores)]
    for c in conjuncts(realize.predicate):
        if not (isinstance(c, Binary) and c.op in ("lt", "le")):
            return False
        end = c.b if c.op == "lt" else c.b + 1
        if not any(same_expr(simplify(c.a), simplify(v)) and prove(end >= iv.dom.min + iv.dom.extent)
                   for iv, v in zip(b.iter_vars, realize.iter_values) if iv in indexing):
            return False
    return True


def _box_all_written(realize: BlockRealize, own: list[For], buf: Buffer, bounds, ranges) -> bool:
    """A block with a predicate writes every element of the constant box `bounds`, found by
    running its loops (False when that cannot be done)."""
    outer = _outer_values(realize, own, buf, ranges)
    if outer is None:
        return False
    if outer:
        realize = dataclasses.replace(realize, iter_values=tuple(substitute(v, outer) for v in realize.iter_values))
        bounds = [(substitute(lo, outer), substitute(hi, outer)) for lo, hi in bounds]
    box = [(simplify(lo, ranges), simplify(hi, ranges)) for lo, hi in bounds]
    los, his, shape = int_values(lo for lo, _ in box), int_values(hi for _, hi in box), int_values(buf.shape)
    if los is None or his is None or shape is None:
        return False
    mask = written_mask(realize, own, buf, tuple(shape))
    return mask is not None and bool(mask[tuple(slice(lo, hi + 1) for lo, hi in zip(los, his))].all())


# set_scope -----------------------------------------------------------------------------------

def set_scope(func: PrimFunc, block: str, buffer, scope: str) -> tuple[PrimFunc, None]:
    """Change the storage scope of an intermediate buffer."""
    realize, _ = find_block(func, block, "set_scope")
    buf = resolve_buffer(func, realize.block, buffer, "set_scope", "write", names_in="any")
    scope = check_scope(func, "set_scope", scope)
    if alloc_site(func, buf) is None:
        raise schedule_error(func, "set_scope", f"{buf.name} is a parameter of {func.name}; its storage belongs "
                             "to the caller", blocks=(block,),
                             rule="set_scope changes buffers the function allocates (T.alloc_buffer)",
                             fix=f"sch.cache_read / sch.cache_write the parameter into a {scope!r} buffer")
    if buf.scope == scope:
        return func, None
    new = buf.with_(scope=scope)
    return func.with_body(replace_buffers(func.body, {buf: new})), None


def _outer_values(realize: BlockRealize, own: list[For], buf: Buffer, ranges) -> dict[Var, PrimExpr] | None:
    """Values for the variables from outside `own` that the block's bindings use (an enclosing
    thread or k loop: TVM's cache_write of a blockized mma tile), at which the loops can be run
    for an answer that holds for all of them: each binding is an offset of them plus an affine
    function of the own loops, every store index of `buf` is affine in the block's iterators and
    no predicate names them, so other values only move the written elements and the box together. {} when there are none; None when no such values exist."""
    from ...arith import linear_form

    own_vars = {f.loop_var for f in own}
    b = realize.block
    used = set().union(*(free_vars(v) for v in realize.iter_values)) | free_vars(realize.predicate)
    outer = [v for v in used if v not in own_vars]
    if not outer:
        return {}
    if free_vars(realize.predicate) & set(outer):
        return None
    if not _same_nest_per_instance(b):
        return None
    if any(linear_form(v, list(own_vars)) is None for v in realize.iter_values):
        return None   # each binding: an offset of the outer values + an affine function of the own loops
    ivars = [iv.var for iv in b.iter_vars]
    parts = [b.body] if b.init is None else [b.init, b.body]
    for part in parts:
        for st in collect(part, BufferStore):
            if st.buffer is buf and any(linear_form(i, ivars) is None for i in st.indices):
                return None
    values: dict[Var, PrimExpr] = {}
    for v in outer:
        rng = ranges.get(v)
        if rng is None or not isinstance(rng.min, IntImm):
            return None
        values[v] = rng.min
    return values


def _tiles_fill(realize: BlockRealize, own: list[For], buf: Buffer, bounds, ranges) -> bool:
    """A block holding other blocks (a blockized tile, TVM's mma block) fills the box when each
    instance fills its declared write region of `buf`, a tile `e * v + [0, e)` per dimension of
    a distinct spatial iterator v (checked by running the nested loops for one instance: the
    store indices are affine in the iterators, so every instance fills its tile alike), and
    the instances are no fewer than the tiles in the box (as for a plain store)."""
    b = realize.block
    tiling = _write_tiles(realize, buf)
    if tiling is None or not _one_instance_fills(realize, buf, tiling[1]):
        return False
    named, tiles = tiling
    points = 1
    for (lo, hi), e in zip(bounds, tiles):
        ext = simplify(hi - lo + 1, ranges)
        if not isinstance(ext, IntImm) or ext.value % e:
            return False
        points *= ext.value // e
    feeding = set().union(*(free_vars(v) for iv, v in zip(b.iter_vars, realize.iter_values) if iv.var in named))
    iters = 1
    for f in own:
        if f.loop_var in feeding:
            if not isinstance(f.extent, IntImm):
                return False
            iters *= f.extent.value
    return points <= iters


def _write_tiles(realize: BlockRealize, buf: Buffer) -> tuple[list[Var], list[int]] | None:
    """(iterator, extent) per dimension of the block's one write region of `buf` when it is the
    tile `extent * iterator + [0, extent)` of distinct spatial iterators, and every store index
    of `buf` inside is affine in the block's iterators; None otherwise."""
    from ...arith import linear_form

    b = realize.block
    regions = [r for r in b.writes if r.buffer is buf]
    if len(regions) != 1 or not is_true(realize.predicate):
        return None
    ivars = [iv.var for iv in b.iter_vars]
    spatial = {iv.var for iv in b.iter_vars if iv.kind == "S"}
    named: list[Var] = []
    tiles: list[int] = []
    for rng in regions[0].region:
        form = linear_form(rng.min, ivars)
        if form is None or not isinstance(rng.extent, IntImm) or free_vars(form[1]) & set(ivars):
            return None
        used = [(v, c) for v, c in form[0].items() if c]
        if len(used) != 1 or used[0][0] not in spatial or used[0][1] != rng.extent.value:
            return None
        named.append(used[0][0])
        tiles.append(rng.extent.value)
    if len(set(named)) != len(named):
        return None
    if not _same_nest_per_instance(b):
        return None
    for part in ([b.body] if b.init is None else [b.init, b.body]):
        for st in collect(part, BufferStore):
            if st.buffer is buf and any(linear_form(i, ivars) is None for i in st.indices):
                return None
    return named, tiles


def _same_nest_per_instance(b: Block) -> bool:
    """Every instance of `b` runs the same nest: no predicate, no if, and no loop bound that
    names one of its iterators inside (the stores only move with the iterators)."""
    ivars = {iv.var for iv in b.iter_vars}
    if any(not is_true(r.predicate) for r in collect(b.body, BlockRealize)) or collect(b.body, IfThenElse):
        return False
    return not any(free_vars(f.min) & ivars or free_vars(f.extent) & ivars for f in collect(b.body, For))


def _one_instance_fills(realize: BlockRealize, buf: Buffer, tiles: list[int]) -> bool:
    """Run for its iterators' first values, the block writes exactly its tile of `buf`."""
    b = realize.block
    shape = int_values(buf.shape)
    at = {iv.var: iv.dom.min for iv in b.iter_vars}
    region = next(r for r in b.writes if r.buffer is buf)
    corner = int_values(simplify(substitute(rng.min, at)) for rng in region.region)
    if shape is None or corner is None:
        return False
    one = dataclasses.replace(realize, iter_values=tuple(iv.dom.min for iv in b.iter_vars))
    mask = written_mask(one, [], buf, tuple(shape))
    if mask is None:
        return False
    tile = tuple(slice(lo, lo + e) for lo, e in zip(corner, tiles))
    return bool(mask[tile].all()) and int(mask.sum()) == mask[tile].size
