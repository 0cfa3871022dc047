"""TVM-named mma intrinsics (tdsl.intrinsics.cuda_mma) in a hand-written sm_80 GEMM schedule:
A and B staged in shared memory by the whole block, ldmatrix into per-lane fragments, mma.sync
m16n8k16, accumulators stored straight to global. Run in the emulator (ldmatrix and mma.sync
modelled lane by lane, see tests/cuda/test_ptx_mma_layouts.py) and, where the wheels are
installed, compiled with NVRTC and read back with cuobjdump."""
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda import cuda_source, lower_cuda
from tdsl.intrinsics import cuda_mma as mma
from tdsl.ir import Allocate, collect


def gemm(n, dtype="float16", trans_b=False):
    @T.prim_func
    def f(A: T.Buffer((n, n), dtype), B: T.Buffer((n, n), dtype), C: T.Buffer((n, n), "float32")):
        for i, j, k in T.grid(n, n, n):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")
    return f


def tile16(sch, block, nloops=2):
    loops = sch.get_loops(block)[-nloops:]
    outer, inner = [], []
    for lp in loops:
        o, i = sch.split(lp, factors=[None, 16])
        outer.append(o); inner.append(i)
    sch.reorder(*outer, *inner)
    return inner[0]


def schedule(n=128, dtype="float16", block=64, warp=32, kstep=32, store=True, pad=False, swizzle=False):
    dt = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    sch = tdsl.Schedule(gemm(n, dtype))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    wm = block // warp
    bi, wi, ii = sch.split(i, factors=[None, wm, warp])
    bj, wj, jj = sch.split(j, factors=[None, wm, warp])
    ko, ki = sch.split(k, factors=[None, kstep])
    sch.reorder(bi, bj, wi, wj, ko, ii, jj, ki)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(wi, "threadIdx.z")
    sch.bind(wj, "threadIdx.y")
    w = wj
    acc = sch.cache_write(c, 0, "m16n8k16.accumulator")
    sch.reverse_compute_at(acc, w)
    a_sh = sch.cache_read(c, "A", "shared")
    b_sh = sch.cache_read(c, "B", "shared")
    fa = sch.cache_read(c, "A_shared", "m16n8k16.matrixA")
    fb = sch.cache_read(c, "B_shared", "m16n8k16.matrixB")
    sch.compute_at(fa, ko)
    sch.compute_at(fb, ko)
    for stage in (a_sh, b_sh):
        sch.compute_at(stage, ko)
        fused = sch.fuse(*sch.get_loops(stage)[-2:])
        _, fz, fy, fx = sch.split(fused, factors=[None, wm, wm, 32])
        sch.bind(fz, "threadIdx.z")
        sch.bind(fy, "threadIdx.y")
        sch.bind(fx, "threadIdx.x")
    # the mma block: (i, j, k) 16-tiles innermost
    loops = sch.get_loops(c)[-3:]
    outer, inner = [], []
    for lp in loops:
        o, in_ = sch.split(lp, factors=[None, 16]); outer.append(o); inner.append(in_)
    sch.reorder(*outer, *inner)
    init = sch.decompose_reduction(c, ko)
    sch.tensorize(tile16(sch, init), mma.fill_name("f32"))
    sch.tensorize(tile16(sch, fa), mma.ldmatrix_name(dt, "a"))
    sch.tensorize(tile16(sch, fb), mma.ldmatrix_name(dt, "b"))
    sch.tensorize(inner[0], mma.mma_name(dt))
    if store:
        sch.tensorize(tile16(sch, acc), mma.store_name("f32", "global"))
    if pad:   # rows padded by 16 bytes: 8 rows of an ldmatrix phase fall in 8 different bank quads
        sch.storage_align(a_sh, 0, axis=0, factor=kstep, offset=8)
        sch.storage_align(b_sh, 0, axis=0, factor=block, offset=8)
    if swizzle:   # or XOR each row's 16-byte chunks with the row: the same effect, no extra memory
        mma.swizzle(sch, a_sh)
        mma.swizzle(sch, b_sh)
    return sch


def _inputs(n, dtype):
    import ml_dtypes

    npdt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    return [rng.standard_normal((n, n)).astype(npdt) for _ in range(2)]


