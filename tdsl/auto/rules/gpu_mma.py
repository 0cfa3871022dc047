"""`GPUMmaTiling`: fp16 / bf16 GEMMs on the tensor cores the way fast kernels do it (sm_80).

``C[i, j] += f32(A[i, k]) * f32(B[k, j])`` (fp16 or bf16 operands, fp32 accumulation) with m and
n multiples of the block tile and k of 32 becomes::

    block tile (bm x bn, blockIdx.y / blockIdx.x)
      warp tile (wm x wn, warps on threadIdx.z / threadIdx.y; lanes the implicit threadIdx.x)
        per k step of 32:
          A, B tiles -> shared memory, copied by the whole block 8 elements (16 bytes) per thread,
                        each row's 16-byte chunks XOR-swizzled (cuda_mma.swizzle) so ldmatrix is free
                        of bank conflicts
          A, B fragments <- ldmatrix (mma_ldmatrix_{f16,bf16}_{a,b}), per-lane registers
          mma.sync m16n8k16 (mma_{f16f16,bf16bf16}f32) on every 16 x 16 x 16 tile
      accumulators -> C (mma_store_16x16_f32_global_)

The ko loop carries TVM's software-pipeline annotations (copies of step k + 1 as cp.async, in
flight while step k computes) for the pass that lowers them. The block tile (128 x 128 with 2 x 4 warps of 64 x 32, or 64 x 64 with 2 x 2 warps of 32 x 32)
is sampled; the first that divides m and n is the default. Blocks it does not fit (other
dtypes, B indexed [j, k], sizes not multiples of the tile) are left to `GPUWmmaTiling` /
`GPUMatmulTiling`.
"""
from __future__ import annotations

from typing import Any

from ...schedule import Schedule
from ..analysis import block_info
from .base import Rule

KSTEP = 32
# (block rows, block cols, warp rows, warp cols)
CONFIGS = ((128, 128, 64, 32), (64, 64, 32, 32))
_DTYPES = {"float16": "f16", "bfloat16": "bf16"}


def _tile16(s: Schedule, block, n: int = 2):
    """Split the last `n` loops of `block` by 16, the 16-loops innermost; the first 16-loop."""
    loops = s.get_loops(block)[-n:]
    outer, inner = [], []
    for lp in loops:
        o, i = s.split(lp, [None, 16])
        outer.append(o)
        inner.append(i)
    s.reorder(*outer, *inner)
    return inner[0]


class GPUMmaTiling(Rule):
    """fp16 / bf16 GEMMs -> shared staging, ldmatrix, mma.sync (see the module docstring)."""

    name = "mma-tiling-gpu"

    def alternatives(self, sch: Schedule, block: str) -> list:
        from ..analysis import matmul_roles

        if not self.hw.is_gpu:
            return []
        info = block_info(sch.func, block)
        roles = matmul_roles(info)
        if roles is None or not info.simple_bindings or not info.constant_extents or not info.top_level:
            return []
        dt = str(roles.a.dtype)
        if dt not in _DTYPES or str(roles.b.dtype) != dt or str(roles.c.dtype) != "float32":
            return []
        if len(roles.c_indices) != 2 or len(info.iters) != 3 or len(roles.a_indices) != 2:
            return []
        if roles.a_indices[0] is not roles.i.var or roles.a_indices[1] is not roles.k.var \
                or roles.b_indices[0] is not roles.k.var or roles.b_indices[1] is not roles.j.var:
            return []
        m, n, k = roles.i.extent, roles.j.extent, roles.k.extent
        if m is None or n is None or k is None:
            return []
        configs = [c for c in CONFIGS if m % c[0] == 0 and n % c[1] == 0]
        if not configs or k % KSTEP:
            return []
        return [lambda s: self._tile(s, block, roles, configs, _DTYPES[dt])]

    def _tile(self, s: Schedule, block: str, roles, configs, dt: str) -> None:
        from ...intrinsics import cuda_mma as mma

        bm, bn, wm, wn = configs[self.choose(s, list(range(len(configs))), 0)]
        warps_m, warps_n = bm // wm, bn // wn
        c = s.get_block(block)
        info = block_info(s.func, block)
        by_loop = {id(it.var): it.loop for it in info.iters}
        handles = {id(h.var): h for h in s.get_loops(c)}
        li, lj, lk = (handles[id(by_loop[id(r.var)])] for r in (roles.i, roles.j, roles.k))
        bi, wi, ii = s.split(li, [None, warps_m, wm])
        bj, wj, jj = s.split(lj, [None, warps_n, wn])
        ko, ki = s.split(lk, [None, KSTEP])
        s.reorder(bi, bj, wi, wj, ko, ii, jj, ki)
        s.bind(bi, "blockIdx.y")
        s.bind(bj, "blockIdx.x")
        s.bind(wi, "threadIdx.z")
        s.bind(wj, "threadIdx.y")
        acc = s.cache_write(c, 0, "m16n8k16.accumulator")
        s.reverse_compute_at(acc, wj)
        a_sh = s.cache_read(c, roles.a.name, "shared")
        b_sh = s.cache_read(c, roles.b.name, "shared")
        fa = s.cache_read(c, roles.a.name + "_shared", "m16n8k16.matrixA")
        fb = s.cache_read(c, roles.b.name + "_shared", "m16n8k16.matrixB")
        s.compute_at(fa, ko)
        s.compute_at(fb, ko)
        for stage in (a_sh, b_sh):
            s.compute_at(stage, ko)
            rows, cols = s.get_loops(stage)[-2:]
            cols, vec = s.split(cols, [None, 8])
            _, tz, ty, tx = s.split(s.fuse(rows, cols), [None, warps_m, warps_n, 32])
            s.bind(tz, "threadIdx.z")
            s.bind(ty, "threadIdx.y")
            s.bind(tx, "threadIdx.x")
            s.vectorize(vec)
        mma.swizzle(s, a_sh)     # ldmatrix without bank conflicts, no padding
        mma.swizzle(s, b_sh)
        loops = s.get_loops(c)[-3:]
        outer, inner = [], []
        for lp in loops:
            o, i = s.split(lp, [None, 16])
            outer.append(o)
            inner.append(i)
        s.reorder(*outer, *inner)
        # TVM's software-pipeline annotations (lowered by inject_software_pipeline where the build
        # has it): the copies into shared memory of k step s + 1 (cp.async) overlap the ldmatrix
        # and mma of k step s. The body of ko: A copy, A ldmatrix, B copy, B ldmatrix, mma.
        pipeline: dict[str, Any] = {"software_pipeline_stage": [0, 1, 0, 1, 1],
                                    "software_pipeline_order": [0, 2, 1, 3, 4],
                                    "software_pipeline_async_stages": [0]}
        for key, value in pipeline.items():     # (annotate takes TVM's integer lists too)
            s.annotate(ko, key, value)
        init = s.decompose_reduction(c, ko)
        s.tensorize(_tile16(s, init), mma.fill_name("f32"))
        s.tensorize(_tile16(s, fa), mma.ldmatrix_name(dt, "a"))
        s.tensorize(_tile16(s, fb), mma.ldmatrix_name(dt, "b"))
        s.tensorize(inner[0], mma.mma_name(dt))
        s.tensorize(_tile16(s, acc), mma.store_name("f32", "global"))
