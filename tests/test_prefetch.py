"""T.address_of and llvm.prefetch: script round trip, CPU build, interpreter, bounds checks, and
the prefetching x86 fp32 micro-kernel."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import tdsl
from tdsl import BoundsError, ScriptError, T
from tdsl.dtypes import DataType, handle, void
from tdsl.intrinsics import x86

SCALE = '''
@T.prim_func
def scale(A: T.Buffer((64, 32), "float32"), B: T.Buffer((64, 32), "float32")):
    for i, j in T.grid(64, 32):
        with T.block("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.evaluate(T.call_extern("void", "llvm.prefetch.p0", T.address_of(A[vi, vj]), 0, 3, 1))
            B[vi, vj] = A[vi, vj] * T.float32(2)
'''

# The prefetched / addressed row comes from `rows`, so only the run-time check can see it.
GATHER = '''
@T.prim_func
def gather(A: T.Buffer((8, 16), "float32"), rows: T.Buffer((4,), "int32"), B: T.Buffer((4, 16), "float32")):
    for i, j in T.grid(4, 16):
        with T.block("g"):
            vi, vj = T.axis.remap("SS", [i, j])
            {stmt}
            B[vi, vj] = A[vi % 8, vj]
'''
PREFETCH_ROW = 'T.evaluate(T.call_extern("void", "llvm.prefetch.p0", T.address_of(A[rows[vi], vj]), 0, 3, 1))'
ADDRESS_ROW = 'T.evaluate(T.address_of(A[rows[vi], vj]))'


@functools.cache
def _features() -> frozenset:
    from tdsl.target import cpu_features

    return cpu_features("cpu")   # what a build for "cpu" may use (the host's, or $TDSL_CPU_TARGET's)


def _prefetch_call(func: tdsl.PrimFunc):
    from tdsl.ir import Call, collect

    return [c for c in collect(func.body, Call) if c.op == "llvm.prefetch.p0"]


def test_void_dtype_prints_and_parses():
    assert DataType.parse("void") == void and str(void) == "void" and void != handle


def test_address_of_round_trips_through_the_printer():
    func = tdsl.parse(SCALE)
    (call,) = _prefetch_call(func)
    assert call.dtype == void and call.args[0].op == "address_of" and call.args[0].dtype == handle
    text = func.script()
    assert 'T.call_extern("void", "llvm.prefetch.p0", T.address_of(A[vi, vj]), 0, 3, 1)' in text
    assert tdsl.structural_diff(tdsl.parse(text), func) is None


@pytest.mark.parametrize("arg,words", [("A", "one buffer element"), ("1", "one buffer element"),
                                       ("A[vi, vj], A[vi, vj]", "takes one buffer element")])
def test_address_of_refuses_what_is_not_one_element(arg, words):
    with pytest.raises(ScriptError, match=words):
        tdsl.parse(SCALE.replace("T.address_of(A[vi, vj])", f"T.address_of({arg})"))


def test_prefetch_builds_and_computes_like_numpy(rng):
    func = tdsl.parse(SCALE)
    a = rng.standard_normal((64, 32)).astype("float32")
    kernel = tdsl.build(func)
    np.testing.assert_array_equal(kernel(a), a * 2)
    assert "prefetcht0" in kernel.asm
    np.testing.assert_array_equal(tdsl.interpret(func, a), a * 2)   # a prefetch is a no-op there


def test_prefetch_past_the_end_passes_the_run_time_bounds_check(rng):
    func = tdsl.parse(GATHER.format(stmt=PREFETCH_ROW))
    a = rng.standard_normal((8, 16)).astype("float32")
    rows = np.array([0, 7, 8, 1 << 20], np.int32)   # the last two lie past A's end
    np.testing.assert_array_equal(tdsl.build(func, bounds_check=True)(a, rows), a[:4])
    np.testing.assert_array_equal(tdsl.interpret(func, a, rows), a[:4])


def test_address_of_is_bounds_checked_like_a_load(rng):
    kernel = tdsl.build(tdsl.parse(GATHER.format(stmt=ADDRESS_ROW)), bounds_check=True)
    a = rng.standard_normal((8, 16)).astype("float32")
    np.testing.assert_array_equal(kernel(a, np.array([0, 7, 2, 1], np.int32)), a[:4])
    with pytest.raises(BoundsError, match="'A'"):
        kernel(a, np.array([0, 7, 8, 1], np.int32))


def _tiled_gemm(m: int, n: int, k: int, mr: int, nr: int, kc: int):
    f = tdsl.parse(f'''
@T.prim_func
def gemm(A: T.Buffer(({m}, {k}), "float32"), B: T.Buffer(({k}, {n}), "float32"),
         C: T.Buffer(({m}, {n}), "float32")):
    for i, j, kk in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
''')
    sch = tdsl.Schedule(f)
    i, j, kk = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, factors=[None, mr])
    j0, j1 = sch.split(j, factors=[None, nr])
    k0, k1 = sch.split(kk, factors=[None, kc])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    sch.decompose_reduction(sch.get_block("C"), k0)
    return sch, i1


def _runs_here(isa: str) -> bool:
    return all(feat in _features() for feat in x86.ISAS[isa][1])


def _on_host(isa: str, *tile: int):
    why = f"the CPU that target 'cpu' builds for lacks {isa}"
    return pytest.param(isa, *tile, marks=pytest.mark.skipif(not _runs_here(isa), reason=why))


@pytest.mark.parametrize("isa,mr,nr,kc", [_on_host("avx2", 4, 16, 24), _on_host("avx2", 2, 40, 26),
                                          _on_host("avx512", 8, 32, 20)])
def test_prefetching_microkernel_tensorizes_and_matches_numpy(rng, isa, mr, nr, kc):
    name = x86.register_fp32(isa, mr, nr, kc, prefetch=True)
    assert name.endswith("_pf") and name != x86.register_fp32(isa, mr, nr, kc)
    m, n, k = 3 * mr, 2 * nr, 4 * kc
    sch, i1 = _tiled_gemm(m, n, k, mr, nr, kc)
    sch.tensorize(i1, name)
    assert "llvm.prefetch.p0" in tdsl.lower(sch, target="cpu").script()
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    kernel = tdsl.build(sch, target="cpu")
    assert "prefetcht0" in kernel.asm
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tdsl.interpret(sch.func, a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_prefetching_microkernel_is_made_on_first_use_by_name():
    from tdsl import TensorIntrin

    # one k loop: each step prefetches A's line and B's row (NR = 8: one line) 16 steps ahead
    impl = TensorIntrin.get("x86.avx2.fp32_3x8x24_pf").impl.script()
    assert impl.count("llvm.prefetch.p0") == 2 and "A[0, k + 16]" in impl and "B[k + 16, 0]" in impl
    assert "llvm.prefetch" not in TensorIntrin.get("x86.avx2.fp32_3x8x24").impl.script()


@pytest.mark.parametrize("isa,mr,nr,kc", [_on_host("avx2", 4, 16, 8), _on_host("avx2", 3, 40, 20),
                                          _on_host("avx512", 8, 32, 4)])
def test_prefetching_microkernel_prefetches_past_its_operands(rng, isa, mr, nr, kc):
    """One tile is the whole GEMM, so the last 16 k steps prefetch past the end of A and B (KC
    < 16: every step does): a prefetch never faults, and neither bounds check refuses it."""
    from tdsl.ir import For, collect

    name = x86.register_fp32(isa, mr, nr, kc, prefetch=True)
    serial = [s for s in collect(tdsl.TensorIntrin.get(name).impl.body, For) if s.kind == "serial"]
    assert len(serial) == 1 and serial[0].extent.value == kc   # no tail loop without prefetches
    assert len(_prefetch_call(serial[0])) == 1 + -(-nr // 16)   # A's line and each line of B's row
    sch, i1 = _tiled_gemm(mr, nr, kc, mr, nr, kc)
    sch.tensorize(i1, name)
    a = rng.standard_normal((mr, kc)).astype("float32")
    b = rng.standard_normal((kc, nr)).astype("float32")
    for bounds_check in (False, True):
        kernel = tdsl.build(sch, target="cpu", bounds_check=bounds_check)
        np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tdsl.interpret(sch.func, a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_interpreter_names_address_of_outside_a_prefetch(rng):
    from tdsl.interpreter import InterpretError

    with pytest.raises(InterpretError, match="T.address_of"):
        tdsl.interpret(tdsl.parse(GATHER.format(stmt=ADDRESS_ROW)), rng.standard_normal((8, 16)).astype("float32"),
                       np.zeros(4, np.int32))


def test_prefetch_past_the_end_is_not_a_build_time_bounds_error():
    # a prefetch never faults: naming an element past the buffer is fine (the loads are checked)
    @T.prim_func
    def ahead(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        for i in range(64):
            with T.block("B"):
                vi = T.axis.spatial(64, i)
                T.evaluate(T.call_extern("void", "llvm.prefetch.p0", T.address_of(A[vi + 16]), 0, 3, 1))
                B[vi] = A[vi] * T.float32(2)

    a = np.arange(64, dtype=np.float32)
    np.testing.assert_array_equal(tdsl.build(ahead)(a), a * 2)
