"""GPU-scheduled kernels written directly in script (T.thread_binding, shared/local buffers),
shared by the tests in tests/cuda and bench/gpu_check.py. Each maker returns (func, reference)
where reference(*inputs) computes the expected outputs with numpy."""
from __future__ import annotations

import numpy as np

import tdsl
from tdsl import T


def elementwise(n_cols: int = 1024):
    """B = exp(A) * 0.5 + 1 over rows of a symbolic count; 4-wide vectorized (float4)."""
    threads = n_cols // 4

    @T.prim_func
    def ew(A: T.Buffer(("n", n_cols), "float32"), B: T.Buffer(("n", n_cols), "float32")):
        for bx in T.thread_binding(n, thread="blockIdx.x"):
            for tx in T.thread_binding(threads, thread="threadIdx.x"):
                for v in T.vectorized(4):
                    with T.block("B"):
                        vi = T.axis.spatial(n, bx)
                        vj = T.axis.spatial(n_cols, tx * 4 + v)
                        B[vi, vj] = T.exp(A[vi, vj]) * T.float32(0.5) + T.float32(1)

    return ew, lambda a: np.exp(a) * np.float32(0.5) + np.float32(1)


def elementwise_fp16(n: int = 4096):
    """fp16 and bf16 in, float32 math, fp16 out: exercises cuda_fp16.h / cuda_bf16.h."""
    blocks = n // 128

    @T.prim_func
    def ew16(A: T.Buffer((n,), "float16"), W: T.Buffer((n,), "bfloat16"), B: T.Buffer((n,), "float16")):
        for bx in T.thread_binding(blocks, thread="blockIdx.x"):
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                with T.block("B"):
                    vi = T.axis.spatial(n, bx * 128 + tx)
                    B[vi] = T.cast(T.tanh(T.cast(A[vi], "float32")) * T.cast(W[vi], "float32"), "float16")

    def ref(a, w):
        return (np.tanh(a.astype(np.float32)) * w.astype(np.float32)).astype(np.float16)

    return ew16, ref


