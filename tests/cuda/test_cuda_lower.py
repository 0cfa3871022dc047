"""GPU lowering: binding checks, kernel extraction, launch dimensions, barrier placement."""
import cuda_kernels as ck
import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda import cuda_source, lower_cuda


def test_unbound_block_is_named_before_codegen():
    f = ck.unbound()
    with pytest.raises(tdsl.ScheduleError) as info:
        cuda_source(f)
    msg = str(info.value)
    assert 'block "C" is not under any threadIdx loop' in msg
    assert 'sch.bind(loop, "threadIdx.x")' in msg
    # the same error is a TargetError for code that catches build errors, and build raises it too
    with pytest.raises(tdsl.TargetError, match='block "C"'):
        tdsl.build(f, target="cuda", arch="sm_90")


def test_block_under_blockidx_only_asks_for_threadidx():
    @T.prim_func
    def f(A: T.Buffer((4, 8), "float32")):
        for bx in T.thread_binding(4, thread="blockIdx.x"):
            for j in range(8):
                with T.block("A"):
                    vi, vj = T.axis.remap("SS", [bx, j])
                    A[vi, vj] = T.float32(1)

    with pytest.raises(tdsl.ScheduleError, match=r'block "A" is not under any threadIdx loop \(inside loops bx, j\)'):
        cuda_source(f)


def test_too_many_threads_per_block():
    @T.prim_func
    def f(A: T.Buffer((64, 64), "float32")):
        for ty in T.thread_binding(64, thread="threadIdx.y"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                with T.block("A"):
                    vi, vj = T.axis.remap("SS", [ty, tx])
                    A[vi, vj] = T.float32(1)

    with pytest.raises(tdsl.TargetError, match="4096 threads per block.*at most 1024"):
        cuda_source(f)


def test_block_dim_z_limit():
    @T.prim_func
    def f(A: T.Buffer((128,), "float32")):
        for tz in T.thread_binding(128, thread="threadIdx.z"):
            with T.block("A"):
                vi = T.axis.spatial(128, tz)
                A[vi] = T.float32(1)

    with pytest.raises(tdsl.TargetError, match="threadIdx.z has extent 128, more than the CUDA limit 64"):
        cuda_source(f)


def test_sibling_nests_become_launches_in_order_with_workspace():
    @T.prim_func
    def two(A: T.Buffer((8, 32), "float32"), C: T.Buffer((8, 32), "float32")):
        B = T.alloc_buffer((8, 32), "float32")
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [bx, tx])
                    B[vi, vj] = A[vi, vj] * T.float32(2)
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                with T.block("C"):
                    vi, vj = T.axis.remap("SS", [bx, tx])
                    C[vi, vj] = B[vi, 31 - vj] + T.float32(1)

    plan = lower_cuda(two)
    assert [k.name for k in plan.kernels] == ["two_kernel_0", "two_kernel_1"]
    assert [b.name for b in plan.workspaces] == ["B"]
    assert [p.name for p in plan.kernels[0].params] == ["A", "B"]
    assert [p.name for p in plan.kernels[1].params] == ["C", "B"]
    src = cuda_source(two)
    assert src.index("two_kernel_0") < src.index("two_kernel_1")
    assert "__syncthreads" not in src   # a kernel boundary already orders the two stages
    ck.emulate_matches_interpreter(two)


def test_shorter_thread_loop_is_guarded():
    f, _ = ck.softmax()
    plan = lower_cuda(f)
    (k,) = plan.kernels
    assert {t: e.value for t, e in k.launch.items()} == {"blockIdx.x": 64, "threadIdx.x": 128}
    src = cuda_source(f)
    assert src.count("if (tx < 16) {") == 2 and src.count("if (tx < 1) {") == 2


def test_symbolic_launch_dimension():
    f, _ = ck.elementwise()
    (k,) = lower_cuda(f).kernels
    grid = k.dims("blockIdx")
    assert grid[0].name == "n" and grid[1].value == 1
    assert [p.name for p in k.params] == ["A", "B"]


def test_thread_extent_depending_on_loop_is_refused():
    @T.prim_func
    def f(A: T.Buffer((8, 8), "float32")):
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            for tx in T.thread_binding(8, thread="threadIdx.x"):
                with T.block("A"):
                    vi, vj = T.axis.remap("SS", [bx, tx])
                    A[vi, vj] = T.float32(1)
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            for tx in T.thread_binding(4, thread="threadIdx.x"):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [bx, tx])
                    A[vi, vj] = T.float32(2)

    # different constant extents in different kernels are fine
    assert cuda_source(f).count("__global__") == 2


