"""transform_layout proves index maps one-to-one without enumerating the buffer (mixed-radix
digits of the indices), refuses maps that are not with two elements that collide, and keeps
exact enumeration for small buffers whose map the proof cannot decide."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sched_check import expect_error

import tdsl
from tdsl.schedule.primitives import layout

GEMM = '''
@T.prim_func
def gemm(A: T.Buffer(({m}, {k}), "float32"), B: T.Buffer(({k}, {n}), "float32"),
         C: T.Buffer(({m}, {n}), "float32")):
    for i, j, k in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''

COPY = '''
@T.prim_func
def copy(A: T.Buffer(({n},), "float32"), C: T.Buffer(({n},), "float32")):
    B = T.alloc_buffer(({n},), "float32")
    for i in T.serial({n}):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi] * T.float32(2)
    for i in T.serial({n}):
        with T.block("C"):
            vi = T.axis.remap("S", [i])
            C[vi] = B[vi] + T.float32(1)
'''

PACK = lambda k, j: (j // 16, k, j % 16)  # the GEMM packing of B into 16-wide panels


def _packed_gemm(m: int, n: int, k: int) -> tuple[tdsl.Schedule, tdsl.schedule.BlockRV]:
    sch = tdsl.Schedule(tdsl.parse(GEMM.format(m=m, n=n, k=k)))
    return sch, sch.cache_read(sch.get_block("C"), "B", "global")


def _shape(sch: tdsl.Schedule, name: str) -> list[int]:
    buf = next(b for b in sch.func.root_block.alloc_buffers if b.name == name)
    return [int(s.value) for s in buf.shape]


@pytest.fixture
def no_enumeration(monkeypatch):
    """Any element-by-element check fails the test: the map must be proven analytically."""
    def refuse(*_):
        raise AssertionError("transform_layout enumerated the buffer")

    monkeypatch.setattr(layout, "_all_points", refuse)
    monkeypatch.setattr(layout, "_probe_points", refuse)


def test_packing_a_4m_element_buffer_is_proven(no_enumeration):
    sch, pack = _packed_gemm(8, 2048, 2048)
    sch.transform_layout(pack, "B_global", PACK)
    assert _shape(sch, "B_global") == [128, 2048, 16]


@pytest.mark.parametrize("index_map,shape", [
    (lambda i, k: (i // 8, k // 16, i % 8, k % 16), [256, 128, 8, 16]),  # GEMM tiles MR x KC
    (lambda k, j: (j // 64, (j // 16) % 4, k, j % 16), [32, 4, 2048, 16]),  # nested digits of j
    (lambda k, j: (j, k), [2048, 2048]),  # a permutation
    (lambda k, j: (k * 2048 + j,), [2048 * 2048]),  # flattening
])
def test_big_maps_that_matter_are_proven(no_enumeration, index_map, shape):
    sch, pack = _packed_gemm(8, 2048, 2048)
    sch.transform_layout(pack, "B_global", index_map)
    assert _shape(sch, "B_global") == shape


def test_big_padding_map_is_proven(no_enumeration):
    # 2040 columns in panels of 16: the last panel is half padding
    sch, pack = _packed_gemm(8, 2040, 2048)
    sch.transform_layout(pack, "B_global", PACK)
    assert _shape(sch, "B_global") == [128, 2048, 16]


@pytest.mark.parametrize("m,n,k", [(8, 64, 32), (5, 40, 12)])  # 40 columns: the last panel is padding
def test_packed_gemm_builds_equal_to_numpy(m, n, k):
    sch, pack = _packed_gemm(m, n, k)
    sch.transform_layout(pack, "B_global", PACK)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    np.testing.assert_allclose(tdsl.build(sch)(a, b), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n,shape", [(10, [3, 4]), (3, [1, 3]), (4099, [1025, 4])])  # the image's bounding box
def test_padding_map_on_a_non_multiple_extent(n, shape):
    sch = tdsl.Schedule(tdsl.parse(COPY.format(n=n)))
    sch.transform_layout(sch.get_block("B"), "B", lambda i: (i // 4, i % 4))
    assert _shape(sch, "B") == shape
    a = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    np.testing.assert_allclose(tdsl.build(sch)(a), a * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("m,n,k", [(4, 8, 16), (8, 2048, 2048)])
@pytest.mark.parametrize("index_map,names", [
    (lambda k, j: (k // 2, j), ["B_global[0, 0]", "B_global[1, 0]"]),
    (lambda k, j: (k + j,), ["B_global[0, 1]", "B_global[1, 0]"]),
    (lambda k, j: (j % 4, k), ["B_global[0, 0]", "B_global[0, 4]"]),
])
def test_maps_that_are_not_one_to_one_are_refused(m, n, k, index_map, names):
    sch, pack = _packed_gemm(m, n, k)
    expect_error(sch, lambda: sch.transform_layout(pack, "B_global", index_map), "same place", *names)


def test_undecided_map_on_a_big_buffer_says_so():
    # j * 3 % 2048 is one-to-one (3 is odd) but not made of digits of j
    sch, pack = _packed_gemm(8, 2048, 2048)
    msg = expect_error(sch, lambda: sch.transform_layout(pack, "B_global", lambda k, j: (k, j * 3 % 2048)),
                       "could not prove", "one-to-one", "B_global", "4194304 elements", "fix:")
    assert "same place" not in msg


def test_undecided_map_on_a_small_buffer_is_enumerated():
    sch, pack = _packed_gemm(4, 8, 16)
    sch.transform_layout(pack, "B_global", lambda k, j: (k, j * 3 % 8))
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 16), dtype=np.float32)
    b = rng.standard_normal((16, 8), dtype=np.float32)
    np.testing.assert_allclose(tdsl.build(sch)(a, b), a @ b, rtol=1e-4, atol=1e-4)


# the proof is sound: with enumeration turned off, an accepted map is one-to-one and a refused
# "same place" map is not (checked by brute force over small boxes) -------------------------------

TERMS = {"i": lambda i, c, d: i, "div": lambda i, c, d: i // c, "mod": lambda i, c, d: i % c,
         "divmod": lambda i, c, d: (i // c) % d, "moddiv": lambda i, c, d: (i % (c * d)) // d}

ND_COPY = '''
@T.prim_func
def f(A: T.Buffer(({dims},), "float32"), C: T.Buffer(({dims},), "float32")):
    B = T.alloc_buffer(({dims},), "float32")
    for {loops} in T.grid({dims}):
        with T.block("B"):
            {iters} = T.axis.remap("{kinds}", [{loops}])
            B[{iters}] = A[{iters}]
    for {loops} in T.grid({dims}):
        with T.block("C"):
            {iters} = T.axis.remap("{kinds}", [{loops}])
            C[{iters}] = B[{iters}]
'''


@st.composite
def _maps(draw):
    """(extents, outputs): each output a sum of weight * term(index, c, d) over 1-2 terms."""
    extents = draw(st.lists(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]), min_size=1, max_size=3))
    term = st.tuples(st.integers(0, len(extents) - 1), st.sampled_from(sorted(TERMS)), st.sampled_from([1, 2, 3, 4, 8]),
                     st.sampled_from([2, 3, 4]), st.sampled_from([1, 2, 3, 4, 8, 16]))
    return extents, draw(st.lists(st.lists(term, min_size=1, max_size=2), min_size=1, max_size=4))


def _apply(outputs, ix) -> tuple:
    return tuple(sum(TERMS[kind](ix[d], c, dd) * w for d, kind, c, dd, w in out) for out in outputs)


def _one_to_one(extents, outputs) -> bool:
    images = {_apply(outputs, pt) for pt in itertools.product(*[range(n) for n in extents])}
    return len(images) == int(np.prod(extents))


@settings(max_examples=150, deadline=None)
@given(_maps())
@example(([2, 2], [[(0, "i", 1, 2, 1), (1, "i", 1, 2, 1)]]))  # i + j: digit weights 1 and 1 collide
@example(([3, 4], [[(0, "i", 1, 2, 1), (1, "i", 1, 2, 2)]]))  # i + 2 j with i < 3: 2 + 0 == 0 + 2
def test_proof_and_refutation_are_sound(case):
    extents, outputs = case
    loops = ", ".join(f"i{d}" for d in range(len(extents)))
    text = ND_COPY.format(dims=", ".join(map(str, extents)), loops=loops, kinds="S" * len(extents),
                          iters=", ".join(f"v{d}" for d in range(len(extents))))
    sch = tdsl.Schedule(tdsl.parse(text))
    truth = _one_to_one(extents, outputs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(layout, "_CHECK_LIMIT", 0)  # no enumeration: only the proof and the probes decide
        try:
            sch.transform_layout(sch.get_block("B"), "B", lambda *ix: _apply(outputs, ix))
        except tdsl.ScheduleError as err:
            assert not truth or "same place" not in str(err), f"refused a one-to-one map:\n{err}"
            return
    assert truth
