"""Library or generated code per block, and auto-tensorization, against numpy/OpenBLAS.

    python bench/bench_library.py              # all rows (~1-2 min on 2 cores)
    python bench/bench_library.py --rounds 3   # fewer interleaved rounds

Rows (ratios = numpy time / tdsl time, measured in the same run, interleaved; bench/timing.py):

1. GEMM 1024^3 fp32 through `sch.tensorize(block, "blas.sgemm")` (the BLAS numpy loads; only
   the call overhead differs) vs numpy `a @ b`.
2. GEMM 1024^3 + bias + ReLU, D = max(A @ B + bias, 0): the library GEMM with the epilogue as
   generated code (one parallel vectorized pass over D, in place) and the fully generated
   version (the auto-tensorized micro-kernel GEMM of row 3's schedule + the same epilogue);
   the better of the two vs numpy `np.maximum(a @ b + bias, 0)`.
3. GEMM 1000^3 fp32 (no tile divides 1000) through `sch.auto_tensorize(block, <the host's fp32
   micro-kernel, 4x16x256 with prefetch on AVX2>)` (padded to whole tiles), then hand steps: the
   padded copies of A and B stored packed (transform_layout), GotoBLAS loop order with parallel
   row blocks; vs numpy.
4. int8 GEMM 1024^3 (u8 x s8 -> s32) through `auto_tensorize` with the host's int8 dot product
   (VNNI where the CPU has it, else the AVX2 vpmaddwd one; the row says which), exact, its
   ops/s against numpy's fp32 GEMM flop/s.

OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are printed; numpy is also timed in a subprocess with both
unset when either is set.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from timing import interleaved

import tdsl
from tdsl.intrinsics import blas, x86

GEMM = '''
@T.prim_func
def gemm(A: T.Buffer(({m}, {k}), "{dt}"), B: T.Buffer(({k}, {n}), "{bt}"), C: T.Buffer(({m}, {n}), "{ct}")):
    for i, j, k in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.{ct}(0)
            C[vi, vj] = C[vi, vj] + {a} * {b}
'''

GEMM_RELU = '''
@T.prim_func
def gemm_relu(A: T.Buffer(({n}, {n}), "float32"), B: T.Buffer(({n}, {n}), "float32"),
              bias: T.Buffer(({n},), "float32"), D: T.Buffer(({n}, {n}), "float32")):
    for i, j, k in T.grid({n}, {n}, {n}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                D[vi, vj] = T.float32(0)
            D[vi, vj] = D[vi, vj] + A[vi, vk] * B[vk, vj]
    for i, j in T.grid({n}, {n}):
        with T.block("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = T.max(D[vi, vj] + bias[vj], T.float32(0))
'''


def gemm_func(m, n, k, dtype="float32"):
    if dtype == "int8":
        return tdsl.parse(GEMM.format(m=m, n=n, k=k, dt="uint8", bt="int8", ct="int32",
                                      a='T.cast(A[vi, vk], "int32")', b='T.cast(B[vk, vj], "int32")'))
    return tdsl.parse(GEMM.format(m=m, n=n, k=k, dt=dtype, bt=dtype, ct=dtype, a="A[vi, vk]", b="B[vk, vj]"))


def _epilogue(sch):
    i, j = sch.get_loops(sch.get_block("relu"))
    sch.parallel(i)
    _, jv = sch.split(j, factors=[None, 8])
    sch.vectorize(jv)


def library_schedule(func):
    sch = tdsl.Schedule(func)
    sch.tensorize(sch.get_block("C"), "blas.sgemm")
    if any(b.name == "relu" for b in _blocks(sch.func)):
        _epilogue(sch)
    return sch


def _blocks(func):
    from tdsl.ir import Block, collect

    return collect(func.body, Block)


def tensorized_schedule(func, intrin, mc_tiles=10, pack=True):
    """auto_tensorize, then the hand steps of row 3: packed padded copies, parallel row blocks."""
    sch = tdsl.Schedule(func)
    blk = sch.auto_tensorize(sch.get_block("C"), intrin)
    loops = sch.get_loops(blk)
    names = {b.name for b in _blocks(sch.func)}
    desc = tdsl.TensorIntrin.get(intrin).desc
    if len(loops) == 3 and intrin.startswith("x86.") and "fp32" in intrin:
        mr, nr = (int(s.value) for s in desc.params[2].shape)
        # GotoBLAS order: row blocks of MC = mc_tiles * MR rows (parallel), KC slices, NR panels,
        # MR rows: the MC x KC block of A stays in L2, each KC x NR sliver of B in L1
        j0, k0, i0 = loops
        io, ii = sch.split(i0, factors=[None, mc_tiles])
        sch.reorder(io, k0, j0, ii)
        sch.parallel(io)
        # the init stays in the tile (T.init of the tensorized block): decomposed before k0 it
        # is a separate pass over C, measured 0.78x instead of 0.99x numpy at 1000^3
        # pack B into NR-wide panels and A into MR-row micro-panels: the padded copies when
        # auto_tensorize made them, else copies made here (cache_read)
        for buf, layout in (("B", lambda kk, jj: (jj // nr, kk, jj % nr)), ("A", lambda ii_, kk: (ii_ // mr, kk, ii_ % mr))):
            if not pack:
                break
            if f"{buf}_pad" in names:
                sch.transform_layout(sch.get_block(f"{buf}_pad"), f"{buf}_pad", layout)
            else:
                copy = sch.cache_read(blk, buf, "global")
                sch.transform_layout(copy, f"{buf}_global", layout)
                if buf == "B":   # B's rows go to NR-wide panels: contiguous on both sides
                    inner = sch.get_loops(copy)[-1]
                    _, vec = sch.split(inner, factors=[None, nr])
                    sch.vectorize(vec)
                names.add(f"{buf}_global")
    elif len(loops) == 3:
        # the int8 dot product (C[N] += A[K] . B[N, K]): a rows x vectors block of C stays in
        # registers across the k loop (the unrolled loops around the tensorized dot product)
        i, k0, j0 = loops
        i0, i1 = sch.split(i, factors=[None, 2])
        jo, ji = sch.split(j0, factors=[None, 4])
        sch.reorder(i0, jo, k0, i1, ji)
        sch.decompose_reduction(blk, k0)
        sch.unroll(i1)
        sch.unroll(ji)
        sch.parallel(i0)
    else:
        sch.parallel(loops[0])
    for name in ("A_pad", "B_pad", "C_pad", "B_reindex_pad", "A_reindex_pad", "A_global", "B_global"):
        if name in names:
            loops = sch.get_loops(sch.get_block(name))
            sch.parallel(loops[0])
            if name == "C_pad":   # the copy back: a plain copy, vectorized over 8 lanes
                inner = sch.get_loops(sch.get_block(name))[-1]
                _, vec = sch.split(inner, factors=[None, 8])
                try:
                    sch.vectorize(vec)
                except tdsl.ScheduleError:   # a tail the split left: keep it scalar
                    sch.undo()
    if "relu" in names:
        _epilogue(sch)
    return sch


def ratio_row(label, t_tdsl, t_np, extra=""):
    print(f"{label:58s} tdsl {t_tdsl * 1e3:8.2f} ms  numpy {t_np * 1e3:8.2f} ms  ratio {t_np / t_tdsl:5.2f}x{extra}")


_NUMPY_SUB = r'''
import json, sys, time, numpy as np
sys.path.insert(0, {bench!r}); from timing import interleaved
rng = np.random.default_rng(0)
a = rng.standard_normal(({n}, {n}), dtype=np.float32); b = rng.standard_normal(({n}, {n}), dtype=np.float32)
print(json.dumps(interleaved([lambda: a @ b], repeat=3)[0]))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", default="1,2,3,4", help="which rows to run, e.g. 3,4")
    args = parser.parse_args()
    rows = {int(r) for r in args.rows.split(",")}
    rounds = args.rounds
    rng = np.random.default_rng(0)
    isa = "avx512" if "avx512" in x86.available() else "avx2"
    # the prefetching variant: the bench packs A and B after auto_tensorize (tensorized_schedule)
    fp32 = x86.register_fp32(isa, *x86.DEFAULT_TILE[isa], 256, prefetch=True)
    env = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    print(f"# {os.cpu_count()} cores, ISAs {', '.join(x86.available())}; BLAS: {blas.find().where}; "
          f"fp32 micro-kernel {fp32}; env {env}")

    n = 1024
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    if 1 in rows:
        row1(a, b, c, rounds, env)
    if 2 in rows:
        row2(rng, a, b, rounds, fp32)
    if 3 in rows:
        row3(rng, rounds, fp32)
    if 4 in rows:
        row4(rng, a, b, rounds)


def row1(a, b, c, rounds, env):
    n = a.shape[0]
    lib = tdsl.build(library_schedule(gemm_func(n, n, n)), target="cpu")
    lib(a, b, c)
    assert np.allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    t_lib, t_np = interleaved([lambda: lib(a, b, c), lambda: a @ b], repeat=rounds)
    ratio_row("1. GEMM 1024^3 blas.sgemm vs a @ b", t_lib, t_np)
    if any(env.values()):
        bench = os.path.dirname(os.path.abspath(__file__))
        clean = {k: v for k, v in os.environ.items() if k not in env}
        out = subprocess.run([sys.executable, "-c", _NUMPY_SUB.format(bench=bench, n=n)], env=clean,
                             capture_output=True, text=True, check=True)
        t_unset = float(out.stdout.strip().splitlines()[-1])
        ratio_row("   (numpy with OPENBLAS_CORETYPE/L2_SIZE unset)", t_lib, t_unset)


def row2(rng, a, b, rounds, fp32):
    n = a.shape[0]
    bias = rng.standard_normal(n).astype(np.float32)
    d = np.empty((n, n), np.float32)
    want = np.maximum(a @ b + bias, 0)
    relu_func = tdsl.parse(GEMM_RELU.format(n=n))
    k_lib = tdsl.build(library_schedule(relu_func), target="cpu")
    k_gen = tdsl.build(tensorized_schedule(relu_func, fp32, mc_tiles=16), target="cpu")
    for kern in (k_lib, k_gen):
        kern(a, b, bias, d)
        assert np.allclose(d, want, rtol=1e-3, atol=1e-3)
    t_l, t_g, t_np = interleaved([lambda: k_lib(a, b, bias, d), lambda: k_gen(a, b, bias, d),
                                  lambda: np.maximum(a @ b + bias, 0)], repeat=rounds)
    ratio_row("2a. GEMM+bias+ReLU 1024: blas.sgemm + generated epilogue", t_l, t_np)
    ratio_row("2b. GEMM+bias+ReLU 1024: fully generated (micro-kernel)", t_g, t_np)
    best = min(t_l, t_g)
    ratio_row("2.  best of 2a/2b vs np.maximum(a @ b + bias, 0)", best, t_np,
              f"  ({'library' if t_l <= t_g else 'generated'})")


def row3(rng, rounds, fp32):
    m = 1000
    a3 = rng.standard_normal((m, m), dtype=np.float32)
    b3 = rng.standard_normal((m, m), dtype=np.float32)
    c3 = np.empty((m, m), np.float32)
    k3 = tdsl.build(tensorized_schedule(gemm_func(m, m, m), fp32), target="cpu")
    k3(a3, b3, c3)
    assert np.allclose(c3, a3 @ b3, rtol=1e-3, atol=1e-3)
    # the same with a tile that divides 1000 (2 x 40, KC 250: bench/schedules.gemm_tiles' choice):
    # auto_tensorize then needs no padded copy
    isa = fp32.split(".")[1]
    fit = x86.register_fp32(isa, 2, 40, 250, prefetch=False) if isa == "avx2" else fp32
    k3b = tdsl.build(tensorized_schedule(gemm_func(m, m, m), fit, mc_tiles=10), target="cpu")
    k3b(a3, b3, c3)
    assert np.allclose(c3, a3 @ b3, rtol=1e-3, atol=1e-3)
    t3, t3b, t3np = interleaved([lambda: k3(a3, b3, c3), lambda: k3b(a3, b3, c3), lambda: a3 @ b3], repeat=rounds)
    ratio_row(f"3. GEMM 1000^3 auto_tensorize({fp32}), padded", t3, t3np)
    ratio_row(f"3b. GEMM 1000^3 auto_tensorize({fit})", t3b, t3np)


def row4(rng, a, b, rounds):
    n = a.shape[0]
    dot = x86.int8_dot_any()
    which = "VNNI" if "vnni" in dot else "AVX2 vpmaddwd (no VNNI on this CPU)"
    a8 = rng.integers(0, 256, (n, n)).astype(np.uint8)
    b8 = rng.integers(-128, 128, (n, n)).astype(np.int8)
    c8 = np.empty((n, n), np.int32)
    k8 = tdsl.build(tensorized_schedule(gemm_func(n, n, n, "int8"), dot), target="cpu")
    k8(a8, b8, c8)
    exact = np.array_equal(c8, a8.astype(np.int32) @ b8.astype(np.int32))
    t8, t8np = interleaved([lambda: k8(a8, b8, c8), lambda: a @ b], repeat=rounds)
    ratio_row(f"4. int8 GEMM 1024^3 auto_tensorize({dot})", t8, t8np,
              f"  exact={exact}; {which}; {2 * n ** 3 / t8 / 1e9:.1f} GOP/s vs fp32 numpy "
              f"{2 * n ** 3 / t8np / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
