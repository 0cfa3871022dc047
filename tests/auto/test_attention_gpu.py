"""The attention forward on CUDA as one fused kernel: the strict pattern (what is replaced and
what is left to the other rules), the IR it leaves (a block, then one call), the kernel's numbers
in the emulator against numpy, its races under other thread orders, and its SASS for sm_80 and
sm_90a (NVRTC and cuobjdump wheels)."""
import ctypes
import pathlib
import sys

import numpy as np
import pytest

import tdsl
from tdsl.backends.cuda.stats import cuobjdump_path, opcodes

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))

from attention_gpu import attention_lowp_func, attention_lowp_ref, attention_lowp_text  # noqa: E402
from bench_auto import attention_func  # noqa: E402

FUSED = 'sch.annotate(b7, key="tdsl.fused_kernel", value="cuda.flash_attention_fwd")'


def _emulator():
    from tdsl.backends.cuda.emulator.compiler import find_compiler

    try:
        find_compiler()
    except tdsl.TargetError as exc:
        pytest.skip(f"the CUDA emulator needs a host C++ compiler: {exc}")


def _fused(func) -> bool:
    return '"tdsl.fused_kernel"' in str(tdsl.auto_schedule(func, target="cuda").trace)


def _inputs(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        np_dtype = ml_dtypes.bfloat16
    else:
        np_dtype = np.float16
    return [rng.standard_normal(shape).astype(np_dtype) for _ in range(3)]


@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(causal=True, scale_in="block"),
                                dict(out="float16", p_cast=True), dict(dtype="bfloat16", causal=True)],
                         ids=["plain", "causal", "scale-block", "f16-out", "bf16-causal"])
def test_the_pattern_is_fused_into_one_call(kw):
    func = attention_lowp_func(2, 128, 64, **kw)
    sch = tdsl.auto_schedule(func, target="cuda")
    trace = str(sch.trace)
    assert "sch.blockize([" in trace and 'key="tdsl.fused_kernel", value="cuda.flash_attention_fwd"' in trace
    # the block still holds the user's blocks (the interpreter runs them); lowering makes it one call
    assert tdsl.structural_diff(tdsl.parse(sch.func.script()), sch.func) is None
    lowered = tdsl.lower(sch, target="cuda").script()
    assert 'T.call_extern("void", "tdsl_flash_attention_fwd"' in lowered
    assert "thread_binding" not in lowered and "S = " not in lowered   # no other kernel, no score matrix
    causal = bool(kw.get("causal"))
    assert f", 2, 128, 64, {int(causal)}, T.float32(0.125))" in lowered


@pytest.mark.parametrize("causal", [False, True])
def test_emulated_fused_kernel_matches_numpy(causal):
    _emulator()
    func = attention_lowp_func(2, 128, 64, causal=causal)
    kernel = tdsl.build(tdsl.auto_schedule(func, target="cuda"), target="cuda", emulate=True)
    assert any("fused FlashAttention-2 kernel" in n and "info: " in n for n in kernel.notes)
    assert "tdsl_flash_attention_fwd_f16_d64" in kernel.source
    q, k, v = _inputs((2, 128, 64), "float16")
    out = kernel(q, k, v)
    np.testing.assert_allclose(out, attention_lowp_ref(q, k, v, causal), rtol=2e-3, atol=2e-3)


