"""TVM's compute_at / cache_read_write / rfactor / transform_layout cases (tests/python/s_tir/schedule)
that tdsl crashed on, accepted without proof, or refused: each test names the TVM case it comes
from, and every accepted step is checked against the interpreter."""
import numpy as np
import pytest
from sched_check import check, expect_error

import tdsl
from tdsl import T


def test_reverse_compute_at_int64_loops_over_an_int32_buffer():
    # test_reverse_compute_at_with_unit_loop: int64 loops over buffers of int32 shape used to
    # raise an internal TypeError ("operands of min differ in dtype")
    @T.prim_func
    def main(A: T.Buffer((32, 32), "float32"), D: T.Buffer((1, 2, 1), "float32")):
        B = T.alloc_buffer((32, 32), "float32")
        for i_0, j_0, i_1 in T.grid(T.int64(4), T.int64(4), T.int64(8)):
            for j_1 in T.serial(T.int64(8)):
                with T.block("B"):
                    vi = T.axis.spatial(T.int64(32), i_0 * T.int64(8) + i_1)
                    vj = T.axis.spatial(T.int64(32), j_0 * T.int64(8) + j_1)
                    B[vi, vj] = A[vi, vj] * T.float32(2)
        for ax0, ax1, ax2 in T.grid(T.int64(1), T.int64(2), T.int64(1)):
            with T.block("D"):
                v0, v1, v2 = T.axis.remap("SSS", [ax0, ax1, ax2])
                D[v0, v1, v2] = B[v0, v1] + T.float32(1)

    sch = tdsl.Schedule(main)
    sch.reverse_compute_at("D", sch.get_loops("B")[2])
    text = sch.func.script()
    assert "T.where(" in text  # D runs only where the (i, j) tile holds its two elements
    check(sch, main)


def test_cache_read_of_sibling_blocks_covers_the_union():
    # test_cache_read_sibling_nested_block_predicates_use_union: the two inner blocks read rows
    # 0-7 and columns 0-15; the cache must hold the union (the whole 12 x 24), not the intersection
    @T.prim_func
    def main(A: T.Buffer((12, 24), "float32"), C: T.Buffer((12, 24), "float32")):
        for i, j in T.grid(12, 24):
            with T.block("compute"):
                vi, vj = T.axis.remap("SS", [i, j])
                with T.block("left"):
                    T.where(vi < 8)
                    C[vi, vj] = A[vi, vj] * T.float32(2)
                with T.block("top"):
                    T.where(vj < 16)
                    C[vi, vj] = A[vi, vj] * T.float32(3)

    sch = tdsl.Schedule(main)
    sch.cache_read("compute", 0, "local")
    assert 'T.alloc_buffer((12, 24), "float32", scope="local")' in sch.func.script()
    check(sch, main)


