# mypy: disable-error-code="arg-type,operator"
"""CPU tiling of an int8 GEMM (`C[i, j] += int32(A[i, k]) * int32(B[k, j])`, A uint8, B int8, C
int32) onto the int8 register micro-kernel of `tdsl.intrinsics.x86_lowp`.

The schedule mirrors the fp32 one (`matmul_cpu`), GotoBLAS style:

* B is packed by `cache_read` + `transform_layout` into NR-wide column panels, k-by-4
  interleaved: `B_global[j // NR, k // 4, j % NR, k % 4]` (what vpdpbusd multiplies: 4
  consecutive k of one column in one 32-bit lane), a parallel copy;
* loops, outer to inner: `io` (MC rows of C per parallel task), `jc` (NC columns), `k0` (KC
  steps), `j0` (NR panels), `i0` (MR rows), then the MR x NR x KC micro-kernel, tensorized with
  `x86.<isa>.u8s8s32_<MR>x<NR>x<KC>`; A is read in place (its rows are contiguous along k, and
  the kernel broadcasts 4 of its bytes at a time);
* the init split off (`decompose_reduction`) and `io` parallel.

The ISA follows the target's CPU features (`Hardware.features`, i.e. `tdsl.target.cpu_features`):
AVX512-VNNI, else AVX-VNNI, else the exact AVX2 vpmaddwd kernel, which leaves a note in
`kernel.notes` saying that the CPU lacks the dot-product unit. The sampled choices are the micro
tile (one sketch each), MC / MR and NC / NR.
"""
from __future__ import annotations

from ...intrinsics import x86_lowp
from ...ir import Binary, Cast
from ...ir.attrs import LOWER_NOTE
from ...schedule import Schedule
from ..analysis import MatmulRoles, block_info, matmul_roles
from .base import Rule
from .matmul_cpu import MicroTile, _lambda, _plain_operand, nc_candidates

TASKS_PER_CORE = 8
FALLBACK_NOTE = ("int8 GEMM block {block!r}: the target CPU has no AVX512-VNNI or AVX-VNNI dot-product unit (vpdpbusd); "
                 "it runs on the exact AVX2 kernel {intrin} (vpmaddwd on int16), about a third of VNNI's speed")


def int8_tiles(m: int, n: int, k: int, isa: str, l1: int) -> list[MicroTile]:
    """The micro tiles worth a sketch for an m x n x k int8 GEMM on `isa`, the default first."""
    lanes = x86_lowp.INT8_ISAS[isa][0]
    if k % 4:
        return []
    out = []
    for vectors in (2, 4, 1, 3):
        nr = vectors * lanes
        if n % nr:
            continue
        accumulators = 16 if lanes == 16 else 12 // (2 if isa == "avx2" else 1)
        mr = next((r for r in range(max(1, accumulators // vectors), 0, -1) if m % r == 0), 1)
        kc = max(d for d in range(4, k + 1, 4) if k % d == 0 and (d * nr <= l1 // 2 or d == 4))
        out.append(MicroTile(mr, nr, kc))
    return out


def mc_candidates(m: int, mr: int, cores: int) -> tuple[list[int], int]:
    """(MC / MR counts, the default's index): the default gives >= 8 tasks per core."""
    counts = [d // mr for d in range(mr, m + 1, mr) if m % d == 0]
    tasks = [c for c in counts if m // (c * mr) >= TASKS_PER_CORE * cores] or counts[:1]
    return counts, counts.index(max(tasks))


def is_u8s8(roles: MatmulRoles, info) -> bool:
    """The block multiplies uint8 A by int8 B, both cast to int32."""
    if str(roles.a.dtype) != "uint8" or str(roles.b.dtype) != "int8":
        return False
    value = info.store.value
    prod = value.b if isinstance(value.b, Binary) and value.b.op == "mul" else value.a
    return isinstance(prod, Binary) and all(isinstance(x, Cast) and str(x.dtype) == "int32" for x in (prod.a, prod.b))


class MatmulInt8CPU(Rule):
    """GotoBLAS tiling of a u8 x s8 -> s32 GEMM onto the int8 micro-kernel (module docstring)."""

    name = "multi-level-tiling-cpu-int8"

    def alternatives(self, sch: Schedule, block: str) -> list:
        if self.hw.kind != "cpu":
            return []
        info = block_info(sch.func, block)
        roles = matmul_roles(info, ("int32",))
        if roles is None or not info.simple_bindings or not info.constant_extents or not info.top_level \
                or len(roles.c_indices) != 2 or not is_u8s8(roles, info):
            return []
        if any(_plain_operand(idx, r, c) is None for idx, r, c in ((roles.a_indices, roles.i, roles.k),
                                                                    (roles.b_indices, roles.k, roles.j),
                                                                    (roles.c_indices, roles.i, roles.j))):
            return []
        isa = x86_lowp.int8_isa(self.hw.features)
        if isa is None:
            return []
        tiles = int8_tiles(roles.i.extent, roles.j.extent, roles.k.extent, isa, self.hw.l1)
        return [lambda s, t=t: self._tile(s, block, roles, isa, t) for t in tiles]

    def _tile(self, s: Schedule, block: str, roles: MatmulRoles, isa: str, tile: MicroTile) -> None:
        mr, nr, kc = tile.mr, tile.nr, tile.kc
        m, n = roles.i.extent, roles.j.extent
        c = s.get_block(block)
        b_name = roles.b.name
        pack_b = s.cache_read(c, b_name, "global")
        s.transform_layout(pack_b, f"{b_name}_global",
                           _lambda(["vk", "vj"], [f"vj // {nr}", "vk // 4", f"vj % {nr}", "vk % 4"]))
        # the copy in the packed order (contiguous writes), parallel over panels
        pk, pj = s.get_loops(pack_b)
        pjo, pji = s.split(pj, [None, nr])
        pko, pki = s.split(pk, [None, 4])
        s.reorder(pjo, pko, pji, pki)
        s.parallel(s.fuse(pjo, pko))
        handles = s.get_loops(c)
        info = block_info(s.func, block)
        by_var = {id(h.var): h for h in handles}
        loop_of = {id(it.var): by_var[id(it.loop)] for it in info.iters}
        li, lj, lk = loop_of[id(roles.i.var)], loop_of[id(roles.j.var)], loop_of[id(roles.k.var)]
        nc_counts, nc_default = nc_candidates(n, nr)
        nc = nr * int(self.choose(s, nc_counts, nc_default))
        mc_counts, mc_default = mc_candidates(m, mr, self.hw.cores)
        mc_over_mr = self.choose(s, mc_counts, mc_default)
        io, i0, i1 = s.split(li, [None, mc_over_mr, mr])
        jc, j0, j1 = s.split(lj, [None, nc // nr, nr])
        k0, k1 = s.split(lk, [None, kc])
        s.reorder(io, jc, k0, j0, i0, i1, j1, k1)
        s.parallel(io)
        s.decompose_reduction(c, k0)
        name = x86_lowp.register_int8(isa, mr, nr, kc)
        tile_block = s.blockize(i1)
        s.tensorize(tile_block, name)
        if isa == "avx2":
            s.annotate(tile_block, LOWER_NOTE, FALLBACK_NOTE.format(block=block, intrin=name))


__all__ = ["MatmulInt8CPU", "int8_tiles"]
