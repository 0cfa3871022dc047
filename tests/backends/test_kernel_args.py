"""Kernel calls: argument binding, checks with clear messages, conversions, outputs left out."""
import subprocess
import sys

import numpy as np
import pytest

import tdsl
from tdsl import ArgumentError

SRC = '''
@T.prim_func
def axpy(X: T.Buffer(("n", 4), "float32"), Y: T.Buffer(("n", 4), "float32"), Z: T.Buffer(("n", 4), "float32"),
         alpha: T.float32):
    for i, j in T.grid(n, 4):
        with T.block("z"):
            vi, vj = T.axis.remap("SS", [i, j])
            Z[vi, vj] = alpha * X[vi, vj] + Y[vi, vj]
'''


@pytest.fixture(scope="module")
def axpy():
    return tdsl.build(tdsl.parse(SRC))


@pytest.fixture(scope="module")
def add2():
    return tdsl.build(tdsl.parse('''
@T.prim_func
def add2(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32"), S: T.Buffer((8,), "float32"),
         D: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.block("s"):
            vi = T.axis.spatial(8, i)
            S[vi] = A[vi] + B[vi]
            D[vi] = A[vi] - B[vi]
'''))


def _xy(n=5):
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    return x, x * 10


def test_destination_passing_and_returned_outputs(axpy):
    x, y = _xy()
    z = np.empty_like(x)
    assert axpy(x, y, z, 2.0) is None
    np.testing.assert_array_equal(z, 2 * x + y)
    np.testing.assert_array_equal(axpy(x, y, alpha=2.0), 2 * x + y)        # the output left out
    assert axpy(X=x, Y=y, Z=z, alpha=0.5) is None
    np.testing.assert_array_equal(z, 0.5 * x + y)
    assert axpy(x, y, alpha=3, Z=z) is None                                  # an int for a float scalar
    np.testing.assert_array_equal(z, 3 * x + y)


def test_several_outputs_come_back_as_a_tuple(add2):
    a, b = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
    s, d = add2(a, b)
    np.testing.assert_array_equal(s, a + b)
    np.testing.assert_array_equal(d, a - b)
    d2 = add2(a, b, S=np.empty(8, np.float32))
    np.testing.assert_array_equal(d2, a - b)


def _err(kernel, *args, **kwargs) -> str:
    with pytest.raises(ArgumentError) as info:
        kernel(*args, **kwargs)
    return str(info.value)


def test_count_and_names(axpy):
    x, y = _xy()
    assert "missing" in _err(axpy, x) and "'Y'" in _err(axpy, x)
    assert "takes 4 arguments" in _err(axpy, x, y, np.empty_like(x), 1.0, 5)
    assert "no parameter 'W'" in _err(axpy, x, y, alpha=1.0, W=1)
    assert "two values" in _err(axpy, x, y, np.empty_like(x), 1.0, X=x)


def test_dtype_shape_and_symbolic_dimension_errors(axpy):
    x, y = _xy()
    msg = _err(axpy, x.astype(np.float64), y, alpha=1.0)
    assert "'X'" in msg and "float32" in msg and "float64" in msg
    msg = _err(axpy, x[:, :3].copy(), y[:, :3].copy(), alpha=1.0)
    assert "'X'" in msg and "X.shape[1] = 3" in msg
    msg = _err(axpy, x, y[:4], alpha=1.0)
    assert "inconsistent symbolic dimension 'n'" in msg and "X.shape[0] = 5" in msg and "Y.shape[0] = 4" in msg
    msg = _err(axpy, x.reshape(-1), y, alpha=1.0)
    assert "expected 2 dimensions" in msg


def test_outputs_must_be_writable_and_contiguous(axpy):
    x, y = _xy()
    z = np.empty_like(x)
    z.flags.writeable = False
    assert "read-only" in _err(axpy, x, y, z, 1.0)
    wide = np.empty((5, 8), np.float32)
    msg = _err(axpy, x, y, wide[:, ::2], 1.0)
    assert "'Z'" in msg and "C-contiguous" in msg


def test_non_contiguous_inputs_are_copied(axpy):
    x, y = _xy(6)
    xt = np.asfortranarray(x)
    ys = np.repeat(y, 2, axis=1)[:, ::2]
    np.testing.assert_array_equal(axpy(xt, ys, alpha=1.5), 1.5 * x + y)


def test_non_arrays_and_bad_scalars(axpy):
    x, y = _xy()
    for bad in (None, "abc", [1.0, 2.0], 3.0):
        msg = _err(axpy, bad, y, alpha=1.0)
        assert "'X'" in msg and "numpy array" in msg
    assert "'alpha'" in _err(axpy, x, y, alpha="2")
    assert "'alpha'" in _err(axpy, x, y, alpha=None)


def test_integer_scalar_range_and_conversion():
    kernel = tdsl.build(tdsl.parse('''
@T.prim_func
def shift(A: T.Buffer((4,), "int8"), s: T.int8):
    for i in range(4):
        with T.block("a"):
            vi = T.axis.spatial(4, i)
            A[vi] = A[vi] + s
'''))
    a = np.zeros(4, np.int8)
    kernel(a, np.int64(3))
    kernel(a, 2.0)
    np.testing.assert_array_equal(a, 5)
    assert "out of the range of int8" in _err(kernel, a, 300)
    assert "integer" in _err(kernel, a, 2.5)


