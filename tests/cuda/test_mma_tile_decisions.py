"""The sm_80 mma rule's block tile is made of decisions the schedule follows: each tile parameter
(warps along m, warp tile rows, warps along n, warp tile cols) is a sampling step whose value the
splits and thread bindings take as is, so a replay with other decisions (what a search does)
builds that tile, and computes the GEMM (emulator == numpy); the tuner's candidates reach them."""
import itertools
import shutil

import numpy as np
import pytest

import tdsl
from tdsl.auto.rules.gpu_mma import _DTYPES, CONFIGS, fits, fitting_configs, tile_choices
from tdsl.ir import For, collect

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler (the emulator needs one)")


def gemm(M, N, K, dtype="float16"):
    return tdsl.parse(f'''
@T.prim_func
def gemm(A: T.Buffer(({M}, {K}), "{dtype}"), B: T.Buffer(({K}, {N}), "{dtype}"), C: T.Buffer(({M}, {N}), "float32")):
    for i, j, k in T.grid({M}, {N}, {K}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")
''')


def tile(func, M, N):
    """(block rows, block cols, warps along m, warps along n) of a scheduled GEMM, read from its
    thread bindings."""
    ext = {}
    for loop in collect(func.body, For):
        if loop.thread_tag is not None:
            ext.setdefault(loop.thread_tag, int(loop.extent.value))
    return M // ext["blockIdx.y"], N // ext["blockIdx.x"], ext["threadIdx.z"], ext["threadIdx.y"]


def tile_steps(trace):
    """The sampling steps whose values the splits of the GEMM's loops take (the tile parameters)."""
    used = set()
    for ins in trace:
        if ins.kind == "split":
            used |= {id(v) for v in dict(ins.attrs).get("factors", ())}
    return [k for k, ins in enumerate(trace) if ins.kind == "sample_categorical" and id(ins.outputs[0]) in used]


def test_only_combinations_that_fit_are_offered():
    for dtype in _DTYPES:
        for m, n in itertools.product(range(32, 513, 32), repeat=2):
            configs = fitting_configs(m, n, dtype)
            if not configs:
                continue
            axes = tile_choices(configs, m, n, dtype)
            bm, bn, wm, wn = configs[0]
            assert [a[0] for a in axes] == [bm // wm, wm, bn // wn, wn]       # the default first
            for pm, wm, pn, wn in itertools.product(*axes):
                assert fits(m, n, dtype, (pm * wm, pn * wn, wm, wn)), (dtype, m, n, axes)
    # a GEMM every listed tile fits: the search combines their parameters (8 tiles)
    axes = tile_choices(list(CONFIGS), 256, 256, "float16")
    assert axes == [[2], [64, 32], [4, 2], [32, 16]]
    # a combination that does not fit is never offered: 128-wide tiles do not divide n = 64
    assert tile_choices(fitting_configs(256, 64, "float16"), 256, 64, "float16") == [[2], [32], [2], [32, 16]]


@needs_cxx
def test_each_tile_decision_replays_to_its_tile_and_computes_the_gemm():
    M, N, K = 128, 128, 64
    sch = tdsl.auto_schedule(gemm(M, N, K), target="cuda")
    steps = tile_steps(sch.trace)
    values = [dict(sch.trace.instructions[k].attrs)["candidates"] for k in steps]
    assert values == [[64, 32], [4, 2], [32, 16]]              # warp rows, warps along n, warp cols
    assert tile(sch.func, M, N) == (128, 128, 2, 4)          # the default: 128 x 128, 2 x 4 warps of 64 x 32
    rng = np.random.default_rng(0)
    a = rng.integers(-2, 3, (M, K)).astype(np.float16)      # small integers: every order of sums is exact
    b = rng.integers(-2, 3, (K, N)).astype(np.float16)
    want = a.astype(np.float32) @ b.astype(np.float32)
    seen = set()
    for decisions in itertools.product(*(range(len(v)) for v in values)):
        wm, warps_n, wn = (v[d] for v, d in zip(values, decisions))
        picked = sch.trace.with_decisions(dict(zip(steps, decisions))).apply(gemm(M, N, K))
        got = tile(picked.func, M, N)
        assert got == (2 * wm, warps_n * wn, 2, warps_n), (decisions, got)
        seen.add(got)
        kernel = tdsl.build(picked, target="cuda", emulate=True, thread_orders=1)
        np.testing.assert_array_equal(kernel(a, b), want, err_msg=str(got))
        assert all(c.worst == 1 for c in kernel.stats.shared), got        # ldmatrix free of bank conflicts
    assert len(seen) == 8          # 128 x 128 .. 64 x 32: every decision value builds another tile


def test_the_tuners_candidates_sample_the_tiles():
    from tdsl.tuner import gpu

    M, N, K = 128, 128, 64
    found, invalid = gpu.candidates(gemm(M, N, K), "cuda -arch=sm_80", None, seed=0, count=12)
    assert invalid == 0
    tiles = {tile(func, M, N) for _, _, _, func in found}
    assert len(tiles) >= 4, tiles
    assert tiles <= {(2 * wm, pn * wn, 2, pn) for wm, pn, wn in itertools.product((64, 32), (4, 2), (32, 16))}


@needs_cxx
def test_tuning_without_a_gpu_verifies_several_tiles(monkeypatch):
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda import runtime
    from tdsl.tuner.space import load, replay

    monkeypatch.setattr(runtime, "has_gpu", lambda: False)
    M, N, K = 128, 128, 64
    f = gemm(M, N, K)
    records = tdsl.tune(f, target="cuda -arch=sm_80", trials=4, verbose=0).tasks[0].records
    assert [r.status for r in records] == ["verified-unmeasured"] * 4, [r.error for r in records]
    tiles = {tile(replay(load(r.trace), f).func, M, N) for r in records}
    assert len(tiles) >= 2, tiles
