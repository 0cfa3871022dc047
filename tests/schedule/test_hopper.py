"""wgmma_pipeline and warp_specialize (tdsl.schedule.primitives.hopper): the sm_90a GEMM pipeline
as TensorIR. Checked here with the interpreter (the meaning: equal to the unscheduled GEMM and to
numpy), the print -> parse round trip, the docstrings and the refusals; the emulator and NVRTC
checks are in tests/cuda/test_sm90_auto.py."""
import inspect
import re
import textwrap

import ml_dtypes
import numpy as np
import pytest
from sched_check import THREE_BLOCKS, check, expect_error

import tdsl
from tdsl.ir.tensor_maps import tensor_maps


def gemm(M, N, K, dtype="float16", trans_b=False, batch=None, b_batched=True, init=True, cast=True):
    """C[b?, i, j] (+)= f32(A[b?, i, k]) * f32(B[b?, k, j] or B[b?, j, k]) as script text, parsed."""
    lead = f"{batch}, " if batch else ""
    blead = lead if b_batched else ""
    bshape = f"({blead}{N}, {K})" if trans_b else f"({blead}{K}, {N})"
    vb = "vb, " if batch else ""
    bidx = ("vb, " if batch and b_batched else "") + ("vj, vk" if trans_b else "vk, vj")
    loops, kinds = ("b, i, j, k", "SSSR") if batch else ("i, j, k", "SSR")
    grid = f"{lead}{M}, {N}, {K}"
    a_load, b_load = f"A[{vb}vi, vk]", f"B[{bidx}]"
    product = f'T.cast({a_load}, "float32") * T.cast({b_load}, "float32")' if cast else f"{a_load} * {b_load}"
    init_text = f"""
            with T.init():
                C[{vb}vi, vj] = T.float32(0)""" if init else ""
    return tdsl.parse(f'''
@T.prim_func
def gemm(A: T.Buffer(({lead}{M}, {K}), "{dtype}"), B: T.Buffer({bshape}, "{dtype}"),
         C: T.Buffer(({lead}{M}, {N}), "float32")):
    for {loops} in T.grid({grid}):
        with T.block("C"):
            {vb}vi, vj, vk = T.axis.remap("{kinds}", [{loops}]){init_text}
            C[{vb}vi, vj] = C[{vb}vi, vj] + {product}
''')


def operands(f, seed=0):
    """Small integers (every order of sums is exact) for f's parameters, and C's expected value."""
    rng = np.random.default_rng(seed)
    out = []
    for p in f.params:
        shape = tuple(int(s.value) for s in p.shape)
        t = ml_dtypes.bfloat16 if str(p.dtype) == "bfloat16" else np.dtype(str(p.dtype))
        out.append(rng.integers(-2, 3, shape).astype(t))
    return out


def pipelined(f, warp_specialize=True, **tiles):
    sch = tdsl.Schedule(f)
    ko = sch.wgmma_pipeline(sch.get_block("C"), **tiles)
    if warp_specialize:
        sch.warp_specialize(ko)
    return sch


@pytest.mark.parametrize("kw", [
    dict(),
    dict(trans_b=True),
    dict(init=False),
    dict(dtype="bfloat16"),
    dict(batch=2),
    dict(batch=2, trans_b=True, b_batched=False),
], ids=["fp16", "B[j,k]", "accumulate", "bf16", "batched", "shared-B"])
def test_pipeline_keeps_the_meaning(kw):
    f = gemm(64, 32, 128, **kw)      # (the interpreter is slow: small, but 4 K steps for 2 stages)
    sch = pipelined(f, warp_specialize=kw.get("trans_b", False) or not kw, tile_n=32, tile_k=32)
    args = operands(f)
    check(sch, f, args=args)
    a, b, c = args
    bt = np.swapaxes(b, -1, -2) if kw.get("trans_b") else b
    want = a.astype(np.float32) @ bt.astype(np.float32) + (0 if kw.get("init", True) else c)
    got = c.copy()
    tdsl.interpret(sch.func, a, b, got)
    np.testing.assert_array_equal(got, want)


