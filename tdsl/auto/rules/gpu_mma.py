"""`GPUMmaTiling`: fp16 / bf16 / int8 / uint8 GEMMs on the tensor cores the way fast kernels do it (sm_80).

``C[i, j] += f32(A[i, k]) * f32(B[k, j])`` (fp16 or bf16 operands, fp32 accumulation; B may
also be indexed ``B[j, k]``), ``C[i, j] += i32(A[i, k]) * i32(B[j, k])`` (int8 or uint8 operands,
int32 accumulation, B stored n-major as the int8 mma takes it), each optionally batched
(``C[b, i, j]`` with ``A[b, i, k]`` and ``B[b, ...]`` or a B shared by the batch; several batch
axes, such as attention's batch and heads, are fused onto blockIdx.z), with m and n
multiples of the block tile and k of the k step (32 elements, 64 for int8) becomes::

    batch (blockIdx.z)
      block tile (bm x bn, blockIdx.y / blockIdx.x)
        warp tile (wm x wn, warps on threadIdx.z / threadIdx.y; lanes the implicit threadIdx.x)
          per k step:
            A, B tiles -> shared memory, copied by the whole block 16 bytes per thread (8 halves,
                          16 int8), each row's 16-byte chunks XOR-swizzled (cuda_mma.swizzle) so
                          ldmatrix is free of bank conflicts
            A, B fragments <- ldmatrix (mma_ldmatrix_{f16,bf16,i8}_{a,b,b_trans}), per-lane registers
            mma.sync m16n8k16 (mma_{f16f16,bf16bf16}f32[_trans]) / m16n8k32 (mma_{i8i8,u8u8}i32_trans)
        accumulators -> C (mma_store_16x16_{f32,i32}_global_)

The ko loop carries TVM's software-pipeline annotations (copies of step k + 1 as cp.async, in
flight while step k computes; for a target naming its arch, whose block may have more than 48 KiB
of shared memory, the depth is sampled among 2, 3 and 4 stages, default 3: steps k + 1 and k + 2
in flight) for the pass that lowers them. The block tile (128 x 128 with
2 x 4 warps of 64 x 32, 64 x 64 with 2 x 2 warps of 32 x 32, or 64 x 32 with 2 x 2 warps of
32 x 16; the first that divides m and n is the default) is sampled one parameter per step
(`tile_choices`: warps along m, warp tile rows, warps along n, warp tile cols, each value passed
as is to the splits and thread bindings), so a replay with other decisions builds that tile::

    v1 = sch.sample_categorical(candidates=[64, 32], probs=[1.0, 1.0], decision=0)   # warp rows
    v2 = sch.sample_categorical(candidates=[4, 2], probs=[1.0, 1.0], decision=0)     # warps along n
    v3 = sch.sample_categorical(candidates=[32, 16], probs=[1.0, 1.0], decision=0)   # warp cols
    l8, l9, l10 = sch.split(l5, factors=[None, 2, v1])
    l11, l12, l13 = sch.split(l6, factors=[None, v2, v3])

A search combines the values (128 x 64, 64 x 128, 128 x 32 ...); only values whose every
combination fits the sizes are offered. Blocks it does not fit
(other dtypes, int8 with B indexed [k, j], sizes not multiples of the tile) are left to
`GPUWmmaTiling` / `GPUMatmulTiling`; a fp16 / bf16 / int8 GEMM among them gets a note in
`kernel.notes` saying why. `tile_mma` is the tiling itself, shared with `GPUMmaConv` (conv2d as
an implicit GEMM, `gpu_mma_conv`), whose operands arrive already staged in shared memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Any

from ...ir import Binary, BufferLoad, Cast, Var, free_vars
from ...schedule import Schedule
from ..analysis import BlockInfo, Iter, block_info
from .base import Rule

# (block rows, block cols, warp rows, warp cols)
CONFIGS = ((128, 128, 64, 32), (64, 64, 32, 32), (64, 32, 32, 16))
# operand dtype -> (intrinsic dtype, accumulator dtype, intrinsic accumulator, k of one mma tile,
# elements per 16-byte copy)
_DTYPES = {"float16": ("f16", "float32", "f32", 16, 8), "bfloat16": ("bf16", "float32", "f32", 16, 8),
           "int8": ("i8", "int32", "i32", 32, 16), "uint8": ("u8", "int32", "i32", 32, 16)}
K_TILES = 2    # mma tiles of k per k step: 32 halves or 64 int8 (64-byte shared rows)
STAGES = (2, 3, 4)   # pipeline depths (copies of step k + depth - 1 in flight while step k computes)
DEFAULT_STAGES = 3   # with the arch's shared memory known: 48 KiB for 128 x 128 tiles, 64 KiB four deep


@dataclass(frozen=True)
class GemmRoles:
    """A (batched) GEMM block: its iterators and operands."""

    i: Iter
    j: Iter
    k: Iter
    batch: Iter | None
    a: Any       # Buffers
    b: Any
    c: Any
    trans_b: bool   # B indexed [..., j, k]
    batches: tuple[Iter, ...] = ()   # every batch iterator, outer to inner (`batch` is the first)


def _load(e) -> BufferLoad | None:
    while isinstance(e, Cast):
        e = e.value
    return e if isinstance(e, BufferLoad) else None


def gemm_roles(info: BlockInfo, max_batch: int = 1) -> GemmRoles | None:
    """The roles when the block is ``C[b?, i, j] += cast(A[b?, i, k]) * cast(B[b?, k, j] or
    B[b?, j, k])`` with plain iterators as indices, else None; `b` is up to `max_batch`
    iterators (attention's ``[batch, head, ...]``: 2)."""
    store = info.store
    if store is None or not isinstance(store.value, Binary) or store.value.op != "add" or len(info.reduction) != 1:
        return None
    acc, prod = store.value.a, store.value.b
    if not (isinstance(acc, BufferLoad) and acc.buffer is store.buffer):
        acc, prod = prod, acc
    if not (isinstance(acc, BufferLoad) and acc.buffer is store.buffer and isinstance(prod, Binary)
            and prod.op == "mul" and all(x is y for x, y in zip(acc.indices, store.indices))):
        return None
    x, y = _load(prod.a), _load(prod.b)
    if x is None or y is None or x.buffer is y.buffer:
        return None
    by_var = {id(it.var): it for it in info.iters}
    c_iters = [by_var.get(id(e)) if isinstance(e, Var) else None for e in store.indices]
    if not 2 <= len(c_iters) <= 2 + max_batch or any(it is None or it.kind != "S" for it in c_iters) \
            or len(info.iters) != len(c_iters) + 1:
        return None
    *batches, i, j = c_iters
    (k,) = info.reduction
    assert i is not None and j is not None

    def is_(load: BufferLoad, *iters) -> bool:
        return len(load.indices) == len(iters) and all(e is it.var for e, it in zip(load.indices, iters))

    lead = tuple(batches)
    for a, b in ((x, y), (y, x)):
        if not is_(a, *lead, i, k):
            continue
        for trans in (False, True):
            mn = (j, k) if trans else (k, j)
            if is_(b, *lead, *mn) or is_(b, *mn):
                return GemmRoles(i, j, k, lead[0] if lead else None, a.buffer, b.buffer, store.buffer, trans,
                                 lead)  # type: ignore[arg-type]
    return None


def fits(m: int, n: int, dtype: str, config: tuple[int, int, int, int]) -> bool:
    """Whether the block tile `config` (bm, bn, wm, wn) divides m and n, its warp tiles the block
    tile (whole 16 x 16 mma tiles), and its block's threads (at most 1024) copy the shared tiles in
    whole 16-byte pieces."""
    bm, bn, wm, wn = config
    per_copy = _DTYPES[dtype][4]
    k_step = K_TILES * _DTYPES[dtype][3]
    if min(wm, wn) < 16 or wm % 16 or wn % 16 or bm % wm or bn % wn:
        return False
    threads = 32 * (bm // wm) * (bn // wn)
    return (threads <= 1024 and m % bm == 0 and n % bn == 0
            and all((rows * k_step // per_copy) % threads == 0 for rows in (bm, bn)))


def fitting_configs(m: int, n: int, dtype: str) -> list[tuple[int, int, int, int]]:
    """The block tiles (`CONFIGS`) that fit a GEMM of m x n (`fits`)."""
    return [c for c in CONFIGS if fits(m, n, dtype, c)]


def tile_choices(configs, m: int, n: int, dtype: str) -> list[list[int]]:
    """The values each tile parameter (warps along m, warp tile rows, warps along n, warp tile
    cols) may take, one sampling step each: those of `configs` (block tiles that fit, the default
    first), its first config's values first. A search changes the steps independently, so a value
    is offered only where every combination of the values offered is a tile that fits (`fits`):
    no replay with other decisions makes a tile the GEMM cannot take. With `CONFIGS` every
    combination fits, adding 128 x 64, 64 x 128, 128 x 32 ... tiles to the three listed."""
    def params(c):
        bm, bn, wm, wn = c
        return (bm // wm, wm, bn // wn, wn)

    axes: list[list[int]] = [[v] for v in params(configs[0])]
    for c in configs[1:]:
        grown = [a + [v] if v not in a else a for a, v in zip(axes, params(c))]
        if all(fits(m, n, dtype, (pm * wm, pn * wn, wm, wn)) for pm, wm, pn, wn in product(*grown)):
            axes = grown
    return axes


def stage_choices(k: int, dtype: str, max_shared: int) -> list[int]:
    """The pipeline depths offered for a GEMM with reduction extent `k`: 2 (what fits the 48 KiB of
    static shared memory with every block tile), and where the architecture's shared memory allows
    the largest tile that deep (a target naming its arch, e.g. "cuda -arch=sm_80": dynamic shared
    memory) 3 and 4, at most k's steps. The same list for every block tile, so that a search can
    replay a depth with another tile."""
    k_step = K_TILES * _DTYPES[dtype][3]
    # the largest block tile a search may sample (`tile_choices` combines the configs' parameters)
    values = [sorted({p[axis] for p in ((bm // wm, wm, bn // wn, wn) for bm, bn, wm, wn in CONFIGS)})[-1]
              for axis in range(4)]
    rows = values[0] * values[1] + values[2] * values[3]
    tile_bytes = rows * k_step * (1 if dtype in ("int8", "uint8") else 2)
    if max_shared <= 48 * 1024:
        return [2]
    return [d for d in STAGES if d == 2 or (d <= k // k_step and d * tile_bytes <= max_shared)]


def _tile(s: Schedule, block, sizes: tuple[int, ...]):
    """Split the last len(`sizes`) loops of `block` by `sizes`, those inner loops innermost;
    the first inner loop."""
    loops = s.get_loops(block)[-len(sizes):]
    outer, inner = [], []
    for lp, size in zip(loops, sizes):
        o, i = s.split(lp, [None, size])
        outer.append(o)
        inner.append(i)
    s.reorder(*outer, *inner)
    return inner[0]


def _tile_order(s: Schedule, stage) -> tuple[Any, Any]:
    """The copy block `stage`'s last two loops, reordered where needed so that the last one runs
    along the rows of the tile it writes (a reindex_cache_read copy repeats the iterators in the
    block's order, which may be the tile's columns first)."""
    rows, cols = s.get_loops(stage)[-2:]
    info = block_info(s.func, stage.name)
    assert info.store is not None
    values = dict(zip((iv.var for iv in info.block.iter_vars), info.realize.iter_values))
    last = values.get(info.store.indices[-1])   # type: ignore[call-overload]
    if last is not None and s.get(cols).loop_var not in free_vars(last) and s.get(rows).loop_var in free_vars(last):
        s.reorder(cols, rows)
        return cols, rows
    return rows, cols


class GPUMmaTiling(Rule):
    """fp16 / bf16 / int8 (batched) GEMMs -> shared staging, ldmatrix, mma.sync (see the module docstring)."""

    name = "mma-tiling-gpu"

    def alternatives(self, sch: Schedule, block: str) -> list:
        if not self.hw.is_gpu:
            return []
        info = block_info(sch.func, block)
        if not info.simple_bindings or not info.constant_extents or not info.top_level:
            return []
        roles = gemm_roles(info, max_batch=4)
        if roles is None:
            return []
        dt = str(roles.a.dtype)
        if dt not in _DTYPES or str(roles.b.dtype) != dt or str(roles.c.dtype) != _DTYPES[dt][1]:
            return []
        why = misfit(roles, dt)
        if why is not None:
            return [lambda s: note(s, block, f"GEMM block {block!r} is not on the tensor cores (mma.sync): {why}")]
        configs = fitting_configs(roles.i.extent, roles.j.extent, dt)   # type: ignore[arg-type]
        depths = stage_choices(roles.k.extent, dt, self.hw.max_shared)   # type: ignore[arg-type]

        def tile(s: Schedule) -> None:
            # the compute's stage (depth - 1), passed on as is: a replay follows a changed decision
            last = self.choose(s, [d - 1 for d in depths], depths.index(DEFAULT_STAGES)) if len(depths) > 1 else 1
            tile_mma(self, s, block, roles, configs, dt, last_stage=last)

        return [tile]


def misfit(roles: GemmRoles, dt: str) -> str | None:
    """Why a fp16 / bf16 / int8 GEMM does not fit the mma tiles, or None."""
    if dt in ("int8", "uint8") and not roles.trans_b:
        return "the int8 mma takes B stored n-major (B[j, k]); ldmatrix cannot transpose 8-bit elements"
    m, n, k = roles.i.extent, roles.j.extent, roles.k.extent
    if m is None or n is None or k is None:
        return "its extents are not constants"
    k_step = K_TILES * _DTYPES[dt][3]
    if k % k_step:
        return f"the reduction extent {k} is not a multiple of the k step ({k_step})"
    if not fitting_configs(m, n, dt):
        tiles = ", ".join(f"{bm} x {bn}" for bm, bn, _, _ in CONFIGS)
        return f"{m} x {n} is not a multiple of a block tile ({tiles})"
    return None


def note(s: Schedule, block: str, text: str) -> None:
    """Leave `text` in `kernel.notes` (a block annotation lowering collects); the block is
    unchanged. A note an earlier rule left there stays (the sm_90a rule's reason, then this
    one): the user sees every rule's reason."""
    from ...ir.attrs import LOWER_NOTE, with_note

    b = s.get_block(block)
    s.annotate(b, LOWER_NOTE, with_note(s.get(b).annotations, text))


def tile_mma(rule: Rule, s: Schedule, block: str, roles: GemmRoles, configs, dtype: str,
             staged: tuple[Any, Any] | None = None, vectorized: tuple[bool, bool] = (True, True),
             last_stage: Any = 1):
    """Tile the GEMM `block` onto mma.sync (the module docstring); returns the block-tile loops
    (rows, cols) and the warps along each. `staged`: the copy blocks that already fill `roles.a` / `roles.b` in shared
    memory (made by reindex_cache_read), else they are made here; `roles.c` in shared memory is
    stored there by the accumulator tiles (mma_store_16x16_*_shared_), else to global memory.
    `vectorized`: whether each operand's copy moves 16 bytes per thread (contiguous in the source).
    `last_stage`: the pipeline stage of the ldmatrix and mma (1: two stages; a sampled value keeps
    its tie to the trace)."""
    from ...intrinsics import cuda_mma as mma

    dt, _, acc_dt, k_mma, per_copy = _DTYPES[dtype]
    # one sampling step per tile parameter, each value passed on as is (the splits and thread
    # bindings below): a replay with other decisions builds that tile
    choices = tile_choices(configs, roles.i.extent, roles.j.extent, dtype)   # type: ignore[arg-type]
    warps_m, wm, warps_n, wn = (rule.choose(s, values, 0) if len(values) > 1 else values[0] for values in choices)
    c = s.get_block(block)
    info = block_info(s.func, block)
    by_loop = {id(it.var): it.loop for it in info.iters}
    handles = {id(h.var): h for h in s.get_loops(c)}
    li, lj, lk = (handles[id(by_loop[id(r.var)])] for r in (roles.i, roles.j, roles.k))
    bi, wi, ii = s.split(li, [None, warps_m, wm])
    bj, wj, jj = s.split(lj, [None, warps_n, wn])
    ko, ki = s.split(lk, [None, K_TILES * k_mma])
    batch = [handles[id(by_loop[id(b.var)])] for b in roles.batches]
    s.reorder(*batch, bi, bj, wi, wj, ko, ii, jj, ki)
    if batch:
        s.bind(s.fuse(*batch) if len(batch) > 1 else batch[0], "blockIdx.z")
    s.bind(bi, "blockIdx.y")
    s.bind(bj, "blockIdx.x")
    s.bind(wi, "threadIdx.z")
    s.bind(wj, "threadIdx.y")
    scopes = mma.I8_SCOPES if dt in ("i8", "u8") else mma.F16_SCOPES
    acc = s.cache_write(c, 0, scopes[2])
    s.reverse_compute_at(acc, wj)
    if staged is None:
        a_sh = s.cache_read(c, roles.a.name, "shared")
        b_sh = s.cache_read(c, roles.b.name, "shared")
        a_name, b_name = roles.a.name + "_shared", roles.b.name + "_shared"
    else:
        a_sh, b_sh = staged
        a_name, b_name = roles.a.name, roles.b.name
    fa = s.cache_read(c, a_name, scopes[0])
    fb = s.cache_read(c, b_name, scopes[1])
    s.compute_at(fa, ko)
    s.compute_at(fb, ko)
    for stage, vector in zip((a_sh, b_sh), vectorized):
        s.compute_at(stage, ko)
        rows, cols = _tile_order(s, stage)
        if vector:
            cols, vec = s.split(cols, [None, per_copy])
        _, tz, ty, tx = s.split(s.fuse(rows, cols), [None, warps_m, warps_n, 32])
        s.bind(tz, "threadIdx.z")
        s.bind(ty, "threadIdx.y")
        s.bind(tx, "threadIdx.x")
        if vector:
            s.vectorize(vec)
    mma.swizzle(s, a_sh)     # ldmatrix without bank conflicts, no padding
    mma.swizzle(s, b_sh)
    # TVM's software-pipeline annotations (lowered by inject_software_pipeline where the build
    # has it): the copies into shared memory of k steps s + 1 .. s + last_stage (cp.async) overlap
    # the ldmatrix and mma of k step s. The body of ko: A copy, A ldmatrix, B copy, B ldmatrix, mma.
    last = last_stage
    pipeline: dict[str, Any] = {"software_pipeline_stage": [0, last, 0, last, last],
                                "software_pipeline_order": [0, 2, 1, 3, 4],
                                "software_pipeline_async_stages": [0]}
    for key, value in pipeline.items():     # (annotate takes TVM's integer lists too)
        s.annotate(ko, key, value)
    # the init before the 16 x 16 tiles: its loops are the warp tile's (never of extent 1, which
    # decompose_reduction would leave out), so every tile a replay samples has the same steps
    init = s.decompose_reduction(c, ko)
    inner = _tile(s, c, (16, 16, k_mma))
    b_operand = "b_trans" if roles.trans_b else "b"
    b_tile = (16, k_mma)
    s.tensorize(_tile(s, init, (16, 16)), mma.fill_name(acc_dt))
    s.tensorize(_tile(s, fa, (16, k_mma)), mma.ldmatrix_name(dt, "a"))
    s.tensorize(_tile(s, fb, b_tile if roles.trans_b else (k_mma, 16)), mma.ldmatrix_name(dt, b_operand))
    s.tensorize(inner, mma.mma_name(dt, roles.trans_b))
    out_scope = "shared" if roles.c.scope == "shared" else "global"
    s.tensorize(_tile(s, acc, (16, 16)), mma.store_name(acc_dt, out_scope))
    return bi, bj, warps_m, warps_n