def test_rfactor_in_a_scope_that_is_not_a_stage_pipeline():
    # test_reduction_rfactor_not_stage_pipeline: D also reads the part of C no block writes; TVM
    # refuses, tdsl's rewrite touches only C's loops, so every element D reads is what it was
    @T.prim_func
    def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"),
             D: T.Buffer((16, 16), "float32")):
        C = T.alloc_buffer((16, 16), "float32")
        for i, j in T.grid(16, 16):
            with T.block("zero"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = T.float32(-1)
        for i, j, k in T.grid(8, 8, 8):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
        for i, j in T.grid(16, 16):
            with T.block("D"):
                vi, vj = T.axis.remap("SS", [i, j])
                D[vi, vj] = C[vi, vj]

    sch = tdsl.Schedule(main)
    _, _, k = sch.get_loops("C")
    sch.rfactor(k, 0)
    check(sch, main)


TWO_ELEMENTWISE = '''
@T.prim_func
def two_elementwise(A: T.Buffer((8, 16), "float32"), C: T.Buffer((8, 16), "float32")):
    B = T.alloc_buffer((8, 16), "float32")
    for i, j in T.grid(8, 16):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(8, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] + T.float32(1)
'''


def _packed(a):
    """(8, 16) -> (2, 4, 4, 4): element [i, j] at [i // 4, j // 4, i % 4, j % 4] (TVM's packed map)."""
    return a.reshape(2, 4, 4, 4).transpose(0, 2, 1, 3).copy()


def test_transform_layout_of_an_input_parameter_changes_the_signature():
    # test_two_elementwise_transform_input_buffer: the kernel then takes A in the packed layout
    f = tdsl.parse(TWO_ELEMENTWISE)
    sch = tdsl.Schedule(f)
    sch.transform_layout("B", ("read", 0), lambda i, j: (i // 4, j // 4, i % 4, j % 4))
    text = sch.func.script()
    assert 'A: T.Buffer((2, 4, 4, 4), "float32")' in text
    assert "A[vi // 4, vj // 4, vi % 4, vj % 4]" in text
    assert tdsl.structural_diff(tdsl.parse(text), sch.func) is None
    a = np.random.default_rng(0).standard_normal((8, 16)).astype("float32")
    want, got = np.zeros((8, 16), "float32"), np.zeros((8, 16), "float32")
    tdsl.interpret(f, a, want)
    tdsl.interpret(sch.func, _packed(a), got)
    np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(tdsl.build(sch)(_packed(a)), want)
    replayed = tdsl.Schedule(f)
    sch.trace.apply(replayed)
    assert tdsl.structural_equal(replayed.func, sch.func)


def test_transform_layout_of_an_output_parameter():
    # test_two_elementwise_transform_output_buffer, and the `lambda *indices, k:` form of
    # test_var_args_sugar (keyword-only parameters name the last dimensions)
    f = tdsl.parse(TWO_ELEMENTWISE)
    sch = tdsl.Schedule(f)
    sch.transform_layout("C", "C", lambda *indices, j: (*indices, j // 4, j % 4))
    assert 'C: T.Buffer((8, 4, 4), "float32")' in sch.func.script()
    a = np.random.default_rng(1).standard_normal((8, 16)).astype("float32")
    want, got = np.zeros((8, 16), "float32"), np.zeros((8, 4, 4), "float32")
    tdsl.interpret(f, a, want)
    tdsl.interpret(sch.func, a, got)
    np.testing.assert_allclose(got.reshape(8, 16), want)


def test_transform_layout_of_a_parameter_with_padding():
    # test_index_map_dtype_legalize: an output parameter padded 58 -> (8, 8) with pad_value 0
    @T.prim_func
    def func(A: T.Buffer((T.int64(58),), "int32")):
        for i in T.serial(T.int64(58)):
            with T.block("block"):
                vi = T.axis.remap("S", [i])
                A[vi] = T.int32(7)

    sch = tdsl.Schedule(func)
    sch.transform_layout("block", "A", lambda h: (h // 8, h % 8), pad_value=0)
    assert "A: T.Buffer((T.int64(8), T.int64(8)), \"int32\")" in sch.func.script()
    got = np.full((8, 8), -1, "int32")
    tdsl.interpret(sch.func, got)
    assert (got.reshape(64)[:58] == 7).all() and (got.reshape(64)[58:] == 0).all()


def test_transform_layout_of_a_parameter_refusals():
    f = tdsl.parse(TWO_ELEMENTWISE.replace("(8, 16)", "(8, 14)").replace("8, 16)", "8, 14)"))
    sch = tdsl.Schedule(f)
    # an input's padding cannot be filled (TVM assumes its value instead)
    expect_error(sch, lambda: sch.transform_layout("B", "A", lambda i, j: (i, j // 4, j % 4), pad_value=0.0),
                 "input parameter", "pad_value", "cache_read")
    sch.transform_layout("B", "A", lambda i, j: (i, j // 4, j % 4))  # without a value: never read
    assert 'A: T.Buffer((8, 4, 4), "float32")' in sch.func.script()


def test_transform_layout_of_a_symbolic_parameter():
    # a symbolic shape is only permuted, so the new signature still declares its size variable
    sym = tdsl.parse('''
@T.prim_func
def scale(A: T.Buffer(("n", 8), "float32"), B: T.Buffer(("n", 8), "float32")):
    for i, j in T.grid(n, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2)
''')
    sch = tdsl.Schedule(sym)
    expect_error(sch, lambda: sch.transform_layout("B", "A", lambda i, j: (i * 8 + j,)), "permutation")
    sch.transform_layout("B", "A", lambda i, j: (j, i))
    assert 'def scale(A: T.Buffer((8, "n"), "float32")' in sch.func.script()
    a = np.random.default_rng(2).standard_normal((5, 8)).astype("float32")
    got = np.zeros((5, 8), "float32")
    tdsl.interpret(sch.func, a.T.copy(), got)
    np.testing.assert_allclose(got, a * 2)


def test_tuning_refuses_a_candidate_that_changed_a_parameter_layout():
    from tdsl.tuner.checking import signature_change

    f = tdsl.parse(TWO_ELEMENTWISE)
    sch = tdsl.Schedule(f)
    assert signature_change(f, sch.func) is None
    sch.transform_layout("B", "A", lambda i, j: (j, i))
    message = signature_change(f, sch.func)
    assert message is not None and "'A'" in message and "(16, 8)" in message and "cache_read" in message


@pytest.mark.parametrize("which", ["compute_at", "reverse_compute_at"])
def test_int64_loops_mixed_with_int32_buffers(which):
    # the int64 variants of test_compute_at_int64_loop: region arithmetic mixes int64 loop
    # variables with int32 shapes
    @T.prim_func
    def main(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
        B = T.alloc_buffer((16, 16), "float32")
        for i, j in T.grid(T.int64(16), T.int64(16)):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] + T.float32(1)
        for i, j in T.grid(T.int64(16), T.int64(16)):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = B[vi, vj] * T.float32(2)

    sch = tdsl.Schedule(main)
    if which == "compute_at":
        sch.compute_at("B", sch.get_loops("C")[0])
    else:
        sch.reverse_compute_at("C", sch.get_loops("B")[0])
    check(sch, main)


NESTED_PREDICATE = '''
@T.prim_func
def main(A: T.Buffer((12, 24), "float32"), C: T.Buffer((10, 20), "float32")):
    for i, j in T.grid(12, 24):
        with T.block("compute"):
            vi, vj = T.axis.remap("SS", [i, j])
            with T.block("inner"):
                T.where(vi < 10 and vj < 20)
                C[vi, vj] = A[vi, vj] * T.float32(2)
'''

SIBLINGS = '''
@T.prim_func
def main(A: T.Buffer((12, 24), "float32"), C: T.Buffer((12, 24), "float32")):
    for i, j in T.grid(12, 24):
        with T.block("compute"):
            vi, vj = T.axis.remap("SS", [i, j])
            with T.block("left"):
                T.where(vi < 8)
                C[vi, vj] = A[vi, vj] * T.float32(2)
            with T.block("top"):
                T.where(vj < 16)
                C[vi, vj] = A[vi, vj] * T.float32(3)
'''

UNDER_SCOPE = '''
@T.prim_func
def under_scope(B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    A = T.alloc_buffer((32, 32), "float32")
    for i0, j0 in T.grid(2, 2):
        with T.block("scope"):
            i, j = T.axis.remap("SS", [i0, j0])
            for x, y in T.grid(16, 16):
                with T.block("A"):
                    vi = T.axis.S(32, i * 16 + x)
                    vj = T.axis.S(32, j * 16 + y)
                    A[vi, vj] = T.float32(1)
            for x, y in T.grid(16, 16):
                with T.block("B"):
                    vi = T.axis.S(32, i * 16 + x)
                    vj = T.axis.S(32, j * 16 + y)
                    B[vi, vj] = A[vi, vj] + T.float32(1)
    for i, j in T.grid(32, 32):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] * T.float32(2)
'''


def test_cache_write_of_a_block_holding_a_predicated_block():
    # test_cache_write_with_nested_block_predicate: the inner block's T.where keeps exactly C's
    # (10, 20) elements, which tdsl checks by running the loops
    f = tdsl.parse(NESTED_PREDICATE)
    sch = tdsl.Schedule(f)
    sch.cache_write("compute", 0, "local")
    text = sch.func.script()
    assert "C_local[vi, vj] = A[vi, vj]" in text and "for ax0, ax1 in T.grid(10, 20):" in text
    check(sch, f)


def test_cache_write_of_sibling_blocks_that_leave_a_corner_unwritten_is_refused():
    # test_cache_write_sibling_nested_block_predicates_use_union: TVM copies back the union's
    # bounding box (12, 24), which holds the corner [8:12, 16:24] neither block writes, so the
    # caller's C is overwritten there with an unset cache; tdsl refuses
    sch = tdsl.Schedule(tdsl.parse(SIBLINGS))
    expect_error(sch, lambda: sch.cache_write("compute", 0, "local"), 'block "compute"', "holds other blocks",
                 "every element")


def test_cache_write_under_a_scope_block():
    # test_cache_write_under_scope: caches of the inner blocks, then of the scope block whose
    # inner block B reads the A its inner block A wrote
    f = tdsl.parse(UNDER_SCOPE)
    sch = tdsl.Schedule(f)
    sch.cache_write("A", 0, "local")
    sch.cache_write("B", 0, "global")
    sch.cache_write("scope", 0, "global")
    text = sch.func.script()
    assert "A_global[v0, v1] = A_local[v0, v1]" in text and "A[v0_2, v1_2] = A_global[v0_2, v1_2]" in text
    check(sch, f)
    replayed = tdsl.Schedule(f)
    sch.trace.apply(replayed)
    assert tdsl.structural_equal(replayed.func, sch.func)


@pytest.mark.parametrize("depth", [0, 1])
def test_compute_at_of_a_reversed_store(depth):
    # test_compute_at_rev_iter: b0 stores Y[9 - vi, 9 - vj]; the instances computed under the
    # loop are found by reflecting the box b1 reads
    @T.prim_func
    def before(X: T.Buffer((10, 10), "float32"), Z: T.Buffer((10, 10), "float32")):
        Y = T.alloc_buffer([10, 10], "float32")
        for i, j in T.grid(10, 10):
            with T.block("b0"):
                vi, vj = T.axis.remap("SS", [i, j])
                Y[9 - vi, 9 - vj] = X[vi, vj] + T.float32(1)
        for i, j in T.grid(10, 10):
            with T.block("b1"):
                vi, vj = T.axis.remap("SS", [i, j])
                Z[vi, vj] = Y[vj, vi] + T.float32(2)

    sch = tdsl.Schedule(before)
    sch.compute_at("b0", sch.get_loops("b1")[depth])
    assert "vj = T.axis.spatial(10, 9 - i_1)" in sch.func.script()  # the second i prints as i_1
    check(sch, before)


BMM_INIT_WITHOUT_REDUCTION = '''
@T.prim_func
def before(S: T.Buffer((6, 1, 1), "float32"), R: T.Buffer((6, 1, 64), "float32"),
           Out: T.Buffer((1, 1, 6, 64), "float32")):
    M = T.alloc_buffer((6, 1, 64), "float32")
    for ax0, ax1 in T.grid(6, 64):
        with T.block("bmm"):
            v0, v1 = T.axis.remap("SS", [ax0, ax1])
            with T.init():
                M[v0, 0, v1] = T.float32(0.5)
            M[v0, 0, v1] = M[v0, 0, v1] + S[v0, 0, 0] * R[v0, 0, v1]
    for ax0, ax1 in T.grid(6, 64):
        with T.block("transpose"):
            v0, v1 = T.axis.remap("SS", [ax0, ax1])
            Out[0, 0, v0, v1] = M[v0, 0, v1] * T.float32(3)
'''


@pytest.mark.parametrize("which", ["reverse_compute_inline", "compute_inline"])
def test_inline_a_block_with_an_init_but_no_reduce_iterator(which):
    # test_inline_with_reduction: "bmm" runs its T.init before each (only) update, so it is the
    # plain store M = 0.5 + S * R, which either inline folds
    text = BMM_INIT_WITHOUT_REDUCTION
    if which == "compute_inline":  # tdsl's compute_inline wants a store at distinct iterators
        text = text.replace("M[v0, 0, v1]", "M[v0, v1]").replace("(6, 1, 64), \"float32\")\n    for", "(6, 64), \"float32\")\n    for")
    f = tdsl.parse(text)
    sch = tdsl.Schedule(f)
    if which == "reverse_compute_inline":
        sch.reverse_compute_inline("transpose")
        assert "Out[0, 0, v0, v1] = (T.float32(0.5) + S[v0, 0, 0] * R[v0, 0, v1]) * T.float32(3.0)" \
            in sch.func.script()
    else:
        sch.compute_inline("bmm")
        assert sorted(b.name for b in tdsl.ir.collect(sch.func.body, tdsl.ir.Block)) == ["root", "transpose"]
    check(sch, f)


def test_rfactor_of_a_unit_loop_that_drives_no_iterator():
    # test_reduction_rfactor_square_sum_square_root: the fused reduction loop split by 1; its
    # inner unit loop drives nothing, so its one partial holds the whole reduction
    @T.prim_func
    def f(A: T.Buffer((4, 8, 8), "float32"), D: T.Buffer((4,), "float32")):
        C = T.alloc_buffer((4,), "float32")
        for i0, fo, fi in T.grid(4, 64, 1):
            with T.block("C"):
                b = T.axis.S(4, i0)
                i = T.axis.R(8, fo // 8)
                j = T.axis.R(8, fo % 8)
                with T.init():
                    C[b] = T.float32(0)
                C[b] = C[b] + A[b, i, j] * A[b, i, j]
        for i0 in range(4):
            with T.block("D"):
                b = T.axis.S(4, i0)
                D[b] = T.sqrt(C[b])

    sch = tdsl.Schedule(f)
    sch.rfactor(sch.get_loops("C")[2], 0)
    assert 'C_rf = T.alloc_buffer((1, 4), "float32")' in sch.func.script()
    check(sch, f)
    sch = tdsl.Schedule(f)
    i0 = sch.get_loops("C")[0]
    expect_error(sch, lambda: sch.rfactor(i0, 0), "spatial iterator")


MIXED_WIDTHS = '''
@T.prim_func
def f(A: T.Buffer((T.int64(16), T.int64(16)), "float32"), C: T.Buffer((T.int64(16), T.int64(16)), "float32")):
    B = T.alloc_buffer((T.int64(16), T.int64(16)), "float32")
    for i, j in T.grid(16, 16):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] + T.float32(1)
    for i, j in T.grid(T.int64(16), T.int64(16)):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] * T.float32(2)
'''


@pytest.mark.parametrize("step", [
    lambda s: s.cache_read("C", 0, "local"), lambda s: s.cache_write("B", 0, "local"),
    lambda s: s.compute_at("B", s.get_loops("C")[0]), lambda s: s.reverse_compute_at("C", s.get_loops("B")[1]),
    lambda s: s.compute_inline("B"), lambda s: s.reverse_compute_inline("C"),
    lambda s: s.transform_layout("B", "B", lambda i, j: (j, i))])
def test_int32_loops_over_int64_buffers(step):
    # the int64 cases (test_compute_at_int64_loop, _reverse_compute_at_with_unit_loop): a block
    # with int32 iterators over an int64-shaped buffer next to one with int64 iterators used to
    # raise internal TypeErrors ("operands of ge differ in dtype")
    f = tdsl.parse(MIXED_WIDTHS)
    sch = tdsl.Schedule(f)
    step(sch)
    check(sch, f)
