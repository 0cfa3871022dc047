"""TVM's ldmatrix / mma.sync tensorize schedules, run as TVM writes them: fragments in scope
"warp" as (lane, register) tiles laid out by transform_layout, TVM's intrinsic names
(apache/tvm tests/python/s_tir/schedule/test_tir_schedule_tensorize_ldmatrix_mma_numeric.py,
and the schedule itself, python/tvm/testing/tir.py's mma_schedule).

`mma_schedule` is TVM's, line for line, but for its two `tvm.` names (module and Schedule);
the imports name tdsl's modules. TVM's te.create_prim_func(matmul(...)) is written out as the
TVMScript it gives (block "C" reads A, then B). Each schedule is checked against numpy through
the interpreter and a CPU build (the scheduled function computes through the intrinsics'
descriptions) and built for CUDA in the emulator, at a size a CPU runs quickly (factors with the structure of
TVM's: 4 warps, 2 x 2 tiles each); with NVRTC, TVM's own factors at TVM's 4096 x 4096 x 4096
are built for sm_80 and the SASS read back.
"""
import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.errors import ScheduleError, TargetError
from tdsl.intrinsics.cuda_mma import (
    LDMATRIX_f16_A_INTRIN,
    LDMATRIX_f16_B_INTRIN,
    LDMATRIX_f16_B_TRANS_INTRIN,
    LDMATRIX_i8_A_INTRIN,
    LDMATRIX_i8_B_INTRIN,
    LDMATRIX_i8_B_TRANS_INTRIN,
    MMA_f16f16f16_INTRIN,
    MMA_f16f16f16_TRANS_B_INTRIN,
    MMA_f16f16f32_INTRIN,
    MMA_f16f16f32_TRANS_B_INTRIN,
    MMA_fill_16x16_f16_INTRIN,
    MMA_fill_16x16_f32_INTRIN,
    MMA_fill_16x16_i32_INTRIN,
    MMA_i8i8i32_INTRIN,
    MMA_i8i8i32_TRANS_B_INTRIN,
    MMA_store_16x16_f16_global_INTRIN,
    MMA_store_16x16_f32_global_INTRIN,
    MMA_store_16x16_i32_global_INTRIN,
    ldmatrix_32x8_to_shared_16x16_layout,
    shared_16x16_to_ldmatrix_32x8_layout,
    shared_16x32_to_ldmatrix_32x16_layout,
    shared_32x16_to_ldmatrix_32x16_layout,
)


def matmul(m, n, k, in_dtype, out_dtype, b_transposed):
    """TVM's te GEMM, C[i, j] = sum_k cast(A[i, k]) * cast(B[k, j]) (B[j, k] transposed), as
    te.create_prim_func writes it."""
    if b_transposed:
        @T.prim_func
        def main_t(A: T.Buffer((m, k), in_dtype), B: T.Buffer((n, k), in_dtype), C: T.Buffer((m, n), out_dtype)):
            for i, j, kk in T.grid(m, n, k):
                with T.sblock("C"):
                    v_i, v_j, v_k = T.axis.remap("SSR", [i, j, kk])
                    T.reads(A[v_i, v_k], B[v_j, v_k])
                    T.writes(C[v_i, v_j])
                    with T.init():
                        C[v_i, v_j] = T.cast(0, out_dtype)
                    C[v_i, v_j] = C[v_i, v_j] + T.cast(A[v_i, v_k], out_dtype) * T.cast(B[v_j, v_k], out_dtype)
        return main_t

    @T.prim_func
    def main(A: T.Buffer((m, k), in_dtype), B: T.Buffer((k, n), in_dtype), C: T.Buffer((m, n), out_dtype)):
        for i, j, kk in T.grid(m, n, k):
            with T.sblock("C"):
                v_i, v_j, v_k = T.axis.remap("SSR", [i, j, kk])
                T.reads(A[v_i, v_k], B[v_k, v_j])
                T.writes(C[v_i, v_j])
                with T.init():
                    C[v_i, v_j] = T.cast(0, out_dtype)
                C[v_i, v_j] = C[v_i, v_j] + T.cast(A[v_i, v_k], out_dtype) * T.cast(B[v_k, v_j], out_dtype)
    return main


