"""B indexed [k, j] on the sm_90a pipeline without a transposing kernel: T.ptx_wgmma(...,
b_major="mn") reads B N-major from TMA boxes of [tile_k rows, 64 columns] (128B swizzle; 32 / 16
columns: 64B / 32B) side by side. The builtin parses, prints back, refuses what does not fit and
means B[k, col] in the interpreter; the pipeline equals numpy in the interpreter and the emulator
for B[k, j] and B[j, k], fp16 and bf16, batched (B shared by the batch or not), one box or two; the
sm_90a SASS has HGMMA .tnspB, UTMALDG and no local memory."""
import shutil

import ml_dtypes
import numpy as np
import pytest

import tdsl

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler (the emulator needs one)")
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}

ONE_WGMMA = '''
@T.prim_func
def mn(A: T.Buffer((64, 16), "float16"), B: T.Buffer((16, 128), "float16"), C: T.Buffer((64, 128), "float32")):
    A_sh = T.alloc_buffer((64, 16), "float16", scope="shared")
    B_sh = T.alloc_buffer((2, 16, 64), "float16", scope="shared")
    acc = T.alloc_buffer((128, 64), "float32", scope="local")
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        for r in range(8):
            A_sh[tx // 2, tx % 2 * 8 + r] = A[tx // 2, tx % 2 * 8 + r]
        for r in range(16):
            B_sh[r // 8, tx // 8, tx % 8 * 8 + r % 8] = B[tx // 8, r // 8 * 64 + tx % 8 * 8 + r % 8]
        for i in range(64):
            acc[tx, i] = T.float32(0)
    for tx in T.thread_binding(128, thread="threadIdx.x"):
        T.evaluate(T.ptx_wgmma(acc[tx, 0], A_sh[0, 0], B_sh[0, 0, 0], 128, tx, b_major="mn"))
        for i in range(64):
            C[16 * (tx // 32) + tx % 32 // 4 + 8 * (i // 2 % 2), 8 * (i // 4) + 2 * (tx % 4) + i % 2] = acc[tx, i]
'''


def test_b_major_mn_round_trips_and_means_b_k_col_in_the_interpreter():
    f = tdsl.parse(ONE_WGMMA)
    text = f.script()
    assert 'T.ptx_wgmma(acc[tx_1, 0], A_sh[0, 0], B_sh[0, 0, 0], 128, tx_1, b_major="mn")' in text
    assert tdsl.structural_diff(tdsl.parse(text), f) is None
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (64, 16)).astype(np.float16)
    b = rng.integers(-3, 4, (16, 128)).astype(np.float16)
    np.testing.assert_array_equal(tdsl.interpret(f, a, b), a.astype(np.float32) @ b.astype(np.float32))


@pytest.mark.parametrize("old, new, words", [
    ('b_major="mn"', 'b_major="nk"', ['b_major of T.ptx_wgmma is "k" (B K-major) or "mn" (B N-major)']),
    ('b_major="mn"', 'major="mn"', ["T.ptx_wgmma takes", 'optionally b_major="mn"']),
    ('B_sh = T.alloc_buffer((2, 16, 64)', 'B_sh = T.alloc_buffer((1, 16, 64)', ["N = 128 is 2 boxes of 64", "has 1"]),
    ('B_sh = T.alloc_buffer((2, 16, 64)', 'B_sh = T.alloc_buffer((2, 16, 48)', ["rows of B_sh are 96 bytes",
                                                                               "B N-major"]),
    ('B_sh = T.alloc_buffer((2, 16, 64)', 'B_sh = T.alloc_buffer((2, 8, 64)', ["needs 16 K rows", "has 8"]),
])
def test_b_major_mn_refuses_what_does_not_fit(old, new, words):
    with pytest.raises(tdsl.ScriptError) as info:
        tdsl.parse(ONE_WGMMA.replace(old, new))
    for w in words:
        assert w in str(info.value), str(info.value)


def gemm(M, N, K, dtype, trans_b, batch=None, b_batched=True):
    lead = f"{batch}, " if batch else ""
    blead = lead if b_batched else ""
    bshape = f"({blead}{N}, {K})" if trans_b else f"({blead}{K}, {N})"
    vb = "vb, " if batch else ""
    bidx = ("vb, " if batch and b_batched else "") + ("vj, vk" if trans_b else "vk, vj")
    loops, kinds = ("b, i, j, k", "SSSR") if batch else ("i, j, k", "SSR")
    return tdsl.parse(f'''
@T.prim_func
def gemm(A: T.Buffer(({lead}{M}, {K}), "{dtype}"), B: T.Buffer({bshape}, "{dtype}"),
         C: T.Buffer(({lead}{M}, {N}), "float32")):
    for {loops} in T.grid({lead}{M}, {N}, {K}):
        with T.block("C"):
            {vb}vi, vj, vk = T.axis.remap("{kinds}", [{loops}])
            with T.init():
                C[{vb}vi, vj] = T.float32(0)
            C[{vb}vi, vj] = C[{vb}vi, vj] + T.cast(A[{vb}vi, vk], "float32") * T.cast(B[{bidx}], "float32")
''')


