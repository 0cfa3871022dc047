"""Worked schedules: whole kernels scheduled the way a performance engineer would, each checked
against numpy through the CPU backend (tdsl.build) and through the interpreter, at small sizes,
plus the round trip of the scheduled function."""
from __future__ import annotations

import numpy as np
from sched_check import check

import tdsl

SOFTMAX = '''
@T.prim_func
def softmax(A: T.Buffer((6, 32), "float32"), Out: T.Buffer((6, 32), "float32")):
    mx = T.alloc_buffer((6,), "float32")
    den = T.alloc_buffer((6,), "float32")
    for i, k in T.grid(6, 32):
        with T.block("max"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                mx[vi] = T.float32(-3.4e38)
            mx[vi] = T.max(mx[vi], A[vi, vk])
    for i, k in T.grid(6, 32):
        with T.block("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                den[vi] = T.float32(0)
            den[vi] = den[vi] + T.exp(A[vi, vk] - mx[vi])
    for i, j in T.grid(6, 32):
        with T.block("out"):
            vi, vj = T.axis.remap("SS", [i, j])
            Out[vi, vj] = T.exp(A[vi, vj] - mx[vi]) / den[vi]
'''

MATMUL = '''
@T.prim_func
def matmul(A: T.Buffer((16, 24), "float32"), B: T.Buffer((24, 32), "float32"), C: T.Buffer((16, 32), "float32")):
    for i, j, k in T.grid(16, 32, 24):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''

CONV = '''
@T.prim_func
def conv(A: T.Buffer((3, 10, 10), "float32"), W: T.Buffer((4, 3, 3, 3), "float32"),
         Out: T.Buffer((4, 10, 10), "float32")):
    Apad = T.alloc_buffer((3, 12, 12), "float32")
    for c, h, w in T.grid(3, 12, 12):
        with T.block("pad"):
            vc, vh, vw = T.axis.remap("SSS", [c, h, w])
            Apad[vc, vh, vw] = T.if_then_else(1 <= vh and vh < 11 and 1 <= vw and vw < 11,
                                              A[vc, vh - 1, vw - 1], T.float32(0))
    for f, y, x, c, ry, rx in T.grid(4, 10, 10, 3, 3, 3):
        with T.block("conv"):
            vf, vy, vx, vc, vry, vrx = T.axis.remap("SSSRRR", [f, y, x, c, ry, rx])
            with T.init():
                Out[vf, vy, vx] = T.float32(0)
            Out[vf, vy, vx] = Out[vf, vy, vx] + Apad[vc, vy + vry, vx + vrx] * W[vf, vc, vry, vrx]
