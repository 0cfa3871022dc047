"""TVM-style WMMA schedules on CUDA: warps on threadIdx.y, the 32 lanes an implicit threadIdx.x,
fragments from cache_read/cache_write shrunk to one warp's tiles. Compile-only (no GPU needed);
the CPU computes the tensorized blocks through their descriptions."""
import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda import cuda_source, lower_cuda
from tdsl.intrinsics import cuda as wmma
from tdsl.ir import Allocate, collect

N = 64


@T.prim_func
def hgemm(A: T.Buffer((N, N), "float16"), B: T.Buffer((N, N), "float16"), C: T.Buffer((N, N), "float32")):
    for i, j, k in T.grid(N, N, N):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")


def _split_last_by_16(sch, block):
    """Split a stage's 16 x 32 copy into 16 x 16 tiles (tile loop outermost)."""
    rows, cols = sch.get_loops(block)[-2:]
    co, ci = sch.split(cols, factors=[None, 16])
    sch.reorder(co, rows, ci)


def schedule(warps: int = 2, bind_blocks: bool = True, warp_axis: str = "threadIdx.y", store: bool = True):
    """A 32 x 32 tile of C per thread block, `warps` warps (16 rows each) on `warp_axis`, each
    warp accumulating a 16 x 32 strip in two accumulator fragments."""
    sch = tdsl.Schedule(hgemm)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    bi, ty, ii = sch.split(i, factors=[None, warps, 16])
    bj, jo, jj = sch.split(j, factors=[None, 2, 16])
    ko, ki = sch.split(k, factors=[None, 16])
    sch.reorder(bi, bj, ty, ko, jo, ii, jj, ki)
    if bind_blocks:
        sch.bind(bi, "blockIdx.y")
        sch.bind(bj, "blockIdx.x")
    sch.bind(ty, warp_axis)
    acc = sch.cache_write(c, 0, "wmma.accumulator")
    sch.reverse_compute_at(acc, ty)
    frag_a = sch.cache_read(c, "A", "wmma.matrix_a")
    sch.compute_at(frag_a, ko)
    frag_b = sch.cache_read(c, "B", "wmma.matrix_b")
    sch.compute_at(frag_b, ko)
    init = sch.decompose_reduction(c, ko)
    sch.tensorize(sch.get_loops(init)[-2], wmma.FILL)
    sch.tensorize(sch.get_loops(frag_a)[-2], wmma.load_a("global"))
    _split_last_by_16(sch, frag_b)
    sch.tensorize(sch.get_loops(frag_b)[-2], wmma.load_b("global"))
    sch.tensorize(sch.get_loops(c)[-3], wmma.MMA)
    if store:
        _split_last_by_16(sch, acc)
        sch.tensorize(sch.get_loops(acc)[-2], wmma.store("global"))
    return sch


def _inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((N, N)).astype("float16") for _ in range(2)]


def _local_shapes(plan) -> dict[str, tuple[int, ...]]:
    return {a.buffer.name: tuple(int(s.value) for s in a.buffer.shape)
            for spec in plan.kernels for a in collect(spec.body, Allocate) if a.buffer.scope == "local"}


def test_warps_on_threadidx_y_launch_32_lanes_each():
    plan = lower_cuda(schedule())
    (spec,) = plan.kernels
    assert {t: int(e.value) for t, e in spec.launch.items()} == {
        "blockIdx.x": 2, "blockIdx.y": 2, "threadIdx.x": 32, "threadIdx.y": 2}
    assert "__launch_bounds__(64)" in cuda_source(schedule())


def test_fragments_shrink_to_one_warps_tiles():
    # before: every fragment was the whole 64 x 64 matrix (4096 elements) per thread
    assert _local_shapes(lower_cuda(schedule())) == {
        "C_wmma_accumulator": (512,),     # the warp's 16 x 32 strip: two accumulator tiles
        "A_wmma_matrix_a": (256,),        # one 16 x 16 tile of A per k step
        "B_wmma_matrix_b": (512,),        # two 16 x 16 tiles of B per k step
    }
    src = cuda_source(schedule())
    assert "tdsl_wmma_mma_f16f32(C_wmma_accumulator[j_1 * 16], A_wmma_matrix_a[0], B_wmma_matrix_b[j_1 * 16]);" in src
    assert "[4096]" not in src