def test_two_consumer_warpgroups_keep_the_meaning():
    f = gemm(128, 64, 128, trans_b=True)
    sch = pipelined(f, tile_m=128, tile_n=64, tile_k=32)
    text = sch.func.script()
    assert 'for ty_1 in T.thread_binding(3, thread="threadIdx.y"):' in text
    assert "T.ptx_init_barrier_thread_count(bar_empty[s], 256)" in text
    check(sch, f, args=operands(f))


def test_pipeline_records_its_tensor_maps():
    sch = pipelined(gemm(64, 128, 256, batch=2, trans_b=True), tile_n=128, tile_k=32, stages=3)
    maps = {m.map: (m.tensor, m.box, m.swizzle) for m in tensor_maps(sch.func)}
    assert maps == {"A_tmap": ("A", (1, 64, 32), "64B"), "B_tmap": ("B", (1, 128, 32), "64B")}
    sch = pipelined(gemm(64, 128, 256, batch=2), tile_n=128, tile_k=32, stages=3)   # B[b, k, j]: N-major boxes
    maps = {m.map: (m.tensor, m.box, m.swizzle) for m in tensor_maps(sch.func)}
    assert maps == {"A_tmap": ("A", (1, 64, 32), "64B"), "B_tmap": ("B", (1, 32, 64), "128B")}
    text = sch.func.script()
    assert "'tdsl.tensor_map:A_tmap': 'A (1, 64, 32) 64B'" in text
    assert 'for bz in T.thread_binding(2, thread="blockIdx.z"):' in text


def _section(doc: str, title: str) -> str:
    m = re.search(rf"^\s*{title}::\n\n(.*?)(?=^\s*\w+::\n|\Z)", doc, re.DOTALL | re.MULTILINE)
    assert m, f"no {title}:: section"
    return textwrap.dedent(m.group(1)).strip() + "\n"


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("...")
            and "# " not in ln]


def test_wgmma_pipeline_docstring_example():
    doc = inspect.getdoc(tdsl.Schedule.wgmma_pipeline)
    before = tdsl.parse(_section(doc, "Before"))
    scope = {"tdsl": tdsl, "before": before}
    exec(_section(doc, "Call"), scope)  # noqa: S102 - the docstring example is the test
    sch = scope["sch"]
    text = [ln.strip() for ln in sch.func.script().splitlines()]
    for line in _lines(_section(doc, "After")):   # (the printer names the K loop's thread loop tx_1)
        assert re.sub(r"\btx\b", "tx_1", line) in text, line
    check(sch, before, args=operands(before))


def test_warp_specialize_docstring_example():
    doc = inspect.getdoc(tdsl.Schedule.warp_specialize)
    f = gemm(128, 64, 256)
    sch = tdsl.Schedule(f)
    ko = sch.wgmma_pipeline(sch.get_block("C"), tile_m=128)   # two consumer warpgroups
    before = [ln.strip() for ln in sch.func.script().splitlines()]
    for line in _lines(_section(doc, "Before")):
        assert re.sub(r"\btx\b", "tx_1", line) in before, line
    exec(_section(doc, "Call"), {"sch": sch, "ko": ko})  # noqa: S102 - the docstring example is the test
    after = [re.sub(r"\b(t[xy])_\d+\b", r"\1", ln.strip()) for ln in sch.func.script().splitlines()]
    for line in _lines(_section(doc, "After")):   # (thread loops named tx, tx_1, tx_2 ... by the printer)
        assert line in after, line
    check(sch, f, args=operands(f))


def test_trace_replays():
    f = gemm(64, 128, 256)
    sch = pipelined(f)
    again = sch.trace.apply(f)
    assert tdsl.structural_diff(again.func, sch.func) is None


