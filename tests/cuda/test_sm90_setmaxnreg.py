"""T.ptx_setmaxnreg (setmaxnreg.inc / .dec, sm_90a) and the warp-specialized kernel's register
budgets: the builtin parses, prints back and does nothing in the interpreter; its counts are
checked (PTX ISA: multiples of 8 in [24, 256]); it builds for sm_90a only; the CUDA backend gives
each role its own code path after it (tdsl.backends.cuda.roles) and checks the budget against
the registers the launch bounds give; NVRTC's SASS of the pipeline has USETMAXREG, 168 registers
(384 threads) and no ptxas note that setmaxnreg was ignored."""
import shutil

import numpy as np
import pytest
from test_sm90_auto import gemm

import tdsl
from tdsl.errors import TargetError

needs_cxx = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                               reason="no host C++ compiler (the emulator needs one)")

KERNEL = '''
@T.prim_func
def k(A: T.Buffer((384,), "float32")):
    for ty in T.thread_binding(3, thread="threadIdx.y"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            if ty == 0:
                T.evaluate(T.ptx_setmaxnreg(False, {dec}))
            else:
                T.evaluate(T.ptx_setmaxnreg(True, {inc}))
            if ty >= 1:
                A[ty * 128 + tx] = A[ty * 128 + tx] + T.float32(1)
'''


def test_setmaxnreg_round_trips_and_does_nothing_in_the_interpreter():
    f = tdsl.parse(KERNEL.format(dec=40, inc=232))
    text = f.script()
    assert "T.ptx_setmaxnreg(False, 40)" in text and "T.ptx_setmaxnreg(True, 232)" in text
    assert tdsl.structural_diff(tdsl.parse(text), f) is None
    a = np.arange(384, dtype=np.float32)
    tdsl.interpret(f, a)
    np.testing.assert_array_equal(a, np.arange(384) + (np.arange(384) >= 128))


@pytest.mark.parametrize("call, words", [
    ("T.ptx_setmaxnreg(False, 20)", ["multiple of 8 in [24, 256]", "got 20"]),
    ("T.ptx_setmaxnreg(False, 44)", ["multiple of 8 in [24, 256]", "got 44"]),
    ("T.ptx_setmaxnreg(False, 264)", ["got 264"]),
    ("T.ptx_setmaxnreg(1, 40)", ["True (setmaxnreg.inc", "False (.dec"]),
    ("T.ptx_setmaxnreg(False)", ["T.ptx_setmaxnreg takes (inc, count)"]),
])
def test_setmaxnreg_refuses_bad_arguments(call, words):
    with pytest.raises(tdsl.ScriptError) as info:
        tdsl.parse(KERNEL.format(dec=40, inc=232).replace("T.ptx_setmaxnreg(False, 40)", call))
    for w in words:
        assert w in str(info.value), str(info.value)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_setmaxnreg_is_refused_outside_sm90a(arch):
    f = tdsl.parse(KERNEL.format(dec=40, inc=232))
    with pytest.raises(TargetError, match="setmaxnreg .register reallocation. needs the architecture-specific "
                                          f"target sm_90a, but the kernel is built for {arch}"):
        tdsl.build(f, target="cuda", arch=arch)


def test_each_role_gets_its_own_code_path():
    from tdsl.backends.cuda import cuda_source

    src = cuda_source(tdsl.parse(KERNEL.format(dec=40, inc=232)))
    body = src[src.index("__global__"):]
    dec, inc = body.index("tdsl_ptx_setmaxnreg_dec<40>();"), body.index("tdsl_ptx_setmaxnreg_inc<232>();")
    assert body.index("if (ty == 0) {") < dec < body.index("} else {") < inc
    assert "if (ty >= 1)" not in body[inc:]          # decided for the consumers' path: they all store
    assert "A[" not in body[dec:inc]                  # and the producer's path has no store


@pytest.mark.parametrize("dec, inc, words", [
    (40, 160, ["setmaxnreg.inc to 160 registers is below the 168 per thread", "384 threads"]),
    (176, 232, ["setmaxnreg.dec to 176 registers is above the 168"]),
    (56, 232, ["exceed the CTA's pool of 384 threads x 168 = 64512"]),
])
def test_the_build_refuses_budgets_the_launch_cannot_give(dec, inc, words):
    from tdsl.backends.cuda import cuda_source

    with pytest.raises(TargetError) as info:
        cuda_source(tdsl.parse(KERNEL.format(dec=dec, inc=inc)))
    for w in words + ["kernel 'k_kernel'"]:
        assert w in str(info.value), str(info.value)


@needs_cxx
def test_emulator_runs_the_split_kernel():
    f = tdsl.parse(KERNEL.format(dec=40, inc=232))
    kernel = tdsl.build(f, target="cuda", emulate=True)
    a = np.zeros(384, np.float32)
    kernel(a)
    np.testing.assert_array_equal(a, (np.arange(384) >= 128).astype(np.float32))


def test_pipeline_sass_has_usetmaxreg_and_the_launch_registers():
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda import nvrtc, stats

    if stats.cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    sch = tdsl.auto_schedule(gemm(256, 256, 256), target="cuda", arch="sm_90a")   # 128 x 128: 2 consumers
    kernel = tdsl.build(sch, target="cuda", arch="sm_90a")
    ops = stats.opcodes(kernel.cubin)
    assert any(o.startswith("USETMAXREG") for o in ops), sorted(ops)
    assert any(o.startswith("HGMMA") for o in ops) and not any(o.startswith(("LDL", "STL")) for o in ops)
    assert "__launch_bounds__(384)" in kernel.source
    usage = {n: u for n, u in kernel.stats.resources.items() if u["dynamic_shared"]}
    assert [u["registers"] for u in usage.values()] == [168], usage   # 65536 / 384, a multiple of 8
    log = nvrtc.compile_cuda(kernel.source, "sm_90a").log
    assert "C7507" not in log and "setmaxnreg' ignored" not in log, log   # ptxas honoured setmaxnreg
    assert "C7518" not in log, log                      # and did not serialize wgmma in a divergent path
