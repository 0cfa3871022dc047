"""Vectorized copies of elements narrower than 32 bits on CUDA: 16 bytes per access (8 halves,
16 int8) as one aligned transaction, in the source, the emulator and the sm_80 SASS."""
import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda import cuda_source
from tdsl.backends.cuda.stats import cuobjdump_path, opcodes


def flip_rows(dtype: str, lanes: int, n: int = 64):
    """Each of n threads copies its row of A into shared memory, `lanes` elements per vector
    access, then writes the mirrored row of the tile (+1) to B."""

    @T.prim_func
    def f(A: T.Buffer((n, n), dtype), B: T.Buffer((n, n), dtype)):
        S = T.alloc_buffer((n, n), dtype, scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(n, thread="threadIdx.x"):
                for r in range(n // lanes):
                    for v in T.vectorized(lanes):
                        with T.block("S"):
                            vi = T.axis.spatial(n, tx)
                            vj = T.axis.spatial(n, r * lanes + v)
                            S[vi, vj] = A[vi, vj]
                for r in range(n // lanes):
                    for v in T.vectorized(lanes):
                        with T.block("B"):
                            vi = T.axis.spatial(n, tx)
                            vj = T.axis.spatial(n, r * lanes + v)
                            B[vi, vj] = S[n - 1 - vi, vj] + T.cast(1, dtype)
    return f


CASES = [("float16", 8, "tdsl_vec<half, 8>"), ("bfloat16", 8, "tdsl_vec<nv_bfloat16, 8>"),
         ("int8", 16, "tdsl_vec<signed char, 16>"), ("float16", 4, "tdsl_vec<half, 4>"),
         ("int8", 4, "tdsl_vec<signed char, 4>")]


def _np(dtype):
    if dtype == "bfloat16":
        return pytest.importorskip("ml_dtypes").bfloat16
    return np.dtype(dtype)


@pytest.mark.parametrize("dtype,lanes,vec", CASES)
def test_narrow_vectors_move_as_one_access(dtype, lanes, vec):
    src = cuda_source(flip_rows(dtype, lanes))
    # loaded as the struct, stored as one integer vector of the same bytes (one STS/STG.128)
    raw = {16: "uint4", 8: "uint2", 4: "unsigned int"}[lanes * np.dtype(_np(dtype)).itemsize]
    assert f"*(const {vec}*)(A + " in src and f"*(const {vec}*)(S + " in src
    assert f"*({raw}*)(S + " in src and f"*({raw}*)(B + " in src


@pytest.mark.parametrize("dtype,lanes,vec", CASES[:3])
def test_emulated_copy_is_right_and_counts_only_global_buffers(dtype, lanes, vec):
    rng = np.random.default_rng(1)
    a = (rng.integers(-50, 50, (64, 64))).astype(_np(dtype))
    kernel = tdsl.build(flip_rows(dtype, lanes), target="cuda", emulate=True)
    b = np.zeros_like(a)
    kernel(a, b)
    np.testing.assert_array_equal(b, (a[::-1].astype(np.float32) + 1).astype(_np(dtype)))
    counted = {g.buffer: g for g in kernel.stats.global_}
    assert set(counted) == {"A", "B"}        # the shared tile's vector accesses are not global requests
    # each lane moves 16 bytes per request: 64 threads x 128 bytes / 16 bytes = 512 accesses, 16 requests
    assert counted["A"].requests == 64 * 64 * np.dtype(_np(dtype)).itemsize // 16 // 32


def test_unaligned_narrow_vectors_are_written_lane_by_lane():
    @T.prim_func
    def f(A: T.Buffer((66,), "float16"), B: T.Buffer((64,), "float16")):
        for tx in T.thread_binding(8, thread="threadIdx.x"):
            for v in T.vectorized(8):
                with T.block("B"):
                    vi = T.axis.spatial(64, tx * 8 + v)
                    B[vi] = A[vi + 1]
    src = cuda_source(f)
    assert "*(uint4*)(B + " in src and "tdsl_vec<half, 8>*)(A" not in src


@pytest.mark.parametrize("dtype,lanes,vec", CASES[:3])
def test_sass_has_128_bit_loads_and_stores(dtype, lanes, vec):
    pytest.importorskip("cuda.bindings")
    if cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    ops = opcodes(tdsl.build(flip_rows(dtype, lanes), target="cuda", arch="sm_80").cubin)
    wide = {o for o in ops if ".128" in o}
    assert {"STS.128", "LDS.128", "STG.E.128"} <= wide and any(o.startswith("LDG.E.128") for o in wide), ops
    assert not [o for o in ops if o.startswith(("LDL", "STL"))]
