"""cp.async in the CUDA backend and the emulator: T.ptx_cp_async / T.ptx_commit_group /
T.ptx_wait_group written by hand (TVM's builtins) and made by the pipelining pass.

The emulator's model is checked against the PTX ISA's own text (section "Data Movement and
Conversion Instructions: cp.async", "cp.async.commit_group", "cp.async.wait_group /
cp.async.wait_all"), not against tdsl's codegen. The facts used:

* cp.async "initiates an asynchronous copy" from the global state space (src) to the shared state
  space (dst); "cp-size can only be 4, 8 and 16"; the .cg form copies 16 bytes only; operands are
  aligned as "Addresses as Operands" requires (to the access size).
* "cp.async.commit_group instruction creates a new cp.async-group per thread and batches all
  prior cp.async instructions initiated by the executing thread but not committed to any
  cp.async-group into the new cp.async-group. If there are no uncommitted cp.async instructions
  then cp.async.commit_group results in an empty cp.async-group."
* "cp.async.wait_group instruction will cause executing thread to wait till only N or fewer of the
  most recent cp.async-groups are pending and all the prior cp.async-groups committed by the
  executing threads are complete." "An empty cp.async-group is considered to be trivially
  complete."
* "Writes performed by cp.async operations are made visible to the executing thread only after
  ... the completion of cp.async.wait_group on the cp.async-group in which the cp.async belongs";
  wait_group "does not provide any ordering and visibility guarantees for any other memory
  operation": other threads need a barrier after the wait.
* Requires sm_80 or higher (PTX ISA 7.0).
"""
import os
import re
import shutil
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from pipeline_kernels import vec_gemm

import tdsl
from tdsl import T

A64 = np.arange(64, dtype="float32")


def _run(func, *args):
    kernel = tdsl.build(func, target="cuda", emulate=True)
    out = [a.copy() for a in args]
    kernel(*out)
    return out


