"""Hopper (sm_90a) GEMM pipelines: wgmma_pipeline, warp_specialize.

`wgmma_pipeline(func, block, tile_n, tile_k, stages, tile_m)` rewrites a function whose one
block is a (batched) fp16/bf16 -> fp32 GEMM -- or a GEMM into an intermediate C followed by one
elementwise epilogue block ``D[b?, i, j] = f(C[b?, i, j], bias[j], ...)``, whose expression is
then applied to the accumulators at the store (C never materialised) -- into a TMA + mbarrier +
wgmma kernel: per `tile_m` x
`tile_n` tile of C one warpgroup (128 threads) per 64 rows; thread 0 issues the TMA loads of a K
step into a ring of `stages` shared tiles guarded by "full" / "empty" mbarriers; every thread
waits for the stage, issues its wgmma m64nNk16 (fence, commit), waits for the previous step's
(`wgmma_wait_group(1)`) and releases that step's stage. The tensor maps are buffers of the
function recorded in its attributes (`tdsl.ir.tensor_maps`), encoded by the call path. A B
indexed ``B[k, j]`` is loaded in TMA boxes of [tile_k rows, 64 columns] and read N-major by
wgmma (``b_major="mn"``), with no copy (a tile_n with no such boxes copies it K-major to
``<B>_t[j, k]`` first, one small kernel). With ``store="tma"`` the accumulators go through a
shared tile that one thread stores by TMA. `warp_specialize` (primitives/warp_specialize.py) then gives the producer
and the consumers their own warpgroups.

The result keeps the function's meaning: run one statement after another (`tdsl.interpret`),
waits have nothing to wait for, a TMA load is a box copy and a wgmma adds the thread's
accumulators.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...ir import (
    Binary,
    BlockRealize,
    BufferLoad,
    BufferStore,
    Cast,
    FloatImm,
    For,
    IntImm,
    PrimFunc,
    Var,
    collect,
)
from ...ir.functor import IRMutator, free_vars, replace_fields
from ...ir.tensor_maps import TensorMapSpec
from ..errors import block_name, schedule_error
from ..tree import find_block

WARPGROUP = 128
BLOCK_M = 64                       # wgmma's m
MAX_SHARED = 227 * 1024            # shared memory an sm_90 block may have (opt-in; dynamic above 48 KiB)
SWIZZLE_OF_ROW_BYTES = {32: "32B", 64: "64B", 128: "128B"}
STORES = ("direct", "tma")           # how the accumulators reach C / D: thread stores, or a TMA store of the tile
TMA_STORE_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Gemm:
    """A (batched) GEMM block: C[b?, i, j] (+)= f32(A[b?, i, k]) * f32(B[b?, k, j] or B[b?, j, k])."""

    a: object
    b: object
    c: object
    m: int
    n: int
    k: int
    batch: int | None
    b_batched: bool
    trans_b: bool          # B indexed [.., j, k]
    init: bool             # the block starts C at zero (T.init)
    epilogue: Epilogue | None = None   # D[b?, i, j] = f(C[b?, i, j], ...) after the GEMM (C never stored)


@dataclass(frozen=True)
class Epilogue:
    """The elementwise block after a GEMM: ``out[v] = value`` (value reads C at ``v`` only)."""

    block: str
    out: object            # D, a parameter of C's shape (any dtype)
    iters: tuple           # its iterators (b?, i, j)
    value: object          # the expression stored, over `iters`, C and parameters


def _f32_load(e) -> BufferLoad | None:
    if isinstance(e, Cast) and str(e.dtype) == "float32" and isinstance(e.value, BufferLoad):
        return e.value
    return None


def _is_zero(stmt) -> bool:
    return isinstance(stmt, BufferStore) and isinstance(stmt.value, FloatImm) and stmt.value.value == 0.0


def _terms(store, refuse) -> tuple[BufferStore, BufferLoad, BufferLoad]:
    """The store C[...] = C[...] + f32(x) * f32(y) of a GEMM block's body and its two loads."""
    if not isinstance(store, BufferStore) or not isinstance(store.value, Binary) or store.value.op != "add":
        raise refuse("its body is not one C[...] = C[...] + product")
    acc, prod = store.value.a, store.value.b
    if not (isinstance(acc, BufferLoad) and acc.buffer is store.buffer):
        acc, prod = prod, acc
    if not (isinstance(acc, BufferLoad) and acc.buffer is store.buffer and isinstance(prod, Binary)
            and prod.op == "mul" and all(x is y for x, y in zip(acc.indices, store.indices))):
        raise refuse("its body is not C[...] = C[...] + x * y")
    raw = [e.value if isinstance(e, Cast) else e for e in (prod.a, prod.b)]
    dtypes = [str(e.buffer.dtype) for e in raw if isinstance(e, BufferLoad)]
    if len(dtypes) == 2 and not set(dtypes) <= {"float16", "bfloat16"}:
        raise refuse(f"A and B are {' and '.join(dtypes)}; wgmma takes float16 or bfloat16 A and B")
    x, y = _f32_load(prod.a), _f32_load(prod.b)
    if x is None or y is None or x.buffer is y.buffer:
        raise refuse("the product is not of two float32 casts of loads of two buffers",
                     'write T.cast(A[i, k], "float32") * T.cast(B[k, j], "float32")')
    return store, x, y


