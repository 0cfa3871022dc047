"""lower(): the pipeline API, the lowered form's invariants, and that lowering keeps the meaning
(the interpreter gives the same results before and after, for CPU and CUDA pipelines)."""
import io
import os
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.ir import Block, BlockRealize, Buffer, BufferLoad, BufferStore, For, Ramp, collect
from tdsl.ir.verify import verify
from tdsl.lower import Pass, notes, passes_for, register_pass, stages

GOLDEN = Path(__file__).parent / "golden"

# ----------------------------------------------------------------------------- kernels


@T.prim_func
def matmul(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@T.prim_func
def softmax(A: T.Buffer((8, 24), "float32"), C: T.Buffer((8, 24), "float32")):
    M = T.alloc_buffer((8,), "float32")
    S = T.alloc_buffer((8,), "float32")
    E = T.alloc_buffer((8, 24), "float32")
    for i, j in T.grid(8, 24):
        with T.block("M"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                M[vi] = T.min_value("float32")
            M[vi] = T.max(M[vi], A[vi, vj])
    for i, j in T.grid(8, 24):
        with T.block("E"):
            vi, vj = T.axis.remap("SS", [i, j])
            E[vi, vj] = T.exp(A[vi, vj] - M[vi])
    for i, j in T.grid(8, 24):
        with T.block("S"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                S[vi] = T.float32(0)
            S[vi] = S[vi] + E[vi, vj]
    for i, j in T.grid(8, 24):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = E[vi, vj] / S[vi]


@T.prim_func
def sym_add(A: T.Buffer(("n", 40), "float32"), B: T.Buffer((40,), "float32"), C: T.Buffer(("n", 40), "float32")):
    for i, j in T.grid(n, 40):  # noqa: F821 - the symbolic dimension, as the script names it
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = T.exp(A[vi, vj]) + B[vj] * T.float32(2)


@T.prim_func
def mixed(A: T.Buffer((4, 12), "int8"), B: T.Buffer((4, 12), "float16"), C: T.Buffer((4, 12), "int32"),
          D: T.Buffer((4, 12), "float32")):
    for i, j in T.grid(4, 12):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            x = T.cast(A[vi, vj], "int32") * 3
            C[vi, vj] = T.if_then_else(vj > 0, x + T.cast(A[vi, vj - 1], "int32"), x) // 2
            D[vi, vj] = T.Select(B[vi, vj] > T.float16(0.5), T.cast(B[vi, vj], "float32"), T.float32(-1))


@T.prim_func
def gpu_sum(A: T.Buffer((4, 64), "float32"), B: T.Buffer((4,), "float32")):
    S = T.alloc_buffer((4, 64), "float32", scope="shared")
    L = T.alloc_buffer((4,), "float32", scope="local")
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            with T.block("S"):
                vi, vj = T.axis.remap("SS", [bx, tx])
                S[vi, vj] = A[vi, vj] * T.float32(2)
        for k in range(64):
            with T.block("L"):
                vi, vk = T.axis.remap("SR", [bx, k])
                with T.init():
                    L[vi] = T.float32(0)
                L[vi] = L[vi] + S[vi, vk]
        for tx in T.thread_binding(1, thread="threadIdx.x"):
            with T.block("B"):
                vi = T.axis.spatial(4, bx + tx)
                B[vi] = L[vi]


@T.prim_func
def strided(A: T.Buffer((3, 5), "float32", strides=(10, 2)), B: T.Buffer((3, 5), "float32")):
    for i, j in T.grid(3, 5):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] + T.float32(1)


@T.prim_func
def nested(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
    for i in range(4):
        with T.block("row"):
            vi = T.axis.spatial(4, i)
            tmp = T.alloc_buffer((8,), "float32", scope="local")
            for j in range(8):
                with T.block("tmp"):
                    vj = T.axis.spatial(8, j)
                    tmp[vj] = A[vi, vj] * A[vi, vj]
            for j in T.vectorized(8):
                with T.block("B"):
                    vj = T.axis.spatial(8, j)
                    B[vi, vj] = tmp[vj] + tmp[7 - vj]


@T.prim_func
def vec_odd(A: T.Buffer((100,), "float32"), C: T.Buffer((100,), "float32"), D: T.Buffer((100,), "float32")):
    for j in T.vectorized(100):
        with T.block("C"):
            vj = T.axis.spatial(100, j)
            C[vj] = T.sqrt(T.abs(A[vj])) + T.float32(1)
    for j in T.unroll(100):
        with T.block("D"):
            vj = T.axis.spatial(100, j)
            D[vj] = T.max(A[vj], T.float32(0.5))


def scheduled_matmul():
    sch = tdsl.Schedule(matmul)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 8])
    k0, k1 = sch.split(k, factors=[None, 4])
    sch.reorder(i0, j0, k0, i1, k1, j1)
    sch.parallel(i0)
    sch.unroll(i1)
    sch.vectorize(j1)
    return sch


def vector_outside_reduction():
    sch = tdsl.Schedule(matmul)
    _, j, _ = sch.get_loops(sch.get_block("C"))
    sch.vectorize(j)
    return sch


def split_with_tail():
    sch = tdsl.Schedule(sym_add)
    i, j = sch.get_loops(sch.get_block("C"))
    _, j1 = sch.split(j, factors=[None, 16])  # 40 = 2 * 16 + 8: a predicate guards the tail
    sch.vectorize(j1)
    sch.parallel(i)
    return sch


def fused_vector():
    sch = tdsl.Schedule(softmax)
    for name in ("E", "C"):
        i, j = sch.get_loops(sch.get_block(name))
        f = sch.fuse(i, j)
        _, f1 = sch.split(f, factors=[None, 32])
        sch.vectorize(f1)
    return sch


def rand(shape, dtype, rng):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-100, 100, size=shape).astype(dtype)


