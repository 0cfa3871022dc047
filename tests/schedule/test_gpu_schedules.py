"""GPU schedules: the shared-memory GEMM with a cooperative fetch (TVM's standard schedule).

compute_at of a "shared" cache relaxes its region over the threadIdx loops (the copy holds the
thread block's tile), bind accepts the copy loops on the threadIdx axes the outer loops already
use, and the result means the same on the CPU and compiles for CUDA with two barriers per k-tile.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from sched_check import check, expect_error

import tdsl

GEMM = '''
@T.prim_func
def gemm(A: T.Buffer(({n}, {n}), "float32"), B: T.Buffer(({n}, {n}), "float32"), C: T.Buffer(({n}, {n}), "float32")):
    for i, j, k in T.grid({n}, {n}, {n}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''


def gemm(n: int) -> tdsl.PrimFunc:
    return tdsl.parse(GEMM.format(n=n))


def tiled(n: int, tile: int, threads: int, kt: int):
    """by, bx, ty, tx, ko, ki, ti, tj with the thread loops bound; returns (func, sch, loops)."""
    f = gemm(n)
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    by, ty, ti = sch.split(i, factors=[None, threads, tile // threads])
    bx, tx, tj = sch.split(j, factors=[None, threads, tile // threads])
    ko, ki = sch.split(k, factors=[None, kt])
    sch.reorder(by, bx, ty, tx, ko, ki, ti, tj)
    sch.bind(by, "blockIdx.y")
    sch.bind(bx, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    return f, sch, {"by": by, "bx": bx, "ty": ty, "tx": tx, "ko": ko}


def shared_gemm(n: int, tile: int, threads: int, kt: int):
    """The full schedule: shared A/B tiles fetched cooperatively, a local accumulator."""
    f, sch, lp = tiled(n, tile, threads, kt)
    c = sch.get_block("C")
    for name in ("A", "B"):
        s = sch.cache_read(c, name, "shared")
        sch.compute_at(s, lp["ko"])
        fused = sch.fuse(*sch.get_loops(s)[-2:])
        _, fy, fx = sch.split(fused, factors=[None, threads, threads])
        sch.bind(fy, "threadIdx.y")
        sch.bind(fx, "threadIdx.x")
    local = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(local, lp["tx"])
    return f, sch


def test_shared_gemm_means_the_same_when_interpreted():
    f, sch = shared_gemm(32, tile=16, threads=4, kt=4)
    check(sch, f, tol=1e-4)
    text = sch.func.script()
    # the copy is the thread block's tile (16 x 4 = 64 elements) spread over 4 x 4 threads
    assert re.search(r'for \w+ in T\.thread_binding\(4, thread="threadIdx\.y"\):\s*\n\s*for \w+ in '
                     r'T\.thread_binding\(4, thread="threadIdx\.x"\):\s*\n\s*with T\.block\("A_shared"\)', text), text


def test_shared_gemm_256_builds_for_the_cpu_and_compiles_for_cuda():
    _f, sch = shared_gemm(256, tile=64, threads=8, kt=8)
    back = tdsl.parse(sch.func.script())
    assert tdsl.structural_diff(back, sch.func) is None
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256)).astype("float32")
    b = rng.standard_normal((256, 256)).astype("float32")
    c = np.zeros((256, 256), "float32")
    tdsl.build(sch, target="cpu")(a, b, c)
    np.testing.assert_allclose(c, a.astype("float64") @ b.astype("float64"), rtol=1e-4, atol=1e-3)
    pytest.importorskip("cuda.bindings")
    kernel = tdsl.build(sch, target="cuda", arch="sm_90")
    src = kernel.source
    # tile-sized shared buffers (64 x 8 = 512 floats), not the whole matrices or per-thread slices
    assert re.search(r"__shared__ .*float A_shared\[512\];", src), src
    assert re.search(r"__shared__ .*float B_shared\[512\];", src), src
    # the k-tile loop: fetch, barrier, compute, barrier
    body = src[src.index("for (int k_0"):]
    depth, end = 0, None
    for pos, ch in enumerate(body):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                end = pos
                break
    ktile = body[:end]
    assert ktile.count("__syncthreads();") == 2, src
    assert ktile.index("A_shared[") < ktile.index("__syncthreads();") < ktile.index("C_local[")
    assert src.count("__syncthreads();") == 2, src
    assert kernel.cubin


def test_compute_at_shared_relaxes_thread_loops_only():
    f, sch, lp = tiled(32, tile=16, threads=4, kt=4)
    s = sch.cache_read(sch.get_block("C"), "A", "shared")
    sch.compute_at(s, lp["ko"])
    loops = sch.get_loops(s)
    text = sch.func.script()
    copy = text[text.index('T.block("A_shared")'):]
    binding = copy[:copy.index("T.reads")]
    # per blockIdx tile: depends on the block index, not on the threads
    assert "i_0" in binding and "i_1" not in binding and "j_1" not in binding, binding
    assert len(loops) == 5 + 2  # by, bx, ty, tx, ko, then the 16 x 4 copy
    check(sch, f, tol=1e-4)


def test_compute_at_local_keeps_the_thread_slice():
    f, sch, lp = tiled(32, tile=16, threads=4, kt=4)
    s = sch.cache_read(sch.get_block("C"), "A", "local")
    sch.compute_at(s, lp["ko"])
    text = sch.func.script()
    copy = text[text.index('T.block("A_local")'):]
    assert "i_1" in copy[:copy.index("T.reads")]  # each thread copies its own rows
    check(sch, f, tol=1e-4)


def test_bind_same_axis_refused_when_inner_work_depends_on_the_outer_loop():
    _f, sch, lp = tiled(32, tile=16, threads=4, kt=4)
    s = sch.cache_read(sch.get_block("C"), "A", "local")
    sch.compute_at(s, lp["ko"])
    outer = sch.get_loops(s)[-2]
    expect_error(sch, lambda: sch.bind(outer, "threadIdx.y"), "threadIdx.y", "depends on")


def test_bind_same_axis_refused_when_inner_is_longer():
    _f, sch, lp = tiled(32, tile=16, threads=4, kt=4)
    s = sch.cache_read(sch.get_block("C"), "A", "shared")
    sch.compute_at(s, lp["ko"])
    fused = sch.fuse(*sch.get_loops(s)[-2:])
    expect_error(sch, lambda: sch.bind(fused, "threadIdx.x"), "threadIdx.x", "may exceed")


REPEATED = '''
@T.prim_func
def repeated(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4,), "float32")):
    for t in T.thread_binding(4, thread="threadIdx.x"):
        for i, k in T.grid(4, 4):
            with T.block("B"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] = B[vi] + A[vi, vk]
'''

COPY = '''
@T.prim_func
def copy(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32")):
    for t in T.thread_binding(4, thread="threadIdx.x"):
        for i, k in T.grid(4, 4):
            with T.block("B"):
                vi, vk = T.axis.remap("SS", [i, k])
                B[vi, vk] = A[vi, vk]
'''


def test_bind_same_axis_refused_for_an_update_in_place():
    f = tdsl.parse(REPEATED)
    sch = tdsl.Schedule(f)
    i = sch.get_loops(sch.get_block("B"))[1]
    expect_error(sch, lambda: sch.bind(i, "threadIdx.x"), "threadIdx.x", "in place", '"B"')


def test_bind_same_axis_accepts_a_repeatable_copy():
    f = tdsl.parse(COPY)
    sch = tdsl.Schedule(f)
    i = sch.get_loops(sch.get_block("B"))[1]
    sch.bind(i, "threadIdx.x")
    check(sch, f)
    k = sch.get_loops(sch.get_block("B"))[2]
    expect_error(sch, lambda: sch.bind(k, "threadIdx.x"), "threadIdx.x", "depends on")


def test_shared_gemm_in_tvm_order_caches_first():
    """TVM's tutorial order: caches first, then tiling and binding, then the compute_at steps."""
    f = gemm(32)
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    shared = [sch.cache_read(c, "A", "shared"), sch.cache_read(c, "B", "shared")]
    local = sch.cache_write(c, 0, "local")
    i, j, k = sch.get_loops(c)
    by, ty, ti = sch.split(i, factors=[None, 4, 4])
    bx, tx, tj = sch.split(j, factors=[None, 4, 4])
    ko, ki = sch.split(k, factors=[None, 4])
    sch.reorder(by, bx, ty, tx, ko, ki, ti, tj)
    for loop, axis in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        sch.bind(loop, axis)
    sch.reverse_compute_at(local, tx)
    for s in shared:
        sch.compute_at(s, ko)
        fused = sch.fuse(*sch.get_loops(s)[-2:])
        _, fy, fx = sch.split(fused, factors=[None, 4, 4])
        sch.bind(fy, "threadIdx.y")
        sch.bind(fx, "threadIdx.x")
    check(sch, f, tol=1e-4)
    pytest.importorskip("cuda.bindings")
    src = tdsl.build(sch, target="cuda", arch="sm_90").source
    assert src.count("__syncthreads();") == 2, src
    assert re.search(r"__shared__ .*float A_shared\[64\];", src), src  # a 16 x 4 tile


def test_cooperative_fetch_on_fewer_threads_is_guarded():
    f, sch, lp = tiled(32, tile=16, threads=4, kt=4)
    s = sch.cache_read(sch.get_block("C"), "A", "shared")
    sch.compute_at(s, lp["ko"])
    fused = sch.fuse(*sch.get_loops(s)[-2:])
    _, fy, fx = sch.split(fused, factors=[None, 2, 4])  # 2 of the 4 threadIdx.y rows copy
    sch.bind(fy, "threadIdx.y")
    sch.bind(fx, "threadIdx.x")
    check(sch, f, tol=1e-4)
    pytest.importorskip("cuda.bindings")
    src = tdsl.build(sch, target="cuda", arch="sm_90").source
    ktile = src[src.index("for (int k_0"):]
    guard = ktile.index("if (i_1 < 2) {")
    assert guard < ktile.index("A_shared[") < ktile.index("__syncthreads();"), src