class _Tensor:
    """A minimal DLPack exporter around a numpy array, on a chosen device."""

    def __init__(self, arr, device=(1, 0)):
        self.arr, self.device = arr, device

    def __dlpack__(self, **kwargs):
        return self.arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.device


def test_dlpack_tensors_and_wrong_device(axpy):
    x, y = _xy()
    np.testing.assert_array_equal(axpy(_Tensor(x), _Tensor(y), alpha=2.0), 2 * x + y)
    z = np.zeros_like(x)
    assert axpy(_Tensor(x), _Tensor(y), _Tensor(z), 3.0) is None       # written through DLPack in place
    np.testing.assert_array_equal(z, 3 * x + y)
    msg = _err(axpy, _Tensor(x, device=(2, 0)), y, alpha=1.0)
    assert "'X'" in msg and "CPU" in msg and "device type 2" in msg


def test_output_overlapping_an_input_reads_the_input_first(add2):
    a = np.arange(8, dtype=np.float32)
    b = np.ones(8, np.float32)
    add2(a, b, a, np.empty(8, np.float32))     # S is A itself: A must be read before it is written
    np.testing.assert_array_equal(a, np.arange(8) + 1)
    both = np.empty(8, np.float32)
    assert "share memory" in _err(add2, np.ones(8, np.float32), b, both, both)


def test_nasty_arguments_never_kill_the_process():
    code = SRC_RUNNER
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = proc.stdout.split()
    assert len(results) == 11 and set(results) <= {"ok", "ArgumentError"}, proc.stdout
    assert results[8] == "ok" and results.count("ok") == 1, proc.stdout   # only the ndarray subclass is fine


SRC_RUNNER = '''
import numpy as np, tdsl
src = """AXPY_SOURCE"""
k = tdsl.build(tdsl.parse(src))
x = np.ones((3, 4), np.float32)
class Weird:
    def __dlpack__(self, **kw): raise RuntimeError("boom")
    def __dlpack_device__(self): return (1, 0)
class Liar(np.ndarray): pass
cases = [
    (None, x, None, 1.0), (x, x, np.ones((3, 4), np.float64), 1.0), (x, x, np.ones((3, 5), np.float32), 1.0),
    (Weird(), x, None, 1.0), (x, x, object(), 1.0), (np.ones((0, 4), np.float32), x, None, 1.0),
    (x, x, np.ones((3, 4), np.float32)[::-1], 1.0), (x, x, np.broadcast_to(np.float32(1), (3, 4)), 1.0),
    (x.view(Liar), x, None, float("nan")), (x, x, None, 10**400), (np.ones((3, 4), ">f4"), x, None, 1.0),
]
for args in cases:
    try:
        if args[2] is None:
            k(args[0], args[1], alpha=args[3])
        else:
            k(*args)
        print("ok")
    except tdsl.ArgumentError as e:
        print("ArgumentError")
'''.replace("AXPY_SOURCE", SRC)


def test_parameters_declared_with_strides_are_never_misread():
    kernel = tdsl.build(tdsl.parse('''
@T.prim_func
def strided(A: T.Buffer((4, 4), "float32", strides=(8, 1)), B: T.Buffer((4, 4), "float32", strides=(8, 1))):
    for i, j in T.grid(4, 4):
        with T.block("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2)
'''))
    big = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = np.zeros((4, 8), np.float32)
    kernel(big[:, :4], out[:, :4])                           # the declared layout: used in place
    np.testing.assert_array_equal(out[:, :4], big[:, :4] * 2)
    np.testing.assert_array_equal(out[:, 4:], 0)
    np.testing.assert_array_equal(kernel(big[:, :4].copy()), big[:, :4] * 2)   # C order: copied to fit
    msg = _err(kernel, big[:, :4], np.zeros((4, 4), np.float32))
    assert "'B'" in msg and "strides (8, 1)" in msg


def test_alpha_equivalent_kernels_share_code_but_keep_their_own_names(rng):
    """Two functions that differ only in names share machine code; each Kernel reports its own
    parameter names and binds its own symbolic dimension (also on the slow path)."""
    other = tdsl.build(tdsl.parse(SRC.replace('"n"', '"rows"').replace("(n, 4)", "(rows, 4)")
                                  .replace("X", "P").replace("Y", "Q")))
    mine = tdsl.build(tdsl.parse(SRC))
    assert mine._compiled is other._compiled
    x = rng.standard_normal((6, 4)).astype(np.float32)
    y = np.asfortranarray(rng.standard_normal((6, 4)).astype(np.float32))     # forces the slow path
    np.testing.assert_allclose(other(x, y, alpha=2.0), 2 * x + y, rtol=1e-6)
    assert "'P'" in _err(other, x.astype(np.float64), y, alpha=1.0)
    assert "'rows'" in _err(other, x, y[:5], alpha=1.0)
