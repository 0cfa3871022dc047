"""tdsl.auto_schedule for arch sm_90a: fp16/bf16 GEMMs get the warp-specialized TMA + mbarrier +
wgmma pipeline (GPUWgmmaPipeline). The emulator runs it against numpy (small sizes: the emulator
is slow, but 4 K steps for 2 stages); NVRTC builds the 256^3 and 256 x 512 x 128 GEMMs for sm_90a
and their SASS has HGMMA, UTMALDG and SYNCS and no local memory. The call path encodes the TMA
tensor maps itself: tdsl's encoding in the emulator, cuTensorMapEncodeTiled (checked against
the fake driver) on a GPU. Other architectures keep the mma.sync rule."""
import ctypes
import shutil
import sys

import ml_dtypes
import numpy as np
import pytest

import tdsl

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler (the emulator needs one)")
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def gemm(M, N, K, dtype="float16", trans_b=False):
    """The user's GEMM: C[i, j] += f32(A[i, k]) * f32(B[k, j]) (or B[j, k])."""
    bshape, bidx = ((N, K), "vj, vk") if trans_b else ((K, N), "vk, vj")
    return tdsl.parse(f'''
@T.prim_func
def gemm(A: T.Buffer(({M}, {K}), "{dtype}"), B: T.Buffer({bshape}, "{dtype}"), C: T.Buffer(({M}, {N}), "float32")):
    for i, j, k in T.grid({M}, {N}, {K}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[{bidx}], "float32")
''')


def operands(M, N, K, dtype, trans_b=False, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-2, 3, (M, K)).astype(NP[dtype])      # small integers: every order of sums is exact
    b = rng.integers(-2, 3, (N, K) if trans_b else (K, N)).astype(NP[dtype])
    bk = b.T if trans_b else b
    return a, b, a.astype(np.float32) @ bk.astype(np.float32)


def steps(sch) -> list[str]:
    return [line.split("(")[0].split(".")[-1] for line in str(sch.trace).splitlines()]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sm90a_gemm_gets_the_pipeline_and_keeps_its_meaning(dtype):
    f = gemm(64, 64, 256, dtype)
    sch = tdsl.auto_schedule(f, target="cuda", arch="sm_90a")
    assert steps(sch)[-2:] == ["wgmma_pipeline", "warp_specialize"], str(sch.trace)
    a, b, want = operands(64, 64, 256, dtype)
    np.testing.assert_array_equal(tdsl.interpret(sch.func, a, b), want)
    same = tdsl.auto_schedule(f, target="cuda -arch=sm_90a")
    assert tdsl.structural_diff(same.func, sch.func) is None


@needs_cxx
@pytest.mark.parametrize("dtype, trans_b", [("float16", False), ("bfloat16", True)])
def test_sm90a_gemm_runs_in_the_emulator(dtype, trans_b):
    M, N, K = 64, 128, 256          # two blocks, four K steps through a ring of two stages
    sch = tdsl.auto_schedule(gemm(M, N, K, dtype, trans_b), target="cuda", arch="sm_90a")
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    a, b, want = operands(M, N, K, dtype, trans_b)
    np.testing.assert_array_equal(kernel(a, b), want)     # tensor maps encoded by the call path
    body = kernel.source[kernel.source.index("__global__"):]
    assert "tdsl_ptx_tma_load_2d(&A_shared[" in body and "tdsl_ptx_wgmma_m64n64k16_f32_" in body
    assert "if (ty == 0)" in body or "if (ty_1 == 0)" in body