def test_emulated_fused_kernel_bf16_out_and_head_dim_128():
    _emulator()
    func = attention_lowp_func(2, 64, 128, dtype="bfloat16", causal=True, out="bfloat16", p_cast=True)
    kernel = tdsl.build(tdsl.auto_schedule(func, target="cuda"), target="cuda", emulate=True)
    q, k, v = _inputs((2, 64, 128), "bfloat16", seed=1)
    out = kernel(q, k, v)
    assert out.dtype == q.dtype
    np.testing.assert_allclose(out.astype(np.float64), attention_lowp_ref(q, k, v, True), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("order", [1, 2])
def test_fused_kernel_is_the_same_under_other_thread_orders(order):
    """Descending and shuffled thread orders give the same bits (no missing barrier, no cp.async
    race: the emulator raises on those)."""
    _emulator()
    from tdsl.backends.cuda.emulator.raw import run_source
    from tdsl.backends.cuda.flash_attention import AttentionShape, kernel_source, scale_log2

    shape = AttentionShape(2, 128, 64, "float16", "float32", True)
    q, k, v = _inputs((2, 128, 64), "float16", seed=2)
    from tdsl.backends.cuda.stats import parse_bank_report

    outs = []
    for o in (0, order):
        out = np.zeros((2, 128, 64), np.float32)
        report = run_source(kernel_source(shape), shape.name, [q, k, v, out, ctypes.c_float(scale_log2(0.125))],
                            grid=shape.grid, block=(128, 1, 1), order=o, seed=7)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    # the XOR-swizzled tiles: every ldmatrix phase in one wavefront (no bank conflict)
    counters = {c.buffer: c for c in parse_bank_report(shape.name, report, kernel_source(shape))}
    assert set(counters) == {"Qs", "Ks", "Vs"}
    assert all(c.instructions > 0 and c.worst == 1 and not c.conflicted for c in counters.values()), counters


def test_the_annotated_function_keeps_its_meaning_in_the_interpreter():
    func = attention_lowp_func(1, 64, 64, causal=True)
    sch = tdsl.auto_schedule(func, target="cuda")
    q, k, v = _inputs((1, 64, 64), "float16", seed=3)
    got = np.zeros((1, 64, 64), np.float32)
    tdsl.interpret(sch.func, q, k, v, got)
    np.testing.assert_allclose(got, attention_lowp_ref(q, k, v, True), rtol=1e-4, atol=1e-4)
    # the trace replays to the same function, and a CPU build computes the blocks as written
    assert tdsl.structural_diff(sch.trace.apply(func).func, sch.func) is None
    np.testing.assert_allclose(tdsl.build(sch, target="cpu")(q, k, v), got, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("what,func", [
    ("float32 inputs", lambda: attention_func(2, 128, 64)),
    ("sequence 96", lambda: attention_lowp_func(2, 96, 64)),
    ("head dim 32", lambda: attention_lowp_func(2, 128, 32)),
    ("mask j < i", lambda: tdsl.parse(attention_lowp_text(2, 128, 64, causal=True).replace("vj <= vi", "vj < vi"))),
    ("mask value 0", lambda: tdsl.parse(attention_lowp_text(2, 128, 64, causal=True).replace('T.float32("-inf")',
                                                                                        "T.float32(0)"))),
    ("negative scale", lambda: tdsl.parse(attention_lowp_text(2, 128, 64).replace("T.float32(0.125)",
                                                                                   "T.float32(-0.125)"))),
    ("K not transposed", lambda: tdsl.parse(attention_lowp_text(2, 128, 64).replace("K[vb, vj, vk]", "K[vb, vk, vj]")
                                            .replace('K: T.Buffer((2, 128, 64)', 'K: T.Buffer((2, 64, 128)'))),
    ("sum not from 0", lambda: tdsl.parse(attention_lowp_text(2, 128, 64).replace(
        "L[vb, vi] = T.float32(0)", "L[vb, vi] = T.float32(1)"))),
    ("fp16 products", lambda: tdsl.parse(attention_lowp_text(2, 128, 64).replace(
        'T.cast(Q[vb, vi, vk], "float32") * T.cast(K[vb, vj, vk], "float32")',
        'T.cast(Q[vb, vi, vk] * K[vb, vj, vk], "float32")'))),
])
def test_anything_else_is_left_to_the_other_rules(what, func):
    assert not _fused(func()), what


def test_an_intermediate_read_elsewhere_is_not_fused():
    text = attention_lowp_text(2, 128, 64).replace(
        '    for b, i, j, k in T.grid(2, 128, 64, 128):',
        '    for b, i in T.grid(2, 128):\n        with T.block("keep"):\n            vb, vi = T.axis.remap("SS", [b, i])\n'
        '            W[vb, vi] = M[vb, vi]\n    for b, i, j, k in T.grid(2, 128, 64, 128):')
    text = text.replace('O: T.Buffer((2, 128, 64), "float32")):',
                        'O: T.Buffer((2, 128, 64), "float32"), W: T.Buffer((2, 128), "float32")):')
    assert not _fused(tdsl.parse(text))


def test_a_hand_annotated_block_that_is_not_attention_is_refused_at_lowering():
    func = tdsl.parse(attention_lowp_text(2, 128, 64).replace("vj <= vi", "vj < vi"))
    sch = tdsl.Schedule(func)
    outer = sch.blockize([sch.get_block(n) for n in ("qk", "max", "exp", "sum", "norm")])
    sch.annotate(outer, "tdsl.fused_kernel", "cuda.flash_attention_fwd")
    with pytest.raises(tdsl.TargetError, match="not the attention forward the kernel computes"):
        tdsl.lower(sch, target="cuda")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dim", [64, 128])
def test_sass_has_hmma_ldsm_ldgsts_and_no_local_memory(arch, dim):
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC comes with the cuda extra")
    if cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    from tdsl.backends.cuda.flash_attention import AttentionShape, kernel_source
    from tdsl.backends.cuda.nvrtc import compile_cuda
    from tdsl.backends.cuda.stats import resource_usage

    shape = AttentionShape(32, 4096, dim, "float16", "float16", True)
    cubin = compile_cuda(kernel_source(shape), arch, name="attention.cu").cubin
    ops = opcodes(cubin)
    count = lambda prefix: sum(n for op, n in ops.items() if op.startswith(prefix))   # noqa: E731
    # per key tile and warp: (dim / 16) x (BLOCK_N / 8) mma for Q K^T, (BLOCK_N / 16) x (dim / 8) for P V
    assert count("HMMA.16816.F32") == 2 * (dim // 16) * (shape.block_n // 8)
    assert count("LDSM") > 0 and count("LDGSTS") > 0
    assert count("LDL") == 0 and count("STL") == 0
    usage = resource_usage(cubin)[shape.name]
    assert usage["local"] == 0 and usage["stack"] == 0


def test_the_docs_example_is_fused(tmp_path):
    """docs/gpu_pipelines.md, "Attention forward as one fused kernel": its function is fused and
    lowers to the call the page shows."""
    import re
    import runpy

    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "gpu_pipelines.md"
    section = doc.read_text().split("## Attention forward as one fused kernel", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)\n```", section, re.S)
    example = tmp_path / "example.py"
    example.write_text("from tdsl import T\n" + blocks[0] + "\n")
    func = runpy.run_path(str(example))["attention"]
    sch = tdsl.auto_schedule(func, target="cuda")
    for line in blocks[1].splitlines()[3:]:
        assert line.lstrip("# ") in str(sch.trace)
    lowered = tdsl.lower(sch, target="cuda").script()
    shown = blocks[2].split("T.float32")[0].replace("\n", " ")
    assert " ".join(shown.split()) in " ".join(lowered.split())