# ---- TVM's mma_schedule (python/tvm/testing/tir.py), unchanged but for tvm.IRModule / tvm.s_tir.Schedule
def mma_schedule(
    workload,
    k_inner,
    in_dtype,
    b_transposed,
    i_factors,
    j_factors,
    k_factors,
    index_map_A,
    index_map_B,
    index_map_C,
    ldmatrix_a_intrin,
    ldmatrix_b_intrin,
    mma_intrin,
    mma_fill_intrin,
    mma_store_intrin,
    shared_scope="shared",
):
    """Create a tensorized schedule for GEMM with MMA intrinsics."""
    ir_module = tdsl.IRModule({"main": workload})
    sch = tdsl.Schedule(ir_module)

    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    i, i_tc = sch.split(i, factors=[None, 16])
    j, j_tc = sch.split(j, factors=[None, 16])
    k, k_tc = sch.split(k, factors=[None, k_inner])

    sch.reorder(i, j, k, i_tc, j_tc, k_tc)

    block_inner = sch.blockize(i_tc)
    block_outer, block_inner = block_inner, block

    num_ty = i_factors[2] * j_factors[2]

    i0, i1, i2, i3, i4 = sch.split(i, factors=i_factors)
    j0, j1, j2, j3, j4 = sch.split(j, factors=j_factors)
    k0, k1, k2 = sch.split(k, k_factors)

    sch.reorder(i0, j0, i1, j1, j2, i2, k0, k1, i3, j3, k2, i4, j4)

    block_idx = sch.fuse(i0, j0)
    block_idy = sch.fuse(i1, j1)
    thread_idy = sch.fuse(j2, i2)
    sch.bind(block_idx, "blockIdx.x")
    sch.bind(block_idy, "blockIdx.y")
    sch.bind(thread_idy, "threadIdx.y")

    def fetch_to_shared(block, idx, ndim):
        block_read = sch.cache_read(block, idx, shared_scope)
        sch.compute_at(block_read, k0)
        vector_size = 16 if in_dtype == "int8" else 8
        warp_size = 32
        fused = sch.fuse(*sch.get_loops(block_read)[-ndim:])
        _, f_1, f_2, f_3 = sch.split(fused, factors=[None, num_ty, warp_size, vector_size])
        sch.bind(f_2, "threadIdx.x")
        sch.bind(f_1, "threadIdx.y")
        sch.vectorize(f_3)
        offset = 8 if in_dtype == "float16" else 16
        sch.storage_align(block_read, 0, axis=-2, factor=32, offset=offset)

        return block_read

    fetch_to_shared(block_outer, 0, 2)
    fetch_to_shared(block_outer, 1, 2)

    A_warp = sch.cache_read(block_outer, 0, "warp")
    B_warp = sch.cache_read(block_outer, 1, "warp")

    sch.compute_at(A_warp, k1)
    sch.compute_at(B_warp, k1)

    C_warp = sch.cache_write(block_outer, 0, "warp")
    sch.reverse_compute_at(C_warp, thread_idy)

    ii, jj = sch.get_loops(C_warp)[-2:]
    io, ii = sch.split(ii, factors=[None, 16])
    jo, ji = sch.split(jj, factors=[None, 16])
    sch.reorder(io, jo, ii, ji)

    sch.decompose_reduction(block_outer, sch.get_loops(block_outer)[3])
    block_init_c = sch.get_sblock("C_init")

    def tile_wmma_fragment(block_read, height, width):
        i, j = sch.get_loops(block_read)[-2:]
        i0, i1 = sch.split(i, factors=[None, height])
        j0, j1 = sch.split(j, factors=[None, width])
        sch.reorder(i0, j0, i1, j1)
        return i1

    loop_a = tile_wmma_fragment(A_warp, 16, k_inner)

    if b_transposed:  # noqa: SIM108 - TVM's code as written
        loop_b = tile_wmma_fragment(B_warp, 16, k_inner)
    else:
        loop_b = tile_wmma_fragment(B_warp, k_inner, 16)

    sch.transform_layout(A_warp, ("write", 0), index_map_A)
    sch.transform_layout(B_warp, ("write", 0), index_map_B)
    sch.transform_layout(C_warp, ("read", 0), index_map_C)

    sch.tensorize(loop_a, ldmatrix_a_intrin)
    sch.tensorize(loop_b, ldmatrix_b_intrin)
    sch.tensorize(sch.get_loops(block_inner)[-3], mma_intrin)
    sch.tensorize(sch.get_loops(block_init_c)[-2], mma_fill_intrin)
    sch.tensorize(sch.get_loops(C_warp)[-2], mma_store_intrin)

    return sch
