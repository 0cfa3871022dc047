"""Property tests of the lowering and code generation that landed together: `compact_buffers`
after compute_at (stencils, reductions, parallel outer loops, digit-indexed layouts), the GEMM
schedule of bench/schedules.py at random shapes, and the i64 index arithmetic of the LLVM
codegen on int32 expressions near 2^31, rfactor after decompose_reduction, the softmax /
layernorm / conv2d schedules (streaming stores at any alignment). Oracle: the interpreter on the
unscheduled function (it checks every access against the buffer's shape and fills
intermediates with NaN). The regression tests at the end are the bugs these tests and the deep
fuzzers found (docs/reliability.md). An int32 index expression that overflows is undefined, as
in C (docs/script.md): the simplifier may assume it does not, so the int32 test compares the
built kernel with the interpreter on the lowered function."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import pytest
from fuzz.fuzz_common import assert_close, fuzz_settings, run_interpreter
from hypothesis import given
from hypothesis import strategies as st

import tdsl
from tdsl.lower import passes_for


def lower_without_compaction(func):
    """The CPU pipeline with `compact_buffers` left out (buffers keep their full shapes)."""
    for p in passes_for("cpu"):
        if p.name != "compact_buffers":
            func = p(func)
    return func


# ----------------------------------------------------------------------------- producer / consumer

PRODUCER = '''
@T.prim_func
def f(A: T.Buffer(({h}, {w}), "float32"), B: T.Buffer({out}, "float32")):
    E = T.alloc_buffer(({h}, {w}), "float32")
    for i, j in T.grid({h}, {w}):
        with T.block("E"):
            vi, vj = T.axis.remap("SS", [i, j])
            E[vi, vj] = A[vi, vj] * T.float32(2) + T.float32(1)
{consumer}'''

CONSUMERS = {
    # (output shape, consumer text); dy/dx are the stencil's reach below and right
    "stencil": lambda h, w, dy, dx, o: ((h - dy, w - dx), f'''
    for i, j in T.grid({h - dy}, {w - dx}):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = E[vi + {o[0]}, vj + {o[1]}] + E[vi + {o[2]}, vj + {o[3]}] * T.float32(3)
'''),
    "reverse": lambda h, w, dy, dx, o: ((h, w), f'''
    for i, j in T.grid({h}, {w}):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = E[vi, {w - 1} - vj] - E[{h - 1} - vi, vj]
'''),
    "rowsum": lambda h, w, dy, dx, o: ((h,), f'''
    for i, k in T.grid({h}, {w}):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + E[vi, vk]
'''),
    "colmax": lambda h, w, dy, dx, o: ((w,), f'''
    for j, k in T.grid({w}, {h}):
        with T.block("B"):
            vj, vk = T.axis.remap("SR", [j, k])
            with T.init():
                B[vj] = T.float32(-1000)
            B[vj] = T.max(B[vj], E[vk, vj])
'''),
    "transpose": lambda h, w, dy, dx, o: ((w, h), f'''
    for j, i in T.grid({w}, {h}):
        with T.block("B"):
            vj, vi = T.axis.remap("SS", [j, i])
            B[vj, vi] = E[vi, vj] + E[vi, {w - 1} - vj]
'''),
}

# digit maps of E's layout: (i, j) -> new indices, as lambdas and as text for failure messages
LAYOUTS = {
    "j//c,i,j%c": lambda c: lambda i, j: (j // c, i, j % c),
    "i,j//c,j%c": lambda c: lambda i, j: (i, j // c, j % c),
    "i//c,j,i%c": lambda c: lambda i, j: (i // c, j, i % c),
    "j//c//2,i,j//c%2,j%c": lambda c: lambda i, j: (j // c // 2, i, j // c % 2, j % c),
    "j%c,i,j//c": lambda c: lambda i, j: (j % c, i, j // c),
}


@dataclass
class Case:
    """A producer/consumer program and the schedule steps to apply (some may be refused)."""

    consumer: str
    text: str
    h: int
    w: int
    steps: list[tuple]
    symbolic: bool = False          # the row count is the function's dimension n (h at run time)

    def __repr__(self) -> str:
        return f"Case({self.consumer}, {self.h}x{self.w}, steps={self.steps})\n{self.text}"


@st.composite
def cases(draw, layouts: bool = False) -> Case:
    consumer = draw(st.sampled_from(sorted(CONSUMERS)))
    h, w = draw(st.integers(2, 9)), draw(st.integers(2, 12))
    symbolic = draw(st.integers(0, 3)) == 0
    dy, dx = draw(st.integers(0, 0 if symbolic else min(2, h - 1))), draw(st.integers(0, min(2, w - 1)))
    offs = [draw(st.integers(0, dy)), draw(st.integers(0, dx)), draw(st.integers(0, dy)), draw(st.integers(0, dx))]
    out, body = CONSUMERS[consumer](SENTINEL if symbolic else h, w, dy, dx, offs)
    text = PRODUCER.format(h=SENTINEL if symbolic else h, w=w, out=out, consumer=body)
    if symbolic:
        text = _symbolic_rows(text)
    steps: list[tuple] = []
    for _ in range(draw(st.integers(0, 2))):
        steps.append(("split", draw(st.integers(0, 2)), draw(st.sampled_from([2, 3, 4]))))
    if layouts or draw(st.booleans()):
        steps.append(("layout", draw(st.sampled_from(sorted(LAYOUTS))), draw(st.sampled_from([2, 3, 4]))))
    steps.append(("compute_at", draw(st.integers(0, 3))))
    if draw(st.booleans()):
        steps.append(("parallel", 0))
    if draw(st.booleans()):
        steps.append(("vectorize_producer",))
    order = draw(st.permutations(range(len(steps))))
    return Case(consumer, text, h, w, [steps[k] for k in order], symbolic)


SENTINEL = 7919  # a row count no other number in the templates equals (h - 1 = 7918)


def _symbolic_rows(text: str) -> str:
    """The template written for SENTINEL rows, with the rows the dimension n instead."""
    head, rest = text.split("):\n", 1)
    head = head.replace(str(SENTINEL), '"n"')
    return head + "):\n" + rest.replace(str(SENTINEL - 1), "n - 1").replace(str(SENTINEL), "n")


def apply_steps(case: Case) -> tdsl.Schedule:
    """Apply the case's steps, skipping the ones the schedule refuses (ScheduleError)."""
    sch = tdsl.Schedule(tdsl.parse(case.text))
    for step in case.steps:
        with contextlib.suppress(tdsl.ScheduleError):
            _apply(sch, step)
    return sch


