"""The CPU codegen emits each index sum, address and splat once per basic block (`_pure`,
`_splat`); the machine code is what it was when every use emitted its own copy.

The reference here switches the reuse off and compares the assembly of both (after the
kernel's LLVM pipeline) on the bench schedules and on corpus kernels, with and without bounds
checks; results against numpy are covered by the corpus and bench tests."""
import pathlib
import sys

import pytest
from corpus import CORPUS
from llvmlite import ir

import tdsl
from tdsl.backends.llvm import codegen, entry, jit, lltypes
from tdsl.backends.llvm import compile as cpu_compile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import schedules

_Emitter = codegen._Emitter


def _pure_every_time(self, op, a, c, elem=None):
    if op == "gep":
        return lltypes._gep(self.b, a, [c], elem)
    return getattr(self.b, op)(a, c, flags=self.nsw)


def _splat_every_time(self, v, lanes):
    vty = ir.VectorType(v.type, lanes)
    one = self.b.insert_element(ir.Constant(vty, None), v, ir.Constant(codegen.I32, 0))
    return self.b.shuffle_vector(one, ir.Constant(vty, None), ir.Constant(ir.VectorType(codegen.I32, lanes), None))


def _asm_and_ir(func, bounds_check: bool) -> tuple[str, str]:
    lowered = tdsl.lower(func)
    host = jit.host_info()
    text = entry.codegen(lowered, "tdsl_cse", api=func, bounds_check=bounds_check, triple=host.triple,
                           datalayout=jit.data_layout()).ir
    optimized = jit.optimized_ir(text, cpu_compile.pipeline_for(lowered.body), "test")
    return jit.emit_assembly(optimized), text


FUNCS = [("gemm", schedules.gemm_schedule(64).func), ("softmax", schedules.softmax_schedule(8, 64).func),
         ("layernorm", schedules.layernorm_schedule(8, 64).func),
         ("conv2d", schedules.conv2d_schedule(1, 16, 5, 16, 6, mr=2).func)]
FUNCS += [(c.name, c.func) for c in CORPUS if c.name in ("matmul", "conv2d_nchw", "gather_rows",
                                                          "predicated_split", "add_symbolic", "matmul_i8")]


@pytest.mark.parametrize("bounds_check", [False, True])
@pytest.mark.parametrize("name,func", FUNCS, ids=[n for n, _ in FUNCS])
def test_reuse_keeps_the_machine_code(name, func, bounds_check, monkeypatch):
    fast_asm, fast_ir = _asm_and_ir(func, bounds_check)
    monkeypatch.setattr(_Emitter, "_pure", _pure_every_time)
    monkeypatch.setattr(_Emitter, "_splat", _splat_every_time)
    slow_asm, slow_ir = _asm_and_ir(func, bounds_check)
    assert fast_asm == slow_asm
    assert fast_ir.count("\n") <= slow_ir.count("\n")


def test_gemm_index_sums_are_emitted_once_per_block(monkeypatch):
    _, fast_ir = _asm_and_ir(schedules.gemm_schedule(64).func, False)
    monkeypatch.setattr(_Emitter, "_pure", _pure_every_time)
    _, slow_ir = _asm_and_ir(schedules.gemm_schedule(64).func, False)
    assert fast_ir.count(" = mul nsw i64") < slow_ir.count(" = mul nsw i64") / 2


def test_unrolled_codegen_loop_rebinds_its_variable():
    """A loop the codegen unrolls itself binds its variable anew in the same block: the sums
    that use it must not be reused across its iterations."""
    import numpy as np

    from tdsl import T

    @T.prim_func
    def f(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        for i in T.serial(4):
            for j in T.unroll(8):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * T.float32(2)

    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_array_equal(tdsl.build(f)(a), a * 2)
