"""GPU rules: every loop nest becomes a kernel with bound threads.

* `GPUWmmaTiling`: fp16 GEMMs with fp32 accumulation on tensor cores (see its docstring).
* `GPUMatmulTiling`: a reduction block with two or more spatial loops and constant extents
  (GEMM, batched matmul, convolutions) is tiled TVM's classic way: the last two spatial loops
  split into (blockIdx, threadIdx, per-thread) tiles (`sample_perfect_tile`), the largest
  reduction loop into (k-tile, k-step); the operands are staged per k-tile in shared memory
  (`cache_read(..., "shared")` + `compute_at` the k-tile loop, the copy fused and spread over
  the block's threads), the results accumulated in a per-thread register tile
  (`cache_write(..., "local")` + `reverse_compute_at` the threadIdx loop). Other spatial loops
  are fused into blockIdx.y.
* `GPUBind`: any other root loop nest: its outer spatial loops (those `parallel` accepts) are
  fused and split by a sampled thread count into blockIdx.x / threadIdx.x; reductions stay
  serial inside each thread. A nest whose loops cannot be bound runs in one thread
  (a unit loop bound to blockIdx.x and threadIdx.x), correct but slow.
* `GPUCrossThreadReduction`: a row reduction gets one thread block per output row, its
  reduction loop bound to threadIdx.x (the CUDA backend's cross-thread reduction: in-thread
  partials, warp shuffles, shared memory).

Defaults: per-thread tiles of up to 4 x 4, 8 x 8 to 16 x 16 threads per block, k-tiles of 8
(shared tiles well under `Hardware.max_shared`), 256 threads for elementwise kernels.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir.attrs import AUTO_SCHEDULED
from ...schedule import Schedule
from ..analysis import block_info
from .base import Rule
from .cpu_loops import _extent_of, _kind_of, legal_parallel_prefix


def _divisor(n: int, candidates) -> int:
    return next((c for c in candidates if n % c == 0), 1)


def gpu_tile(n: int, max_threads: int = 16) -> list[int]:
    """[blocks, threads, per-thread] for a spatial extent n: the default decision."""
    r = _divisor(n, (4, 2, 1))
    t = _divisor(n // r, tuple(d for d in (16, 8, 4, 2) if d <= max_threads) + (1,))
    return [n // (t * r), t, r]


class GPUMatmulTiling(Rule):
    """Shared-memory tiling with a register accumulator; see the module docstring."""

    name = "multi-level-tiling-gpu"

    def alternatives(self, sch: Schedule, block: str) -> list:
        info = block_info(sch.func, block)
        if (info.is_spatial or len(info.spatial) < 2 or not info.simple_bindings or not info.constant_extents
                or not info.top_level or info.store is None):
            return []
        return [lambda s: self._tile(s, block)]

    def _tile(self, s: Schedule, block: str) -> None:
        c = s.get_block(block)
        info = block_info(s.func, block)
        handles = s.get_loops(c)
        kinds = {id(it.loop): it.kind for it in info.iters}
        spatial = [h for h in handles if kinds[id(h.var)] == "S"]
        reduce_ = [h for h in handles if kinds[id(h.var)] == "R"]
        li, lj = spatial[-2], spatial[-1]
        others = spatial[:-2]
        ext = {id(h.var): _extent_of(s.func, h.var) for h in handles}
        lk = max(reduce_, key=lambda h: ext[id(h.var)])
        other_r = [h for h in reduce_ if h is not lk]
        fi = s.sample_perfect_tile(li, 3, max_innermost_factor=4,
                                   decision=gpu_tile(ext[id(li.var)]) if self.defaults else None)
        fj = s.sample_perfect_tile(lj, 3, max_innermost_factor=4,
                                   decision=gpu_tile(ext[id(lj.var)]) if self.defaults else None)
        kext = ext[id(lk.var)]
        fk = s.sample_perfect_tile(lk, 2, max_innermost_factor=16,
                                   decision=[kext // _divisor(kext, (8, 4, 2, 1)), _divisor(kext, (8, 4, 2, 1))]
                                   if self.defaults else None)
        threads = int(fi[1]) * int(fj[1])
        tile_elems = (int(fi[1]) * int(fi[2]) + int(fj[1]) * int(fj[2])) * int(fk[1])
        if threads > self.hw.max_threads or tile_elems * 4 > self.hw.max_shared:
            raise ScheduleError(f"multi-level-tiling-gpu: {threads} threads or {tile_elems * 4} bytes of shared "
                                f"memory per block exceed the limits ({self.hw.max_threads}, {self.hw.max_shared})")
        by, ty, ti = s.split(li, fi)
        bx, tx, tj = s.split(lj, fj)
        ko, ki = s.split(lk, fk)
        s.reorder(*others, by, bx, ty, tx, ko, *other_r, ki, ti, tj)
        if others:
            by = s.fuse(*others, by)
        s.bind(by, "blockIdx.y")
        s.bind(bx, "blockIdx.x")
        s.bind(ty, "threadIdx.y")
        s.bind(tx, "threadIdx.x")
        for buf in sorted({r.name for r in info.reads if r.name != info.store.buffer.name}):
            shared = s.cache_read(c, buf, "shared")
            s.compute_at(shared, ko)
            copy = s.get_loops(shared)[5:]
            if not copy:
                raise ScheduleError(f"multi-level-tiling-gpu: the shared copy of {buf} is one element per tile "
                                    "(no loop to spread over the threads); choose larger tiles")
            fused = s.fuse(*copy) if len(copy) > 1 else copy[0]
            _, fy, fx = s.split(fused, [None, fi[1], fj[1]])
            s.bind(fy, "threadIdx.y")
            s.bind(fx, "threadIdx.x")
        local = s.cache_write(c, 0, "local")
        s.reverse_compute_at(local, tx)
        s.annotate(s.get_block(block), AUTO_SCHEDULED, True)


class GPUBind(Rule):
    """Bind a root loop nest's outer spatial loops to blockIdx.x / threadIdx.x; see the module docstring."""

    name = "gpu-bind"

    def alternatives(self, sch: Schedule, block: str) -> list:
        info = block_info(sch.func, block)
        if not info.top_level:
            return []
        if info.loops and _kind_of(sch.func, info.loops[0]) == "thread_binding":
            return []
        return [lambda s: self._bind(s, block)]

    def _bind(self, s: Schedule, block: str) -> None:
        info = block_info(s.func, block)
        n = legal_parallel_prefix(s.func, block, s)
        if not n:
            self._one_thread(s, block)
            return
        total = 1
        for var in info.loops[:n]:
            e = _extent_of(s.func, var)
            total = None if e is None or total is None else total * e
        choices = [256, 128, 512, 64, 1024, 32]
        default = 0
        if total is not None:
            fitting = [k for k, t in enumerate(choices) if t <= max(total, 32)]
            default = fitting[0] if fitting else len(choices) - 1
        threads = self.choose(s, choices, default)
        loops = s.get_loops(s.get_block(block))[:n]
        fused = s.fuse(*loops) if n > 1 else loops[0]
        bx, tx = s.split(fused, [None, threads])
        s.bind(bx, "blockIdx.x")
        s.bind(tx, "threadIdx.x")

    def _one_thread(self, s: Schedule, block: str) -> None:
        root = s.get_loops(s.get_block(block))
        if not root:
            raise ScheduleError(f'gpu-bind: block "{block}" has no loop to bind')
        one_block, one_thread, _ = s.split(root[0], [1, 1, None])
        s.bind(one_block, "blockIdx.x")
        s.bind(one_thread, "threadIdx.x")