def _extents(realize, loops: list, refuse) -> list[int]:
    """The constant extents of a GEMM block's iterators (i, j, k, after a batch), each bound to
    its own loop."""
    blk = realize.block
    kinds = "".join(iv.kind for iv in blk.iter_vars)
    if kinds not in ("SSR", "SSSR"):
        raise refuse(f"its iterators are {kinds!r}, not i, j (spatial) and k (reduction), optionally after a batch")
    if len(realize.iter_values) != len(loops) or not all(v is lp.loop_var for v, lp in zip(realize.iter_values, loops)):
        raise refuse("its iterators are not bound one to one to its loops")
    extents = []
    for iv in blk.iter_vars:
        if not isinstance(iv.dom.extent, IntImm):
            raise refuse("its sizes are not constants", "specialize the function first (f.specialize(n=...))")
        extents.append(iv.dom.extent.value)
    return extents


def match_gemm(func: PrimFunc, block: str, primitive: str) -> Gemm:
    """The GEMM roles of `block`, or a ScheduleError saying what does not fit."""
    realize, path = find_block(func, block, primitive)
    blk = realize.block

    def refuse(why: str, fix: str | None = None):
        return schedule_error(func, primitive, f"{block_name(block)}: {why}", blocks=(block,),
                              rule="the block is a (batched) GEMM C[b?, i, j] += f32(A[b?, i, k]) * f32(B[b?, k, j] "
                                   "or B[b?, j, k]) with fp16/bf16 A and B, fp32 C, constant sizes, and the "
                                   "function's only block but for at most one elementwise epilogue "
                                   "D[b?, i, j] = f(C[b?, i, j], ...) (C an intermediate it alone reads)",
                              fix=fix)

    others = [r.block.name for r in collect(func.body, BlockRealize) if r.block.name not in ("root", block)]
    if len(others) > 1:
        raise refuse(f"the function has other blocks ({', '.join(others)}); at most one elementwise epilogue "
                     "may follow the GEMM")
    loops = [p for p in path if isinstance(p, For)]
    if any(lp.kind != "serial" for lp in loops) or len(loops) != len(blk.iter_vars):
        raise refuse("its loops are already scheduled (the pipeline starts from the unscheduled nest)")
    store, x, y = _terms(blk.body, refuse)
    extents = _extents(realize, loops, refuse)
    ivs = [iv.var for iv in blk.iter_vars]
    *lead, vi, vj, vk = ivs
    batch = extents[0] if lead else None
    m, n, k = extents[-3:]
    if len(store.indices) != len(ivs) - 1 or not all(e is v for e, v in zip(store.indices, [*lead, vi, vj])):
        raise refuse("C is not indexed [b?, i, j] by the block's iterators")

    found = _operands(lead, vi, vj, vk, x, y)
    if found is None:
        raise refuse("A is not indexed [b?, i, k] and B [b?, k, j] or [b?, j, k] by the block's iterators")
    a, b, trans, b_batched = found
    gemm = Gemm(a, b, store.buffer, m, n, k, batch, b_batched, trans, blk.init is not None)
    _check_types(gemm, refuse)
    if blk.init is not None and not _is_zero(blk.init):
        raise refuse("its T.init() does not set C to zero")
    params = [p for p in func.params if not isinstance(p, Var)]
    if any(not any(x is p for p in params) for x in (a, b)):
        raise refuse("A and B are not parameters of the function")
    if others:
        return replace(gemm, epilogue=_epilogue(func, realize, gemm, others[0], params, refuse))
    if not any(store.buffer is p for p in params):
        raise refuse(f"C ({store.buffer.name}) is not a parameter and no epilogue reads it")
    return gemm