@pytest.mark.parametrize("kw, tiles, words", [
    (dict(dtype="float32"), {}, ["float16 or bfloat16"]),
    (dict(M=32), {}, ["not a multiple of tile_m = 64"]),
    (dict(), dict(tile_n=48), ["tile_n"]),
    (dict(), dict(tile_k=128), ["tile_k"]),
    (dict(), dict(tile_n=128, stages=10), ["shared memory", "stages"]),   # 240 KiB of tiles
    (dict(), dict(stages=0), ["at least one stage"]),
    (dict(), dict(tile_m=96), ["tile_m", "64 or 128"]),
    (dict(M=64), dict(tile_m=128, tile_n=64, tile_k=32), ["multiple of tile_m"]),
])
def test_wgmma_pipeline_refuses_what_does_not_fit(kw, tiles, words):
    size = dict(M=64, N=128, K=256)
    size.update({k: v for k, v in kw.items() if k in size})
    f = gemm(size["M"], size["N"], size["K"], **{k: v for k, v in kw.items() if k not in size})
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    message = expect_error(sch, lambda: sch.wgmma_pipeline(c, **tiles), "C", *words)
    assert "wgmma_pipeline" in message


def test_wgmma_pipeline_refuses_a_scheduled_nest_and_other_blocks():
    sch = tdsl.Schedule(gemm(64, 128, 256))
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 32])
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.wgmma_pipeline(c), "already scheduled")
    sch = tdsl.Schedule(tdsl.parse(THREE_BLOCKS))
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.wgmma_pipeline(c), "other blocks (E, D)")


def test_warp_specialize_refuses_a_loop_that_is_not_a_pipeline():
    sch = tdsl.Schedule(gemm(64, 64, 256))
    i, _, _ = sch.get_loops(sch.get_block("C"))
    expect_error(sch, lambda: sch.warp_specialize(i), "threadIdx.x")


def test_warp_specialize_twice_is_refused():
    sch = tdsl.Schedule(gemm(64, 64, 256))
    ko = sch.wgmma_pipeline(sch.get_block("C"))
    sch.warp_specialize(ko)
    expect_error(sch, lambda: sch.warp_specialize(ko), "threadIdx.x")


# ------------------------------------------------------------------ a GEMM with an elementwise epilogue

def gemm_epilogue(M, N, K, value, out="float32", batch=None, extra="bias: T.Buffer(({N},), \"float32\"), ",
                  c_param=False, init=True, more=""):
    """C[b?, i, j] = f32(A) * f32(B) into an intermediate (a parameter with c_param), then the block
    D[b?, i, j] = value (script text over vb?, vi, vj), parsed; `more`: a block after it."""
    lead = f"{batch}, " if batch else ""
    vb = "vb, " if batch else ""
    loops, kinds = ("b, i, j, k", "SSSR") if batch else ("i, j, k", "SSR")
    c_decl = ("", f', C: T.Buffer(({lead}{M}, {N}), "float32")') if c_param else \
        (f'    C = T.alloc_buffer(({lead}{M}, {N}), "float32")\n', "")
    init_text = f"""
            with T.init():
                C[{vb}vi, vj] = T.float32(0)""" if init else ""
    return tdsl.parse(f'''
@T.prim_func
def gemm_epilogue(A: T.Buffer(({lead}{M}, {K}), "float16"), B: T.Buffer(({lead}{K}, {N}), "float16"),
                  {extra.format(N=N, M=M)}D: T.Buffer(({lead}{M}, {N}), "{out}"){c_decl[1]}):
{c_decl[0]}    for {loops} in T.grid({lead}{M}, {N}, {K}):
        with T.block("C"):
            {vb}vi, vj, vk = T.axis.remap("{kinds}", [{loops}]){init_text}
            C[{vb}vi, vj] = C[{vb}vi, vj] + T.cast(A[{vb}vi, vk], "float32") * T.cast(B[{vb}vk, vj], "float32")
    for {loops.rsplit(", ", 1)[0]} in T.grid({lead}{M}, {N}):
        with T.block("D"):
            {vb}vi, vj = T.axis.remap("{kinds[:-1]}", [{loops.rsplit(", ", 1)[0]}])
            D[{vb}vi, vj] = {value}
{more}''')


