"""`compact_buffers`: intermediates shrink to what one iteration of a loop touches, allocated in
that loop, only where no value crosses iterations; results stay those of the interpreter."""
import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.ir import Allocate, For, IntImm, collect
from tdsl.lower import compact_buffers, convert_blocks


def allocations(func) -> dict[str, tuple]:
    """name -> (shape as ints or expression strings, scope) of every Allocate."""
    out = {}
    for a in collect(func.body, Allocate):
        shape = tuple(s.value if isinstance(s, IntImm) else getattr(s, "name", str(s)) for s in a.buffer.shape)
        out[a.buffer.name] = (shape, a.buffer.scope)
    return out


def allocated_in(func, loop_kind: str) -> set[str]:
    """Names of the buffers allocated inside a loop of `loop_kind`."""
    return {a.buffer.name for f in collect(func.body, For) if f.kind == loop_kind for a in collect(f.body, Allocate)}


def compacted(func):
    """The function after convert_blocks and compact_buffers (n-d buffers, easy to read)."""
    return compact_buffers(convert_blocks(func))


def check_results(func_or_sch, *arrays, **scalars):
    """The interpreter on the original, on the lowered function and the compiled kernel agree."""
    func = getattr(func_or_sch, "func", func_or_sch)
    want = tdsl.interpret(func, *[a.copy() for a in arrays], **scalars)
    lowered_got = tdsl.interpret(tdsl.lower(func_or_sch), *[a.copy() for a in arrays], **scalars)
    built_got = tdsl.build(func_or_sch)(*[a.copy() for a in arrays], **scalars)
    for got in (lowered_got, built_got):
        for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            np.testing.assert_allclose(g, w, rtol=1e-6)


# ----------------------------------------------------------------------------- compute_at

@T.prim_func
def two_stage(A: T.Buffer((16, 32), "float32"), B: T.Buffer((16, 32), "float32")):
    E = T.alloc_buffer((16, 32), "float32")
    for i, j in T.grid(16, 32):
        with T.block("E"):
            vi, vj = T.axis.remap("SS", [i, j])
            E[vi, vj] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(16, 32):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = E[vi, vj] + E[vi, 31 - vj]


@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_producer_computed_at_the_row_loop_becomes_one_row(kind, rng):
    sch = tdsl.Schedule(two_stage)
    row, _ = sch.get_loops(sch.get_block("B"))
    sch.compute_at(sch.get_block("E"), row)
    if kind == "parallel":
        sch.parallel(row)
    assert allocations(compacted(sch.func)) == {"E": ((1, 32), "global")}
    lowered = tdsl.lower(sch)
    assert allocations(lowered) == {"E": ((32,), "local")}       # one row on the stack
    if kind == "parallel":
        assert allocated_in(lowered, "parallel") == {"E"}        # per thread
    check_results(sch, rng.standard_normal((16, 32)).astype(np.float32))


def test_not_computed_at_means_no_loop_to_shrink_into():
    assert allocations(compacted(two_stage)) == {"E": ((16, 32), "global")}


def test_softmax_schedule_keeps_one_row_one_element_and_one_vector(rng):
    from bench.schedules import softmax_schedule

    sch = softmax_schedule(8, 64, lanes=16)
    lowered = tdsl.lower(sch)
    assert allocations(lowered) == {"row_max": ((1,), "local"), "row_sum": ((1,), "local"), "E": ((64,), "local"),
                                    "max_rf": ((16,), "local"), "sum_rf": ((16,), "local")}
    assert allocated_in(lowered, "parallel") == set(allocations(lowered))
    a = rng.standard_normal((8, 64)).astype(np.float32)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(tdsl.build(sch)(a), e / e.sum(1, keepdims=True), rtol=1e-5)
    check_results(sch, a)


@T.prim_func
def two_stage_contiguous(A: T.Buffer((16, 32), "float32"), B: T.Buffer((16, 32), "float32")):
    E = T.alloc_buffer((16, 32), "float32")
    for i, j in T.grid(16, 32):
        with T.block("E"):
            vi, vj = T.axis.remap("SS", [i, j])
            E[vi, vj] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(16, 32):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = E[vi, vj] + T.float32(1)