def _split_last_by_16(s: Schedule, block) -> None:
    """Split a fragment copy's rows x (16 * t) loops into t tiles of 16 x 16 (tile loop outermost)."""
    rows, cols = s.get_loops(block)[-2:]
    co, ci = s.split(cols, [None, 16])
    s.reorder(co, rows, ci)


class GPUWmmaTiling(Rule):
    """Tensor cores for fp16 x fp16 -> fp32 GEMMs: `C[i, j] += f32(A[i, k]) * f32(B[k, j])` with
    m, k multiples of 16 and n of 16 is tiled TVM's WMMA way (tdsl.intrinsics.cuda): a thread
    block computes (warps x 16) x (t x 16) of C, its warps on threadIdx.y each accumulating a
    16 x (t x 16) strip in `wmma.accumulator` fragments (`cache_write` + `reverse_compute_at`),
    A and B loaded per 16-step of k into `wmma.matrix_a` / `wmma.matrix_b` fragments
    (`cache_read` + `compute_at`), and the fill, loads, multiply-accumulate and store
    `tensorize`d with the WMMA intrinsics. Warps per block (1, 2, 4) and t (1, 2) are sampled."""

    name = "wmma-tiling-gpu"

    def alternatives(self, sch: Schedule, block: str) -> list:
        from ..analysis import matmul_roles

        if not self.hw.is_gpu:
            return []
        info = block_info(sch.func, block)
        roles = matmul_roles(info)
        if roles is None or not info.simple_bindings or not info.constant_extents or not info.top_level:
            return []
        if (str(roles.a.dtype), str(roles.b.dtype), str(roles.c.dtype)) != ("float16", "float16", "float32"):
            return []
        if len(roles.c_indices) != 2 or len(info.iters) != 3 or len(roles.a_indices) != 2:
            return []
        if roles.a_indices[0] is not roles.i.var or roles.b_indices[0] is not roles.k.var:
            return []
        m, n, k = roles.i.extent, roles.j.extent, roles.k.extent
        if m % 16 or n % 16 or k % 16:
            return []
        warps = [w for w in (2, 1, 4) if m % (16 * w) == 0]
        tiles = [t for t in (2, 1) if n % (16 * t) == 0]
        return [lambda s: self._tile(s, block, roles, warps, tiles)]

    def _tile(self, s: Schedule, block: str, roles, warps, tiles) -> None:
        from ...intrinsics import cuda as wmma

        c = s.get_block(block)
        info = block_info(s.func, block)
        by_loop = {id(it.var): it.loop for it in info.iters}
        handles = {id(h.var): h for h in s.get_loops(c)}
        li, lj, lk = (handles[id(by_loop[id(r.var)])] for r in (roles.i, roles.j, roles.k))
        w = self.choose(s, warps, 0)
        t = self.choose(s, tiles, 0)
        bi, ty, ii = s.split(li, [None, w, 16])
        bj, jo, jj = s.split(lj, [None, t, 16])
        ko, ki = s.split(lk, [None, 16])
        s.reorder(bi, bj, ty, ko, jo, ii, jj, ki)
        s.bind(bi, "blockIdx.y")
        s.bind(bj, "blockIdx.x")
        s.bind(ty, "threadIdx.y")
        acc = s.cache_write(c, 0, "wmma.accumulator")
        s.reverse_compute_at(acc, ty)
        frag_a = s.cache_read(c, roles.a.name, "wmma.matrix_a")
        s.compute_at(frag_a, ko)
        frag_b = s.cache_read(c, roles.b.name, "wmma.matrix_b")
        s.compute_at(frag_b, ko)
        init = s.decompose_reduction(c, ko)
        s.tensorize(s.get_loops(init)[-2], wmma.FILL)
        s.tensorize(s.get_loops(frag_a)[-2], wmma.load_a("global"))
        _split_last_by_16(s, frag_b)
        s.tensorize(s.get_loops(frag_b)[-2], wmma.load_b("global"))
        s.tensorize(s.get_loops(c)[-3], wmma.MMA)
        _split_last_by_16(s, acc)
        s.tensorize(s.get_loops(acc)[-2], wmma.store("global"))


