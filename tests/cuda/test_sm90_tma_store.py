"""T.ptx_tma_store and the pipeline's TMA store of its output (store="tma"): the builtin prints
back, copies its box in the interpreter (skipping elements outside the tensor) and in the
emulator; the pipeline (two consumer warpgroups, batched, an epilogue, C accumulated) equals
numpy in the emulator; NVRTC's sm_90a SASS has UTMASTG; the rule samples store="tma" first."""
import shutil

import ml_dtypes
import numpy as np
import pytest
from test_sm90_auto import HALF, epilogue_operands, gemm, gemm_epilogue, operands

import tdsl

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler (the emulator needs one)")

PARTIAL = '''
@T.prim_func
def k(A: T.Buffer((100, 64), "float32"), C: T.Buffer((100, 64), "float32")):
    T.func_attr({"tdsl.tensor_map:C_tmap": "C (32, 64) none"})
    C_tmap = T.alloc_buffer((128,), "uint8")
    C_sh = T.alloc_buffer((32, 64), "float32", scope="shared")
    for by in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            for r in range(16):
                C_sh[(tx * 16 + r) // 64, (tx * 16 + r) % 64] = T.float32(1) + T.Cast("float32", by)
            T.evaluate(T.ptx_fence_proxy_async())
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            if tx == 0:
                T.evaluate(T.ptx_tma_store(C[by * 32, 0], C_sh[0, 0], C_tmap[0]))
'''


def _partial_want():
    return np.repeat(np.arange(1, 5, dtype=np.float32), 32)[:100, None] * np.ones((1, 64), np.float32)


def test_tma_store_round_trips_and_skips_what_is_outside_in_the_interpreter():
    f = tdsl.parse(PARTIAL)
    assert "T.ptx_tma_store(C[by * 32, 0], C_sh[0, 0], C_tmap[0])" in f.script()
    assert tdsl.structural_diff(tdsl.parse(f.script()), f) is None
    c = tdsl.interpret(f, np.zeros((100, 64), np.float32))   # (block 3's rows 96 .. 127: only 96 .. 99 exist)
    np.testing.assert_array_equal(c, _partial_want())


@pytest.mark.parametrize("call, words", [
    ("T.ptx_tma_store(C_sh[0, 0], C[by * 32, 0], C_tmap[0])", ["destination of T.ptx_tma_store", "global"]),
    ("T.ptx_tma_store(C[by * 32, 0], C_sh[0, 0])", ["T.ptx_tma_store takes"]),
    ("T.ptx_tma_store(C[by * 32, 0], C_sh[0, 0], A[0, 0])", ["tensor map of T.ptx_tma_store", "uint8"]),
])
def test_tma_store_refuses_bad_arguments(call, words):
    with pytest.raises(tdsl.ScriptError) as info:
        tdsl.parse(PARTIAL.replace("T.ptx_tma_store(C[by * 32, 0], C_sh[0, 0], C_tmap[0])", call))
    for w in words:
        assert w in str(info.value), str(info.value)


@needs_cxx
def test_tma_store_runs_in_the_emulator():
    kernel = tdsl.build(tdsl.parse(PARTIAL), target="cuda", emulate=True)
    np.testing.assert_array_equal(kernel(np.zeros((100, 64), np.float32)), _partial_want())
    body = kernel.source[kernel.source.index("__global__"):]
    assert body.index("tdsl_ptx_fence_proxy_async();") < body.index("__syncthreads();") < \
        body.index("tdsl_ptx_tma_store_2d(&C_tmap[0], 0, by * 32, &C_sh[0])")


RANK4 = '''
@T.prim_func
def k4(C: T.Buffer((2, 3, 40, 64), "float32")):
    T.func_attr({"tdsl.tensor_map:C_tmap": "C (1, 1, 32, 64) none"})
    C_tmap = T.alloc_buffer((128,), "uint8")
    C_sh = T.alloc_buffer((1, 1, 32, 64), "float32", scope="shared")
    for b in T.thread_binding(12, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            for r in range(16):
                C_sh[0, 0, (tx * 16 + r) // 64, (tx * 16 + r) % 64] = T.float32(1) + T.Cast("float32", b)
            T.evaluate(T.ptx_fence_proxy_async())
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            if tx == 0:
                T.evaluate(T.ptx_tma_store(C[b // 6, b // 2 % 3, b % 2 * 32, 0], C_sh[0, 0, 0, 0], C_tmap[0]))
'''


