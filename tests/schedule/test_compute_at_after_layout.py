"""compute_at of a block whose store was re-laid-out by transform_layout (digit maps such as
`(j // 16, k, j % 16)`): GotoBLAS-style packing of a B panel inside the k loop.
Legal cases: `check` (round trip + same results) plus tdsl.build; refusals: `expect_error`."""
from __future__ import annotations

import numpy as np
from dataflow_helpers import CHAIN, parse
from sched_check import check, expect_error

import tdsl
from tdsl.schedule.tree import find_loop

GEMM = '''
@T.prim_func
def gemm(A: T.Buffer((32, 64), "float32"), B: T.Buffer((64, 48), "float32"), C: T.Buffer((32, 48), "float32")):
    for i, j, k in T.grid(32, 48, 64):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''

PANEL = lambda k, j: (j // 16, k, j % 16)  # NC panels of 16 columns, k-major (a lambda: the trace prints it)


def _packed_gemm(index_map=PANEL, nc: int = 16):
    """k0 (KC = 16), j0 (NC = nc), i, k1, j1 with B read through a re-laid-out cache."""
    f = parse(GEMM)
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    k0, k1 = sch.split(k, factors=[None, 16])
    j0, j1 = sch.split(j, factors=[None, nc])
    sch.reorder(k0, j0, i, k1, j1)
    bp = sch.cache_read(c, "B", "global")
    sch.transform_layout(bp, "B_global", index_map)
    return f, sch, bp, c, (k0, j0, i, k1, j1)


def _producer_loops(sch: tdsl.Schedule, block) -> list[int]:
    """The extents of the loops around `block`, outermost first."""
    return [int(find_loop(sch.func, lp.var, "test")[0].extent.value) for lp in sch.get_loops(block)]


def _built_matches_numpy(sch: tdsl.Schedule, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((32, 64)).astype("float32")
    b = rng.standard_normal((64, 48)).astype("float32")
    c = np.zeros((32, 48), "float32")
    tdsl.build(sch)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def _replays(sch: tdsl.Schedule, original: tdsl.PrimFunc) -> None:
    replay = sch.trace.apply_to(parse(GEMM))
    assert tdsl.structural_equal(replay.func, sch.func)
    fresh = tdsl.Schedule(original)
    sch.trace.apply(fresh)
    assert tdsl.structural_equal(fresh.func, sch.func)


# legal ---------------------------------------------------------------------------------------

def test_pack_the_kc_by_n_panel_at_k0():
    f, sch, bp, _c, (k0, *_rest) = _packed_gemm()
    sch.compute_at(bp, k0)
    # one KC x N panel of B per k0 iteration: 16 rows x all 48 columns
    assert _producer_loops(sch, bp) == [4, 16, 48]
    check(sch, f)
    _built_matches_numpy(sch)
    _replays(sch, f)


def test_pack_the_kc_by_nc_block_at_j0_then_parallel_and_vectorize():
    f, sch, bp, c, (_k0, j0, _i, _k1, j1) = _packed_gemm()
    sch.compute_at(bp, j0)
    assert _producer_loops(sch, bp) == [4, 3, 16, 16]  # k0, j0, then KC x NC
    sch.vectorize(j1)
    sch.vectorize(sch.get_loops(bp)[-1])
    sch.parallel(sch.get_loops(c)[2])  # i: every row of the block is independent
    check(sch, f)
    _built_matches_numpy(sch)
    _replays(sch, f)


def test_pack_a_single_row_at_k1():
    # the panel row of one k: the digits pinned by the consumer give exactly its 16 columns
    f, sch, bp, _c, (_k0, _j0, _i, k1, _j1) = _packed_gemm()
    sch.compute_at(bp, k1)
    assert _producer_loops(sch, bp)[-1] == 16
    check(sch, f)
    _built_matches_numpy(sch)
    _replays(sch, f)


def test_innermost_loop_packs_one_element():
    f, sch, bp, c, loops = _packed_gemm()
    sch.compute_at(bp, loops[-1])
    assert len(sch.get_loops(bp)) == len(sch.get_loops(c))  # no loops of its own: a single point
    check(sch, f)


def test_nested_digits_of_both_iterators():
    # (v // 4) % 4 comes back from the simplifier as v % 16 // 4: still one digit of v
    f, sch, bp, _c, (_k0, j0, *_rest) = _packed_gemm(lambda k, j: (j // 16, k // 4, (j // 4) % 4, k % 4, j % 4))
    sch.compute_at(bp, j0)
    assert _producer_loops(sch, bp)[-2:] == [16, 16]
    check(sch, f)
    _built_matches_numpy(sch)


def test_unaligned_tiles_compute_a_superset_clipped_to_the_domain():
    # tiles of 6 rows (the last one padded) read 4 rows at a time: whole tiles are produced,
    # never beyond the 16 rows of B
    f = parse(CHAIN)
    sch = tdsl.Schedule(f)
    sch.transform_layout(sch.get_block("B"), "B", lambda i, j: (i // 6, j, i % 6))
    c = sch.get_block("C")
    i, _j = sch.get_loops(c)
    i0, _i1 = sch.split(i, factors=[None, 4])
    sch.compute_at(sch.get_block("B"), i0)
    text = sch.func.script()
    assert "T.where" in text or "T.min" in text or "T.max" in text, text
    check(sch, f)
    replay = sch.trace.apply_to(f)
    assert tdsl.structural_equal(replay.func, sch.func)


# illegal -------------------------------------------------------------------------------------

def test_refuses_a_store_that_is_not_a_digit_map():
    _f, sch, bp, _c, (k0, *_rest) = _packed_gemm(lambda k, j: (k + j, j))
    expect_error(sch, lambda: sch.compute_at(bp, k0), "B_global", "v0 + v1", "distinct spatial")


def _tiled(store: str) -> str:
    """B in tiles of 4 rows (stored at `store`), C reading rows 0..7 of it in two tiles, D all 16."""
    return f'''