@needs_cxx
def test_two_consumer_warpgroups_run_in_the_emulator():
    M, N, K = 128, 128, 128           # one 128 x 128 tile, 4 K steps of 32 through 2 stages
    sch = tdsl.auto_schedule(gemm(M, N, K), target="cuda", arch="sm_90a")
    want = [128, 32, 2, 128]          # tile_n, tile_k, stages, tile_m: the decisions' values
    samples = [k for k, ins in enumerate(sch.trace) if ins.kind == "sample_categorical"]
    decisions = {k: dict(list(sch.trace)[k].attrs)["candidates"].index(v) for k, v in zip(samples, want)}
    picked = sch.trace.with_decisions(decisions).apply(gemm(M, N, K))
    assert 'T.thread_binding(3, thread="threadIdx.y")' in picked.func.script()
    kernel = tdsl.build(picked, target="cuda", emulate=True)
    a, b, c = operands(M, N, K, "float16")
    np.testing.assert_array_equal(kernel(a, b), c)
    assert "tdsl_ptx_wgmma_m64n128k16_f32_f16" in kernel.source


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M, N, K", [(256, 256, 256), (256, 512, 128)])
def test_sm90a_gemm_sass_has_hgmma_utmaldg_syncs_and_no_local_memory(dtype, M, N, K):
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda import stats

    if stats.cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    sch = tdsl.auto_schedule(gemm(M, N, K, dtype), target="cuda", arch="sm_90a")
    kernel = tdsl.build(sch, target="cuda", arch="sm_90a")
    ops = stats.opcodes(kernel.cubin)
    for op in ("HGMMA", "UTMALDG", "SYNCS"):
        assert any(o.startswith(op) for o in ops), (op, sorted(ops))
    assert not any(o.startswith(("LDL", "STL")) for o in ops), sorted(ops)
    for name, usage in kernel.stats.resources.items():
        assert usage["registers"] <= 255 and usage["local"] == 0 and usage["stack"] == 0, (name, usage)


def test_other_architectures_keep_mma_sync():
    f = gemm(128, 128, 64)
    for target in ("cuda", "cuda -arch=sm_80", "cuda -arch=sm_90"):
        names = steps(tdsl.auto_schedule(f, target=target))
        assert "wgmma_pipeline" not in names and "tensorize" in names, target


GEMM_EPILOGUE = '''
@T.prim_func
def gemm_epilogue(A: T.Buffer(({M}, {K}), "float16"), B: T.Buffer(({K}, {N}), "float16"),
                  bias: T.Buffer(({N},), "float32"), D: T.Buffer(({M}, {N}), "{out}")):
    C = T.alloc_buffer(({M}, {N}), "float32")
    for i, j, k in T.grid({M}, {N}, {K}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")
    for i, j in T.grid({M}, {N}):
        with T.block("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = {value}
'''
RELU = ("float32", "T.max(C[vi, vj] + bias[vj], T.float32(0))", lambda c, bias: np.maximum(c + bias, 0))
HALF = ("float16", 'T.cast(C[vi, vj] * T.float32(0.5) + bias[vj], "float16")',
        lambda c, bias: (c * np.float32(0.5) + bias).astype(np.float16))


def gemm_epilogue(M, N, K, out, value):
    """The user's GEMM into an intermediate C, then D[i, j] = value (over C[vi, vj] and bias[vj])."""
    return tdsl.parse(GEMM_EPILOGUE.format(M=M, N=N, K=K, out=out, value=value))


def epilogue_operands(M, N, K, want, seed=0):
    rng = np.random.default_rng(seed)
    a, b, c = operands(M, N, K, "float16", seed=seed)
    bias = rng.integers(-4, 5, N).astype(np.float32)
    return a, b, bias, want(c, bias)


@pytest.mark.parametrize("out, value, want", [RELU, HALF], ids=["bias-relu", "scale-bias-fp16"])
def test_sm90a_gemm_with_an_epilogue_gets_the_pipeline(out, value, want):
    f = gemm_epilogue(64, 64, 256, out, value)
    sch = tdsl.auto_schedule(f, target="cuda", arch="sm_90a")
    assert steps(sch)[-2:] == ["wgmma_pipeline", "warp_specialize"], str(sch.trace)
    a, b, bias, expected = epilogue_operands(64, 64, 256, want)
    got = tdsl.interpret(sch.func, a, b, bias)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, tdsl.interpret(f, a, b, bias))


@needs_cxx
@pytest.mark.parametrize("out, value, want", [RELU, HALF], ids=["bias-relu", "scale-bias-fp16"])
def test_sm90a_gemm_with_an_epilogue_runs_in_the_emulator(out, value, want):
    M, N, K = 64, 128, 256          # two blocks, four K steps through a ring of two stages
    sch = tdsl.auto_schedule(gemm_epilogue(M, N, K, out, value), target="cuda", arch="sm_90a")
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    a, b, bias, expected = epilogue_operands(M, N, K, want)
    np.testing.assert_array_equal(kernel(a, b, bias), expected)
    body = kernel.source[kernel.source.index("__global__"):]
    assert "tdsl_ptx_wgmma_m64n64k16_f32_" in body and "C[" not in body and "C_acc[" in body


