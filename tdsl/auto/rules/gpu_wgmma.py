"""`GPUWgmmaPipeline`: fp16 / bf16 (batched) GEMMs on Hopper's pipeline (target arch sm_90a).

For ``target="cuda -arch=sm_90a"`` (``tdsl.auto_schedule(f, "cuda", arch="sm_90a")``) a function
whose one block is ``C[b?, i, j] += f32(A[b?, i, k]) * f32(B[b?, k, j] or B[b?, j, k])`` (fp16 or
bf16 A and B, fp32 C, constant sizes, m a multiple of 64), or whose GEMM block is followed by one
elementwise epilogue ``D[b?, i, j] = f(C[b?, i, j], ...)`` (C an intermediate; fused into the
kernel's store), becomes::

    sch.wgmma_pipeline(C, tile_n, tile_k, stages, tile_m, store)   # TMA -> swizzled ring -> wgmma m64nNk16
    sch.warp_specialize(ko)              # producer warpgroup (TMA) + consumer warpgroups (setmaxnreg 40 / 232)

(`tdsl.schedule.primitives.hopper`). tile_n, tile_k, stages and tile_m (64: one consumer
warpgroup, 128: two) are sampled (one sampling step each) among the tiles that divide the sizes
and fit the shared memory a block may have (227 KiB on sm_90: dynamic shared memory); the default
is 128 x 128 (two consumer warpgroups) with 64-wide K steps (128-byte rows: the 128B swizzle), four
stages deep (three, or 64 x 64 tiles, where the sizes allow no more). `store` (sampled too): "tma"
(the output tile through shared memory, one TMA store) where the output is float32 / float16 /
bfloat16 and its tile fits beside the ring, else "direct" (each thread stores its accumulators).
Other architectures, and blocks it does not fit, are
left to `GPUMmaTiling` (mma.sync) and the rules after it; on sm_90a a fp16/bf16 GEMM left to them
carries a `kernel.notes` line saying why.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir.attrs import LOWER_NOTE
from ...schedule import Schedule
from ...schedule.primitives.hopper import BLOCK_M, MAX_SHARED, match_gemm, out_tile_bytes, store_problem
from ..analysis import block_info, top_level_blocks
from .base import Rule
from .gpu_mma import gemm_roles

ARCH = "sm_90a"
# (tile_n, tile_k, stages, tile_m), best guess first. With dynamic shared memory (an sm_90 block may
# have 227 KiB): 128 x 128 tiles for two consumer warpgroups, 128-byte rows (the 128B swizzle), four
# then three stages deep (128 and 96 KiB), and 64 x 64 tiles four deep; then what fits the 48 KiB of
# static shared memory: 64 x 64 two deep, 128 x 128 with 64-byte rows, wider n tiles
DYNAMIC_CONFIGS = ((128, 64, 4, 128), (128, 64, 3, 128), (64, 64, 4, 64))
STATIC_CONFIGS = ((64, 64, 2, 64), (128, 32, 2, 128), (128, 32, 3, 64), (64, 32, 3, 128), (128, 32, 2, 64),
                  (32, 64, 2, 64), (64, 32, 2, 64), (16, 64, 2, 64))
CONFIGS = DYNAMIC_CONFIGS + STATIC_CONFIGS
FALLBACK_NOTE = ("block {block!r}: not on the sm_90a wgmma pipeline ({why}); left to the sm_80 rules "
                 "(mma.sync: ldmatrix + mma m16n8k16, where they take it)")


def configs(m: int, n: int, k: int, max_shared: int = MAX_SHARED) -> list[tuple[int, int, int, int]]:
    """The (tile_n, tile_k, stages, tile_m) that fit a GEMM of these sizes (stages at most its K
    steps) in `max_shared` bytes of shared memory per block."""
    out = []
    for tn, tk, s, tm in CONFIGS:
        s = min(s, k // tk) if k % tk == 0 else 0
        fits = s >= 1 and m % tm == 0 and n % tn == 0 and s * (tm + tn) * tk * 2 + 16 * s <= max_shared
        if fits and (tn, tk, s, tm) not in out:
            out.append((tn, tk, s, tm))
    return out


class GPUWgmmaPipeline(Rule):
    """fp16 / bf16 (batched) GEMMs -> TMA + mbarrier + wgmma, warp-specialized (sm_90a only)."""

    name = "wgmma-pipeline-gpu"

    def alternatives(self, sch: Schedule, block: str) -> list:
        if not self.hw.is_gpu or self.hw.arch != ARCH:
            return []
        # blocks come consumers first: a GEMM followed by one block (its epilogue, or what
        # match_gemm refuses as one) is taken, or noted, at that block, before the rules after
        # this one schedule it; the GEMM's own turn then finds it done
        names = top_level_blocks(sch.func)
        if len(names) == 2 and block == names[1]:
            block = names[0]
        elif _noted(sch, block):
            return []
        try:
            g = match_gemm(sch.func, block, "wgmma_pipeline")
        except ScheduleError as exc:
            why = self._why_not(sch, block, str(exc))
            return [] if why is None else [lambda s: self._note(s, block, why)]
        fits = configs(g.m, g.n, g.k, min(self.hw.max_shared, MAX_SHARED))
        if not fits:
            why = f"m = {g.m} must be a multiple of {BLOCK_M} and n, k multiples of a tile"
            return [lambda s: self._note(s, block, why)]
        # the output by TMA (a shared tile, one bulk store) first where it can go so and the default
        # tiles leave room for its tile; else the threads' stores first
        limit = min(self.hw.max_shared, MAX_SHARED)
        tn, tk, st, tm = fits[0]
        tma_fits = st * (tm + tn) * tk * 2 + 16 * st + out_tile_bytes(g, tm, tn) <= limit
        stores = [] if store_problem(g) is not None else ["tma", "direct"] if tma_fits else ["direct", "tma"]
        return [lambda s: self._pipeline(s, block, fits, stores)]

    def _pipeline(self, s: Schedule, block: str, fits: list, stores: list) -> None:
        # one sampling step per parameter, passed on as is, so that a replay with other decisions
        # (a search) builds other tiles; a combination that does not fit is refused by the step
        values = []
        for axis in range(4):
            candidates = list(dict.fromkeys(f[axis] for f in fits))
            values.append(self.choose(s, candidates, candidates.index(fits[0][axis])))
        tile_n, tile_k, stages, tile_m = values
        store = self.choose(s, stores, 0) if stores else "direct"
        ko = s.wgmma_pipeline(s.get_block(block), tile_n=tile_n, tile_k=tile_k, stages=stages, tile_m=tile_m,
                              store=store)
        s.warp_specialize(ko)

    @staticmethod
    def _why_not(sch: Schedule, block: str, message: str) -> str | None:
        """Why a block the mma.sync rule would take is not a pipeline block; None for other blocks."""
        info = block_info(sch.func, block)
        roles = gemm_roles(info) if info.top_level else None
        if roles is None or str(roles.a.dtype) not in ("float16", "bfloat16"):
            return None
        first = message.splitlines()[0]
        return first.split(": ", 2)[-1] if ": " in first else first

    @staticmethod
    def _note(s: Schedule, block: str, why: str) -> None:
        s.annotate(s.get_block(block), LOWER_NOTE, FALLBACK_NOTE.format(block=block, why=why))


def _noted(sch: Schedule, block: str) -> bool:
    """This rule already said why `block` is not on the pipeline (at its epilogue's turn)."""
    from ...schedule.tree import find_block

    realize, _ = find_block(sch.func, block, "auto")
    return any(k == LOWER_NOTE and "not on the sm_90a wgmma pipeline" in str(v) for k, v in realize.block.annotations)