def _local_shapes(plan) -> dict[str, tuple[int, ...]]:
    return {a.buffer.name: tuple(int(s.value) for s in a.buffer.shape)
            for spec in plan.kernels for a in collect(spec.body, Allocate) if a.buffer.scope == "local"}


def test_fragments_are_the_lanes_registers():
    # a warp's 32 x 32 tile: 1024 accumulators, 32 per lane; A and B: 2 x 2 tiles of 16 x 16, 32 halves per lane
    assert _local_shapes(lower_cuda(schedule())) == {
        "C_m16n8k16_accumulator": (32,), "A_shared_m16n8k16_matrixA": (32,), "B_shared_m16n8k16_matrixB": (32,)}
    src = cuda_source(schedule())
    assert "tdsl_mma_16x16x16_f32(C_m16n8k16_accumulator[i_2_0 * 16 + j_2_0 * 8]" in src
    # shared tiles sized to the block (64 x 32 halves each), not the whole matrices
    assert "half A_shared[2048];" in src and "half B_shared[2048];" in src


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gemm_is_right_in_the_emulator(dtype):
    pytest.importorskip("ml_dtypes")
    n = 128
    a, b = _inputs(n, dtype)
    kernel = tdsl.build(schedule(n, dtype), target="cuda", emulate=True)
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(kernel(a, b), want, rtol=1e-4, atol=1e-4)


def test_interpreter_agrees():
    a, b = _inputs(64, "float16")
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(tdsl.interpret(gemm(64), a, b), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tdsl.build(schedule(64), target="cuda", emulate=True)(a, b), want,
                               rtol=1e-4, atol=1e-4)


def test_untensorized_fragment_access_is_refused():
    # the accumulator's elements are spread over the lanes: a plain write-back cannot read them
    sch = schedule(64, store=False)
    acc = sch.get_block("C_m16n8k16_accumulator")
    _, lanes = sch.split(sch.fuse(*sch.get_loops(acc)[-2:]), factors=[None, 32])
    sch.bind(lanes, "threadIdx.x")
    with pytest.raises(tdsl.TargetError, match="C_m16n8k16_accumulator is also read or written outside"):
        lower_cuda(sch)


def _cuobjdump() -> str | None:
    try:
        import nvidia
    except ImportError:
        return shutil.which("cuobjdump")
    for root in nvidia.__path__:
        for sub in ("cu13/bin", "cuda_cuobjdump/bin"):
            path = os.path.join(root, sub, "cuobjdump")
            if os.path.exists(path):
                return path
    return shutil.which("cuobjdump")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sass_has_hmma_and_ldsm_and_no_local_memory(dtype):
    pytest.importorskip("cuda.bindings")
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    kernel = tdsl.build(schedule(256, dtype), target="cuda", arch="sm_80")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(kernel.cubin)
        sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout
        res = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True, check=True).stdout
    ops = [line.split("*/")[1].split()[0] for line in sass.splitlines() if "*/" in line and line.split("*/")[1].strip()]
    assert "HMMA.16816.F32" + (".BF16" if dtype == "bfloat16" else "") in ops
    assert "LDSM.16.M88.4" in ops and "LDSM.16.MT88.4" in ops
    assert not [o for o in ops if o.startswith(("LDL", "STL"))]
    regs = int(res.split("REG:")[1].split()[0])
    assert regs <= 255


def test_emulator_counts_bank_conflicts_and_padding_removes_them():
    a, b = _inputs(64, "float16")
    plain = tdsl.build(schedule(64), target="cuda", emulate=True)
    assert plain.notes == []          # nothing counted before a call
    plain(a, b)
    shared = {c.buffer: c for c in plain.stats.shared}
    # A_shared rows are 64 bytes: rows r and r + 2 of a phase share banks (4-way);
    # B_shared rows are 128 bytes: all 8 rows of a phase start in bank 0 (8-way)
    assert (shared["A_shared"].worst, shared["B_shared"].worst) == (4, 8)
    assert shared["A_shared"].wavefronts == 4 * shared["A_shared"].phases
    line = plain.source.splitlines()[shared["A_shared"].line - 1]
    assert "tdsl_mma_ldmatrix_a(" in line
    assert any(n.startswith(f"4-way bank conflicts on A_shared at line {shared['A_shared'].line}")
               for n in plain.notes)
    padded = tdsl.build(schedule(64, pad=True), target="cuda", emulate=True)
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(padded(a, b), want, rtol=1e-4, atol=1e-4)
    assert {c.buffer: (c.worst, c.wavefronts == c.phases) for c in padded.stats.shared} == {
        "A_shared": (1, True), "B_shared": (1, True)}
    assert padded.notes == []
    assert "half A_shared[2552];" in padded.source    # 64 rows of 40 halves (80 bytes): 63 x 40 + 32