def test_vectorized_loops_still_vectorize_and_are_never_the_allocation_site(rng):
    sch = tdsl.Schedule(two_stage_contiguous)
    row, _ = sch.get_loops(sch.get_block("B"))
    sch.compute_at(sch.get_block("E"), row)
    for block in ("E", "B"):
        _, vec = sch.split(sch.get_loops(sch.get_block(block))[-1], factors=[None, 8])
        sch.vectorize(vec)
    lowered = tdsl.lower(sch)
    assert allocations(lowered) == {"E": ((32,), "local")}
    assert not tdsl.lower.notes(lowered)                            # every vectorized loop became vector code
    check_results(sch, rng.standard_normal((16, 32)).astype(np.float32))


# ----------------------------------------------------------------------------- stencils

@T.prim_func
def row_stencil(A: T.Buffer((8, 30), "float32"), B: T.Buffer((8, 30), "float32")):
    P = T.alloc_buffer((8, 32), "float32")
    for i, j in T.grid(8, 32):
        with T.block("pad"):
            vi, vj = T.axis.remap("SS", [i, j])
            P[vi, vj] = T.if_then_else(1 <= vj <= 30, A[vi, vj - 1], T.float32(0))
    for i, j in T.grid(8, 30):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = P[vi, vj] + P[vi, vj + 1] + P[vi, vj + 2]


def test_stencil_reads_overlap_inside_one_iteration(rng):
    sch = tdsl.Schedule(row_stencil)
    row, _ = sch.get_loops(sch.get_block("B"))
    sch.compute_at(sch.get_block("pad"), row)
    sch.parallel(row)
    assert allocations(compacted(sch.func)) == {"P": ((1, 32), "global")}
    check_results(sch, rng.standard_normal((8, 30)).astype(np.float32))


@T.prim_func
def column_stencil(A: T.Buffer((10, 16), "float32"), B: T.Buffer((8, 16), "float32")):
    P = T.alloc_buffer((10, 16), "float32")
    for i, j in T.grid(10, 16):
        with T.block("P"):
            vi, vj = T.axis.remap("SS", [i, j])
            P[vi, vj] = A[vi, vj] * T.float32(3)
    for i, j in T.grid(8, 16):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = P[vi, vj] + P[vi + 1, vj] + P[vi + 2, vj]


def test_stencil_recomputed_per_iteration_keeps_the_rows_of_one_iteration(rng):
    """P computed at the row loop covers rows i..i+2: consecutive iterations share two rows,
    but each iteration writes all three before reading them, so P becomes those three rows."""
    sch = tdsl.Schedule(column_stencil)
    row, _ = sch.get_loops(sch.get_block("B"))
    sch.compute_at(sch.get_block("P"), row)
    out = compacted(sch.func)
    assert allocations(out) == {"P": ((3, 16), "global")}
    assert allocated_in(out, "serial") == {"P"}
    check_results(sch, rng.standard_normal((10, 16)).astype(np.float32))


def test_a_guarded_producer_does_not_prove_its_rows_written(rng):
    """The same stencil with the producer under an `if`: what it writes is not known to cover
    the reads, and the boxes overlap, so P stays outside the loop."""
    @T.prim_func
    def guarded(A: T.Buffer((10, 16), "float32"), B: T.Buffer((8, 16), "float32")):
        P = T.allocate((10, 16), "float32", "global")
        for i in range(8):
            for a, j in T.grid(3, 16):
                if i == 0 or a == 2:
                    P[i + a, j] = A[i + a, j] * T.float32(3)
            for j in range(16):
                B[i, j] = P[i, j] + P[i + 1, j] + P[i + 2, j]

    out = compacted(guarded)
    assert allocations(out) == {"P": ((10, 16), "global")} and not allocated_in(out, "serial")
    a = rng.standard_normal((10, 16)).astype(np.float32)
    p = a * 3
    np.testing.assert_allclose(tdsl.build(guarded)(a), p[:8] + p[1:9] + p[2:10], rtol=1e-6)


# ----------------------------------------------------------------------------- values crossing iterations

