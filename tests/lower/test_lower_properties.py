"""Property: for random shapes and split factors, the lowered program (vectorized tails,
unrolled loops, parallel loops) computes what the block program computes."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tdsl
from tdsl.ir import BufferStore, collect


def make_kernel(rows: int, cols: int):
    return tdsl.parse(f"""
@T.prim_func
def f(A: T.Buffer(({rows}, {cols}), "float32"), B: T.Buffer(({cols},), "float32"),
      C: T.Buffer(({rows}, {cols}), "float32"), S: T.Buffer(({rows},), "float32")):
    for i, j in T.grid({rows}, {cols}):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = T.max(A[vi, vj] * B[vj], T.float32(0)) + T.float32(1)
    for i, j in T.grid({rows}, {cols}):
        with T.block("S"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                S[vi] = T.float32(0)
            S[vi] = S[vi] + C[vi, vj]
""")


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 40), factor=st.integers(1, 20),
       unroll_rows=st.booleans(), seed=st.integers(0, 2**16))
def test_split_vectorize_unroll_parallel(rows, cols, factor, unroll_rows, seed):
    func = make_kernel(rows, cols)
    sch = tdsl.Schedule(func)
    i, j = sch.get_loops(sch.get_block("C"))
    _, inner = sch.split(j, factors=[None, factor])
    sch.vectorize(inner)
    if unroll_rows:
        sch.unroll(i)
    else:
        sch.parallel(i)
    _, sj = sch.get_loops(sch.get_block("S"))
    sch.split(sj, factors=[None, factor])
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, cols)).astype("float32")
    b = rng.standard_normal(cols).astype("float32")
    expected = tdsl.interpret(func, a, b)
    lowered = tdsl.lower(sch)
    got = tdsl.interpret(lowered, a, b)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)
    if 2 <= factor <= cols:  # else no lane range is ever complete: every lane runs alone
        assert any(s.value.dtype.lanes > 1 for s in collect(lowered.body, BufferStore))
    assert tdsl.lower.notes(lowered) == []


@settings(max_examples=30, deadline=None)
@given(extent=st.integers(1, 20), offsets=st.lists(st.integers(0, 9), min_size=4, max_size=4),
       seed=st.integers(0, 2**16))
def test_vectorize_keeps_order_of_overlapping_accesses(extent, offsets, seed):
    """Loads and stores of one buffer at shifted places: vectorized only when no lane can see
    another lane's write out of order, and then with the same results."""
    a, b, c, d = offsets
    size = extent + 10
    func = tdsl.parse(f"""
@T.prim_func
def f(A: T.Buffer(({size},), "float32"), B: T.Buffer(({size},), "float32")):
    for i in T.vectorized({extent}):
        B[i + {a}] = A[i + {b}] * T.float32(2)
        A[i + {c}] = B[i + {d}] + T.float32(1)
""")
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(size).astype("float32") for _ in range(2)]
    expected = [x.copy() for x in arrays]
    tdsl.interpret(func, *expected)
    got = [x.copy() for x in arrays]
    tdsl.interpret(tdsl.lower(func), *got)
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(g, e)
