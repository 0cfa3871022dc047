"""Issue 22: the element count of an intermediate buffer is not computed in wrapping int32:
a constant shape past int32 indices is refused at build, a symbolic one raises MemoryError at
the call (before anything is written), also with bounds_check=True."""
from __future__ import annotations

import pytest
from backends.subproc import run_probe

import tdsl

GATHER = '''
@T.prim_func
def f(A: T.Buffer((4,), "int32"), B: T.Buffer((4,), "float32"), n: T.int32):
    X = T.alloc_buffer({shape}, "float32")
    for i in range(4):
        with T.block("X"):
            vi = T.axis.remap("S", [i])
            X[{index}] = T.float32(1)
    for i in range(4):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = X[{index}]
'''


def _func(shape: str, rank: int):
    return tdsl.parse(GATHER.format(shape=shape, index=", ".join(["A[vi]"] * rank)))


@pytest.mark.parametrize("shape,rank,count", [("(1024, 1024, 1024, 1024)", 4, 2**40), ("(65536, 32768)", 2, 2**31)])
def test_constant_shape_past_int32_is_refused_at_build(shape, rank, count):
    with pytest.raises(tdsl.TargetError, match=f"buffer 'X' of shape {shape.replace('(', '[(]').replace(')', '[)]')} "
                                               f"has {count} elements"):
        tdsl.build(_func(shape, rank))


@pytest.mark.parametrize("bounds_check", [False, True])
def test_symbolic_shape_past_int32_is_a_memory_error_at_call(bounds_check):
    out = run_probe(f"""
import numpy as np, tdsl
from backends.test_alloc_sizes import _func
kernel = tdsl.build(_func("(n, n, n, n)", 4), bounds_check={bounds_check})
try:
    kernel(np.array([0, 1, 1023, 1023], "int32"), np.zeros(4, "float32"), 1024)
except MemoryError as e:
    print("MEMORY", e)
b = np.zeros(4, "float32")
kernel(np.array([0, 1, 2, 3], "int32"), b, 4)     # a size that fits still runs
print("OK", (b == 1).all())
""")
    assert "MEMORY" in out and "2**31 elements or more" in out and "OK True" in out


def test_int64_shape_of_the_same_size_builds():
    func = tdsl.parse(GATHER.format(shape="(T.int64(65536), T.int64(32768))",
                                    index="T.cast(A[vi], 'int64'), T.cast(A[vi], 'int64')"))
    tdsl.lower(func)   # no error: int64 indices address it
