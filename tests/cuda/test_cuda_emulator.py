"""The CUDA emulator (build(..., target="cuda", emulate=True)): every shipped GPU kernel runs
its generated CUDA C++ on the CPU and matches the interpreter; races, out-of-bounds accesses,
divergent barriers and warp-collective misuse are reported."""
import shutil

import cuda_kernels as ck
import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda.emulator import compiler

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                                reason="no host C++ compiler")


def _close(out, expected, tol):
    np.testing.assert_allclose(np.asarray(out, np.float64), np.asarray(expected, np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("maker,dims,tol", [(ck.elementwise, {"n": 5}, 1e-6), (ck.elementwise_fp16, {}, 0),
                                            (ck.softmax, {}, 1e-6), (ck.matmul, {}, 1e-4)],
                         ids=["elementwise", "elementwise_fp16", "softmax", "matmul"])
def test_shipped_kernels_match_numpy(maker, dims, tol):
    func, ref = maker()
    inputs = ck.random_inputs(func, dims=dims)
    kernel = tdsl.build(func, target="cuda", emulate=True)
    _close(kernel(*inputs), ref(*inputs), tol)
    assert kernel.source == tdsl.backends.cuda.cuda_source(func)


def test_kitchen_sink_matches_the_interpreter_bit_for_bit():
    func, ref, inputs = ck.kitchen_sink()
    ins = inputs()
    outs = tdsl.build(func, target="cuda", emulate=True)(*ins)
    for got, want in zip(outs, ref(*ins)):
        if got.dtype == np.float32 or got.dtype == np.float64:
            _close(got, want, 1e-6)       # libm vs the interpreter's numpy: last-bit differences
        else:
            np.testing.assert_array_equal(got, want)


def test_wmma_tensor_core_gemm_runs_warp_collective():
    sch, ref = ck.wmma_gemm()
    inputs = ck.random_inputs(sch.func)
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    _close(kernel(*inputs), ref(*inputs), 1e-4)
    assert "nvcuda::wmma::mma_sync" in kernel.source


def test_symbolic_rows_and_output_allocation():
    func, ref = ck.elementwise()
    kernel = tdsl.build(func, target="cuda", emulate=True)
    a = np.random.default_rng(1).standard_normal((3, 1024)).astype("float32")
    b = np.empty_like(a)
    assert kernel(a, b) is None
    _close(b, ref(a), 1e-6)
    with pytest.raises(tdsl.ArgumentError, match="dtype"):
        kernel(a.astype("float64"))


# ----------------------------------------------------------------------------- the row-sum schedules

def _row_sum(m=256):
    @T.prim_func
    def row_sum(A: T.Buffer(("n", m), "float32"), S: T.Buffer(("n",), "float32")):
        for i, k in T.grid(n, m):
            with T.block("S"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    S[vi] = T.float32(0)
                S[vi] = S[vi] + A[vi, vk]

    return row_sum


def _row_sum_3(m=256):
    @T.prim_func
    def row_sum(A: T.Buffer((3, m), "float32"), S: T.Buffer((3,), "float32")):
        for i, k in T.grid(3, m):
            with T.block("S"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    S[vi] = T.float32(0)
                S[vi] = S[vi] + A[vi, vk]

    return row_sum


def _row_sum_schedule(scope, symbolic=True):
    """rfactor, the partial's inner loop on threadIdx.x, the final block at the row with a unit
    loop on threadIdx.x (so thread 0 adds what 32 threads wrote)."""
    sch = tdsl.Schedule(_row_sum() if symbolic else _row_sum_3())
    _, k = sch.get_loops(sch.get_block("S"))
    _, ki = sch.split(k, factors=[None, 32])
    rf = sch.rfactor(ki, 1)
    ri, rk0, rk1 = sch.get_loops(rf)
    sch.reorder(ri, rk1, rk0)
    sch.bind(ri, "blockIdx.x")
    sch.bind(rk1, "threadIdx.x")
    fin = sch.get_block("S")
    sch.reverse_compute_at(fin, ri)
    unit, _ = sch.split(sch.get_loops(fin)[-1], factors=[1, None])
    sch.bind(unit, "threadIdx.x")
    if scope is not None:
        sch.set_scope(rf, 0, scope)
    return sch


def test_row_sum_through_a_global_partial_is_refused_as_a_race():
    sch = _row_sum_schedule(None)
    a = np.random.default_rng(0).standard_normal((4, 256)).astype("float32")
    np.testing.assert_allclose(tdsl.interpret(sch.func, a), a.sum(1), rtol=1e-4, atol=1e-4)  # the meaning is right
    with pytest.raises(tdsl.ScheduleError) as info:
        tdsl.build(sch, target="cuda", emulate=True)
    msg = str(info.value)
    assert 'block "S"' in msg and 'global buffer "S_rf"' in msg and "race" in msg
    assert 'sch.set_scope(sch.get_block("S_rf"), "S_rf", "shared")' in msg


def test_row_sum_through_a_local_partial_is_refused():
    sch = _row_sum_schedule("local")
    with pytest.raises(tdsl.ScheduleError, match='local buffer "S_rf".*private to each GPU thread'):
        tdsl.build(sch, target="cuda", emulate=True)


def test_row_sum_through_a_shared_partial_is_correct_with_symbolic_rows():
    sch = _row_sum_schedule("shared")
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    assert kernel.source.count("__syncthreads();") == 1
    a = np.random.default_rng(0).standard_normal((5, 256)).astype("float32")
    _close(kernel(a), a.sum(1), 1e-4)


@pytest.fixture
def without_exchange_check():
    """The CUDA pipeline with its check_thread_exchange pass switched off (restored after)."""
    from tdsl.lower import Pass, register_pass
    from tdsl.lower.gpu_exchange import check_thread_exchange

    register_pass("cuda", Pass("check_thread_exchange", lambda func: func))
    yield
    register_pass("cuda", Pass("check_thread_exchange", check_thread_exchange))


def test_the_emulator_catches_what_the_lowering_check_would(without_exchange_check):
    # with the lowering's exchange check switched off, the two wrong schedules compile to the
    # wrong CUDA of issue 16; the emulator reports both instead of returning garbage
    a = np.random.default_rng(0).standard_normal((3, 256)).astype("float32")
    for scope in (None, "local"):
        kernel = tdsl.build(_row_sum_schedule(scope, symbolic=False), target="cuda", emulate=True)
        with pytest.raises(tdsl.TargetError, match=r"threads of block \(\d, 0, 0\) disagree on S\[\d\]"):
            kernel(a)
    local = tdsl.build(_row_sum_schedule("local", symbolic=False), target="cuda", emulate=True)
    assert "float S_rf[" in local.source   # a private copy per thread, read across threads


# ----------------------------------------------------------------------------- reductions with schedules

@pytest.mark.parametrize("maker,inputs", ck.reduction_cases(), ids=[m.__name__ for m, _ in ck.reduction_cases()])
def test_gpu_reduction_schedules_match_numpy_and_the_interpreter(maker, inputs):
    sch, ref = maker()
    want = ref(*inputs)
    _close(tdsl.interpret(sch.func, *inputs), want, 1e-5)
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    _close(kernel(*inputs), want, 1e-5)
    if maker is not ck.row_sum_rfactor:
        assert "__shfl_xor_sync" in kernel.source   # a cross-thread reduction
    _close(tdsl.build(sch, target="cpu")(*inputs), want, 1e-5)


@pytest.mark.parametrize("threads", [8, 32, 48, 128])
def test_cross_thread_all_reduce_for_any_thread_count(threads):
    # powers of two up to 32: one warp butterfly; multiples of 32: warps, then shared memory;
    # others (48): shared memory only; with a symbolic reduction length (a tail guard)
    sch, ref = ck.row_sum_cross_thread(cols=200, threads=threads)
    a = np.random.default_rng(threads).standard_normal((3, 200)).astype("float32")
    _close(tdsl.build(sch, target="cuda", emulate=True)(a), ref(a), 1e-5)


@T.prim_func
def _row_sum_16(A: T.Buffer((16, 200), "float32"), S: T.Buffer((16,), "float32")):
    for i, k in T.grid(16, 200):
        with T.block("S"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                S[vi] = T.float32(0)
            S[vi] = S[vi] + A[vi, vk]


@pytest.mark.parametrize("threads,rows", [(8, 4), (64, 2), (48, 2), (32, 3)])
def test_cross_thread_reductions_of_several_rows_per_block(threads, rows):
    # rows on threadIdx.y (3 does not divide 16: a guarded store), the reduction on threadIdx.x
    sch = tdsl.Schedule(_row_sum_16)
    i, k = sch.get_loops(sch.get_block("S"))
    io, ii = sch.split(i, factors=[None, rows])
    sch.bind(io, "blockIdx.x")
    sch.bind(ii, "threadIdx.y")
    _, ki = sch.split(k, factors=[None, threads])
    sch.bind(ki, "threadIdx.x")
    a = np.random.default_rng(rows).standard_normal((16, 200)).astype("float32")
    _close(tdsl.build(sch, target="cuda", emulate=True)(a), a.sum(1), 1e-4)


def test_cross_thread_results_in_a_global_buffer_are_refused():
    # softmax's row max left in a global buffer: every thread of the row reads what thread 0 wrote
    sch, _ = ck.softmax_cross_thread(shared=False)
    with pytest.raises(tdsl.ScheduleError, match='global buffer "M".*set_scope'):
        tdsl.build(sch, target="cuda", emulate=True)


def test_cross_thread_reduction_needs_every_thread_of_the_block():
    # the reductions on 64 threads, the output stage on 128: the kernel launches 128, so the
    # reductions would run under `if (tx < 64)`, where a warp shuffle / barrier cannot be
    sch, _ = ck.softmax_cross_thread(threads=64, out_threads=128)
    with pytest.raises(tdsl.TargetError, match="cross-thread reduction"):
        tdsl.build(sch, target="cuda", emulate=True)


# ----------------------------------------------------------------------------- hand-edited sources

def test_a_removed_barrier_is_reported_as_a_race():
    func, ref = ck.softmax()
    kernel = tdsl.build(func, target="cuda", emulate=True)
    a = ck.random_inputs(func)[0]
    _close(kernel(a), ref(a), 1e-6)
    lines = kernel.source.splitlines()
    first = next(i for i, ln in enumerate(lines) if "__syncthreads();" in ln)
    broken = kernel.with_source("\n".join(lines[:first] + lines[first + 1:]) + "\n")
    with pytest.raises(tdsl.TargetError, match=r"threads of block \(\d+, 0, 0\) disagree on B\[\d+, \d+\].*barrier"):
        broken(a)


def test_out_of_bounds_global_and_shared_accesses_name_buffer_and_index():
    func, _ = ck.elementwise_fp16()
    kernel = tdsl.build(func, target="cuda", emulate=True)
    ins = ck.random_inputs(func)
    bad = kernel.with_source(kernel.source.replace("B[bx * 128 + tx] =", "B[bx * 128 + tx + 1] ="))
    with pytest.raises(tdsl.TargetError, match=r"out-of-bounds access: B\[4096\], but B has 4096 elements"):
        bad(*ins)
    sm, _ = ck.softmax()
    k2 = tdsl.build(sm, target="cuda", emulate=True)
    bad2 = k2.with_source(k2.source.replace("part2[tx] = 0.0f;", "part2[tx + 16] = 0.0f;"))
    with pytest.raises(tdsl.TargetError, match=r"part2\[\d+\], but part2 has 16 elements"):
        bad2(*ck.random_inputs(sm))


def test_local_array_bounds_are_checked():
    func, _ = ck.matmul()
    kernel = tdsl.build(func, target="cuda", emulate=True)
    bad = kernel.with_source(kernel.source.replace("C_loc[i * 4 + j] = 0.0f;", "C_loc[i * 4 + j + 1] = 0.0f;"))
    with pytest.raises(tdsl.TargetError, match=r"C_loc\[16\], but C_loc has 16 elements"):
        bad(*ck.random_inputs(func))


def test_misaligned_vector_access_is_reported():
    func, _ = ck.elementwise()
    kernel = tdsl.build(func, target="cuda", emulate=True)
    assert "float4" in kernel.source
    raw = np.zeros(2 * 1024 + 1, "float32")
    a = raw[1:].reshape(2, 1024)    # C-contiguous, 4 bytes off a 16-byte boundary
    with pytest.raises(tdsl.TargetError, match="misaligned 16-byte vector access to A"):
        kernel(a)


def test_a_barrier_in_divergent_code_is_reported():
    func, _ = ck.softmax()
    kernel = tdsl.build(func, target="cuda", emulate=True)
    src = kernel.source.replace("  __syncthreads();\n", "  if (tx < 64) __syncthreads();\n", 1)
    with pytest.raises(tdsl.TargetError, match="different __syncthreads"):
        kernel.with_source(src)(*ck.random_inputs(func))


def test_wmma_lanes_must_pass_the_same_tile():
    sch, _ = ck.wmma_gemm()
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    src = kernel.source.replace("A[bi * 1024 + ko * 16]", "A[bi * 1024 + ko * 16 + (tx & 1)]")
    with pytest.raises(tdsl.TargetError, match="load_matrix_sync with different arguments"):
        kernel.with_source(src)(*ck.random_inputs(sch.func))


def test_uninitialised_shared_memory_read_is_reported():
    func, _ = ck.softmax()
    kernel = tdsl.build(func, target="cuda", emulate=True)
    # drop the first stage's init: part[] starts with whatever shared memory held
    src = kernel.source.replace("      part[tx] = -3.4028234663852886e+38f;\n", "", 1)
    with pytest.raises(tdsl.TargetError, match="disagree"):
        kernel.with_source(src)(*ck.random_inputs(func))


# ----------------------------------------------------------------------------- build options, cache

def test_options_and_missing_compiler(monkeypatch):
    func, _ = ck.elementwise()
    with pytest.raises(tdsl.TargetError, match="thread_orders"):
        tdsl.build(func, target="cuda", emulate=True, thread_orders=5)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(tdsl.TargetError, match="host C\\+\\+ compiler.*none was found"):
        tdsl.build(func, target="cuda", emulate=True)


def test_shared_object_is_cached_on_disk(monkeypatch):
    func, ref = ck.elementwise()
    tdsl.build(func, target="cuda", emulate=True)
    compiler._LOADED.clear()   # as in a new process

    def no_compile(*a, **k):
        raise AssertionError("compiled again although the disk cache holds the shared object")

    monkeypatch.setattr(compiler, "_compile", no_compile)
    kernel = tdsl.build(func, target="cuda", emulate=True)
    a = np.ones((2, 1024), "float32")
    _close(kernel(a), ref(a), 1e-6)


def test_single_thread_order_skips_the_race_check(without_exchange_check):
    kernel = tdsl.build(_row_sum_schedule(None), target="cuda", emulate=True, thread_orders=1)
    kernel(np.ones((2, 256), "float32"))   # runs, silently wrong as on a GPU: nothing compared
