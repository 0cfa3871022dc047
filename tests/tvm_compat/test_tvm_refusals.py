"""Where tdsl and TVM accept and refuse the same steps (test_tir_schedule_compute_at.py,
test_tir_schedule_compute_inline.py, test_tir_schedule_cache_read_write.py), and where tdsl
accepts a step TVM refuses because its result is provably the same (docs/script.md, "Differences
from TVM"). Every accepted step is checked against the interpreter on the original function, and
the multi-producer ones also against a CPU build of the original."""
from sched_check import check, expect_error, same_on_cpu

import tdsl
from tdsl import T

# multi producer: TVM refuses cache_read / cache_write of a buffer with two writers -------------

@T.prim_func(s_tir=True)
def multi_producer(X: T.Buffer((16,), "float32"), A: T.Buffer((16,), "float32"),
                   B: T.Buffer((16,), "float32")) -> None:
    for i in range(16):
        with T.sblock("A0"):
            vi = T.axis.S(16, i)
            A[vi] = X[vi] * 2.0
    for i in range(8):
        with T.sblock("A1"):
            vi = T.axis.S(16, i * 2)
            A[vi] = A[vi] + 1.0
    for i in range(16):
        with T.sblock("B"):
            vi = T.axis.S(16, i)
            B[vi] = A[vi] * 3.0


def test_cache_read_of_a_buffer_with_two_producers():
    # test_cache_read_fail_multi_producer: the copy runs after both writers, so B reads final values
    sch = tdsl.Schedule(multi_producer)
    sch.cache_read("B", 0, "global")
    check(sch, multi_producer)
    same_on_cpu(sch, multi_producer)


def test_cache_write_of_one_of_two_producers():
    # test_cache_write_fail_multi_producer: A0's cache is copied back before A1 runs
    sch = tdsl.Schedule(multi_producer)
    sch.cache_write("A0", 0, "global")
    check(sch, multi_producer)
    same_on_cpu(sch, multi_producer)
    # A1 updates A in place: a fresh cache would lose A0's values
    sch = tdsl.Schedule(multi_producer)
    expect_error(sch, lambda: sch.cache_write("A1", 0, "global"), "A1", "T.init")


def test_compute_at_under_a_loop_of_the_second_producer_is_refused():
    # A1 reads only the even elements, but B reads all of A0's output after the loop
    sch = tdsl.Schedule(multi_producer)
    (loop,) = sch.get_loops("A1")
    expect_error(sch, lambda: sch.compute_at("A0", loop), "A0", "B")