def args_for(func, sizes, rng):
    out = []
    for p in func.params:
        shape = tuple(sizes.get(s.name, 0) if hasattr(s, "name") else s.value for s in p.shape)
        out.append(rand(shape, str(p.dtype), rng))
    return out


CASES = {
    "matmul": (lambda: matmul, {}),
    "matmul_scheduled": (scheduled_matmul, {}),
    "softmax": (lambda: softmax, {}),
    "softmax_fused_vector": (fused_vector, {}),
    "sym_add": (lambda: sym_add, {"n": 3}),
    "split_with_tail": (split_with_tail, {"n": 5}),
    "vector_outside_reduction": (vector_outside_reduction, {}),
    "mixed": (lambda: mixed, {}),
    "gpu_sum": (lambda: gpu_sum, {}),
    "nested": (lambda: nested, {}),
    "vec_odd": (lambda: vec_odd, {}),
}


# ----------------------------------------------------------------------------- checks

def assert_lowered_form(func, target):
    """The contract of docs/internals.md: no blocks, flat buffers, allowed loop kinds; and
    well-formed (every variable defined once, before use)."""
    verify(func)
    assert not collect(func.body, (Block, BlockRealize))
    kinds = {"serial", "parallel", "unrolled"} | ({"thread_binding"} if target == "cuda" else set())
    for loop in collect(func.body, For):
        assert loop.kind in kinds, f"loop {loop.loop_var.name} is still {loop.kind}"
    for p in func.buffer_params:
        assert len(p.shape) == 1 and not p.strides and p.elem_offset is None
    for node in collect(func.body, (BufferLoad, BufferStore)):
        assert len(node.buffer.shape) == 1 and len(node.indices) == 1
        index = node.indices[0]
        if index.dtype.lanes > 1:
            assert isinstance(index, Ramp) and index.stride.value == 1
    if target == "cpu":
        from tdsl.ir import Allocate

        assert {a.buffer.scope for a in collect(func.body, Allocate)} <= {"local", "global"}


def run_case(name, target):
    make, sizes = CASES[name]
    func_or_sch = make()
    func = func_or_sch if isinstance(func_or_sch, tdsl.PrimFunc) else func_or_sch.func
    rng = np.random.default_rng(0)
    arrays = args_for(func, sizes, rng)
    expected = [a.copy() for a in arrays]
    tdsl.interpret(func, *expected)
    if target == "cuda":
        # the transforming passes of the CUDA pipeline; its first two only check that the function is
        # valid for a GPU, which most of these CPU-style cases are not
        lowered = func
        for p in passes_for("cuda"):
            if p.name not in ("verify_thread_bindings", "check_thread_exchange"):
                lowered = p(lowered)
    else:
        lowered = tdsl.lower(func_or_sch, target=target)
    assert_lowered_form(lowered, target)
    got = [a.copy() for a in arrays]
    tdsl.interpret(lowered, *got)
    for p, e, g in zip(func.params, expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6, err_msg=f"parameter {p.name} of {name}")
    return lowered


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowering_keeps_meaning_cpu(name):
    run_case(name, "cpu")


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowering_keeps_meaning_cuda_pipeline(name):
    run_case(name, "cuda")


def test_vector_code_is_produced_where_expected():
    lowered = run_case("matmul_scheduled", "cpu")
    assert notes(lowered) == []
    vector_stores = [s for s in collect(lowered.body, BufferStore) if s.value.dtype.lanes == 8]
    assert vector_stores, "the vectorized j1 loop should store float32x8 vectors"
    assert any(loop.kind == "parallel" for loop in collect(lowered.body, For))
    tail = run_case("split_with_tail", "cpu")
    assert notes(tail) == []
    assert [s for s in collect(tail.body, BufferStore) if s.value.dtype.lanes == 16]
    gather = run_case("softmax_fused_vector", "cpu")
    assert len(notes(gather)) == 2  # the fused loops read M[f // 24]: a gather, not a vector load


