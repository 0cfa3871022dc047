"""Schedule primitives where TVM's tests (test_tir_schedule_compute_at.py, _cache_read_write.py,
_transform_layout.py, _reorder.py, _reduction.py) accept a legal step or refuse an illegal one,
and tdsl now does too; each accepted step is checked against the interpreter on the original."""
import numpy as np
from sched_check import check, expect_error

import tdsl
from tdsl import T

# decompose_reduction under an `if` ------------------------------------------------------------

@T.prim_func
def rowsum_under_if(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8,), "float32")) -> None:
    for i in range(8):
        for k in range(8):
            if i < 4:
                with T.block("B"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    with T.init():
                        B[vi] = 0.0
                    B[vi] = B[vi] + A[vi, vk]


@T.prim_func
def rowsum_under_if_on_k(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8,), "float32")) -> None:
    for i in range(8):
        for k in range(8):
            if k < 6:
                with T.block("B"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    with T.init():
                        B[vi] = 0.0
                    B[vi] = B[vi] + A[vi, vk]
            else:
                with T.block("C"):
                    vi, vk = T.axis.remap("SS", [i, k])
                    A[vi, vk] = A[vi, vk] * 2.0


@T.prim_func
def rowsum_from_the_third(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8,), "float32")) -> None:
    for i in range(8):
        for k in range(8):
            if k >= 2:
                with T.block("B"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    with T.init():
                        B[vi] = 0.0
                    B[vi] = B[vi] + A[vi, vk]


def test_decompose_reduction_carries_an_if_into_the_init():
    # the init used to run for all 8 rows, overwriting B[4:8], which the original never touches
    for at in (0, 1):
        sch = tdsl.Schedule(rowsum_under_if)
        sch.decompose_reduction("B", sch.get_loops("B")[at])
        init = sch.func.script().split('"B_init"')[1].split('"B"')[0]
        assert "T.where(" in init and "< 4" in init, init
        check(sch, rowsum_under_if)


def test_decompose_reduction_drops_an_if_that_holds_at_the_first_iteration():
    for at in (0, 1):
        sch = tdsl.Schedule(rowsum_under_if_on_k)
        sch.decompose_reduction("B", sch.get_loops("B")[at])
        check(sch, rowsum_under_if_on_k)


def test_decompose_reduction_refuses_an_if_that_skips_the_first_iteration():
    # the original's T.init never runs (k = 0 is skipped); a separate init block would
    sch = tdsl.Schedule(rowsum_from_the_third)
    i, _ = sch.get_loops("B")
    expect_error(sch, lambda: sch.decompose_reduction("B", i), "B", "k >= 2")