@pytest.mark.parametrize("value, out, batch, extra, want", [
    ("T.max(C[vi, vj] + bias[vj], T.float32(0))", "float32", None, None,
     lambda c, bias: np.maximum(c + bias, 0)),
    ('T.cast(C[vi, vj] * T.float32(0.5) + bias[vj], "float16")', "float16", None, None,
     lambda c, bias: (c * np.float32(0.5) + bias).astype(np.float16)),
    ('T.cast(T.max(C[vb, vi, vj] * s[vi] + bias[vb, vj], T.float32(-1)), "bfloat16")', "bfloat16", 2,
     'bias: T.Buffer((2, {N}), "float32"), s: T.Buffer(({M},), "float32"), ',
     lambda c, bias, s: np.maximum(c * s[:, None] + bias[:, None, :], -1).astype(ml_dtypes.bfloat16)),
], ids=["bias-relu", "scale-bias-fp16", "batched-bf16"])
def test_epilogue_keeps_the_meaning(value, out, batch, extra, want):
    kw = {} if extra is None else {"extra": extra}
    f = gemm_epilogue(64, 32, 128, value, out=out, batch=batch, **kw)
    sch = tdsl.Schedule(f)
    ko = sch.wgmma_pipeline(sch.get_block("C"), tile_n=32, tile_k=32)
    sch.warp_specialize(ko)
    text = sch.func.script()
    assert "C_acc" in text and "C = T.alloc_buffer" not in text and not re.search(r"\bC\[", text)
    args = operands(f)
    check(sch, f, args=args)
    a, b, *rest, d = args
    c = a.astype(np.float32) @ b.astype(np.float32)
    got = d.copy()
    tdsl.interpret(sch.func, a, b, *rest, got)
    np.testing.assert_array_equal(got, want(c, *rest))
    assert tdsl.structural_diff(sch.trace.apply(f).func, sch.func) is None


@pytest.mark.parametrize("kw, words", [
    (dict(value="T.max(C[vj, vi], T.float32(0))"), ["epilogue", '"D"', "reads C at another index"]),
    (dict(value="C[vi, vj] + bias[vj]", c_param=True), ["epilogue", "a parameter", "intermediate"]),
    (dict(value="C[vi, vj] + bias[vj]", init=False), ["epilogue", "without T.init()"]),
    (dict(value="bias[vj]"), ["epilogue", "does not read C"]),
    (dict(value="C[vi, vj] + D[vi, vj]"), ["epilogue", "reads its own output D"]),
    (dict(value="C[vi, vj]", more='''    for i, j in T.grid(64, 32):
        with T.block("E"):
            vi, vj = T.axis.remap("SS", [i, j])
            E[vi, vj] = D[vi, vj]
''', extra='E: T.Buffer(({M}, {N}), "float32"), '), ["other blocks (D, E)", "at most one elementwise epilogue"]),
], ids=["other-index", "C-a-parameter", "no-init", "no-C", "reads-D", "two-epilogues"])
def test_wgmma_pipeline_refuses_what_is_not_an_epilogue(kw, words):
    sch = tdsl.Schedule(gemm_epilogue(64, 32, 128, **kw))
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.wgmma_pipeline(c), "C", *words)


def test_wgmma_pipeline_refuses_a_reduction_epilogue():
    sch = tdsl.Schedule(tdsl.parse('''
@T.prim_func
def gemm_rowsum(A: T.Buffer((64, 128), "float16"), B: T.Buffer((128, 32), "float16"), D: T.Buffer((64,), "float32")):
    C = T.alloc_buffer((64, 32), "float32")
    for i, j, k in T.grid(64, 32, 128):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")
    for i, j in T.grid(64, 32):
        with T.block("D"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                D[vi] = T.float32(0)
            D[vi] = D[vi] + C[vi, vj]
'''))
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.wgmma_pipeline(c), "epilogue", "reduction")


