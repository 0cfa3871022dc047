"""Each lowering pass on its own: the IR it makes, compared with the expected script."""
import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.lower import (
    convert_blocks,
    flatten_buffers,
    notes,
    remove_no_op,
    simplify,
    storage,
    thread_bindings_to_serial,
    unroll,
    vectorize,
)


def assert_same(got, expected):
    """Parameters and body structurally equal (attrs are checked separately where they matter)."""
    tdsl.assert_structural_equal((got.params, got.body), (expected.params, expected.body))


# ----------------------------------------------------------------------------- convert_blocks

@T.prim_func
def matmul(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def test_convert_blocks_init_becomes_guarded_by_reduce_iterators():
    @T.prim_func
    def expected(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"),
                 C: T.Buffer((16, 16), "float32")):
        for i, j, k in T.grid(16, 16, 16):
            if k == 0:
                C[i, j] = T.float32(0)
            C[i, j] = C[i, j] + A[i, k] * B[k, j]

    assert_same(convert_blocks(matmul), expected)


def test_convert_blocks_predicate_and_block_allocation():
    @T.prim_func
    def before(A: T.Buffer((10,), "float32"), B: T.Buffer((10,), "float32")):
        for i0, i1 in T.grid(3, 4):
            with T.block("B"):
                vi = T.axis.spatial(10, i0 * 4 + i1)
                T.where(i0 * 4 + i1 < 10)
                X = T.alloc_buffer((2,), "float32", scope="local")
                X[0] = A[vi]
                B[vi] = X[0] * T.float32(2)

    @T.prim_func
    def expected(A: T.Buffer((10,), "float32"), B: T.Buffer((10,), "float32")):
        for i0, i1 in T.grid(3, 4):
            if i0 * 4 + i1 < 10:
                X = T.allocate((2,), "float32", "local")
                X[0] = A[i0 * 4 + i1]
                B[i0 * 4 + i1] = X[0] * T.float32(2)

    assert_same(convert_blocks(before), expected)


def test_convert_blocks_nested_blocks_and_split_reduction():
    @T.prim_func
    def before(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.block("outer"):
                vi = T.axis.spatial(4, i)
                for k0, k1 in T.grid(2, 4):
                    with T.block("B"):
                        vk = T.axis.reduce(8, k0 * 4 + k1)
                        with T.init():
                            B[vi] = T.float32(0)
                        B[vi] = B[vi] + A[vi, vk]

    @T.prim_func
    def expected(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
        for i, k0, k1 in T.grid(4, 2, 4):
            if k0 * 4 + k1 == 0:
                B[i] = T.float32(0)
            B[i] = B[i] + A[i, k0 * 4 + k1]

    assert_same(convert_blocks(before), expected)


def test_convert_blocks_constant_reduce_binding_makes_init_unconditional():
    @T.prim_func
    def before(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.block("B"):
                vi = T.axis.spatial(4, i)
                vk = T.axis.reduce(1, 0)
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] = B[vi] + A[vi + vk]

    @T.prim_func
    def expected(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
        for i in range(4):
            B[i] = T.float32(0)
            B[i] = B[i] + A[i + 0]

    assert_same(convert_blocks(before), expected)


def test_convert_blocks_root_allocation_at_function_top():
    @T.prim_func
    def before(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        X = T.alloc_buffer((8,), "float32")
        for i in range(8):
            with T.block("X"):
                vi = T.axis.spatial(8, i)
                X[vi] = A[vi] + T.float32(1)
        for i in range(8):
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                C[vi] = X[vi] * T.float32(2)

    @T.prim_func
    def expected(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        X = T.allocate((8,), "float32", "global")
        for i in range(8):
            X[i] = A[i] + T.float32(1)
        for i in range(8):
            C[i] = X[i] * T.float32(2)

    assert_same(convert_blocks(before), expected)


def test_thread_bindings_become_serial_loops():
    @T.prim_func
    def before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        for bx in T.thread_binding(2, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                with T.block("B"):
                    vi = T.axis.spatial(64, bx * 32 + tx)
                    B[vi] = A[vi]

    got = convert_blocks(thread_bindings_to_serial(before))

    @T.prim_func
    def expected(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        for bx, tx in T.grid(2, 32):
            B[bx * 32 + tx] = A[bx * 32 + tx]

    assert_same(got, expected)


# ----------------------------------------------------------------------------- flatten_buffers

def test_flatten_row_major_and_original_params_in_attrs():
    got = flatten_buffers(convert_blocks(matmul))

    @T.prim_func
    def expected(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32"), C: T.Buffer((256,), "float32")):
        for i, j, k in T.grid(16, 16, 16):
            if k == 0:
                C[i * 16 + j] = T.float32(0)
            C[i * 16 + j] = C[i * 16 + j] + A[i * 16 + k] * B[k * 16 + j]

    assert_same(got, expected)
    originals = dict(got.attrs)["tdsl.flat_params"]
    assert originals == matmul.buffer_params  # the very same Buffer objects, shapes intact


def test_flatten_symbolic_shape_strides_offset_and_scalar_buffer():
    @T.prim_func
    def before(A: T.Buffer(("n", "m", 4), "float32"), B: T.Buffer((3, 5), "float32", strides=(10, 2), offset=1),
               C: T.Buffer((), "float32")):
        for i, j in T.grid(3, 5):
            C[()] = A[i, j, 3] + B[i, j]

    got = flatten_buffers(before)
    a, b, c = got.params
    n, m = before.params[0].shape[:2]
    assert tdsl.structural_equal(a.shape[0], n * m * 4)
    assert b.shape[0].value == 2 * 10 + 4 * 2 + 1 + 1  # last reachable element + 1, offset included
    assert c.shape[0].value == 1
    i, j = got.body.loop_var, got.body.body.loop_var
    store = got.body.body.body
    idx_a = store.value.a.indices[0]
    assert tdsl.structural_equal(idx_a, i * (m * 4) + j * 4 + 3)
    idx_b = store.value.b.indices[0]
    assert tdsl.structural_equal(idx_b, i * 10 + j * 2 + 1)
    assert store.indices[0].value == 0


def test_flatten_keeps_vector_indices_as_ramps_and_lowering_twice_changes_nothing():
    @T.prim_func
    def before(A: T.Buffer((4, 16), "float32"), C: T.Buffer((4, 16), "float32")):
        for i in range(4):
            C[i, T.Ramp(0, 1, 16)] = A[i, T.Ramp(0, 1, 16)] * T.Broadcast(T.float32(2), 16)

    @T.prim_func
    def expected(A: T.Buffer((64,), "float32"), C: T.Buffer((64,), "float32")):
        for i in range(4):
            C[T.Ramp(i * 16, 1, 16)] = A[T.Ramp(i * 16, 1, 16)] * T.Broadcast(T.float32(2), 16)

    lowered = tdsl.lower(before)
    assert_same(lowered, expected)
    tdsl.assert_structural_equal(tdsl.lower(lowered), lowered)


def test_flatten_refuses_blocks():
    with pytest.raises(ValueError, match="convert_blocks"):
        flatten_buffers(matmul)


# ----------------------------------------------------------------------------- vectorize

def lowered_until_vectorize(func):
    return vectorize(simplify(flatten_buffers(convert_blocks(func))))


def test_vectorize_contiguous_loads_stores_and_broadcast():
    @T.prim_func
    def before(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4,), "float32"), C: T.Buffer((4, 16), "float32")):
        for i in range(4):
            for j in T.vectorized(16):
                with T.block("C"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = T.exp(A[vi, vj]) * B[vi]

    @T.prim_func
    def expected(A: T.Buffer((64,), "float32"), B: T.Buffer((4,), "float32"), C: T.Buffer((64,), "float32")):
        for i in range(4):
            C[T.Ramp(i * 16, 1, 16)] = T.exp(A[T.Ramp(i * 16, 1, 16)]) * T.Broadcast(B[i], 16)

    got = lowered_until_vectorize(before)
    assert_same(got, expected)
    assert notes(got) == []


def test_vectorize_a_fused_copy_whose_lanes_stay_in_one_row():
    # TVM's shared-memory fetch: a fused (row, column) loop split by the vector width; the
    # vectorized lanes (t * 8 + v) % 32 are one run of a row, (t * 8 + v) // 32 one row
    @T.prim_func
    def fused(A: T.Buffer((4, 40), "float32"), C: T.Buffer((4, 40), "float32")):
        for t in range(16):   # rows of 32 in padded rows of 40 (storage_align)
            for v in T.vectorized(8):
                with T.block("C"):
                    vi = T.axis.spatial(4, (t * 8 + v) // 32)
                    vj = T.axis.spatial(32, (t * 8 + v) % 32)
                    C[vi, vj] = A[vi, vj]

    got = lowered_until_vectorize(fused)
    assert notes(got) == []
    assert "T.Ramp(" in got.script()
    a = np.arange(160, dtype="float32").reshape(4, 40)
    c = np.zeros_like(a)
    tdsl.build(fused)(a, c)
    np.testing.assert_array_equal(c[:, :32], a[:, :32])

    @T.prim_func
    def straddling(A: T.Buffer((4, 40), "float32"), C: T.Buffer((4, 40), "float32")):
        for t in range(18):   # rows of 36 of 40: 36 is not a multiple of 8, one vector's lanes span two rows
            for v in T.vectorized(8):
                with T.block("C"):
                    vi = T.axis.spatial(4, (t * 8 + v) // 36)
                    vj = T.axis.spatial(36, (t * 8 + v) % 36)
                    C[vi, vj] = A[vi, vj]

    (note,) = notes(lowered_until_vectorize(straddling))
    assert "not contiguous in v" in note


@pytest.mark.parametrize("extent, pieces", [(24, [16, 8]), (100, [64, 32, 4]), (7, [4, 2, 1])])
def test_vectorize_splits_odd_extents_into_power_of_two_pieces(extent, pieces):
    text = f"""
@T.prim_func
def f(A: T.Buffer(({extent},), "float32"), C: T.Buffer(({extent},), "float32")):
    for j in T.vectorized({extent}):
        with T.block("C"):
            vj = T.axis.spatial({extent}, j)
            C[vj] = A[vj] + T.float32(1)
"""
    got = lowered_until_vectorize(tdsl.parse(text))
    stores = got.body.seq
    assert [s.value.dtype.lanes for s in stores] == pieces
    starts = [0]
    for p in pieces[:-1]:
        starts.append(starts[-1] + p)
    for s, start in zip(stores, starts):
        index = s.indices[0]
        assert (index.base.value if pieces != [1] and s.value.dtype.lanes > 1 else index.value) == start


def test_vectorize_long_extent_becomes_loop_over_chunks():
    @T.prim_func
    def before(A: T.Buffer((256,), "float32"), C: T.Buffer((256,), "float32")):
        for j in T.vectorized(256):
            with T.block("C"):
                vj = T.axis.spatial(256, j)
                C[vj] = A[vj]

    @T.prim_func
    def expected(A: T.Buffer((256,), "float32"), C: T.Buffer((256,), "float32")):
        for j_c in range(4):
            C[T.Ramp(j_c * 64, 1, 64)] = A[T.Ramp(j_c * 64, 1, 64)]

    assert_same(lowered_until_vectorize(before), expected)


def test_vectorize_refuses_reduction_into_invariant_location_with_note():
    @T.prim_func
    def before(A: T.Buffer((8, 16), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            for k in T.vectorized(16):
                with T.block("B"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    B[vi] = B[vi] + A[vi, vk]

    got = lowered_until_vectorize(before)
    loop = got.body.body
    assert loop.kind == "serial" and loop.annotations == ()
    (note,) = notes(got)
    assert note.startswith("loop k in block B was not vectorized:")
    assert "loop-invariant location" in note


def test_vectorize_keeps_a_decoded_index_contiguous_when_the_lanes_stay_inside_one_row():
    # an im2col-like gather (a copy loop split over threads: f % 4 picks the 8-element piece):
    # k decoded into (row, column) by // and % of 24; 8 lanes starting at a multiple of 8 never
    # cross a row, so the load stays one contiguous vector
    @T.prim_func
    def gather(A: T.Buffer((4, 40), "float32"), C: T.Buffer((3, 8, 8), "float32")):
        for ko, f in T.grid(3, 8):
            for v in T.vectorized(8):
                with T.block("C"):
                    vko, vf, vv = T.axis.remap("SSS", [ko, f, v])
                    C[vko, vf, vv] = A[(vko * 32 + vf % 4 * 8 + vv) // 24, (vko * 32 + vf % 4 * 8 + vv) % 24]

    got = lowered_until_vectorize(gather)
    assert notes(got) == []
    store = got.body.body.body
    assert isinstance(store.value.indices[0], tdsl.ir.Ramp) and store.value.dtype.lanes == 8
    a = np.arange(160, dtype="float32").reshape(4, 40)
    c = np.zeros((3, 8, 8), "float32")
    tdsl.build(gather, target="cpu")(a, c)
    k = np.arange(3)[:, None, None] * 32 + np.arange(8)[None, :, None] % 4 * 8 + np.arange(8)
    np.testing.assert_array_equal(c, a[k // 24, k % 24])

    # lanes that may cross a row (a start that is a multiple of 4 only, or rows of 12) are refused
    @T.prim_func
    def crossing(A: T.Buffer((3, 40), "float32"), C: T.Buffer((23, 8), "float32")):
        for ko in range(23):
            for v in T.vectorized(8):
                with T.block("C"):
                    vko, vv = T.axis.remap("SS", [ko, v])
                    C[vko, vv] = A[(vko * 4 + vv) // 32, (vko * 4 + vv) % 32]

    (note,) = notes(lowered_until_vectorize(crossing))
    assert "load from 'A' is not contiguous in v" in note

    @T.prim_func
    def rows_of_12(A: T.Buffer((8, 40), "float32"), C: T.Buffer((96,), "float32")):
        for ko in range(12):
            for v in T.vectorized(8):
                with T.block("C"):
                    vk = T.axis.spatial(96, ko * 8 + v)
                    C[vk] = A[vk // 12, vk % 12]

    (note,) = notes(lowered_until_vectorize(rows_of_12))
    assert "load from 'A' is not contiguous in v" in note


def test_vectorize_refuses_non_contiguous_and_lane_dependent_conditions():
    @T.prim_func
    def transpose(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
        for i in range(16):
            for j in T.vectorized(16):
                with T.block("C"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = A[vj, vi]

    (note,) = notes(lowered_until_vectorize(transpose))
    assert "load from 'A' is not contiguous in j" in note

    @T.prim_func
    def data_dependent(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
        for i in T.vectorized(16):
            with T.block("C"):
                vi = T.axis.spatial(16, i)
                if A[vi] > T.float32(0):
                    C[vi] = A[vi]

    (note,) = notes(lowered_until_vectorize(data_dependent))
    assert "condition differs between the lanes of i and is not a comparison affine in i" in note


def test_vectorize_tail_guard_runs_full_vectors_and_the_rest_lane_by_lane():
    @T.prim_func
    def tail(A: T.Buffer((10,), "float32"), C: T.Buffer((10,), "float32")):
        for i0 in range(3):
            for i1 in T.vectorized(4):
                with T.block("C"):
                    vi = T.axis.spatial(10, i0 * 4 + i1)
                    T.where(i0 * 4 + i1 < 10)
                    C[vi] = A[vi]

    @T.prim_func
    def expected(A: T.Buffer((10,), "float32"), C: T.Buffer((10,), "float32")):
        for i0 in range(3):
            if i0 * 4 + 3 < 10:
                C[T.Ramp(i0 * 4, 1, 4)] = A[T.Ramp(i0 * 4, 1, 4)]
            else:
                for i1_l in range(4):
                    if i0 * 4 + i1_l < 10:
                        C[i0 * 4 + i1_l] = A[i0 * 4 + i1_l]

    got = simplify(lowered_until_vectorize(tail))
    assert_same(got, expected)
    assert notes(got) == []


def test_vectorize_refuses_loop_carried_dependence():
    @T.prim_func
    def before(A: T.Buffer((17,), "float32")):
        for i in T.vectorized(16):
            with T.block("A"):
                vi = T.axis.spatial(16, i)
                A[vi + 1] = A[vi] + T.float32(1)

    got = lowered_until_vectorize(before)
    (note,) = notes(got)
    assert "depend on each other through buffer 'A'" in note
    assert got.body.kind == "serial"


def test_vectorize_through_an_inner_loop_when_lanes_stay_apart():
    @T.prim_func
    def before(A: T.Buffer((4, 8), "float32"), B: T.Buffer((8, 16), "float32"), C: T.Buffer((4, 16), "float32")):
        for i in range(4):
            for j in T.vectorized(16):
                for k in range(8):
                    with T.block("C"):
                        vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                        with T.init():
                            C[vi, vj] = T.float32(0)
                        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    @T.prim_func
    def expected(A: T.Buffer((32,), "float32"), B: T.Buffer((128,), "float32"), C: T.Buffer((64,), "float32")):
        for i in range(4):
            for k in range(8):
                if k == 0:
                    C[T.Ramp(i * 16, 1, 16)] = T.Broadcast(T.float32(0), 16)
                C[T.Ramp(i * 16, 1, 16)] = (C[T.Ramp(i * 16, 1, 16)]
                                            + T.Broadcast(A[i * 8 + k], 16) * B[T.Ramp(k * 16, 1, 16)])

    got = lowered_until_vectorize(before)
    assert_same(got, expected)
    assert notes(got) == []


def test_vectorize_refuses_inner_loop_moving_the_written_place():
    @T.prim_func
    def before(A: T.Buffer((24,), "float32")):
        for j in T.vectorized(16):
            for k in range(8):
                A[j + k] = A[j + k] + T.float32(1)

    got = lowered_until_vectorize(before)
    (note,) = notes(got)
    assert "written at a place that moves with the inner loop k" in note


def test_vectorize_allows_accesses_that_never_meet_across_lanes():
    @T.prim_func
    def before(A: T.Buffer((17,), "float32"), O: T.Buffer((2, 16), "float32")):
        for i in T.vectorized(16):
            with T.block("O"):
                vi = T.axis.spatial(16, i)
                O[0, vi] = A[vi] + T.float32(1)
                O[1, vi] = O[0, vi] * T.float32(2)
                A[vi] = A[vi + 1]  # reads ahead of the writes: each lane sees the old value

    @T.prim_func
    def expected(A: T.Buffer((17,), "float32"), O: T.Buffer((32,), "float32")):
        O[T.Ramp(0, 1, 16)] = A[T.Ramp(0, 1, 16)] + T.Broadcast(T.float32(1), 16)
        O[T.Ramp(16, 1, 16)] = O[T.Ramp(0, 1, 16)] * T.Broadcast(T.float32(2), 16)
        A[T.Ramp(0, 1, 16)] = A[T.Ramp(1, 1, 16)]

    got = lowered_until_vectorize(before)
    assert notes(got) == []
    assert_same(simplify(got), expected)


def test_vectorize_if_else_storing_one_place_becomes_select():
    @T.prim_func
    def before(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        for i in T.vectorized(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                if A[vi] > T.float32(0):
                    B[vi] = A[vi]
                else:
                    B[vi] = A[vi] * T.float32(0.5)
        for i in T.vectorized(8):
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                if A[vi] > T.float32(0):
                    C[vi] = A[vi]
                else:
                    C[vi] = B[7 - vi]

    @T.prim_func
    def expected(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        B[T.Ramp(0, 1, 8)] = T.Select(A[T.Ramp(0, 1, 8)] > T.Broadcast(T.float32(0), 8), A[T.Ramp(0, 1, 8)],
                                      A[T.Ramp(0, 1, 8)] * T.Broadcast(T.float32(0.5), 8))
        for i in range(8):
            if A[i] > T.float32(0):
                C[i] = A[i]
            else:
                C[i] = B[7 - i]

    got = lowered_until_vectorize(before)
    assert_same(got, expected)
    (note,) = notes(got)
    assert note == ("loop i in block C was not vectorized: an `if` condition differs between the lanes of i and "
                    "a branch loads from 'B' where the condition does not (every lane would run it)")


def test_vectorize_if_then_else_becomes_select_only_without_loads():
    @T.prim_func
    def before(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32"), D: T.Buffer((8,), "float32")):
        for i in T.vectorized(8):
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                C[vi] = T.if_then_else(vi < 4, T.float32(1), T.float32(2))
        for i in T.vectorized(8):
            with T.block("D"):
                vi = T.axis.spatial(8, i)
                D[vi] = T.if_then_else(vi < 4, A[vi], T.float32(2))

    got = lowered_until_vectorize(before)
    first, second = got.body.seq
    assert type(first.value).__name__ == "Select" and first.value.dtype.lanes == 8
    assert second.kind == "serial"
    (note,) = notes(got)
    assert note.startswith("loop i in block D was not vectorized: T.if_then_else")


# ----------------------------------------------------------------------------- unroll

def test_unroll_small_constant_loop_with_fresh_definitions():
    @T.prim_func
    def before(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
        for i in T.unroll(4):
            x = A[i] * T.float32(2)
            B[i] = x + x

    got = simplify(unroll(before))
    lets = got.body.seq
    assert [type(s).__name__ for s in lets] == ["LetStmt"] * 4
    assert len({id(s.var) for s in lets}) == 4  # each copy defines its own x
    for k, let in enumerate(lets):
        assert let.value.a.indices[0].value == k
        store = let.body
        assert store.indices[0].value == k and store.value.a is let.var and store.value.b is let.var


def test_unroll_keeps_long_loops():
    @T.prim_func
    def before(A: T.Buffer((100,), "float32")):
        for i in T.unroll(100):
            A[i] = T.float32(0)

    got = unroll(before)
    assert got.body.kind == "unrolled" and got.body.extent.value == 100


# ----------------------------------------------------------------------------- storage

def test_storage_scopes_by_size_and_gpu_scopes():
    @T.prim_func
    def before(A: T.Buffer((8,), "float32")):
        S = T.allocate((8,), "float32", "shared")
        G = T.allocate((65536,), "float32", "global")
        L = T.allocate((8,), "float32", "global")
        H = T.allocate((65536,), "float32", "local")
        for i in range(8):
            S[i] = A[i]
            G[i] = S[i]
            L[i] = G[i]
            H[i] = L[i]
            A[i] = H[i]

    got = storage(before)
    scopes = []
    node = got.body
    while type(node).__name__ == "Allocate":
        scopes.append((node.buffer.name, node.buffer.scope))
        node = node.body
    # heap buffers first (hoisted), and a local buffer too big for the stack goes to the heap
    assert scopes == [("G", "global"), ("H", "global"), ("S", "local"), ("L", "local")]
    assert {b.scope for b in _stored_buffers(got)} == {"local", "global"}


def _stored_buffers(func):
    from tdsl.ir import BufferStore, collect

    return [s.buffer for s in collect(func.body, BufferStore)]


def test_storage_hoists_heap_buffers_out_of_serial_loops_not_parallel_ones():
    @T.prim_func
    def before(A: T.Buffer((8, 8192), "float32"), n: T.int32):
        for p in T.parallel(8):
            for s in range(4):
                G = T.allocate((8192,), "float32", "global")
                V = T.allocate((s * 8192 + 1,), "float32", "global")
                for j in range(8192):
                    G[j] = A[p, j]
                    V[j] = G[j]
                    A[p, j] = V[j]

    @T.prim_func
    def expected(A: T.Buffer((8, 8192), "float32"), n: T.int32):
        for p in T.parallel(8):
            G = T.allocate((8192,), "float32", "global")
            for s in range(4):
                V = T.allocate((s * 8192 + 1,), "float32", "global")
                for j in range(8192):
                    G[j] = A[p, j]
                    V[j] = G[j]
                    A[p, j] = V[j]

    assert_same(storage(before), expected)


# ----------------------------------------------------------------------------- simplify / remove_no_op

def test_simplify_uses_loop_ranges():
    @T.prim_func
    def before(A: T.Buffer((64,), "float32")):
        for i, j in T.grid(16, 4):
            A[(i * 4 + j) // 4 * 4 + (i * 4 + j) % 4] = T.float32(0)

    @T.prim_func
    def expected(A: T.Buffer((64,), "float32")):
        for i, j in T.grid(16, 4):
            A[i * 4 + j] = T.float32(0)

    assert_same(simplify(before), expected)


def test_remove_no_op():
    @T.prim_func
    def before(A: T.Buffer((8,), "float32")):
        for i in range(1):
            for j in range(0):
                A[j] = T.float32(1)
            if True:
                A[i] = A[i]
                unused = i + 1  # noqa: F841 - the unused let under test
                A[i + 1] = T.float32(2)
            else:
                A[i] = T.float32(3)

    @T.prim_func
    def expected(A: T.Buffer((8,), "float32")):
        A[0 + 1] = T.float32(2)

    assert_same(simplify(remove_no_op(before)), expected)


def test_vectorize_never_runs_a_guarded_integer_division_in_every_lane():
    @T.prim_func
    def before(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
        for i in T.vectorized(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                if A[vi] != 0:
                    B[vi] = 100 // A[vi]
                else:
                    B[vi] = 0
        for i in T.vectorized(8):
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                C[vi] = T.if_then_else(vi > 2, 100 // (vi - 2), 7)

    got = lowered_until_vectorize(before)
    assert [loop.kind for loop in got.body.seq] == ["serial", "serial"]
    first, second = notes(got)
    assert first.endswith("and a branch divides integers (every lane would run it)")
    assert second.endswith("guards an integer division")