def softmax(rows: int = 64, cols: int = 256):
    """Row softmax, one block of 128 threads per row; block-wide max and sum reductions in
    shared memory as a two-level tree (128 partials -> 16 -> 1)."""
    per = cols // 128

    @T.prim_func
    def row_softmax(A: T.Buffer((rows, cols), "float32"), B: T.Buffer((rows, cols), "float32")):
        part = T.alloc_buffer((128,), "float32", scope="shared")
        part2 = T.alloc_buffer((16,), "float32", scope="shared")
        stat = T.alloc_buffer((2,), "float32", scope="shared")
        for bx in T.thread_binding(rows, thread="blockIdx.x"):
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                for j in range(per):
                    with T.block("max1"):
                        vi, vt, vj = T.axis.remap("SSR", [bx, tx, j])
                        with T.init():
                            part[vt] = T.min_value("float32")
                        part[vt] = T.max(part[vt], A[vi, vj * 128 + vt])
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for k in range(8):
                    with T.block("max2"):
                        vt, vk = T.axis.remap("SR", [tx, k])
                        with T.init():
                            part2[vt] = T.min_value("float32")
                        part2[vt] = T.max(part2[vt], part[vt * 8 + vk])
            for tx in T.thread_binding(1, thread="threadIdx.x"):
                for k in range(16):
                    with T.block("max3"):
                        vk = T.axis.reduce(16, k)
                        with T.init():
                            stat[0] = T.min_value("float32")
                        stat[0] = T.max(stat[0], part2[vk])
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                for j in range(per):
                    with T.block("sum1"):
                        vi, vt, vj = T.axis.remap("SSR", [bx, tx, j])
                        with T.init():
                            part[vt] = T.float32(0)
                        part[vt] = part[vt] + T.exp(A[vi, vj * 128 + vt] - stat[0])
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for k in range(8):
                    with T.block("sum2"):
                        vt, vk = T.axis.remap("SR", [tx, k])
                        with T.init():
                            part2[vt] = T.float32(0)
                        part2[vt] = part2[vt] + part[vt * 8 + vk]
            for tx in T.thread_binding(1, thread="threadIdx.x"):
                for k in range(16):
                    with T.block("sum3"):
                        vk = T.axis.reduce(16, k)
                        with T.init():
                            stat[1] = T.float32(0)
                        stat[1] = stat[1] + part2[vk]
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                for j in range(per):
                    with T.block("norm"):
                        vi = T.axis.spatial(rows, bx)
                        vc = T.axis.spatial(cols, j * 128 + tx)
                        B[vi, vc] = T.exp(A[vi, vc] - stat[0]) / stat[1]

    def ref(a):
        e = np.exp(a - a.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return row_softmax, ref


def matmul(m: int = 64, n: int = 64, k: int = 64, bm: int = 32, bn: int = 32, bk: int = 8, tm: int = 4,
           tn: int = 4):
    """C = A @ B with (bm x bn) block tiles, (tm x tn) results per thread in a local accumulator
    (strided over the tile, so neighbouring threads touch neighbouring columns: conflict-free
    shared reads and coalesced stores), and (bm x bk) / (bk x bn) tiles of A and B staged through shared memory by all
    threads of the block (loops bound again to the same threadIdx: TensorIR's cooperative fetch)."""
    ty_n, tx_n = bm // tm, bn // tn
    nthreads = ty_n * tx_n
    a_per = bm * bk // nthreads
    b_per = bk * bn // nthreads

    @T.prim_func
    def mm(A: T.Buffer((m, k), "float32"), B: T.Buffer((k, n), "float32"), C: T.Buffer((m, n), "float32")):
        A_sh = T.alloc_buffer((bm, bk), "float32", scope="shared")
        B_sh = T.alloc_buffer((bk, bn), "float32", scope="shared")
        C_loc = T.alloc_buffer((tm, tn), "float32", scope="local")
        for by in T.thread_binding(m // bm, thread="blockIdx.y"):
            for bx in T.thread_binding(n // bn, thread="blockIdx.x"):
                for ty in T.thread_binding(ty_n, thread="threadIdx.y"):
                    for tx in T.thread_binding(tx_n, thread="threadIdx.x"):
                        for i, j in T.grid(tm, tn):
                            with T.block("init"):
                                vi, vj = T.axis.remap("SS", [i, j])
                                C_loc[vi, vj] = T.float32(0)
                        for ko in range(k // bk):
                            for ty2 in T.thread_binding(ty_n, thread="threadIdx.y"):
                                for tx2 in T.thread_binding(tx_n, thread="threadIdx.x"):
                                    for l in range(a_per):
                                        with T.block("A_sh"):
                                            e = T.axis.spatial(bm * bk, (ty2 * tx_n + tx2) * a_per + l)
                                            vko = T.axis.spatial(k // bk, ko)
                                            vby = T.axis.spatial(m // bm, by)
                                            A_sh[e // bk, e % bk] = A[vby * bm + e // bk, vko * bk + e % bk]
                            for ty2 in T.thread_binding(ty_n, thread="threadIdx.y"):
                                for tx2 in T.thread_binding(tx_n, thread="threadIdx.x"):
                                    for l in range(b_per):
                                        with T.block("B_sh"):
                                            e = T.axis.spatial(bk * bn, (ty2 * tx_n + tx2) * b_per + l)
                                            vko = T.axis.spatial(k // bk, ko)
                                            vbx = T.axis.spatial(n // bn, bx)
                                            B_sh[e // bn, e % bn] = B[vko * bk + e // bn, vbx * bn + e % bn]
                            for kk, i, j in T.grid(bk, tm, tn):
                                with T.block("C_loc"):
                                    vk, vi, vj = T.axis.remap("SSS", [kk, i, j])
                                    vty, vtx = T.axis.remap("SS", [ty, tx])
                                    C_loc[vi, vj] = C_loc[vi, vj] + A_sh[vi * ty_n + vty, vk] * B_sh[vk, vj * tx_n + vtx]
                        for i, j in T.grid(tm, tn):
                            with T.block("C"):
                                vi = T.axis.spatial(m, by * bm + i * ty_n + ty)
                                vj = T.axis.spatial(n, bx * bn + j * tx_n + tx)
                                C[vi, vj] = C_loc[i, j]

    return mm, lambda a, b: a @ b


def kitchen_sink(n: int = 256):
    """Many dtypes and operators in one kernel (floor division of negatives, casts that wrap,
    eager and lazy selects, float floor-modulo, half arithmetic, int64 constants, bool logic).
    The reference is the interpreter: on a GPU this checks the codegen's semantics against it."""
    blocks = n // 128

    @T.prim_func
    def sink(A: T.Buffer((n,), "float32"), I: T.Buffer((n,), "int32"), C8: T.Buffer((n,), "int8"),
             D: T.Buffer((n,), "float64"), H: T.Buffer((n,), "float16"), O1: T.Buffer((n,), "float32"),
             O2: T.Buffer((n,), "int32"), O3: T.Buffer((n,), "float64"), O4: T.Buffer((n,), "float16"),
             O5: T.Buffer((n,), "int64"), O6: T.Buffer((n,), "uint8"), O7: T.Buffer((n,), "bool")):
        for bx in T.thread_binding(blocks, thread="blockIdx.x"):
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                with T.block("sink"):
                    i = T.axis.spatial(n, bx * 128 + tx)
                    O1[i] = (T.Select(A[i] > T.float32(0), T.sqrt(A[i]), T.exp(A[i]))
                             + T.floor(A[i] * T.float32(3)) / T.float32(2) + T.cast(I[i] // 3, "float32")
                             + T.max(A[i], T.float32(-0.5)) + T.min(A[i], T.float32(0.5))
                             + T.sigmoid(A[i]) + T.rsqrt(T.abs(A[i]) + T.float32(1)) + T.ceil(A[i]))
                    O2[i] = (I[i] // 7 + I[i] % 5 + T.max(I[i], 0) - T.min(I[i], 3) + T.cast(C8[i], "int32") * 2
                             + T.if_then_else(I[i] > 0, I[i] // 2, 0 - I[i]) + T.abs(I[i]))
                    O3[i] = T.tanh(D[i]) + T.erf(D[i]) + T.pow(T.abs(D[i]), T.float64(0.5)) + T.cast(A[i], "float64")
                    O4[i] = H[i] * H[i] + T.exp(H[i]) - T.cast(T.float32(0.25), "float16")
                    O5[i] = T.cast(I[i], "int64") * T.int64(3000000000) // T.int64(7)
                    O6[i] = T.cast(C8[i] * T.int8(3) + T.int8(100), "uint8")   # int8 arithmetic wraps
                    O7[i] = (A[i] > T.float32(0) and not (I[i] % 2 == 0)) or C8[i] < T.int8(0)  # noqa: SIM201 (tests `not`)

    def inputs(seed: int = 0):
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(n).astype("float32") * 3, rng.integers(-100, 100, n).astype("int32"),
                rng.integers(-128, 128, n).astype("int8"), rng.standard_normal(n),
                (rng.standard_normal(n) * 0.5).astype("float16")]

    return sink, (lambda *ins: tdsl.interpret(sink, *ins)), inputs


def wmma_gemm(m: int = 64, n: int = 32, k: int = 64):
    """fp16 x fp16 -> fp32 GEMM on tensor cores: one warp per 16 x 16 tile of C, its blocks
    tensorized with the WMMA intrinsics of tdsl.intrinsics.cuda (fragments in per-thread
    arrays). Returns (schedule, reference); on the CPU the blocks compute their descriptions."""
    from tdsl.intrinsics import cuda as wmma

    @T.prim_func
    def wmma_gemm(A: T.Buffer((m, k), "float16"), B: T.Buffer((k, n), "float16"), C: T.Buffer((m, n), "float32")):
        for bi in T.thread_binding(m // 16, thread="blockIdx.y"):
            for bj in T.thread_binding(n // 16, thread="blockIdx.x"):
                for tx in T.thread_binding(32, thread="threadIdx.x"):
                    with T.block("warp"):
                        vbi, vbj, vtx = T.axis.remap("SSS", [bi, bj, tx])
                        Af = T.alloc_buffer((16, 16), "float16", scope="wmma.matrix_a")
                        Bf = T.alloc_buffer((16, 16), "float16", scope="wmma.matrix_b")
                        Cf = T.alloc_buffer((16, 16), "float32", scope="wmma.accumulator")
                        for i, j in T.grid(16, 16):
                            with T.block("fill"):
                                vi, vj = T.axis.remap("SS", [i, j])
                                Cf[vi, vj] = T.float32(0)
                        for ko in range(k // 16):
                            for i, kk in T.grid(16, 16):
                                with T.block("load_a"):
                                    vi, vk = T.axis.remap("SS", [i, kk])
                                    Af[vi, vk] = A[vbi * 16 + vi, ko * 16 + vk]
                            for kk, j in T.grid(16, 16):
                                with T.block("load_b"):
                                    vk, vj = T.axis.remap("SS", [kk, j])
                                    Bf[vk, vj] = B[ko * 16 + vk, vbj * 16 + vj]
                            for i, j, kk in T.grid(16, 16, 16):
                                with T.block("mma"):
                                    vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                                    Cf[vi, vj] = Cf[vi, vj] + T.cast(Af[vi, vk], "float32") * T.cast(Bf[vk, vj],
                                                                                                      "float32")
                        for i, j in T.grid(16, 16):
                            with T.block("store"):
                                vi, vj = T.axis.remap("SS", [i, j])
                                C[vbi * 16 + vi, vbj * 16 + vj] = Cf[vi, vj]

    sch = tdsl.Schedule(wmma_gemm)
    for block, intrin in (("fill", wmma.FILL), ("load_a", wmma.load_a("global")),
                          ("load_b", wmma.load_b("global")), ("mma", wmma.MMA), ("store", wmma.store("global"))):
        loops = sch.get_loops(sch.get_block(block))
        sch.tensorize(loops[-3] if block == "mma" else loops[-2], intrin)
    return sch, lambda a, b: a.astype(np.float32) @ b.astype(np.float32)


def unbound():
    """A GPU function whose second block was left on a serial loop."""

    @T.prim_func
    def half_bound(A: T.Buffer((4, 32), "float32"), B: T.Buffer((4, 32), "float32"),
                   C: T.Buffer((4, 32), "float32")):
        for bx in T.thread_binding(4, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [bx, tx])
                    B[vi, vj] = A[vi, vj] + T.float32(1)
        for i, j in T.grid(4, 32):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = B[vi, vj] * T.float32(2)

    return half_bound


def random_inputs(func, seed: int = 0, dims: dict | None = None) -> list[np.ndarray]:
    """Random arrays for the parameters a function reads (symbolic dims from `dims`)."""
    rng = np.random.default_rng(seed)
    out = []
    for p in func.params[:-1]:
        shape = tuple(s.value if hasattr(s, "value") else dims[s.name] for s in p.shape)
        out.append((rng.standard_normal(shape)).astype(p.dtype.numpy))
    return out


# ----------------------------------------------------------------------------- reductions written with schedules

def _split_bind(sch, block: str, threads: int) -> None:
    """Split the block's innermost loop by `threads` and bind the inner part to threadIdx.x."""
    loop = sch.get_loops(sch.get_block(block))[-1]
    _, inner = sch.split(loop, factors=[None, threads])
    sch.bind(inner, "threadIdx.x")


def row_sum_cross_thread(cols: int = 256, threads: int = 64):
    """S[i] = sum_k A[i, k] over a symbolic number of rows: one block per row, the reduction
    loop bound to threadIdx.x (a cross-thread reduction: shuffles, then shared memory)."""

    @T.prim_func
    def row_sum(A: T.Buffer(("n", cols), "float32"), S: T.Buffer(("n",), "float32")):
        for i, k in T.grid(n, cols):
            with T.block("S"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    S[vi] = T.float32(0)
                S[vi] = S[vi] + A[vi, vk]

    sch = tdsl.Schedule(row_sum)
    sch.bind(sch.get_loops(sch.get_block("S"))[0], "blockIdx.x")
    _split_bind(sch, "S", threads)
    return sch, lambda a: a.sum(1, dtype=np.float32)


def row_sum_rfactor(threads: int = 32):
    """Row sums of a symbolic width m (not a multiple of `threads`): rfactor of the predicated
    split into a shared buffer of partials, one per thread, added up by thread 0."""

    @T.prim_func
    def row_sum_m(A: T.Buffer((8, "m"), "float32"), S: T.Buffer((8,), "float32")):
        for i, k in T.grid(8, m):
            with T.block("S"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    S[vi] = T.float32(0)
                S[vi] = S[vi] + A[vi, vk]

    sch = tdsl.Schedule(row_sum_m)
    _, k = sch.get_loops(sch.get_block("S"))
    _, ki = sch.split(k, factors=[None, threads])
    rf = sch.rfactor(ki, 1)
    ri, rk0, rk1 = sch.get_loops(rf)
    sch.reorder(ri, rk1, rk0)
    sch.bind(ri, "blockIdx.x")
    sch.bind(rk1, "threadIdx.x")
    fin = sch.get_block("S")
    sch.reverse_compute_at(fin, ri)
    unit, _ = sch.split(sch.get_loops(fin)[-1], factors=[1, None])
    sch.bind(unit, "threadIdx.x")
    sch.set_scope(rf, 0, "shared")
    return sch, lambda a: a.sum(1, dtype=np.float32)


def softmax_cross_thread(cols: int = 256, threads: int = 128, shared: bool = True, out_threads: int | None = None):
    """Row softmax over a symbolic number of rows: max and sum as cross-thread reductions
    (their results in shared memory, read by every thread), exp inlined."""

    @T.prim_func
    def softmax_rows(A: T.Buffer(("n", cols), "float32"), B: T.Buffer(("n", cols), "float32")):
        M = T.alloc_buffer((n,), "float32")
        E = T.alloc_buffer((n, cols), "float32")
        S = T.alloc_buffer((n,), "float32")
        for i, k in T.grid(n, cols):
            with T.block("M"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    M[vi] = T.min_value("float32")
                M[vi] = T.max(M[vi], A[vi, vk])
        for i, k in T.grid(n, cols):
            with T.block("E"):
                vi, vk = T.axis.remap("SS", [i, k])
                E[vi, vk] = T.exp(A[vi, vk] - M[vi])
        for i, k in T.grid(n, cols):
            with T.block("S"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    S[vi] = T.float32(0)
                S[vi] = S[vi] + E[vi, vk]
        for i, k in T.grid(n, cols):
            with T.block("B"):
                vi, vk = T.axis.remap("SS", [i, k])
                B[vi, vk] = E[vi, vk] / S[vi]

    sch = tdsl.Schedule(softmax_rows)
    sch.compute_inline(sch.get_block("E"))
    row = sch.get_loops(sch.get_block("B"))[0]
    sch.bind(row, "blockIdx.x")
    for name in ("S", "M"):
        sch.compute_at(sch.get_block(name), row)
    for name in ("M", "S", "B"):
        _split_bind(sch, name, out_threads if name == "B" and out_threads else threads)
    for name in ("M", "S") if shared else ():
        sch.set_scope(sch.get_block(name), 0, "shared")

    def ref(a):
        e = np.exp(a - a.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    return sch, ref


def layernorm_cross_thread(cols: int = 256, threads: int = 64, eps: float = 1e-5):
    """Layer norm over a symbolic number of rows: mean and variance as cross-thread reductions."""

    @T.prim_func
    def layernorm(A: T.Buffer(("n", cols), "float32"), G: T.Buffer((cols,), "float32"),
                  Bt: T.Buffer((cols,), "float32"), Y: T.Buffer(("n", cols), "float32")):
        S1 = T.alloc_buffer((n,), "float32")
        S2 = T.alloc_buffer((n,), "float32")
        for i, k in T.grid(n, cols):
            with T.block("S1"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    S1[vi] = T.float32(0)
                S1[vi] = S1[vi] + A[vi, vk]
        for i, k in T.grid(n, cols):
            with T.block("S2"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    S2[vi] = T.float32(0)
                S2[vi] = S2[vi] + (A[vi, vk] - S1[vi] * T.float32(1.0 / cols)) * (A[vi, vk] - S1[vi] * T.float32(
                    1.0 / cols))
        for i, k in T.grid(n, cols):
            with T.block("Y"):
                vi, vk = T.axis.remap("SS", [i, k])
                Y[vi, vk] = ((A[vi, vk] - S1[vi] * T.float32(1.0 / cols))
                             * T.rsqrt(S2[vi] * T.float32(1.0 / cols) + T.float32(eps)) * G[vk] + Bt[vk])

    sch = tdsl.Schedule(layernorm)
    row = sch.get_loops(sch.get_block("Y"))[0]
    sch.bind(row, "blockIdx.x")
    for name in ("S2", "S1"):
        sch.compute_at(sch.get_block(name), row)
    for name in ("S1", "S2", "Y"):
        _split_bind(sch, name, threads)
    for name in ("S1", "S2"):
        sch.set_scope(sch.get_block(name), 0, "shared")

    def ref(a, g, b):
        mean = a.mean(1, keepdims=True)
        var = ((a - mean) ** 2).mean(1, keepdims=True)
        return (a - mean) / np.sqrt(var + eps) * g + b

    return sch, ref


def shared_tiled_gemm():
    """The shared-memory tiled GEMM built with schedule primitives (tutorial 06's schedule):
    cache_read into shared at each k tile, a local accumulator per thread."""
    return matmul()


def _rows(n: int, cols: int, seed: int = 0):
    return np.random.default_rng(seed).standard_normal((n, cols)).astype("float32")


def reduction_cases():
    """(maker, inputs) for the schedules above, at sizes the emulator runs quickly."""
    g = np.random.default_rng(1).standard_normal(256).astype("float32")
    b = np.random.default_rng(2).standard_normal(256).astype("float32")
    return [(row_sum_cross_thread, [_rows(5, 256)]), (row_sum_rfactor, [_rows(8, 77)]),
            (softmax_cross_thread, [_rows(3, 256)]), (layernorm_cross_thread, [_rows(4, 256), g, b])]


def emulate_matches_interpreter(func, dims: dict | None = None, scalars: dict | None = None, seed: int = 0,
                                tol: float = 1e-5, **build):
    """Build `func` (a PrimFunc or Schedule) for CUDA in emulation, run it on random arguments
    (every buffer, outputs included, so that partial writes are compared too) and check every
    buffer against tdsl.interpret. Returns the emulated kernel."""
    func_ = getattr(func, "func", func)
    dims, scalars = dims or {}, scalars or {}
    rng = np.random.default_rng(seed)
    args = []
    for p in func_.params:
        if isinstance(p, tdsl.ir.Buffer):
            shape = tuple(s.value if hasattr(s, "value") else dims[s.name] for s in p.shape)
            if p.dtype.is_float:
                args.append(rng.standard_normal(shape).astype(p.dtype.numpy))
            else:
                args.append(rng.integers(-50, 50, shape).astype(p.dtype.numpy))
        else:
            args.append(scalars[p.name])
    kernel = tdsl.build(func, target="cuda", emulate=True, **build)
    got = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    want = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    kernel(*got)
    tdsl.interpret(func_, *want)
    for p, g, w in zip(func_.params, got, want):
        if isinstance(g, np.ndarray):
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol,
                                       err_msg=f"buffer {p.name}")
    return kernel


__all__ = [
    "elementwise",
    "elementwise_fp16",
    "emulate_matches_interpreter",
    "kitchen_sink",
    "layernorm_cross_thread",
    "matmul",
    "random_inputs",
    "reduction_cases",
    "row_sum_cross_thread",
    "row_sum_rfactor",
    "softmax",
    "softmax_cross_thread",
    "tdsl",
    "unbound",
]