def _epilogue(func: PrimFunc, gemm_realize, g: Gemm, name: str, params: list, refuse) -> Epilogue:
    """The elementwise block `name` after the GEMM: D[v] = f(C[v], other parameters), C an
    intermediate read by it alone; else a refusal saying what does not fit."""
    c = g.c
    cn = "C" if c.name == "C" else f"C ({c.name})"   # type: ignore[attr-defined]

    def no(why: str, fix: str | None = None):
        return refuse(f"its epilogue {block_name(name)} {why}", fix)

    realize, path = find_block(func, name, "wgmma_pipeline")
    blk = realize.block
    order = [r.block.name for r in collect(func.body, BlockRealize)]   # (post order: the root last)
    if order.index(name) < order.index(gemm_realize.block.name):
        raise no("comes before the GEMM")
    if any(c is p for p in params):
        raise no(f"reads {cn}, a parameter: C must be an intermediate (T.alloc_buffer) the "
                 "epilogue alone reads", "write the GEMM into a T.alloc_buffer")
    if not g.init:
        raise no(f"reads {cn}, an intermediate the GEMM adds to without T.init() (it would start "
                 "from an undefined value)", "start C at zero with T.init()")
    iters = tuple(iv.var for iv in blk.iter_vars)
    store = blk.body
    if blk.init is not None or any(iv.kind != "S" for iv in blk.iter_vars):
        raise no("is a reduction: the epilogue must be elementwise (spatial iterators only)")
    if not isinstance(store, BufferStore):
        raise no("is not one store D[b?, i, j] = f(C[b?, i, j], ...)")
    d = store.buffer
    if d is c or not any(d is p for p in params):
        raise no(f"writes {d.name}: it must write a parameter other than C")
    shape = [int(x.value) for x in c.shape]   # type: ignore[attr-defined]
    if [int(x.value) if isinstance(x, IntImm) else None for x in d.shape] != shape:
        raise no(f"writes {d.name} of another shape than C {tuple(shape)}")
    doms = [(iv.dom.min.value, iv.dom.extent.value) if isinstance(iv.dom.min, IntImm) and
            isinstance(iv.dom.extent, IntImm) else None for iv in blk.iter_vars]
    if doms != [(0, x) for x in shape]:
        raise no(f"does not iterate over C's shape {tuple(shape)}")
    if len(store.indices) != len(iters) or not all(e is v for e, v in zip(store.indices, iters)):
        raise no(f"does not write {d.name} at its own iterators [{', '.join(v.name for v in iters)}]")
    _check_epilogue_reads(store.value, c, cn, d, iters, params, no)
    loops = [p for p in path if isinstance(p, For)]
    if any(lp.kind != "serial" for lp in loops) or len(loops) != len(iters) or \
            not all(v is lp.loop_var for v, lp in zip(realize.iter_values, loops)):
        raise no("has scheduled loops (the pipeline starts from the unscheduled nest)")
    if not (isinstance(realize.predicate, IntImm) and realize.predicate.value == 1) or blk.alloc_buffers:
        raise no("has a predicate (T.where) or buffers of its own: it must be one unconditional store")
    return Epilogue(name, d, iters, store.value)


def _check_epilogue_reads(value, c, cn: str, d, iters: tuple, params: list, no) -> None:
    """The epilogue's expression reads C at its own iterators only (at least once), other
    parameters (not its output D) and no variable but its iterators."""
    loads = collect(value, BufferLoad)
    reads_c = False
    for ld in loads:
        if ld.buffer is c:
            if len(ld.indices) != len(iters) or not all(e is v for e, v in zip(ld.indices, iters)):
                raise no(f"reads {cn} at another index than the one it writes",
                         f"read {c.name}[{', '.join(v.name for v in iters)}] only")
            reads_c = True
        elif ld.buffer is d:
            raise no(f"reads its own output {d.name}")
        elif not any(ld.buffer is p for p in params):
            raise no(f"reads {ld.buffer.name}, which is not a parameter of the function")
    if not reads_c:
        raise no(f"does not read {cn}")
    stray = [v.name for v in free_vars(value) if not any(v is x for x in iters)]
    if stray:
        raise no(f"uses {', '.join(sorted(stray))}: only its iterators, C and parameters' elements may appear")


def _operands(lead: list, vi, vj, vk, x: BufferLoad, y: BufferLoad):
    """(A, B, B indexed [j, k], B batched) when one load is A[b?, i, k] and the other B[b?, k, j]
    or B[b?, j, k] (B without the batch index: shared by the batch); else None."""
    def indexed(load: BufferLoad, *vs) -> bool:
        return len(load.indices) == len(vs) and all(e is v for e, v in zip(load.indices, vs))

    for a, b in ((x, y), (y, x)):
        if not indexed(a, *lead, vi, vk):
            continue
        for trans in (True, False):
            mn = (vj, vk) if trans else (vk, vj)
            for b_batched in ((True, False) if lead else (False,)):
                if indexed(b, *(lead if b_batched else ()), *mn):
                    return a.buffer, b.buffer, trans, b_batched
    return None