class GPUCrossThreadReduction(Rule):
    """A row reduction (spatial loops outside, one reduction loop of constant extent >= a warp
    innermost) becomes one thread block per output: the spatial loops fused on blockIdx.x, the
    reduction split by a sampled thread count on threadIdx.x -- a cross-thread reduction
    (in-thread partials, warp shuffles, shared memory; see the CUDA backend)."""

    name = "cross-thread-reduction-gpu"

    def alternatives(self, sch: Schedule, block: str) -> list:
        if not self.hw.is_gpu:
            return []
        info = block_info(sch.func, block)
        if (info.is_spatial or not info.simple_bindings or not info.top_level or info.store is None
                or len(info.reduction) != 1 or not info.spatial):
            return []
        kinds = [next(it.kind for it in info.iters if it.loop is v) for v in info.loops]
        if kinds[-1] != "R" or "R" in kinds[:-1] or info.loop_extents[-1] is None:
            return []
        extent = info.loop_extents[-1]
        threads = [t for t in (256, 128, 64, 32) if t <= self.hw.max_threads and extent % t == 0]
        if not threads:
            return []
        return [lambda s: self._bind(s, block, threads)]

    def _bind(self, s: Schedule, block: str, threads: list[int]) -> None:
        loops = s.get_loops(s.get_block(block))
        t = self.choose(s, threads, 0)
        _, lanes = s.split(loops[-1], [None, t])
        spatial = loops[:-1]
        bx = s.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        s.bind(bx, "blockIdx.x")
        s.bind(lanes, "threadIdx.x")