def test_strided_parameter_reads_through_its_strides():
    rng = np.random.default_rng(1)
    base = rng.standard_normal(30).astype("float32")
    view = np.lib.stride_tricks.as_strided(base, shape=(3, 5), strides=(40, 8))
    expected = tdsl.interpret(strided, view)
    lowered = tdsl.lower(strided)
    assert lowered.params[0].shape[0].value == 2 * 10 + 4 * 2 + 1
    got = tdsl.interpret(lowered, view)  # checked against the original declaration in attrs
    np.testing.assert_array_equal(got, expected)


# ----------------------------------------------------------------------------- API

def test_passes_for_targets():
    cpu = [p.name for p in passes_for("cpu")]
    assert cpu == ["apply_tensor_intrinsics", "thread_bindings_to_serial", "convert_blocks", "compact_buffers", "index_checks",
                   "flatten_buffers",
                   "simplify", "unroll", "vectorize", "storage", "simplify", "remove_no_op"]
    cuda = [p.name for p in passes_for("cuda")]
    # every pass build(..., target="cuda") runs before kernel splitting and barrier planning
    assert cuda == ["lower_fused_kernels", "verify_thread_bindings", "check_thread_exchange", "apply_tensor_intrinsics",
                    "lower_cross_thread_reductions", "convert_blocks", "lower_warp_memory", "compact_gpu_buffers",
                    "lane_fragments", "swizzle_shared", "inject_software_pipeline", "index_checks",
                    "flatten_buffers", "simplify", "unroll", "vectorize", "lower_async_copies", "simplify",
                    "remove_no_op"]
    with pytest.raises(tdsl.TargetError, match="unknown target 'tpu'"):
        tdsl.lower(matmul, target="tpu")
    with pytest.raises(tdsl.TargetError):
        passes_for("metal")


def test_register_pass_adds_a_step_for_one_target():
    seen = []
    extra = Pass("test_probe", lambda f: seen.append(f.name) or f)
    register_pass("cuda", extra, after="convert_blocks")
    try:
        names = [p.name for p in passes_for("cuda")]
        assert names[names.index("convert_blocks") + 1] == "test_probe"
        with pytest.raises(tdsl.ScheduleError, match="not under any threadIdx loop"):
            tdsl.lower(matmul, target="cuda")   # the CUDA pipeline checks the thread bindings first
        sch = tdsl.Schedule(matmul)
        i, j, _ = sch.get_loops(sch.get_block("C"))
        sch.bind(i, "blockIdx.x")
        sch.bind(j, "threadIdx.x")
        tdsl.lower(sch, target="cuda")
        tdsl.lower(matmul, target="cpu")
        assert seen == ["matmul"]
    finally:
        from tdsl.lower import _PIPELINES

        _PIPELINES["cuda"][:] = [p for p in _PIPELINES["cuda"] if p.name != "test_probe"]
    with pytest.raises(ValueError, match="no pass named 'nope'"):
        register_pass("cpu", extra, before="nope")


def test_lower_takes_a_schedule_and_rejects_other_things():
    sch = tdsl.Schedule(matmul)
    tdsl.assert_structural_equal(tdsl.lower(sch), tdsl.lower(matmul))
    with pytest.raises(TypeError, match="PrimFunc or a Schedule"):
        tdsl.lower("matmul")


def test_trace_shows_every_stage():
    seen = []
    tdsl.lower(matmul, trace=lambda name, f: seen.append(name))
    assert seen == [p.name for p in passes_for("cpu")]
    out = io.StringIO()
    with redirect_stdout(out):
        tdsl.lower(matmul, trace=True)
    text = out.getvalue()
    assert "# ---- after convert_blocks ----" in text and "if k == 0:" in text
    names = [name for name, _ in stages(matmul)]
    assert names[0] == "input" and names[1:] == seen
    assert stages(matmul)[0][1] is matmul


def test_show_prints_ir_and_notes():
    out = io.StringIO()
    with redirect_stdout(out):
        lowered = tdsl.lower(fused_vector(), show=True)
    text = out.getvalue()
    assert "T.allocate((192,)" in text
    assert "note: loop" in text and notes(lowered)[0] in text


def test_lower_is_reachable_both_ways():
    import tdsl.lower as lower_module

    assert callable(tdsl.lower)
    assert [n for n, _ in tdsl.lower.stages(matmul)] == [n for n, _ in lower_module.stages(matmul)]
    tdsl.assert_structural_equal(lower_module(matmul), lower_module.lower(matmul))


def test_flat_params_attr_keeps_original_buffers():
    lowered = tdsl.lower(sym_add)
    originals = dict(lowered.attrs)["tdsl.flat_params"]
    assert originals == sym_add.buffer_params
    assert all(isinstance(b, Buffer) for b in originals)
    assert [p.name for p in lowered.buffer_params] == ["A", "B", "C"]


# ----------------------------------------------------------------------------- golden

@pytest.mark.parametrize("name", ["matmul_scheduled", "softmax_fused_vector"])
def test_golden_lowered_ir(name):
    make, _ = CASES[name]
    text = tdsl.lower(make()).script()
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("TDSL_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"lowered IR of {name} changed; rerun with TDSL_UPDATE_GOLDEN=1 if on purpose"