def _apply(sch: tdsl.Schedule, step: tuple) -> None:
    kind = step[0]
    b = sch.get_block("B")
    loops = sch.get_loops(b)
    if kind == "split":
        sch.split(loops[step[1] % len(loops)], factors=[None, step[2]])
    elif kind == "layout":
        sch.transform_layout(sch.get_block("E"), "E", LAYOUTS[step[1]](step[2]))
    elif kind == "compute_at":
        sch.compute_at(sch.get_block("E"), loops[step[1] % len(loops)])
    elif kind == "parallel":
        sch.parallel(loops[0])
    elif kind == "vectorize_producer":
        sch.vectorize(sch.get_loops(sch.get_block("E"))[-1])


def check_case(case: Case, build: bool) -> None:
    sch = apply_steps(case)
    func = tdsl.parse(case.text)
    lowered = {"lowered": tdsl.lower(sch), "lowered without compaction": lower_without_compaction(sch.func)}
    kernels = {bc: tdsl.build(sch, bounds_check=bc) for bc in (False, True)} if build else {}
    for h in ([case.h, 1, case.h + 3] if case.symbolic else [case.h]):
        rng = np.random.default_rng(h)
        a = rng.integers(-8, 8, size=(h, case.w)).astype(np.float32)
        b = np.zeros(tuple(getattr(s, "value", h) for s in func.params[1].shape), np.float32)
        want = run_interpreter(func, [a, b])[1]
        got_sched = run_interpreter(sch.func, [a, b])[1]
        assert_close(got_sched, want, 0, 0, f"scheduled vs original (h={h})\n{case}\n{sch.func.script()}")
        for name, low in lowered.items():
            got = run_interpreter(low, [a, b])[1]
            assert_close(got, want, 0, 0, f"{name} vs original (h={h})\n{case}\n{low.script()}")
        for bounds_check, kernel in kernels.items():
            args = [a.copy(), b.copy()]
            kernel(*args)
            assert_close(args[1], want, 0, 0, f"built (bounds_check={bounds_check}) vs original (h={h})\n{case}")