@T.prim_func
def tiled(A: T.Buffer((16, 8), "float32"), C: T.Buffer((8, 8), "float32"), D: T.Buffer((16, 8), "float32")):
    B = T.alloc_buffer((4, 8, 4), "float32")
    for i, j in T.grid(16, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[{store}] = A[vi, vj] * T.float32(2)
    for i0, i1, j in T.grid(2, 4, 8):
        with T.block("C"):
            vi = T.axis.spatial(8, i0 * 4 + i1)
            vj = T.axis.spatial(8, j)
            C[vi, vj] = B[vi // 4, vj, vi % 4] + T.float32(1)
    for i, j in T.grid(16, 8):
        with T.block("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = B[vi // 4, vj, vi % 4] * T.float32(3)
'''


def test_refuses_digits_that_do_not_spell_the_iterator():
    # vi // 4 and vi % 2 leave bit 1 of vi out: two rows land on the same element
    sch = tdsl.Schedule(parse(_tiled("vi // 4, vj, vi % 2")))
    b, i0 = sch.get_block("B"), sch.get_loops(sch.get_block("C"))[0]
    expect_error(sch, lambda: sch.compute_at(b, i0), "B[vi // 4, vj, vi % 2]", "distinct spatial")


def test_refuses_when_a_reader_after_the_loop_needs_the_whole_buffer():
    # C needs rows 0..7 only, but D (after C's nest) reads all 16
    sch = tdsl.Schedule(parse(_tiled("vi // 4, vj, vi % 4")))
    b, i0 = sch.get_block("B"), sch.get_loops(sch.get_block("C"))[0]
    expect_error(sch, lambda: sch.compute_at(b, i0), "B", "D", "after the loop")


def test_refuses_a_loop_without_consumers():
    _f, sch, bp, c, _loops = _packed_gemm()
    a_cache = sch.cache_read(c, "A", "global")
    a_loops = sch.get_loops(a_cache)
    expect_error(sch, lambda: sch.compute_at(bp, a_loops[0]), "B_global", "ax0")
