"""Issue 22 on the CUDA path: bounds are per axis. `A[vi + 1, vj - 1]` at vj = 0 reads the
previous row's last element, inside the flat buffer: a BoundsError at build where provable, and
in emulation a per-axis checked variant of the kernel reports it (the CUDA C++ NVRTC compiles
stays unchanged)."""
import shutil

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda import cuda_source

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler")

SHIFT = '''
@T.prim_func
def g(A: T.Buffer(({rows}, 16), "float32"), B: T.Buffer(({out}, 16), "float32")):
    for i, j in T.grid({loop}, 16):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = {value}
'''


def _bound(value, rows="16", out="15", loop="15"):
    sch = tdsl.Schedule(tdsl.parse(SHIFT.format(value=value, rows=rows, out=out, loop=loop)))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    return sch


def test_provable_per_axis_violation_is_refused_at_build():
    sch = _bound("A[vi + 1, vj - 1]")
    with pytest.raises(tdsl.BoundsError, match=r"'A' is read at index j - 1 \(axis 1\), which ranges over \[-1, 14\]"):
        cuda_source(sch)
    with pytest.raises(tdsl.BoundsError, match="axis 1"):
        tdsl.build(sch, target="cuda", emulate=True)


def test_flat_violation_is_refused_at_build():
    sch = _bound("A[vi + 1, vj]", rows="15")
    with pytest.raises(tdsl.BoundsError, match=r"'A' is read at index i \+ 1 \(axis 0\)"):
        cuda_source(sch)


@needs_cxx
def test_guarded_violation_is_caught_in_emulation():
    # the guard keeps the build-time check from proving the access runs; the emulator's flat
    # check would pass it (A[0, 15] is inside A), the per-axis checked variant does not
    sch = _bound("T.if_then_else(vi < 100, A[vi + 1, vj - 1], T.float32(0))")
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    assert "tdsl_emu_check" not in kernel.source and "tdsl_emu_check" in kernel.checked_source
    assert kernel.source == cuda_source(sch)
    with pytest.raises(tdsl.TargetError, match=r"per-axis checked variant\): out-of-bounds access: A index -1 on "
                                               r"axis 1 is outside \[0, 16\) \(block \(0, 0, 0\), thread \(0, 0, 0\)\)"):
        kernel(np.ones((16, 16), "float32"), np.ones((15, 16), "float32"))


@needs_cxx
def test_symbolic_width_violation_is_refused_at_build_or_caught_in_emulation():
    def shift(value: str):
        sch = tdsl.Schedule(tdsl.parse(f'''
@T.prim_func
def shift(A: T.Buffer((4, "w"), "float32"), B: T.Buffer((3, "w"), "float32")):
    for i, j in T.grid(3, w):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = {value}
'''))
        i, j = sch.get_loops(sch.get_block("B"))
        sch.bind(i, "blockIdx.x")
        sch.bind(j, "threadIdx.x")
        return sch

    # j - 1 is -1 at j = 0 for every width: provable with w symbolic too (issue 28)
    with pytest.raises(tdsl.BoundsError, match=r"'A' is read at index j - 1 \(axis 1\).*first failing size: w = 1"):
        tdsl.build(shift("A[vi + 1, vj - 1]"), target="cuda", emulate=True)
    # guarded: not provable at build; the emulator's per-axis check catches it at run time
    kernel = tdsl.build(shift("T.if_then_else(vi < 100, A[vi + 1, vj - 1], T.float32(0))"), target="cuda",
                        emulate=True)
    with pytest.raises(tdsl.TargetError, match="A index -1 on axis 1 is outside"):
        kernel(np.ones((4, 16), "float32"), np.ones((3, 16), "float32"))


@needs_cxx
def test_symbolic_in_bounds_stencil_runs_and_matches():
    # rows n and m unrelated: m = n is a valid call that reads past A, refused at build (issue 28)
    with pytest.raises(tdsl.BoundsError, match=r"'A' is read at index i \+ 1 \(axis 0\).*m = 1, n = 1"):
        tdsl.build(_bound("A[vi + 1, vj] - A[vi, vj]", rows='"n"', out='"m"', loop="m"), target="cuda",
                   emulate=True)
    a = np.random.default_rng(0).standard_normal((16, 16)).astype("float32")
    b = np.zeros((15, 16), "float32")
    # guarded, so not provable at build: symbolic rows are checked at run time
    guarded = tdsl.build(_bound("T.if_then_else(vi < 100000, A[vi + 1, vj] - A[vi, vj], T.float32(0))",
                                rows='"n"', out='"m"', loop="m"), target="cuda", emulate=True)
    assert guarded.checked_source is not None
    guarded(a, b)
    np.testing.assert_array_equal(b, a[1:] - a[:-1])
    with pytest.raises(tdsl.TargetError, match="A index 16 on axis 0 is outside"):
        guarded(a, np.zeros((16, 16), "float32"))    # m = n: the last row reads past A


GATHER = '''
@T.prim_func
def gather(data: T.Buffer((16, 8), "float32"), index: T.Buffer((8,), "int32"), out: T.Buffer((16, 8), "float32")):
    for i, j in T.grid(16, 8):
        with T.block("out"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = data[vi, index[vj]]
'''


@needs_cxx
def test_data_dependent_index_is_checked_per_axis_in_emulation():
    sch = tdsl.Schedule(tdsl.parse(GATHER))
    i, j = sch.get_loops(sch.get_block("out"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    data = np.arange(128, dtype="float32").reshape(16, 8)
    good = np.array([7, 6, 5, 4, 3, 2, 1, 0], "int32")
    np.testing.assert_array_equal(kernel(data, good), data[:, good])
    with pytest.raises(tdsl.TargetError, match="data index 9 on axis 1 is outside"):
        kernel(data, np.array([0, 1, 2, 3, 4, 5, 6, 9], "int32"))   # data[0, 9] is data[1, 1] in the flat buffer


@needs_cxx
def test_kernels_proven_in_bounds_have_no_checked_variant():
    # a non-dividing split's tail is guarded by `if k_0 * 16 + k_1 < 200`: proven from the guard
    @T.prim_func
    def rows(A: T.Buffer((4, 200), "float32"), S: T.Buffer((4, 200), "float32")):
        for i, k in T.grid(4, 200):
            with T.block("S"):
                vi, vk = T.axis.remap("SS", [i, k])
                S[vi, vk] = A[vi, vk] * T.float32(2)

    sch = tdsl.Schedule(rows)
    i, k = sch.get_loops(sch.get_block("S"))
    _, ki = sch.split(k, factors=[None, 16])
    sch.bind(i, "blockIdx.x")
    sch.bind(ki, "threadIdx.x")
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    assert kernel.checked_source is None
    a = np.ones((4, 200), "float32")
    np.testing.assert_array_equal(kernel(a), a * 2)


@needs_cxx
def test_negative_output_size_expression_is_an_argument_error():
    """Issue 28: an output left out whose size expression is negative for the given sizes was
    numpy's "negative dimensions are not allowed"; it names the parameter and the expression."""
    pytest.importorskip("cuda.bindings")
    func = tdsl.parse('''
@T.prim_func
def tail(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n - 4",), "float32")):
    for i in T.thread_binding(n - 4, thread="threadIdx.x"):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi + 4]
''')
    kernel = tdsl.build(func, target="cuda", emulate=True)
    np.testing.assert_array_equal(kernel(np.arange(6, dtype="float32")), np.array([4, 5], "float32"))
    with pytest.raises(tdsl.ArgumentError, match=r"output 'B': its dimension n - 4 = -2 is negative with n = 2"):
        kernel(np.ones(2, "float32"))
