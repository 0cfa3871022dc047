"""Scans on the GPU path (the auto prefix_sum xfail): a scan's declared read `B[vi - 1]` names
B[-1] at vi = 0, which its `if vi == 0` branch never reads; the thread-exchange check cut no
region to its buffer and refused every scan as a race. A kernel of one thread exchanges nothing
either. Each schedule runs in the emulator against numpy; real exchanges are still refused."""
import shutil

import numpy as np
import pytest

import tdsl

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler")


ROW_SCAN = """
@T.prim_func
def row_scan(A: T.Buffer((8, 20), "float32"), B: T.Buffer((8, 20), "float32")):
    for i in T.thread_binding(8, thread="{rows}"):
        for j in {cols}:
            with T.block("scan"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(A[vi, vj], B[vi, vj - 1])
                T.writes(B[vi, vj])
                if vj == 0:
                    B[vi, vj] = A[vi, vj]
                else:
                    B[vi, vj] = B[vi, vj - 1] + A[vi, vj]
"""


@needs_cxx
def test_rows_scanned_by_their_own_threads_are_not_a_race():
    func = tdsl.parse(ROW_SCAN.format(rows="threadIdx.x", cols="range(20)"))
    a = np.random.default_rng(0).integers(-4, 5, (8, 20)).astype("float32")
    np.testing.assert_array_equal(tdsl.build(func, target="cuda", emulate=True)(a), np.cumsum(a, axis=1))


def test_a_scan_across_threads_is_still_refused():
    # element j reads what thread j - 1 writes
    func = tdsl.parse(ROW_SCAN.format(rows="blockIdx.x", cols='T.thread_binding(20, thread="threadIdx.x")'))
    with pytest.raises(tdsl.ScheduleError, match=r'reads B\[vi, vj - 1\] of the global buffer "B"'):
        tdsl.build(func, target="cuda", emulate=True)


REVERSE_TWICE = """
@T.prim_func
def reverse_twice(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    Tmp = T.alloc_buffer((16,), "float32")
    for b in T.thread_binding({blocks}, thread="blockIdx.x"):
        for t in T.thread_binding(1, thread="threadIdx.x"):
            for i in range(16 // {blocks}):
                with T.block("T"):
                    vi = T.axis.spatial(16, b * (16 // {blocks}) + i)
                    Tmp[vi] = A[15 - vi] * T.float32(2)
            for i in range(16 // {blocks}):
                with T.block("C"):
                    vi = T.axis.spatial(16, b * (16 // {blocks}) + i)
                    C[vi] = Tmp[15 - vi]
"""


@needs_cxx
def test_a_one_thread_kernel_exchanges_nothing():
    # both stages in one kernel of one thread: Tmp[15 - vi] was written by that same thread before
    func = tdsl.parse(REVERSE_TWICE.format(blocks=1))
    a = np.arange(16, dtype="float32")
    np.testing.assert_array_equal(tdsl.build(func, target="cuda", emulate=True)(a), a * 2)


def test_two_blocks_exchanging_through_global_memory_are_still_refused():
    with pytest.raises(tdsl.ScheduleError, match=r'reads Tmp\[15 - vi\] of the global buffer "Tmp"'):
        tdsl.build(tdsl.parse(REVERSE_TWICE.format(blocks=2)), target="cuda", emulate=True)