'''

LAYERNORM = '''
@T.prim_func
def layernorm(A: T.Buffer((5, 64), "float32"), gamma: T.Buffer((64,), "float32"),
              beta: T.Buffer((64,), "float32"), Out: T.Buffer((5, 64), "float32")):
    S = T.alloc_buffer((5,), "float32")
    Q = T.alloc_buffer((5,), "float32")
    for i, k in T.grid(5, 64):
        with T.block("stats"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                S[vi] = T.float32(0)
                Q[vi] = T.float32(0)
            S[vi] = S[vi] + A[vi, vk]
            Q[vi] = Q[vi] + A[vi, vk] * A[vi, vk]
    for i, j in T.grid(5, 64):
        with T.block("norm"):
            vi, vj = T.axis.remap("SS", [i, j])
            mean = S[vi] / T.float32(64)
            var = Q[vi] / T.float32(64) - mean * mean
            Out[vi, vj] = (A[vi, vj] - mean) * T.rsqrt(var + T.float32(1e-5)) * gamma[vj] + beta[vj]
'''


def _run(sch: tdsl.Schedule, original: tdsl.PrimFunc, inputs: list[np.ndarray], want: np.ndarray,
         tol: float = 1e-4) -> None:
    """The scheduled kernel, compiled for the CPU and interpreted, gives numpy's answer."""
    check(sch, original)
    out_shape = tuple(int(s.value) for s in original.buffer_params[-1].shape)
    got = np.zeros(out_shape, "float32")
    tdsl.interpret(sch.func, *inputs, got)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    kernel = tdsl.build(sch, target="cpu")
    got = np.zeros(out_shape, "float32")
    kernel(*inputs, got)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_row_softmax_rfactor_compute_at_parallel_vectorize():
    f = tdsl.parse(SOFTMAX)
    sch = tdsl.Schedule(f)
    out = sch.get_block("out")
    i, j = sch.get_loops(out)
    for name in ("sum", "max"):  # consumers first, so each lands before its readers in the row
        sch.compute_at(sch.get_block(name), i)
    for name in ("max", "sum"):
        blk = sch.get_block(name)
        _, k = sch.get_loops(blk)
        _k0, k1 = sch.split(k, factors=[None, 8])
        rf = sch.rfactor(k1, 0)
        _, rk0, rk1 = sch.get_loops(rf)
        sch.reorder(rk1, rk0)
        sch.vectorize(sch.get_loops(rf)[1])
    _j0, j1 = sch.split(j, factors=[None, 8])
    sch.vectorize(j1)
    sch.parallel(i)
    text = sch.func.script()
    assert text.count("T.parallel") == 1 and text.count("T.vectorized") == 3
    a = np.random.default_rng(1).standard_normal((6, 32)).astype("float32")
    e = np.exp(a - a.max(axis=1, keepdims=True))
    _run(sch, f, [a], e / e.sum(axis=1, keepdims=True))


def test_matmul_local_accumulator_and_packed_b():
    f = tdsl.parse(MATMUL)
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 8])
    sch.reorder(i0, j0, k, i1, j1)
    acc = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(acc, j0)
    packed = sch.cache_read(c, "B", "global")
    sch.transform_layout(packed, "B_global", lambda kk, jj: (jj // 8, kk, jj % 8))
    sch.decompose_reduction(c, k)
    sch.vectorize(j1)
    sch.parallel(i0)
    text = sch.func.script()
    assert 'T.alloc_buffer((16, 32), "float32", scope="local")' in text
    assert 'B_global = T.alloc_buffer((4, 24, 8), "float32")' in text
    rng = np.random.default_rng(2)
    a = rng.standard_normal((16, 24)).astype("float32")
    b = rng.standard_normal((24, 32)).astype("float32")
    _run(sch, f, [a, b], a @ b)


def _conv_reference(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    p = np.pad(a, ((0, 0), (1, 1), (1, 1)))
    out = np.zeros((4, 10, 10), "float32")
    for ry in range(3):
        for rx in range(3):
            out += np.einsum("fc,chw->fhw", w[:, :, ry, rx], p[:, ry:ry + 10, rx:rx + 10])
    return out


def _conv_inputs():
    rng = np.random.default_rng(3)
    return rng.standard_normal((3, 10, 10)).astype("float32"), rng.standard_normal((4, 3, 3, 3)).astype("float32")


def test_conv2d_padding_computed_at_the_tile():
    f = tdsl.parse(CONV)
    sch = tdsl.Schedule(f)
    conv = sch.get_block("conv")
    fl, y, _x, _c, _ry, _rx = sch.get_loops(conv)
    y0, y1 = sch.split(y, factors=[None, 4])  # 10 rows in tiles of 4: the last tile is partial
    sch.reorder(y0, fl, y1)
    sch.compute_at(sch.get_block("pad"), y0)
    sch.parallel(y0)
    a, w = _conv_inputs()
    _run(sch, f, [a, w], _conv_reference(a, w))


def test_conv2d_padding_inlined():
    f = tdsl.parse(CONV)
    sch = tdsl.Schedule(f)
    sch.compute_inline(sch.get_block("pad"))
    conv = sch.get_block("conv")
    fl, _y, _x, c, _ry, _rx = sch.get_loops(conv)
    sch.decompose_reduction(conv, c)
    sch.parallel(fl)
    assert "Apad" not in sch.func.script()
    a, w = _conv_inputs()
    _run(sch, f, [a, w], _conv_reference(a, w))


def test_layernorm_one_pass_per_row():
    f = tdsl.parse(LAYERNORM)
    sch = tdsl.Schedule(f)
    norm = sch.get_block("norm")
    i, j = sch.get_loops(norm)
    sch.compute_at(sch.get_block("stats"), i)
    sch.parallel(i)
    _j0, j1 = sch.split(j, factors=[None, 16])
    sch.vectorize(j1)
    # one loop over the row computes both sums, then the row is normalised
    assert len(sch.get_loops(sch.get_block("stats"))) == 2
    rng = np.random.default_rng(4)
    a = rng.standard_normal((5, 64)).astype("float32")
    g = rng.standard_normal(64).astype("float32")
    b = rng.standard_normal(64).astype("float32")
    mean = a.mean(axis=1, keepdims=True)
    var = (a * a).mean(axis=1, keepdims=True) - mean * mean
    _run(sch, f, [a, g, b], (a - mean) / np.sqrt(var + 1e-5) * g + b, tol=2e-4)


def test_matmul_gpu_style_shared_tiles_runs_on_cpu():
    # the classic GPU recipe: shared-memory tiles per k step (padded rows), a local accumulator
    # written back per thread block; a GPU-bound function also builds for the CPU
    f = tdsl.parse(MATMUL)
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 8])
    j0, j1 = sch.split(j, factors=[None, 8])
    k0, k1 = sch.split(k, factors=[None, 8])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    sch.bind(i0, "blockIdx.x")
    sch.bind(j0, "blockIdx.y")
    a_shared = sch.cache_read(c, "A", "shared")
    b_shared = sch.cache_read(c, "B", "shared")
    sch.compute_at(a_shared, k0)
    sch.compute_at(b_shared, k0)
    sch.storage_align(a_shared, "A_shared", 0, 32, 1)
    acc = sch.cache_write(c, "C", "local")
    sch.reverse_compute_at(acc, j0)
    sch.bind(i1, "threadIdx.y")
    sch.decompose_reduction(c, k0)
    assert [lp.name for lp in sch.get_loops(acc)][:2] == [i0.name, j0.name]
    rng = np.random.default_rng(5)
    a = rng.standard_normal((16, 24)).astype("float32")
    b = rng.standard_normal((24, 32)).astype("float32")
    _run(sch, f, [a, b], a @ b)
