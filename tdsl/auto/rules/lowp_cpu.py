"""CPU tiling of low-precision GEMMs onto the register micro-kernels of `tdsl.intrinsics.x86_lowp`:
u8 x s8 -> s32 (`C[i, j] += int32(A[i, k]) * int32(B[k, j])`, A uint8, B int8, C int32),
bf16 -> fp32 and fp16 -> fp32 (`C[i, j] += float32(A[i, k]) * float32(B[k, j])`, A and B
bfloat16 or float16).

The schedule mirrors the fp32 one (`matmul_cpu`), GotoBLAS style:

* B is packed by `cache_read` + `transform_layout` into NR-wide column panels with G consecutive
  k interleaved (G = 4 bytes for int8, 2 bfloat16: one 32-bit lane of vpdpbusd / vdpbf16ps):
  `B_global[j // NR, k // G, j % NR, k % G]`, a parallel copy in the packed order;
* loops, outer to inner: the other spatial loops (batch, output rows of a conv2d), `io` (MC rows
  of C per parallel task), the other reductions (filter taps), `jc` (NC columns), `k0` (KC
  steps), `j0` (NR panels), `i0` (MR rows), then the MR x NR x KC micro-kernel, tensorized with
  `x86.<isa>.u8s8s32_<MR>x<NR>x<KC>` or `x86.avx512bf16.bf16f32_<MR>x<NR>x<KC>`; A is read in
  place (its rows are contiguous along k; the kernel broadcasts G of its elements at a time), so
  a conv2d qualifies in NHWC with HWIO filters (`Y[b, y, x, f] += X[b, y + r, x + s, c] *
  W[r, s, c, f]`: i = x, j = f, k = c);
* when KC is all of k (the packed KC x NR sliver fits 3/4 of L1) and there is no other
  reduction, the tile spans the whole reduction and the `_init` micro-kernel computes C = A @ B,
  writing C once; otherwise the init is split off (`decompose_reduction`, vectorized);
* the outer spatial loops and `io` fused and parallel; an intermediate accumulator's one
  elementwise reader (a requantize epilogue) computed per parallel block right after its rows
  (`reverse_compute_at`), where that is legal.

The ISA follows the target's CPU features (`Hardware.features`, i.e. `tdsl.target.cpu_features`):
int8 on AVX512-VNNI, else AVX-VNNI, else the exact AVX2 vpmaddwd kernel, which leaves a note in
`kernel.notes` saying that the CPU lacks the dot-product unit; the VNNI and AVX512-BF16 kernels
leave an informational one (`path_note`) naming the kernel (and, on a CPU with AMX, that no AMX
tile takes the shape). float16, and bfloat16 without
AVX512-BF16 or where vdpbf16ps is slow, convert to fp32 in packing and run the fp32 FMA kernel
(`lowp_convert`: a plain GEMM is then tiled exactly as `matmul_cpu` tiles fp32; a conv2d's input is
converted whole and its filters while packed); bfloat16 on AVX512-BF16 offers both paths, the
default per CPU (`lowp_convert.BF16_DOT_PATH`), and `kernel.notes` says which ran and why. The
sampled choices are the micro tile (one sketch each), MC / MR and NC / NR.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...intrinsics import x86, x86_amx, x86_lowp
from ...ir import Binary, Cast, Var, free_vars
from ...ir.attrs import INFO_NOTE, LOWER_NOTE
from ...schedule import Schedule
from ..analysis import MatmulRoles, block_info, consumers, matmul_roles
from .base import Rule
from .cpu_loops import _extent_of, attempt
from .lowp_convert import bf16_prefers_dot, convert_isa, convert_note, fp32_kernel
from .matmul_cpu import MatmulTensorizeCPU, MicroTile, _lambda, _plain_operand, default_tiles, nc_candidates

TASKS_PER_CORE = 8
FALLBACK_NOTE = ("int8 GEMM block {block!r}: the target CPU has no AVX512-VNNI or AVX-VNNI dot-product unit "
                 "(vpdpbusd); it runs on the exact AVX2 kernel {intrin} (vpmaddwd on int16), about a third of "
                 "VNNI's speed")


UNITS = {"avx512vnni": "AVX512-VNNI vpdpbusd", "avxvnni": "AVX-VNNI vpdpbusd", "avx512bf16": "AVX512-BF16 vdpbf16ps"}


def path_note(kind: LowpGemm, block: str, what: str) -> str:
    """The informational `kernel.notes` line naming the low-precision path a GEMM block took."""
    dtype = "int8" if kind.c == "int32" else kind.a
    return f"{INFO_NOTE}{dtype} GEMM block {block!r}: {what}"


@dataclass(frozen=True)
class LowpGemm:
    """One kind of low-precision GEMM: operand and accumulator dtypes, and per micro-kernel ISA
    the k group G that the packing interleaves (4 bytes or 2 bfloat16 per 32-bit lane of
    vpdpbusd / vdpbf16ps; 1: plain NR-wide panels for the kernels that convert to fp32)."""

    a: str
    b: str
    c: str

    def isas(self, features, target="cpu") -> list[str]:
        """The micro-kernel ISAs for a CPU with `features`, the default first: for float16 and
        bfloat16, "avx512" / "avx2" name the fp32 FMA kernel that runs after conversion in
        packing (`lowp_convert`), "avx512bf16" vdpbf16ps."""
        if self.c == "int32":
            return [isa for isa in [x86_lowp.int8_isa(features)] if isa]
        convert = [isa for isa in [convert_isa(features, self.a)] if isa]
        if self.a == "bfloat16" and all(f in features for f in x86_lowp.BF16_FEATURES):
            dot_first = bf16_prefers_dot(target)[0]
            return ["avx512bf16"] + convert if dot_first else convert + ["avx512bf16"]
        return convert

    def converts(self, isa: str) -> bool:
        """The operands are converted to fp32 in packing for the fp32 kernel of `isa`."""
        return self.c == "float32" and isa != "avx512bf16"

    def group(self, isa: str) -> int:
        return 4 if self.c == "int32" else 2 if isa == "avx512bf16" else 1

    def lanes(self, isa: str) -> int:
        if self.c == "int32":
            return x86_lowp.INT8_ISAS[isa][0]
        return 16 if isa == "avx512bf16" else x86.ISAS[isa][0]

    def k_step(self, isa: str) -> int:
        """What KC must be a multiple of (the fp32 kernel takes any KC)."""
        return self.group(isa)

    def accumulators(self, isa: str) -> int:
        """Vector registers the MR x NR tile of C may take (AVX2's int8 kernel keeps 2 per vector)."""
        return 16 if self.lanes(isa) == 16 else 6 if (isa == "avx2" and self.c == "int32") else 12

    def intrinsic(self, isa: str, tile: MicroTile, init: bool = False) -> str:
        if self.c == "int32":
            return x86_lowp.register_int8(isa, tile.mr, tile.nr, tile.kc, init)
        if isa == "avx512bf16":
            return x86_lowp.register_bf16(tile.mr, tile.nr, tile.kc, init)
        assert not init, "the fp32 kernel has no _init variant"
        return fp32_kernel(isa, tile.mr, tile.nr, tile.kc)


INT8 = LowpGemm("uint8", "int8", "int32")
BF16 = LowpGemm("bfloat16", "bfloat16", "float32")
FP16 = LowpGemm("float16", "float16", "float32")


def lowp_kind(roles: MatmulRoles, info) -> LowpGemm | None:
    """The low-precision GEMM the block computes (A and B cast to C's dtype), or None."""
    value = info.store.value
    prod = value.b if isinstance(value.b, Binary) and value.b.op == "mul" else value.a
    if not (isinstance(prod, Binary) and prod.op == "mul"):
        return None
    for kind in (INT8, BF16, FP16):
        if (str(roles.a.dtype), str(roles.b.dtype), str(roles.c.dtype)) == (kind.a, kind.b, kind.c) and all(
                isinstance(x, Cast) and str(x.dtype) == kind.c for x in (prod.a, prod.b)):
            return kind
    return None


def lowp_gemm(sch: Schedule, block: str) -> tuple[MatmulRoles, LowpGemm] | None:
    """(roles, kind) of a top-level low-precision GEMM block with constant extents and simple
    bindings whose operands a micro-kernel can read (`_kernel_layout`), or None."""
    info = block_info(sch.func, block)
    roles = matmul_roles(info, ("int32", "float32"))
    if roles is None or not info.simple_bindings or not info.constant_extents or not info.top_level:
        return None
    kind = lowp_kind(roles, info)
    if kind is None or not _kernel_layout(roles, info.iters):
        return None
    return roles, kind


def lowp_tiles(m: int, n: int, k: int, kind: LowpGemm, isa: str, l1: int) -> list[MicroTile]:
    """The micro tiles worth a sketch for an m x n x k GEMM of `kind` on `isa`, the default first:
    NR of 2, 4, 1 or 3 vectors, MR giving 16 zmm (12 ymm, 6 for AVX2's doubled) accumulators,
    KC the largest divisor of k whose packed KC x NR sliver fits half of L1."""
    lanes = kind.lanes(isa)
    g, step = kind.group(isa), kind.k_step(isa)
    if k % step:
        return []
    out = []
    for vectors in (2, 4, 1, 3):
        nr = vectors * lanes
        if n % nr:
            continue
        mr = next((r for r in range(max(1, kind.accumulators(isa) // vectors), 0, -1) if m % r == 0), 1)
        # a KC x NR sliver of packed B takes KC * NR * 4 / G bytes: all of k when that fits 3/4 of
        # L1 (the tile then spans the reduction and writes C once), else at most half of L1
        sliver = nr * 4 // g
        kc = k if k * sliver <= l1 * 3 // 4 else \
            max(d for d in range(step, k + 1, step) if k % d == 0 and (d * sliver <= l1 // 2 or d == step))
        out.append(MicroTile(mr, nr, kc))
    return out


def int8_tiles(m: int, n: int, k: int, isa: str, l1: int) -> list[MicroTile]:
    """`lowp_tiles` of a u8 x s8 -> s32 GEMM."""
    return lowp_tiles(m, n, k, INT8, isa, l1)


def mc_candidates(m: int, mr: int, cores: int, outer: int = 1) -> tuple[list[int], int]:
    """(MC / MR counts, the default's index): the default, with the `outer` parallel iterations
    of the other spatial loops, gives >= 8 tasks per core."""
    counts = [d // mr for d in range(mr, m + 1, mr) if m % d == 0]
    tasks = [c for c in counts if outer * (m // (c * mr)) >= TASKS_PER_CORE * cores] or counts[:1]
    return counts, counts.index(max(tasks))


class MatmulLowpCPU(Rule):
    """GotoBLAS tiling of a u8 x s8 -> s32 or bf16 -> fp32 GEMM onto its micro-kernel (module
    docstring)."""

    name = "multi-level-tiling-cpu-lowp"

    def alternatives(self, sch: Schedule, block: str) -> list:
        if self.hw.kind != "cpu":
            return []
        found = lowp_gemm(sch, block)
        if found is None:
            return []
        roles, kind = found
        m, n, k = roles.i.extent, roles.j.extent, roles.k.extent
        assert m is not None and n is not None and k is not None   # info.constant_extents
        out: list = []
        for isa in kind.isas(self.hw.features, self.hw.target):
            if kind.converts(isa) and _plain_operand(roles.a_indices, roles.i, roles.k) is not None \
                    and _plain_operand(roles.b_indices, roles.k, roles.j) is not None:
                out += self._converted_gemm(block, roles, kind, isa)
                continue
            out += [lambda s, t=t, isa=isa: self._tile(s, block, roles, kind, isa, t)
                    for t in lowp_tiles(m, n, k, kind, isa, self.hw.l1)]
        return out

    def _why(self, kind: LowpGemm) -> str:
        """Why a float16 / bfloat16 GEMM converts (for kernel.notes)."""
        if kind.a == "bfloat16":
            if all(f in self.hw.features for f in x86_lowp.BF16_FEATURES):
                return bf16_prefers_dot(self.hw.target)[1]
            return "the CPU has no AVX512-BF16 (vdpbf16ps)"
        return "the CPU has no float16 dot product that accumulates in fp32"

    def _dot_note(self, kind: LowpGemm, isa: str, name: str, roles: MatmulRoles) -> str:
        """What a VNNI / AVX512-BF16 tile runs on, and why not AMX where the CPU has it."""
        m, n, k = roles.i.extent, roles.j.extent, roles.k.extent
        text = f"the {UNITS[isa]} micro-kernel {name}"
        amx = "u8s8s32" if kind.c == "int32" else "bf16f32"
        if x86_amx.available(amx, self.hw.features):
            text += (f"; the CPU has AMX, but no AMX tile takes this {m} x {n} x {k} GEMM (k must be a multiple "
                     f"of {x86_amx.KINDS[amx][4]}, and an edge tile must fill a quarter of its 16 x 16 accumulators)")
        elif isa == "avx512bf16":
            text += f"; {self._why(kind)}"
        return text

    def _converted_gemm(self, block: str, roles: MatmulRoles, kind: LowpGemm, isa: str) -> list:
        """A plain (or batched) GEMM converted in packing and tiled exactly as the fp32 rule tiles
        an fp32 GEMM (`lowp_convert`)."""
        m, n, k = roles.i.extent, roles.j.extent, roles.k.extent
        assert m is not None and n is not None and k is not None
        lanes = x86.ISAS[isa][0]
        if n % lanes and isa == "avx512" and n % x86.ISAS["avx2"][0] == 0:
            isa, lanes = "avx2", x86.ISAS["avx2"][0]   # as the fp32 rule: n = 24, 40, ... on AVX2's kernel
        if n % lanes:
            return []
        fp32 = MatmulTensorizeCPU(self.hw, self.defaults)
        note = convert_note(kind.a, block, self._why(kind))
        return [lambda s, t=t: fp32._tile(s, block, roles, t, isa, operand_dtype=kind.c, note=note)
                for t in default_tiles(m, n, k, lanes, self.hw.l1, x86.ACCUMULATORS[isa])]

    def _tile(self, s: Schedule, block: str, roles: MatmulRoles, kind: LowpGemm, isa: str, tile: MicroTile) -> None:
        mr, nr, kc, g = tile.mr, tile.nr, tile.kc, kind.group(isa)
        m, n = roles.i.extent, roles.j.extent
        assert m is not None and n is not None   # alternatives() takes constant extents only
        c = s.get_block(block)
        b_name = roles.b.name
        info0 = block_info(s.func, block)
        readers = None if roles.c in info0.params else [
            r for r in consumers(s.func, block) if block_info(s.func, r).is_spatial]
        convert = {"dtype": kind.c} if kind.converts(isa) else {}
        if convert:   # A is read in place (conv2d's input): one converted copy of the same shape
            pack_a = s.cache_read(c, roles.a.name, "global", **convert)
            attempt(s, lambda t: _parallel_copy(t, pack_a))
        pack_b = s.cache_read(c, b_name, "global", **convert)
        params = [f"v{d}" for d in range(len(roles.b_indices))]
        lead, kk, jj = params[:-2], params[-2], params[-1]
        grouped = [f"{kk} // {g}", f"{jj} % {nr}", f"{kk} % {g}"] if g > 1 else [kk, f"{jj} % {nr}"]
        s.transform_layout(pack_b, f"{b_name}_global", _lambda(params, lead + [f"{jj} // {nr}"] + grouped))
        # the copy in the packed order (contiguous writes), parallel over panels
        *plead, pk, pj = s.get_loops(pack_b)
        pjo, pji = s.split(pj, [None, nr])
        if g > 1:
            pko, pki = s.split(pk, [None, g])
            s.reorder(pjo, pko, pji, pki)
        else:
            pko = pk
            s.reorder(pjo, pko, pji)
            s.vectorize(pji)
        s.parallel(s.fuse(*plead, pjo, pko))
        handles = s.get_loops(c)
        info = block_info(s.func, block)
        by_var = {id(h.var): h for h in handles}
        loop_of = {id(it.var): by_var[id(it.loop)] for it in info.iters}
        by_loop = {id(it.loop): it for it in info.iters}
        li, lj, lk = loop_of[id(roles.i.var)], loop_of[id(roles.j.var)], loop_of[id(roles.k.var)]
        kinds = [by_loop[id(h.var)].kind for h in handles]
        others_s = [h for h, kd in zip(handles, kinds) if kd == "S" and h not in (li, lj)]
        others_r = [h for h, kd in zip(handles, kinds) if kd == "R" and h is not lk]
        outer_tasks = 1
        for h in others_s:
            outer_tasks *= _extent_of(s.func, h.var) or 1
        nc_counts, nc_default = nc_candidates(n, nr)
        nc = nr * int(self.choose(s, nc_counts, nc_default))
        mc_counts, mc_default = mc_candidates(m, mr, self.hw.cores, outer_tasks)
        mc_over_mr = self.choose(s, mc_counts, mc_default)
        io, i0, i1 = s.split(li, [None, mc_over_mr, mr])
        jc, j0, j1 = s.split(lj, [None, nc // nr, nr])
        # the tile spans the reduction: C = A @ B (the fp32 kernel has no such variant)
        whole = kc == roles.k.extent and not others_r and not convert
        if whole:
            s.reorder(*others_s, io, jc, j0, i0, i1, j1, lk)
        else:
            k0, k1 = s.split(lk, [None, kc])
            s.reorder(*others_s, io, *others_r, jc, k0, j0, i0, i1, j1, k1)
        s.parallel(s.fuse(*others_s, io) if others_s else io)
        if not whole:
            init = s.decompose_reduction(c, (others_r + [k0])[0])
            s.vectorize(s.get_loops(init)[-1])
        name = kind.intrinsic(isa, tile, init=whole)
        tile_block = s.blockize(i1)
        s.tensorize(tile_block, name)
        if isa == "avx2" and kind is INT8:
            s.annotate(tile_block, LOWER_NOTE, FALLBACK_NOTE.format(block=block, intrin=name))
        elif convert:
            s.annotate(tile_block, LOWER_NOTE, convert_note(kind.a, block, self._why(kind), a_whole=True).format(intrin=name))
        else:
            s.annotate(tile_block, LOWER_NOTE, path_note(kind, block, self._dot_note(kind, isa, name, roles)))
        if readers is not None and len(readers) == 1:
            attempt(s, lambda t: _epilogue_at(t, readers[0], tile_block))


def _epilogue_at(s: Schedule, reader: str, tile_block, lanes: int = 16, at: int = 0) -> None:
    """The one elementwise reader of an intermediate accumulator (a requantize epilogue) computed
    per parallel block of rows, right after them: the int32 block stays in cache (and the
    accumulator shrinks to one block per task); `at`: the tile's loop to compute it under (1: a
    block of columns of those rows, where that loop is the column blocks). Its row loop is vectorized `lanes` at a time (a
    whole 4096-wide row as one vector made LLVM spill it lane by lane: 3x slower)."""
    epilogue = s.get_block(reader)
    s.reverse_compute_at(epilogue, s.get_loops(tile_block)[at])
    last = s.get_loops(epilogue)[-1]
    extent = _extent_of(s.func, last.var)
    if extent is not None and extent > lanes and extent % lanes == 0:
        last = s.split(last, [None, lanes])[1]
    s.vectorize(last)


def _parallel_copy(s: Schedule, copy) -> None:
    """A whole-buffer conversion copy: its outer loops fused and parallel, its inner one vectorized."""
    loops = s.get_loops(copy)
    if len(loops) > 1:
        s.vectorize(loops[-1])
        s.parallel(s.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])
    else:
        s.parallel(loops[0])


def _kernel_layout(roles: MatmulRoles, iters) -> bool:
    """The operands index the way the micro-kernel reads them in place (B is packed): A's last
    index is k and another holds i, B's last two are (k, j), C's last is j and another holds i
    (a GEMM; conv2d in NHWC with HWIO filters: i = output column, j = filter, k = channel), and
    the block declares i before j before k (as `T.axis.remap` lists them)."""
    a, b, c = roles.a_indices, roles.b_indices, roles.c_indices
    i = roles.i.var
    order = [it.var for it in iters]
    if not order.index(i) < order.index(roles.j.var) < order.index(roles.k.var):
        return False   # the micro-kernel's description declares its iterators i, j, k in this order
    return (a[-1] is roles.k.var and any(i in free_vars(e) for e in a[:-1])
            and len(b) >= 2 and all(isinstance(e, Var) for e in b) and b[-2] is roles.k.var and b[-1] is roles.j.var
            and c[-1] is roles.j.var and any(e is i for e in c[:-1]))


__all__ = ["BF16", "FP16", "INT8", "LowpGemm", "MatmulLowpCPU", "int8_tiles", "lowp_tiles"]
