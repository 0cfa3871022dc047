"""The CPU schedules that bench/run.py measures, written with public tdsl primitives only.

Each `*_schedule(...)` returns a `tdsl.Schedule` (build it with `tdsl.build(sch)`); each
`*_func(...)` returns the unscheduled kernel (the definition a user writes), and `reference`
computes the same result with numpy. Sizes are parameters so that the tests can check every
schedule at small sizes against numpy.

    from bench.schedules import gemm_schedule
    kernel = tdsl.build(gemm_schedule(1024))
    c = kernel(a, b)
"""
from __future__ import annotations

import numpy as np

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


def gemm_tiles(m: int, n: int, k: int) -> tuple[int, int, int, int]:
    """(MR, NR, MC, KC) for an m x n x k GEMM on this CPU: the register tile MR x NR of C (NR a
    multiple of the vector lanes, MR * NR / lanes = 8..12 accumulators to hide the FMA
    latency), MC rows of A per parallel task, KC steps of k per pass (MC x KC of A stays in L2,
    KC x NR of packed B in L1). Every tile divides its extent: tensorize needs whole tiles."""
    lanes = 16 if "avx512" in x86.available() else 8
    nr = _divisor(n, (2 * lanes, lanes))
    vectors = nr // lanes
    mr = _divisor(m, tuple(r for r in (12, 10, 8, 6, 5, 4, 3, 2) if 6 <= r * vectors <= 12) + (2, 1))
    kc = _divisor(k, (256, 250, 200, 128, 125, 100, 64, 50, 32, 16, 8))
    mc = _divisor(m // mr, (16, 12, 10, 8, 25, 20, 4, 5, 2)) * mr
    return mr, nr, mc, kc


def gemm_schedule(m: int, n: int | None = None, k: int | None = None,
                  tiles: tuple[int, int, int, int] | None = None, pack_a: bool = True) -> tdsl.Schedule:
    """fp32 GEMM, GotoBLAS style, with the x86 register-tile micro-kernel:

    * B is packed into NR-wide column panels (`cache_read` + `transform_layout`), so that the
      micro-kernel reads one contiguous KC x NR sliver per panel;
    * loops io (MC rows, parallel) / k0 (KC) / j0 (NR panels) / ii (MR rows) / micro-kernel:
      a block of A (MC x KC) stays in L2 while the panels stream through L1;
    * the MR x NR x KC micro-kernel is `tensorize`d with `x86.<isa>.fp32_MRxNRxKC`, whose
      accumulators live in vector registers (FMA on broadcast A and a row of B).
    """
    n = m if n is None else n
    k = m if k is None else k
    mr, nr, mc, kc = tiles or gemm_tiles(m, n, k)
    isa = "avx512" if "avx512" in x86.available() else "avx2"
    sch = tdsl.Schedule(gemm_func(m, n, k))
    c = sch.get_block("C")
    pack = sch.cache_read(c, "B", "global")
    sch.transform_layout(pack, "B_global", lambda kk, jj: (jj // nr, kk, jj % nr))
    _parallel_vector_copy(sch, pack, 8)
    if pack_a:
        pack_a_block = sch.cache_read(c, "A", "global")
        sch.transform_layout(pack_a_block, "A_global", lambda ii, kk: (ii // mr, kk // kc, ii % mr, kk % kc))
        _parallel_vector_copy(sch, pack_a_block, 8)
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, factors=[None, mc])
    i0, i1 = sch.split(ii, factors=[None, mr])
    j0, j1 = sch.split(j, factors=[None, nr])
    k0, k1 = sch.split(kk, factors=[None, kc])
    sch.reorder(io, k0, j0, i0, i1, j1, k1)
    sch.parallel(io)
    sch.decompose_reduction(c, k0)
    sch.tensorize(i1, x86.register_fp32(isa, mr, nr, kc))
    return sch



def _parallel_vector_copy(sch: tdsl.Schedule, block: tdsl.schedule.BlockRV, lanes: int) -> None:
    """Copy blocks (packing): rows in parallel, `lanes` contiguous elements per vector."""
    outer, inner = sch.get_loops(block)
    sch.parallel(outer)
    _, vec = sch.split(inner, factors=[None, lanes])
    sch.vectorize(vec)
