"""test_tir_schedule_compute_at.py cases where tdsl differs on purpose (docs/script.md): TVM
refuses a compute_at / reverse_compute_at when another consumer / producer is outside the loop;
tdsl accepts, and the result computes the same."""
from sched_check import check, same_on_cpu

import tdsl
from tdsl import T


@T.prim_func(s_tir=True)
def fail_all_consumers_under_loop(a: T.handle, c: T.handle, d: T.handle) -> None:
    A = T.match_buffer(a, (16, 16), "float32")
    B = T.sblock_alloc_buffer((16, 16), "float32")
    C = T.match_buffer(c, (16, 16), "float32")
    D = T.match_buffer(d, (16, 16), "float32")
    for i, j in T.grid(16, 16):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j in T.grid(16, 16):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] + 1.0
    for i, j in T.grid(16, 16):
        with T.sblock("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = B[vi, vj] + 1.0


@T.prim_func(s_tir=True)
def fail_all_producers_under_loop(a: T.handle, d: T.handle) -> None:
    A = T.match_buffer(a, (16, 16), "float32")
    B = T.sblock_alloc_buffer((16, 16), "float32")
    C = T.sblock_alloc_buffer((16, 16), "float32")
    D = T.match_buffer(d, (16, 16), "float32")
    for i, j in T.grid(16, 16):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j in T.grid(16, 16):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] + 1.0
    for i, j in T.grid(16, 16):
        with T.sblock("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = B[vi, vj] + C[vi, vj]


def test_compute_at_with_a_consumer_outside_the_loop():
    # test_fail_all_consumers_under_loop: D reads B after the whole loop of C, so it sees all of B
    sch = tdsl.Schedule(fail_all_consumers_under_loop)
    loop, _ = sch.get_loops(sch.get_sblock("C"))
    sch.compute_at("B", loop)
    check(sch, fail_all_consumers_under_loop)
    same_on_cpu(sch, fail_all_consumers_under_loop)


def test_reverse_compute_at_with_a_producer_outside_the_loop():
    # test_fail_all_producers_under_loop: B is complete before the loop of C starts
    sch = tdsl.Schedule(fail_all_producers_under_loop)
    loop, _ = sch.get_loops(sch.get_sblock("C"))
    sch.reverse_compute_at("D", loop)
    check(sch, fail_all_producers_under_loop)
    same_on_cpu(sch, fail_all_producers_under_loop)