def _check_types(g: Gemm, refuse) -> None:
    a, b, c = (str(x.dtype) for x in (g.a, g.b, g.c))   # type: ignore[attr-defined]
    if a not in ("float16", "bfloat16") or b != a or c != "float32":
        raise refuse(f"A, B, C are {a}, {b}, {c}; wgmma takes float16 or bfloat16 A and B and float32 C")


def store_problem(g: Gemm) -> str | None:
    """Why the pipeline cannot store its output (C, or the epilogue's D) by TMA; None when it can."""
    out = g.epilogue.out if g.epilogue is not None else g.c
    dt = str(out.dtype)   # type: ignore[attr-defined]
    if dt not in TMA_STORE_DTYPES:
        return (f"{out.name} is {dt}; the TMA store writes {', '.join(TMA_STORE_DTYPES)} "   # type: ignore[attr-defined]
                "(use store=\"direct\")")
    return None


def out_tile_bytes(g: Gemm, tile_m: int, tile_n: int) -> int:
    """The shared tile a TMA store of the output goes through, in bytes (aligned to 1024)."""
    out = g.epilogue.out if g.epilogue is not None else g.c
    return -(-tile_m * tile_n * out.dtype.itemsize // 1024) * 1024   # type: ignore[attr-defined]


def _check_tiles(func: PrimFunc, block: str, g: Gemm, tile_m: int, tile_n: int, tile_k: int, stages: int,
                 store: str = "direct") -> str:
    """The swizzle of the tiles, or a ScheduleError naming the tile that does not fit."""
    def refuse(why: str, fix: str):
        return schedule_error(func, "wgmma_pipeline", f"{block_name(block)} ({g.m} x {g.n} x {g.k}): {why}",
                              blocks=(block,), fix=fix)

    if tile_m not in (BLOCK_M, 2 * BLOCK_M):
        raise refuse(f"tile_m = {tile_m}: one or two warpgroups' wgmma rows ({BLOCK_M} or {2 * BLOCK_M})", "tile_m=64")
    if g.m % tile_m:
        raise refuse(f"m = {g.m} is not a multiple of tile_m = {tile_m} (wgmma's m is {BLOCK_M})",
                     "pad m (sch.pad_einsum) or tile_m=64")
    if not (8 <= tile_n <= 256 and tile_n % 8 == 0) or g.n % tile_n:
        raise refuse(f"tile_n = {tile_n} must be a multiple of 8 in [8, 256] dividing n", "pick another tile_n")
    row_bytes = tile_k * 2
    if row_bytes not in SWIZZLE_OF_ROW_BYTES or g.k % tile_k:
        raise refuse(f"tile_k = {tile_k} must be 16, 32 or 64 (a swizzle span of 32, 64 or 128 bytes) dividing k",
                     "tile_k=64 (the 128-byte swizzle)")
    if stages < 1:
        raise refuse(f"stages = {stages}: at least one stage", "stages=2")
    if store == "tma":
        why = store_problem(g)
        if why is not None:
            raise refuse(f'store = "tma": {why}', 'store="direct"')
    smem = stages * (tile_m + tile_n) * tile_k * 2 + 16 * stages
    out_tile = out_tile_bytes(g, tile_m, tile_n) if store == "tma" else 0
    if smem + out_tile > MAX_SHARED:
        tile = f" and the {tile_m} x {tile_n} output tile of the TMA store" if out_tile else ""
        raise refuse(f"{stages} stages of {tile_m} x {tile_k} and {tile_n} x {tile_k} tiles{tile} take "
                     f"{smem + out_tile} bytes of shared memory, more than the {MAX_SHARED} of shared memory an "
                     "sm_90 block may have", "fewer stages or a smaller tile_n / tile_k" +
                     (', or store="direct"' if out_tile else ""))
    return SWIZZLE_OF_ROW_BYTES[row_bytes]


class _BOperand:
    """B in the pipeline: its tensor map, its shared tile per stage, its TMA loads and its wgmma
    operand; K-major (B[j, k], or the copy B_t[j, k] of a B[k, j] no N-major box fits) or N-major
    (B[k, j] in tile_n / span boxes of [tile_k rows, span columns], side by side)."""

    def __init__(self, g: Gemm, tile_n: int, tile_k: int, swizzle: str):
        self.g, self.bn, self.bk, self.swizzle = g, tile_n, tile_k, swizzle
        self.name = g.b.name   # type: ignore[attr-defined]
        self.span = b_mn_span(g, tile_n)
        self.transpose = not g.trans_b and self.span is None
        self.src = f"{self.name}_t" if self.transpose else self.name
        self.one, self.zb, self.bb = ("1, ", "0, ", "bz, ") if g.b_batched else ("", "", "")
        self.major = "" if self.span is None else ', b_major="mn"'

    def tensor_map(self) -> TensorMapSpec:
        lead = (1,) if self.g.b_batched else ()
        if self.span is None:
            return TensorMapSpec(f"{self.name}_tmap", self.src, lead + (self.bn, self.bk), self.swizzle)
        return TensorMapSpec(f"{self.name}_tmap", self.name, lead + (self.bk, self.span),
                             SWIZZLE_OF_ROW_BYTES[2 * self.span])

    def tile_shape(self) -> str:
        """A stage's tile, after the stage axis."""
        if self.span is None:
            return f"{self.one}{self.bn}, {self.bk}"
        return f"{self.bn // self.span}, {self.one}{self.bk}, {self.span}"

    def loads(self, st: str) -> list[str]:
        B, bb, zb, BN, BK = self.name, self.bb, self.zb, self.bn, self.bk
        tail = f"{B}_tmap[0], bar_full[{st}]))"
        if self.span is None:
            return [f"T.evaluate(T.ptx_tma_load({B}_shared[{st}, {zb}0, 0], {self.src}[{bb}bx * {BN}, ko * {BK}], "
                    + tail]
        if BN == self.span:
            return [f"T.evaluate(T.ptx_tma_load({B}_shared[{st}, 0, {zb}0, 0], {B}[{bb}ko * {BK}, bx * {BN}], " + tail]
        return [f"for nb in T.unroll({BN // self.span}):",
                f"    T.evaluate(T.ptx_tma_load({B}_shared[{st}, nb, {zb}0, 0], {B}[{bb}ko * {BK}, bx * {BN} + nb * "
                f"{self.span}], " + tail]

    def operand(self, st: str) -> str:
        if self.span is None:
            return f"{self.name}_shared[{st}, {self.zb}0, 16 * kk]"
        return f"{self.name}_shared[{st}, 0, {self.zb}16 * kk, 0]"


def b_mn_span(g: Gemm, tile_n: int) -> int | None:
    """The columns of each TMA box of a B indexed [b?, k, j] that wgmma reads N-major (64, or
    tile_n when that is 16 or 32: rows of 128, 32 or 64 bytes, a swizzle span); None where B is
    indexed [b?, j, k] (K-major already) or tile_n has no such boxes (then B is copied K-major)."""
    if g.trans_b:
        return None
    if tile_n in (16, 32, 64):
        return tile_n
    return 64 if tile_n % 64 == 0 else None


def _type(buf) -> str:
    return f'T.Buffer(({", ".join(str(s.value) for s in buf.shape)},), "{buf.dtype}")'


def _transpose_source(g: Gemm, B: str, dt: str) -> list[str]:
    """The kernel copying B[b?, k, j] to B_t[b?, j, k]: 32 x 32 tiles through shared memory (rows
    padded to 33: reading a column is free of bank conflicts), both global sides coalesced;
    element by element where 32 does not divide n and k."""
    zb = "t_b, " if g.b_batched else ""
    if g.n % 32 or g.k % 32:
        total = (g.batch if g.b_batched and g.batch else 1) * g.n * g.k
        threads = 256 if total % 256 == 0 else 128   # (n: a multiple of 8, k of 16)
        e = f"(t0 * {threads} + t1)"
        idx_t = f"{e} // {g.k} % {g.n}, {e} % {g.k}"
        idx_b = f"{e} % {g.k}, {e} // {g.k} % {g.n}"
        if g.b_batched:
            idx_t, idx_b = f"{e} // {g.n * g.k}, {idx_t}", f"{e} // {g.n * g.k}, {idx_b}"
        return [f'    for t0 in T.thread_binding({total // threads}, thread="blockIdx.x"):',
                f'        for t1 in T.thread_binding({threads}, thread="threadIdx.x"):',
                f"            {B}_t[{idx_t}] = {B}[{idx_b}]"]
    out = [f'    {B}_tile = T.alloc_buffer((32, 33), "{dt}", scope="shared")']
    ind = "    "
    if g.b_batched:
        out.append(f'    for t_b in T.thread_binding({g.batch}, thread="blockIdx.z"):')
        ind += "    "
    out += [f'{ind}for t_k in T.thread_binding({g.k // 32}, thread="blockIdx.y"):',
            f'{ind}    for t_n in T.thread_binding({g.n // 32}, thread="blockIdx.x"):']
    for src, dst in ((f"{B}[{zb}t_k * 32 + t_y * 4 + r, t_n * 32 + t_x]", f"{B}_tile[t_y * 4 + r, t_x]"),
                     (f"{B}_tile[t_x, t_y * 4 + r]", f"{B}_t[{zb}t_n * 32 + t_y * 4 + r, t_k * 32 + t_x]")):
        out += [f'{ind}        for t_y in T.thread_binding(8, thread="threadIdx.y"):',
                f'{ind}            for t_x in T.thread_binding(32, thread="threadIdx.x"):',
                f"{ind}                for r in T.unroll(4):",
                f"{ind}                    {dst} = {src}"]
    return out


def pipeline_source(func: PrimFunc, g: Gemm, tile_m: int, tile_n: int, tile_k: int, stages: int,
                    swizzle: str, store: str = "direct") -> str:
    """The TensorIR script of the pipelined function (see the module docstring): tile_m / 64
    warpgroups, warpgroup w computing rows 64 w .. 64 w + 63 of the tile; `store` "tma": the
    accumulators go to a shared tile that one thread stores by TMA."""
    A, B, C = g.a.name, g.b.name, g.c.name   # type: ignore[attr-defined]
    dt = str(g.a.dtype)  # type: ignore[attr-defined]
    BN, BK, S = tile_n, tile_k, stages
    BM, THREADS = tile_m, tile_m // BLOCK_M * WARPGROUP
    KT, TX = g.k // BK, (BM + BN) * BK * 2
    batched = g.batch is not None
    b0 = "bz, " if batched else ""
    one = "1, " if batched else ""
    z = "0, " if batched else ""
    params = ", ".join(f"{p.name}: {_type(p)}" for p in func.params)   # (all buffers, constant shapes)
    lines = [f"@T.prim_func\ndef {func.name}({params}):"]
    attrs = [TensorMapSpec(f"{A}_tmap", A, ((1,) if batched else ()) + (BM, BK), swizzle)]
    bop = _BOperand(g, BN, BK, swizzle)
    transpose = bop.transpose
    attrs.append(bop.tensor_map())
    out_name = g.epilogue.out.name if g.epilogue is not None else C   # type: ignore[attr-defined]
    out_dtype = str(g.epilogue.out.dtype) if g.epilogue is not None else "float32"   # type: ignore[attr-defined]
    if store == "tma":
        attrs.append(TensorMapSpec(f"{out_name}_tmap", out_name, ((1,) if batched else ()) + (BM, BN), "none"))
    w = lines.append
    w("    T.func_attr({" + ", ".join(f'"{k}": "{v}"' for k, v in (s.attr for s in attrs)) + "})")
    w(f'    {A}_tmap = T.alloc_buffer((128,), "uint8")')
    w(f'    {B}_tmap = T.alloc_buffer((128,), "uint8")')
    if store == "tma":
        w(f'    {out_name}_tmap = T.alloc_buffer((128,), "uint8")')
    if transpose:
        lead = (g.batch,) if g.b_batched else ()
        w(f'    {B}_t = T.alloc_buffer(({", ".join(str(s) for s in (*lead, g.n, g.k))}), "{dt}")')
    w(f'    {A}_shared = T.alloc_buffer(({S}, {one}{BM}, {BK}), "{dt}", scope="shared")')
    w(f'    {B}_shared = T.alloc_buffer(({S}, {bop.tile_shape()}), "{dt}", scope="shared")')
    w(f'    bar_full = T.alloc_buffer(({S},), "uint64", scope="shared")')
    w(f'    bar_empty = T.alloc_buffer(({S},), "uint64", scope="shared")')
    w(f'    {C}_acc = T.alloc_buffer(({THREADS}, {BN // 2}), "float32", scope="local")')
    if store == "tma":
        w(f'    {out_name}_shared = T.alloc_buffer(({one}{BM}, {BN}), "{out_dtype}", scope="shared")')
    if transpose:   # B[k, j] -> B_t[j, k] (K-major: no N-major form for this tile_n)
        lines.extend(_transpose_source(g, B, dt))
    ind = "    "
    if batched:
        w(f'    for bz in T.thread_binding({g.batch}, thread="blockIdx.z"):')
        ind += "    "
    w(f'{ind}for by in T.thread_binding({g.m // BM}, thread="blockIdx.y"):')
    w(f'{ind}    for bx in T.thread_binding({g.n // BN}, thread="blockIdx.x"):')
    ind += "        "
    lane, wg_row = ("tx", "") if THREADS == WARPGROUP else (f"tx % {WARPGROUP}", f" + {BLOCK_M} * (tx // {WARPGROUP})")
    row = f"by * {BM}{wg_row} + 16 * ({lane} // 32) + {lane} % 32 // 4 + 8 * (i // 2 % 2)"
    col = f"bx * {BN} + 8 * (i // 4) + 2 * (tx % 4) + i % 2"
    w(f'{ind}for tx in T.thread_binding({THREADS}, thread="threadIdx.x"):')
    w(f"{ind}    if tx == 0:")
    w(f"{ind}        for s in range({S}):")
    w(f"{ind}            T.evaluate(T.ptx_init_barrier_thread_count(bar_full[s], 1))")
    w(f"{ind}            T.evaluate(T.ptx_init_barrier_thread_count(bar_empty[s], {THREADS}))")
    w(f"{ind}    for i in T.unroll({BN // 2}):")
    w(f"{ind}        {C}_acc[tx, i] = " + ("T.float32(0)" if g.init else f"{C}[{b0}{row}, {col}]"))
    w(f"{ind}for ko in range({KT}):")
    w(f'{ind}    for tx in T.thread_binding({THREADS}, thread="threadIdx.x"):')
    st = f"ko % {S}"
    w(f"{ind}        if tx == 0:")
    if KT > S:
        w(f"{ind}            if ko >= {S}:")
        w(f"{ind}                T.evaluate(T.ptx_wait_barrier(bar_empty[{st}], (ko // {S} + 1) % 2))")
    w(f"{ind}            T.evaluate(T.ptx_arrive_barrier_expect_tx(bar_full[{st}], {TX}))")
    w(f"{ind}            T.evaluate(T.ptx_tma_load({A}_shared[{st}, {z}0, 0], {A}[{b0}by * {BM}, ko * {BK}], "
      f"{A}_tmap[0], bar_full[{st}]))")
    lines.extend(f"{ind}            {line}" for line in bop.loads(st))
    w(f"{ind}        T.evaluate(T.ptx_wait_barrier(bar_full[{st}], ko // {S} % 2))")
    w(f"{ind}        T.evaluate(T.ptx_wgmma_fence())")
    w(f"{ind}        for kk in T.unroll({BK // 16}):")
    a_row = "0" if THREADS == WARPGROUP else f"{BLOCK_M} * (tx // {WARPGROUP})"
    w(f"{ind}            T.evaluate(T.ptx_wgmma({C}_acc[tx, 0], {A}_shared[{st}, {z}{a_row}, 16 * kk], "
      f"{bop.operand(st)}, {BN}, {lane}{bop.major}))")
    w(f"{ind}        T.evaluate(T.ptx_wgmma_commit_group())")
    if S == 1 or KT == 1:   # wait for this step's wgmma, release its stage
        w(f"{ind}        T.evaluate(T.ptx_wgmma_wait_group(0))")
        w(f"{ind}        T.evaluate(T.ptx_arrive_barrier(bar_empty[{st}]))")
    else:   # this step's wgmma stay in flight; the previous step's are done: release their stage
        w(f"{ind}        T.evaluate(T.ptx_wgmma_wait_group(1))")
        w(f"{ind}        if ko >= 1:")
        w(f"{ind}            T.evaluate(T.ptx_arrive_barrier(bar_empty[(ko + {S - 1}) % {S}]))")
    w(f'{ind}for tx in T.thread_binding({THREADS}, thread="threadIdx.x"):')
    if not (S == 1 or KT == 1):
        w(f"{ind}    T.evaluate(T.ptx_wgmma_wait_group(0))")
    w(f"{ind}    for i in T.unroll({BN // 2}):")
    # (wgmma_pipeline puts the epilogue's expression in place of the accumulator)
    value = f"{C}_acc[tx, i]" if g.epilogue is None else f'T.cast({C}_acc[tx, i], "{out_dtype}")'
    if store == "direct":
        w(f"{ind}        {out_name}[{b0}{row}, {col}] = {value}")
        return "\n".join(lines) + "\n"
    # the tile into shared memory (row, col within it), made visible to TMA, then one thread stores it
    local_row = f"{BLOCK_M} * (tx // {WARPGROUP}) + " * (THREADS != WARPGROUP) + \
        f"16 * ({lane} // 32) + {lane} % 32 // 4 + 8 * (i // 2 % 2)"
    local_col = f"8 * (i // 4) + 2 * ({lane} % 4) + i % 2"
    w(f"{ind}        {out_name}_shared[{z}{local_row}, {local_col}] = {value}")
    w(f"{ind}    T.evaluate(T.ptx_fence_proxy_async())")
    w(f'{ind}for tx in T.thread_binding({THREADS}, thread="threadIdx.x"):')
    w(f"{ind}    if tx == 0:")
    w(f"{ind}        T.evaluate(T.ptx_tma_store({out_name}[{b0}by * {BM}, bx * {BN}], {out_name}_shared[{z}0, 0], "
      f"{out_name}_tmap[0]))")
    return "\n".join(lines) + "\n"


def wgmma_pipeline(func: PrimFunc, block: str, tile_n: int = 64, tile_k: int = 64, stages: int = 2,
                   tile_m: int = 64, store: str = "direct") -> tuple[PrimFunc, Var]:
    """The GEMM `block` as a TMA + mbarrier + wgmma pipeline (module docstring); its K loop."""
    from ...script import parse

    for name, value in (("tile_m", tile_m), ("tile_n", tile_n), ("tile_k", tile_k), ("stages", stages)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise schedule_error(func, "wgmma_pipeline", f"{name} must be an int, got {value!r}", blocks=(block,))
    if store not in STORES:
        raise schedule_error(func, "wgmma_pipeline", f"{block_name(block)}: store = {store!r}: expected "
                             f"{' or '.join(map(repr, STORES))}", blocks=(block,))
    g = match_gemm(func, block, "wgmma_pipeline")
    swizzle = _check_tiles(func, block, g, tile_m, tile_n, tile_k, stages, store)
    new = parse(pipeline_source(func, g, tile_m, tile_n, tile_k, stages, swizzle, store))
    if g.epilogue is not None:
        new = _apply_epilogue(func, new, g)
    keep = tuple((k, v) for k, v in func.attrs if k not in dict(new.attrs))
    new = _with_attrs(new, keep)
    (ko,) = [f.loop_var for f in collect(new.body, For) if f.loop_var.name == "ko"]
    return new, ko


def _with_attrs(func: PrimFunc, keep: tuple) -> PrimFunc:
    return replace_fields(func, attrs=keep + tuple(func.attrs))


class _EpilogueAt(IRMutator):
    """The epilogue's expression at one accumulator: its iterators -> the store's indices, its
    C loads -> the accumulator, the old function's parameters -> the new one's."""

    def __init__(self, vmap: dict, bmap: dict, c, acc):
        self.vmap, self.bmap, self.c, self.acc = vmap, bmap, c, acc

    def visit_Var(self, var):
        return self.vmap.get(var, var)

    def visit_buffer(self, buffer):
        return self.bmap.get(buffer, buffer)

    def visit_BufferLoad(self, e):
        return self.acc if e.buffer is self.c else self.generic_visit(e)


class _ReplaceStore(IRMutator):
    def __init__(self, old, new):
        self.old, self.new = old, new

    def visit_BufferStore(self, s):
        return self.new if s is self.old else s


def _apply_epilogue(func: PrimFunc, new: PrimFunc, g: Gemm) -> PrimFunc:
    """`new` with its store of the accumulators to D (or to D's shared tile, for a TMA store)
    computing the epilogue's expression at D's index."""
    from ...ir import binary

    ep = g.epilogue
    assert ep is not None
    d = ep.out
    names = (d.name, f"{d.name}_shared")   # type: ignore[attr-defined]
    (store,) = [s for s in collect(new.body, BufferStore) if s.buffer.name in names]
    acc = store.value.value if isinstance(store.value, Cast) else store.value   # C_acc[tx, i]
    bmap = {old: nw for old, nw in zip(func.params, new.params) if not isinstance(old, Var)}
    index = list(store.indices)
    if store.buffer.name != d.name:   # type: ignore[attr-defined]  # the shared tile: D's index = its origin + (row, col)
        blocks = {f.thread_tag: f.loop_var for f in collect(new.body, For) if f.thread_tag}
        tile_m, tile_n = (int(x.value) for x in store.buffer.shape[-2:])   # type: ignore[attr-defined]
        index[-2] = binary("add", binary("mul", blocks["blockIdx.y"], tile_m), index[-2])
        index[-1] = binary("add", binary("mul", blocks["blockIdx.x"], tile_n), index[-1])
        if g.batch is not None:
            index[0] = blocks["blockIdx.z"]
    vmap = dict(zip(ep.iters, index))
    value = _EpilogueAt(vmap, bmap, g.c, acc).visit(ep.value)
    return replace_fields(new, body=_ReplaceStore(store, replace_fields(store, value=value)).visit(new.body))
