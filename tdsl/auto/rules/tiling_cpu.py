"""CPU multi-level tiling of reductions that no micro-kernel takes, and tensorize-by-matching.

`MultiLevelTilingCPU`, for a reduction block whose output's last index is a spatial iterator
`j` that also indexes some operand contiguously (conv2d whose rows no vector width divides,
depthwise conv, pooling, a GEMM whose n is not a multiple of the vector width, int8 or
symbolic GEMMs), a register tile of f1 x j1 results:

* `j` splits into (j0, j1), j1 a sampled multiple of the vector width that divides j's extent
  (2, 1 or 4 vectors), or where none divides it (conv2d's 28 columns on AVX2), a sampled
  divisor between half a vector and 4 vectors (a whole or half row as one vector, the last
  vector part-filled: a split with a remainder would put a predicate on the tile);
* `f`, a spatial iterator that the contiguous operand does not depend on but another operand
  does (conv2d's filters, a GEMM's rows), splits into (f0, f1), f1 a sampled divisor of its
  extent from 2 to 8 such that the tile holds at most 12 vector accumulators: each vector of
  the contiguous operand is then loaded once for f1 results (without it conv2d 32x28x28
  does 2 loads per FMA);
* the loops become the other spatial loops, f0, j0, the reduction loops, f1 (unrolled), j1
  (S-S-R-S-S): each tile is finished in registers before the next;
* the results accumulate in a `cache_write(..., "local")` tile (`reverse_compute_at` j0), the
  init is split off (`decompose_reduction`), and the j1 loops of the init, the update and the
  copy back are vectorized;
* where an operand read along `j` is not contiguous in it (a stencil with clamped borders,
  `A[T.min(T.max(vj + dj - 1, 0), w - 1)]`, which lowering cannot vectorize) the update's j1
  stays scalar and the block is marked `SCALAR_TILE`: `ParallelVectorizeUnroll` then defaults
  its unroll depth to the largest, so the whole tile (taps x j1) is unrolled into straight-line
  code that LLVM's SLP vectorizer packs (a 3x3 blur of 1024x1024: 0.18 ms against 0.54 ms
  with the tile's loops left rolled, Sapphire Rapids, 2 cores).

`TensorizeMatching`: for a block not yet scheduled, every registered tensor intrinsic of the
target whose description's loop extents equal the extents of the block's innermost loops is
tried with `tensorize` at that loop; each match is an alternative (the first is the default).
Intrinsics registered by the user (`tdsl.TensorIntrin.register`) take part, so a library or a
hand-written micro-kernel joins the design space by registering itself.
"""
from __future__ import annotations

from ...intrinsics import blas
from ...intrinsics.registry import TensorIntrin
from ...ir import BufferLoad, Call, collect, free_vars
from ...ir.attrs import AUTO_SCHEDULED
from ...schedule import Schedule
from ..analysis import block_info, vector_obstacle
from .base import Rule
from .cpu_loops import SCALAR_TILE, _is_tuned