def test_computes_like_numpy_on_the_cpu():
    pytest.importorskip("llvmlite")
    a, b = _inputs()
    want = a.astype("float32") @ b.astype("float32")
    np.testing.assert_allclose(tdsl.build(schedule(), target="cpu")(a, b), want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compiles_to_cubin(arch):
    pytest.importorskip("cuda.bindings")
    kernel = tdsl.build(schedule(), target="cuda", arch=arch)
    assert kernel.cubin


def test_one_warp_per_block_needs_no_thread_loop():
    # warps=1 leaves the warp loop of extent 1 on threadIdx.y; a block of one warp
    plan = lower_cuda(schedule(warps=1))
    assert int(plan.kernels[0].launch["threadIdx.x"].value) == 32


def test_warp_block_outside_blockidx_is_refused():
    with pytest.raises(tdsl.ScheduleError, match=r'block "C_init_o".*blockIdx'):
        lower_cuda(schedule(bind_blocks=False))


def test_warps_bound_to_threadidx_x_are_refused():
    with pytest.raises(tdsl.ScheduleError, match=r"lanes of a warp, which are threadIdx.x.*extent 2"):
        lower_cuda(schedule(warp_axis="threadIdx.x"))


def test_scalar_block_in_a_warp_kernel_needs_threadidx_x():
    # the write-back left untensorized would run on all 32 lanes of each warp
    with pytest.raises(tdsl.ScheduleError, match=r'block "C_wmma_accumulator" is in a kernel with warp-wide'):
        lower_cuda(schedule(store=False))


def test_buffer_passed_to_other_extern_calls_keeps_its_size():
    @T.prim_func
    def f(A: T.Buffer((64,), "float32")):
        buf = T.alloc_buffer((64,), "float32", scope="local")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                with T.block("w"):
                    v = T.axis.spatial(16, tx)
                    T.evaluate(T.call_extern("int32", "my_fill", buf[v * 4]))
                    A[v * 4] = buf[v * 4]

    # my_fill may touch any part of buf: no shrinking
    assert "float buf[64];" in cuda_source(f)


def shared_schedule():
    """TVM's layout: A and B staged through shared memory by all threads of the block (warps on
    threadIdx.y, lanes on threadIdx.x), fragments loaded from shared memory."""
    sch = tdsl.Schedule(hgemm)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    bi, ty, ii = sch.split(i, factors=[None, 2, 16])
    bj, jo, jj = sch.split(j, factors=[None, 2, 16])
    ko, ki = sch.split(k, factors=[None, 16])
    sch.reorder(bi, bj, ty, ko, jo, ii, jj, ki)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    acc = sch.cache_write(c, 0, "wmma.accumulator")
    sch.reverse_compute_at(acc, ty)
    a_sh, b_sh = sch.cache_read(c, "A", "shared"), sch.cache_read(c, "B", "shared")
    frag_a = sch.cache_read(c, "A_shared", "wmma.matrix_a")
    sch.compute_at(frag_a, ko)
    frag_b = sch.cache_read(c, "B_shared", "wmma.matrix_b")
    sch.compute_at(frag_b, ko)
    for stage in (a_sh, b_sh):
        sch.compute_at(stage, ko)
        fused = sch.fuse(*sch.get_loops(stage)[-2:])
        _, fy, fx = sch.split(fused, factors=[None, 2, 32])
        sch.bind(fy, "threadIdx.y")
        sch.bind(fx, "threadIdx.x")
    init = sch.decompose_reduction(c, ko)
    sch.tensorize(sch.get_loops(init)[-2], wmma.FILL)
    sch.tensorize(sch.get_loops(frag_a)[-2], wmma.load_a("shared"))
    _split_last_by_16(sch, frag_b)
    sch.tensorize(sch.get_loops(frag_b)[-2], wmma.load_b("shared"))
    sch.tensorize(sch.get_loops(c)[-3], wmma.MMA)
    _split_last_by_16(sch, acc)
    sch.tensorize(sch.get_loops(acc)[-2], wmma.store("global"))
    return sch


def test_shared_staging_with_cooperative_fetch():
    plan = lower_cuda(shared_schedule())
    assert {t: int(e.value) for t, e in plan.kernels[0].launch.items() if t.startswith("threadIdx")} == {
        "threadIdx.x": 32, "threadIdx.y": 2}
    shapes = _local_shapes(plan)
    assert shapes["A_shared_wmma_matrix_a"] == (256,) and shapes["B_shared_wmma_matrix_b"] == (512,)
    # shared buffers handed to wmma loads carry their leading dimension in the call: not shrunk
    assert [int(b.shape[0].value) for b in plan.kernels[0].shared] == [4096, 4096]
    a, b = _inputs()
    want = a.astype("float32") @ b.astype("float32")
    np.testing.assert_allclose(tdsl.build(shared_schedule(), target="cpu")(a, b), want, rtol=1e-3, atol=1e-3)
    pytest.importorskip("cuda.bindings")
    for arch in ("sm_80", "sm_90"):
        assert tdsl.build(shared_schedule(), target="cuda", arch=arch).cubin


def test_wide_threadidx_x_in_a_warp_kernel_is_refused():
    @T.prim_func
    def f(A: T.Buffer((16, 16), "float16"), B: T.Buffer((64,), "float32")):
        frag = T.alloc_buffer((16, 16), "float16", scope="wmma.matrix_a")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for i, j in T.grid(16, 16):
                with T.block("load"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    frag[vi, vj] = A[vi, vj]
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                with T.block("other"):
                    v = T.axis.spatial(64, tx)
                    B[v] = T.float32(1)

    sch = tdsl.Schedule(f)
    sch.tensorize(sch.get_loops(sch.get_block("load"))[-2], wmma.load_a("global"))
    with pytest.raises(tdsl.TargetError, match=r"threadIdx.x is the 32 lanes of a warp.*extent 64"):
        lower_cuda(sch)
