"""Each schedule rule on a small kernel: what it does, and that the result means the same."""
from __future__ import annotations

import numpy as np
import pytest
from auto_check import BMM, CHAIN, CONV, CONV_NARROW, DEPTHWISE, ROWSUM_SYMBOLIC, SOFTMAX, gemm, same_meaning

import tdsl
from tdsl.auto import (
    AutoInline,
    ComputeLocation,
    GPUBind,
    GPUMatmulTiling,
    Hardware,
    MatmulTensorizeCPU,
    MultiLevelTilingCPU,
    ParallelVectorizeUnroll,
    Rule,
    TensorizeMatching,
    VectorReduction,
)
from tdsl.auto.analysis import blocks_in_nest
from tdsl.auto.rules.matmul_cpu import default_tiles, mc_candidates
from tdsl.intrinsics import x86

AVX2 = Hardware("cpu", isa="avx2", lanes=8, cores=2)
CUDA = Hardware("cuda", lanes=1)


def _one(rule: Rule, sch: tdsl.Schedule, block: str) -> tdsl.Schedule:
    before, steps = sch.func, len(sch.trace)
    out = rule(sch, block)
    assert out and all(isinstance(s, tdsl.Schedule) for s in out)
    assert sch.func is before and len(sch.trace) == steps, "a rule changed the schedule it was given"
    return out[0]


def test_a_rule_that_does_not_apply_returns_the_schedule_itself():
    sch = tdsl.Schedule(tdsl.parse(CHAIN))
    assert VectorReduction(AVX2)(sch, "relu") == [sch]
    assert MatmulTensorizeCPU(AVX2)(sch, "mul") == [sch]
    assert AutoInline(AVX2)(sch, "no_such_block") == [sch]


def test_auto_inline_collapses_an_elementwise_chain():
    f = tdsl.parse(CHAIN)
    sch = tdsl.Schedule(f)
    for name in ("mul", "add"):
        sch = _one(AutoInline(AVX2), sch, name)
    text = sch.func.script()
    assert 'T.block("mul")' not in text and 'T.block("add")' not in text
    same_meaning(sch, f)


def test_auto_inline_keeps_padding_for_a_micro_kernel_and_offers_inlining_second():
    f = tdsl.parse(CONV)
    sch = tdsl.Schedule(f)
    out = AutoInline(AVX2)(sch, "pad")
    assert len(out) == 2
    assert 'T.block("pad")' in out[0].func.script() and 'T.block("pad")' not in out[1].func.script()
    for s in out:
        same_meaning(s, f)
    # without a micro-kernel (CUDA, or a CPU without AVX2) padding is simply inlined
    assert len(AutoInline(Hardware("cpu", isa="", lanes=4))(sch, "pad")) == 1


def test_auto_inline_does_not_duplicate_transcendental_work():
    sch = tdsl.Schedule(tdsl.parse(SOFTMAX))
    assert AutoInline(AVX2)(sch, "exp") == [sch]  # exp has two readers (sum and norm)


def test_matmul_tensorize_packs_tiles_and_tensorizes(tmp_path):
    f = gemm(32, 32, 32)
    sch = _one(MatmulTensorizeCPU(AVX2), tdsl.Schedule(f), "C")
    text = str(sch.trace)
    for step in ('cache_read(b0, buffer="B", scope="global")', 'cache_read(b0, buffer="A", scope="global")',
                 "transform_layout", "decompose_reduction", 'tensorize(', "x86.avx2.fp32_", "sch.parallel("):
        assert step in text, text
    assert "tdsl.tensor_intrin" in sch.func.script()
    same_meaning(sch, f)


