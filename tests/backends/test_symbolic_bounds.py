"""Issue 28: an access the analyzer can prove out of bounds for some valid symbolic size is a
BoundsError at build, naming the buffer, the index and the first failing size, as for constant
sizes; kernels correct for every size (splits with predicates, padding, shifted ranges) build."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl
from tdsl import T


def _build(src: str):
    return tdsl.build(tdsl.parse(src))


def test_difference_reading_one_past_the_end_is_refused():
    with pytest.raises(tdsl.BoundsError, match=r"buffer 'A' is read at index i \+ 1.*n = 1 elements.*"
                                                r"first failing size: n = 1"):
        _build('''
@T.prim_func
def diff(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi + 1] - A[vi]
''')


def test_constant_case_keeps_its_message():
    with pytest.raises(tdsl.BoundsError, match=r"ranges over \[1, 8\] but the buffer has 8 elements"):
        _build('''
@T.prim_func
def diff(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi + 1] - A[vi]
''')


def test_negative_index_and_write_are_refused():
    with pytest.raises(tdsl.BoundsError, match=r"'A' is read at index i - 1.*\[-1, -1\] when n = 1"):
        _build('''
@T.prim_func
def back(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi - 1]
''')
    with pytest.raises(tdsl.BoundsError, match=r"'B' is written at index i \+ 2, .*first failing size: n = 1"):
        _build('''
@T.prim_func
def ahead(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi + 2] = A[vi]
''')


def test_first_failing_size_is_named_when_small_sizes_are_fine():
    """A constant table read with a symbolic loop: fine up to n = 16, out of bounds from 17."""
    with pytest.raises(tdsl.BoundsError, match=r"'W' is read at index i.*\[0, 16\] when n = 17 but the buffer "
                                                r"has 16 elements.*first failing size: n = 17"):
        _build('''
@T.prim_func
def scale(W: T.Buffer((16,), "float32"), A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi] * W[vi]
''')


def test_second_axis_of_two_sizes():
    with pytest.raises(tdsl.BoundsError, match=r"'A' is read at index j \+ 1 \(axis 1\).*m = 1"):
        _build('''
@T.prim_func
def shift(A: T.Buffer(("n", "m"), "float32"), B: T.Buffer(("n", "m"), "float32")):
    for i, j in T.grid(n, m):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj + 1]
''')


CORRECT = {
    "shifted_range": ('''
@T.prim_func
def diff(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n - 1",), "float32")):
    for i in range(n - 1):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi + 1] - A[vi]
''', lambda a: (a[1:] - a[:-1],)),
    "padding": ('''
@T.prim_func
def pad(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n + 2",), "float32")):
    for i in range(n + 2):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = T.if_then_else(1 <= vi and vi <= n, A[vi - 1], T.float32(0))
''', lambda a: (np.pad(a, 1),)),
    "window": ('''
@T.prim_func
def window(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n - 2",), "float32")):
    for i, k in T.grid(n - 2, 3):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi + vk]
''', lambda a: (a[:-2] + a[1:-1] + a[2:],)),
    "small_table": ('''
@T.prim_func
def table(W: T.Buffer((4,), "float32"), A: T.Buffer(("n", 4), "float32"), B: T.Buffer(("n", 4), "float32")):
    for i, j in T.grid(n, 4):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * W[vj]
''', None),
}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_kernels_correct_for_every_size_build_and_run(name):
    src, want = CORRECT[name]
    kernel = _build(src)
    rng = np.random.default_rng(0)
    for n in (3, 4, 9, 33):
        if name == "small_table":
            w, a = rng.standard_normal(4, dtype=np.float32), rng.standard_normal((n, 4), dtype=np.float32)
            np.testing.assert_allclose(kernel(w, a), a * w, rtol=1e-6)
            continue
        a = rng.standard_normal(n, dtype=np.float32)
        np.testing.assert_allclose(kernel(a), want(a)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("factor", [4, 8])
def test_split_with_predicate_of_a_symbolic_loop_builds(factor):
    @T.prim_func
    def scale(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")):
        for i in range(n):  # noqa: F821 - the symbolic dimension named in the signature
            with T.block("B"):
                vi = T.axis.remap("S", [i])
                B[vi] = A[vi] * T.float32(2)

    sch = tdsl.Schedule(scale)
    (i,) = sch.get_loops(sch.get_block("B"))
    _, inner = sch.split(i, factors=[None, factor])
    sch.vectorize(inner)
    kernel = tdsl.build(sch)
    for n in (1, 5, 16, 37):
        a = np.arange(n, dtype=np.float32)
        np.testing.assert_array_equal(kernel(a), a * 2)


def test_the_suggested_relation_in_the_shape_builds():
    """The error suggests writing a relation between sizes in the shapes: that version builds."""
    with pytest.raises(tdsl.BoundsError, match=r"m = 1, n = 1.*say so in the buffer shapes"):
        _build('''
@T.prim_func
def g(A: T.Buffer(("n", 4), "float32"), B: T.Buffer(("m", 4), "float32")):
    for i, j in T.grid(m, 4):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi + 1, vj]
''')
    kernel = _build('''
@T.prim_func
def g(A: T.Buffer(("m + 1", 4), "float32"), B: T.Buffer(("m", 4), "float32")):
    for i, j in T.grid(m, 4):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi + 1, vj]
''')
    a = np.arange(24, dtype=np.float32).reshape(6, 4)
    np.testing.assert_array_equal(kernel(a), a[1:])