def test_a_value_carried_to_the_next_iteration_keeps_its_buffer():
    @T.prim_func
    def running_sum(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        S = T.allocate((1,), "float32", "global")
        for i in range(16):
            if i == 0:
                S[0] = T.float32(0)
            S[0] = S[0] + A[i]
            B[i] = S[0]

    out = compacted(running_sum)
    assert allocations(out) == {"S": ((1,), "global")} and not allocated_in(out, "serial")
    a = np.arange(16, dtype=np.float32)
    np.testing.assert_array_equal(tdsl.build(running_sum)(a), np.cumsum(a))


def test_a_value_carried_across_an_outer_loop_is_not_shrunk_into_the_inner_one():
    """Per iteration of i the region of E is one element, and iterations of i touch different
    elements; but E[i] written when o == 0 is read when o == 1, so E must outlive the i loop."""
    @T.prim_func
    def carried(A: T.Buffer((2, 4), "float32"), B: T.Buffer((4,), "float32")):
        E = T.allocate((4,), "float32", "global")
        for o, i in T.grid(2, 4):
            if o == 1:
                B[i] = E[i]
            E[i] = A[o, i]

    out = compacted(carried)
    assert allocations(out) == {"E": ((4,), "global")} and not allocated_in(out, "serial")
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(tdsl.build(carried)(a), a[0])
    np.testing.assert_array_equal(tdsl.interpret(tdsl.lower(carried), a), a[0])


def test_a_read_of_the_previous_iterations_value_keeps_the_buffer(rng):
    """Each iteration writes S[i] first, but then also reads S[i - 1], which it did not write."""
    @T.prim_func
    def pairs(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        S = T.allocate((8,), "float32", "global")
        for i in range(8):
            S[i] = A[i] * T.float32(2)
            if i >= 1:
                B[i] = S[i] + S[i - 1]

    out = compacted(pairs)
    assert allocations(out) == {"S": ((8,), "global")} and not allocated_in(out, "serial")
    a = rng.standard_normal(8).astype(np.float32)
    got = np.zeros(8, np.float32)
    tdsl.build(pairs)(a, got)
    np.testing.assert_allclose(got[1:], 2 * a[1:] + 2 * a[:-1], rtol=1e-6)


def test_a_scan_through_an_intermediate_keeps_its_buffer():
    @T.prim_func
    def scan(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        S = T.allocate((17,), "float32", "global")
        for i in range(16):
            if i == 0:
                S[0] = T.float32(0)
            S[i + 1] = S[i] + A[i]
            B[i] = S[i + 1]

    out = compacted(scan)
    assert allocations(out) == {"S": ((17,), "global")} and not allocated_in(out, "serial")
    a = np.arange(16, dtype=np.float32)
    np.testing.assert_array_equal(tdsl.build(scan)(a), np.cumsum(a))


@pytest.mark.parametrize("stride, shrinks", [(4, True), (3, False)])
def test_nested_loops_must_not_map_two_iterations_to_one_element(stride, shrinks, rng):
    """An accumulator Acc[i * stride + j] over j < 4, read before it is written in each step of
    k: with stride 4 every (i, j) has its own element, so Acc shrinks to one element per
    (i, j); with stride 3, (0, 3) and (1, 0) share one, so it only shrinks, where it is, to
    the 3 * 3 + 4 elements touched at all."""
    @T.prim_func
    def strided(A: T.Buffer((4, 4, 5), "float32"), B: T.Buffer((4, 4), "float32")):
        Acc = T.allocate((16,), "float32", "global")
        for i, j in T.grid(4, 4):
            for k in range(5):
                if k == 0:
                    Acc[i * 4 + j] = T.float32(0)
                Acc[i * 4 + j] = Acc[i * 4 + j] + A[i, j, k]
            B[i, j] = Acc[i * 4 + j]

    func = strided if stride == 4 else tdsl.parse(strided.script().replace("i * 4 + j", "i * 3 + j"))
    out = compacted(func)
    assert allocations(out) == ({"Acc": ((1,), "global")} if shrinks else {"Acc": ((13,), "global")})
    assert allocated_in(out, "serial") == ({"Acc"} if shrinks else set())
    a = rng.standard_normal((4, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(tdsl.build(func)(a), a.sum(2), rtol=1e-5)


def test_unknown_index_ranges_keep_the_whole_dimension(rng):
    """A gathered index (a load) has no known range: that dimension stays whole, the other one
    still shrinks to the row."""
    @T.prim_func
    def gather(A: T.Buffer((8, 16), "float32"), Idx: T.Buffer((16,), "int32"), B: T.Buffer((8, 16), "float32")):
        E = T.allocate((8, 16), "float32", "global")
        for i in range(8):
            for j in range(16):
                E[i, j] = A[i, j] + T.float32(1)
            for j in range(16):
                B[i, j] = E[i, Idx[j]]

    out = compacted(gather)
    assert allocations(out) == {"E": ((1, 16), "global")}
    a = rng.standard_normal((8, 16)).astype(np.float32)
    idx = rng.permutation(16).astype(np.int32)
    np.testing.assert_allclose(tdsl.build(gather)(a, idx), (a + 1)[:, idx], rtol=1e-6)


# ----------------------------------------------------------------------------- symbolic shapes

@T.prim_func
def sym_two_stage(A: T.Buffer(("n", "m"), "float32"), B: T.Buffer(("n", "m"), "float32")):
    E = T.alloc_buffer((n, m), "float32")
    for i, j in T.grid(n, m):
        with T.block("E"):
            vi, vj = T.axis.remap("SS", [i, j])
            E[vi, vj] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(n, m):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = E[vi, vj] + T.float32(1)


def test_symbolic_shapes_shrink_to_a_symbolic_row_on_the_heap(rng):
    sch = tdsl.Schedule(sym_two_stage)
    row, _ = sch.get_loops(sch.get_block("B"))
    sch.compute_at(sch.get_block("E"), row)
    sch.parallel(row)
    lowered = tdsl.lower(sch)
    ((shape, scope),) = allocations(lowered).values()
    assert scope == "global" and shape == ("m",)                   # one row, per thread
    assert allocated_in(lowered, "parallel") == {"E"}
    for n, m in ((5, 7), (1, 1), (3, 40)):
        check_results(sch, rng.standard_normal((n, m)).astype(np.float32))


def test_region_whose_size_changes_with_the_iteration_stays_whole(rng):
    """A triangular loop: row i touches i + 1 elements, not a fixed size per iteration."""
    @T.prim_func
    def tri(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8, 8), "float32")):
        E = T.allocate((8, 8), "float32", "global")
        for i in range(8):
            for j in range(i + 1):
                E[i, j] = A[i, j] * T.float32(2)
            for j in range(i + 1):
                B[i, j] = E[i, j]

    out = compacted(tri)
    assert allocations(out) == {"E": ((1, 8), "global")}            # rows disjoint; the row stays whole
    a = rng.standard_normal((8, 8)).astype(np.float32)
    got = np.zeros((8, 8), np.float32)
    tdsl.build(tri)(a, got)
    np.testing.assert_allclose(got, np.tril(a * 2), rtol=1e-6)


def test_let_bound_loop_bounds_are_seen_through(rng):
    """A loop bound through a let (the window start s = 4 * i): the region follows s."""
    @T.prim_func
    def windows(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        E = T.allocate((16,), "float32", "global")
        for i in range(4):
            s = i * 4
            for j in range(s, s + 4):
                E[j] = A[j] + T.float32(1)
            for j in range(s, s + 4):
                B[j] = E[j] * T.float32(2)

    out = compacted(windows)
    assert allocations(out) == {"E": ((4,), "global")}
    a = rng.standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(tdsl.build(windows)(a), (a + 1) * 2, rtol=1e-6)


# ----------------------------------------------------------------------------- packing (digit layouts)

def packed_b_gemm(m: int, n: int, k: int, mc: int, kc: int) -> tdsl.Schedule:
    """GotoBLAS-style: loops io (mc rows, parallel) / k0 (kc) / j0 (16 columns) / i / j1 / k1,
    B packed per k0 into 16-wide column panels `(j // 16, k, j % 16)`, computed at k0: every
    io iteration packs the same KC x N panel of B."""
    from bench.schedules import gemm_func

    sch = tdsl.Schedule(gemm_func(m, n, k))
    c = sch.get_block("C")
    pack = sch.cache_read(c, "B", "global")
    sch.transform_layout(pack, "B_global", lambda kk, jj: (jj // 16, kk, jj % 16))
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, factors=[None, mc])
    j0, j1 = sch.split(j, factors=[None, 16])
    k0, k1 = sch.split(kk, factors=[None, kc])
    sch.reorder(io, k0, j0, ii, j1, k1)
    sch.parallel(io)
    sch.compute_at(pack, k0)
    return sch


def loop_body(func, name: str):
    (loop,) = [f for f in collect(func.body, For) if f.loop_var.name == name]
    return loop.body


@pytest.mark.parametrize("m, n, k, flat, scope", [(8, 48, 32, 768, "local"), (4, 512, 32, 8192, "global")])
def test_b_panel_packed_at_k0_under_a_parallel_loop_is_one_panel_per_iteration(m, n, k, flat, scope, rng):
    """The panel's box does not move with io, but each k0 iteration writes the whole panel
    (digits j // 16, j % 16 of j over all N columns) before reading it: B_global becomes one
    KC x N panel allocated in k0, so in the parallel loop, each thread with its own copy
    instead of all threads writing one shared B_global; on the heap it is allocated once per
    io iteration, not per k0 iteration."""
    sch = packed_b_gemm(m, n, k, mc=m // 2, kc=16)
    out = compacted(sch.func)
    assert allocations(out) == {"B_global": ((n // 16, 16, 16), "global")}
    assert isinstance(loop_body(out, "k_0"), Allocate)
    lowered = tdsl.lower(sch)
    assert allocations(lowered) == {"B_global": ((flat,), scope)}
    assert allocated_in(lowered, "parallel") == {"B_global"}
    assert allocated_in(lowered, "serial") == (set() if scope == "global" else {"B_global"})
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(tdsl.build(sch)(a, b), a @ b, rtol=1e-4, atol=1e-4)
    check_results(sch, a, b)


def test_a_block_packed_at_the_parallel_loop_under_a_column_loop_is_private(rng):
    """jc (2 column blocks) / io (parallel) with A packed per io into `(i // 4, k, i % 4)`: both
    jc iterations pack the same rows, so the boxes of (jc, io) are not disjoint, but each io
    iteration writes its block first: A_global shrinks to one block inside the parallel loop."""
    from bench.schedules import gemm_func

    sch = tdsl.Schedule(gemm_func(8, 32, 16))
    c = sch.get_block("C")
    pack = sch.cache_read(c, "A", "global")
    i, j, kk = sch.get_loops(c)
    jc, j1 = sch.split(j, factors=[None, 16])
    io, ii = sch.split(i, factors=[None, 4])
    sch.reorder(jc, io, ii, j1, kk)
    sch.parallel(io)
    sch.compute_at(pack, io)
    sch.transform_layout(pack, "A_global", lambda ii_, kk_: (ii_ // 4, kk_, ii_ % 4))
    assert allocations(compacted(sch.func)) == {"A_global": ((1, 16, 4), "global")}
    assert allocated_in(tdsl.lower(sch), "parallel") == {"A_global"}
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((16, 32)).astype(np.float32)
    np.testing.assert_allclose(tdsl.build(sch)(a, b), a @ b, rtol=1e-5, atol=1e-5)
    check_results(sch, a, b)


SHARED_PACK = '''
@T.prim_func
def shared_pack(A: T.Buffer((4, {w}), "float32"), B: T.Buffer((4, {w}), "float32")):
    P = T.allocate({shape}, "float32", "global")
    for i in T.parallel(4):
        for j in range({lo}, {lo} + {w}):
            P[{index}] = A[0, j - {lo}] * T.float32(2)
        for j in range({lo}, {lo} + {w}):
            B[i, j - {lo}] = P[{index}] + A[i, j - {lo}]
'''


@pytest.mark.parametrize("w, lo, shape, index, private", [
    (32, 0, (2, 16), "j // 16, j % 16", True),
    (32, 16, (3, 16), "j // 16, j % 16", True),           # aligned start: rows 1..2
    (16, 0, (4, 4), "j % 16 // 4, j % 4", True),          # the simplifier's form of (j // 4) % 4
    (32, 0, (4, 4), "j // 4 % 4, j % 4", True),           # two whole periods of the modulus
    (24, 0, (2, 16), "j // 16, j % 16", False),           # row 1 only half written
    (32, 8, (3, 16), "j // 16, j % 16", False),           # unaligned start: rows 0 and 2 partly written
    (32, 0, (8, 16), "j // 4, j % 16", False),            # overlapping digits: not a whole box
    (16, 0, (16, 16), "j, j", False),                     # the diagonal
])
def test_digit_indexed_stores_write_a_whole_box_only_when_aligned(w, lo, shape, index, private, rng):
    """Every parallel iteration writes P, the same elements, then reads them. P is private to
    each iteration only when the digits of j provably write a whole box; otherwise it stays
    shared (conservative), and results equal the interpreter's either way (numpy's where no
    two j share an element; with two periods of j // 4 % 4 the second one's values win)."""
    func = tdsl.parse(SHARED_PACK.format(w=w, lo=lo, shape=shape, index=index))
    out = compacted(func)
    assert allocated_in(out, "parallel") == ({"P"} if private else set())
    a = rng.standard_normal((4, w)).astype(np.float32)
    want = a + 2 * (a[0] if w <= np.prod(shape) else np.tile(a[0, w - 16:], w // 16))
    np.testing.assert_allclose(tdsl.interpret(func, a), want, rtol=1e-6)
    check_results(func, a)


def test_a_digit_indexed_buffer_whose_values_cross_iterations_is_not_moved():
    """Step o writes row o of S through digits of j in [4 o, 4 o + 4) (a whole row), then
    reads the rows of all earlier steps too: the written box does not cover the reads."""
    @T.prim_func
    def prefix_rows(A: T.Buffer((16,), "float32"), B: T.Buffer((4,), "float32")):
        S = T.allocate((4, 4), "float32", "global")
        for o in range(4):
            for j in range(o * 4, o * 4 + 4):
                S[j // 4, j % 4] = A[j]
            B[o] = T.float32(0)
            for j in range((o + 1) * 4):
                B[o] = B[o] + S[j // 4, j % 4]

    out = compacted(prefix_rows)
    assert allocations(out) == {"S": ((4, 4), "global")} and not allocated_in(out, "serial")
    a = np.arange(16, dtype=np.float32)
    want = np.cumsum(a.reshape(4, 4).sum(1))
    np.testing.assert_array_equal(tdsl.build(prefix_rows)(a), want)
    np.testing.assert_array_equal(tdsl.interpret(tdsl.lower(prefix_rows), a), want)


def test_an_unaligned_digit_store_does_not_prove_the_rows_it_reads_written(rng):
    """Each step writes P through j // 16, j % 16 for j in [8, 40): rows 0 and 2 only in part,
    so its box is not exact. Elements 0..7 of row 0 come from step 0 (under an `if`) and are
    read in step 1: P must not move into the loop (it would shrink there: its first
    dimension is only ever 0), or step 1 would read a fresh buffer (NaN in the interpreter)."""
    @T.prim_func
    def carried_prefix(A: T.Buffer((2, 48), "float32"), B: T.Buffer((2, 32), "float32")):
        P = T.allocate((2, 3, 16), "float32", "global")
        for o in range(2):
            if o == 0:
                for j in range(48):
                    P[0, j // 16, j % 16] = A[0, j]
            for j in range(8, 40):
                P[0, j // 16, j % 16] = A[1, j]
            for j in range(32):
                B[o, j] = P[0, j // 16, j % 16]

    out = compacted(carried_prefix)
    assert allocations(out) == {"P": ((1, 3, 16), "global")} and not allocated_in(out, "serial")
    a = rng.standard_normal((2, 48)).astype(np.float32)
    row = np.concatenate([a[0, :8], a[1, 8:32]])
    np.testing.assert_array_equal(tdsl.interpret(tdsl.lower(carried_prefix), a), [row, row])
    np.testing.assert_array_equal(tdsl.build(carried_prefix)(a), [row, row])
