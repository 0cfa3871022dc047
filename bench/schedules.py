"""The CPU schedules that bench/run.py measures, written with public tdsl primitives only.

Each `*_schedule(...)` returns a `tdsl.Schedule` (build it with `tdsl.build(sch)`); each
`*_func(...)` returns the unscheduled kernel (the definition a user writes); the numpy
references are in bench/numpy_ref.py. Sizes are parameters so that tests/test_bench_schedules.py
checks every schedule at small sizes. docs/performance.md says where each kernel stands.

    from bench.schedules import gemm_schedule       # from the repository root
    kernel = tdsl.build(gemm_schedule(1024))
    c = kernel(a, b)
"""
from __future__ import annotations

import tdsl
from tdsl.intrinsics import x86

# -- fp32 GEMM -----------------------------------------------------------------------------

GEMM = '''
@T.prim_func
def gemm(A: T.Buffer(({m}, {k}), "float32"), B: T.Buffer(({k}, {n}), "float32"),
         C: T.Buffer(({m}, {n}), "float32")):
    for i, j, k in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''


def gemm_func(m: int, n: int | None = None, k: int | None = None) -> tdsl.PrimFunc:
    """C[m, n] = A[m, k] @ B[k, n] in fp32, as a user writes it."""
    n = m if n is None else n
    k = m if k is None else k
    return tdsl.parse(GEMM.format(m=m, n=n, k=k))


def _divisor(n: int, candidates: tuple[int, ...]) -> int:
    """The first candidate that divides n (1 when none does)."""
    return next((c for c in candidates if n % c == 0), 1)


L1_SLIVER_BYTES = 16 * 1024
"""The KC x NR sliver of packed B that the MC / MR micro-kernels of a block reuse: half of L1."""
L2_BLOCK_BYTES = 320 * 1024
"""The MC x KC block of packed A plus the MC x NC block of C: most of a 512 KiB L2."""


def _fp32_isas(target) -> list[str]:
    """The fp32 micro-kernel ISAs the CPU of `target` runs, widest first (["avx512", "avx2"])."""
    have = x86.available(target)
    return [isa for isa in ("avx512", "avx2") if isa in have]


def gemm_tiles(m: int, n: int, k: int, target="cpu") -> tuple[int, int, int, int]:
    """(MR, NR, MC, KC) for an m x n x k GEMM on the CPU of `target`: the register tile MR x NR of
    C (NR a multiple of the vector lanes of the widest micro-kernel whose lanes divide n: AVX2's
    8 on an AVX-512 CPU for n = 24; MR * NR / lanes = 8..12 accumulators to hide the FMA
    latency); KC steps of k per pass, the largest divisor of k whose KC x NR sliver of packed B
    fits L1_SLIVER_BYTES; MC rows of A per parallel task, so that the MC x KC block of A and the
    MC x NC block of C fit L2_BLOCK_BYTES, in at least TASKS_PER_CORE tasks per core and an even
    number of tasks where possible. Every tile divides its extent: tensorize needs whole tiles."""
    for lanes in [x86.ISAS[isa][0] for isa in _fp32_isas(target)] or [8]:
        nr = _divisor(n, (2 * lanes, 5 * lanes, 3 * lanes, lanes))
        if nr > 1:
            break
    vectors = nr // lanes
    mr = _divisor(m, tuple(r for r in (12, 10, 8, 6, 5, 4, 3, 2) if 6 <= r * vectors <= 12) + (2, 1))
    kc = max(d for d in range(1, max(1, L1_SLIVER_BYTES // (nr * 4)) + 1) if k % d == 0)
    row_bytes = (kc + gemm_nc(n, nr)) * 4
    blocks = [d for d in range(mr, m + 1, mr) if m % d == 0 and d * row_bytes <= L2_BLOCK_BYTES] or [mr]
    blocks = [d for d in blocks if m // d >= TASKS_PER_CORE * _cores()] or blocks[:1]
    even = [d for d in blocks if (m // d) % 2 == 0]
    return mr, nr, max(even or blocks), kc


TASKS_PER_CORE = 8
"""Row blocks per core at least: with 4 (MC = 128 for 1024^3 on 2 cores) a core slowed by another
process delays the whole call by up to one block; 2 threads, min of interleaved turns against
numpy, 11:20-11:30 UTC: 1024^3 MC 128 0.68x-0.95x numpy, MC 64 0.92x-0.96x, MC 32 0.94x-1.09x;
512^3 MC 128 0.72x-0.76x, MC 32 0.94x-0.99x; 2048^3 MC 128 0.80x-0.95x, MC 32 0.73x-0.84x (B
streamed once per row block costs more there). One thread: 1024^3 MC 128 0.95x, MC 32 0.98x."""


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def gemm_nc(n: int, nr: int) -> int:
    """NC, the columns of C per pass of the k loop: the largest multiple of NR up to 256 that
    divides n (an MC x NC block of C and the KC x NC slab of packed B per pass)."""
    return max(d for d in range(nr, max(nr, min(n, 256)) + 1, nr) if n % d == 0)


def gemm_schedule(m: int, n: int | None = None, k: int | None = None,
                  tiles: tuple[int, int, int, int] | None = None, pack_b: bool = True,
                  pack_a: bool = True, pack_c: bool = True, nc: int | None = None,
                  target="cpu") -> tdsl.Schedule:
    """fp32 GEMM, GotoBLAS style, with the x86 register-tile micro-kernel:

    * B is packed into NR-wide column panels, `(j // NR, k, j % NR)`, once (`cache_read` +
      `transform_layout`, a parallel vector copy): the micro-kernel reads one contiguous
      KC x NR sliver per panel;
    * A is packed per block of MC rows into MR-interleaved micro-panels, `(i // MR, k, i % MR)`
      (`cache_read` + `compute_at` the row-block loop + `transform_layout`): the micro-kernel
      reads its MR x KC operand transposed and contiguous (its strides are (1, MR)) instead of
      MR rows a row stride apart (4 KiB for 1024: the same L1 set);
    * C is computed per MC x NC block in micro-tiles, `(j // NR, i // MR, i % MR, j % NR)`
      (`cache_write` + `reverse_compute_at` the column-block loop + `transform_layout`), and
      copied back to C (vectorized) while the block is still in L2: the C tiles of a panel
      lie together instead of a row stride apart;
    * loops io (MC rows, parallel) / jc (NC columns) / k0 (KC) / j0 (NR panels) / i0 (MR rows)
      / micro-kernel: per pass the MC x KC block of A and the MC x NC block of C stay in L2,
      each KC x NR sliver of B in L1 while the MC / MR tiles use it;
    * the MR x NR x KC micro-kernel is `tensorize`d with `x86.<isa>.fp32_MRxNRxKC`, whose
      accumulators live in vector registers (FMA on broadcast A and a row of B); isa is the
      widest the CPU of `target` runs whose lanes divide NR (AVX-512, else AVX2).

    `pack_a`, `pack_c` and `pack_b` switch the copies off (operands then read in place).
    """
    n = m if n is None else n
    k = m if k is None else k
    mr, nr, mc, kc = tiles or gemm_tiles(m, n, k, target)
    nc = nc or gemm_nc(n, nr)
    isas = _fp32_isas(target) or ["avx2"]
    fitting = [isa for isa in isas if nr % x86.ISAS[isa][0] == 0]
    if not fitting:
        isa, lanes = isas[-1], x86.ISAS[isas[-1]][0]
        raise ValueError(f"gemm_schedule: n = {n} must be a multiple of the {lanes} fp32 lanes of {isa} "
                         "(the micro-kernel works on whole vectors of C)")
    isa = fitting[0]
    sch = tdsl.Schedule(gemm_func(m, n, k))
    c = sch.get_block("C")
    if pack_b:
        pack_b_block = sch.cache_read(c, "B", "global")
        sch.transform_layout(pack_b_block, "B_global", lambda kk_, jj_: (jj_ // nr, kk_, jj_ % nr))
        _parallel_vector_copy(sch, pack_b_block, nr)
    pack_a_block = sch.cache_read(c, "A", "global") if pack_a else None
    copy_c = sch.cache_write(c, "C", "global") if pack_c else None
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, factors=[None, mc])
    i0, i1 = sch.split(ii, factors=[None, mr])
    jc, jj = sch.split(j, factors=[None, nc])
    j0, j1 = sch.split(jj, factors=[None, nr])
    k0, k1 = sch.split(kk, factors=[None, kc])
    sch.reorder(io, jc, k0, j0, i0, i1, j1, k1)
    sch.parallel(io)
    if pack_a_block is not None:
        # compute_at first: it needs the copy's stores at distinct iterators (the plain layout)
        sch.compute_at(pack_a_block, io)
        sch.transform_layout(pack_a_block, "A_global", lambda ii_, kk_: (ii_ // mr, kk_, ii_ % mr))
    if copy_c is not None:
        sch.reverse_compute_at(copy_c, jc)
        sch.transform_layout(c, "C_global", lambda ii_, jj_: (jj_ // nr, ii_ // mr, ii_ % mr, jj_ % nr))
        # the copy back reads whole NR-wide rows of micro-tiles: vectorize over NR
        _, vec = sch.split(sch.get_loops(copy_c)[-1], factors=[None, nr])
        sch.vectorize(vec)
    sch.decompose_reduction(c, k0)
    # software prefetch of A and B in the micro-kernel: 0-5% faster on Zen 3 with NR = 16 (one
    # line of B per k); neutral with NR = 40 (n = 1000), so only for one-line rows of B
    sch.tensorize(i1, x86.register_fp32(isa, mr, nr, kc, prefetch=nr * 4 <= 64))
    return sch


def _parallel_vector_copy(sch: tdsl.Schedule, block: tdsl.schedule.BlockRV, lanes: int) -> None:
    """Copy blocks (packing): rows in parallel, `lanes` contiguous elements per vector."""
    outer, inner = sch.get_loops(block)
    sch.parallel(outer)
    _, vec = sch.split(inner, factors=[None, lanes])
    sch.vectorize(vec)


# -- row softmax ---------------------------------------------------------------------------

SOFTMAX = '''
@T.prim_func
def softmax(A: T.Buffer(({rows}, {cols}), "float32"), B: T.Buffer(({rows}, {cols}), "float32")):
    row_max = T.alloc_buffer(({rows},), "float32")
    row_sum = T.alloc_buffer(({rows},), "float32")
    E = T.alloc_buffer(({rows}, {cols}), "float32")
    for i, j in T.grid({rows}, {cols}):
        with T.block("max"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                row_max[vi] = T.min_value("float32")
            row_max[vi] = T.max(row_max[vi], A[vi, vj])
    for i, j in T.grid({rows}, {cols}):
        with T.block("exp"):
            vi, vj = T.axis.remap("SS", [i, j])
            E[vi, vj] = T.exp(A[vi, vj] - row_max[vi])
    for i, j in T.grid({rows}, {cols}):
        with T.block("sum"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                row_sum[vi] = T.float32(0)
            row_sum[vi] = row_sum[vi] + E[vi, vj]
    for i, j in T.grid({rows}, {cols}):
        with T.block("norm"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = E[vi, vj] * (T.float32(1) / row_sum[vi])
'''


def softmax_func(rows: int, cols: int) -> tdsl.PrimFunc:
    """Row softmax B = exp(A - max) / sum(exp(A - max)), as a user writes it."""
    return tdsl.parse(SOFTMAX.format(rows=rows, cols=cols))


def _vector_reduction(sch: tdsl.Schedule, block: tdsl.schedule.BlockRV, lanes: int) -> tdsl.schedule.BlockRV:
    """Reduce the innermost loop of `block` `lanes` at a time: rfactor the lanes into partial
    results (one vector accumulator per row), the update vectorized, the init in its own
    vectorized block; the block then combines the `lanes` partials. Returns the rfactor block."""
    loops = sch.get_loops(block)
    _, inner = sch.split(loops[-1], factors=[None, lanes])
    rf = sch.rfactor(inner, len(loops) - 1)
    rf_loops = sch.get_loops(rf)
    init = sch.decompose_reduction(rf, rf_loops[-2])
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sch.get_loops(rf)[-1])
    return rf


def _row_loop_nest(sch: tdsl.Schedule, last: str, producers: tuple[str, ...], reductions: tuple[str, ...],
                   lanes: int, intrinsics: dict[str, str] | None = None) -> None:
    """Fuse the blocks `producers` (in program order) into the row loop of the elementwise
    block `last`: all computed at the row loop, the `reductions` among them vectorized through
    rfactor, the others vectorized (or, for those named in `intrinsics`, each step of `lanes`
    tensorized with the intrinsic given), rows in parallel."""
    intrinsics = intrinsics or {}
    row, col = sch.get_loops(sch.get_block(last))
    for name in reversed(producers):
        sch.compute_at(sch.get_block(name), row)
    for name in producers:
        block = sch.get_block(name)
        if name in reductions:
            _vector_reduction(sch, block, lanes)
        else:
            _, vec = sch.split(sch.get_loops(block)[-1], factors=[None, lanes])
            if name in intrinsics:
                sch.tensorize(vec, intrinsics[name])
            else:
                sch.vectorize(vec)
    sch.parallel(row)
    _, vec = sch.split(col, factors=[None, lanes])
    sch.vectorize(vec)


# One step of softmax's exp block, and the same step that also prefetches the same columns of
# the next row of A (one `llvm.prefetch` per 64-byte line; A[1, j] is a row past the step's
# tile, and past A on the last row: a prefetch never faults, and bounds checks skip it).
_SOFTMAX_EXP_DESC = '''
@T.prim_func
def exp_desc(A: T.Buffer((1, {lanes}), "float32", strides=("a_s", 1)), M: T.Buffer((1,), "float32"),
             E: T.Buffer((1, {lanes}), "float32", strides=("e_s", 1))):
    for j in range({lanes}):
        with T.block("exp"):
            vj = T.axis.spatial({lanes}, j)
            E[0, vj] = T.exp(A[0, vj] - M[0])
'''

_SOFTMAX_EXP_IMPL = '''
@T.prim_func
def exp_impl(A: T.Buffer((1, {lanes}), "float32", strides=("a_s", 1)), M: T.Buffer((1,), "float32"),
             E: T.Buffer((1, {lanes}), "float32", strides=("e_s", 1))):
{prefetches}    E[0, T.Ramp(0, 1, {lanes})] = T.exp(A[0, T.Ramp(0, 1, {lanes})] - T.Broadcast(M[0], {lanes}))
'''


def softmax_exp_intrinsic(lanes: int) -> str:
    """The name of the tensor intrinsic (registered on first use) computing `lanes` columns of
    softmax's exp block, E[j] = exp(A[j] - max), as one vector and prefetching A's next row at
    the same columns into L1. The next row's first line is then requested a whole row of
    compute (~0.7 us on one core) before its max pass reads it: that pass otherwise waits for
    memory at each row, as the hardware prefetcher starts over at every 4 KiB page."""
    name = f"bench.softmax_exp_prefetch_{lanes}"
    if not tdsl.TensorIntrin.exists(name):
        line = 16  # floats per 64-byte cache line
        prefetches = "".join(f'    T.evaluate(T.call_extern("void", "llvm.prefetch.p0", T.address_of(A[1, {j}]), '
                             f"0, 3, 1))\n" for j in range(0, lanes, line))
        tdsl.TensorIntrin.register(name, tdsl.parse(_SOFTMAX_EXP_DESC.format(lanes=lanes)),
                                   tdsl.parse(_SOFTMAX_EXP_IMPL.format(lanes=lanes, prefetches=prefetches)),
                                   target="cpu",
                                   doc=f"E[{lanes}] = exp(A[{lanes}] - M), prefetching the next row of A")
    return name


_COMBINE_LANES = 8
"""With 32 lanes or more, softmax combines its `lanes` partial maxima and sums first as vectors
of this many lanes (one AVX2 vector), then one by one: a 32-long scalar chain per row (~100
cycles of latency that the next pass waits for) measured 3-9% slower on one core. 16 lanes (rows
of 32 to 63) keep their 16-long chain (not measured)."""


def softmax_schedule(rows: int, cols: int, lanes: int = 32, stream: bool = True,
                     prefetch: bool = True) -> tdsl.Schedule:
    """Row softmax: one parallel loop over rows; in each row the max and the sum are vectorized
    reductions (rfactor over `lanes` partials), exp and the normalisation vector loops, so the
    row of A is read from memory once and the other passes hit L1. exp runs once per element
    into E, which lowering's `compact_buffers` shrinks to one row on each thread's stack (the
    row maxima and sums to one element, the rfactor partials to one vector), so E never
    reaches memory. 32 lanes (four AVX2 vectors per step): 16 and 64 measured slower. Rows
    shorter than two vectors of `lanes` use half as many lanes (a one-step reduction has no
    init for `decompose_reduction` to split off); 32 partials or more are combined through a
    second rfactor of `_COMBINE_LANES`. The exp step is tensorized with
    `softmax_exp_intrinsic`, which prefetches the next row of A while this one computes
    (`prefetch=False`: a plain vector loop): the max pass then
    reads the row from L1 instead of waiting for memory (4.1 -> 2.5 ms on one core, with the
    codegen's cheaper max and exp). B is written with streaming stores (the `tdsl.nontemporal`
    annotation: B's lines are not read before they are written, which saves a third of the
    memory traffic: 10.4 -> 14.7 GB/s on 2 loaded cores); `stream=False` omits it."""
    while lanes > 1 and cols < 2 * lanes:
        lanes //= 2
    sch = tdsl.Schedule(softmax_func(rows, cols))
    intrinsics = {"exp": softmax_exp_intrinsic(lanes)} if prefetch else None
    _row_loop_nest(sch, "norm", ("max", "exp", "sum"), ("max", "sum"), lanes, intrinsics)
    if lanes >= 4 * _COMBINE_LANES:
        for name in ("max", "sum"):
            combine = _vector_reduction(sch, sch.get_block(name), _COMBINE_LANES)
            sch.unroll(sch.get_loops(combine)[-2])  # lanes // 8 vector steps: straight-line code
    if stream:
        sch.annotate(sch.get_block("norm"), "tdsl.nontemporal", True)
    return sch


# -- layernorm -----------------------------------------------------------------------------

LAYERNORM = '''
@T.prim_func
def layernorm(A: T.Buffer(({rows}, {cols}), "float32"), gamma: T.Buffer(({cols},), "float32"),
              beta: T.Buffer(({cols},), "float32"), B: T.Buffer(({rows}, {cols}), "float32")):
    row_sum = T.alloc_buffer(({rows},), "float32")
    row_sq = T.alloc_buffer(({rows},), "float32")
    for i, j in T.grid({rows}, {cols}):
        with T.block("sum"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                row_sum[vi] = T.float32(0)
            row_sum[vi] = row_sum[vi] + A[vi, vj]
    for i, j in T.grid({rows}, {cols}):
        with T.block("sumsq"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                row_sq[vi] = T.float32(0)
            row_sq[vi] = row_sq[vi] + A[vi, vj] * A[vi, vj]
    for i, j in T.grid({rows}, {cols}):
        with T.block("norm"):
            vi, vj = T.axis.remap("SS", [i, j])
            mean = row_sum[vi] * T.float32({inv})
            var = row_sq[vi] * T.float32({inv}) - mean * mean
            B[vi, vj] = (A[vi, vj] - mean) * T.rsqrt(var + T.float32({eps})) * gamma[vj] + beta[vj]
'''


def layernorm_func(rows: int, cols: int, eps: float = 1e-5) -> tdsl.PrimFunc:
    """Layer normalisation over the last axis with scale and shift, as a user writes it; mean
    and variance come from the sum and the sum of squares, so one read of the row gives both."""
    return tdsl.parse(LAYERNORM.format(rows=rows, cols=cols, inv=repr(1.0 / cols), eps=repr(eps)))


def layernorm_schedule(rows: int, cols: int, lanes: int = 16, eps: float = 1e-5,
                       stream: bool = True) -> tdsl.Schedule:
    """Layernorm: rows in parallel; per row, the sum and the sum of squares are vectorized
    reductions (rfactor) computed at the row loop, and the normalisation is a vector loop, so
    each row is read from memory once; `compact_buffers` keeps the per-row sums and partials
    on the stack. B is written with streaming stores (`tdsl.nontemporal`; 20 -> 24 GB/s on 2
    loaded cores); `stream=False` omits them."""
    sch = tdsl.Schedule(layernorm_func(rows, cols, eps))
    _row_loop_nest(sch, "norm", ("sum", "sumsq"), ("sum", "sumsq"), lanes)
    if stream:
        sch.annotate(sch.get_block("norm"), "tdsl.nontemporal", True)
    return sch


# -- conv2d --------------------------------------------------------------------------------

CONV2D = '''
@T.prim_func
def conv2d(X: T.Buffer(({n}, {c}, {h}, {w}), "float32"), W: T.Buffer(({k}, {c}, 3, 3), "float32"),
           Y: T.Buffer(({n}, {k}, {h}, {w}), "float32")):
    Xpad = T.alloc_buffer(({n}, {c}, {h} + 2, {w} + 2), "float32")
    for b, ci, y, x in T.grid({n}, {c}, {h} + 2, {w} + 2):
        with T.block("pad"):
            vb, vc, vy, vx = T.axis.remap("SSSS", [b, ci, y, x])
            Xpad[vb, vc, vy, vx] = T.if_then_else(1 <= vy and vy <= {h} and 1 <= vx and vx <= {w},
                                                  X[vb, vc, vy - 1, vx - 1], T.float32(0))
    for b, ko, y, x, ci, r, s in T.grid({n}, {k}, {h}, {w}, {c}, 3, 3):
        with T.block("conv"):
            vb, vk, vy, vx, vc, vr, vs = T.axis.remap("SSSSRRR", [b, ko, y, x, ci, r, s])
            with T.init():
                Y[vb, vk, vy, vx] = T.float32(0)
            Y[vb, vk, vy, vx] = Y[vb, vk, vy, vx] + Xpad[vb, vc, vy + vr, vx + vs] * W[vk, vc, vr, vs]
'''


def conv2d_func(n: int, c: int, h: int, w: int, k: int) -> tdsl.PrimFunc:
    """3x3 convolution, stride 1, zero padding 1, NCHW input and KCRS filters, as a user
    writes it (a padding block, then the convolution)."""
    return tdsl.parse(CONV2D.format(n=n, c=c, h=h, w=w, k=k))


def conv2d_schedule(n: int, c: int, h: int, w: int, k: int, mr: int = 1, nr: int | None = None) -> tdsl.Schedule:
    """conv2d as MR x NR x C GEMM tiles computed in place in Y (NCHW): per output row y, tap
    (r, s) and MR filters, Y[b, k0:k0+MR, y, x0:x0+NR] += W[k0:k0+MR, :, r, s] @
    Xpad[b, y + r, :, x0 + s:x0 + s + NR], the fp32 micro-kernel with the channels as KC
    (tensorize maps its tiles onto dimensions 1 and 3 of Y, 0 and 1 of W). Default MR = 1,
    NR = the row (7 accumulators for W = 56 on AVX2; 2 x 56 spills). Rows in parallel; the
    taps outside the filter loop, so one tap's slice of Xpad stays in L1 for all filters. Xpad
    is stored (n, y, c, x): that slice is then one contiguous block, not 64 rows 13 KB apart."""
    isa = "avx512" if "avx512" in x86.available() and (nr or w) % 16 == 0 else "avx2"
    sch = tdsl.Schedule(conv2d_func(n, c, h, w, k))
    conv, pad = sch.get_block("conv"), sch.get_block("pad")
    sch.transform_layout(pad, "Xpad", lambda b, ci, yy, xx: (b, yy, ci, xx))
    pb, pc, py, px = sch.get_loops(pad)
    sch.reorder(pb, py, pc, px)  # write Xpad in its storage order
    sch.parallel(sch.fuse(pb, py))
    b, ko, y, x, ci, r, s = sch.get_loops(conv)
    k0, k1 = sch.split(ko, factors=[None, mr])
    x0, x1 = sch.split(x, factors=[None, nr or w])
    sch.reorder(b, y, r, s, k0, x0, k1, x1, ci)
    sch.parallel(sch.fuse(b, y))
    sch.decompose_reduction(conv, r)
    sch.tensorize(k1, x86.register_fp32(isa, mr, nr or w, c))
    return sch


# -- int8 GEMM -----------------------------------------------------------------------------

INT8_GEMM = '''
@T.prim_func
def gemm_u8s8(A: T.Buffer(({n}, {n}), "uint8"), B: T.Buffer(({n}, {n}), "int8"),
              C: T.Buffer(({n}, {n}), "int32")):
    for i, j, k in T.grid({n}, {n}, {n}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
'''


def int8_gemm_func(n: int) -> tdsl.PrimFunc:
    """u8 x s8 -> s32 GEMM, as a user writes it."""
    return tdsl.parse(INT8_GEMM.format(n=n))


AVX2_DOT = "bench.avx2.dot_u8s8s32_8x2"

_AVX2_DOT_DESC = '''
@T.prim_func
def dot_desc(A: T.Buffer((2,), "uint8"), B: T.Buffer((8, 2), "int8", strides=(2, 1)),
             C: T.Buffer((8,), "int32")):
    for j, k in T.grid(8, 2):
        with T.block("update"):
            vj, vk = T.axis.remap("SR", [j, k])
            C[vj] = C[vj] + T.cast(A[vk], "int32") * T.cast(B[vj, vk], "int32")
'''

# vpmaddwd: C[j] += a0 * B[j, 0] + a1 * B[j, 1] in int16 x int16 -> int32, exact for u8 x s8.
# The pair (a0, a1) is repeated over the 16 int16 lanes by a select of two broadcasts, which
# LLVM turns into vpbroadcastw + vpunpcklwd (an index like Ramp % 2 would become a gather).
_AVX2_DOT_IMPL = '''
@T.prim_func
def dot_impl(A: T.Buffer((2,), "uint8"), B: T.Buffer((8, 2), "int8", strides=(2, 1)),
             C: T.Buffer((8,), "int32")):
    C[T.Ramp(0, 1, 8)] = C[T.Ramp(0, 1, 8)] + T.call_extern(
        "int32x8", "llvm.x86.avx2.pmadd.wd",
        T.Select(T.Ramp(0, 1, 16) % T.Broadcast(2, 16) == T.Broadcast(0, 16),
                 T.Broadcast(T.cast(A[0], "int16"), 16), T.Broadcast(T.cast(A[1], "int16"), 16)),
        T.cast(B[0, T.Ramp(0, 1, 16)], "int16x16"))
'''


def int8_dot_intrinsic() -> tuple[str, int, int]:
    """(name, lanes N, group K) of the best exact u8 x s8 -> s32 dot product of this CPU:
    C[N] += sum_k A[k] * B[N, k] over K consecutive k. The built-in VNNI one (vpdpbusd, K = 4)
    where the CPU has it, else an AVX2 vpmaddwd one (K = 2) registered here."""
    try:
        name = x86.int8_dot()
        return name, int(tdsl.TensorIntrin.get(name).desc.params[2].shape[0].value), 4
    except tdsl.TargetError:
        pass
    if not tdsl.TensorIntrin.exists(AVX2_DOT):
        tdsl.TensorIntrin.register(AVX2_DOT, tdsl.parse(_AVX2_DOT_DESC), tdsl.parse(_AVX2_DOT_IMPL),
                                   target="cpu", features=("avx2",),
                                   doc="C[8] += A[2] . B[8, 2], u8 x s8 -> s32 (AVX2 vpmaddwd)")
    return AVX2_DOT, 8, 2


def int8_gemm_schedule(n: int, rows: int = 2, vectors: int = 4, intrin: tuple[str, int, int] | None = None
                       ) -> tdsl.Schedule:
    """int8 GEMM with a dot-product intrinsic (`int8_dot_intrinsic`): B is packed so that the
    K values of k for N consecutive columns are contiguous (`cache_read` + `transform_layout`
    to (j // N, k // K, j % N, k % K)); a block of `rows` x `vectors` * N results of C stays in
    registers across the k loop (the unrolled loops around the tensorized dot product), rows in
    parallel."""
    name, lanes, group = intrin or int8_dot_intrinsic()
    rows = _divisor(n, (rows, 2, 1))
    vectors = _divisor(n // lanes, (vectors, 2, 1))
    sch = tdsl.Schedule(int8_gemm_func(n))
    c = sch.get_block("C")
    pack = sch.cache_read(c, "B", "global")
    sch.transform_layout(pack, "B_global", lambda kk, jj: (jj // lanes, kk // group, jj % lanes, kk % group))
    sch.parallel(sch.get_loops(pack)[0])
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, rows])
    j0, jv = sch.split(j, factors=[None, lanes])
    jo, ji = sch.split(j0, factors=[None, vectors])
    ko, kk = sch.split(k, factors=[None, group])
    sch.reorder(i0, jo, ko, i1, ji, jv, kk)
    sch.parallel(i0)
    sch.decompose_reduction(c, ko)
    sch.tensorize(jv, name)
    sch.unroll(i1)
    sch.unroll(ji)
    return sch