@fuzz_settings(25)
@given(case=cases())
def test_compute_at_lowered_with_and_without_compaction(case):
    check_case(case, build=False)


@fuzz_settings(8)
@given(case=cases())
def test_compute_at_built(case):
    check_case(case, build=True)


@fuzz_settings(15)
@given(case=cases(layouts=True))
def test_digit_layouts_then_compute_at(case):
    check_case(case, build=False)


@fuzz_settings(6)
@given(case=cases(layouts=True))
def test_digit_layouts_then_compute_at_built(case):
    check_case(case, build=True)


# ----------------------------------------------------------------------------- rfactor after decompose_reduction

REDUCE = '''
@T.prim_func
def f(A: T.Buffer(({h}, {w}), "float32"), B: T.Buffer(({h},), "float32")):
    for i, k in T.grid({h}, {w}):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32({init})
            B[vi] = {update}
'''


@st.composite
def reduction_cases(draw) -> Case:
    factor = draw(st.sampled_from([2, 3, 4, 8]))
    # mostly whole tiles: rfactor refuses the predicate of a non-dividing split
    h, w = draw(st.integers(1, 6)), factor * draw(st.integers(1, 4)) + draw(st.sampled_from([0, 0, 0, 1]))
    init, update = draw(st.sampled_from([("0", "B[vi] + A[vi, vk]"), ("-1000", "T.max(B[vi], A[vi, vk])"),
                                         ("0", "A[vi, vk] * T.float32(2) + B[vi]"),
                                         # no reduction rfactor can split: it must refuse
                                         ("1", "B[vi] * T.float32(2) + A[vi, vk]"), ("0", "A[vi, vk] - B[vi]"),
                                         ("-1000", "T.max(B[vi], A[vi, vk]) + T.float32(1)")]))
    text = REDUCE.format(h=h, w=w, init=init, update=update)
    steps = [("rsplit", factor),
             ("decompose", draw(st.integers(0, 2))) if draw(st.booleans()) else ("noop",),
             ("rfactor", draw(st.integers(1, 2)), draw(st.integers(0, 1)))]
    steps += draw(st.lists(st.sampled_from([("rf_decompose",), ("rf_vectorize",), ("parallel_rf",), ("parallel", 0)]),
                           max_size=3))
    return Case("reduce", text, h, w, steps)


def apply_reduction_steps(case: Case) -> tdsl.Schedule:
    sch = tdsl.Schedule(tdsl.parse(case.text))
    rf = None
    for step in case.steps:
        try:
            b = sch.get_block("B")
            loops = sch.get_loops(b)
            if step[0] == "rsplit":
                sch.split(loops[-1], factors=[None, step[1]])
            elif step[0] == "decompose":
                sch.decompose_reduction(b, loops[step[1] % len(loops)])
            elif step[0] == "rfactor":
                rf = sch.rfactor(loops[step[1] % len(loops)], step[2])
            elif step[0] == "parallel":
                sch.parallel(loops[0])
            elif rf is not None and step[0] == "rf_decompose":
                sch.decompose_reduction(rf, sch.get_loops(rf)[-1])
            elif rf is not None and step[0] == "rf_vectorize":
                sch.vectorize(sch.get_loops(rf)[-1])
            elif rf is not None and step[0] == "parallel_rf":
                sch.parallel(sch.get_loops(rf)[0])
        except tdsl.ScheduleError:
            pass
    return sch