def test_wgmma_pipeline_refuses_a_scheduled_epilogue():
    sch = tdsl.Schedule(gemm_epilogue(64, 32, 128, "C[vi, vj] + bias[vj]"))
    i, _ = sch.get_loops(sch.get_block("D"))
    sch.split(i, [None, 32])
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.wgmma_pipeline(c), "epilogue", "scheduled loops")


def test_wgmma_pipeline_refuses_a_predicated_epilogue():
    sch = tdsl.Schedule(tdsl.parse('''
@T.prim_func
def gemm_half(A: T.Buffer((64, 128), "float16"), B: T.Buffer((128, 32), "float16"), D: T.Buffer((64, 32), "float32")):
    C = T.alloc_buffer((64, 32), "float32")
    for i, j, k in T.grid(64, 32, 128):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")
    for i, j in T.grid(64, 32):
        with T.block("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.where(i < 32)
            D[vi, vj] = C[vi, vj]
'''))
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.wgmma_pipeline(c), "epilogue", "predicate (T.where)")


def _budgets(func) -> list[tuple[bool, int]]:
    from tdsl.ir import Call, collect
    return [(bool(c.args[0].value), c.args[1].value) for c in collect(func.body, Call) if c.op == "ptx_setmaxnreg"]


def test_warp_specialize_sets_register_budgets_for_two_consumers():
    f = gemm(128, 64, 256)
    sch = pipelined(f, tile_m=128)                         # 1 producer + 2 consumer warpgroups: 384 threads
    assert _budgets(sch.func) == [(False, 40), (True, 232)]   # 128 x 40 + 256 x 232 = 384 x 168
    check(sch, f, args=operands(f))                       # (setmaxnreg: nothing, one statement after another)
    one = pipelined(gemm(64, 64, 256))                    # one consumer: 256 threads start with 248 already
    assert _budgets(one.func) == []


@pytest.mark.parametrize("regs, budgets", [((24, 240), [(False, 24), (True, 240)]), ((0, 0), [])])
def test_warp_specialize_takes_other_budgets(regs, budgets):
    f = gemm(128, 64, 256)
    sch = tdsl.Schedule(f)
    ko = sch.wgmma_pipeline(sch.get_block("C"), tile_m=128)
    sch.warp_specialize(ko, producer_regs=regs[0], consumer_regs=regs[1])
    assert _budgets(sch.func) == budgets
    check(sch, f, args=operands(f))
    assert tdsl.structural_diff(sch.trace.apply(f).func, sch.func) is None   # (the counts are in the trace)


@pytest.mark.parametrize("regs, words", [
    ((36, 232), ["producer_regs", "multiple of 8 in [24, 256]"]),
    ((40, 264), ["consumer_regs", "multiple of 8 in [24, 256]"]),
    ((176, 232), ["producer_regs = 176", "at most 168"]),
    ((40, 160), ["consumer_regs = 160", "at least 168"]),
    ((56, 232), ["exceed the CTA's pool", "384 x 168 = 64512"]),
    ((40, None), ["producer_regs and consumer_regs go together"]),
])
def test_warp_specialize_refuses_budgets_that_cannot_be_granted(regs, words):
    sch = tdsl.Schedule(gemm(128, 64, 256))
    ko = sch.wgmma_pipeline(sch.get_block("C"), tile_m=128)
    kw = {k: v for k, v in zip(("producer_regs", "consumer_regs"), regs) if v is not None}
    expect_error(sch, lambda: sch.warp_specialize(ko, **kw), "warp_specialize", "ko", *words)


# ------------------------------------------------------------------ the output by TMA store

def _tma_stores(func) -> list[str]:
    from tdsl.ir import Call, collect
    return [c.args[0].buffer.name for c in collect(func.body, Call) if c.op == "ptx_tma_store"]