def test_a_four_dimensional_tma_store_in_the_interpreter_and_the_emulator():
    """Boxes of 1 x 1 x 32 x 64 of a (2, 3, 40, 64) tensor: the second box of each (i, j) has 8 of its
    32 rows inside; the rest is skipped."""
    want = np.zeros((2, 3, 40, 64), np.float32)
    for i in range(2):
        for j in range(3):
            want[i, j, :32] = 1 + 6 * i + 2 * j
            want[i, j, 32:] = 2 + 6 * i + 2 * j
    f = tdsl.parse(RANK4)
    c = np.zeros((2, 3, 40, 64), np.float32)
    tdsl.interpret(f, c)
    np.testing.assert_array_equal(c, want)
    if not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")):
        pytest.skip("no host C++ compiler (the emulator needs one)")
    kernel = tdsl.build(f, target="cuda", emulate=True)
    c = np.zeros((2, 3, 40, 64), np.float32)
    kernel(c)
    np.testing.assert_array_equal(c, want)
    assert "tdsl_ptx_tma_store_4d(&C_tmap[0], 0, " in kernel.source


def test_the_rule_samples_the_tma_store_first():
    sch = tdsl.auto_schedule(gemm(128, 128, 128), target="cuda", arch="sm_90a")
    text = str(sch.trace)
    assert 'candidates=["tma", "direct"]' in text and "store=v4" in text, text
    assert "T.ptx_tma_store(C[by * 128, bx * 128], C_shared[0, 0], C_tmap[0])" in sch.func.script()


@needs_cxx
@pytest.mark.parametrize("case", ["two-consumers", "batched-bf16-shared-B", "accumulate", "epilogue-fp16"])
def test_pipeline_with_a_tma_store_runs_in_the_emulator(case):
    if case == "two-consumers":         # the default tiles: 128 x 128, setmaxnreg, TMA store
        f = gemm(128, 128, 128)
        sch = tdsl.auto_schedule(f, target="cuda", arch="sm_90a")
        a, b, want = operands(128, 128, 128, "float16")
        args = [a, b]
    elif case == "epilogue-fp16":
        out, value, fn = HALF
        f = gemm_epilogue(128, 128, 128, out, value)
        sch = tdsl.auto_schedule(f, target="cuda", arch="sm_90a")
        a, b, bias, want = epilogue_operands(128, 128, 128, fn)
        args = [a, b, bias]
    else:
        batched = case.startswith("batched")
        src = '''
@T.prim_func
def gemm(A: T.Buffer(({lead}64, 128), "{dt}"), B: T.Buffer((64, 128), "{dt}"), C: T.Buffer(({lead}64, 64), "float32")):
    for {loops} in T.grid({lead}64, 64, 128):
        with T.block("C"):
            {vb}vi, vj, vk = T.axis.remap("{kinds}", [{loops}]){init}
            C[{vb}vi, vj] = C[{vb}vi, vj] + T.cast(A[{vb}vi, vk], "float32") * T.cast(B[vj, vk], "float32")
'''.format(lead="2, " if batched else "", dt="bfloat16" if batched else "float16", vb="vb, " if batched else "",
           loops="b, i, j, k" if batched else "i, j, k", kinds="SSSR" if batched else "SSR",
           init="\n            with T.init():\n                C[vb, vi, vj] = T.float32(0)" if batched else "")
        f = tdsl.parse(src)
        sch = tdsl.Schedule(f)
        ko = sch.wgmma_pipeline(sch.get_block("C"), tile_n=32, tile_k=32, stages=2, store="tma")
        sch.warp_specialize(ko)
        rng = np.random.default_rng(1)
        t = ml_dtypes.bfloat16 if batched else np.float16
        a = rng.integers(-2, 3, ((2,) if batched else ()) + (64, 128)).astype(t)
        b = rng.integers(-2, 3, (64, 128)).astype(t)
        c0 = rng.integers(-3, 4, ((2,) if batched else ()) + (64, 64)).astype(np.float32)
        want = a.astype(np.float32) @ b.astype(np.float32).T + (0 if batched else c0)
        args = [a, b] + ([] if batched else [c0.copy()])
    assert "ptx_tma_store" in sch.func.script()

    def result(run, given):   # the returned output, or C updated in place (accumulating into it)
        got = run(*given)
        return given[-1] if got is None else got

    np.testing.assert_array_equal(result(lambda *x: tdsl.interpret(sch.func, *x), [x.copy() for x in args]), want)
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    np.testing.assert_array_equal(result(kernel, [x.copy() for x in args]), want)
    assert "tdsl_ptx_tma_store_" in kernel.source


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_pipeline_sass_has_utmastg(dtype):
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda import stats

    if stats.cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    sch = tdsl.auto_schedule(gemm(256, 256, 256, dtype), target="cuda", arch="sm_90a")
    kernel = tdsl.build(sch, target="cuda", arch="sm_90a")
    ops = stats.opcodes(kernel.cubin)
    for op in ("UTMASTG", "UTMALDG", "HGMMA", "USETMAXREG"):
        assert any(o.startswith(op) for o in ops), (op, sorted(ops))
    assert not any(o.startswith(("LDL", "STL")) for o in ops), sorted(ops)
