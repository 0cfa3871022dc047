"""Kernels for the software-pipelining and cp.async tests: a hand-scheduled shared-memory GEMM
(fp32 SIMT, float4 copies) and the small staged kernels of TVM's InjectSoftwarePipeline tests
(tests/python/tir-transform/test_tir_transform_inject_software_pipeline.py in apache/tvm),
rewritten for tdsl (a blockIdx loop of extent 1 around the thread loop: a kernel starts at an
outermost bound loop)."""
import numpy as np

from tdsl.script import T


def vec_gemm(m=64, n=64, k=64, stage=(0, 0, 1), order=None, async_stages=(0,)):
    """C = A @ B, 32x32 block tiles, 16-wide k tiles staged in shared memory with float4 copies
    (each of the 8x8 threads moves two 16-byte pieces of A and of B), 4x4 results per thread."""
    ann = {"software_pipeline_stage": list(stage)}
    if order is not None:
        ann["software_pipeline_order"] = list(order)
    if async_stages:
        ann["software_pipeline_async_stages"] = list(async_stages)

    @T.prim_func
    def gemm(A: T.Buffer((m, k), "float32"), B: T.Buffer((k, n), "float32"), C: T.Buffer((m, n), "float32")):
        A_sh = T.alloc_buffer((32, 16), "float32", scope="shared")
        B_sh = T.alloc_buffer((16, 32), "float32", scope="shared")
        C_loc = T.alloc_buffer((4, 4), "float32", scope="local")
        for by in T.thread_binding(m // 32, thread="blockIdx.y"):
            for bx in T.thread_binding(n // 32, thread="blockIdx.x"):
                for ty in T.thread_binding(8, thread="threadIdx.y"):
                    for tx in T.thread_binding(8, thread="threadIdx.x"):
                        for i, j in T.grid(4, 4):
                            with T.block("init"):
                                vi, vj = T.axis.remap("SS", [i, j])
                                C_loc[vi, vj] = T.float32(0)
                        for ko in T.serial(k // 16, annotations=ann):
                            for ty2 in T.thread_binding(8, thread="threadIdx.y"):
                                for tx2 in T.thread_binding(8, thread="threadIdx.x"):
                                    for q in range(2):
                                        for v in T.vectorized(4):
                                            with T.block("A_sh"):
                                                r = T.axis.spatial(32, (q * 64 + ty2 * 8 + tx2) // 4)
                                                c = T.axis.spatial(16, (q * 64 + ty2 * 8 + tx2) % 4 * 4 + v)
                                                vko, vby = T.axis.remap("SS", [ko, by])
                                                A_sh[r, c] = A[vby * 32 + r, vko * 16 + c]
                            for ty2 in T.thread_binding(8, thread="threadIdx.y"):
                                for tx2 in T.thread_binding(8, thread="threadIdx.x"):
                                    for q in range(2):
                                        for v in T.vectorized(4):
                                            with T.block("B_sh"):
                                                r = T.axis.spatial(16, (q * 64 + ty2 * 8 + tx2) // 8)
                                                c = T.axis.spatial(32, (q * 64 + ty2 * 8 + tx2) % 8 * 4 + v)
                                                vko, vbx = T.axis.remap("SS", [ko, bx])
                                                B_sh[r, c] = B[vko * 16 + r, vbx * 32 + c]
                            for kk, i, j in T.grid(16, 4, 4):
                                with T.block("C_loc"):
                                    vk, vi, vj, vty, vtx = T.axis.remap("SSSSS", [kk, i, j, ty, tx])
                                    C_loc[vi, vj] = C_loc[vi, vj] + A_sh[vi * 8 + vty, vk] * B_sh[vk, vj * 8 + vtx]
                        for i, j in T.grid(4, 4):
                            with T.block("C"):
                                vi = T.axis.spatial(m, by * 32 + i * 8 + ty)
                                vj = T.axis.spatial(n, bx * 32 + j * 8 + tx)
                                C[vi, vj] = C_loc[i, j]

    return gemm


def gemm_reference(a, b):
    return a @ b


def simple_compute(num_stages: int = 1, extent: int = 16, other_annotation: bool = False):
    """TVM's gen_simple_compute: B = A * 2 staged in shared memory, C = B + 1, stages [0, num_stages]."""
    ann = {"software_pipeline_stage": [0, num_stages], "software_pipeline_order": [0, 1]}
    if other_annotation:
        ann["pragma_loop_partition_hint"] = True

    @T.prim_func
    def simple(A: T.Buffer((16, extent), "float32"), C: T.Buffer((16, extent), "float32")):
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for i in T.serial(extent, annotations=ann):
                    with T.block("compute"):
                        vtx, vi = T.axis.remap("SS", [tx, i])
                        B = T.alloc_buffer((16, 1), "float32", scope="shared")
                        with T.block("B"):
                            B[vtx, 0] = A[vtx, vi] * T.float32(2)
                        with T.block("C"):
                            C[vtx, vi] = B[vtx, 0] + T.float32(1)

    return simple, lambda a: a * 2 + 1


def dynamic_compute():
    """TVM's dynamic_compute: the loop extent k is a symbolic dimension."""

    @T.prim_func
    def dynamic(a: T.handle, c: T.handle):
        k = T.int32()
        A = T.match_buffer(a, (16, k), "float32")
        C = T.match_buffer(c, (16, k), "float32")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for i in T.serial(k, annotations={"software_pipeline_stage": [0, 1],
                                                  "software_pipeline_order": [0, 1]}):
                    with T.block("compute"):
                        vtx, vi = T.axis.remap("SS", [tx, i])
                        B = T.alloc_buffer((16, 1), "float32", scope="shared")
                        with T.block("B"):
                            B[vtx, 0] = A[vtx, vi] * T.float32(2)
                        with T.block("C"):
                            C[vtx, vi] = B[vtx, 0] + T.float32(1)

    return dynamic, lambda a: a * 2 + 1


def three_stage_compute(stage=(0, 1, 2), order=(0, 1, 2)):
    """TVM's three_stage_compute: A -> B (shared) -> C (shared) -> D, one stage each."""
    ann = {"software_pipeline_stage": list(stage), "software_pipeline_order": list(order)}

    @T.prim_func
    def three(A: T.Buffer((16, 16), "float32"), D: T.Buffer((16, 16), "float32")):
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for i in T.serial(16, annotations=ann):
                    with T.block("compute"):
                        vtx, vi = T.axis.remap("SS", [tx, i])
                        B = T.alloc_buffer((16, 1), "float32", scope="shared")
                        C = T.alloc_buffer((16, 1), "float32", scope="shared")
                        with T.block("B"):
                            B[vtx, 0] = A[vtx, vi] * T.float32(2)
                        with T.block("C"):
                            C[vtx, 0] = B[vtx, 0] + T.float32(2)
                        with T.block("D"):
                            D[vtx, vi] = C[vtx, 0] + T.float32(1)

    return three, lambda a: (a * 2 + 2) + 1


def dag_interleaving():
    """TVM's dag_interleaving: two producer chains interleaved by software_pipeline_order."""

    @T.prim_func
    def dag(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for i in T.serial(16, annotations={"software_pipeline_stage": [0, 0, 0, 0, 1],
                                                   "software_pipeline_order": [0, 2, 1, 3, 4]}):
                    with T.block("compute"):
                        vtx, vi = T.axis.remap("SS", [tx, i])
                        AS = T.alloc_buffer((16, 1), "float32", scope="shared")
                        BS = T.alloc_buffer((16, 1), "float32", scope="shared")
                        AL = T.alloc_buffer((1, 1), "float32", scope="local")
                        BL = T.alloc_buffer((1, 1), "float32", scope="local")
                        with T.block("AS"):
                            AS[vtx, 0] = A[vtx, vi] * T.float32(2)
                        with T.block("AL"):
                            AL[0, 0] = AS[vtx, 0]
                        with T.block("BS"):
                            BS[vtx, 0] = B[vtx, vi] + T.float32(2)
                        with T.block("BL"):
                            BL[0, 0] = BS[vtx, 0]
                        with T.block("C"):
                            C[vtx, vi] = AL[0, 0] * BL[0, 0]

    return dag, lambda a, b: (a * 2) * (b + 2)


def random_inputs(shapes, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype("float32") for s in shapes]


def async_producer_interleaving():
    """TVM's test_async_producer_interleaving: two async copies, the second ordered after the
    consumer, stages [0, 0, 3], order [0, 2, 1]."""

    @T.prim_func
    def interleave(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"),
                   C: T.Buffer((16, 16), "float32")):
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for i in T.serial(16, annotations={"software_pipeline_stage": [0, 0, 3],
                                                   "software_pipeline_order": [0, 2, 1],
                                                   "software_pipeline_async_stages": [0]}):
                    with T.block("compute"):
                        vtx, vi = T.axis.remap("SS", [tx, i])
                        A_shared = T.alloc_buffer((16, 1), "float32", scope="shared")
                        B_shared = T.alloc_buffer((16, 1), "float32", scope="shared")
                        with T.block("A_shared"):
                            A_shared[vtx, 0] = A[vtx, vi]
                        with T.block("B_shared"):
                            B_shared[vtx, 0] = B[vtx, vi]
                        with T.block("C"):
                            C[vtx, vi] = A_shared[vtx, 0] + B_shared[vtx, 0]

    return interleave, lambda a, b: a + b


def two_async_chains():
    """Two async copies in different stages, each read by a later stage: a wait before the first
    consumer does not cover the second (a commit comes between)."""

    @T.prim_func
    def chains(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"),
               C: T.Buffer((16, 16), "float32")):
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for i in T.serial(16, annotations={"software_pipeline_stage": [0, 1, 1, 2],
                                                   "software_pipeline_async_stages": [0, 1]}):
                    with T.block("compute"):
                        vtx, vi = T.axis.remap("SS", [tx, i])
                        S0 = T.alloc_buffer((16, 1), "float32", scope="shared")
                        S1 = T.alloc_buffer((16, 1), "float32", scope="shared")
                        L = T.alloc_buffer((1, 1), "float32", scope="local")
                        with T.block("S0"):
                            S0[vtx, 0] = A[vtx, vi]
                        with T.block("L"):
                            L[0, 0] = S0[vtx, 0] * T.float32(2)
                        with T.block("S1"):
                            S1[vtx, 0] = B[vtx, vi]
                        with T.block("C"):
                            C[vtx, vi] = S1[vtx, 0] + L[0, 0]

    return chains, lambda a, b: b + a * 2