def test_stats_read_registers_and_memory_from_the_cubin():
    pytest.importorskip("cuda.bindings")
    if _cuobjdump() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    from tdsl.backends.cuda.stats import opcodes

    kernel = tdsl.build(schedule(128, pad=True), target="cuda", arch="sm_80")
    (usage,) = kernel.stats.resources.values()
    assert usage["local"] == 0 and usage["stack"] == 0 and 0 < usage["registers"] <= 255
    assert usage["shared"] == 2 * (2552 + 2296)        # the two padded half tiles (64 x 40, 32 x 72), in bytes
    ops = opcodes(kernel.cubin)
    # per k step a warp issues 16 mma.sync (2 x 2 tiles x 2 k halves x 2 n halves): HMMA.16816
    assert ops["HMMA.16816.F32"] % 8 == 0 and ops["HMMA.16816.F32"] > 0
    assert ops["LDSM.16.M88.4"] > 0 and ops["LDSM.16.MT88.4"] > 0
    assert "registers" in str(kernel.stats)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_xor_swizzled_tiles_are_read_without_bank_conflicts(dtype):
    pytest.importorskip("ml_dtypes")
    a, b = _inputs(128, dtype)
    kernel = tdsl.build(schedule(128, dtype, swizzle=True), target="cuda", emulate=True)
    np.testing.assert_allclose(kernel(a, b), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4, atol=1e-4)
    assert {c.buffer: (c.worst, c.wavefronts == c.phases) for c in kernel.stats.shared} == {
        "A_shared": (1, True), "B_shared": (1, True)}
    src = kernel.source
    # same memory as unswizzled; 64-byte rows of A: chunk ^ ((row // 2) % 4); 128-byte rows of B: chunk ^ (row % 8)
    assert " A_shared[2048];" in src and " B_shared[2048];" in src
    assert "tdsl_mma_ldmatrix_a_xor(" in src and ", 2, 4);" in src and ", 1, 8);" in src
    # a thread's stores into the swizzled tile need no barrier between them
    body = src[src.index("__global__"):]
    assert body.count("__syncthreads();") == 2


def test_swizzled_and_padded_is_refused():
    sch = schedule(64, pad=True, swizzle=True)
    with pytest.raises(tdsl.TargetError, match="A_shared is both padded .storage_align. and swizzled"):
        lower_cuda(sch)


def test_swizzle_of_a_buffer_not_in_shared_memory_is_refused():
    @T.prim_func
    def f(A: T.Buffer((64, 64), "float16"), B: T.Buffer((64, 64), "float16")):
        for i in T.thread_binding(64, thread="blockIdx.x"):
            for j in T.thread_binding(64, thread="threadIdx.x"):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj]

    sch = tdsl.Schedule(f)
    mma.swizzle(sch, sch.get_block("B"))     # B is a parameter in global memory
    with pytest.raises(tdsl.TargetError, match="B is written by a block annotated tdsl.swizzle but is not a shared"):
        lower_cuda(sch)


def gemm_nt(n, dtype, acc):
    """C = A @ B.T with B stored n-major, B[j, k] (TVM's "trans" mma intrinsics)."""
    @T.prim_func
    def f(A: T.Buffer((n, n), dtype), B: T.Buffer((n, n), dtype), C: T.Buffer((n, n), acc)):
        for i, j, k in T.grid(n, n, n):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.cast(0, acc)
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], acc) * T.cast(B[vj, vk], acc)
    return f


