"""inject_software_pipeline (tdsl.lower.software_pipeline): TVM's loop annotations
software_pipeline_stage / _order / _async_stages turned into multi-buffered tiles, prologue,
steady state and epilogue, with cp.async commit/wait groups for async stages.

Numbers: every pipelined kernel runs in the CUDA emulator (several thread orders, races checked)
and must equal the interpreter, which ignores the annotations, and numpy. Structure: the IR after
the pass (versions of each buffer, the loop left, the wait counts) where it says something a
wrong pass would get wrong. The small kernels are TVM's InjectSoftwarePipeline test cases
(pipeline_kernels.py).
"""
import re

import numpy as np
import pytest
from cuda_kernels import emulate_matches_interpreter, matmul
from pipeline_kernels import (
    async_producer_interleaving,
    dag_interleaving,
    dynamic_compute,
    random_inputs,
    simple_compute,
    three_stage_compute,
    two_async_chains,
    vec_gemm,
)

import tdsl
from tdsl.ir import Allocate, For, collect


def _after_pass(func):
    return dict(tdsl.lower.stages(func, "cuda"))["inject_software_pipeline"]


def _shapes(func) -> dict[str, tuple[int, ...]]:
    return {a.buffer.name: tuple(int(s.value) for s in a.buffer.shape) for a in collect(func.body, Allocate)}


def _check_numbers(func, ref, shapes, **kw):
    inputs = random_inputs(shapes)
    want = ref(*inputs)
    out = np.zeros_like(want)
    tdsl.interpret(func, *inputs, out)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)   # the interpreter ignores the pipeline
    return emulate_matches_interpreter(func, **kw)


# ----------------------------------------------------------------------------- GEMM, hand-scheduled

def _annotated_matmul(stage, order=None, async_stages=None):
    f, ref = matmul()
    sch = tdsl.Schedule(f)
    ko = sch.get_loops(sch.get_block("A_sh"))[4]
    sch.annotate(ko, "software_pipeline_stage", stage)
    if order is not None:
        sch.annotate(ko, "software_pipeline_order", order)
    if async_stages is not None:
        sch.annotate(ko, "software_pipeline_async_stages", async_stages)
    return sch, ref


def test_pass_is_named_in_the_cuda_pipeline_and_shown_by_trace(capsys):
    sch, _ = _annotated_matmul([0, 0, 1])
    tdsl.lower(sch, target="cuda", trace=True)
    out = capsys.readouterr().out
    assert "# ---- after inject_software_pipeline ----" in out
    assert "# ---- after lower_async_copies ----" in out


@pytest.mark.parametrize("async_stages", [None, [0]])
def test_shared_memory_gemm_double_buffered(async_stages):
    sch, ref = _annotated_matmul([0, 0, 1], async_stages=async_stages)
    after = _after_pass(sch)
    assert _shapes(after)["A_sh"] == (2, 32, 8) and _shapes(after)["B_sh"] == (2, 8, 32)
    (steady,) = [f for f in collect(after.body, For) if f.loop_var.name == "ko"]
    assert (steady.min.value, steady.extent.value) == (1, 7)   # iteration 0's copies went to the prologue
    assert not dict(steady.annotations)                          # the pipeline annotations are consumed
    kernel = emulate_matches_interpreter(sch)
    if async_stages:
        # 4-byte copies (the copy loops are scalar): cp.async.ca, one group per iteration, wait for all but one
        assert "tdsl_cp_async_ca<4>(&A_sh[" in kernel.source
        assert kernel.source.count("tdsl_cp_async_wait<1>();") == 2   # steady state and epilogue
    else:
        assert "cp_async" not in kernel.source
    a, b = random_inputs([(64, 64), (64, 64)])
    np.testing.assert_allclose(kernel(a, b), ref(a, b), rtol=1e-4, atol=1e-4)


