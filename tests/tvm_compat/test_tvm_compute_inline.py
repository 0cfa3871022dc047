"""test_tir_schedule_compute_inline.py, ported: reverse_compute_inline of a consumer that reads
the producer's buffer at affine (mixed-radix) indices, which tdsl used to refuse."""
from sched_check import check, expect_error

import tdsl
from tdsl import T


@T.prim_func(s_tir=True)
def elementwise_multi_reverse_affine_load(A: T.Buffer((32, 16), "float32"), C: T.Buffer((2, 16, 16), "float32")):
    B = T.sblock_alloc_buffer((32, 16))
    for i, j in T.grid(32, 16):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * 2.0
    for i, j, k in T.grid(2, 16, 16):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSS", [i, j, k])
            C[vi, vj, vk] = B[vi * 16 + vj, vk] + B[vi * 16 + vj, vk]


@T.prim_func(s_tir=True)
def elementwise_multi_reverse_affine_load_inlined(A: T.Buffer((32, 16), "float32"),
                                                  C: T.Buffer((2, 16, 16), "float32")):
    for i, j in T.grid(32, 16):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi // 16, vi % 16, vj] = A[vi, vj] * 2.0 + A[vi, vj] * 2.0


def test_reverse_compute_inline_multi_affine_load():
    sch = tdsl.Schedule(elementwise_multi_reverse_affine_load)
    sch.reverse_compute_inline(sch.get_sblock("C"))
    tdsl.assert_structural_equal(sch.func, elementwise_multi_reverse_affine_load_inlined)
    check(sch, elementwise_multi_reverse_affine_load)


def test_reverse_compute_inline_affine_load_three_digits():
    # test_reverse_compute_inline_affine_load: B[(vi * 8 + vj) * 4 + vk, vl]
    f = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((64, 8), "float32"), C: T.Buffer((2, 8, 4, 8), "float32")):
    B = T.alloc_buffer((64, 8), "float32")
    for i, j in T.grid(64, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] + T.float32(1)
    for i, j, k, l in T.grid(2, 8, 4, 8):
        with T.block("C"):
            vi, vj, vk, vl = T.axis.remap("SSSS", [i, j, k, l])
            C[vi, vj, vk, vl] = B[(vi * 8 + vj) * 4 + vk, vl] * T.float32(3)
''')
    sch = tdsl.Schedule(f)
    sch.reverse_compute_inline(sch.get_block("C"))
    assert "C[vi // 32, vi % 32 // 4, vi % 4, vj]" in sch.func.script()
    check(sch, f)


def test_reverse_compute_inline_refuses_overlapping_digits():
    # vi * 8 + vj with vj over 16 values: two consumer instances read one element
    f = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((32, 8), "float32"), C: T.Buffer((2, 16, 8), "float32")):
    B = T.alloc_buffer((32, 8), "float32")
    for i, j in T.grid(32, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] + T.float32(1)
    for i, j, k in T.grid(2, 16, 8):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSS", [i, j, k])
            C[vi, vj, vk] = B[vi * 8 + vj, vk]
''')
    sch = tdsl.Schedule(f)
    c = sch.get_block("C")
    expect_error(sch, lambda: sch.reverse_compute_inline(c), "mixed-radix")