def operands(f, seed=0):
    rng = np.random.default_rng(seed)
    a_buf, b_buf = f.params[0], f.params[1]
    t = NP[str(a_buf.dtype)]
    a = rng.integers(-2, 3, tuple(int(s.value) for s in a_buf.shape)).astype(t)
    b = rng.integers(-2, 3, tuple(int(s.value) for s in b_buf.shape)).astype(t)
    return a, b


CASES = [   # (dtype, B[j, k], batch, B batched, tile_n, tile_m)
    ("float16", False, None, True, 128, 64),      # two boxes of 64 columns per stage
    ("bfloat16", False, None, True, 64, 128),     # two consumer warpgroups
    ("float16", False, 2, True, 32, 64),          # batched, 32-column boxes (64B swizzle)
    ("bfloat16", False, 2, False, 128, 64),       # B shared by the batch
    ("float16", True, 2, True, 64, 64),           # B[j, k]: K-major as before
    ("bfloat16", True, None, True, 128, 128),
]


@needs_cxx
@pytest.mark.parametrize("dtype, trans_b, batch, b_batched, tile_n, tile_m", CASES)
def test_pipeline_reads_b_n_major_without_a_transpose_kernel(dtype, trans_b, batch, b_batched, tile_n, tile_m):
    f = gemm(tile_m, 128, 128, dtype, trans_b, batch, b_batched)
    sch = tdsl.Schedule(f)
    ko = sch.wgmma_pipeline(sch.get_block("C"), tile_n=tile_n, tile_k=32, stages=2, tile_m=tile_m)
    sch.warp_specialize(ko)
    text = sch.func.script()
    assert ('b_major="mn"' in text) != trans_b and "B_t = T.alloc_buffer" not in text
    a, b = operands(f)
    bk = np.swapaxes(b, -1, -2) if trans_b else b
    want = a.astype(np.float32) @ bk.astype(np.float32)
    np.testing.assert_array_equal(tdsl.interpret(sch.func, a, b), want)
    np.testing.assert_array_equal(tdsl.interpret(sch.func, a, b), tdsl.interpret(f, a, b))
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    assert len(kernel.kernels) == 1                       # no transposing kernel before the pipeline
    np.testing.assert_array_equal(kernel(a, b), want)
    assert ("_bmn(&C_acc[0]" in kernel.source) != trans_b


def test_a_tile_without_n_major_boxes_keeps_the_transpose():
    f = gemm(64, 64, 128, "float16", False)
    sch = tdsl.Schedule(f)
    sch.wgmma_pipeline(sch.get_block("C"), tile_n=8, tile_k=32)    # 16-byte rows: no swizzle span
    text = sch.func.script()
    assert "B_t = T.alloc_buffer" in text and 'b_major="mn"' not in text
    a, b = operands(f)
    np.testing.assert_array_equal(tdsl.interpret(sch.func, a, b), a.astype(np.float32) @ b.astype(np.float32))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sass_has_hgmma_with_a_transposed_b(dtype):
    pytest.importorskip("cuda.bindings")
    import subprocess
    import tempfile

    from tdsl.backends.cuda import stats

    if stats.cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    sch = tdsl.auto_schedule(gemm(256, 256, 256, dtype, False), target="cuda", arch="sm_90a")
    kernel = tdsl.build(sch, target="cuda", arch="sm_90a")
    assert len(kernel.kernels) == 1
    ops = stats.opcodes(kernel.cubin)
    for op in ("HGMMA", "UTMALDG", "UTMASTG"):
        assert any(o.startswith(op) for o in ops), (op, sorted(ops))
    assert not any(o.startswith(("LDL", "STL")) for o in ops), sorted(ops)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(kernel.cubin)
        fh.flush()
        sass = subprocess.run([stats.cuobjdump_path(), "-sass", fh.name], capture_output=True, text=True).stdout
    hgmma = [line for line in sass.splitlines() if "HGMMA" in line]
    assert hgmma and all(".tnspB" in line for line in hgmma), hgmma[:3]
