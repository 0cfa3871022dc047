"""TVM's mma tensorize schedules keep fragments in scope "warp" as (32, 8) buffers laid out with
shared_16x16_to_ldmatrix_32x8_layout; tdsl's mma intrinsics take fragments in their logical
shape (scope m16n8k16.matrixA / matrixB / accumulator). A TVM-style schedule is refused at its
first warp-scope step with a message that says what tdsl writes instead; so is a script with a
"warp" buffer at a CUDA build, and TVM's T.meta_var index-map unpacking."""
import pytest

import tdsl
from tdsl import T
from tdsl.errors import ScheduleError, ScriptError, TargetError


def shared_16x16_to_ldmatrix_32x8_layout(i, j):   # as in TVM's python/tvm/tir/tensor_intrin/cuda.py
    thread_id = 4 * (i % 8) + (j % 8) // 2
    return thread_id, 4 * (j // 8) + (i // 8) * 2 + (j % 2)


@T.prim_func
def dense(A: T.Buffer((128, 128), "float16"), B: T.Buffer((128, 128), "float16"),
          C: T.Buffer((128, 128), "float32")):
    for i, j, k in T.grid(128, 128, 128):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vj, vk], "float32")


def test_tvm_style_schedule_is_refused_at_its_warp_scope_step():
    # the opening of TVM's test_tir_schedule_tensorize_ldmatrix_mma run_test, module names adapted
    sch = tdsl.Schedule(dense)
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    i, i_tc = sch.split(i, factors=[None, 16])
    j, j_tc = sch.split(j, factors=[None, 16])
    k, k_tc = sch.split(k, factors=[None, 16])
    sch.reorder(i, j, k, i_tc, j_tc, k_tc)
    sch.cache_read(block, "A", "shared")   # (TVM's test names the read by index: its reads list A first)
    before = str(sch.mod)
    with pytest.raises(ScheduleError) as err:
        sch.cache_read(block, "A_shared", "warp")
    text = str(err.value)
    assert "scope 'warp'" in text and "shared_16x16_to_ldmatrix_32x8_layout" in text
    assert "m16n8k16.matrixA" in text and "mma_ldmatrix_f16_a" in text
    assert str(sch.mod) == before      # the schedule is unchanged


def test_a_warp_buffer_in_a_script_is_refused_at_a_cuda_build():
    @T.prim_func
    def f(A: T.Buffer((32, 8), "float16"), B: T.Buffer((32, 8), "float16")):
        W = T.alloc_buffer((32, 8), "float16", scope="warp")
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            for j in range(8):
                with T.block("w"):
                    vi, vj = T.axis.remap("SS", [tx, j])
                    W[vi, vj] = A[vi, vj]
            for j in range(8):
                with T.block("b"):
                    vi, vj = T.axis.remap("SS", [tx, j])
                    B[vi, vj] = W[vi, vj]
    with pytest.raises(TargetError, match=r"buffer 'W': scope 'warp' .*m16n8k16.matrixA"):
        tdsl.lower(f, target="cuda")


def test_meta_var_unpacking_says_what_tdsl_writes():
    from tdsl.script import parse

    src = '''
@T.prim_func
def ldmatrix_a_desc(A: T.Buffer((16, 16), "float16", scope="shared"), C: T.Buffer((32, 8), "float16")):
    for ax0, ax1 in T.grid(16, 16):
        with T.block("A_shared_warp"):
            v0, v1 = T.axis.remap("SS", [ax0, ax1])
            thread_id, local_id = T.meta_var((v0 * 2 + v1 // 8, v1 % 8))
            C[thread_id, local_id] = A[v0, v1]
'''
    with pytest.raises(ScriptError, match=r"T.meta_var \(TVMScript\) is not part of tdsl") as err:
        parse(src)
    assert "m16n8k16.matrixA" in str(err.value)
    assert shared_16x16_to_ldmatrix_32x8_layout(15, 15) == (31, 7)   # the layout the message names