class MultiLevelTilingCPU(Rule):
    """S-R-S register tiling with a vector inner tile; see the module docstring."""

    name = "multi-level-tiling-cpu"

    def alternatives(self, sch: Schedule, block: str) -> list:
        if self.hw.kind != "cpu":
            return []
        info = block_info(sch.func, block)
        if info.is_spatial or info.store is None or not info.simple_bindings or not info.top_level \
                or _is_tuned(info):
            return []
        idx = info.store.indices
        j = next((it for it in info.spatial if idx and idx[-1] is it.var), None)
        if j is None:
            return []
        contiguous = any(ld.indices and j.var in free_vars(ld.indices[-1]) and ld.buffer is not info.store.buffer
                         for ld in collect(info.store.value, BufferLoad))
        if not contiguous or (j.extent is not None and j.extent < self.hw.lanes):
            return []
        if any(c.op == "if_then_else" for c in collect(info.block.body, Call)):
            return []  # a guarded (padded) load: lowering cannot vectorize it, so no vector tile
        vector = vector_obstacle(info.block, j.var) is None
        return [lambda s: self._tile(s, block, j, vector)]

    def _tile(self, s: Schedule, block: str, j, vector: bool = True) -> None:
        c = s.get_block(block)
        info = block_info(s.func, block)
        handles = s.get_loops(c)
        kinds = {id(it.loop): it.kind for it in info.iters}
        lj = next(h for h in handles if h.var is j.loop)
        lanes = self.hw.lanes
        widths = vector_widths(j.extent, lanes)
        width = self.choose(s, widths, 0)
        f = reuse_iter(info, j)
        vectors = -(-widths[0] // lanes)   # the register budget is the default width's
        counts = reuse_counts(f.extent, vectors) if f is not None and f.extent is not None else []
        lf = next(h for h in handles if f is not None and h.var is f.loop) if counts else None
        j0, j1 = s.split(lj, [None, width])
        f0 = f1 = None
        if lf is not None:
            default = max((k for k, n in enumerate(counts) if n * vectors <= 8), default=0)
            f0, f1 = s.split(lf, [None, self.choose(s, counts, default)])
        spatial = [h for h in handles if kinds[id(h.var)] == "S" and h is not lj and h is not lf]
        reduce_ = [h for h in handles if kinds[id(h.var)] == "R"]
        inner = [f1, j1] if f1 is not None else [j1]
        s.reorder(*spatial, *([f0] if f0 is not None else []), j0, *reduce_, *inner)
        local = s.cache_write(c, 0, "local")
        s.reverse_compute_at(local, j0)
        init = s.decompose_reduction(c, reduce_[0])
        s.vectorize(s.get_loops(init)[-1])
        if vector:
            s.vectorize(s.get_loops(c)[-1])
        else:
            s.annotate(c, SCALAR_TILE, True)
        if f1 is not None:
            s.unroll(s.get_loops(c)[-2])
        s.vectorize(s.get_loops(local)[-1])
        s.annotate(c, AUTO_SCHEDULED, True)


def vector_widths(extent: int | None, lanes: int) -> list[int]:
    """The inner tile widths of `MultiLevelTilingCPU` for an axis of `extent`, the default first:
    2, 1 or 4 vectors that divide it; else its divisors from half a vector to 4 vectors, the
    largest up to 2 vectors first; symbolic: 2, 1, 4 vectors (a predicate takes the rest)."""
    whole = [v for v in (lanes * 2, lanes, lanes * 4) if extent is None or extent % v == 0]
    if whole or extent is None:
        return whole
    divisors = [d for d in range(max(2, lanes // 2), 4 * lanes + 1) if extent % d == 0]
    if not divisors:
        return [lanes]
    first = max((d for d in divisors if d <= 2 * lanes), default=divisors[0])
    return [first] + [d for d in sorted(divisors, reverse=True) if d != first]


def reuse_counts(extent: int, vectors: int) -> list[int]:
    """The f1 tile sizes: divisors of `extent` from 2 to 8 whose tile of f1 x `vectors`
    accumulators fits 12 vector registers. Not 1: `decompose_reduction` drops a loop of one
    iteration from the init, so a replay with f1 = 1 would not match the sketch's steps (the
    sketch without an f tile is the one where no count fits)."""
    return [d for d in range(2, 9) if extent % d == 0 and d * vectors <= 12]


def reuse_iter(info, j):
    """The spatial iterator (constant extent >= 2) of `info` whose value the operands read along
    `j` do not depend on and another operand does: each vector of those operands serves that
    many results (conv2d's filters, a GEMM's rows); None when there is none."""
    loads = [ld for ld in collect(info.store.value, BufferLoad) if ld.buffer is not info.store.buffer]
    along_j = [ld for ld in loads if ld.indices and j.var in free_vars(ld.indices[-1])]
    others = [ld for ld in loads if ld not in along_j]
    for it in reversed(info.spatial):
        if it is j or it.loop is None or it.extent is None or it.extent < 2:
            continue
        if any(it.var in free_vars(e) for ld in along_j for e in ld.indices):
            continue
        if any(it.var in free_vars(e) for ld in others for e in ld.indices):
            return it
    return None


def _desc_extents(intrin: TensorIntrin) -> list[int] | None:
    from ...ir import For, IntImm

    loops = collect(intrin.desc.body, For)
    out = []
    for f in loops:
        if not isinstance(f.extent, IntImm):
            return None
        out.append(int(f.extent.value))
    return sorted(out)


class TensorizeMatching(Rule):
    """Tensorize with every registered intrinsic whose tile matches; see the module docstring."""

    name = "tensorize-matching"

    def alternatives(self, sch: Schedule, block: str) -> list:
        from ...target import cpu_features

        have = self.hw.features or cpu_features(self.hw.target)
        info = block_info(sch.func, block)
        if info.store is None or not info.top_level or _is_tuned(info) or not info.constant_extents:
            return []
        out = []
        handles_ext = [int(e) for e in info.loop_extents if e is not None]   # all constant (checked above)
        for name in TensorIntrin.list():
            intrin = TensorIntrin.get(name)
            missing = self.hw.kind == "cpu" and any(f not in have for f in intrin.features)
            if intrin.target != self.hw.kind or missing or blas.is_concrete(name):
                continue   # library GEMMs are LibraryCall's, by the generic name (it replays on any shape)
            want = _desc_extents(intrin)
            if not want or len(want) > len(handles_ext):
                continue
            depth = len(want)
            if sorted(handles_ext[-depth:]) != want:
                continue
            out.append(lambda s, name=name, depth=depth: s.tensorize(s.get_loops(s.get_block(block))[-depth],
                                                                     name))
        return out


__all__ = ["SCALAR_TILE", "MultiLevelTilingCPU", "TensorizeMatching", "reuse_counts", "reuse_iter", "vector_widths"]