def groups_kernel(wait: int, read_group: int, empty_between: bool = False):
    """Each thread copies A[tx] into S0 (group 1) and A[tx] + 64.. into S1 (group 2, or group 3
    after an empty group), waits with `wait`, then reads the buffer of `read_group`."""

    @T.prim_func
    def groups(A: T.Buffer((128,), "float32"), B: T.Buffer((64,), "float32")):
        S0 = T.alloc_buffer((64,), "float32", scope="shared")
        S1 = T.alloc_buffer((64,), "float32", scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                with T.block("copy"):
                    T.evaluate(T.ptx_cp_async(S0[tx], A[tx], 4))
                    T.evaluate(T.ptx_commit_group())
                    if empty_between:
                        T.evaluate(T.ptx_commit_group())
                    T.evaluate(T.ptx_cp_async(S1[tx], A[tx + 64], 4))
                    T.evaluate(T.ptx_commit_group())
                    T.evaluate(T.ptx_wait_group(wait))
                    if read_group == 1:
                        B[tx] = S0[tx]
                    else:
                        B[tx] = S1[tx]
                    T.evaluate(T.ptx_wait_group(0))

    return groups


A128 = np.arange(128, dtype="float32")


def test_wait_group_n_completes_all_but_the_n_newest_groups():
    # wait 1 of 2 groups: the older group has landed, the newer may still be in flight
    (_, b) = _run(groups_kernel(wait=1, read_group=1), A128, np.zeros(64, "float32"))
    np.testing.assert_array_equal(b, A128[:64])
    with pytest.raises(tdsl.TargetError, match=r"race on S1\[0\]: it is accessed while a cp.async to it "
                                               r"\(issued by thread \(0, 0, 0\)\) is in flight"):
        _run(groups_kernel(wait=1, read_group=2), A128, np.zeros(64, "float32"))
    (_, b) = _run(groups_kernel(wait=0, read_group=2), A128, np.zeros(64, "float32"))
    np.testing.assert_array_equal(b, A128[64:])


def test_an_empty_group_counts_as_a_group():
    # groups: {S0}, {}, {S1}: wait 2 completes only {S0}; wait 1 also the empty one, not {S1}
    (_, b) = _run(groups_kernel(wait=2, read_group=1, empty_between=True), A128, np.zeros(64, "float32"))
    np.testing.assert_array_equal(b, A128[:64])
    with pytest.raises(tdsl.TargetError, match=r"race on S0\[0\]"):
        _run(groups_kernel(wait=3, read_group=1, empty_between=True), A128, np.zeros(64, "float32"))
    with pytest.raises(tdsl.TargetError, match=r"race on S1\[0\]"):
        _run(groups_kernel(wait=1, read_group=2, empty_between=True), A128, np.zeros(64, "float32"))


def exchange_kernel(barrier_after_wait: bool):
    """Thread tx copies A[tx] into S[tx]; thread tx then reads S[63 - tx], another thread's copy."""

    @T.prim_func
    def exchange(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                with T.block("issue"):
                    T.evaluate(T.ptx_cp_async(S[tx], A[tx], 4))
                    T.evaluate(T.ptx_commit_group())
                    if barrier_after_wait:
                        T.evaluate(T.ptx_wait_group(0))
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                with T.block("use"):
                    B[tx] = S[63 - tx]
                    T.evaluate(T.ptx_wait_group(0))

    return exchange


def test_other_threads_see_a_copy_after_its_wait_and_a_barrier():
    (_, b) = _run(exchange_kernel(barrier_after_wait=True), A64, np.zeros(64, "float32"))
    np.testing.assert_array_equal(b, A64[::-1])
    # the barrier comes before the issuing thread's wait: the copy is still in flight
    with pytest.raises(tdsl.TargetError, match=r"race on S\[\d+\].*is in flight"):
        _run(exchange_kernel(barrier_after_wait=False), A64, np.zeros(64, "float32"))


def test_a_thread_that_never_waits_is_reported():
    @T.prim_func
    def no_wait(A: T.Buffer((64,), "float32")):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                with T.block("issue"):
                    T.evaluate(T.ptx_cp_async(S[tx], A[tx], 4))
                    T.evaluate(T.ptx_commit_group())

    with pytest.raises(tdsl.TargetError, match=r"finished with 1 cp.async copies it never waited for"):
        _run(no_wait, A64)


def test_misaligned_and_badly_sized_copies():
    @T.prim_func
    def misaligned(A: T.Buffer((72,), "float32"), B: T.Buffer((64,), "float32")):
        S = T.alloc_buffer((72,), "float32", scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                with T.block("issue"):
                    T.evaluate(T.ptx_cp_async(S[tx * 4 + 1], A[tx * 4 + 1], 16))
                    T.evaluate(T.ptx_commit_group())
                    T.evaluate(T.ptx_wait_group(0))
                    for v in range(4):
                        B[tx * 4 + v] = S[tx * 4 + 1 + v]

    with pytest.raises(tdsl.TargetError, match=r"misaligned cp.async of 16 bytes into S at byte offset 4"):
        _run(misaligned, np.arange(72, dtype="float32"), np.zeros(64, "float32"))
    with pytest.raises(tdsl.ScriptError, match=r"cp.async copies 4, 8 or 16 bytes, got 12"):
        tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((64,), "float32")):
    S = T.alloc_buffer((64,), "float32", scope="shared")
    for tx in T.thread_binding(16, thread="threadIdx.x"):
        with T.block("c"):
            T.evaluate(T.ptx_cp_async(S[tx * 4], A[tx * 4], 12))
''')


def test_tvm_spelling_with_data_and_offsets():
    @T.prim_func
    def tvm_form(A: T.Buffer((16, 4), "float32"), B: T.Buffer((16, 4), "float32")):
        S = T.alloc_buffer((16, 4), "float32", scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                with T.block("copy"):
                    T.evaluate(T.ptx_cp_async("float32", S.data, tx * 4, A.data, tx * 4, 16))
                    T.evaluate(T.ptx_commit_group())
                    T.evaluate(T.ptx_wait_group(0))
                    for v in range(4):
                        B[tx, v] = S[tx, v] + T.float32(1)

    text = tvm_form.script()
    assert "T.ptx_cp_async(S[tx, 0], A[tx, 0], 16)" in text
    a = np.arange(64, dtype="float32").reshape(16, 4)
    (_, b) = _run(tvm_form, a, np.zeros((16, 4), "float32"))
    np.testing.assert_array_equal(b, a + 1)
    want = np.zeros((16, 4), "float32")
    tdsl.interpret(tvm_form, a, want)   # the interpreter copies at once
    np.testing.assert_array_equal(want, a + 1)
    assert "tdsl_cp_async_cg16(&S[" in tdsl.build(tvm_form, target="cuda", emulate=True).source


# ----------------------------------------------------------------------------- SASS

def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia
    except ImportError:
        return None
    for base in nvidia.__path__:
        for sub in ("cu13", "cu12", "cuda_cuobjdump"):
            cand = os.path.join(base, sub, "bin", "cuobjdump")
            if os.path.exists(cand):
                return cand
    return None


def _sass_ops(cubin: bytes, tmp_path) -> Counter:
    exe = _cuobjdump()
    if exe is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    out = subprocess.run([exe, "-sass", str(path)], capture_output=True, text=True, check=True).stdout
    return Counter(m.split(".")[0] for m in re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", out))


@pytest.mark.skipif(sys.platform != "linux", reason="the NVRTC wheels are Linux builds")
def test_pipelined_gemm_sass_has_ldgsts(tmp_path):
    pytest.importorskip("cuda.bindings")
    ops = _sass_ops(tdsl.build(vec_gemm(), target="cuda", arch="sm_80").cubin, tmp_path)
    assert ops["LDGSTS"] >= 4        # cp.async: global -> shared without registers
    assert ops["LDGDEPBAR"] >= 2     # cp.async.commit_group
    assert ops["DEPBAR"] >= 2        # cp.async.wait_group
    assert ops["LDL"] == ops["STL"] == 0
    # the same kernel without async stages stages through registers: LDG + STS, no LDGSTS
    plain = _sass_ops(tdsl.build(vec_gemm(async_stages=()), target="cuda", arch="sm_80").cubin, tmp_path)
    assert plain["LDGSTS"] == 0 and plain["LDG"] > 0 and plain["STS"] > 0


@pytest.mark.skipif(sys.platform != "linux", reason="the NVRTC wheels are Linux builds")
def test_before_sm80_cp_async_is_a_plain_copy(tmp_path):
    pytest.importorskip("cuda.bindings")
    ops = _sass_ops(tdsl.build(vec_gemm(), target="cuda", arch="sm_75").cubin, tmp_path)
    assert ops["LDGSTS"] == 0 and ops["LDG"] > 0 and ops["STS"] > 0


def test_a_vector_read_that_overlaps_a_copy_in_flight():
    # the float4 load of S[4 tx .. 4 tx + 3] covers S[4 tx + 3], whose cp.async is still in flight
    @T.prim_func
    def overlap(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                with T.block("copy"):
                    for v in range(3):
                        S[tx * 4 + v] = A[tx * 4 + v]
                    T.evaluate(T.ptx_cp_async(S[tx * 4 + 3], A[tx * 4 + 3], 4))
                    T.evaluate(T.ptx_commit_group())
                    for v in T.vectorized(4):
                        B[tx * 4 + v] = S[tx * 4 + v]
                    T.evaluate(T.ptx_wait_group(0))

    kernel = tdsl.build(overlap, target="cuda", emulate=True)
    assert "float4" in kernel.source
    with pytest.raises(tdsl.TargetError, match=r"race on S\[3\]: it is accessed while a cp.async to it"):
        kernel(A64, np.zeros(64, "float32"))


def test_a_copy_wider_than_the_vector_lanes_becomes_one_16_byte_cp_async():
    # 8 halves per thread: vectorize (4 lanes on CUDA) leaves two 8-byte pieces, which
    # lower_async_copies joins into one aligned 16-byte cp.async.cg
    @T.prim_func
    def half_stage(A: T.Buffer((8, 512), "float16"), B: T.Buffer((8, 512), "float16")):
        S = T.alloc_buffer((512,), "float16", scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for k in T.serial(8, annotations={"software_pipeline_stage": [0, 1],
                                              "software_pipeline_async_stages": [0]}):
                for tx in T.thread_binding(64, thread="threadIdx.x"):
                    for v in T.vectorized(8):
                        with T.block("S"):
                            vk = T.axis.spatial(8, k)
                            e = T.axis.spatial(512, tx * 8 + v)
                            S[e] = A[vk, e]
                for tx in T.thread_binding(64, thread="threadIdx.x"):
                    for v in T.serial(8):
                        with T.block("B"):
                            vk = T.axis.spatial(8, k)
                            e = T.axis.spatial(512, tx * 8 + v)
                            B[vk, e] = S[511 - e] * T.float16(2)

    kernel = tdsl.build(half_stage, target="cuda", emulate=True)
    src = kernel.source.split("#endif")[-1]
    assert src.count("tdsl_cp_async_cg16(&S[") == 2 and "tdsl_cp_async_ca" not in src
    a = np.random.default_rng(0).standard_normal((8, 512)).astype("float16")
    np.testing.assert_array_equal(kernel(a), a[:, ::-1] * np.float16(2))
