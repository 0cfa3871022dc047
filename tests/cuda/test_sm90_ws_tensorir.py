"""A warp-specialized GEMM written in TensorIR with the mbarrier and TMA builtins
(T.ptx_init_barrier_thread_count, T.ptx_arrive_barrier[_expect_tx], T.ptx_wait_barrier,
T.ptx_tma_load): threadIdx.y == 0 produces (one thread issues the TMA loads of each K stage into a
ring of shared tiles), threadIdx.y == 1 consumes (waits on the stage's "full" barrier, computes,
arrives on its "empty" barrier). The interpreter runs it one statement after another (waits do
nothing, TMA copies); the emulator runs the threads and the barriers; NVRTC compiles it for sm_90a."""
import shutil

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda import sm90
from tdsl.errors import ScriptError, TargetError

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler")


def ws_gemm(M=64, N=64, K=128, BM=32, BN=32, BK=16, S=2, consumer_store=False):
    KT, PER = K // BK, BM * BN // 128
    TX_BYTES = (BM * BK + BK * BN) * 2

    @T.prim_func
    def gemm(tmap_a: T.Buffer((128,), "uint8"), tmap_b: T.Buffer((128,), "uint8"),
             A: T.Buffer((M, K), "float16"), B: T.Buffer((K, N), "float16"), C: T.Buffer((M, N), "float32")):
        A_sh = T.alloc_buffer((S, BM, BK), "float16", scope="shared")
        B_sh = T.alloc_buffer((S, BK, BN), "float16", scope="shared")
        full = T.alloc_buffer((S,), "uint64", scope="shared")
        empty = T.alloc_buffer((S,), "uint64", scope="shared")
        acc = T.alloc_buffer((128, PER), "float32", scope="local")
        for by in T.thread_binding(M // BM, thread="blockIdx.y"):
            for bx in T.thread_binding(N // BN, thread="blockIdx.x"):
                for ty in T.thread_binding(2, thread="threadIdx.y"):
                    for tx in T.thread_binding(128, thread="threadIdx.x"):
                        if ty == 0 and tx == 0:
                            for s in range(S):
                                T.evaluate(T.ptx_init_barrier_thread_count(full[s], 1))
                                T.evaluate(T.ptx_init_barrier_thread_count(empty[s], 128))
                        if ty == 1:
                            for i in range(PER):
                                acc[tx, i] = T.float32(0)
                for ko in range(KT):
                    for ty in T.thread_binding(2, thread="threadIdx.y"):
                        for tx in T.thread_binding(128, thread="threadIdx.x"):
                            if ty == 0:   # the producer: one thread issues the stage's TMA loads
                                if tx == 0:
                                    if ko >= S:   # the consumers have released this stage
                                        T.evaluate(T.ptx_wait_barrier(empty[ko % S], (ko // S + 1) % 2))
                                    T.evaluate(T.ptx_arrive_barrier_expect_tx(full[ko % S], TX_BYTES))
                                    T.evaluate(T.ptx_tma_load(A_sh[ko % S, 0, 0], A[by * BM, ko * BK], tmap_a[0],
                                                              full[ko % S]))
                                    T.evaluate(T.ptx_tma_load(B_sh[ko % S, 0, 0], B[ko * BK, bx * BN], tmap_b[0],
                                                              full[ko % S]))
                            else:   # the consumers: wait for the stage, compute, release it
                                T.evaluate(T.ptx_wait_barrier(full[ko % S], (ko // S) % 2))
                                for i in range(PER):
                                    for k in range(BK):
                                        acc[tx, i] = acc[tx, i] + T.cast(A_sh[ko % S, (tx * PER + i) // BN, k],
                                                                         "float32") * T.cast(
                                            B_sh[ko % S, k, (tx * PER + i) % BN], "float32")
                                if consumer_store:   # a plain write into a TMA stage: not mbarrier-ordered
                                    A_sh[ko % S, tx % BM, 0] = T.float16(0)
                                T.evaluate(T.ptx_arrive_barrier(empty[ko % S]))
                for ty in T.thread_binding(2, thread="threadIdx.y"):
                    for tx in T.thread_binding(128, thread="threadIdx.x"):
                        if ty == 1:
                            for i in range(PER):
                                C[by * BM + (tx * PER + i) // BN, bx * BN + (tx * PER + i) % BN] = acc[tx, i]
    return gemm


def wgmma_gemm(M=128, N=64, K=256, BM=64, BN=32, BK=64, S=2, dtype="float16"):
    """The same pipeline with a wgmma consumer: A (M x K) and B (N x K) K-major, stages of 64 x 64
    and 32 x 64 halves (128-byte rows: the tensor maps use the 128B swizzle), four k16 wgmmas a
    stage; each consumer thread holds BN / 2 accumulators in wgmma's layout."""
    KT = K // BK
    TX_BYTES = (BM * BK + BN * BK) * 2

    @T.prim_func
    def gemm(tmap_a: T.Buffer((128,), "uint8"), tmap_b: T.Buffer((128,), "uint8"),
             A: T.Buffer((M, K), dtype), B: T.Buffer((N, K), dtype), C: T.Buffer((M, N), "float32")):
        A_sh = T.alloc_buffer((S, BM, BK), dtype, scope="shared")
        B_sh = T.alloc_buffer((S, BN, BK), dtype, scope="shared")
        full = T.alloc_buffer((S,), "uint64", scope="shared")
        empty = T.alloc_buffer((S,), "uint64", scope="shared")
        acc = T.alloc_buffer((128, BN // 2), "float32", scope="local")
        for by in T.thread_binding(M // BM, thread="blockIdx.y"):
            for bx in T.thread_binding(N // BN, thread="blockIdx.x"):
                for ty in T.thread_binding(2, thread="threadIdx.y"):
                    for tx in T.thread_binding(128, thread="threadIdx.x"):
                        if ty == 0 and tx == 0:
                            for s in range(S):
                                T.evaluate(T.ptx_init_barrier_thread_count(full[s], 1))
                                T.evaluate(T.ptx_init_barrier_thread_count(empty[s], 128))
                        if ty == 1:
                            for i in T.unroll(BN // 2):
                                acc[tx, i] = T.float32(0)
                for ko in range(KT):
                    for ty in T.thread_binding(2, thread="threadIdx.y"):
                        for tx in T.thread_binding(128, thread="threadIdx.x"):
                            if ty == 0:
                                if tx == 0:
                                    if ko >= S:
                                        T.evaluate(T.ptx_wait_barrier(empty[ko % S], (ko // S + 1) % 2))
                                    T.evaluate(T.ptx_arrive_barrier_expect_tx(full[ko % S], TX_BYTES))
                                    T.evaluate(T.ptx_tma_load(A_sh[ko % S, 0, 0], A[by * BM, ko * BK], tmap_a[0],
                                                              full[ko % S]))
                                    T.evaluate(T.ptx_tma_load(B_sh[ko % S, 0, 0], B[bx * BN, ko * BK], tmap_b[0],
                                                              full[ko % S]))
                            else:
                                T.evaluate(T.ptx_wait_barrier(full[ko % S], (ko // S) % 2))
                                T.evaluate(T.ptx_wgmma_fence())
                                for j in T.unroll(BK // 16):
                                    T.evaluate(T.ptx_wgmma(acc[tx, 0], A_sh[ko % S, 0, 16 * j], B_sh[ko % S, 0, 16 * j],
                                                           BN, tx))
                                T.evaluate(T.ptx_wgmma_commit_group())
                                T.evaluate(T.ptx_wgmma_wait_group(0))
                                T.evaluate(T.ptx_arrive_barrier(empty[ko % S]))
                for ty in T.thread_binding(2, thread="threadIdx.y"):
                    for tx in T.thread_binding(128, thread="threadIdx.x"):
                        if ty == 1:
                            for i in T.unroll(BN // 2):
                                C[by * BM + 16 * (tx // 32) + tx % 32 // 4 + 8 * (i // 2 % 2),
                                  bx * BN + 8 * (i // 4) + 2 * (tx % 4) + i % 2] = acc[tx, i]
    return gemm


def _wgmma_operands(M=128, N=64, K=256, dtype="float16"):
    import ml_dtypes

    np_type = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(3)
    a = rng.integers(-2, 3, (M, K)).astype(np_type)   # small integers: every order of sums is exact
    b = rng.integers(-2, 3, (N, K)).astype(np_type)
    maps = sm90.emulator_tensor_map(a, (64, 64), "128B"), sm90.emulator_tensor_map(b, (32, 64), "128B")
    return a, b, maps, a.astype(np.float32) @ b.astype(np.float32).T


def test_wgmma_gemm_interprets_to_numpy_and_prints_back():
    a, b, (ta, tb), want = _wgmma_operands()
    f = wgmma_gemm()
    np.testing.assert_array_equal(tdsl.interpret(f, ta, tb, a, b), want)
    text = f.script()
    assert "T.ptx_wgmma(acc[tx_1, 0], A_sh[ko % 2, 0, 16 * j], B_sh[ko % 2, 0, 16 * j], 32, tx_1)" in text
    assert tdsl.parse(text).script() == text


@needs_cxx
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_wgmma_gemm_in_the_emulator(dtype):
    a, b, (ta, tb), want = _wgmma_operands(dtype=dtype)
    f = wgmma_gemm(dtype=dtype)
    np.testing.assert_array_equal(tdsl.interpret(f, ta, tb, a, b), want)
    kernel = tdsl.build(f, target="cuda", emulate=True)
    c = np.zeros_like(want)
    kernel(ta, tb, a, b, c)
    np.testing.assert_array_equal(c, want)
    body = kernel.source[kernel.source.index("__global__"):]
    assert body.count("__syncthreads()") == 1 and "float acc[16];" in body
    assert "tdsl_ptx_wgmma_desc(&A_sh[ko % 2 * 4096 + 16], 16, 1024, 1)" in body
    assert f"tdsl_ptx_wgmma_m64n32k16_f32_{'f16' if dtype == 'float16' else 'bf16'}(&acc[0]" in body


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_wgmma_gemm_sass_has_hgmma_utmaldg_syncs_and_no_local_memory(dtype):
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda import stats

    if stats.cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    kernel = tdsl.build(wgmma_gemm(dtype=dtype), target="cuda", arch="sm_90a")
    ops = stats.opcodes(kernel.cubin)
    for op in ("HGMMA", "UTMALDG", "SYNCS"):
        assert any(o.startswith(op) for o in ops), (op, sorted(ops))
    usage = stats.resource_usage(kernel.cubin)["gemm_kernel"]
    assert usage["local"] == 0 and usage["stack"] == 0


def test_wgmma_needs_sm90a():
    pytest.importorskip("cuda.bindings")
    with pytest.raises(TargetError, match="sm_90a"):
        tdsl.build(wgmma_gemm(), target="cuda", arch="sm_90")


def test_wgmma_tile_rows_are_checked():
    with pytest.raises(ScriptError, match="swizzle span"):
        @T.prim_func
        def bad(C: T.Buffer((4,), "float32")):
            A_sh = T.alloc_buffer((64, 24), "float16", scope="shared")
            acc = T.alloc_buffer((128, 4), "float32", scope="local")
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                T.evaluate(T.ptx_wgmma(acc[tx, 0], A_sh[0, 0], A_sh[0, 0], 8, tx))
                C[tx % 4] = acc[tx, 0]


def _operands(M=64, N=64, K=128, BM=32, BN=32, BK=16):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    maps = sm90.emulator_tensor_map(a, (BM, BK)), sm90.emulator_tensor_map(b, (BK, BN))
    return a, b, maps, a.astype(np.float32) @ b.astype(np.float32)


def test_builtins_print_and_parse_back():
    f = ws_gemm()
    text = f.script()
    for call in ("T.ptx_init_barrier_thread_count(full[s], 1)", "T.ptx_arrive_barrier_expect_tx(full[ko % 2], 2048)",
                 "T.ptx_wait_barrier(full[ko % 2], ko // 2 % 2)", "T.ptx_arrive_barrier(empty[ko % 2])",
                 "T.ptx_tma_load(A_sh[ko % 2, 0, 0], A[by * 32, ko * 16], tmap_a[0], full[ko % 2])"):
        assert call in text
    assert tdsl.parse(text).script() == text


def test_interpreter_runs_the_pipeline_in_program_order():
    a, b, (ta, tb), want = _operands()
    c = np.zeros((64, 64), np.float32)
    tdsl.interpret(ws_gemm(), ta, tb, a, b, c)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


def tma_tile():
    """One thread loads a 16 x 16 box of A at (y, x) by T.ptx_tma_load; all wait and copy it out."""
    @T.prim_func
    def tile_load(tmap: T.Buffer((128,), "uint8"), A: T.Buffer((32, 32), "float16"), B: T.Buffer((16, 16), "float16"),
                  x: T.int32, y: T.int32):
        bars = T.alloc_buffer((1,), "uint64", scope="shared")
        tile = T.alloc_buffer((16, 16), "float16", scope="shared")
        for blk in T.thread_binding(1, thread="blockIdx.x"):   # (one kernel: both thread loops in it)
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if tx == 0:
                    T.evaluate(T.ptx_init_barrier_thread_count(bars[0], 1))
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if tx == 0:
                    T.evaluate(T.ptx_arrive_barrier_expect_tx(bars[0], 512))
                    T.evaluate(T.ptx_tma_load(tile[0, 0], A[y, x], tmap[0], bars[0]))
                T.evaluate(T.ptx_wait_barrier(bars[0], 0))
                for k in range(4):
                    B[(tx * 4 + k) // 16, (tx * 4 + k) % 16] = tile[(tx * 4 + k) // 16, (tx * 4 + k) % 16]
    return tile_load


@pytest.mark.parametrize("x, y", [(0, 0), (8, 20), (-4, -2)])
def test_tma_load_is_a_box_copy_with_zero_fill(x, y):
    a = np.arange(32 * 32, dtype=np.float32).reshape(32, 32).astype(np.float16)
    want = np.zeros((16, 16), np.float16)
    for r in range(16):
        for c in range(16):
            if 0 <= y + r < 32 and 0 <= x + c < 32:
                want[r, c] = a[y + r, x + c]
    tmap = sm90.emulator_tensor_map(a, (16, 16))
    np.testing.assert_array_equal(tdsl.interpret(tma_tile(), tmap, a, x=x, y=y), want)
    if shutil.which("g++"):
        out = np.zeros((16, 16), np.float16)
        tdsl.build(tma_tile(), target="cuda", emulate=True)(tmap, a, out, x, y)
        np.testing.assert_array_equal(out, want)


@needs_cxx
def test_emulator_runs_producer_and_consumer_warps():
    a, b, (ta, tb), want = _operands()
    kernel = tdsl.build(ws_gemm(), target="cuda", emulate=True)
    c = np.zeros((64, 64), np.float32)
    kernel(ta, tb, a, b, c)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)
    body = kernel.source[kernel.source.index("__global__"):]
    # one __syncthreads (after the barriers' init); the K loop is ordered by the mbarriers alone
    assert body.count("__syncthreads()") == 1
    assert "tdsl_ptx_tma_load_2d(&A_sh[ko % 2 * 512], &tmap_a[0], ko * 16, by * 32, &full[ko % 2]);" in body
    assert "__shared__ __align__(1024) half A_sh[1024];" in body


def test_a_plain_write_into_a_tma_stage_is_refused():
    with pytest.raises(TargetError, match="A_sh"):
        tdsl.build(ws_gemm(consumer_store=True), target="cuda", emulate=True)


def test_barrier_argument_is_checked():
    with pytest.raises(ScriptError, match="shared uint64 buffer"):
        @T.prim_func
        def bad(A: T.Buffer((4,), "float32")):
            bars = T.alloc_buffer((1,), "uint32", scope="shared")
            for tx in T.thread_binding(4, thread="threadIdx.x"):
                T.evaluate(T.ptx_arrive_barrier(bars[0]))
                A[tx] = T.float32(0)


def test_sass_has_tma_and_mbarrier_and_no_local_memory():
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda import stats

    if stats.cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    kernel = tdsl.build(ws_gemm(), target="cuda", arch="sm_90a")
    ops = stats.opcodes(kernel.cubin)
    assert any(o.startswith("UTMALDG") for o in ops) and any(o.startswith("SYNCS") for o in ops), sorted(ops)
    assert stats.resource_usage(kernel.cubin)["gemm_kernel"]["local"] == 0


@pytest.mark.parametrize("call, message", [
    ("T.ptx_tma_load(tile[0, 0], A[0, 0], tmap[0], bars[0], 0)", "takes 2 coordinates of A"),
    ("T.ptx_tma_load(tile[0, 0], H[0, 0], tmap[0], bars[0])", "one dtype"),
    ("T.ptx_tma_load(A[0, 0], A[0, 0], tmap[0], bars[0])", "destination of T.ptx_tma_load is one element of a shared"),
    ("T.ptx_tma_load(tile[0, 0], A[0, 0], A[0, 0], bars[0])", "tensor map"),
    ("T.ptx_wait_barrier(bars[0], 0, 1)", "T.ptx_wait_barrier takes"),
    ("T.ptx_wgmma_wait_group(-1)", "constant count >= 0"),
])
def test_bad_hopper_calls_name_what_is_wrong(call, message):
    source = f'''
@T.prim_func
def bad(tmap: T.Buffer((128,), "uint8"), A: T.Buffer((32, 32), "float16"), H: T.Buffer((32, 32), "float32")):
    bars = T.alloc_buffer((1,), "uint64", scope="shared")
    tile = T.alloc_buffer((16, 16), "float16", scope="shared")
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        T.evaluate({call})
'''
    with pytest.raises(ScriptError, match=message):
        tdsl.parse(source)
