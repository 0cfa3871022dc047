"""CPU loop rules: compute locations, vectorized reductions (rfactor), parallel / vectorize / unroll.

* `ComputeLocation`: an intermediate block that was neither inlined nor tiled moves into the
  loop nest of its readers (`compute_at` a loop of a reader): the outermost legal loop, so
  that row kernels (softmax, layernorm) compute each row's reductions right where the row is
  used and the row stays in L1 (an inner loop recomputes the block per iteration: softmax's
  row sum at the column loop measured ~1000x the work), skipping loops of one iteration
  (conv2d's batch loop: the nest would lose its parallel loop). A cheap spatial block (a
  padding copy) also stays at the root in a second sketch: its own parallel pass, computed
  once instead of once per tile. The location is a sketch's structure,
  not a decision: the rules after it
  (rfactor, prefetching steps, parallel loops) are written for the nest it makes, so a search
  that re-sampled it would replay those steps onto another nest (`sample_compute_location` in
  the sketches made every softmax sketch recompute exp and read A in a separate max pass).
* `VectorReduction`: a reduction whose innermost loop runs over a reduced axis of constant extent
  (>= 2 vectors) is split by L lanes and `rfactor`ed into L partial results, the update and the
  init vectorized (L a sampled multiple of the vector width; the small spatial extent per row
  -- one output -- cannot be vectorized any other way). For L >= 2 vectors the first sketch
  combines the L partials a vector at a time (a second rfactor, unrolled); narrower widths,
  combined one by one, only where no wide one fits (on softmax 4096x1024 they were slower,
  and each would double the sketches of every row kernel).
* `ParallelVectorizeUnroll`: the outer loops of a root loop nest that carry no dependence are
  fused and run in parallel (the fewest loops giving 8 tasks per core, never a loop of one
  iteration; not a decision: the trace's `fuse` names its loops, so a replay could not follow
  a changed count, and a sampled one was the sketch's random pick, fixed); the
  innermost spatial loop of each block is split by a sampled vector length and vectorized where
  its stores are unit-stride; the outermost loop gets a sampled `pragma_auto_unroll_max_step`
  (inner loops of constant extent whose product is at most that are unrolled when lowering).
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import Call, For, IntImm, collect
from ...ir.attrs import AUTO_SCHEDULED, AUTO_UNROLL, NONTEMPORAL, TENSOR_INTRIN
from ...schedule import Schedule
from ...schedule.sampling import compute_location_candidates
from ..analysis import block_info, blocks_in_nest, consumers, loop_node, vector_obstacle
from .base import Rule, index_of

UNROLL_STEPS = [0, 16, 64, 512]
SCALAR_TILE = "auto.scalar_tile"
"""The block annotation of a register tile whose update lowering cannot vectorize
(`MultiLevelTilingCPU`); its nest's unroll depth defaults to the largest."""


class ComputeLocation(Rule):
    """Move an intermediate block under its readers' loops (the outermost legal one)."""

    name = "compute-location"

    def alternatives(self, sch: Schedule, block: str) -> list:
        info = block_info(sch.func, block)
        if info.writes_output or not info.top_level or _is_tuned(info):
            return []
        readers = consumers(sch.func, block)
        if not readers or any(_tensorized(sch.func, r) for r in readers):
            return []  # the operand of a micro-kernel stays a whole, packed copy
        if any(_packs_for_micro_kernel(sch.func, r) for r in readers):
            return []  # and so does what its packing copy reads (attention's softmax rows before P V)
        _, loops = compute_location_candidates(sch.func, block, stop_after=0)  # the outermost legal loop
        if loops and _extent_of(sch.func, loops[0]) == 1:   # nothing gained there, and no parallel root loop
            _, loops = compute_location_candidates(sch.func, block)
            loops = [v for v in loops if _extent_of(sch.func, v) != 1]
        if not loops:
            return []

        def move(s: Schedule) -> None:
            s.compute_at(s.get_block(block), _loop_handle(s, readers, loops[0]))

        if info.is_spatial and not info.expensive:
            return [move, lambda s: None]   # a cheap copy (padding) may as well be a pass of its own
        return [move]


def _loop_handle(s: Schedule, readers: list[str], var):
    """The handle of loop `var` around one of the blocks `readers`."""
    for reader in readers:
        for h in s.get_loops(s.get_block(reader)):
            if h.var is var:
                return h
    raise ScheduleError(f"compute-location: the loop {var.name} is not around a reader of the block")


def _packs_for_micro_kernel(func, name: str) -> bool:
    """The block is a spatial copy whose every reader is tensorized (a micro-kernel's packing)."""
    info = block_info(func, name)
    readers = consumers(func, name)
    return info.is_spatial and bool(readers) and all(_tensorized(func, r) for r in readers)


