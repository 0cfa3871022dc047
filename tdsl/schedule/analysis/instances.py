"""The instances a block's loops run, found by running them (numpy), for the exact checks of
the schedule primitives when the loops are constant and small.

Only the loops and the block's T.where are run: an `if` between the loops and the block is not
seen, so a caller whose answer depends on which instances run must look for one itself."""
from __future__ import annotations

import math

from ...arith import eval_array
from ...ir import BlockRealize, Buffer, BufferStore, For, IntImm, SeqStmt, free_vars


def instance_grid(realize: BlockRealize, loops: list[For], limit: int = 80_000):
    """The instances the loops run, found by running them: (iterator -> array of values, one per
    instance where the predicate holds), or None when the loops are not constant and small."""
    import numpy as np

    exprs = list(realize.iter_values) + [realize.predicate]
    used = set().union(*(free_vars(e) for e in exprs))
    mine = [f for f in loops if f.loop_var in used]
    if used - {f.loop_var for f in mine}:
        return None  # bindings that use variables from outside the scope
    spans: list[tuple[int, int]] = []
    for f in mine:
        if not (isinstance(f.min, IntImm) and isinstance(f.extent, IntImm)):
            return None
        spans.append((int(f.min.value), int(f.extent.value)))
    if math.prod(n for _, n in spans) > limit:
        return None
    grids = np.meshgrid(*[np.arange(lo, lo + n) for lo, n in spans], indexing="ij")
    env = {f.loop_var: g.ravel() for f, g in zip(mine, grids)}
    size = grids[0].size if grids else 1
    try:
        keep = np.broadcast_to(np.asarray(eval_array(realize.predicate, env), dtype=bool), (size,))
        return {iv.var: np.broadcast_to(np.asarray(eval_array(v, env)), (size,))[keep]
                for iv, v in zip(realize.block.iter_vars, realize.iter_values)}, int(keep.sum())
    except (ValueError, KeyError):
        return None


def written_mask(realize: BlockRealize, loops: list[For], buf: Buffer, shape: tuple[int, ...],
                 limit: int = 200_000):
    """A boolean array of `shape`: the elements of `buf` the block's instances store to (through
    nested blocks and constant loops too), or None when that cannot be found by running the loops
    (not constant and small, a store under a condition, or an index past the buffer)."""
    import numpy as np

    grid = instance_grid(realize, loops)
    if grid is None:
        return None
    values, count = grid
    mask = np.zeros(shape, dtype=bool)
    block = realize.block
    parts = [block.body] if block.init is None else [block.init, block.body]
    try:
        ok = all(_mark_stores(p, dict(values), count, buf, mask, limit) for p in parts)
    except (ValueError, KeyError):
        return None
    return mask if ok else None


def _stores_to(stmt, buf: Buffer) -> bool:
    from ...ir import collect

    return any(s.buffer is buf for s in collect(stmt, BufferStore))


def _mark_stores(stmt, env: dict, count: int, buf: Buffer, mask, limit: int) -> bool:
    """Mark in `mask` the elements of `buf` that `stmt` stores to, run once per column of `env`
    (variable -> array of `count` values); False when tdsl cannot tell by running it."""
    import numpy as np

    if not _stores_to(stmt, buf):
        return True
    if isinstance(stmt, SeqStmt):
        return all(_mark_stores(s, env, count, buf, mask, limit) for s in stmt.seq)
    if isinstance(stmt, BufferStore):
        cols = [np.broadcast_to(np.asarray(eval_array(i, env)), (count,)) for i in stmt.indices]
        if not all(((c >= 0) & (c < n)).all() for c, n in zip(cols, mask.shape)):
            return False
        mask[tuple(cols)] = True
        return True
    if isinstance(stmt, For):
        if not (isinstance(stmt.min, IntImm) and isinstance(stmt.extent, IntImm)) or count * stmt.extent.value > limit:
            return False
        n = int(stmt.extent.value)
        inner = {k: np.repeat(np.broadcast_to(np.asarray(v), (count,)), n) for k, v in env.items()}
        inner[stmt.loop_var] = np.tile(np.arange(stmt.min.value, stmt.min.value + n), count)
        return _mark_stores(stmt.body, inner, count * n, buf, mask, limit)
    if isinstance(stmt, BlockRealize):
        keep = np.broadcast_to(np.asarray(eval_array(stmt.predicate, env), dtype=bool), (count,))
        inner = {k: np.broadcast_to(np.asarray(v), (count,))[keep] for k, v in env.items()}
        for iv, v in zip(stmt.block.iter_vars, stmt.iter_values):
            inner[iv.var] = np.broadcast_to(np.asarray(eval_array(v, env)), (count,))[keep]
        kept = int(keep.sum())
        parts = [stmt.block.body] if stmt.block.init is None else [stmt.block.init, stmt.block.body]
        return all(_mark_stores(p, inner, kept, buf, mask, limit) for p in parts)
    return False  # a store under a condition, a let, ...: not found by running
