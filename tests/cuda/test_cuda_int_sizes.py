"""Issue 22's int32 classes on the CUDA path: int32 index arithmetic wraps where tdsl's
semantics say it does (before //, %, min, max and narrowing casts) also when the buffer needs
64-bit addressing; buffers of 2**31 elements and more are addressed in `long long`; launch
dimensions past CUDA's limits and local buffers past 512 KiB per thread are refused clearly."""
import shutil

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda import cuda_source

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler")


def _bind_1d(func, block="B"):
    sch = tdsl.Schedule(func)
    bx, tx = sch.split(sch.get_loops(sch.get_block(block))[0], factors=[None, 32])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch


@T.prim_func
def wrap_mod(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.spatial(n, i)
            B[vi] = A[(vi + 2147483647) % 10] + A[(vi * 3 + 2147483600) % 7]


@T.prim_func
def narrowing(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.spatial(n, i)
            B[vi] = A[T.cast(T.cast(vi, "int64") + T.int64(4294967296), "int32")]


@needs_cxx
@pytest.mark.parametrize("func", [wrap_mod, narrowing], ids=["mod", "narrowing_cast"])
def test_int32_index_arithmetic_wraps_as_the_interpreter_does(func):
    # a symbolic buffer is addressed in long long; what int32 wraps must still wrap
    a = np.arange(64, dtype="float32")
    got = tdsl.build(_bind_1d(func), target="cuda", emulate=True)(a)
    np.testing.assert_array_equal(got, tdsl.interpret(func, a))


BIG = """
@T.prim_func
def big(A: T.Buffer(({rows}, {cols}), "int8"), B: T.Buffer(({rows}, {cols}), "int8")):
    for i, j in T.grid({rows}, {cols}):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj]
"""


def _big(rows, cols, row_axis):
    sch = tdsl.Schedule(tdsl.parse(BIG.format(rows=rows, cols=cols)))
    i, j = sch.get_loops(sch.get_block("B"))
    jo, ji = sch.split(j, factors=[None, 256])
    sch.bind(i, f"blockIdx.{row_axis}")
    sch.bind(jo, f"blockIdx.{'x' if row_axis == 'y' else 'y'}")
    sch.bind(ji, "threadIdx.x")
    return sch


def test_buffers_of_2_31_elements_are_addressed_in_64_bits():
    with pytest.raises(tdsl.TargetError, match="2147483648 elements, more than int32 indices address"):
        cuda_source(_big(65536, 32768, "x"))
    with pytest.raises(tdsl.TargetError, match="blockIdx.y has extent 65536, more than the CUDA limit 65535"):
        cuda_source(_big("T.int64(65536)", "T.int64(32768)", "y"))
    src = cuda_source(_big("T.int64(65536)", "T.int64(32768)", "x"))
    body = [ln for ln in src.splitlines() if "B[" in ln]
    assert body == ["  B[i * 32768LL + j_0 * 256LL + j_1] = A[i * 32768LL + j_0 * 256LL + j_1];"], src
    assert "const long long i = blockIdx.x;" in src


@needs_cxx
def test_symbolic_grid_past_the_cuda_limit_is_refused_at_the_call():
    @T.prim_func
    def rows(A: T.Buffer(("n", 32), "float32"), B: T.Buffer(("n", 32), "float32")):
        for i, j in T.grid(n, 32):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj]

    sch = tdsl.Schedule(rows)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.y")
    sch.bind(j, "threadIdx.x")
    kernel = tdsl.build(sch, target="cuda", emulate=True)
    a = np.ones((4, 32), "float32")
    np.testing.assert_array_equal(kernel(a), a)
    with pytest.raises(tdsl.TargetError, match="blockIdx.y extent 65536 exceeds the CUDA limit 65535"):
        kernel(np.ones((65536, 32), "float32"))


def test_local_buffer_past_512_kib_per_thread_is_refused():
    @T.prim_func
    def local_copy(A: T.Buffer((32, 140000), "float32"), B: T.Buffer((32,), "float32")):
        L = T.alloc_buffer((32, 140000), "float32", scope="local")
        for i in T.thread_binding(32, thread="threadIdx.x"):
            for j in range(140000):
                with T.block("L"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    L[vi, vj] = A[vi, vj]
            for j in range(140000):
                with T.block("B"):
                    vi, vj = T.axis.remap("SR", [i, j])
                    with T.init():
                        B[vi] = T.float32(0)
                    B[vi] = B[vi] + L[vi, vj]

    with pytest.raises(tdsl.TargetError, match=r"'L' \(scope local\).*140000 elements \(560000 bytes\) per thread"):
        cuda_source(local_copy)


@T.prim_func
def scalar_dim(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32"), n: T.int32):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.spatial(n, i)
            B[vi] = A[vi] + T.float32(1)


@needs_cxx
def test_a_scalar_naming_a_dimension_is_checked_against_the_arrays():
    # on a GPU n = 40 with 5-element arrays would write past B (the emulator only catches it
    # as an out-of-bounds access); the call refuses it first, as the CPU kernel does
    kernel = tdsl.build(_bind_1d(scalar_dim), target="cuda", emulate=True)
    a = np.ones(5, "float32")
    np.testing.assert_array_equal(kernel(a, n=5), a + 1)
    for n in (40, 10**8, 4, -1):
        with pytest.raises(tdsl.ArgumentError, match=f"dimension 0 is 5 but symbolic dimension 'n' is already {n}"):
            kernel(a, np.zeros(5, "float32"), n)