@fuzz_settings(15)
@given(case=reduction_cases())
def test_rfactor_after_decompose_reduction(case):
    sch = apply_reduction_steps(case)
    func = tdsl.parse(case.text)
    a = np.random.default_rng(0).integers(-8, 8, size=(case.h, case.w)).astype(np.float32)
    b = np.full((case.h,), 7, np.float32)
    want = run_interpreter(func, [a, b])[1]
    for name, f in (("scheduled", sch.func), ("lowered", tdsl.lower(sch))):
        assert_close(run_interpreter(f, [a, b])[1], want, 0, 0, f"{name} vs original\n{case}\n{f.script()}")
    args = [a.copy(), b.copy()]
    tdsl.build(sch)(*args)
    assert_close(args[1], want, 0, 0, f"built vs original\n{case}\n{sch.func.script()}")


# ----------------------------------------------------------------------------- GEMM schedule

@fuzz_settings(2)
@given(m=st.integers(1, 40), n=st.sampled_from([8, 16, 24, 32, 40, 48]), k=st.integers(1, 40),
       packs=st.tuples(st.booleans(), st.booleans(), st.booleans()), bounds_check=st.booleans())
def test_gemm_schedule_random_shapes(m, n, k, packs, bounds_check):
    """Packing (digit layouts, compaction under the parallel row loop), tensorize and the
    micro-kernel's prefetches (which may name elements past the packed buffers)."""
    from bench.schedules import gemm_schedule

    sch = gemm_schedule(m, n, k, pack_a=packs[0], pack_b=packs[1], pack_c=packs[2])
    rng = np.random.default_rng(1)
    a = rng.integers(-4, 4, size=(m, k)).astype(np.float32)
    b = rng.integers(-4, 4, size=(k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    tdsl.build(sch, bounds_check=bounds_check)(a, b, c)
    np.testing.assert_array_equal(c, a @ b, err_msg=f"gemm_schedule({m}, {n}, {k}), packs {packs}, "
                                                    f"bounds_check={bounds_check}")


@fuzz_settings(3)
@given(kernel=st.sampled_from(["softmax", "layernorm", "conv2d"]), rows=st.integers(1, 9), vectors=st.integers(2, 5),
       lanes=st.sampled_from([4, 8, 16, 32]), stream=st.booleans(), misaligned=st.booleans(),
       conv=st.tuples(st.integers(1, 2), st.sampled_from([1, 4, 8]), st.integers(1, 4), st.sampled_from([8, 16]),
                      st.integers(1, 3)))
def test_bench_row_schedules_random_shapes(kernel, rows, vectors, lanes, stream, misaligned, conv):
    """Compaction of the per-row buffers and streaming stores (at any alignment of B). Rows are
    whole vectors of `lanes`: the schedules' rfactor refuses a row of 1, 2, 3 or 5 elements."""
    cols = vectors * lanes
    from bench import numpy_ref
    from bench.schedules import conv2d_schedule, layernorm_schedule, softmax_schedule

    rng = np.random.default_rng(2)
    if kernel == "conv2d":
        n, c, h, w, k = conv
        x = rng.integers(-3, 3, size=(n, c, h, w)).astype(np.float32)
        wt = rng.integers(-3, 3, size=(k, c, 3, 3)).astype(np.float32)
        got = tdsl.build(conv2d_schedule(n, c, h, w, k))(x, wt)
        np.testing.assert_array_equal(got, numpy_ref.conv2d_im2col(x, wt), err_msg=f"conv2d {conv}")
        return
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    # a view one element into a bigger array: B's rows start at addresses not 16-byte aligned
    out = np.zeros(rows * cols + 1, np.float32)[1:].reshape(rows, cols) if misaligned else np.zeros((rows, cols), np.float32)
    if kernel == "softmax":
        tdsl.build(softmax_schedule(rows, cols, lanes=lanes, stream=stream))(x, out)
        want = numpy_ref.softmax(x)
    else:
        g, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
        tdsl.build(layernorm_schedule(rows, cols, lanes=lanes, stream=stream))(x, g, b, out)
        want = numpy_ref.layernorm(x, g, b)
    np.testing.assert_allclose(out, want, rtol=2e-4, atol=2e-5, err_msg=f"{kernel} {rows}x{cols} lanes {lanes}")


# ----------------------------------------------------------------------------- int32 index arithmetic

INDEX_PROGRAM = '''
@T.prim_func
def f(A: T.Buffer(({size},), "float32"), B: T.Buffer(({n},), "float32")):
    for i in T.{kind}({n}):
        with T.block("B"):
            vi = T.axis.spatial({n}, i)
            B[vi] = A[{index}]
'''

BIG = [2 ** 31 - 1, 2 ** 31 - 7, 2 ** 30 + 3, 65536, 46341, 1000003, -(2 ** 31) + 5]


@st.composite
def int32_exprs(draw, depth: int = 3) -> str:
    """An int32 expression over vi with constants near 2^31 (it may wrap around)."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(["vi", "vi", str(draw(st.sampled_from(BIG))), str(draw(st.integers(-9, 9)))]))
    op = draw(st.sampled_from(["+", "-", "*", "//", "%", "min", "max"]))
    a, b = draw(int32_exprs(depth - 1)), draw(int32_exprs(depth - 1))
    if "vi" not in a:  # the parser folds (and range-checks) operations on literals only
        a = "vi"
    if op in ("//", "%"):
        return f"({a} {op} {draw(st.sampled_from([3, 7, 10, 16, 1000]))})"
    if op in ("min", "max"):
        return f"T.{op}({a}, {b})"
    return f"({a} {op} {b})"


@st.composite
def index_programs(draw) -> str:
    n, size = draw(st.integers(1, 40)), draw(st.integers(1, 23))
    e = draw(int32_exprs())
    if draw(st.booleans()):  # through int64, as flattened indices are
        e = f'T.cast({e}, "int64")'
    kind = draw(st.sampled_from(["serial", "parallel", "unroll"]))
    return INDEX_PROGRAM.format(size=size, n=n, kind=kind, index=f"{e} % {size}")


@fuzz_settings(15)
@given(text=index_programs())
def test_int32_index_arithmetic_wraps_as_the_interpreter(text):
    """The oracle is the interpreter on the lowered function: the simplifier assumes int32
    sums do not overflow (see test_open_simplifier_assumes_no_int32_overflow), the codegen
    must not add its own assumption. Where that assumption makes the lowered index leave the
    buffer, the bounds-checked build must say so too (the unchecked one is not run)."""
    func = tdsl.parse(text)
    size, n = (p.shape[0].value for p in func.params)
    a = np.arange(size, dtype=np.float32)
    try:
        want = run_interpreter(tdsl.lower(func), [a, np.zeros(n, np.float32)])[1]
    except tdsl.BoundsError:
        with pytest.raises(tdsl.BoundsError):
            tdsl.build(func, bounds_check=True)(a, np.zeros(n, np.float32))
        return
    for bounds_check in (False, True):
        b = np.zeros(n, np.float32)
        tdsl.build(func, bounds_check=bounds_check)(a, b)
        np.testing.assert_array_equal(b, want, err_msg=f"bounds_check={bounds_check}\n{text}")


# ----------------------------------------------------------------------------- regressions

def test_regression_int32_index_sum_wraps_before_modulo():
    """(vi + 2^31 - 1) % 10 is taken of the wrapped int32 sum, as the interpreter does; the
    i64 index arithmetic took it of the exact sum (B[1] was A[8], not A[2])."""
    text = INDEX_PROGRAM.format(size=10, n=8, kind="serial", index="(vi + 2147483647) % 10")
    func = tdsl.parse(text)
    a = np.arange(10, dtype=np.float32)
    want = run_interpreter(func, [a, np.zeros(8, np.float32)])[1]
    np.testing.assert_array_equal(want, [7, 2, 3, 4, 5, 6, 7, 8])
    for bounds_check in (False, True):
        b = np.zeros(8, np.float32)
        tdsl.build(func, bounds_check=bounds_check)(a, b)
        np.testing.assert_array_equal(b, want)


@pytest.mark.parametrize("index", ['T.cast(vi * 1000003 * 4096, "int64") % 7', "T.max(vi * 65536 * 65536, 3) % 5"])
def test_regression_int32_product_wraps_before_widening(index):
    """An int32 product that overflows is wrapped before a cast to int64 or a max reads it."""
    text = INDEX_PROGRAM.format(size=7, n=12, kind="parallel", index=index)
    func = tdsl.parse(text)
    a = np.arange(7, dtype=np.float32)
    want = run_interpreter(func, [a, np.zeros(12, np.float32)])[1]
    b = np.zeros(12, np.float32)
    tdsl.build(func)(a, b)
    np.testing.assert_array_equal(b, want)


def test_regression_compaction_needs_disjoint_boxes_in_one_dimension():
    """Boxes at (3i + 2j, 4i + 5j), 2 x 2 elements: each dimension's radix chain alone breaks
    (3 after 2 over a 2-wide box in the first, 5 after 4 in the second), and iterations (0, 1)
    and (1, 0) share E[3, 5]. compact_buffers took the union of the chains as proof that no
    value crosses iterations, gave each (i, j) its own 2 x 2 E, and (1, 0) read garbage
    instead of the value (0, 1) wrote."""
    text = '''
@T.prim_func
def f(A: T.Buffer((2, 3), "float32"), B: T.Buffer((2, 3), "float32")):
    E = T.alloc_buffer((9, 16), "float32")
    for i, j in T.grid(2, 3):
        with T.block("W"):
            vi, vj = T.axis.remap("SS", [i, j])
            E[3 * vi + 2 * vj + 1, 4 * vi + 5 * vj] = A[vi, vj] + T.float32(100)
        with T.block("R"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = T.if_then_else(vi == 1 and vj == 0, E[3 * vi + 2 * vj, 4 * vi + 5 * vj + 1], A[vi, vj])
'''
    func = tdsl.parse(text)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = run_interpreter(func, [a, np.zeros((2, 3), np.float32)])[1]
    assert want[1, 0] == 101
    assert_close(run_interpreter(tdsl.lower(func), [a, np.zeros((2, 3), np.float32)])[1], want, 0, 0, "lowered")
    b = np.zeros((2, 3), np.float32)
    tdsl.build(func)(a, b)
    assert_close(b, want, 0, 0, "built")


def test_regression_blockize_guards_outer_iterators_of_a_mixed_predicate():
    """Found by the deep schedule fuzzer (row_sum, split i by [None, 3, 2], blockize i_2): the
    predicate i_0 * 6 + i_1 * 2 + i_2 < 16 mixes outer and inner loops, so it stayed on the
    inner block, and the outer block bound vi_o = i_0 * 3 + i_1 to 8, outside [0, 8) (the
    interpreter raised BoundsError). The outer block now guards it: T.where(i_0 * 3 + i_1 < 8)."""
    text = '''
@T.prim_func
def row_sum(A: T.Buffer((16, 40), "float32"), B: T.Buffer((16,), "float32")):
    for i, k in T.grid(16, 40):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vk]
'''
    sch = tdsl.Schedule(tdsl.parse(text))
    i, _ = sch.get_loops(sch.get_block("B"))
    _, _, i2 = sch.split(i, factors=[None, 3, 2])
    sch.blockize(i2)
    a = np.random.default_rng(0).integers(-4, 4, size=(16, 40)).astype(np.float32)
    want = a.sum(axis=1)
    np.testing.assert_array_equal(tdsl.interpret(sch.func, a), want)
    np.testing.assert_array_equal(tdsl.build(sch)(a), want)
