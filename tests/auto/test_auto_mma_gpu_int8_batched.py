"""auto_schedule (GPUMmaTiling) of int8 / uint8 GEMMs (s8 x s8 or u8 x u8 -> s32 on mma.sync m16n8k32), of GEMMs with
B stored n-major, and of batched GEMMs (the batch on blockIdx.z): numbers, bank conflicts and
coalescing in the emulator at small sizes, IMMA/HMMA, LDSM and LDGSTS in the sm_80 SASS."""
import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda.stats import cuobjdump_path, opcodes


def gemm_nt(m, n, k, ab, acc):
    @T.prim_func
    def f(A: T.Buffer((m, k), ab), B: T.Buffer((n, k), ab), C: T.Buffer((m, n), acc)):
        for i, j, kk in T.grid(m, n, k):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                with T.init():
                    C[vi, vj] = T.cast(0, acc)
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], acc) * T.cast(B[vj, vk], acc)
    return f


def gemm_nn(m, n, k, ab, acc):
    @T.prim_func
    def f(A: T.Buffer((m, k), ab), B: T.Buffer((k, n), ab), C: T.Buffer((m, n), acc)):
        for i, j, kk in T.grid(m, n, k):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                with T.init():
                    C[vi, vj] = T.cast(0, acc)
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], acc) * T.cast(B[vk, vj], acc)
    return f


def batched_nt(batch, m, n, k, ab, acc):
    @T.prim_func
    def f(A: T.Buffer((batch, m, k), ab), B: T.Buffer((batch, n, k), ab), C: T.Buffer((batch, m, n), acc)):
        for b, i, j, kk in T.grid(batch, m, n, k):
            with T.block("C"):
                vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, kk])
                with T.init():
                    C[vb, vi, vj] = T.cast(0, acc)
                C[vb, vi, vj] = C[vb, vi, vj] + T.cast(A[vb, vi, vk], acc) * T.cast(B[vb, vj, vk], acc)
    return f


def batched_nn(batch, m, n, k, ab, acc):
    @T.prim_func
    def f(A: T.Buffer((batch, m, k), ab), B: T.Buffer((batch, k, n), ab), C: T.Buffer((batch, m, n), acc)):
        for b, i, j, kk in T.grid(batch, m, n, k):
            with T.block("C"):
                vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, kk])
                with T.init():
                    C[vb, vi, vj] = T.cast(0, acc)
                C[vb, vi, vj] = C[vb, vi, vj] + T.cast(A[vb, vi, vk], acc) * T.cast(B[vb, vk, vj], acc)
    return f


def batched_shared_b(batch, m, n, k, ab, acc):
    """A batch of GEMMs with one B (a linear layer over a batch of sequences)."""
    @T.prim_func
    def f(A: T.Buffer((batch, m, k), ab), B: T.Buffer((k, n), ab), C: T.Buffer((batch, m, n), acc)):
        for b, i, j, kk in T.grid(batch, m, n, k):
            with T.block("C"):
                vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, kk])
                with T.init():
                    C[vb, vi, vj] = T.cast(0, acc)
                C[vb, vi, vj] = C[vb, vi, vj] + T.cast(A[vb, vi, vk], acc) * T.cast(B[vk, vj], acc)
    return f


# name -> (the function, whether B's matrix axes are [n, k])
CASES = {
    "int8": (lambda: gemm_nt(128, 128, 128, "int8", "int32"), True),
    "int8-batched": (lambda: batched_nt(2, 64, 64, 128, "int8", "int32"), True),
    "uint8": (lambda: gemm_nt(128, 128, 128, "uint8", "int32"), True),   # 255 * 255 * 128 fits in int32
    "f16-b-n-major": (lambda: gemm_nt(128, 128, 64, "float16", "float32"), True),
    "f16-batched": (lambda: batched_nn(2, 64, 64, 64, "float16", "float32"), False),
    "bf16-batched-shared-b": (lambda: batched_shared_b(2, 64, 128, 64, "bfloat16", "float32"), False),
}


def _operands(func, rng):
    out = []
    for buf in list(func.params)[:2]:
        shape = tuple(int(s.value) for s in buf.shape)
        dt = str(buf.dtype)
        if dt in ("int8", "uint8"):
            info = np.iinfo(dt)
            out.append(rng.integers(info.min, info.max + 1, shape).astype(dt))
        elif dt == "bfloat16":
            out.append(rng.standard_normal(shape).astype(pytest.importorskip("ml_dtypes").bfloat16))
        else:
            out.append(rng.standard_normal(shape).astype(dt))
    return out


def _reference(a, b, trans_b):
    if trans_b:
        b = np.swapaxes(b, -1, -2)
    if a.dtype in (np.int8, np.uint8):
        return a.astype(np.int64) @ b.astype(np.int64)
    return a.astype(np.float32) @ b.astype(np.float32)