# ---- end of TVM's code


# TVM's index maps, from its test functions
def index_map(i, j):
    return (
        i // 16,
        j // 16,
        *shared_16x16_to_ldmatrix_32x8_layout(i % 16, j % 16),
    )


def index_map_A(i, j):
    return (
        i // 16,
        j // 32,
        *shared_16x32_to_ldmatrix_32x16_layout(i % 16, j % 32),
    )


def index_map_B(i, j):
    return (
        i // 32,
        j // 16,
        *shared_32x16_to_ldmatrix_32x16_layout(i % 32, j % 16),
    )


index_map_C = index_map

F16 = {False: (LDMATRIX_f16_A_INTRIN, LDMATRIX_f16_B_INTRIN), True: (LDMATRIX_f16_A_INTRIN, LDMATRIX_f16_B_TRANS_INTRIN)}
SMALL = 64        # M = N = K for the emulator
# (i, j, k factors) of TVM's tests at 4096, and with the same structure at 64 (4 warps of 2 x 2 tiles)
TVM_F16F16F32 = ([4, 8, 2, 4, 1], [1, 64, 2, 1, 2], [128, 2, 1])
TVM_F16F16F16 = ([16, 2, 1, 4, 2], [16, 2, 2, 1, 4], [128, 2, 1])
TVM_I8 = ([1, 32, 1, 4, 2], [8, 4, 4, 2, 1], [32, 2, 2])
SMALL_F16 = ([1, 1, 2, 2, 1], [1, 1, 2, 1, 2], [2, 2, 1])
SMALL_I8 = ([1, 1, 2, 1, 2], [1, 1, 2, 2, 1], [1, 1, 2])


def f16_schedule(n, out_dtype, b_transposed, factors):
    mma, fill, store = {
        ("float32", False): (MMA_f16f16f32_INTRIN, MMA_fill_16x16_f32_INTRIN, MMA_store_16x16_f32_global_INTRIN),
        ("float32", True): (MMA_f16f16f32_TRANS_B_INTRIN, MMA_fill_16x16_f32_INTRIN, MMA_store_16x16_f32_global_INTRIN),
        ("float16", False): (MMA_f16f16f16_INTRIN, MMA_fill_16x16_f16_INTRIN, MMA_store_16x16_f16_global_INTRIN),
        ("float16", True): (MMA_f16f16f16_TRANS_B_INTRIN, MMA_fill_16x16_f16_INTRIN, MMA_store_16x16_f16_global_INTRIN),
    }[out_dtype, b_transposed]
    return mma_schedule(matmul(n, n, n, "float16", out_dtype, b_transposed), 16, "float16", b_transposed,
                        *factors, index_map, index_map, index_map, *F16[b_transposed], mma, fill, store)


