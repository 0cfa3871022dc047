"""Fixed costs cut from every CPU build keep meaning.

* The tuple entry, a raw function that only launches parallel loops and, under a pipeline
  without an inliner (jit.SIMPLIFY), the parallel loops' wrappers are compiled `noinline
  optnone` (nothing there for LLVM to speed up); the parallel loop bodies and a raw function
  with work of its own are still optimised.
  Kernels of each shape equal numpy, and errors raised inside a parallel loop still arrive.
* The cache key hashes the function once: structurally equal functions share it, a change in
  a parameter's shape or dtype (what the fast entry checks) changes it.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tdsl
from tdsl import BoundsError
from tdsl.backends.llvm import entry, jit
from tdsl.backends.llvm.compile import _key
from tdsl.lower import lower

# only parallel loops at the top: the raw function just launches them
PARALLEL_ONLY = '''
@T.prim_func
def axpy(A: T.Buffer((64, 32), "float32"), s: T.float32, B: T.Buffer((64, 32), "float32")):
    for i in T.parallel(64):
        for j in range(32):
            with T.block("b"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * s + T.float32(1)
'''

# a serial loop at the top besides the parallel one: the raw function runs it itself
SERIAL_AND_PARALLEL = '''
@T.prim_func
def two(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), C: T.Buffer((64,), "float32")):
    for i in range(64):
        with T.block("b"):
            vi = T.axis.spatial(64, i)
            B[vi] = A[vi] + T.float32(1)
    for i in T.parallel(64):
        with T.block("c"):
            vi = T.axis.spatial(64, i)
            C[vi] = A[vi] * T.float32(3)
'''

GATHER = '''
@T.prim_func
def gather(data: T.Buffer((10, 8), "float32"), index: T.Buffer((6,), "int32"), out: T.Buffer((6, 8), "float32")):
    for i in T.parallel(6):
        for j in range(8):
            with T.block("g"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, vj] = data[index[vi], vj]
'''


def _definitions(source: str) -> dict[str, str]:
    """Function name -> its `define` line."""
    out = {}
    for line in source.splitlines():
        m = re.match(r'define .*?@"([^"]+)"\(', line)
        if m:
            out[m.group(1)] = line
    return out


def _optnone(source: str) -> dict[str, bool]:
    return {name: "optnone" in line and "noinline" in line for name, line in _definitions(source).items()}


def test_launch_only_raw_function_is_optnone():
    k = tdsl.build(tdsl.parse(PARALLEL_ONLY))
    sym = k._compiled.meta["symbol"]
    assert k._compiled.pipeline != jit.SIMPLIFY   # an inliner: the wrapper may take in the body
    flags = _optnone(k.source)
    assert flags[sym] and f"{sym}_tuple" not in flags   # a scalar parameter: no tuple entry
    assert flags[f"{sym}_raw"] and not flags[f"{sym}_par0"]
    assert not flags[f"{sym}_par0_body"]   # the loop's work is optimised
    a = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32)
    np.testing.assert_allclose(k(a, 2.5), a * np.float32(2.5) + 1, rtol=1e-6)


def test_wrappers_are_optnone_without_an_inliner():
    from bench.schedules import gemm_schedule

    k = tdsl.build(gemm_schedule(64))
    sym = k._compiled.meta["symbol"]
    assert k._compiled.pipeline == jit.SIMPLIFY
    flags = _optnone(k.source)
    assert flags[f"{sym}_raw"] and flags[f"{sym}_tuple"]
    wrappers = [name for name in flags if re.fullmatch(re.escape(sym) + r"_par\d+", name)]
    assert wrappers and all(flags[w] for w in wrappers)
    assert not any(flags[w + "_body"] for w in wrappers)
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_tuple_entry_is_optnone():
    k = tdsl.build(tdsl.parse(SERIAL_AND_PARALLEL))
    sym = k._compiled.meta["symbol"]
    assert k._compiled.meta["tuple_symbol"] == f"{sym}_tuple"
    assert _optnone(k.source)[f"{sym}_tuple"]


def test_raw_function_with_a_serial_loop_is_optimised():
    k = tdsl.build(tdsl.parse(SERIAL_AND_PARALLEL))
    sym = k._compiled.meta["symbol"]
    flags = _optnone(k.source)
    assert not flags[f"{sym}_raw"] and f"{sym}_par0" in flags
    a = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    b, c = k(a)
    np.testing.assert_array_equal(b, a + 1)
    np.testing.assert_array_equal(c, a * 3)


@pytest.mark.parametrize(("text", "launches"), [(PARALLEL_ONLY, True), (SERIAL_AND_PARALLEL, False), (GATHER, True)])
def test_only_launches_sees_work_outside_parallel_loops(text, launches):
    assert entry._only_launches(lower(tdsl.parse(text)).body) is launches


def test_unrolled_top_loop_is_work():
    sch = tdsl.Schedule(tdsl.parse(SERIAL_AND_PARALLEL))
    sch.unroll(sch.get_loops(sch.get_block("b"))[0])
    lowered = lower(sch)
    assert not any(isinstance(s, tdsl.ir.For) and s.kind != "parallel" for s in lowered.body.seq)  # stores now
    assert not entry._only_launches(lowered.body)
    k = tdsl.build(sch)
    assert not _optnone(k.source)[k._compiled.meta["raw_symbol"]]
    a = np.random.default_rng(4).standard_normal(64).astype(np.float32)
    b, c = k(a)
    np.testing.assert_array_equal(b, a + 1)
    np.testing.assert_array_equal(c, a * 3)


def test_bounds_error_inside_a_parallel_loop_reaches_the_caller():
    kernel = tdsl.build(tdsl.parse(GATHER), bounds_check=True)
    assert _optnone(kernel.source)[kernel._compiled.meta["raw_symbol"]]
    data = np.random.default_rng(3).standard_normal((10, 8)).astype(np.float32)
    good = np.array([0, 9, 3, 3, 1, 2], np.int32)
    np.testing.assert_array_equal(kernel(data, good), data[good])
    bad = good.copy()
    bad[2] = 10
    with pytest.raises(BoundsError, match="'data'"):
        kernel(data, bad)
    np.testing.assert_array_equal(kernel(data, good), data[good])


def test_key_sees_parameters_and_options():
    opts = {"bounds_check": False}
    base = _key(tdsl.parse(PARALLEL_ONLY), opts)
    assert base == _key(tdsl.parse(PARALLEL_ONLY), opts)               # structurally equal
    assert base == _key(tdsl.parse(PARALLEL_ONLY.replace("axpy", "other")), opts)   # names do not count
    assert base != _key(tdsl.parse(PARALLEL_ONLY), {"bounds_check": True})
    wider = PARALLEL_ONLY.replace('B: T.Buffer((64, 32)', 'B: T.Buffer((64, 33)')
    assert base != _key(tdsl.parse(wider), opts)                        # a parameter's shape
    gather = _key(tdsl.parse(GATHER), opts)
    wide_index = GATHER.replace('index: T.Buffer((6,), "int32")', 'index: T.Buffer((6,), "int64")')
    assert gather != _key(tdsl.parse(wide_index), opts)                 # a parameter's dtype


def test_key_hashes_the_function_once(monkeypatch):
    from tdsl.backends.llvm import compile as llvm_compile

    hashed = []
    real = llvm_compile.structural_hash
    monkeypatch.setattr(llvm_compile, "structural_hash", lambda node: hashed.append(node) or real(node))
    func = tdsl.parse(GATHER)
    _key(func, {"bounds_check": False})
    assert hashed == [func]   # the parameters are part of the function's hash
