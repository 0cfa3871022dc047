"""CPU multi-level tiling of multiply-accumulate blocks onto the x86 fp32 register micro-kernel.

For a block `C[.., i, .., j] += A[.., i, .., k] * B[.., k, .., j]` with constant extents (GEMM,
batched matmul, conv2d in NCHW: i = filters, j = output columns, k = channels; see
`analysis.matmul_roles`), GotoBLAS style, as bench/schedules.py's hand GEMM:

* loops, outer to inner: the other spatial loops (batch, output rows), `io` (MC rows of C per
  parallel task), the other reductions (filter taps), `jc` (NC columns per pass), `k0` (KC
  steps), `j0` (NR panels), `i0` (MR rows), then the MR x NR x KC micro-kernel, `tensorize`d with
  `x86.<isa>.fp32_<MR>x<NR>x<KC>` (accumulators in vector registers) -- the S-S-R-S-R-S tiles
  of a register-blocked GEMM;
* packing of the reused operands where they are plain 2-D (or batched) matrices: B into NR-wide
  column panels (`cache_read` + `transform_layout` to (j // NR, k, j % NR), a parallel vector
  copy), A per MC block into MR-interleaved micro-panels (`cache_read` + `compute_at` io +
  `transform_layout`), C per MC x NC block as micro-tiles in a `cache_write` buffer copied back
  with vector stores (`reverse_compute_at` jc);
* the outer spatial loops and io fused and parallel, the init split off (`decompose_reduction`).

A float16 / bfloat16 GEMM (`C += float32(A) * float32(B)`) takes the same tiling with its packing
copies converting to fp32 (`cache_read(..., dtype="float32")`, `_tile(operand_dtype=...)`): the
low-precision rule (`lowp_cpu` / `lowp_convert`) calls it so.

The micro-kernel tile (MR, NR, KC) is fixed per sketch (it names the intrinsic); the design
space offers the default tile and its neighbours as separate sketches. The block counts MC / MR
and NC / NR are sampled (`sample_categorical`), defaulting to the hand schedule's rules: NR =
2, 5, 3 or 1 vectors (the first dividing n), MR giving 6..16 accumulators on AVX-512
(6..12 on AVX2; x86.ACCUMULATORS), KC the largest
divisor of k whose KC x NR sliver fits half of L1 (2/3 for the AVX-512 16-accumulator tiles; a row of at most 8 vectors that only one
vector divides, like conv2d's 56 columns, is one whole-row tile with MR = 1 instead), MC the largest multiple of MR dividing m whose
A and C blocks fit 5/8 of L2 with >= 8 blocks per core, NC the largest multiple of NR <= 256.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...intrinsics import x86
from ...ir import free_vars
from ...ir.attrs import LOWER_NOTE
from ...schedule import Schedule
from ..analysis import MatmulRoles, block_info, matmul_roles, writer_of
from .base import Rule, index_of
from .cpu_loops import _extent_of

TASKS_PER_CORE = 8


def _divisor(n: int, candidates) -> int:
    return next((c for c in candidates if n % c == 0), 1)


@dataclass(frozen=True)
class MicroTile:
    mr: int
    nr: int
    kc: int


def default_tiles(m: int, n: int, k: int, lanes: int, l1: int, accumulators: int = 12) -> list[MicroTile]:
    """The micro-kernel tiles worth a sketch, the default (the hand GEMM's rule) first.

    `accumulators`: the most vector registers the MR x NR tile of C may hold (x86.ACCUMULATORS:
    16 of AVX-512's 32 zmm, 12 of AVX2's 16 ymm). Where it is over 12, those tiles take KC
    whose sliver fits 2/3 of L1 (8x32x256 in a 48 KiB L1 beat 8x32x128 by 1-3% on Sapphire
    Rapids), and the tiles of the 12-accumulator rule (KC: half of L1) follow as further
    sketches (the tuner keeps them)."""
    out: list[MicroTile] = []
    hand = _divisor(n, (2 * lanes, 5 * lanes, 3 * lanes, lanes))
    # a short row that only one vector divides (conv2d's 56 columns): the whole row is the tile
    whole_row = [n] if hand == lanes and lanes < n <= 8 * lanes and n % lanes == 0 else []
    for cap, share in dict.fromkeys(((accumulators, 2 / 3 if accumulators > 12 else 1 / 2), (12, 1 / 2))):
        for nr in dict.fromkeys(whole_row + [hand]
                                + [v * lanes for v in (1, 2, 3, 4) if n % (v * lanes) == 0]):
            if n % nr:
                continue
            vectors = nr // lanes
            mr = _divisor(m, tuple(r for r in (12, 10, 8, 6, 5, 4, 3, 2) if 6 <= r * vectors <= cap)
                          + tuple(r for r in (2,) if r * vectors <= cap) + (1,))
            kc = max(d for d in range(1, max(1, int(l1 * share) // (nr * 4)) + 1) if k % d == 0)
            if MicroTile(mr, nr, kc) not in out:
                out.append(MicroTile(mr, nr, kc))
    return out


def mc_candidates(m: int, mr: int, kc: int, nc: int, l2: int, cores: int, outer: int = 1) -> tuple[list[int], int]:
    """(MC / MR counts to sample from, the default's index); `outer`: the parallel iterations
    the other spatial loops (batch, output rows) already give."""
    # not 1 where m allows more: MC = MR tasks are tiny, and a unit loop changes the nest that
    # the later steps (decompose_reduction's init) were recorded on, so such a replay is refused
    counts = [d // mr for d in range(mr, m + 1, mr) if m % d == 0]
    counts = counts[1:] if len(counts) > 1 else counts
    row_bytes = (kc + nc) * 4
    fit = [c for c in counts if c * mr * row_bytes <= l2 * 5 // 8] or counts[:1]
    tasks = [c for c in fit if outer * (m // (c * mr)) >= TASKS_PER_CORE * cores] or fit[:1]
    even = [c for c in tasks if (outer * (m // (c * mr))) % 2 == 0]
    default = max(even or tasks)
    return counts, counts.index(default)


def nc_candidates(n: int, nr: int) -> tuple[list[int], int]:
    counts = [d // nr for d in range(nr, n + 1, nr) if n % d == 0]
    default = max(d for d in range(nr, max(nr, min(n, 256)) + 1, nr) if n % d == 0) // nr
    return counts, counts.index(default)


def _lambda(params: list[str], outputs: list[str]):
    """A layout map with named parameters (printable and JSON-able), from text."""
    return eval(f"lambda {', '.join(params)}: ({', '.join(outputs)},)")


class MatmulTensorizeCPU(Rule):
    """GotoBLAS tiling onto the x86 fp32 micro-kernel; see the module docstring."""

    name = "multi-level-tiling-cpu-tensorize"

    def alternatives(self, sch: Schedule, block: str) -> list:
        if self.hw.kind != "cpu" or not self.hw.isa:
            return []
        info = block_info(sch.func, block)
        roles = matmul_roles(info)
        if roles is None or not info.simple_bindings or not info.constant_extents or not info.top_level:
            return []
        m, n, k = roles.i.extent, roles.j.extent, roles.k.extent
        isa, lanes = self.hw.isa, self.hw.lanes
        if n % lanes and isa == "avx512" and n % x86.ISAS["avx2"][0] == 0:
            isa, lanes = "avx2", x86.ISAS["avx2"][0]   # an AVX-512 CPU runs AVX2's: n = 24, 40, ...
        if n % lanes:
            return []
        tiles = default_tiles(m, n, k, lanes, self.hw.l1, x86.ACCUMULATORS[isa])
        return [lambda s, t=t: self._tile(s, block, roles, t, isa) for t in tiles]

    def _tile(self, s: Schedule, block: str, roles: MatmulRoles, tile: MicroTile, isa: str = "",
              operand_dtype: str | None = None, note: str | None = None) -> bool | None:
        """`operand_dtype`: the packing copies of A and B convert to it (`cache_read(..., dtype=)`,
        a float16 / bfloat16 GEMM whose reads are casts to fp32; both must be plain matrices);
        `note`: a `kernel.notes` line on the tensorized tile. False: the tile does not apply."""
        hw = self.hw
        mr, nr, kc = tile.mr, tile.nr, tile.kc
        m, n = roles.i.extent, roles.j.extent
        c = s.get_block(block)
        info = block_info(s.func, block)
        plain_b = _plain_operand(roles.b_indices, roles.k, roles.j)
        plain_a = _plain_operand(roles.a_indices, roles.i, roles.k)
        plain_c = _plain_operand(roles.c_indices, roles.i, roles.j)
        batch = len(roles.c_indices) - 2
        b_name = roles.b.name
        if operand_dtype is not None and (plain_a is None or plain_b is None):
            return False
        convert = {} if operand_dtype is None else {"dtype": operand_dtype}
        if plain_b is not None:
            pack_b = s.cache_read(c, b_name, "global", **convert)
            params = [f"v{d}" for d in range(len(roles.b_indices))]
            lead, kk, jj = params[:-2], params[-2], params[-1]
            s.transform_layout(pack_b, f"{b_name}_global",
                               _lambda(params, lead + [f"{jj} // {nr}", kk, f"{jj} % {nr}"]))
            loops = s.get_loops(pack_b)
            s.parallel(s.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])
            _, vec = s.split(loops[-1], [None, nr])
            s.vectorize(vec)
        elif roles.b not in info.params:
            self._reorder_operand(s, roles)
        pack_a = s.cache_read(c, roles.a.name, "global", **convert) if plain_a is not None else None
        copy_c = s.cache_write(c, roles.c.name, "global") if plain_c is not None and plain_a is not None else None
        # the loops, by the iterators they bind
        handles = s.get_loops(c)
        by_var = {id(h.var): h for h in handles}
        loop_of = {id(it.var): by_var[id(it.loop)] for it in info.iters}
        by_loop = {id(it.loop): it for it in info.iters}
        loop_iter = [by_loop[id(h.var)] for h in handles]
        li, lj, lk = loop_of[id(roles.i.var)], loop_of[id(roles.j.var)], loop_of[id(roles.k.var)]
        others_s = [h for h, it in zip(handles, loop_iter) if it.kind == "S" and h not in (li, lj)]
        others_r = [h for h, it in zip(handles, loop_iter) if it.kind == "R" and h is not lk]
        nc_counts, nc_default = nc_candidates(n, nr)
        nc_over_nr = self.choose(s, nc_counts, nc_default)
        nc = nr * int(nc_over_nr)
        outer_tasks = 1
        for h in others_s:
            outer_tasks *= _extent_of(s.func, h.var) or 1
        mc_counts, mc_default = mc_candidates(m, mr, kc, nc, hw.l2, hw.cores, outer_tasks)
        mc_over_mr = self.choose(s, mc_counts, mc_default)
        io, i0, i1 = s.split(li, [None, mc_over_mr, mr])
        jc, j0, j1 = s.split(lj, [None, nc_over_nr, nr])
        k0, k1 = s.split(lk, [None, kc])
        order = others_s + [io] + others_r + [jc, k0, j0, i0, i1, j1, k1]
        s.reorder(*order)
        outer = others_s + [io]
        s.parallel(s.fuse(*outer) if len(outer) > 1 else io)
        fused = s.get_loops(c)[0]
        if pack_a is not None:
            s.compute_at(pack_a, fused)
            params = [f"v{d}" for d in range(len(roles.a_indices))]
            lead, ii, kk = params[:-2], params[-2], params[-1]
            s.transform_layout(pack_a, f"{roles.a.name}_global",
                               _lambda(params, lead + [f"{ii} // {mr}", kk, f"{ii} % {mr}"]))
        if copy_c is not None:
            s.reverse_compute_at(copy_c, s.get_loops(c)[1 + len(others_r)])
            params = [f"v{d}" for d in range(len(roles.c_indices))]
            lead, ii, jj = params[:-2], params[-2], params[-1]
            s.transform_layout(c, f"{roles.c.name}_global",
                               _lambda(params, lead + [f"{jj} // {nr}", f"{ii} // {mr}", f"{ii} % {mr}",
                                                       f"{jj} % {nr}"]))
            _, vec = s.split(s.get_loops(copy_c)[-1], [None, nr])
            s.vectorize(vec)
        first_r = (others_r + [k0])[0]
        s.decompose_reduction(c, first_r)
        packed = plain_b is not None and pack_a is not None
        # prefetching A and B ahead: rows of B of up to two vectors (AVX2's 4x16: one cache line;
        # AVX-512's 8x32: two, measured 1-3% faster at 1024^3 on Sapphire Rapids)
        isa = isa or hw.isa
        name = x86.register_fp32(isa, mr, nr, kc, prefetch=packed and nr <= 2 * x86.ISAS[isa][0])
        if note is None:
            s.tensorize(i1, name)
        else:
            tile_block = s.blockize(i1)
            s.tensorize(tile_block, name)
            s.annotate(tile_block, LOWER_NOTE, note.format(intrin=name))
        del batch
        return None


    def _reorder_operand(self, s: Schedule, roles: MatmulRoles) -> None:
        """Store an intermediate B operand (a padded input) with its k dimension next to its j
        dimension, so that the KC x NR slice the micro-kernel reads is one contiguous block, and
        have its producer write it in that order: Xpad[b, c, y, x] -> (b, y, c, x)."""
        dims = len(roles.b_indices)
        k_dims = [d for d, e in enumerate(roles.b_indices) if roles.k.var in free_vars(e)]
        if len(k_dims) != 1 or k_dims[0] >= dims - 2:
            return
        kd = k_dims[0]
        order = [d for d in range(dims - 1) if d != kd] + [kd, dims - 1]
        writer = writer_of(s.func, roles.b)
        if writer is None:
            return
        params = [f"v{d}" for d in range(dims)]
        w = block_info(s.func, writer)
        in_order = w.simple_bindings and w.store is not None and len(w.loops) == dims and all(
            e is it.var and it.loop is loop for e, it, loop in zip(w.store.indices, w.iters, w.loops))
        s.transform_layout(s.get_block(writer), roles.b.name, _lambda(params, [params[d] for d in order]))
        if in_order:
            loops = s.get_loops(s.get_block(writer))
            s.reorder(*[loops[d] for d in order])


def _plain_operand(indices, row, col):
    """The indices when they are (batch..., row, col) plain iterators of the block, else None."""
    from ...ir import Var

    if len(indices) < 2 or not all(isinstance(e, Var) for e in indices):
        return None
    if indices[-2] is not row.var or indices[-1] is not col.var:
        return None
    return indices


__all__ = ["MatmulTensorizeCPU", "default_tiles", "index_of"]