@pytest.mark.parametrize("out, value", [RELU[:2], HALF[:2]], ids=["bias-relu", "scale-bias-fp16"])
def test_sm90a_epilogue_sass_has_hgmma_utmaldg_syncs_and_no_local_memory(out, value):
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda import stats

    if stats.cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    sch = tdsl.auto_schedule(gemm_epilogue(256, 256, 256, out, value), target="cuda", arch="sm_90a")
    assert "wgmma_pipeline" in steps(sch)
    kernel = tdsl.build(sch, target="cuda", arch="sm_90a")
    ops = stats.opcodes(kernel.cubin)
    for op in ("HGMMA", "UTMALDG", "SYNCS"):
        assert any(o.startswith(op) for o in ops), (op, sorted(ops))
    assert not any(o.startswith(("LDL", "STL")) for o in ops), sorted(ops)
    for name, usage in kernel.stats.resources.items():
        assert usage["registers"] <= 255 and usage["local"] == 0 and usage["stack"] == 0, (name, usage)


def test_a_gemm_the_pipeline_does_not_fit_falls_back_with_a_note():
    """The note is left at the epilogue's turn (blocks come consumers first), before the rules after
    the pipeline's schedule the epilogue; the GEMM's own turn does not note it again."""
    f = gemm_epilogue(128, 128, 64, "float32", "T.max(C[vj, vi], T.float32(0))")
    why = 'its epilogue block "D" reads C at another index than the one it writes'
    sch = tdsl.auto_schedule(f, target="cuda", arch="sm_90a")
    assert "wgmma_pipeline" not in steps(sch) and "tensorize" in steps(sch)
    from tdsl.lower import lower

    notes = [v for k, v in lower(sch, target="cuda").attrs if k == "tdsl.lower_notes"]
    text = " ".join(n for v in notes for n in (v if isinstance(v, tuple) else (v,)))
    assert f"block 'C': not on the sm_90a wgmma pipeline ({why}" in text, text
    assert text.count("not on the sm_90a wgmma pipeline") == 1, text


def test_a_tensor_map_naming_no_buffer_is_refused():
    """(Exporting such kernels: tests/cuda/test_export_tensor_maps.py.)"""
    pytest.importorskip("cuda.bindings")
    sch = tdsl.auto_schedule(gemm(64, 64, 128), target="cuda", arch="sm_90a")
    from tdsl.ir.attrs import set_attr

    func = set_attr(sch.func, "tdsl.tensor_map:A_tmap", "X (64, 64) 128B")
    with pytest.raises(tdsl.TargetError, match="tensor map 'A_tmap'.*no parameter or function-level global buffer 'X'"):
        tdsl.build(func, target="cuda", arch="sm_90a")


# ---------------------------------------------------------------------------- the driver's tensor maps

