"""test_tir_schedule_split_fuse.py: split and fuse refuse loops whose thread binding or
annotations the new loops would lose (tdsl used to drop them silently)."""
import pytest
from sched_check import expect_error

import tdsl
from tdsl import T


@T.prim_func(s_tir=True)
def elementwise_with_anno(a: T.handle, b: T.handle) -> None:
    A = T.match_buffer(a, (8, 8, 8))
    B = T.match_buffer(b, (8, 8, 8))
    for i, j in T.grid(8, 8):
        for k in T.serial(0, 8, annotations={"useless_annotation": True}):
            with T.sblock("B"):
                vi, vj, vk = T.axis.remap("SSS", [i, j, k])
                T.reads([A[vi, vj, vk]])
                T.writes([B[vi, vj, vk]])
                B[vi, vj, vk] = A[vi, vj, vk] * 2.0


@T.prim_func(s_tir=True)
def elementwise_with_thread_binding(a: T.handle, b: T.handle) -> None:
    A = T.match_buffer(a, (8, 8, 8))
    B = T.match_buffer(b, (8, 8, 8))
    for i, j in T.grid(8, 8):
        for k in T.thread_binding(0, 8, thread="threadIdx.x"):
            with T.sblock("B"):
                vi, vj, vk = T.axis.remap("SSS", [i, j, k])
                T.reads([A[vi, vj, vk]])
                T.writes([B[vi, vj, vk]])
                B[vi, vj, vk] = A[vi, vj, vk] * 2.0


@pytest.mark.parametrize("func, what", [(elementwise_with_anno, "useless_annotation"),
                                        (elementwise_with_thread_binding, "threadIdx.x")])
def test_fuse_split_fail_with_annotation_or_thread_binding(func, what):
    # test_fuse_split_fail_with_annotation / _with_thread_binding
    sch = tdsl.Schedule(func)
    _, j, k = sch.get_loops(sch.get_sblock("B"))
    expect_error(sch, lambda: sch.fuse(j, k), "loop k", what)
    expect_error(sch, lambda: sch.split(k, factors=[None, 4]), "loop k", what)