def test_matmul_tensorize_offers_a_sketch_per_micro_tile():
    tiles = default_tiles(64, 64, 64, 8, 32 * 1024)
    assert tiles[0].nr == 16 and tiles[0].mr * tiles[0].nr // 8 <= 12  # the hand GEMM's tile first
    assert len({(t.mr, t.nr) for t in tiles}) == len(tiles) > 1
    out = MatmulTensorizeCPU(AVX2)(tdsl.Schedule(gemm(64, 64, 64)), "C")
    assert len(out) == len(tiles)
    counts, default = mc_candidates(1024, 4, 256, 256, 512 * 1024, 2)
    assert counts[default] * 4 * 16 <= 1024 and (1024 // (counts[default] * 4)) >= 16


def test_avx512_default_tile_holds_16_accumulators_and_keeps_the_12_register_tiles():
    # 32 zmm: the default C tile is 8 x 32 (16 accumulators); the tiles the 12-accumulator rule
    # picks (4 x 32 x 128, 2 x 64 x 64: KC from half of L1) stay in the space as later sketches, each once
    tiles = default_tiles(1024, 1024, 1024, 16, 48 * 1024, accumulators=16)
    assert (tiles[0].mr, tiles[0].nr, tiles[0].kc) == (8, 32, 256)   # its B sliver: 32 KiB of 48
    assert all(t.mr * t.nr // 16 <= 16 for t in tiles)
    old = default_tiles(1024, 1024, 1024, 16, 48 * 1024)
    assert (old[0].mr, old[0].nr) == (4, 32) and all(t in tiles for t in old)
    assert len(set(tiles)) == len(tiles)
    # AVX2 (16 ymm) keeps the 12-accumulator rule
    assert default_tiles(1024, 1024, 1024, 8, 48 * 1024, accumulators=x86.ACCUMULATORS["avx2"]) == \
        default_tiles(1024, 1024, 1024, 8, 48 * 1024)


def test_matmul_tensorize_batched_and_conv2d():
    f = tdsl.parse(BMM)
    same_meaning(_one(MatmulTensorizeCPU(AVX2), tdsl.Schedule(f), "C"), f)
    f = tdsl.parse(CONV)
    sch = _one(MatmulTensorizeCPU(AVX2), tdsl.Schedule(f), "conv")
    text = str(sch.trace)
    # the padded input is stored channels-next-to-columns and written in that order
    assert "lambda v0, v1, v2, v3: (v0, v2, v1, v3)" in text and "x86.avx2.fp32_" in text
    same_meaning(sch, f)


def test_matmul_tensorize_result_builds_and_runs():
    f = gemm(32, 48, 32)
    sch = _one(MatmulTensorizeCPU(AVX2), tdsl.Schedule(f), "C")
    from tdsl.intrinsics import x86

    if "avx2" not in x86.available():
        pytest.skip("this CPU has no AVX2")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 32), dtype=np.float32), rng.standard_normal((32, 48), dtype=np.float32)
    np.testing.assert_allclose(tdsl.build(sch)(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_multi_level_tiling_cpu_register_tile_on_depthwise():
    f = tdsl.parse(DEPTHWISE)
    sch = _one(MultiLevelTilingCPU(AVX2), tdsl.Schedule(f), "Y")
    text = sch.func.script()
    assert 'scope="local"' in text and "T.vectorized" in text
    same_meaning(sch, f)


def test_multi_level_tiling_tiles_filters_and_a_row_no_vector_divides():
    """conv2d with 12 columns on 8 lanes: a 12-wide vector tile (no split remainder) times an
    unrolled tile of filters, each input vector loaded once for all of them; every width and
    filter count the sketch offers computes the same numbers."""
    from tdsl.auto.rules.tiling_cpu import reuse_counts, vector_widths

    assert vector_widths(28, 8) == [14, 28, 7, 4] and vector_widths(64, 8) == [16, 8, 32]
    assert vector_widths(None, 8) == [16, 8, 32] and reuse_counts(32, 2) == [2, 4] and reuse_counts(7, 2) == []
    f = tdsl.parse(CONV_NARROW)
    assert "12" in f.script()
    sch = _one(MultiLevelTilingCPU(AVX2), tdsl.Schedule(f), "conv")
    text = sch.func.script()
    assert "T.vectorized(12)" in text and "T.unroll(4)" in text and 'scope="local"' in text
    same_meaning(sch, f)
    steps = sorted(sch.trace.decisions)
    assert len(steps) == 2
    widths, counts = (dict(sch.trace.instructions[k].attrs)["candidates"] for k in steps)
    assert widths == [12, 6, 4] and counts == [2, 4]
    for wk, ck in [(1, 0), (2, 1), (0, 0)]:
        same_meaning(sch.trace.with_decisions({steps[0]: wk, steps[1]: ck}).apply(f), f)


def test_multi_level_tiling_skips_reductions_without_a_contiguous_output_axis():
    sch = tdsl.Schedule(tdsl.parse(ROWSUM_SYMBOLIC))
    assert MultiLevelTilingCPU(AVX2)(sch, "B") == [sch]


def test_vector_reduction_rfactors_the_row():
    f = tdsl.parse(ROWSUM_SYMBOLIC)
    sch = _one(VectorReduction(AVX2), tdsl.Schedule(f), "B")
    text = sch.func.script()
    assert 'T.block("B_rf")' in text and "T.vectorized" in text
    for n in (1, 5, 9):
        same_meaning(sch, f, {"n": n})


@pytest.mark.parametrize("defaults", [True, False])
def test_compute_location_moves_producers_into_the_row_loop(defaults):
    f = tdsl.parse(SOFTMAX)
    sch = tdsl.Schedule(f)
    for name in ("sum", "exp", "max"):
        sch = _one(ComputeLocation(AVX2, defaults), sch, name)
    # the location is the sketch's structure, not a decision a search would re-sample
    assert str(sch.trace).count("sch.compute_at(") == 3 and not sch.trace.decisions
    row = sch.get_loops(sch.get_block("norm"))[0].var
    for name in ("sum", "exp", "max"):
        assert sch.get_loops(sch.get_block(name))[0].var is row  # all under the row loop
    same_meaning(sch, f)


def test_every_softmax_sketch_fuses_the_row_passes():
    """The search's sketches (random decisions) keep the hand schedule's structure: max, exp
    and sum computed in the row loop of norm, exp once (not inlined into its two readers)."""
    f = tdsl.parse(SOFTMAX)
    space = tdsl.space(f, "cpu", seed=3)
    assert len(space) >= 2
    for sketch in space:
        text = sketch.func.script()
        assert text.count("T.exp(") == 1
        nest = blocks_in_nest(sketch.func, "norm")    # the blocks under norm's row loop
        assert {"max", "exp", "sum"} <= set(nest) and "T.parallel" in text
        same_meaning(sketch, f)


def test_compute_location_keeps_padding_at_the_root_as_a_second_sketch():
    f = tdsl.parse(CONV)
    sch = _one(MultiLevelTilingCPU(AVX2), tdsl.Schedule(f), "conv")
    out = ComputeLocation(AVX2)(sch, "pad")
    assert len(out) == 2
    moved, root = out
    assert len(moved.get_loops(moved.get_block("pad"))) > 4       # under a conv loop ...
    assert moved.get_loops(moved.get_block("pad"))[0].var is moved.get_loops(moved.get_block("conv"))[0].var
    assert len(root.get_loops(root.get_block("pad"))) == 4        # ... or a pass of its own
    for s in out:
        same_meaning(s, f)


def test_parallel_vectorize_unroll():
    f = tdsl.parse(CHAIN)
    sch = _one(ParallelVectorizeUnroll(AVX2), tdsl.Schedule(f), "relu")
    text = sch.func.script()
    assert "T.parallel" in text and "T.vectorized" in text and "pragma_auto_unroll_max_step" in text
    same_meaning(sch, f)


def test_parallel_vectorize_streams_large_outputs():
    big = CHAIN.replace("(16, 40)", "(512, 1024)").replace("T.grid(16, 40)", "T.grid(512, 1024)")
    sch = _one(ParallelVectorizeUnroll(Hardware("cpu", isa="avx2", lanes=8, cores=2, l2=256 * 1024)),
               tdsl.Schedule(tdsl.parse(big)), "relu")
    assert "tdsl.nontemporal" in sch.func.script()


def test_tensorize_matching_uses_registered_intrinsics():
    desc = tdsl.parse('''
@T.prim_func
def desc(A: T.Buffer((8,), "float32"), D: T.Buffer((8,), "float32")):
    for j in range(8):
        with T.block("relu"):
            vj = T.axis.spatial(8, j)
            D[vj] = T.max(A[vj] * T.float32(2), T.float32(0))
''')
    impl = tdsl.parse('''
@T.prim_func
def impl(A: T.Buffer((8,), "float32"), D: T.Buffer((8,), "float32")):
    D[T.Ramp(0, 1, 8)] = T.max(A[T.Ramp(0, 1, 8)] * T.Broadcast(T.float32(2), 8), T.Broadcast(T.float32(0), 8))
''')
    name = "test.auto.relu2_8"
    if not tdsl.TensorIntrin.exists(name):
        tdsl.TensorIntrin.register(name, desc, impl, target="cpu")
    f = tdsl.parse('''
@T.prim_func
def relu2(A: T.Buffer((4, 8), "float32"), D: T.Buffer((4, 8), "float32")):
    for i, j in T.grid(4, 8):
        with T.block("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = T.max(A[vi, vj] * T.float32(2), T.float32(0))
''')
    out = TensorizeMatching(AVX2)(tdsl.Schedule(f), "relu")
    assert any(f'"{name}"' in str(s.trace) for s in out)
    for s in out:
        same_meaning(s, f)


def test_gpu_matmul_tiling_stages_shared_and_local():
    f = gemm(64, 64, 32)
    sch = _one(GPUMatmulTiling(CUDA), tdsl.Schedule(f), "C")
    text = sch.func.script()
    for needle in ('scope="shared"', 'scope="local"', '"blockIdx.x"', '"threadIdx.y"'):
        assert needle in text
    same_meaning(sch, f)


def test_gpu_bind_elementwise_and_unparallelizable_nests():
    f = tdsl.parse(CHAIN)
    sch = _one(GPUBind(CUDA), tdsl.Schedule(f), "relu")
    assert '"threadIdx.x"' in sch.func.script()
    same_meaning(sch, f)
    scan = tdsl.parse('''
@T.prim_func
def scan(A: T.Buffer((20,), "float32"), B: T.Buffer((20,), "float32")):
    for i in range(20):
        with T.block("B"):
            vi = T.axis.spatial(20, i)
            B[vi] = A[vi] + T.if_then_else(vi > 0, B[vi - 1], T.float32(0))
''')
    sch = _one(GPUBind(CUDA), tdsl.Schedule(scan), "B")
    assert 'T.thread_binding(1, thread="threadIdx.x")' in sch.func.script()
    same_meaning(sch, scan)


class _SplitBy4(Rule):
    """A user rule: split the innermost loop by 4."""

    name = "split-by-4"

    def alternatives(self, sch, block):
        def make(s):
            s.split(s.get_loops(s.get_block(block))[-1], [None, 4])
        return [make]


def test_user_rules_join_a_pass_and_user_spaces_replace_the_rules():
    from tdsl.auto import default_passes, sketches

    f = tdsl.parse(CHAIN)
    passes = default_passes(AVX2)
    passes[1].insert(0, _SplitBy4(AVX2))
    sch = tdsl.auto_schedule(f, AVX2, passes=passes)
    assert "factors=[None, 4]" in str(sch.trace)
    same_meaning(sch, f)

    def space(s):
        b = s.get_block("relu")
        _, j = s.get_loops(b)
        s.split(j, s.sample_perfect_tile(j, 2))

    (only,) = sketches(f, "cpu", space=space, seed=3)
    assert "sample_perfect_tile" in str(only.trace)
    same_meaning(only, f)


def test_registered_rules_join_every_default_space():
    from tdsl.auto import register_rule, unregister_rule

    f = tdsl.parse(CHAIN)
    register_rule(_SplitBy4, stage="tiling")
    try:
        assert "factors=[None, 4]" in str(tdsl.auto_schedule(f, "cpu").trace)
        assert "factors=[None, 4]" not in str(tdsl.auto_schedule(f, "cuda").trace)  # registered for the CPU
    finally:
        unregister_rule(_SplitBy4)
    assert "factors=[None, 4]" not in str(tdsl.auto_schedule(f, "cpu").trace)
    with pytest.raises(ValueError, match="stage"):
        register_rule(_SplitBy4, stage="nowhere")


def test_row_prefetch_tensorizes_a_row_step_with_a_generated_intrinsic():
    from tdsl.auto import RowPrefetch, default_passes, sketches

    f = tdsl.parse(SOFTMAX)
    passes = default_passes(AVX2)
    sch = sketches(f, AVX2, passes=passes[:2], defaults=True, limit=1)[0]
    out = RowPrefetch(AVX2)(sch, "exp")
    assert len(out) == 2
    text = str(out[0].trace)
    assert 'intrin_name="auto.row_prefetch_exp_32_' in text
    impl = tdsl.TensorIntrin.get(text.split('intrin_name="')[1].split('"')[0]).impl.script()
    assert "llvm.prefetch" in impl and "T.vectorized(32)" in impl
    assert "tensorize" not in str(out[1].trace)
    same_meaning(out[0], f)
    # the first row of the nest reads A first: no prefetch there (nothing earlier to help)
    assert RowPrefetch(AVX2)(sch, "max_rf_init") == [sch]
    x = np.random.default_rng(0).standard_normal((8, 64)).astype("float32")
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(tdsl.build(out[0])(x), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_a_prefetching_output_step_still_gets_streaming_stores():
    """layernorm's norm block reads A after the sums did: RowPrefetch tensorizes it (block
    norm_o, no single store), and the streaming-store decision still applies to it."""
    from corpus import CORPUS

    from tdsl.auto import sketches

    case = next(c for c in CORPUS if c.name == "layernorm")
    tiny_l2 = Hardware("cpu", isa="avx2", lanes=8, cores=2, l2=256)   # B counts as larger than the caches
    sch = sketches(case.func, tiny_l2, defaults=True, limit=1)[0]
    text = str(sch.trace)
    assert 'sch.get_block("norm_o")' in text and 'key="tdsl.nontemporal"' in text
    assert "row_prefetch_norm" in text
    same_meaning(sch, case.func)


def test_gpu_matmul_tiling_respects_the_thread_and_shared_memory_limits():
    sch = tdsl.Schedule(gemm(64, 64, 32))
    assert GPUMatmulTiling(Hardware("cuda", lanes=1, max_threads=16))(sch, "C") == [sch]
    assert GPUMatmulTiling(Hardware("cuda", lanes=1, max_shared=1024))(sch, "C") == [sch]


HGEMM = '''
@T.prim_func
def hgemm(A: T.Buffer((32, 48), "float16"), B: T.Buffer((48, 32), "float16"), C: T.Buffer((32, 32), "float32")):
    for i, j, k in T.grid(32, 32, 48):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")
'''


def test_gpu_wmma_tiling_tensorizes_fp16_gemms_onto_tensor_cores():
    from tdsl.auto import GPUWmmaTiling

    f = tdsl.parse(HGEMM)
    sch = _one(GPUWmmaTiling(CUDA), tdsl.Schedule(f), "C")
    text = str(sch.trace)
    for name in ("fill_16x16_f32", "load_a_16x16_f16_global", "load_b_16x16_f16_global", "mma_16x16x16_f16f32",
                 "store_16x16_f32_global"):
        assert f"cuda.wmma.{name}" in text
    a = np.random.default_rng(0).standard_normal((32, 48)).astype("float16")
    b = np.random.default_rng(1).standard_normal((48, 32)).astype("float16")
    np.testing.assert_allclose(tdsl.build(sch, target="cpu")(a, b), a.astype("float32") @ b.astype("float32"),
                               rtol=1e-3, atol=1e-3)
    assert GPUWmmaTiling(CUDA)(tdsl.Schedule(gemm(32, 32, 32)), "C")[0].trace.decisions == {}  # fp32: no
    pytest.importorskip("cuda.bindings")
    for arch in ("sm_80", "sm_90"):
        assert tdsl.build(sch, target="cuda", arch=arch).cubin


def test_gpu_cross_thread_reduction_binds_the_reduction_to_threads():
    from tdsl.auto import GPUCrossThreadReduction

    f = tdsl.parse(ROWSUM_SYMBOLIC.replace("48", "256").replace("T.grid(n, 256)", "T.grid(n, 256)"))
    sch = _one(GPUCrossThreadReduction(CUDA), tdsl.Schedule(f), "B")
    text = sch.func.script()
    assert 'T.thread_binding(256, thread="threadIdx.x")' in text and '"blockIdx.x"' in text
    for n in (1, 5):
        same_meaning(sch, f, {"n": n})
    assert GPUCrossThreadReduction(AVX2)(tdsl.Schedule(f), "B")  # CPU: not applicable, unchanged
    pytest.importorskip("cuda.bindings")
    assert tdsl.build(sch, target="cuda", arch="sm_80").cubin