@pytest.fixture
def fake(monkeypatch):
    pytest.importorskip("cuda.bindings")
    import cuda.bindings
    from fake_cuda_driver import FakeDriver

    from tdsl.backends.cuda import runtime
    from tdsl.backends.cuda.nvrtc import nvrtc_version

    nvrtc_version()   # load cuda.bindings.nvrtc (which imports the real driver module) first
    state = {}
    drv = FakeDriver(lambda *args: state["hook"](*args))
    monkeypatch.setattr(cuda.bindings, "driver", drv, raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", drv)
    for attr in ("info", "context", "device", "error"):
        monkeypatch.setattr(runtime._State, attr, None)
    monkeypatch.setattr(runtime._State, "local", __import__("threading").local())
    drv.state = state
    return drv


@pytest.mark.parametrize("dtype, enum, trans_b", [("float16", "FLOAT16", False), ("bfloat16", "BFLOAT16", True)])
def test_call_encodes_tensor_maps_with_cuTensorMapEncodeTiled(fake, dtype, enum, trans_b):
    M, N, K = 128, 64, 256
    sch = tdsl.auto_schedule(gemm(M, N, K, dtype, trans_b), target="cuda", arch="sm_90a")
    kernel = tdsl.build(sch, target="cuda", arch="sm_90a")
    (main,) = kernel.kernels          # (B[k, j] too: read N-major by TMA, no transposing kernel)
    names = [p.name for p in main.params]
    seen = {}

    def hook(name, grid, block, params):
        assert name == main.name
        ptrs = [ctypes.c_void_p.from_address(p).value for p in (ctypes.c_void_p * len(names)).from_address(params)]
        assert grid == (N // 64, M // 64, 1) and block == (128, 2, 1)
        seen.update({n: p for n, p in zip(names, ptrs)})
        seen["maps"] = {n: np.frombuffer(ctypes.string_at(seen[n], 128), np.uint64).copy()
                        for n in ("A_tmap", "B_tmap")}

    fake.state["hook"] = hook
    a, b, _ = operands(M, N, K, dtype, trans_b)
    kernel(a, b)
    calls = fake.tensor_maps
    assert len(calls) == 3                                       # A, B, C (the TMA store)
    from cuda.bindings import driver as real

    b_rows, b_cols = (N, K) if trans_b else (K, N)               # B[j, k] or B[k, j] (boxes of 64 columns)
    for call, (tensor, rows, cols, box, kind, elem, swizzle) in zip(calls, [
            ("A", M, K, (64, 64), enum, 2, "128B"), ("B", b_rows, b_cols, (64, 64), enum, 2, "128B"),
            ("C", M, N, (64, 64), "FLOAT32", 4, "NONE")]):
        assert call["dtype"] == getattr(real.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{kind}")
        assert call["rank"] == 2
        assert call["dims"] == [cols, rows]                      # innermost first
        assert call["strides"] == [cols * elem]                  # bytes, dimensions 1 .. rank-1
        assert call["box"] == [box[1], box[0]]                   # innermost first
        assert call["element_strides"] == [1, 1]
        assert call["interleave"] == real.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE
        assert call["swizzle"] == getattr(real.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swizzle}")
        assert call["l2_promotion"] == real.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B
        assert call["oob_fill"] == real.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE
        assert call["address"] == seen[tensor]
    # the kernel reads the driver's 128 bytes from its tensor-map buffers
    for k, name in enumerate(("A_tmap", "B_tmap"), 1):
        np.testing.assert_array_equal(seen["maps"][name], [(k << 32) + i for i in range(16)])


@needs_cxx
@pytest.mark.parametrize("stages", [1, 2])
def test_the_one_warpgroup_form_runs_in_the_emulator_too(stages):
    """wgmma_pipeline without warp_specialize: thread 0 produces, every thread consumes (with one
    stage each step waits for its own wgmma before releasing the stage)."""
    f = gemm(64, 64, 256)
    sch = tdsl.Schedule(f)
    sch.wgmma_pipeline(sch.get_block("C"), stages=stages)
    a, b, want = operands(64, 64, 256, "float16")
    np.testing.assert_array_equal(tdsl.build(sch, target="cuda", emulate=True)(a, b), want)
    assert ("T.ptx_wgmma_wait_group(1)" in sch.func.script()) == (stages > 1)


def test_every_decision_of_the_rule_is_live():
    """A search replays the rule's decisions with other values: for each decision, two valid
    choices that differ in it alone build different kernels."""
    import itertools

    f = gemm(128, 128, 256)
    sch = tdsl.auto_schedule(f, target="cuda", arch="sm_90a")
    steps_ = [k for k, ins in enumerate(sch.trace) if ins.kind == "sample_categorical"]
    sizes = [len(dict(list(sch.trace)[k].attrs)["candidates"]) for k in steps_]
    built = {}
    for choice in itertools.product(*(range(n) for n in sizes)):
        try:
            built[choice] = tdsl.structural_hash(sch.trace.with_decisions(dict(zip(steps_, choice))).apply(f).func)
        except tdsl.ScheduleError:
            continue     # a combination that does not fit (the step refuses it)
    for axis in range(len(steps_)):
        assert any(built[c] != built[d] for c in built for d in built
                   if c[axis] != d[axis] and c[:axis] + c[axis + 1:] == d[:axis] + d[axis + 1:]), axis