def test_shared_memory_limit():
    # more than any GPU gives a block (227 KiB on sm_90); the target's own limit is checked at build
    @T.prim_func
    def f(A: T.Buffer((128,), "float32")):
        S = T.alloc_buffer((128, 512), "float32", scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                for j in range(512):
                    with T.block("S"):
                        vi, vj = T.axis.remap("SS", [tx, j])
                        S[vi, vj] = A[vi]
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                with T.block("A"):
                    vi = T.axis.spatial(128, tx)
                    A[vi] = S[127 - vi, 511]

    with pytest.raises(tdsl.TargetError, match=r"262144 bytes of shared memory \(S\); no GPU allows more than 232448"):
        cuda_source(f)


# ----------------------------------------------------------------------------- barriers

def _stage_pair(a: int, b: int):
    """Stage 1: S[j] = A[j]; stage 2 reads S[a * j + b]."""
    @T.prim_func
    def f(A: T.Buffer((4, 64), "float32"), B: T.Buffer((4, 64), "float32")):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for bx in T.thread_binding(4, thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                with T.block("S"):
                    vi, vj = T.axis.remap("SS", [bx, tx])
                    S[vj] = A[vi, vj]
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [bx, tx])
                    B[vi, vj] = S[a * vj + b] * T.float32(2)

    return f


def test_no_barrier_when_each_thread_reads_its_own_element():
    assert "__syncthreads" not in cuda_source(_stage_pair(1, 0))
    ck.emulate_matches_interpreter(_stage_pair(1, 0))


def test_barrier_when_threads_read_each_others_elements():
    src = cuda_source(_stage_pair(-1, 63))
    assert src.count("__syncthreads();") == 1
    assert src.index("S[tx] = ") < src.index("__syncthreads();") < src.index("B[")
    ck.emulate_matches_interpreter(_stage_pair(-1, 63))


def test_barrier_counts_of_the_shipped_kernels():
    assert cuda_source(ck.elementwise()[0]).count("__syncthreads") == 0
    # 7 stages in a row, each reading what the previous one wrote
    assert cuda_source(ck.softmax()[0]).count("__syncthreads();") == 6
    # per k-tile: after the cooperative loads (read after write) and after the compute (the next
    # tile's loads overwrite what this one read)
    src = cuda_source(ck.matmul()[0])
    assert src.count("__syncthreads();") == 2
    loop = src[src.index("for (int ko"):]
    body = loop[:loop.index("\n  }\n")]
    assert body.count("__syncthreads();") == 2
    assert body.rstrip().endswith("__syncthreads();")


def test_barrier_before_loop_and_at_loop_end_for_a_tree_reduction():
    @T.prim_func
    def tree(A: T.Buffer((8,), "float32"), B: T.Buffer((1,), "float32")):
        S = T.alloc_buffer((8,), "float32", scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(8, thread="threadIdx.x"):
                with T.block("load"):
                    vi = T.axis.spatial(8, tx)
                    S[vi] = A[vi]
            for s in range(3):
                for tx in T.thread_binding(8, thread="threadIdx.x"):
                    with T.block("step"):
                        vs, vt = T.axis.remap("SS", [s, tx])
                        T.where(tx < 4 // (s + 1))  # halves: 4, 2, 1
                        S[vt] = S[vt] + S[vt + 4 // (vs + 1)]
            for tx in T.thread_binding(1, thread="threadIdx.x"):
                with T.block("out"):
                    B[0] = S[0]

    src = cuda_source(tree)
    assert src.count("__syncthreads();") == 2
    loop = src[src.index("for (int s"):]
    assert src.index("__syncthreads();") < src.index("for (int s")
    assert loop[:loop.index("\n  }\n")].rstrip().endswith("__syncthreads();")
    a = np.arange(8, dtype="float32")
    assert tdsl.interpret(tree, a)[0] == a.sum()
    assert tdsl.build(tree, target="cuda", emulate=True)(a)[0] == a.sum()


def test_serial_loop_around_kernels_is_refused_clearly():
    @T.prim_func
    def f(A: T.Buffer((8,), "float32")):
        for s in range(3):
            for tx in T.thread_binding(8, thread="threadIdx.x"):
                with T.block("step"):
                    vs, vt = T.axis.remap("SS", [s, tx])
                    A[vt] = A[vt] + T.float32(1)

    with pytest.raises(tdsl.TargetError, match="loop s is outside every kernel but contains thread-bound loops"):
        cuda_source(f)


# ----------------------------------------------------------------------------- buffer compaction

N = 64


@T.prim_func
def matmul_64(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"), C: T.Buffer((N, N), "float32")):
    for i, j, k in T.grid(N, N, N):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def _scheduled_matmul():
    sch = tdsl.Schedule(matmul_64)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    bi, ti, ii = sch.split(i, factors=[None, 8, 4])
    bj, tj, jj = sch.split(j, factors=[None, 8, 4])
    sch.reorder(bi, bj, ti, tj, k, ii, jj)
    for loop, axis in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"), (tj, "threadIdx.x")):
        sch.bind(loop, axis)
    cl = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cl, tj)
    sch.decompose_reduction(c, k)
    return sch


def test_local_accumulator_of_a_schedule_becomes_the_thread_tile():
    sch = _scheduled_matmul()
    # the schedule's C_local spans the whole 64 x 64 result; each thread only touches its 4 x 4 tile
    assert "C_local = T.alloc_buffer((64, 64)" in sch.func.script()
    src = cuda_source(sch)
    assert "float C_local[16];" in src
    assert "C_local[i_2 * 4 + j_2] = C_local[i_2 * 4 + j_2] + " in src
    a, b = (np.random.default_rng(3).random((N, N), dtype=np.float32) for _ in range(2))
    np.testing.assert_allclose(tdsl.interpret(sch.func, a, b), a @ b, rtol=1e-5)
    np.testing.assert_allclose(tdsl.build(sch, target="cuda", emulate=True)(a, b), a @ b, rtol=1e-5)


def test_compaction_keeps_values_that_flow_between_iterations():
    @T.prim_func
    def carry(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        acc = T.alloc_buffer((4, 8), "float32", scope="local")
        for tx in T.thread_binding(4, thread="threadIdx.x"):
            for j in range(8):
                with T.block("acc"):
                    vi, vj = T.axis.remap("SS", [tx, j])
                    acc[vi, vj] = A[vi, vj] + T.if_then_else(vj > 0, acc[vi, T.max(vj - 1, 0)], T.float32(0))
                    B[vi, vj] = acc[vi, vj]

    src = cuda_source(carry)
    # per thread one row (8 values), allocated outside the j loop that carries values through it
    assert "float acc[8];" in src
    assert src.index("float acc[8];") < src.index("for (int j")
    a = np.random.default_rng(0).random((4, 8), dtype=np.float32)
    np.testing.assert_allclose(tdsl.interpret(carry, a), np.cumsum(a, axis=1), rtol=1e-6)
    np.testing.assert_allclose(tdsl.build(carry, target="cuda", emulate=True)(a), np.cumsum(a, axis=1), rtol=1e-6)


def test_barrier_needed_inside_a_thread_dependent_branch_is_refused():
    @T.prim_func
    def f(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                if tx < 16:
                    with T.block("S"):
                        vi = T.axis.spatial(32, tx)
                        S[vi] = A[vi]
                    with T.block("B"):
                        vi = T.axis.spatial(32, tx)
                        B[vi] = S[15 - vi]

    with pytest.raises(tdsl.TargetError, match=r"shared memory \(S\) inside the branch `if tx < 16`"):
        cuda_source(f)


def test_function_level_let_reaches_the_kernels():
    @T.prim_func
    def scaled(A: T.Buffer(("n",), "float32"), s: T.float32):
        half = n // 2
        for bx in T.thread_binding(half, thread="blockIdx.x"):
            for tx in T.thread_binding(2, thread="threadIdx.x"):
                with T.block("A"):
                    vi = T.axis.spatial(n, bx * 2 + tx)
                    A[vi] = A[vi] * s

    from tdsl.backends.cuda.kernel import evaluate

    (k,) = lower_cuda(scaled).kernels
    n = scaled.params[0].shape[0]
    assert evaluate(k.dims("blockIdx")[0], {n: 10}) == 5
    # A's size is symbolic, so its index arithmetic is 64-bit
    assert "A[(long long)bx * 2LL + (long long)tx] = A[(long long)bx * 2LL + (long long)tx] * s;" in cuda_source(scaled)
    ck.emulate_matches_interpreter(scaled, dims={"n": 10}, scalars={"s": 1.5})


# ----------------------------------------------------------------------------- compaction across sibling nests

def _local_accesses_in_bounds(plan) -> dict[str, tuple[int, ...]]:
    """Every access of a kernel-local buffer stays inside it for every thread and loop value
    (relaxed over the loops and the launch); returns the local buffers' shapes."""
    from tdsl.arith import relax
    from tdsl.ir import IntImm, IRVisitor, Range

    shapes: dict[str, tuple[int, ...]] = {}
    for spec in plan.kernels:
        ranges = {v: Range(IntImm(0, v.dtype), spec.launch[t]) for t, v in spec.tag_vars.items()}

        class _Check(IRVisitor):
            def __init__(self, ranges):
                self.ranges = ranges

            def visit_For(self, op):
                self.ranges[op.loop_var] = Range(op.min, op.extent)
                self.generic_visit(op)

            def visit_Allocate(self, op):
                if op.buffer.scope == "local":
                    shapes[op.buffer.name] = tuple(int(s.value) for s in op.buffer.shape)
                self.generic_visit(op)

            def _check(self, op):
                if op.buffer.scope == "local":
                    for idx, size in zip(op.indices, op.buffer.shape):
                        lo, hi = relax(idx, self.ranges)
                        assert 0 <= lo.value and hi.value < size.value, (op.buffer.name, idx)

            def visit_BufferLoad(self, op):
                self._check(op)
                self.generic_visit(op)

            def visit_BufferStore(self, op):
                self._check(op)
                self.generic_visit(op)

        _Check(ranges).visit(spec.body)
    return shapes


def test_local_accumulator_shared_by_sibling_thread_nests_becomes_the_thread_tile():
    # the tutorial's schedule: C_local is written in the compute nest and read in a sibling
    # write-back nest with its own threadIdx loops; one thread touches the same 4 x 4 tile in both
    sch = tdsl.Schedule(matmul_64)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    bi, ti, ii = sch.split(i, factors=[None, 8, 4])
    bj, tj, jj = sch.split(j, factors=[None, 8, 4])
    sch.reorder(bi, bj, ti, tj, k, ii, jj)
    for loop, axis in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"), (tj, "threadIdx.x")):
        sch.bind(loop, axis)
    cl = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cl, bj)
    wi, wj = sch.get_loops(cl)[-2:]
    wy, wi_in = sch.split(wi, factors=[8, 4])
    wx, wj_in = sch.split(wj, factors=[8, 4])
    sch.reorder(wy, wx, wi_in, wj_in)
    sch.bind(wy, "threadIdx.y")
    sch.bind(wx, "threadIdx.x")
    sch.decompose_reduction(c, k)
    assert _local_accesses_in_bounds(lower_cuda(sch)) == {"C_local": (16,)}  # flattened 4 x 4
    src = cuda_source(sch)
    assert "float C_local[16];" in src and "C_local[1024]" not in src
    # both nests address the tile relative to the same thread's corner
    assert "C_local[i_2 * 4 + j_2] = C_local[i_2 * 4 + j_2] + " in src
    assert "= C_local[ax0_1_1 * 4 + ax1_1_1];" in src
    tdsl.build(sch, target="cuda", arch="sm_90")
    ck.emulate_matches_interpreter(sch, tol=1e-4)


def test_sibling_nests_reading_other_threads_local_elements_are_refused():
    @T.prim_func
    def f(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        acc = T.alloc_buffer((64,), "float32", scope="local")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for j in range(4):
                    with T.block("w"):
                        v = T.axis.spatial(64, tx * 4 + j)
                        acc[v] = A[v]
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for j in range(4):
                    with T.block("r"):
                        v = T.axis.spatial(64, j * 16 + tx)
                        B[v] = acc[v]

    # thread t writes acc[4t:4t+4] but reads acc[t::16], which other threads wrote in their own
    # private copies: it cannot be correct on a GPU (this used to compile to `float acc[64];`
    # per thread and silently read elements nobody wrote)
    with pytest.raises(tdsl.ScheduleError) as info:
        cuda_source(f)
    msg = str(info.value)
    assert 'block "r"' in msg and '"acc"' in msg and 'block "w"' in msg and "private" in msg
    assert 'set_scope(sch.get_block("w"), "acc", "shared")' in msg