def i8_schedule(n, b_transposed, factors):
    if b_transposed:
        ld_b, mma, map_b = LDMATRIX_i8_B_TRANS_INTRIN, MMA_i8i8i32_TRANS_B_INTRIN, index_map_A
    else:
        ld_b, mma, map_b = LDMATRIX_i8_B_INTRIN, MMA_i8i8i32_INTRIN, index_map_B
    return mma_schedule(matmul(n, n, n, "int8", "int32", b_transposed), 32, "int8", b_transposed, *factors,
                        index_map_A, map_b, index_map_C, LDMATRIX_i8_A_INTRIN, ld_b, mma, MMA_fill_16x16_i32_INTRIN,
                        MMA_store_16x16_i32_global_INTRIN)


def inputs(n, in_dtype, b_transposed, seed=0):
    rng = np.random.default_rng(seed)
    if in_dtype == "float16":
        a, b = rng.normal(size=(n, n)).astype("float16"), rng.normal(size=(n, n)).astype("float16")
    else:
        a, b = rng.integers(-128, 128, (n, n)).astype("int8"), rng.integers(-128, 128, (n, n)).astype("int8")
    wide = "float64" if in_dtype == "float16" else "int64"
    ref = a.astype(wide) @ (b.T if b_transposed else b).astype(wide)
    return a, b, ref


def check(sch, in_dtype, out_dtype, b_transposed, tol):
    a, b, ref = inputs(SMALL, in_dtype, b_transposed)
    got = np.zeros((SMALL, SMALL), out_dtype)
    tdsl.interpret(sch.func, a, b, got)
    np.testing.assert_allclose(got.astype("float64"), ref, rtol=tol, atol=tol)
    on_cpu = np.zeros((SMALL, SMALL), out_dtype)     # built for the CPU, the descriptions compute
    tdsl.build(sch)(a, b, on_cpu)
    np.testing.assert_allclose(on_cpu.astype("float64"), ref, rtol=tol, atol=tol)
    kernel = tdsl.build(sch, target="cuda -arch=sm_80", emulate=True)
    out = np.zeros((SMALL, SMALL), out_dtype)
    kernel(a, b, out)
    np.testing.assert_allclose(out.astype("float64"), ref, rtol=tol, atol=tol)
    return kernel


@pytest.mark.parametrize("b_transposed", [False, True])
def test_f16f16f32_m16n16k16(b_transposed):
    sch = f16_schedule(SMALL, "float32", b_transposed, SMALL_F16)
    kernel = check(sch, "float16", "float32", b_transposed, 1e-4)
    # the "warp" tiles are each lane's registers: 2 x 2 accumulator tiles of 8 floats, and one
    # k step's 2 A and 2 B tiles of 8 halves
    assert "float C_warp[32];" in kernel.source
    assert "half A_shared_warp[16];" in kernel.source and "half B_shared_warp[16];" in kernel.source
    # TVM's storage_align padding keeps ldmatrix free of bank conflicts; the fetch is vectorized
    assert {c.buffer: c.worst for c in kernel.stats.shared} == {"A_shared": 1, "B_shared": 1}
    assert kernel.notes == []


@pytest.mark.parametrize("b_transposed", [False, True])
def test_f16f16f16_m16n16k16(b_transposed):
    sch = f16_schedule(SMALL, "float16", b_transposed, SMALL_F16)
    check(sch, "float16", "float16", b_transposed, 2e-2)    # fp16 accumulators: rounded to fp16


@pytest.mark.parametrize("b_transposed", [False, True])
def test_i8i8i32_m16n16k32(b_transposed):
    sch = i8_schedule(SMALL, b_transposed, SMALL_I8)
    kernel = check(sch, "int8", "int32", b_transposed, 0)
    assert "signed char A_shared_warp[" in kernel.source


