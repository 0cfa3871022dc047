"""CPU tiling of u8 x s8 -> s32 and bf16 -> fp32 GEMMs onto Intel AMX (`tdsl.intrinsics.x86_amx`).

`MatmulAmxCPU` runs before `MatmulLowpCPU` and applies where the target's CPU features
(`Hardware.features`, i.e. `tdsl.target.cpu_features`) include amx-int8 (int8) or amx-bf16
(bf16): the blocks `MatmulLowpCPU` takes (GEMMs, a requantize epilogue's accumulator, NHWC int8
conv2d) with k a multiple of 4 bytes, m and n of any size whose micro tile fills `MIN_FILL` of its
accumulators (`amx_tiles`: m, n off a multiple of 16 take partial tiles, k off 64 bytes a shorter
last step; see `tdsl.intrinsics.x86_amx`). Elsewhere it leaves the block to `MatmulLowpCPU`
(VNNI, AVX512-BF16 or the AVX2 kernels). The tile block gets an informational `kernel.notes` line
naming the kernel and its partial tiles.

The schedule, outer to inner:

* B packed once by `cache_read` + `transform_layout` into NR-wide panels, k grouped by 4 bytes /
  2 bfloat16 (as for VNNI: a packed panel's rows are an AMX B tile's rows), a parallel copy;
* A (a 2-d GEMM operand) copied into rows padded to an odd number of 64-byte lines
  (`storage_align`): a tile load's 16 rows then spread over the cache sets (rows of a power of
  two bytes fall in a few and evict each other: 1.3x on the whole GEMM at 1024^3); a conv2d's
  windows are read in place;
* the other spatial loops and MC rows of C, fused and parallel (MC: at most MC_ROWS rows, 8
  tasks per core where m allows), the other reductions, NC columns (the packed KC x NC block of
  B within half of L2), KC steps of k, then per MR rows of A all NC / NR panels (the A rows stay
  in cache while B's panels pass; the alternative order puts the panels outside);
* the MR x NR x KC tile tensorized with ``x86.amx.<kind>_<MR>x<NR>x<KC>``, `_init` (C written
  once, from `tilezero`) when KC is all of k: the default wherever an MR x k block of A and a
  k x NR sliver of B take a quarter of L2 (splitting k, which reloads C's tiles, measured about
  2x slower); an elementwise epilogue of an intermediate accumulator per row block.

The sampled choices (the tuner's space): the micro tile (32 x 32, 32 x 16, 16 x 32, 16 x 16, or
the edge sizes of `tile_sizes`; one sketch each), KC, NC / NR, MC / MR, the loop order and whether A is padded.

Where the target is this host and its CPU has AMX but the OS refused the tile data
(`tdsl.target.amx_permitted`), the rule makes `MatmulLowpCPU`'s schedules and notes (in
`kernel.notes`) that AMX was refused.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...intrinsics import x86_amx
from ...ir.attrs import LOWER_NOTE, TENSOR_INTRIN
from ...ir.tree import block_names
from ...schedule import Schedule
from ..analysis import MatmulRoles, block_info, consumers
from .base import Rule
from .cpu_loops import _extent_of, attempt
from .lowp_cpu import BF16, INT8, TASKS_PER_CORE, LowpGemm, MatmulLowpCPU, _epilogue_at, lowp_gemm, path_note
from .matmul_cpu import MicroTile, _lambda


@dataclass(frozen=True)
class AmxGemm(LowpGemm):
    """A low-precision GEMM on an AMX kernel (`x86_amx.KINDS`: "u8s8s32" or "bf16f32")."""

    kernel: str = "u8s8s32"

    def isas(self, features, target="cpu") -> list[str]:
        return ["amx"] if x86_amx.available(self.kernel, features) else []

    def converts(self, isa: str) -> bool:
        return False   # AMX multiplies the low-precision operands themselves

    def group(self, isa: str) -> int:
        return x86_amx.KINDS[self.kernel][4]

    def k_step(self, isa: str) -> int:
        return x86_amx.k_step(self.kernel)

    def intrinsic(self, isa: str, tile: MicroTile, init: bool = False) -> str:
        return x86_amx.register(self.kernel, tile.mr, tile.nr, tile.kc, init)


AMX_INT8 = AmxGemm(INT8.a, INT8.b, INT8.c, "u8s8s32")
AMX_BF16 = AmxGemm(BF16.a, BF16.b, BF16.c, "bf16f32")


def amx_kind(kind: LowpGemm | None) -> AmxGemm | None:
    return AMX_INT8 if kind == INT8 else AMX_BF16 if kind == BF16 else None


MIN_FILL = 0.25
"""The least share of its 16 x 16 accumulator tiles' elements an edge micro tile must fill (an
MR x NR tile of C fills MR * NR of 256 * tiles) for AMX to be offered; below it (m or n of 1 to
3, a prime above 32 against one of at most 16) the other kernels are kept. Measured on Sapphire
Rapids (loaded host): 17 x 17 x 200 (fill 0.28) 2.3x faster than the kernel without AMX, 40 x 40
x 200 (0.39) 4.4x, 1 x 56 x 200 (0.05) 2.3x slower."""


def fill(mr: int, nr: int) -> float:
    """The share of the MR x NR tile's 16 x 16 accumulator tiles that C fills."""
    return mr * nr / (256 * -(-mr // 16) * -(-nr // 16))


def tile_sizes(extent: int) -> list[int]:
    """MR (or NR) worth a sketch for `extent` rows (columns), the default first: 32 and 16 where they
    divide it; else the divisor of at most 32, then of at most 16, that fills its 16-row tiles best
    (ties: the larger), whose last tile is partial (56: 28 = 16 + 12, then 14)."""
    full = [s for s in (32, 16) if extent % s == 0]
    if full:
        return full
    out: list[int] = []
    for cap in (32, 16):
        best = max((d for d in range(1, min(cap, extent) + 1) if extent % d == 0),
                   key=lambda d: (fill(d, 16), d))
        if best not in out:
            out.append(best)
    return out


def k_unit(k: int, kind: AmxGemm) -> int:
    """What KC must be a multiple of: 64 bytes where k is, else the k group (4 int8, 2 bfloat16;
    the kernel's last step is then shorter)."""
    step = kind.k_step("amx")
    return step if k % step == 0 else kind.group("amx")


def amx_tiles(m: int, n: int, k: int, kind: AmxGemm, l2: int) -> list[MicroTile]:
    """The AMX micro tiles for an m x n x k GEMM, the default first (32 x 32 where m and n allow;
    `tile_sizes` at an edge); [] when k is not a multiple of the k group or no tile fills
    `MIN_FILL` of its accumulators. KC: all of k when an MR x k block of A and a k x NR sliver of
    B take at most a quarter of L2 (the tile then spans the reduction and writes C once), else
    the largest divisor of k that does; a multiple of `k_unit` the kernel takes (`x86_amx.fits`)."""
    size = x86_amx.KINDS[kind.kernel][3]
    if k % kind.group("amx"):
        return []
    unit = k_unit(k, kind)
    out = []
    for mr in tile_sizes(m):
        for nr in tile_sizes(n):
            kcs = [d for d in range(unit, k + 1, unit) if k % d == 0 and x86_amx.fits(kind.kernel, mr, nr, d)]
            if fill(mr, nr) < MIN_FILL or not kcs:
                continue
            per_k = (mr + nr) * size    # bytes of A's MR rows and of B's sliver per step of k
            fitting = [d for d in kcs if d * per_k <= l2 // 4] or kcs[:1]
            out.append(MicroTile(mr, nr, max(fitting)))
    step = kind.k_step("amx")
    # at an edge, the tiles that keep the most of AMX's work (filled accumulators, 64-byte steps)
    # first, then those not made of short steps only (C reloaded per short KC), then the larger;
    # full tiles keep their order (32 x 32, 32 x 16, 16 x 32, 16 x 16)
    return sorted(out, key=lambda t: (-round(fill(t.mr, t.nr) * t.kc / (step * -(-t.kc // step)), 2),
                                      t.kc < step and t.kc != k, -t.mr * t.nr))


def kc_candidates(k: int, unit: int, default: int, ok=lambda kc: True) -> tuple[list[int], int]:
    """KC: the divisors of k that are multiples of `unit` (and `ok`), and the default's index."""
    out = [d for d in range(unit, k + 1, unit) if k % d == 0 and ok(d)]
    return out, out.index(default)


def nc_block(n: int, nr: int, kc: int, size: int, l2: int) -> tuple[list[int], int]:
    """NC / NR counts and the default's index: the widest NC dividing n whose packed KC x NC block
    of B takes at most half of L2 (it stays there while the MC / MR row blocks of A pass over
    it; measured at 4096 x 4096 x 1024: 1.1-1.2x over all of n)."""
    counts = [d // nr for d in range(nr, n + 1, nr) if n % d == 0]
    fits = [c for c in counts if c * nr * kc * size <= l2 // 2] or counts[:1]
    return counts, counts.index(max(fits))


MC_ROWS = 512


def mc_block(m: int, mr: int, cores: int, outer: int) -> tuple[list[int], int]:
    """MC / MR counts and the default's index: the largest MC of at most MC_ROWS rows giving every
    core TASKS_PER_CORE row blocks (with the `outer` parallel iterations of other spatial loops)."""
    counts = [d // mr for d in range(mr, m + 1, mr) if m % d == 0]
    tasks = [c for c in counts if outer * (m // (c * mr)) >= TASKS_PER_CORE * cores and c * mr <= MC_ROWS] \
        or counts[:1]
    return counts, counts.index(max(tasks))


class MatmulAmxCPU(Rule):
    """GotoBLAS tiling of a u8 x s8 -> s32 or bf16 -> fp32 GEMM onto the AMX micro-kernels (module
    docstring)."""

    name = "multi-level-tiling-cpu-amx"

    def alternatives(self, sch: Schedule, block: str) -> list:
        if self.hw.kind != "cpu":
            return []
        found = lowp_gemm(sch, block)
        kind = amx_kind(found[1]) if found is not None else None
        if found is None or kind is None:
            return []
        roles = found[0]
        if not kind.isas(self.hw.features):
            return self._refused(sch, block, kind) if _os_refused(self.hw, kind.kernel) else []
        m, n, k = roles.i.extent, roles.j.extent, roles.k.extent
        assert m is not None and n is not None and k is not None   # info.constant_extents
        return [lambda s, t=t: self._tile(s, block, roles, kind, t)
                for t in amx_tiles(m, n, k, kind, self.hw.l2)]

    def _tile(self, s: Schedule, block: str, roles: MatmulRoles, kind: AmxGemm, tile: MicroTile) -> None:
        mr, nr, g = tile.mr, tile.nr, kind.group("amx")
        m, n, k = roles.i.extent, roles.j.extent, roles.k.extent
        assert m is not None and n is not None and k is not None   # alternatives() takes constant extents only
        size = x86_amx.KINDS[kind.kernel][3]
        c = s.get_block(block)
        info0 = block_info(s.func, block)
        readers = None if roles.c in info0.params else [
            r for r in consumers(s.func, block) if block_info(s.func, r).is_spatial]
        _pack_b(s, c, roles, nr, g)
        if _plain_a(roles) and self.choose(s, ["padded", "in place"], 0) == "padded":
            attempt(s, lambda t: _pad_a(t, t.get_block(block), roles, size))   # else A is read in place
        handles = s.get_loops(c)
        info = block_info(s.func, block)
        by_var = {id(h.var): h for h in handles}
        loop_of = {id(it.var): by_var[id(it.loop)] for it in info.iters}
        by_loop = {id(it.loop): it for it in info.iters}
        li, lj, lk = loop_of[id(roles.i.var)], loop_of[id(roles.j.var)], loop_of[id(roles.k.var)]
        kinds = [by_loop[id(h.var)].kind for h in handles]
        others_s = [h for h, kd in zip(handles, kinds) if kd == "S" and h not in (li, lj)]
        others_r = [h for h, kd in zip(handles, kinds) if kd == "R" and h is not lk]
        outer = 1
        for h in others_s:
            outer *= _extent_of(s.func, h.var) or 1
        kc_counts, kc_default = kc_candidates(k, k_unit(k, kind), tile.kc,
                                              lambda d: x86_amx.fits(kind.kernel, mr, nr, d))
        kc = int(self.choose(s, kc_counts, kc_default))
        nc_counts, nc_default = nc_block(n, nr, kc, size, self.hw.l2)
        nc = nr * int(self.choose(s, nc_counts, nc_default))
        mc_counts, mc_default = mc_block(m, mr, self.hw.cores, outer)
        mc_over_mr = self.choose(s, mc_counts, mc_default)
        # the default keeps an MR x KC block of A in the tile loads' cache while the NC / NR panels
        # of B pass under it; the alternative holds a B sliver over the MC / MR row blocks
        rows_outside = self.choose(s, ["rows", "panels"], 0) == "rows"
        io, i0, i1 = s.split(li, [None, mc_over_mr, mr])
        jc, j0, j1 = s.split(lj, [None, nc // nr, nr])
        inner = [i0, j0] if rows_outside else [j0, i0]
        whole = kc == k and not others_r   # the tile spans the reduction: C = A @ B, written once
        if whole:
            s.reorder(*others_s, io, jc, *inner, i1, j1, lk)
        else:
            k0, k1 = s.split(lk, [None, kc])
            s.reorder(*others_s, io, *others_r, jc, k0, *inner, i1, j1, k1)
        s.parallel(s.fuse(*others_s, io) if others_s else io)
        if not whole:
            init = s.decompose_reduction(c, (others_r + [k0])[0])
            s.vectorize(s.get_loops(init)[-1])
        tile_block = s.blockize(i1)
        name = kind.intrinsic("amx", MicroTile(mr, nr, kc), init=whole)
        s.tensorize(tile_block, name)
        s.annotate(tile_block, LOWER_NOTE, path_note(kind, block, amx_what(kind, name, mr, nr, kc)))
        if readers is not None and len(readers) == 1:
            # under the column blocks where they are the next loop: the int32 block read back (rows x NC)
            # then fits in L2, where a whole block of rows (4096 wide: 4 MB) did not
            at = 1 if whole and rows_outside and not others_s else 0
            attempt(s, lambda t: _epilogue_at(t, readers[0], tile_block, at=at))


    def _refused(self, sch: Schedule, block: str, kind: AmxGemm) -> list:
        """`MatmulLowpCPU`'s schedules, their micro-kernel noting that AMX was refused."""
        def noted(s: Schedule, make) -> bool | None:
            if make(s) is False:
                return False
            for name in block_names(s.func):
                intrin = tensor_intrin_of(s, name)
                if intrin is not None and intrin.startswith("x86."):
                    s.annotate(s.get_block(name), LOWER_NOTE, REFUSED_NOTE.format(
                        block=block, features=", ".join(x86_amx.kind_features(kind.kernel)), intrin=intrin))
            return None
        return [lambda s, make=make: noted(s, make)
                for make in MatmulLowpCPU(self.hw, self.defaults).alternatives(sch, block)]


def amx_what(kind: AmxGemm, name: str, mr: int, nr: int, kc: int) -> str:
    """The AMX path's note: the kernel, and its partial tiles where m, n or k has an edge."""
    unit = x86_amx.KINDS[kind.kernel][5].removeprefix("llvm.x86.")
    edges = [f"{what} {' + '.join(map(str, parts))}" for what, parts in
             (("rows", x86_amx._parts(mr)), ("columns", x86_amx._parts(nr))) if parts[-1] != 16]
    step = kind.k_step("amx")
    if kc % step:
        edges.append(f"k steps {' + '.join([str(step)] * (kc // step) + [str(kc % step)])}")
    return (f"the Intel AMX micro-kernel {name} ({unit} on 16-row x 64-byte tiles"
            + (f"; partial tiles: {', '.join(edges)}" if edges else "") + ")")


REFUSED_NOTE = ("GEMM block {block!r}: this CPU has AMX ({features}), but the operating system did not let this "
                "process use the tile data (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) refused); it runs "
                "on {intrin} instead")


def _os_refused(hw, kernel: str) -> bool:
    """The target is this host, whose CPU has the AMX features of `kernel` that the OS refused."""
    from ...target import _host_cpu, amx_permitted, cpu_name, host_cpu_name

    raw = _host_cpu()[1]
    return (cpu_name(hw.target) == host_cpu_name() and all(raw.get(f) for f in x86_amx.kind_features(kernel))
            and not amx_permitted())


def tensor_intrin_of(s: Schedule, name: str) -> str | None:
    """The intrinsic block `name` is tensorized with, or None."""
    from ...schedule.tree import find_block

    block = find_block(s.func, name, "auto")[0].block
    return next((str(v) for k, v in block.annotations if k == TENSOR_INTRIN), None)


def _pack_b(s: Schedule, c, roles: MatmulRoles, nr: int, g: int) -> None:
    """B packed once into NR-wide panels, k grouped by `g` (the AMX B tile's rows), by a parallel
    copy in the packed order."""
    b_name = roles.b.name
    pack_b = s.cache_read(c, b_name, "global")
    params = [f"v{d}" for d in range(len(roles.b_indices))]
    lead, kk, jj = params[:-2], params[-2], params[-1]
    s.transform_layout(pack_b, f"{b_name}_global",
                       _lambda(params, lead + [f"{jj} // {nr}", f"{kk} // {g}", f"{jj} % {nr}", f"{kk} % {g}"]))
    *plead, pk, pj = s.get_loops(pack_b)
    pjo, pji = s.split(pj, [None, nr])
    pko, pki = s.split(pk, [None, g])
    s.reorder(pjo, pko, pji, pki)
    s.parallel(s.fuse(*plead, pjo, pko))


def _plain_a(roles: MatmulRoles) -> bool:
    """A is a 2-d parameter indexed [i, k] (a GEMM's, not a conv2d's window)."""
    a = roles.a_indices
    return len(a) == 2 and a[0] is roles.i.var and a[1] is roles.k.var


def _pad_a(s: Schedule, c, roles: MatmulRoles, size: int) -> None:
    """A copied (`cache_read`, rows in parallel) into rows padded to an odd number of 64-byte lines
    (`storage_align`): a tile load's 16 rows then fall in 16 different cache sets, where a row of
    a power-of-two bytes would put them in a few (1024 bytes: 4 of L1's 64) and evict each other."""
    pack_a = s.cache_read(c, roles.a.name, "global")
    s.storage_align(pack_a, 0, 0, 128 // size, 64 // size)
    s.parallel(s.get_loops(pack_a)[0])


__all__ = ["AMX_BF16", "AMX_INT8", "AmxGemm", "MatmulAmxCPU", "amx_tiles"]
