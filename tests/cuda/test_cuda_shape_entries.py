"""CUDA kernels take parameters whose declared shape is an expression of the sizes ("m + 1"), as CPU
kernels do: the call binds the sizes from the dimensions declared by name (and the scalars), then
checks each expression against its array (an ArgumentError in script terms when it differs, or
when no argument gives a size it uses); an output with such a shape may be left out (allocated)."""
import re
import shutil

import numpy as np
import pytest

import tdsl
from tdsl import T

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                                reason="no host C++ compiler (the emulator needs one)")


@T.prim_func
def reads_m_plus_1(a: T.handle, b: T.handle):
    m = T.int32()
    A = T.match_buffer(a, (m + 1,), "float32")
    B = T.match_buffer(b, (m,), "float32")
    for i in range(m):
        with T.block("B"):
            vi = T.axis.spatial(m, i)
            B[vi] = A[vi] + A[vi + 1]


@T.prim_func
def writes_m_plus_1(a: T.handle, b: T.handle):
    m = T.int32()
    A = T.match_buffer(a, (m,), "float32")
    B = T.match_buffer(b, (m + 1,), "float32")
    for i in range(m + 1):
        with T.block("B"):
            vi = T.axis.spatial(m + 1, i)
            B[vi] = T.cast(vi, "float32") + A[0]


@T.prim_func
def only_m_plus_1(a: T.handle, b: T.handle):
    m = T.int32()
    A = T.match_buffer(a, (m + 1,), "float32")
    B = T.match_buffer(b, (m + 1,), "float32")
    for i in range(m + 1):
        with T.block("B"):
            vi = T.axis.spatial(m + 1, i)
            B[vi] = A[vi]


def build(func):
    sch = tdsl.Schedule(func)
    (i,) = sch.get_loops(sch.get_block("B"))
    bx, tx = sch.split(i, [None, 32])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return tdsl.build(sch, target="cuda", emulate=True, thread_orders=1)


def test_an_input_declared_m_plus_1_is_bound_and_checked():
    kernel = build(reads_m_plus_1)
    a = np.arange(41, dtype="float32")
    b = np.zeros(40, "float32")
    kernel(a, b)
    np.testing.assert_array_equal(b, a[:-1] + a[1:])
    with pytest.raises(tdsl.ArgumentError, match=re.escape(
            "parameter 'A': expected shape (m + 1,), got (40,) (dimension 0 is 40, not m + 1 = 41 with m = 40)")):
        kernel(a[:40], b)


def test_an_output_declared_m_plus_1_is_allocated_when_left_out_and_checked_when_passed():
    kernel = build(writes_m_plus_1)
    a = np.full(40, 2.0, "float32")
    np.testing.assert_array_equal(kernel(a), np.arange(41, dtype="float32") + 2)
    b = np.zeros(41, "float32")
    kernel(a, b)
    np.testing.assert_array_equal(b, np.arange(41, dtype="float32") + 2)
    with pytest.raises(tdsl.ArgumentError, match=re.escape("parameter 'B': expected shape (m + 1,), got (40,)")):
        kernel(a, np.zeros(40, "float32"))


def test_a_size_no_argument_gives_is_named():
    kernel = build(only_m_plus_1)
    with pytest.raises(tdsl.ArgumentError, match="dimension 0 is declared m [+] 1, but no argument gives 'm'"):
        kernel(np.zeros(8, "float32"), np.zeros(8, "float32"))
