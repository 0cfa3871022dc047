"""Bit operations on CUDA: the generated C++ compiles with NVRTC for sm_80 and, run under the
emulator, gives the interpreter's numbers (narrow types, signed and unsigned shifts, amounts
past the bit width taken modulo it, the int4 decode of TVM's tensorize test)."""
import shutil

import numpy as np
import pytest
from corpus import decode_int4, int4_reference

import tdsl
from tdsl.backends.cuda import cuda_source

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler")

DTYPES = ("int8", "uint8", "int16", "int32", "uint32", "int64")


def kitchen(dtype: str):
    return tdsl.parse(f'''
@T.prim_func
def bits(A: T.Buffer((64,), "{dtype}"), S: T.Buffer((64,), "{dtype}"), B: T.Buffer((64,), "{dtype}"),
         L: T.Buffer((64,), "{dtype}"), R: T.Buffer((64,), "{dtype}"), C: T.Buffer((64,), "int32")):
    for i in range(64):
        with T.block("B"):
            vi = T.axis.spatial(64, i)
            B[vi] = (A[vi] & S[vi]) | ~A[vi] ^ (A[vi] >> T.{dtype}(3))
            L[vi] = A[vi] << S[vi]
            R[vi] = A[vi] >> S[vi]
            C[vi] = T.Select((A[vi] > S[vi]) ^ (S[vi] == T.{dtype}(1)) | (A[vi] & T.{dtype}(1) == T.{dtype}(0)), 1, 0)
''')


def bind(func, block="B"):
    sch = tdsl.Schedule(func)
    loops = sch.get_loops(sch.get_block(block))
    bx, tx = sch.split(sch.fuse(*loops) if len(loops) > 1 else loops[0], factors=[None, 32])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch


def inputs(dtype: str, rng):
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, 64, endpoint=True, dtype=dtype)
    a[:3] = [info.min, info.max, 0]
    bits = np.dtype(dtype).itemsize * 8
    s = (np.arange(64) % (bits + 4)).astype(dtype)
    if info.min < 0:
        s[:2] = [-1, -bits]
    return a, s


@needs_cxx
@pytest.mark.parametrize("dtype", DTYPES)
def test_emulated_cuda_matches_the_interpreter(dtype, rng):
    func = kitchen(dtype)
    a, s = inputs(dtype, rng)
    want = tdsl.interpret(func, a, s)
    got = tdsl.build(bind(func), target="cuda", emulate=True)(a, s)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_generated_source_spells_the_rules():
    src = cuda_source(bind(kitchen("int8")))
    assert "(unsigned int)(A[" in src                 # << computed unsigned: no signed overflow
    assert "& 7)" in src                              # the amount modulo the bit width
    assert ">> (signed char)3" in src                 # a constant amount in range: no mask


@pytest.mark.parametrize("dtype", ("int8", "uint32", "int64"))
def test_nvrtc_compiles_for_sm_80(dtype):
    pytest.importorskip("cuda.bindings.nvrtc")
    kernel = tdsl.build(bind(kitchen(dtype)), target="cuda", arch="sm_80")
    assert kernel.cubin[:4] == b"\x7fELF"


@needs_cxx
def test_int4_decode(rng):
    packed = rng.integers(-2**31, 2**31 - 1, (4, 2), endpoint=True, dtype="int32")
    want = int4_reference(packed)
    np.testing.assert_array_equal(tdsl.interpret(decode_int4, packed), want)
    sch = bind(decode_int4, "decode")
    assert "& 31" not in cuda_source(sch)     # v1 % 8 * 4 is provably in [0, 32): no mask
    np.testing.assert_array_equal(tdsl.build(sch, target="cuda", emulate=True)(packed), want)
    if pytest.importorskip("cuda.bindings.nvrtc"):
        assert tdsl.build(sch, target="cuda", arch="sm_80").cubin[:4] == b"\x7fELF"


@needs_cxx
def test_vectorized_lanes(rng):
    func = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((256,), "int32"), S: T.Buffer((256,), "int32"), B: T.Buffer((256,), "int32")):
    for i in range(256):
        with T.block("B"):
            vi = T.axis.spatial(256, i)
            B[vi] = (A[vi] >> S[vi]) ^ ~(A[vi] << 3) & (A[vi] | 7)
''')
    sch = tdsl.Schedule(func)
    bx, tx, v = sch.split(sch.get_loops(sch.get_block("B"))[0], factors=[None, 32, 4])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(v)
    assert "int4 vst" in cuda_source(sch)
    a = rng.integers(-2**31, 2**31 - 1, 256, endpoint=True, dtype="int32")
    s = rng.integers(-40, 40, 256, dtype="int32")
    np.testing.assert_array_equal(tdsl.build(sch, target="cuda", emulate=True)(a, s), tdsl.interpret(func, a, s))