def schedule_nt(n, dtype):
    """One warp per 32 x 32 tile of C, k in steps of 32; B[j, k] read with mma_ldmatrix_*_b_trans."""
    short = {"float16": "f16", "int8": "i8"}[dtype]
    acc = "int32" if dtype == "int8" else "float32"
    scopes = mma.I8_SCOPES if dtype == "int8" else mma.F16_SCOPES
    kt = 32 if dtype == "int8" else 16           # k of one mma tile
    sch = tdsl.Schedule(gemm_nt(n, dtype, acc))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    bi, ii = sch.split(i, factors=[None, 32])
    bj, jj = sch.split(j, factors=[None, 32])
    ko, ki = sch.split(k, factors=[None, 32])
    sch.reorder(bi, bj, ko, ii, jj, ki)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    accb = sch.cache_write(c, 0, scopes[2])
    sch.reverse_compute_at(accb, bj)
    a_sh, b_sh = sch.cache_read(c, "A", "shared"), sch.cache_read(c, "B", "shared")
    fa = sch.cache_read(c, "A_shared", scopes[0])
    fb = sch.cache_read(c, "B_shared", scopes[1])
    sch.compute_at(fa, ko)
    sch.compute_at(fb, ko)
    for stage in (a_sh, b_sh):
        sch.compute_at(stage, ko)
        _, tx = sch.split(sch.fuse(*sch.get_loops(stage)[-2:]), factors=[None, 32])
        sch.bind(tx, "threadIdx.x")

    def tiles(block, shape):
        loops = sch.get_loops(block)[-len(shape):]
        outer, inner = [], []
        for lp, t in zip(loops, shape):
            o, in_ = sch.split(lp, factors=[None, t])
            outer.append(o)
            inner.append(in_)
        sch.reorder(*outer, *inner)
        return inner[0]

    mma_loop = tiles(c, (16, 16, kt))
    init = sch.decompose_reduction(c, ko)
    sch.tensorize(tiles(init, (16, 16)), mma.fill_name("i32" if dtype == "int8" else "f32"))
    sch.tensorize(tiles(fa, (16, kt)), mma.ldmatrix_name(short, "a"))
    sch.tensorize(tiles(fb, (16, kt)), mma.ldmatrix_name(short, "b_trans"))
    sch.tensorize(mma_loop, mma.mma_name(short, trans_b=True))
    sch.tensorize(tiles(accb, (16, 16)), mma.store_name("i32" if dtype == "int8" else "f32", "global"))
    return sch


@pytest.mark.parametrize("dtype", ["float16", "int8"])
def test_trans_b_gemms_are_right_in_the_emulator(dtype):
    n = 64
    rng = np.random.default_rng(5)
    if dtype == "int8":
        a, b = (rng.integers(-128, 128, (n, n)).astype(np.int8) for _ in range(2))
        want = a.astype(np.int32) @ b.astype(np.int32).T
    else:
        a, b = (rng.standard_normal((n, n)).astype(np.float16) for _ in range(2))
        want = a.astype(np.float32) @ b.astype(np.float32).T
    sch = schedule_nt(n, dtype)
    np.testing.assert_allclose(tdsl.interpret(sch, a, b), want, rtol=1e-4, atol=1e-3)
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    got = kernel(a, b)
    if dtype == "int8":
        np.testing.assert_array_equal(got, want)
        # 16 x 32 int8 tiles: A and B fragments of a 32 x 32 k-step are 2 tiles of 16 bytes per lane
        assert "signed char A_shared_m16n8k32_matrixA[32];" in kernel.source
        assert "int C_m16n8k32_accumulator[32];" in kernel.source
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    pytest.importorskip("cuda.bindings")
    if _cuobjdump() is None:
        return
    from tdsl.backends.cuda.stats import opcodes

    ops = opcodes(tdsl.build(sch, target="cuda", arch="sm_80").cubin)
    mma_op = "IMMA.16832.S8.S8" if dtype == "int8" else "HMMA.16816.F32"
    assert ops[mma_op] > 0 and ops["LDSM.16.M88.4"] > 0, dict(ops)


def test_building_for_an_arch_without_mma_sync_is_refused():
    pytest.importorskip("cuda.bindings")
    with pytest.raises(tdsl.TargetError, match="mma intrinsics .* need sm_80 or newer"):
        tdsl.build(schedule(64), target="cuda", arch="sm_75")
    assert tdsl.build(schedule(64), target="cuda", arch="sm_90").cubin