GEMM = """
@T.prim_func
def gemm(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    for i, j, k in T.grid(64, 64, 64):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""


def _primitive_gemm(pad: bool = False):
    """TVM's standard shared-memory schedule (cache_read + compute_at at the k-tile loop, a
    cooperative fetch with 4-wide vector copies, a local accumulator), then two annotations;
    `pad`: shared rows padded by 4 floats (storage_align)."""
    sch = tdsl.Schedule(tdsl.parse(GEMM))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    by, ty, ti = sch.split(i, factors=[None, 8, 4])
    bx, tx, tj = sch.split(j, factors=[None, 8, 4])
    ko, ki = sch.split(k, factors=[None, 16])
    sch.reorder(by, bx, ty, tx, ko, ki, ti, tj)
    for loop, axis in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        sch.bind(loop, axis)
    for name in ("A", "B"):
        s = sch.cache_read(c, name, "shared")
        sch.compute_at(s, ko)
        _, fy, fx, v = sch.split(sch.fuse(*sch.get_loops(s)[-2:]), factors=[None, 8, 8, 4])
        sch.bind(fy, "threadIdx.y")
        sch.bind(fx, "threadIdx.x")
        sch.vectorize(v)
        if pad:
            sch.storage_align(s, 0, axis=0, factor=32, offset=4)
    sch.reverse_compute_at(sch.cache_write(c, 0, "local"), tx)
    sch.annotate(ko, "software_pipeline_stage", [0, 0, 1])
    sch.annotate(ko, "software_pipeline_async_stages", [0])
    return sch


def test_gemm_scheduled_with_primitives_pipelines_by_annotation():
    sch = _primitive_gemm()
    kernel = emulate_matches_interpreter(sch, tol=1e-4)
    src = kernel.source.split("#endif")[-1]
    # A's copy reads 4 consecutive k of a 16-wide row (the fused copy index decoded by // 16 and
    # % 16): it vectorizes, so both copies are 16-byte cp.async
    assert src.count("tdsl_cp_async_cg16(&B_shared[") == 2 and src.count("tdsl_cp_async_cg16(&A_shared[") == 2
    assert "tdsl_cp_async_ca" not in src
    assert tdsl.lower.notes(tdsl.lower(sch, "cuda")) == []
    a, b = random_inputs([(64, 64), (64, 64)])
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_padded_shared_rows_keep_their_padding_in_every_version():
    # storage_align gives the tiles explicit strides (where GPU compaction keeps them): each
    # version is then a whole padded tile, one after the other
    sch = _primitive_gemm(pad=True)
    stages = dict(tdsl.lower.stages(sch, "cuda"))

    def a_shared(stage):
        (buf,) = [x.buffer for x in collect(stages[stage].body, Allocate) if x.buffer.name == "A_shared"]
        return buf

    old, new = a_shared("compact_gpu_buffers"), a_shared("inject_software_pipeline")
    assert [int(e.value) for e in new.shape] == [2] + [int(e.value) for e in old.shape]
    if old.strides:
        span = max(int(st.value) * int(e.value) for st, e in zip(old.strides, old.shape))
        assert [int(st.value) for st in new.strides] == [span] + [int(st.value) for st in old.strides]
    emulate_matches_interpreter(sch, tol=1e-4)


def test_vectorized_gemm_copies_become_16_byte_cp_async_cg():
    f = vec_gemm()
    kernel = _check_numbers(f, lambda a, b: a @ b, [(64, 64), (64, 64)])
    src = kernel.source.split("#endif")[-1]   # the kernel, after the cp.async helpers
    assert src.count("tdsl_cp_async_cg16(") == 4            # A and B, prologue and steady state
    assert "tdsl_cp_async_ca" not in src
    body = src.split("for (int ko")[1]
    # the wait precedes the barrier that precedes the reads of the landed tile
    assert re.search(r"tdsl_cp_async_commit\(\);\s*tdsl_cp_async_wait<1>\(\);\s*__syncthreads\(\);", body)
    assert tdsl.lower.notes(tdsl.lower(f, "cuda")) == []


@pytest.mark.parametrize("stage,order,wait", [
    ([0, 0, 2], None, 2),           # three buffers, two groups in flight
    ([0, 0, 1], [1, 2, 0], 0),      # compute first in each iteration: the newest group is the one it needs
])
def test_gemm_stage_and_order_variants(stage, order, wait):
    f = vec_gemm(stage=stage, order=order)
    after = _after_pass(f)
    assert _shapes(after)["A_sh"][0] == max(stage) + 1
    kernel = _check_numbers(f, lambda a, b: a @ b, [(64, 64), (64, 64)])
    assert f"tdsl_cp_async_wait<{wait}>();" in kernel.source


def test_more_stages_than_iterations():
    # k = 32: two iterations of the k loop, a pipeline three deep: no steady-state loop at all
    f = vec_gemm(k=32, stage=(0, 0, 2))
    after = _after_pass(f)
    assert not [x for x in collect(after.body, For) if x.loop_var.name == "ko"]
    _check_numbers(f, lambda a, b: a @ b, [(64, 32), (32, 64)])


def test_hand_written_cp_async_kernel_round_trips_and_interprets():
    f = vec_gemm()
    after = tdsl.lower(f, "cuda")
    text = after.script()
    assert "T.ptx_cp_async(A_sh[" in text and "T.ptx_commit_group()" in text and "T.ptx_wait_group(1)" in text
    again = tdsl.parse(text)   # (the flat parameters' original shapes are a comment: compare the bodies)
    tdsl.assert_structural_equal(again.body, after.body)
    # the interpreter runs the builtins as plain copies: the lowered function computes the same
    a, b = random_inputs([(64, 64), (64, 64)])
    c = np.zeros((64, 64), "float32")
    tdsl.interpret(after, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- TVM's test cases

@pytest.mark.parametrize("num_stages", [1, 2, 3])
def test_tvm_simple_compute(num_stages):
    f, ref = simple_compute(num_stages)
    after = _after_pass(f)
    assert _shapes(after)["B"] == (num_stages + 1, 16, 1)
    (steady,) = [x for x in collect(after.body, For) if x.loop_var.name == "i"]
    assert (steady.min.value, steady.extent.value) == (num_stages, 16 - num_stages)
    _check_numbers(f, ref, [(16, 16)])


def test_tvm_trivial_pipeline_of_one_iteration():
    f, ref = simple_compute(1, extent=1)
    after = _after_pass(f)
    assert not [x for x in collect(after.body, For) if x.loop_var.name == "i"]
    _check_numbers(f, ref, [(16, 1)])


def test_tvm_other_annotations_are_kept_on_the_steady_state_loop():
    f, ref = simple_compute(1, other_annotation=True)
    (steady,) = [x for x in collect(_after_pass(f).body, For) if x.loop_var.name == "i"]
    assert dict(steady.annotations) == {"pragma_loop_partition_hint": True}
    _check_numbers(f, ref, [(16, 16)])


def test_tvm_three_stage_compute():
    f, ref = three_stage_compute()
    shapes = _shapes(_after_pass(f))
    assert shapes["B"] == (2, 16, 1) and shapes["C"] == (2, 16, 1)
    _check_numbers(f, ref, [(16, 16)])


def test_tvm_dag_interleaving():
    f, ref = dag_interleaving()
    shapes = _shapes(_after_pass(f))
    # AS / BS are read in the stage that writes them: one copy; AL / BL cross a stage: two
    assert shapes["AS"] == (16, 1) and shapes["AL"] == (2, 1, 1) and shapes["BL"] == (2, 1, 1)
    _check_numbers(f, ref, [(16, 16), (16, 16)])


@pytest.mark.parametrize("k", [5, 1, 0])
def test_tvm_dynamic_compute(k):
    f, ref = dynamic_compute()
    rng = np.random.default_rng(k)
    a = rng.standard_normal((16, k)).astype("float32")
    kernel = emulate_matches_interpreter(f, dims={"k": k})
    c = np.zeros((16, k), "float32")
    kernel(a, c)
    np.testing.assert_allclose(c, ref(a), rtol=1e-6)


@pytest.mark.parametrize("num_stages,wait", [(1, 1), (3, 3)])
def test_tvm_simple_compute_async(num_stages, wait):
    # TVM's test_simple_compute_async: the same wait counts in the steady state (TVM's epilogue
    # counts down where tdsl commits empty groups and keeps the count); B = A * 2 is no plain copy,
    # so the store stays synchronous and a note says so
    f, ref = simple_compute(num_stages)
    sch = tdsl.Schedule(f)
    sch.annotate(sch.get_loops(sch.get_block("compute"))[-1], "software_pipeline_async_stages", [0])
    after = _after_pass(sch)
    assert _shapes(after)["B"] == (num_stages + 1, 16, 1)
    (steady,) = [x for x in collect(after.body, For) if x.loop_var.name == "i"]
    assert f"T.ptx_wait_group({wait})" in after.script()
    notes = tdsl.lower.notes(tdsl.lower(sch, "cuda"))
    assert any("the copy into 'B' stayed synchronous (no cp.async): the value is not a plain load" in n for n in notes)
    _check_numbers(sch, ref, [(16, 16)])


def test_tvm_async_producer_interleaving():
    # one group per iteration holds both copies (committed after the later one in the order):
    # the consumer of iteration i - 3 waits for all but the 2 newest groups (TVM, with a queue per
    # copy statement, writes 5)
    f, ref = async_producer_interleaving()
    after = _after_pass(f)
    shapes = _shapes(after)
    assert shapes["A_shared"] == (4, 16, 1) and shapes["B_shared"] == (4, 16, 1)
    kernel = _check_numbers(f, ref, [(16, 16), (16, 16)])
    src = kernel.source.split("#endif")[-1]
    assert src.count("tdsl_cp_async_ca<4>(") == 8 and "tdsl_cp_async_wait<2>();" in src   # 3 + 1 iterations


def test_two_async_stages_wait_for_each_producer():
    # A's copies in stage 0, B's in stage 1, the compute in stage 2: two groups per iteration; the
    # compute needs A's group of two iterations back and B's of one
    f = vec_gemm(stage=(0, 1, 2), async_stages=(0, 1))
    kernel = _check_numbers(f, lambda a, b: a @ b, [(64, 64), (64, 64)])
    steady = kernel.source.split("for (int ko")[1]
    assert "tdsl_cp_async_wait<2>();" in steady   # B's group: 2 newer ones; A's: 5


def test_a_commit_between_two_consumers_needs_a_second_wait():
    # iteration q: S0(q), commit, [wait 2] L(q-1), S1(q-1), commit, [wait 2] C(q-2): after the
    # second commit the first wait no longer covers S1's group of q-1 (without the second wait the
    # emulator reports the race on S1)
    f, ref = two_async_chains()
    kernel = _check_numbers(f, ref, [(16, 16), (16, 16)])
    steady = kernel.source.split("for (int i")[1].split("\n  }\n")[0]
    assert steady.count("tdsl_cp_async_wait<2>();") == 2


# ----------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("ann,match", [
    ({"software_pipeline_stage": [0, 1]}, r"loop ko: software_pipeline_stage has 2 entries but the loop body has 3"),
    ({"software_pipeline_stage": [0, 0, 1], "software_pipeline_order": [0, 0, 1]},
     r"software_pipeline_order \[0, 0, 1\] must be a permutation of 0..2"),
    ({"software_pipeline_stage": [0, 0, 1], "software_pipeline_async_stages": [2]},
     r"software_pipeline_async_stages \[2\] names stage \[2\] that no statement has"),
    ({"software_pipeline_stage": [1, 1, 0]},
     r"statement 2 \(writing 'C_loc'\) depends on statement 0 \(writing 'A_sh'\) through 'A_sh'.*stage 0"),
    ({"software_pipeline_stage": [0, 0, 0], "software_pipeline_order": [2, 1, 0]},
     r"statement 1 \(writing 'B_sh'\) depends on statement 0|statement 2 .* depends on statement 0"),
    ({"software_pipeline_stage": [0, 0, 0], "software_pipeline_async_stages": [0]},
     r"reads 'A_sh', which statement 0 \(writing 'A_sh'\) writes asynchronously in the same stage 0"),
    ({"software_pipeline_order": [0, 1, 2]}, r"loop ko has the annotation software_pipeline_order but no "
                                              r"software_pipeline_stage"),
    ({"software_pipeline_stage": [0, -1, 0]}, r"has a negative stage"),
])
def test_illegal_annotations_are_refused(ann, match):
    f, _ = matmul()
    sch = tdsl.Schedule(f)
    ko = sch.get_loops(sch.get_block("A_sh"))[4]
    for key, value in ann.items():
        sch.annotate(ko, key, value)
    before = sch.func
    with pytest.raises(tdsl.TargetError, match=match):
        tdsl.build(sch, target="cuda", emulate=True)
    assert sch.func is before
    # the interpreter ignores the annotations, legal or not
    a, b = random_inputs([(64, 64), (64, 64)])
    c = np.zeros((64, 64), "float32")
    tdsl.interpret(sch, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_a_buffer_used_after_the_loop_cannot_be_multi_buffered():
    from tdsl.script import T

    @T.prim_func
    def f(A: T.Buffer((16, 8), "float32"), C: T.Buffer((16, 8), "float32"), D: T.Buffer((16,), "float32")):
        S = T.alloc_buffer((16,), "float32", scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for i in T.serial(8, annotations={"software_pipeline_stage": [0, 1]}):
                    with T.block("S"):
                        vtx, vi = T.axis.remap("SS", [tx, i])
                        S[vtx] = A[vtx, vi]
                    with T.block("C"):
                        vtx, vi = T.axis.remap("SS", [tx, i])
                        C[vtx, vi] = S[vtx] + T.float32(1)
                with T.block("D"):
                    vtx = T.axis.remap("S", [tx])
                    D[vtx] = S[vtx]

    with pytest.raises(tdsl.TargetError, match=r"buffer 'S' is multi-buffered .* also used outside the loop"):
        tdsl.lower(f, "cuda")


def test_nested_pipelines_are_refused():
    from tdsl.script import T

    @T.prim_func
    def f(A: T.Buffer((4, 8, 16), "float32"), C: T.Buffer((4, 8, 16), "float32")):
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                for i in T.serial(4, annotations={"software_pipeline_stage": [0, 1]}):
                    for j in T.serial(8, annotations={"software_pipeline_stage": [0, 1]}):
                        with T.block("compute"):
                            vtx, vi, vj = T.axis.remap("SSS", [tx, i, j])
                            S = T.alloc_buffer((16,), "float32", scope="shared")
                            with T.block("S"):
                                S[vtx] = A[vi, vj, vtx]
                            with T.block("C"):
                                C[vi, vj, vtx] = S[vtx] + T.float32(1)
                    with T.block("D"):
                        vtx, vi = T.axis.remap("SS", [tx, i])
                        C[vi, 0, vtx] = C[vi, 0, vtx] * T.float32(2)

    with pytest.raises(tdsl.TargetError, match=r"loop j is pipelined .* inside the pipelined loop i; nested"):
        tdsl.lower(f, "cuda")


def test_async_results_read_only_after_the_loop_are_waited_for():
    # the async stage's copies are read by nothing inside the loop: a final wait keeps every
    # thread from finishing with copies in flight (the emulator would report them)
    from tdsl.script import T

    @T.prim_func
    def f(A: T.Buffer((4, 64), "float32"), B: T.Buffer((64,), "float32")):
        S = T.alloc_buffer((4, 64), "float32", scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for i in T.serial(4, annotations={"software_pipeline_stage": [0, 1],
                                              "software_pipeline_async_stages": [0]}):
                for tx in T.thread_binding(64, thread="threadIdx.x"):
                    with T.block("S"):
                        vi, vtx = T.axis.remap("SS", [i, tx])
                        S[vi, vtx] = A[vi, vtx]
                for tx in T.thread_binding(64, thread="threadIdx.x"):
                    with T.block("B0"):
                        vi, vtx = T.axis.remap("SS", [i, tx])
                        B[vtx] = A[vi, vtx]
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                with T.block("B"):
                    vtx = T.axis.remap("S", [tx])
                    B[vtx] = S[0, vtx] + S[1, vtx] + S[2, vtx] + S[3, vtx]

    kernel = emulate_matches_interpreter(f)
    assert kernel.source.split("#endif")[-1].count("tdsl_cp_async_wait<0>();") == 1


@pytest.mark.parametrize("stage,order,match", [
    # TVM's simple_compute_incorrect_reorder: D reads C but is ordered before it in stage 1
    ([0, 1, 1], [0, 2, 1], r"statement 2 \(writing 'D'\) depends on statement 1 \(writing 'C'\) through 'C'"),
    # TVM's simple_compute_conflicting_order: two statements at one position
    ([0, 1, 1], [0, 1, 1], r"software_pipeline_order \[0, 1, 1\] must be a permutation of 0..2"),
])
def test_tvm_error_cases(stage, order, match):
    f, _ = three_stage_compute(stage=stage, order=order)
    with pytest.raises(tdsl.TargetError, match=match):
        tdsl.lower(f, "cuda")


def test_tvm_missing_order_means_as_written():
    # TVM refuses software_pipeline_stage without software_pipeline_order (its
    # simple_compute_missing_annotation); tdsl takes the order as written, as a user would expect
    f, ref = three_stage_compute(stage=(0, 1, 1), order=(0, 1, 2))
    with_order = _after_pass(f).script()
    sch = tdsl.Schedule(f)
    loop = sch.get_loops(sch.get_block("compute"))[-1]
    sch.unannotate(loop, "software_pipeline_order")
    assert _after_pass(sch).script() == with_order
    _check_numbers(sch, ref, [(16, 16)])


def test_tvm_three_stage_compute_two_stage_async():
    # TVM's test_three_stage_compute_two_stage_async: stages 0 and 1 async (their stores compute,
    # so they stay synchronous stores; the groups and waits are placed all the same)
    f, ref = three_stage_compute()
    sch = tdsl.Schedule(f)
    sch.annotate(sch.get_loops(sch.get_block("compute"))[-1], "software_pipeline_async_stages", [0, 1])
    text = _after_pass(sch).script()
    # two commits in each of the 2 prologue iterations, the loop body and the 2 epilogue iterations
    assert text.count("T.ptx_commit_group()") == 2 * 5 and "T.ptx_wait_group(2)" in text
    _check_numbers(sch, ref, [(16, 16)])