@pytest.mark.parametrize("kw, tiles", [
    (dict(), dict(tile_n=32, tile_k=32)),
    (dict(init=False), dict(tile_n=32, tile_k=32)),                      # C read first, then stored by TMA
    (dict(batch=2, trans_b=True, b_batched=False), dict(tile_n=32, tile_k=32)),
    (dict(M=128, dtype="bfloat16"), dict(tile_m=128, tile_n=32, tile_k=32)),   # two consumer warpgroups
], ids=["fp16", "accumulate", "batched-shared-B", "two-consumers-bf16"])
def test_tma_store_keeps_the_meaning(kw, tiles):
    M = kw.pop("M", 64)
    f = gemm(M, 64, 128, **kw)
    sch = pipelined(f, store="tma", **tiles)
    assert _tma_stores(sch.func) == ["C"]
    text = sch.func.script()
    assert "T.ptx_fence_proxy_async()" in text and 'C_shared = T.alloc_buffer' in text
    assert not re.search(r"\bC\[[^\]]*\] = ", text)                       # no thread stores C
    maps = {m.map: (m.tensor, m.box, m.swizzle) for m in tensor_maps(sch.func)}
    assert maps["C_tmap"] == ("C", (1,) * ("batch" in kw) + (tiles.get("tile_m", 64), 32), "none")
    args = operands(f)
    check(sch, f, args=args)
    a, b, c = args
    bt = np.swapaxes(b, -1, -2) if kw.get("trans_b") else b
    want = a.astype(np.float32) @ bt.astype(np.float32) + (0 if kw.get("init", True) else c)
    got = c.copy()
    tdsl.interpret(sch.func, a, b, got)
    np.testing.assert_array_equal(got, want)
    assert tdsl.structural_diff(sch.trace.apply(f).func, sch.func) is None


def test_tma_store_of_an_epilogue_keeps_the_meaning():
    value = 'T.cast(T.max(C[vb, vi, vj] * s[vi] + bias[vb, vj], T.float32(-1)), "bfloat16")'
    f = gemm_epilogue(64, 32, 128, value, out="bfloat16", batch=2,
                      extra='bias: T.Buffer((2, {N}), "float32"), s: T.Buffer(({M},), "float32"), ')
    sch = pipelined(f, store="tma", tile_n=32, tile_k=32)
    assert _tma_stores(sch.func) == ["D"]
    assert 'D_shared = T.alloc_buffer((1, 64, 32), "bfloat16", scope="shared")' in sch.func.script()
    args = operands(f)
    check(sch, f, args=args)
    a, b, bias, s, d = args
    c = a.astype(np.float32) @ b.astype(np.float32)
    got = d.copy()
    tdsl.interpret(sch.func, a, b, bias, s, got)
    np.testing.assert_array_equal(got, np.maximum(c * s[:, None] + bias[:, None, :], -1).astype(ml_dtypes.bfloat16))


@pytest.mark.parametrize("f, tiles, words", [
    (lambda: gemm_epilogue(64, 32, 128, 'T.cast(C[vi, vj], "int32")', out="int32"), dict(tile_n=32),
     ['store = "tma"', "D is int32", 'store="direct"']),
    (lambda: gemm(128, 256, 256), dict(tile_m=128, tile_n=256, tile_k=64, stages=3),
     ["output tile of the TMA store", "shared memory", 'store="direct"']),
    (lambda: gemm(64, 64, 128), dict(), ["store = 'dma'", "'direct' or 'tma'"]),
], ids=["int32-output", "no-room-for-the-tile", "unknown"])
def test_tma_store_refuses_what_does_not_fit(f, tiles, words):
    sch = tdsl.Schedule(f())
    c = sch.get_block("C")
    store = "dma" if "store = 'dma'" in words else "tma"
    expect_error(sch, lambda: sch.wgmma_pipeline(c, store=store, **tiles), "wgmma_pipeline", "C", *words)
