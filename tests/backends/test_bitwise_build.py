"""Bit operations on the CPU: the LLVM build computes what the interpreter computes, scalar and
vectorized, shift amounts past the bit width included (taken modulo it), and schedules
(compute_inline, split, vectorize) keep them."""
import numpy as np
import pytest
from corpus import decode_int4, int4_reference

import tdsl
from tdsl import T

OPS = ("&", "|", "^", "<<", ">>", "~")
DTYPES = ("int8", "uint8", "int16", "int32", "uint32", "int64")


def elementwise(op: str, dtype: str):
    value = "~A[vi] ^ S[vi]" if op == "~" else f"A[vi] {op} S[vi]"
    return tdsl.parse(f'''
@T.prim_func
def f(A: T.Buffer((128,), "{dtype}"), S: T.Buffer((128,), "{dtype}"), B: T.Buffer((128,), "{dtype}")):
    for i in range(128):
        with T.block("B"):
            vi = T.axis.spatial(128, i)
            B[vi] = {value}
''')


def inputs(dtype: str, rng):
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, 128, endpoint=True, dtype=dtype)
    a[:4] = [info.min, info.max, 0, info.min + 1]
    bits = np.dtype(dtype).itemsize * 8
    s = (np.arange(128) % (bits + 8)).astype(dtype)     # amounts in [0, bits + 8): some past the width
    if info.min < 0:
        s[:3] = [-1, -bits, info.min]
    return a, s


def vectorized(func, lanes=8):
    sch = tdsl.Schedule(func)
    _, inner = sch.split(sch.get_loops(sch.get_block("B"))[0], factors=[None, lanes])
    sch.vectorize(inner)
    return sch


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_llvm_matches_the_interpreter(op, dtype, rng):
    func = elementwise(op, dtype)
    a, s = inputs(dtype, rng)
    want = tdsl.interpret(func, a, s)
    np.testing.assert_array_equal(tdsl.build(func)(a, s), want)
    np.testing.assert_array_equal(tdsl.build(vectorized(func))(a, s), want)


def test_int4_decode_of_tvm_tensorize_test(rng):
    packed = rng.integers(-2**31, 2**31 - 1, (4, 2), endpoint=True, dtype="int32")
    packed[0, 0] = np.int32(-0x789ABCDF)    # every nibble value somewhere
    want = int4_reference(packed)
    np.testing.assert_array_equal(tdsl.interpret(decode_int4, packed), want)
    np.testing.assert_array_equal(tdsl.build(decode_int4)(packed), want)
    sch = tdsl.Schedule(decode_int4)
    _, j = sch.get_loops(sch.get_block("decode"))
    sch.vectorize(sch.split(j, factors=[None, 8])[1])
    np.testing.assert_array_equal(tdsl.build(sch)(packed), want)


@T.prim_func
def unpack_then_scale(P: T.Buffer((64,), "uint8"), C: T.Buffer((128,), "float32")):
    L = T.alloc_buffer((128,), "int32")
    for i in range(128):
        with T.block("unpack"):
            vi = T.axis.spatial(128, i)
            L[vi] = T.cast(P[vi >> 1] >> T.uint8(vi % 2 * 4) & T.uint8(15), "int32") ^ 8
    for i in range(128):
        with T.block("scale"):
            vi = T.axis.spatial(128, i)
            C[vi] = T.cast(L[vi] - 8, "float32") * T.float32(0.5)


def test_compute_inline_split_and_vectorize_keep_bit_operations(rng):
    packed = rng.integers(0, 255, 64, endpoint=True, dtype="uint8")
    want = tdsl.interpret(unpack_then_scale, packed)
    nib = np.stack([packed & 15, packed >> 4], axis=1).reshape(-1).astype("int32")
    np.testing.assert_array_equal(want, ((nib ^ 8) - 8).astype("float32") * 0.5)
    sch = tdsl.Schedule(unpack_then_scale)
    sch.compute_inline(sch.get_block("unpack"))
    text = sch.func.script()
    assert 'T.block("unpack")' not in text and ">> 1" in text, text
    _, inner = sch.split(sch.get_loops(sch.get_block("scale"))[0], factors=[None, 16])
    sch.vectorize(inner)
    np.testing.assert_array_equal(tdsl.interpret(sch, packed), want)
    with pytest.warns(tdsl.PerformanceWarning, match="the load from 'P' is not contiguous"):   # a gather
        kernel = tdsl.build(sch)
    np.testing.assert_array_equal(kernel(packed), want)


def test_bool_operands():
    func = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((16,), "int32"), B: T.Buffer((16,), "int32")):
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            B[vi] = T.Select((A[vi] > 3) & (A[vi] < 12) ^ (A[vi] % 2 == 0) | (A[vi] == 15), 1, 0)
''')
    a = np.arange(16, dtype="int32")
    want = (((a > 3) & (a < 12)) ^ (a % 2 == 0) | (a == 15)).astype("int32")
    np.testing.assert_array_equal(tdsl.interpret(func, a), want)
    np.testing.assert_array_equal(tdsl.build(func)(a), want)