def test_layouts_are_the_ptx_fragment_layouts():
    # A (and the accumulator) of mma.m16n8k16: a_i of lane l holds row l/4 + 8 ((i/2) % 2), column
    # 2 (l % 4) + i % 2 + 8 (i / 4); m16n8k32 A and k-major B likewise (PTX ISA, mma fragments)
    for r in range(16):
        for c in range(16):
            lane, i = shared_16x16_to_ldmatrix_32x8_layout(r, c)
            assert (lane // 4 + 8 * ((i // 2) % 2), 2 * (lane % 4) + i % 2 + 8 * (i // 4)) == (r, c)
            assert ldmatrix_32x8_to_shared_16x16_layout(lane, i) == (r, c)
        for c in range(32):
            lane, i = shared_16x32_to_ldmatrix_32x16_layout(r, c)
            assert (lane // 4 + 8 * ((i // 4) % 2), 4 * (lane % 4) + i % 4 + 16 * (i // 8)) == (r, c)
            lane, i = shared_32x16_to_ldmatrix_32x16_layout(c, r)   # (k, n)
            assert (4 * (lane % 4) + i % 4 + 16 * ((i // 4) % 2), lane // 4 + 8 * (i // 8)) == (c, r)


def test_the_intrinsics_have_a_fragment_scope_form_too():
    # the same names in tdsl's own style (scopes m16n8k16.*) still tensorize; the warp forms are
    # registered as name + ".warp" and chosen by the scopes the code uses
    sch = f16_schedule(SMALL, "float32", False, SMALL_F16)
    text = sch.func.script()
    assert "'tdsl.tensor_intrin': 'mma_ldmatrix_f16_a.warp'" in text
    assert "'tdsl.tensor_intrin': 'mma_i8i8i32'" not in text
    assert tdsl.TensorIntrin.get("mma_ldmatrix_f16_a").scopes() == {"shared", "m16n8k16.matrixA"}
    assert tdsl.TensorIntrin.get("mma_ldmatrix_f16_a.warp").scopes() == {"shared", "warp"}


# ---- misuse -------------------------------------------------------------------------------

@T.prim_func
def through_warp(A: T.Buffer((32, 8), "float32"), B: T.Buffer((32, 8), "float32")):
    W = T.alloc_buffer((32, 8), "float32", scope="warp")
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        for j in range(8):
            with T.block("w"):
                vi, vj = T.axis.remap("SS", [tx, j])
                W[vi, vj] = A[vi, vj]
        for j in range(8):
            with T.block("b"):
                vi, vj = T.axis.remap("SS", [tx, j])
                B[vi, vj] = W[vi, vj]


@T.prim_func
def from_the_next_lane(A: T.Buffer((32, 8), "float32"), B: T.Buffer((32, 8), "float32")):
    W = T.alloc_buffer((32, 8), "float32", scope="warp")
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        for j in range(8):
            with T.block("w"):
                vi, vj = T.axis.remap("SS", [tx, j])
                W[vi, vj] = A[vi, vj]
        for j in range(8):
            with T.block("b"):
                vi, vj = T.axis.remap("SS", [tx, j])
                B[vi, vj] = W[(vi + 1) % 32, vj]


@T.prim_func
def untransformed(A: T.Buffer((64, 8), "float32"), B: T.Buffer((64, 8), "float32")):
    W = T.alloc_buffer((64, 8), "float32", scope="warp")
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        for j in range(8):
            with T.block("w"):
                vi, vj = T.axis.remap("SS", [tx, j])
                W[vi, vj] = A[vi, vj]
        for j in range(8):
            with T.block("b"):
                vi, vj = T.axis.remap("SS", [tx, j])
                B[vi, vj] = W[vi, vj]


def test_code_at_the_threads_own_lane_keeps_its_registers():
    a = np.arange(256, dtype="float32").reshape(32, 8)
    kernel = tdsl.build(through_warp, target="cuda", emulate=True)
    out = np.zeros_like(a)
    kernel(a, out)
    np.testing.assert_array_equal(out, a)
    assert "float W[8];" in kernel.source


def test_a_lane_index_other_than_the_threads_lane_is_refused():
    with pytest.raises(TargetError, match=r"'warp' buffer W is read at lane index .*thread's own lane.*threadIdx.x "
                                          r"with extent 32"):
        tdsl.lower(from_the_next_lane, target="cuda")


def test_a_warp_buffer_without_its_lane_axis_is_refused():
    with pytest.raises(TargetError, match=r"'warp' buffer W has shape \(64, 8\), without the 32 lanes.*"
                                          r"shared_16x16_to_ldmatrix_32x8_layout"):
        tdsl.lower(untransformed, target="cuda")


def test_tensorizing_a_warp_tile_in_the_wrong_layout_is_refused():
    def transposed(i, j):   # each tile laid out as its transpose: not what ldmatrix of A gives
        return (i // 16, j // 16, *shared_16x16_to_ldmatrix_32x8_layout(j % 16, i % 16))

    with pytest.raises(ScheduleError, match="does not match the description of 'mma_ldmatrix_f16_a'"):
        mma_schedule(matmul(SMALL, SMALL, SMALL, "float16", "float32", False), 16, "float16", False, *SMALL_F16,
                     transposed, index_map, index_map, LDMATRIX_f16_A_INTRIN, LDMATRIX_f16_B_INTRIN,
                     MMA_f16f16f32_INTRIN, MMA_fill_16x16_f32_INTRIN, MMA_store_16x16_f32_global_INTRIN)


def test_meta_var_binds_what_a_python_function_computes():
    from tdsl.script import parse  # noqa: F401  (the decorator below parses the source)

    @T.prim_func
    def ldmatrix_a_desc(A: T.Buffer((16, 16), "float16", scope="shared"),
                        C: T.Buffer((32, 8), "float16", scope="warp")):
        for ax0, ax1 in T.grid(16, 16):
            with T.block("A_shared_warp"):
                v0, v1 = T.axis.remap("SS", [ax0, ax1])
                thread_id, local_id = T.meta_var(shared_16x16_to_ldmatrix_32x8_layout(v0, v1))
                C[thread_id, local_id] = A[v0, v1]
    a = np.arange(256).astype("float16").reshape(16, 16)
    w = np.zeros((32, 8), "float16")
    tdsl.interpret(ldmatrix_a_desc, a, w)
    for lane in range(32):
        for i in range(8):
            assert w[lane, i] == a[ldmatrix_32x8_to_shared_16x16_layout(lane, i)]


# ---- NVRTC: TVM's own sizes and factors, built for sm_80 -----------------------------------

def _opcodes(sch):
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda.stats import opcodes

    ops = opcodes(tdsl.build(sch, target="cuda", arch="sm_80").cubin)
    if ops is None:
        pytest.skip("cuobjdump not installed (the nvidia-cuda-cuobjdump wheel, in the test extra: "
                    "pip install -e \".[test]\")")
    return ops


@pytest.mark.parametrize("b_transposed", [False, True])
def test_sass_of_tvms_f16f16f32_schedule_at_4096(b_transposed):
    ops = _opcodes(f16_schedule(4096, "float32", b_transposed, TVM_F16F16F32))
    assert ops["HMMA.16816.F32"] > 0 and ops["LDSM.16.M88.4"] > 0, dict(ops)
    if not b_transposed:
        assert ops["LDSM.16.MT88.4"] > 0, dict(ops)
    assert not [o for o in ops if o.startswith(("LDL", "STL"))], dict(ops)


def test_sass_of_tvms_f16f16f16_and_i8_schedules_at_4096():
    ops = _opcodes(f16_schedule(4096, "float16", False, TVM_F16F16F16))
    assert ops["HMMA.16816.F16"] > 0 and ops["LDSM.16.M88.4"] > 0, dict(ops)
    ops = _opcodes(i8_schedule(4096, True, TVM_I8))
    assert ops["IMMA.16832.S8.S8"] > 0 and ops["LDSM.16.M88.4"] > 0, dict(ops)


@T.prim_func
def b_tile_read_by_code(A: T.Buffer((16, 16), "float16"), B: T.Buffer((32, 8), "float16")):
    A_sh = T.alloc_buffer((16, 16), "float16", scope="shared")
    W = T.alloc_buffer((32, 8), "float16", scope="warp")
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            for e in range(8):
                with T.block("A_sh"):
                    v0 = T.axis.spatial(16, (tx * 8 + e) // 16)
                    v1 = T.axis.spatial(16, (tx * 8 + e) % 16)
                    A_sh[v0, v1] = A[v0, v1]
        for ax0, ax1 in T.grid(16, 16):
            with T.block("W"):
                v0, v1 = T.axis.remap("SS", [ax0, ax1])
                W[v0 % 8 * 4 + v1 % 8 // 2, v1 // 8 * 4 + v0 // 8 * 2 + v1 % 2] = A_sh[v0, v1]
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            for e in range(8):
                with T.block("B"):
                    vt, ve = T.axis.remap("SS", [tx, e])
                    B[vt, ve] = W[vt, ve]


def test_code_that_reads_an_mma_b_tile_is_refused():
    # an ldmatrix of B fills the registers as mma.sync wants B, not where the description puts
    # each element: code reading the tile at its own lane would read other elements
    a = np.arange(256).astype("float16").reshape(16, 16)
    want = np.array([[a[ldmatrix_32x8_to_shared_16x16_layout(lane, i)] for i in range(8)] for lane in range(32)])
    sch = tdsl.Schedule(b_tile_read_by_code)
    sch.tensorize(sch.get_loops(sch.get_block("W"))[-2], LDMATRIX_f16_B_INTRIN)
    b = np.zeros((32, 8), "float16")
    tdsl.interpret(sch.func, a, b)      # through the description
    np.testing.assert_array_equal(b, want)
    with pytest.raises(TargetError, match=r"'warp' buffer W is an mma B tile \(tdsl_warp_ldmatrix_b\) and is "
                                          r"also read or written by the kernel's own code"):
        tdsl.lower(sch, target="cuda")
    sch = tdsl.Schedule(b_tile_read_by_code)   # the same tile loaded as an A operand: the registers are
    sch.tensorize(sch.get_loops(sch.get_block("W"))[-2], LDMATRIX_f16_A_INTRIN)   # where it says
    b = np.zeros((32, 8), "float16")
    tdsl.build(sch, target="cuda", emulate=True)(a, b)
    np.testing.assert_array_equal(b, want)


# TVM's own intrinsic descriptions (python/tvm/s_tir/tensor_intrin/cuda.py, get_ldmatrix_intrin
# and get_mma_intrin for fp16 / fp32), verbatim but for the cast (TVM's Cast via a closure helper)
# and the index maps' names (index_map_A / _B are the int8 test's maps here)
WARP_SIZE, M_DIM, N_DIM, k_dim, local_size, local_size_out = 32, 16, 16, 16, 8, 8
smem_tile_row = smem_tile_col = offset_factor = 16
dtype, shared_scope, a_transposed, b_transposed = "float16", "shared", False, False
tvm_map_A = tvm_map_B = tvm_map_C = shared_16x16_to_ldmatrix_32x8_layout


def swap_if_flag(i, j, flag):
    return (j, i) if flag else (i, j)


@T.prim_func(s_tir=True)
def ldmatrix_desc(warp_handle: T.handle, shared_handle: T.handle) -> None:
    shared = T.match_buffer(
        shared_handle,
        (smem_tile_row, smem_tile_col),
        dtype,
        align=64,
        offset_factor=offset_factor,
        scope=shared_scope,
    )
    warp = T.match_buffer(
        warp_handle,
        (WARP_SIZE, local_size),
        dtype,
        align=64,
        offset_factor=offset_factor,
        scope="warp",
    )

    with T.sblock("root"):
        T.reads(shared[0:smem_tile_row, 0:smem_tile_col])
        T.writes(warp[0:WARP_SIZE, 0:local_size])

        for ax0, ax1 in T.grid(smem_tile_row, smem_tile_col):
            with T.sblock("shared_warp"):
                v0, v1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(shared[v0, v1])

                thread_id, local_id = T.meta_var(tvm_map_A(v0, v1))
                T.writes(warp[thread_id, local_id])
                warp[thread_id, local_id] = shared[v0, v1]


@T.prim_func(s_tir=True)
def mma_sync_desc(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, (WARP_SIZE, local_size), "float16", align=64, offset_factor=16, scope="warp")
    B = T.match_buffer(b, (WARP_SIZE, local_size), "float16", align=64, offset_factor=16, scope="warp")
    C = T.match_buffer(c, (WARP_SIZE, local_size_out), "float32", align=64, offset_factor=16, scope="warp")

    with T.sblock("root"):
        T.reads(
            C[0:WARP_SIZE, 0:local_size_out],
            A[0:WARP_SIZE, 0:local_size],
            B[0:WARP_SIZE, 0:local_size],
        )
        T.writes(C[0:WARP_SIZE, 0:local_size_out])

        for i, j, k in T.grid(M_DIM, N_DIM, k_dim):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                a_row_ind, a_col_ind = T.meta_var(swap_if_flag(vi, vk, a_transposed))
                b_row_ind, b_col_ind = T.meta_var(swap_if_flag(vk, vj, b_transposed))

                thread_id_C, local_id_C = T.meta_var(tvm_map_C(vi, vj))
                thread_id_A, local_id_A = T.meta_var(tvm_map_A(a_row_ind, a_col_ind))
                thread_id_B, local_id_B = T.meta_var(tvm_map_B(b_row_ind, b_col_ind))

                T.reads(
                    C[thread_id_C, local_id_C],
                    A[thread_id_A, local_id_A],
                    B[thread_id_B, local_id_B],
                )
                T.writes(C[thread_id_C, local_id_C])

                C[thread_id_C, local_id_C] += T.cast(A[thread_id_A, local_id_A], "float32") * T.cast(
                    B[thread_id_B, local_id_B], "float32")


def test_tvms_intrinsic_descriptions_parse_and_compute_what_tdsls_do():
    rng = np.random.default_rng(3)
    s = rng.normal(size=(16, 16)).astype("float16")
    w_tvm, w_tdsl = np.zeros((32, 8), "float16"), np.zeros((32, 8), "float16")
    tdsl.interpret(ldmatrix_desc, w_tvm, s)
    tdsl.interpret(tdsl.TensorIntrin.get(LDMATRIX_f16_A_INTRIN + ".warp").desc, s, w_tdsl)
    np.testing.assert_array_equal(w_tvm, w_tdsl)
    a, b = rng.normal(size=(32, 8)).astype("float16"), rng.normal(size=(32, 8)).astype("float16")
    c_tvm = rng.normal(size=(32, 8)).astype("float32")
    c_tdsl = c_tvm.copy()
    tdsl.interpret(mma_sync_desc, a, b, c_tvm)
    tdsl.interpret(tdsl.TensorIntrin.get(MMA_f16f16f32_INTRIN + ".warp").desc, a, b, c_tdsl)
    np.testing.assert_allclose(c_tvm, c_tdsl, rtol=1e-6, atol=1e-6)


def test_meta_var_unpacking_the_wrong_number_of_values_is_refused():
    from tdsl.errors import ScriptError

    with pytest.raises(ScriptError, match=r"T.meta_var gives 2 values to unpack into 3 names"):
        @T.prim_func
        def bad(A: T.Buffer((16, 16), "float16"), W: T.Buffer((32, 8), "float16")):
            for ax0, ax1 in T.grid(16, 16):
                with T.block("w"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax1])
                    t, e, x = T.meta_var(shared_16x16_to_ldmatrix_32x8_layout(v0, v1))
                    W[t, e] = A[v0, v1]