def _tensorized(func, name: str) -> bool:
    return any(k == TENSOR_INTRIN for k, _ in block_info(func, name).block.annotations)


def _is_tuned(info) -> bool:
    """A block that an earlier rule already scheduled (tensorized, tiled or annotated)."""
    return any(k.startswith(("tdsl.", "auto.")) for k, _ in info.block.annotations)


def reduction_lanes(extent: int, lanes: int) -> list[int]:
    """The vector lengths a reduction of `extent` can be split by: multiples of the vector width
    (powers of two up to 4 vectors) that divide the extent at least twice."""
    out = [v for v in (lanes * 4, lanes * 2, lanes, lanes // 2) if v >= 2 and extent % v == 0 and extent >= 2 * v]
    return out


class VectorReduction(Rule):
    """rfactor the innermost reduced loop into a vector of partial results; see the module docstring."""

    name = "vector-reduction"

    def alternatives(self, sch: Schedule, block: str) -> list:
        info = block_info(sch.func, block)
        if info.is_spatial or info.store is None or _is_tuned(info) or not info.loops or not info.top_level:
            return []
        last = info.loops[-1]
        inner = next((it for it in info.iters if it.loop is last), None)
        if inner is None or inner.kind != "R" or info.loop_extents[-1] is None:
            return []
        if any(it.kind == "R" and it.loop is None for it in info.iters):
            return []
        if vector_obstacle(info.block, inner.var) is not None:
            return []   # its loads along the reduction are not contiguous (int8 GEMM's B[k, j])
        choices = reduction_lanes(info.loop_extents[-1], self.hw.lanes)
        if not choices:
            return []
        lanes = self.hw.lanes
        wide = [v for v in choices if v >= 2 * lanes and v % lanes == 0]
        if not wide:
            return [lambda s: self._rfactor(s, block, choices, 0)]
        return [lambda s: self._rfactor(s, block, wide, lanes)]

    def _rfactor(self, s: Schedule, block: str, choices: list[int], combine: int) -> None:
        """rfactor by a sampled width from `choices`; with `combine`, the partials are then
        combined `combine` at a time as vectors (a second rfactor, its steps unrolled) instead
        of in one scalar chain per row (measured ~20% on softmax's 32 partials)."""
        rf = self._vector_step(s, block, self.choose(s, choices, 0))
        if combine:
            second = self._vector_step(s, block, combine)
            s.unroll(s.get_loops(second)[-2])
        del rf
        s.annotate(s.get_block(block), AUTO_SCHEDULED, True)

    def _vector_step(self, s: Schedule, block: str, lanes):
        blk = s.get_block(block)
        loops = s.get_loops(blk)
        _, vec = s.split(loops[-1], [None, lanes])
        rf = s.rfactor(vec, len(loops) - 1)
        rf_loops = s.get_loops(rf)
        init = s.decompose_reduction(rf, rf_loops[-2])
        s.vectorize(s.get_loops(init)[-1])
        s.vectorize(s.get_loops(rf)[-1])
        s.annotate(rf, AUTO_SCHEDULED, True)
        return rf


def _perfect_prefix(func, loop_vars) -> list:
    """The outer loops of `loop_vars` that form a perfect nest (each the only statement of the one before)."""
    out = []
    for var in loop_vars:
        out.append(var)
        if not isinstance(loop_node(func, var).body, For):
            break
    return out


def _extent_of(func, var) -> int | None:
    ext = loop_node(func, var).extent
    return int(ext.value) if isinstance(ext, IntImm) else None


def _product(func, loop_vars) -> float:
    """The iterations of the loops `loop_vars` together (a symbolic extent counts as many)."""
    total = 1.0
    for var in loop_vars:
        ext = _extent_of(func, var)
        total *= float("inf") if ext is None else ext
    return total


def _kind_of(func, var) -> str:
    return loop_node(func, var).kind


def attempt(s: Schedule, steps) -> bool:
    """Run `steps(s)` if it succeeds on a copy (then the same steps, same decisions, on `s`)."""
    trial = s.copy()
    try:
        steps(trial)
    except ScheduleError:
        return False
    steps(s)
    return True


def legal_parallel_prefix(func, block: str, count_from: Schedule) -> int:
    """How many outer loops of `block`'s perfect nest can be fused and run in parallel."""
    info = block_info(func, block)
    prefix = _perfect_prefix(func, info.loops)
    n = 0
    for k in range(1, len(prefix) + 1):
        def par(t: Schedule, k=k) -> None:
            loops = t.get_loops(t.get_block(block))[:k]
            t.parallel(t.fuse(*loops) if k > 1 else loops[0])
        trial = count_from.copy()
        try:
            par(trial)
        except ScheduleError:
            break
        n = k
    return n


class ParallelVectorizeUnroll(Rule):
    """Parallel outer loops, vectorized inner loops, a sampled unroll depth; see the module docstring."""

    name = "parallel-vectorize-unroll"

    def __init__(self, hw, defaults: bool = True, tasks_per_core: int = 8):
        super().__init__(hw, defaults)
        self.tasks_per_core = tasks_per_core

    def alternatives(self, sch: Schedule, block: str) -> list:
        info = block_info(sch.func, block)
        if not info.top_level or not info.loops:
            return []

        def make(s: Schedule):
            self._parallel(s, block)
            for name in blocks_in_nest(s.func, block):
                self._vectorize_block(s, name)
            self._stream(s, block)

        return [make]

    # parallel -----------------------------------------------------------------------------
    def _parallel(self, s: Schedule, block: str) -> None:
        info = block_info(s.func, block)
        if _kind_of(s.func, info.loops[0]) != "serial":
            return
        n_legal = legal_parallel_prefix(s.func, block, s)
        if not n_legal:
            return
        want = self.hw.cores * self.tasks_per_core
        total, default = 1, n_legal
        for n, var in enumerate(info.loops[:n_legal], start=1):
            ext = _extent_of(s.func, var)
            if ext is None:
                default = n
                break
            total *= ext
            if total >= want:
                default = n
                break
        # never a fused loop that runs once (a batch of 1)
        first = next(n for n in range(1, n_legal + 1) if n == n_legal or _product(s.func, info.loops[:n]) >= 2)
        n = max(default, first)
        loops = s.get_loops(s.get_block(block))[:n]
        fused = s.fuse(*loops) if n > 1 else loops[0]
        s.parallel(fused)
        # a scalar register tile (MultiLevelTilingCPU's SCALAR_TILE) is unrolled whole: straight-line
        # code that LLVM's SLP vectorizer packs
        scalar_tile = any(k == SCALAR_TILE for name in blocks_in_nest(s.func, block)
                          for k, _ in block_info(s.func, name).block.annotations)
        depth = self.choose(s, UNROLL_STEPS, len(UNROLL_STEPS) - 1 if scalar_tile else 1)
        s.annotate(fused, AUTO_UNROLL, depth)

    # streaming stores ---------------------------------------------------------------------
    def _stream(self, s: Schedule, block: str) -> None:
        """Outputs larger than the caches, written once by a spatial block, get streaming
        stores (`tdsl.nontemporal`: their lines are not read first); a sampled yes / no."""
        info = block_info(s.func, block)
        if not info.is_spatial or not info.writes_output or len(info.writes) != 1:
            return   # (a tensorized step, such as RowPrefetch's, has no single store but one write)
        if consumers(s.func, block):
            return   # read again in this function (a decomposed reduction's init): keep it cached
        out = info.writes[0]
        size = out.dtype.itemsize
        for e in out.shape:
            if not isinstance(e, IntImm):
                return
            size *= int(e.value)
        if size <= self.hw.l2 * self.hw.cores * 2:
            return
        # the sampled value is the annotation (0: plain stores), so a replay follows the decision
        s.annotate(s.get_block(block), NONTEMPORAL, self.choose(s, [1, 0], 0))

    # vectorize ----------------------------------------------------------------------------
    def _vectorize_block(self, s: Schedule, name: str) -> None:
        info = block_info(s.func, name)
        if not info.loops or _is_tuned(info) or info.store is None:
            return
        last = info.loops[-1]
        if _kind_of(s.func, last) != "serial":
            return
        inner = next((it for it in info.iters if it.loop is last), None)
        if inner is None or inner.kind != "S":
            return
        idx = info.store.indices
        if not idx or idx[-1] is not inner.var:
            return
        if any(c.op == "if_then_else" for c in collect(info.block.body, Call)):
            return  # a guarded load (padding) stays scalar: lowering cannot vectorize it safely
        if vector_obstacle(info.block, inner.var) is not None:
            return  # a transpose, a gather, a clamped index: lowering would leave it scalar
        extent = info.loop_extents[-1]
        lanes = self.hw.lanes
        if extent is not None and extent <= lanes * 4:   # a short row: one vector operation, no decision
            attempt(s, lambda t: t.vectorize(t.get_loops(t.get_block(name))[-1]))
            return
        choices = [v for v in (lanes * 4, lanes * 2, lanes) if extent is None or extent > v]
        default = 0
        if extent is not None:
            dividing = [k for k, v in enumerate(choices) if extent % v == 0]
            default = dividing[0] if dividing else len(choices) - 1

        def vec(t: Schedule) -> None:
            _, v = t.split(t.get_loops(t.get_block(name))[-1], [None, self.choose(t, choices, default)])
            t.vectorize(v)

        attempt(s, vec)


__all__ = ["SCALAR_TILE", "UNROLL_STEPS", "ComputeLocation", "ParallelVectorizeUnroll", "VectorReduction", "attempt", "index_of"]
