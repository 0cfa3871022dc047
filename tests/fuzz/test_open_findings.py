"""Regression tests of the findings that were open at the end of the first fuzzing round
(docs/reliability.md): O1 blockize under T.where, O2 a broken __dlpack_device__, O3 an output
read before it is written left out of the call. All three are fixed."""
from __future__ import annotations

import numpy as np
import pytest
from corpus import CORPUS

import tdsl

PREDICATED = '''
@T.prim_func
def f(A: T.Buffer((5, 4), "float32"), B: T.Buffer((5, 4), "float32")):
    for io, ii, j in T.grid(2, 3, 4):
        with T.block("B"):
            vi = T.axis.spatial(5, io * 3 + ii)
            vj = T.axis.remap("S", [j])
            T.where(io * 3 + ii < 5)
            B[vi, vj] = A[vi, vj] + T.float32(1)
'''


def test_o1_blockize_keeps_a_predicated_block_in_its_domain():
    """O1 (schedule/primitives/blockize.py): blockize under a T.where leaves the predicate on
    the inner block, so the new outer block's iterator is bound to 5, outside [0, 5)."""
    sch = tdsl.Schedule(tdsl.parse(PREDICATED))
    _, _, j = sch.get_loops(sch.get_block("B"))
    sch.blockize(j)
    a = np.arange(20, dtype="float32").reshape(5, 4)
    b = np.zeros_like(a)
    tdsl.interpret(sch.func, a, b)  # raises BoundsError today
    np.testing.assert_array_equal(b, a + 1)


class _JunkDevice:
    def __dlpack_device__(self):
        return ("x", None)

    def __dlpack__(self, stream=None, **kwargs):
        raise BufferError("no")


def test_o2_broken_dlpack_device_is_an_argument_error():
    """O2 (backends/llvm/kernel.py): a __dlpack_device__ returning junk raises a bare ValueError
    from int() instead of tdsl.ArgumentError naming the parameter."""
    case = next(c for c in CORPUS if c.name == "relu")
    kernel = tdsl.build(case.func, target="cpu")
    with pytest.raises(tdsl.ArgumentError, match="'A'"):
        kernel(_JunkDevice(), np.zeros(64, "float32"))


def test_o3_left_out_output_that_is_read_is_not_garbage():
    """O3 (backends/llvm/kernel.py): y in matvec_accumulate is read before it is written (no init);
    leaving it out allocates it with np.empty, so the result adds uninitialised memory. Either
    refuse (ArgumentError: the parameter is read, pass it) or start from zeros."""
    case = next(c for c in CORPUS if c.name == "matvec_accumulate")
    kernel = tdsl.build(case.func, target="cpu")
    a = np.ones((20, 24), "float32")
    x = np.ones(24, "float32")
    for _ in range(5):
        np.full(10000, 7.0e25, "float32")  # leave non-zero memory around for np.empty to reuse
        try:
            y = kernel(a, x)
        except tdsl.ArgumentError:
            return
        np.testing.assert_array_equal(y, np.full(20, 24.0, "float32"))