@pytest.mark.parametrize("name", CASES)
def test_auto_schedule_puts_them_on_mma_sync(name):
    make, trans_b = CASES[name]
    trace = str(tdsl.auto_schedule(make(), target="cuda").trace)
    dt = {"int8": "i8", "uint8": "u8", "bf16": "bf16"}.get(name.split("-")[0], "f16")
    acc = "i32" if dt in ("i8", "u8") else "f32"
    want = [f"mma_ldmatrix_{dt}_a", f"mma_ldmatrix_{dt}_b" + ("_trans" if trans_b else ""),
            f"mma_{dt}{dt}{acc}" + ("_trans" if trans_b else ""), f"mma_fill_16x16_{acc}",
            f"mma_store_16x16_{acc}_global_", "tdsl.swizzle", "software_pipeline_async_stages"]
    if "batched" in name:
        want.append("blockIdx.z")
    for text in want:
        assert text in trace, text


@pytest.mark.parametrize("name", CASES)
def test_emulated_results_banks_and_sectors(name):
    make, trans_b = CASES[name]
    func = make()
    a, b = _operands(func, np.random.default_rng(0))
    kernel = tdsl.build(tdsl.auto_schedule(func, target="cuda"), target="cuda", emulate=True, thread_orders=1)
    got, want = kernel(a, b), _reference(a, b, trans_b)
    if a.dtype in (np.int8, np.uint8):
        np.testing.assert_array_equal(got, want)      # int32 accumulation is exact
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    shared = {c.buffer: c for c in kernel.stats.shared}
    assert set(shared) == {"A_shared", "B_shared"}
    for c in shared.values():
        assert c.instructions > 0 and c.wavefronts == c.phases and c.worst == 1, c
    sectors = {g.buffer: g for g in kernel.stats.global_}
    assert set(sectors) == {"A", "B", "C"}
    for g in sectors.values():
        assert g.coalesced and g.sectors == g.ideal, g


@pytest.mark.parametrize("name", CASES)
def test_sass_for_sm_80(name):
    pytest.importorskip("cuda.bindings")
    if cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    make, trans_b = CASES[name]
    kernel = tdsl.build(tdsl.auto_schedule(make(), target="cuda"), target="cuda", arch="sm_80")
    ops = opcodes(kernel.cubin)
    mma = {"int8": "IMMA.16832.S8.S8", "uint8": "IMMA.16832.U8.U8", "bf16": "HMMA.16816.F32.BF16"}.get(name.split("-")[0], "HMMA.16816.F32")
    assert ops[mma] > 0, ops
    assert ops["LDSM.16.M88.4"] > 0 and ops["LDGSTS.E.BYPASS.128"] > 0, ops
    assert (ops["LDSM.16.MT88.4"] > 0) == (not trans_b)    # .trans only for a k-major B
    assert not [o for o in ops if o.startswith(("LDL", "STL"))]
    (usage,) = kernel.stats.resources.values()
    assert usage["registers"] <= 255 and usage["local"] == 0 and usage["stack"] == 0


def test_int8_with_b_k_major_is_left_to_the_other_rules():
    # ldmatrix cannot transpose 8-bit elements: an int8 B indexed [k, j] is not put on mma.sync
    sch = tdsl.auto_schedule(gemm_nn(64, 64, 64, "int8", "int32"), target="cuda")
    assert "mma_" not in str(sch.trace)


def store_tile(pitch):
    """A warp zeroes a 16 x 16 accumulator tile and stores it into C[:, :16] (rows of `pitch` floats)."""
    @T.prim_func
    def f(C: T.Buffer((16, pitch), "float32")):
        Acc = T.alloc_buffer((16, 16), "float32", scope="m16n8k16.accumulator")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for i, j in T.grid(16, 16):
                with T.block("fill"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    Acc[vi, vj] = T.float32(0)
            for i, j in T.grid(16, 16):
                with T.block("store"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = Acc[vi, vj]

    from tdsl.intrinsics import cuda_mma as mma

    sch = tdsl.Schedule(f)
    sch.tensorize(sch.get_loops(sch.get_block("fill"))[-2], mma.fill_name("f32"))
    sch.tensorize(sch.get_loops(sch.get_block("store"))[-2], mma.store_name("f32", "global"))
    return sch


@pytest.mark.parametrize("pitch", [16, 17, 18])
def test_epilogue_stores_pairs_where_aligned_and_single_elements_elsewhere(pitch):
    # rows of 17 floats (68 bytes): an 8-byte store to an odd row would fault on the GPU, and the
    # emulator refuses it; mma_store goes out one element at a time there, two at a time elsewhere
    kernel = tdsl.build(store_tile(pitch), target="cuda", emulate=True, thread_orders=1)
    c = np.full((16, pitch), 7, np.float32)
    kernel(c)
    assert (c[:, :16] == 0).all() and (c[:, 16:] == 7).all()


def test_sass_epilogue_has_8_byte_stores():
    pytest.importorskip("cuda.bindings")
    if cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    make, _ = CASES["f16-batched"]
    ops = opcodes(tdsl.build(tdsl.auto_schedule(make(), target="cuda"), target="cuda", arch="sm_80").cubin)
    assert ops["STG.E.64"] > 0, ops
