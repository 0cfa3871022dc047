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


def written_mask(realize: BlockRealize, loops: list[For], buf: Buffer, shape: tuple[int, ...]):
    """A boolean array of `shape`: the elements of `buf` the block's instances store to, or None
    when that cannot be found by running the loops (not constant and small, a store under a
    condition, or an index past the buffer)."""
    import numpy as np

    body = realize.block.body
    items = list(body.seq) if isinstance(body, SeqStmt) else [body]
    stores = [s for s in items if isinstance(s, BufferStore)]
    if len(stores) != len(items):
        return None
    grid = instance_grid(realize, loops)
    if grid is None:
        return None
    values, count = grid
    mask = np.zeros(shape, dtype=bool)
    try:
        for s in stores:
            if s.buffer is not buf:
                continue
            cols = [np.broadcast_to(np.asarray(eval_array(i, values)), (count,)) for i in s.indices]
            if not all(((c >= 0) & (c < n)).all() for c, n in zip(cols, shape)):
                return None
            mask[tuple(cols)] = True
    except (ValueError, KeyError):
        return None
    return mask