def test_compute_inline_of_a_buffer_with_two_producers_is_refused():
    @T.prim_func
    def two_writers(X: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")) -> None:
        A = T.alloc_buffer((16,), "float32")
        for i in range(16):
            with T.block("A0"):
                vi = T.axis.S(16, i)
                A[vi] = X[vi] * 2.0
        for i in range(16):
            with T.block("A1"):
                vi = T.axis.S(16, i)
                A[vi] = X[vi] + 1.0
        for i in range(16):
            with T.block("B"):
                vi = T.axis.S(16, i)
                B[vi] = A[vi] * 3.0

    sch = tdsl.Schedule(two_writers)
    expect_error(sch, lambda: sch.compute_inline("A1"), "A0", "only writer")
    expect_error(sch, lambda: sch.reverse_compute_inline("B"), "2 writers")


# compute_at: read regions past the buffer's edge ---------------------------------------------

@T.prim_func(s_tir=True)
def read_out_of_bound(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")) -> None:
    B = T.sblock_alloc_buffer([16], "float32")
    for i in T.serial(0, 16):
        with T.sblock("B"):
            v = T.axis.S(16, i)
            B[v] = A[v]
    for j in T.serial(0, 16):
        with T.sblock("C"):
            v = T.axis.S(16, j)
            T.reads(B[v: v + 2])
            C[v] = T.if_then_else(v < 15, T.max(B[v], B[v + 1]), B[v], dtype="float32")


@T.prim_func(s_tir=True)
def concat_two_elemwise(x: T.Buffer((16,), "float32"), y: T.Buffer((8,), "float32"),
                        T_concat: T.Buffer((24,), "float32")) -> None:
    T_add_1 = T.sblock_alloc_buffer([16], dtype="float32")
    T_add_2 = T.sblock_alloc_buffer([8], dtype="float32")
    for i in T.serial(16):
        with T.sblock("T_add_1"):
            ax = T.axis.spatial(16, i)
            T_add_1[ax] = x[ax] + T.float32(1)
    for i in T.serial(8):
        with T.sblock("T_add_2"):
            ax = T.axis.spatial(8, i)
            T_add_2[ax] = y[ax] + T.float32(2)
    for i in T.serial(24):
        with T.sblock("T_concat"):
            ax = T.axis.spatial(24, i)
            T_concat[ax] = T.if_then_else(16 <= ax, T_add_2[ax - 16], T_add_1[ax], dtype="float32")


def test_compute_at_with_a_read_region_past_the_buffer():
    # test_read_out_of_bound: B[v + 1] at v = 15 is guarded, and names no element anyone writes
    sch = tdsl.Schedule(read_out_of_bound)
    (loop,) = sch.get_loops("C")
    sch.compute_at("B", loop)
    check(sch, read_out_of_bound)
    assert "T.where" in sch.func.script()


def test_compute_at_concat_places_each_producer_before_the_consumer():
    # test_compute_at_concat: TVM's index=-1, the last place before the first consumer
    sch = tdsl.Schedule(concat_two_elemwise)
    (loop,) = sch.get_loops("T_concat")
    sch.compute_at("T_add_1", loop)
    sch.compute_at("T_add_2", loop)
    check(sch, concat_two_elemwise)
    text = sch.func.script()
    assert text.index('T.block("T_add_1")') < text.index('T.block("T_add_2")') < text.index('T.block("T_concat")')


# reverse_compute_at: a consumer reading digits of its iterator ---------------------------------

@T.prim_func(s_tir=True)
def floordiv_and_floormod_indices(X: T.Buffer((16, 16), "float32"), Y: T.Buffer((256,), "float32")) -> None:
    temp = T.sblock_alloc_buffer([16, 16])
    for i, j in T.grid(16, 16):
        with T.sblock("A"):
            v_i, v_j = T.axis.remap("SS", [i, j])
            temp[v_i, v_j] = X[v_j, v_i] + 1.0
    for i in T.serial(0, 256):
        with T.sblock("B"):
            v_i = T.axis.remap("S", [i])
            Y[v_i] = temp[v_i // 16, v_i % 16]


def test_reverse_compute_at_with_floordiv_and_floormod_reads():
    sch = tdsl.Schedule(floordiv_and_floormod_indices)
    i, _ = sch.get_loops("A")
    sch.reverse_compute_at("B", i)
    check(sch, floordiv_and_floormod_indices)
    assert len(sch.get_loops("B")) == 2  # i, and 16 instances of B under it


def test_reverse_compute_at_still_refuses_reading_ahead():
    # under the inner loop j only one element of the row exists per iteration, while B's
    # instances need elements in consecutive order of v_i % 16 = j: that works; but under a loop
    # of X's transpose order (temp[v_i, v_j] written column by column) it would not
    @T.prim_func
    def transposed(X: T.Buffer((16, 16), "float32"), Y: T.Buffer((256,), "float32")) -> None:
        temp = T.alloc_buffer((16, 16), "float32")
        for j, i in T.grid(16, 16):
            with T.block("A"):
                v_i, v_j = T.axis.remap("SS", [i, j])
                temp[v_i, v_j] = X[v_j, v_i] + T.float32(1)
        for i in range(256):
            with T.block("B"):
                v_i = T.axis.remap("S", [i])
                Y[v_i] = temp[v_i // 16, v_i % 16]

    sch = tdsl.Schedule(transposed)
    j, _ = sch.get_loops("A")
    expect_error(sch, lambda: sch.reverse_compute_at("B", j), "B", "A")


# reverse_compute_inline: one-to-one reads, over-computing producers ----------------------------

@T.prim_func(s_tir=True)
def overcomputed_injective_load(A: T.Buffer((128, 128), "float32"), C: T.Buffer((127, 127), "float32")) -> None:
    B = T.sblock_alloc_buffer((8, 8, 16, 16))
    for i0, j0, i1, j1 in T.grid(8, 8, 16, 16):
        with T.sblock("B"):
            vi, vj, vm, vn = T.axis.remap("SSSS", [i0, j0, i1, j1])
            B[vi, vj, vm, vn] = A[vi * 16 + vm, vj * 16 + vn] * 2.0
    for i, j in T.grid(127, 127):
        with T.sblock("C"):
            cvi, cvj = T.axis.remap("SS", [i, j])
            C[cvi, cvj] = B[cvi // 16, cvj // 16, cvi % 16, cvj % 16] + 1.0


@T.prim_func(s_tir=True)
def affine_load(A: T.Buffer((128, 128), "float32"), C: T.Buffer((8, 32, 8, 8), "float32")) -> None:
    B = T.sblock_alloc_buffer((128, 128))
    for i, j in T.grid(128, 128):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j, k, l in T.grid(8, 32, 8, 8):
        with T.sblock("C"):
            vi, vj, vk, vl = T.axis.remap("SSSS", [i, j, k, l])
            C[vi, vj, vk, vl] = B[((((vi * 32) + vj) * 8 + vk) * 8 + vl) // 128,
                                  ((((vi * 32) + vj) * 8 + vk) * 8 + vl) % 128]


@T.prim_func(s_tir=True)
def affine_chain(A: T.Buffer((128, 128), "float32"), D: T.Buffer((1, 8, 16, 128), "float32")):
    B = T.sblock_alloc_buffer((128, 128))
    C = T.sblock_alloc_buffer((8, 16, 128))
    for i, j in T.grid(128, 128):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j, k in T.grid(8, 16, 128):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSS", [i, j, k])
            C[vi, vj, vk] = B[vi * 16 + vj, vk] + 1.0
    for i, j, k, l in T.grid(1, 8, 16, 128):
        with T.sblock("D"):
            vi, vj, vk, vl = T.axis.remap("SSSS", [i, j, k, l])
            D[vi, vj, vk, vl] = C[vj, vk, vl]


@T.prim_func(s_tir=True)
def predicate_producer(A: T.Buffer((128, 128), "float32"), C: T.Buffer((127, 128), "float32")) -> None:
    B = T.sblock_alloc_buffer((127, 128))
    for i, j in T.grid(128, 128):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.where(i < 127)
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j in T.grid(127, 128):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] + 1.0


@T.prim_func(s_tir=True)
def producer_not_cover_consumer(A: T.Buffer((128, 128), "float32"), D: T.Buffer((256, 128), "float32")) -> None:
    B = T.sblock_alloc_buffer((128, 128))
    for i, j in T.grid(128, 128):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j in T.grid(256, 128):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = T.if_then_else(vi >= 128, B[vi - 128, vj], T.float32(0), dtype="float32")


def test_reverse_compute_inline_overcomputed_producer_gets_a_predicate():
    sch = tdsl.Schedule(overcomputed_injective_load)
    sch.reverse_compute_inline("C")
    check(sch, overcomputed_injective_load)
    assert "127" in sch.func.script().split("T.where(")[1].split(")")[0]


def test_reverse_compute_inline_fused_then_split_read():
    sch = tdsl.Schedule(affine_load)
    sch.reverse_compute_inline("C")
    check(sch, affine_load)
    assert "T.where" not in sch.func.script()


def test_reverse_compute_inline_chain_with_a_unit_iterator():
    for order in (("D", "C"), ("C", "D")):
        sch = tdsl.Schedule(affine_chain)
        for name in order:
            sch.reverse_compute_inline(name)
        check(sch, affine_chain)
        assert sch.func.script().count("T.block(") == 1


def test_reverse_compute_inline_predicated_producer():
    sch = tdsl.Schedule(predicate_producer)
    sch.reverse_compute_inline("C")
    check(sch, predicate_producer)


def test_reverse_compute_inline_refuses_reads_the_producer_does_not_write():
    sch = tdsl.Schedule(producer_not_cover_consumer)
    expect_error(sch, lambda: sch.reverse_compute_inline("C"), "C", "B", "writes")


def test_reverse_compute_inline_refuses_a_consumer_reading_two_elements_as_one():
    @T.prim_func
    def folded(A: T.Buffer((16,), "float32"), C: T.Buffer((32,), "float32")) -> None:
        B = T.alloc_buffer((16,), "float32")
        for i in range(16):
            with T.block("B"):
                vi = T.axis.S(16, i)
                B[vi] = A[vi] * T.float32(2)
        for i in range(32):
            with T.block("C"):
                vi = T.axis.S(32, i)
                C[vi] = B[vi // 2] + T.float32(1)

    sch = tdsl.Schedule(folded)
    expect_error(sch, lambda: sch.reverse_compute_inline("C"), "C", "// 2]", "one-to-one")


# opaque accesses -------------------------------------------------------------------------------

@T.prim_func(s_tir=True)
def opaque_access_load(A: T.Buffer((128, 128), "float32"), C: T.Buffer((128, 128), "float32")) -> None:
    B = T.sblock_alloc_buffer((128, 128))
    for i, j in T.grid(128, 128):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j in T.grid(128, 128):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(B[0:128, 0:128])
            T.writes(C[0:128, 0:128])
            T.evaluate(B.access_ptr("r", extent=128))
            C[vi, vj] = B[vi, vj] + 1.0


def test_compute_inline_refuses_a_buffer_whose_address_is_taken():
    # test_opaque_access_load: inlining used to leave T.address_of(A[0, 0] * 2.0)
    sch = tdsl.Schedule(opaque_access_load)
    expect_error(sch, lambda: sch.compute_inline("B"), "C", "address", "B")


@T.prim_func(s_tir=True)
def buffer_matched(A: T.Buffer((128, 128), "float32"), C: T.Buffer((128, 128), "float32")) -> None:
    B = T.sblock_alloc_buffer((128, 128))
    for i, j in T.grid(128, 128):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j in T.grid(128, 128):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            Bb = T.match_buffer(B[vi: vi + 1, vj], (1, 1))
            C[vi, vj] = Bb[0, 0] + 1.0


def test_compute_inline_through_a_matched_view():
    # test_buffer_matched: TVM refuses; tdsl's view is its parent's element B[vi, vj], so the
    # inlined read is a plain one
    sch = tdsl.Schedule(buffer_matched)
    sch.compute_inline("B")
    check(sch, buffer_matched)


# split factors covering more than the loop; decompose_reduction under a tail guard -------------

MATMUL = '''
@T.prim_func
def matmul(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    for i, j, k in T.grid(32, 32, 32):
        with T.block("update"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj, vk]
'''


def test_split_factors_may_cover_more_than_the_loop():
    # test_split_with_predicate: [5, 7] over 32 iterations runs 35 with a T.where guard
    original = tdsl.parse(MATMUL)
    sch = tdsl.Schedule(original)
    i, _, _ = sch.get_loops("update")
    sch.split(i, factors=[5, 7])
    check(sch, original)
    assert "T.where(i_0 * 7 + i_1 < 32)" in sch.func.script()
    i0, _, _, _ = sch.get_loops("update")
    expect_error(sch, lambda: sch.split(i0, factors=[2, 2]), "at least")


def test_decompose_reduction_above_a_split_with_a_tail_guard():
    # test_reduction_decompose4: the guard k_0 * 7 + k_1 < 32 holds at k = 0, where the init runs
    original = tdsl.parse(MATMUL)
    sch = tdsl.Schedule(original)
    i, _, k = sch.get_loops("update")
    _, ii = sch.split(i, factors=[4, 8])
    sch.split(k, factors=[5, 7])
    sch.decompose_reduction("update", ii)
    check(sch, original)
    init = sch.func.script().split('T.block("update_init")')[1].split("T.block(")[0]
    assert "T.where" not in init


def test_decompose_reduction_refuses_a_guard_false_at_the_first_iteration():
    @T.prim_func
    def skip_first(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8,), "float32")):
        for i, k in T.grid(8, 8):
            with T.block("B"):
                vi, vk = T.axis.remap("SR", [i, k])
                T.where(1 <= k)
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] = B[vi] + A[vi, vk]

    sch = tdsl.Schedule(skip_first)
    i, _ = sch.get_loops("B")
    expect_error(sch, lambda: sch.decompose_reduction("B", i), "B", "first iteration")


# cache_write of a block with a predicate -------------------------------------------------------

@T.prim_func
def half_overwritten(A: T.Buffer((10,), "float32"), C: T.Buffer((10,), "float32")):
    for i in range(10):
        with T.block("C0"):
            vi = T.axis.S(10, i)
            C[vi] = A[vi]
    for i in range(10):
        with T.block("C1"):
            vi = T.axis.S(10, i)
            T.where(i < 5)
            C[vi] = A[vi] * T.float32(2)


def test_cache_write_refuses_a_predicate_that_skips_part_of_the_box():
    # the copy back of C[0:10] would overwrite C0's C[5:10] with garbage (tdsl used to accept)
    sch = tdsl.Schedule(half_overwritten)
    expect_error(sch, lambda: sch.cache_write("C1", 0, "global"), "C1", "T.where")


def test_cache_write_after_a_non_dividing_split():
    original = tdsl.parse(MATMUL)
    sch = tdsl.Schedule(original)
    i, _, _ = sch.get_loops("update")
    sch.split(i, factors=[None, 5])
    sch.cache_write("update", 0, "local")
    check(sch, original)


# reorder of loops under a predicate or a non-affine binding ------------------------------------

@T.prim_func(s_tir=True)
def reorder_predicate(A: T.Buffer((4, 4, 4, 4), "float32"), B: T.Buffer((4, 4, 4, 4), "float32")) -> None:
    for i, j, k, l in T.grid(4, 4, 4, 4):
        with T.sblock("B"):
            T.where(i * 64 + j * 16 + k * 4 + l < 100)
            vi, vj, vk, vl = T.axis.remap("SSSS", [i, j, k, l])
            B[vi, vj, vk, vl] = A[vi, vj, vk, vl] * 2.0


@T.prim_func(s_tir=True)
def reorder_not_affine(A: T.Buffer((4, 4, 4, 16), "float32"), B: T.Buffer((4, 4, 4, 16), "float32")) -> None:
    for i, j, k, l in T.grid(4, 4, 4, 4):
        with T.sblock("B"):
            vi, vj, vk = T.axis.remap("SSS", [i, j, k])
            vl = T.axis.S(16, l * 4)
            B[vi, vj, vk, vl] = A[vi, vj, vk, vl] * 2.0


def test_reorder_with_a_predicate_or_a_non_affine_binding():
    # test_reorder_with_predicate / test_reorder_fail_not_affine_bindings: TVM refuses; the
    # instances are independent (each writes its own element), so any order gives the same result
    for original in (reorder_predicate, reorder_not_affine):
        sch = tdsl.Schedule(original)
        i, _, _, l = sch.get_loops("B")
        sch.reorder(l, i)
        check(sch, original)


@T.prim_func(s_tir=True)
def layout_trans(A: T.Buffer((1, 3, 5, 5, 16), "float32"), C: T.Buffer((1, 6, 5, 5, 8), "float32")):
    B = T.sblock_alloc_buffer((1, 3, 5, 5, 16))
    for i0, i1, i2, i3, i4 in T.grid(1, 3, 5, 5, 16):
        with T.sblock("compute"):
            v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
            B[v_i0, v_i1, v_i2, v_i3, v_i4] = A[v_i0, v_i1, v_i2, v_i3, v_i4] + T.float32(1)
    for ax0, ax1, ax2, ax3, ax4 in T.grid(1, 6, 5, 5, 8):
        with T.sblock("T_layout_trans"):
            v_ax0, v_ax1, v_ax2, v_ax3, v_ax4 = T.axis.remap("SSSSS", [ax0, ax1, ax2, ax3, ax4])
            C[v_ax0, v_ax1, v_ax2, v_ax3, v_ax4] = B[v_ax0, (v_ax1 * 8 + v_ax4) // 16, v_ax2, v_ax3,
                                                     (v_ax1 * 8 + v_ax4) % 16]


def test_reverse_compute_at_of_a_layout_transform():
    # test_reverse_compute_at_layout_trans: each i1 of the producer yields two rows v_ax1 of C
    sch = tdsl.Schedule(layout_trans)
    i1 = sch.get_loops("compute")[1]
    sch.reverse_compute_at("T_layout_trans", i1)
    check(sch, layout_trans)
    text = sch.func.script()
    assert "i1 * 2 + " in text  # two rows of C per row of B
