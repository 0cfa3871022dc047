"""The LLVM pipelines (jit.optimize), the choice per kernel, and the optimized IR made on demand.

* compile.pipeline_for: register tiles -> jit.SIMPLIFY (O1's function simplification pipeline,
  one function at a time), loops vectorized wide -> O3 without unrolling, the rest -> O3.
* A register-tiled kernel equals numpy with jit.SIMPLIFY and with the former O1 pipeline;
  SIMPLIFY runs per function (the parallel loop's body is not inlined into its wrapper).
* Kernel.optimized_ir is made again from the source when asked for: the IR after the kernel's
  own pipeline, the same after a disk-cache hit as right after the build.
* An unknown pipeline name is refused; a disk entry without a known pipeline is rebuilt.
"""
import re

import numpy as np
import pytest
from test_build_speed_paths import vector_scale

import tdsl
from bench.schedules import gemm_schedule, layernorm_schedule
from tdsl import Kernel
from tdsl.backends import cache
from tdsl.backends.llvm import compile as llvm_compile
from tdsl.backends.llvm import jit
from tdsl.lower import lower

# a tile of five 8-lane accumulators over a serial loop: register-tiled, no AVX2 needed
ROWSUM = '''
@T.prim_func
def rowsum(A: T.Buffer((48, 40), "float32"), S: T.Buffer((40,), "float32")):
    acc = T.alloc_buffer((40,), "float32", scope="local")
    for v in T.unroll(5):
        acc[T.Ramp(v * 8, 1, 8)] = T.Broadcast(T.float32(0), 8)
    for k in range(48):
        for v in T.unroll(5):
            acc[T.Ramp(v * 8, 1, 8)] = acc[T.Ramp(v * 8, 1, 8)] + A[k, T.Ramp(v * 8, 1, 8)]
    for v in T.unroll(5):
        S[T.Ramp(v * 8, 1, 8)] = acc[T.Ramp(v * 8, 1, 8)]
'''

SCALAR = '''
@T.prim_func
def add(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i in range(64):
        with T.block("b"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi] + T.float32(1)
'''


def _build_with(func, pipeline: str) -> Kernel:
    """`func` compiled with `pipeline`, under a symbol of its own, outside the caches."""
    symbol = f"tdsl_test_{func.name}_{pipeline.replace('-', '_')}"
    compiled = llvm_compile._compile(lower(func, target="cpu"), func, symbol, False, None, pipeline)
    llvm_compile._bind_context(compiled)
    return Kernel(func, compiled, {"bounds_check": False})


def _defined(ir: str) -> set[str]:
    return set(re.findall(r'^define [^@]*@"?([\w.]+)"?\(', ir, re.MULTILINE))


def test_pipeline_choice():
    choice = lambda func: llvm_compile.pipeline_for(lower(func, target="cpu").body)
    assert choice(gemm_schedule(64).func) == jit.SIMPLIFY
    assert choice(tdsl.parse(ROWSUM)) == jit.SIMPLIFY
    assert choice(vector_scale(32).func) == jit.O3_NO_UNROLL
    assert choice(vector_scale(8).func) == jit.O3
    assert choice(layernorm_schedule(16, 256).func) == jit.O3
    assert choice(tdsl.parse(SCALAR)) == jit.O3


def test_pipeline_choice_reads_the_code_once(monkeypatch):
    """compile.profile visits each statement of the lowered code once and holds everything the
    choice and its notes read (the one-purpose functions agree with it)."""
    from tdsl.ir.tree import children, walk

    body = lower(gemm_schedule(64).func, target="cpu").body
    visits = []
    monkeypatch.setattr(llvm_compile, "children", lambda s: visits.append(s) or children(s))
    prof = llvm_compile.profile(body)
    monkeypatch.undo()
    assert len(visits) == sum(1 for _ in walk(body))
    assert prof.tiled == llvm_compile.register_tiled(body) is True
    assert (prof.scalar_elements, prof.vector_elements) == llvm_compile.element_stores(body)
    assert prof.vector_elements > 0
    assert list(prof.scalar_loops) == llvm_compile.scalar_loops(body)
    assert llvm_compile.pipeline_for(prof) == llvm_compile.pipeline_for(body) == jit.SIMPLIFY
    assert llvm_compile.pipeline_notes(prof, jit.SIMPLIFY) == llvm_compile.pipeline_notes(body, jit.SIMPLIFY)



@pytest.mark.parametrize("pipeline", [jit.SIMPLIFY, jit.O1_NO_UNROLL])
def test_register_tiled_gemm_equals_numpy(pipeline):
    func = gemm_schedule(64).func
    kernel = _build_with(func, pipeline)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 64, 64), dtype=np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    bodies = {name for name in _defined(kernel.optimized_ir) if name.endswith("_body")}
    # SIMPLIFY optimizes each function on its own; O1's inliner folds the body into its wrapper
    assert bool(bodies) == (pipeline == jit.SIMPLIFY)


def test_optimized_ir_follows_the_pipeline():
    func = tdsl.parse(ROWSUM)
    kernel = tdsl.build(func)
    assert kernel._compiled.pipeline == jit.SIMPLIFY
    a = np.random.default_rng(4).standard_normal((48, 40), dtype=np.float32)
    np.testing.assert_allclose(kernel(a), a.sum(axis=0), rtol=1e-5)
    assert "alloca" in kernel.source and "alloca" not in kernel.optimized_ir   # accumulators in registers
    assert kernel.optimized_ir == jit.optimized_ir(kernel.source, jit.SIMPLIFY, "rowsum")
    assert kernel.optimized_ir != jit.optimized_ir(kernel.source, jit.O3, "rowsum")
    assert re.search(r"vaddps\s", kernel.asm)


def test_optimized_ir_after_a_disk_hit_is_the_same():
    func = tdsl.parse(ROWSUM.replace("(48, 40)", "(56, 40)").replace("range(48)", "range(56)"))
    built = tdsl.build(func)
    cache.clear_memory()
    loaded = tdsl.build(func)
    assert loaded.from_cache and loaded._compiled is not built._compiled
    assert loaded._compiled.pipeline == built._compiled.pipeline == jit.SIMPLIFY
    assert loaded.optimized_ir == built.optimized_ir
    a = np.random.default_rng(5).standard_normal((56, 40), dtype=np.float32)
    np.testing.assert_allclose(loaded(a), a.sum(axis=0), rtol=1e-5)


def test_unknown_pipeline_is_refused():
    mod = jit.parse_and_verify("define void @f() {\n  ret void\n}\n", "a test function")
    with pytest.raises(ValueError, match="unknown LLVM pipeline 'O7'"):
        jit.optimize(mod, "O7")


@pytest.mark.parametrize("meta", [{"pipeline": "O7"}, {}], ids=["unknown", "missing"])
def test_disk_entry_without_a_known_pipeline_is_rebuilt(meta):
    entry = cache.DiskEntry(b"", {"info": {}, "source": "", **meta})
    assert llvm_compile._from_entry(entry) is None
