"""tdsl.build(): targets, options, schedules, GPU-bound functions on the CPU, a light import."""
import subprocess
import sys

import numpy as np
import pytest

import tdsl
from tdsl import TargetError

SRC = '''
@T.prim_func
def double(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for i in range(128):
        with T.block("b"):
            vi = T.axis.spatial(128, i)
            B[vi] = A[vi] * T.float32(2)
'''


def test_unknown_target_lists_the_known_ones():
    with pytest.raises(TargetError, match="known targets: 'cpu', 'cuda'"):
        tdsl.build(tdsl.parse(SRC), target="tpu")


def test_unknown_option_is_named():
    with pytest.raises(TargetError, match="'vectorise'.*bounds_check"):
        tdsl.build(tdsl.parse(SRC), vectorise=True)


def test_build_takes_a_schedule_and_rejects_other_objects(rng):
    sch = tdsl.Schedule(tdsl.parse(SRC))
    (i,) = sch.get_loops(sch.get_block("b"))
    sch.parallel(i)
    kernel = tdsl.build(sch)
    a = rng.standard_normal(128).astype(np.float32)
    np.testing.assert_array_equal(kernel(a), a * 2)
    with pytest.raises(TypeError, match="PrimFunc or a Schedule"):
        tdsl.build("double")


def test_gpu_bound_function_builds_for_cpu_with_sequential_semantics(rng):
    func = tdsl.parse('''
@T.prim_func
def bound(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            with T.block("b"):
                vi = T.axis.spatial(256, bx * 64 + tx)
                B[vi] = A[vi] + T.float32(1)
''')
    a = rng.standard_normal(256).astype(np.float32)
    np.testing.assert_array_equal(tdsl.build(func, target="cpu")(a), a + 1)


def test_cuda_target_goes_to_the_cuda_backend_or_says_it_is_missing():
    try:
        tdsl.build(tdsl.parse(SRC), target="cuda", arch="sm_90")
    except TargetError as exc:
        assert "cuda" in str(exc).lower()


def test_import_tdsl_does_not_load_llvmlite():
    code = "import sys, tdsl; import tdsl.backends; print('llvmlite' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_kernel_repr_names_the_signature():
    text = repr(tdsl.build(tdsl.parse(SRC)))
    assert "double(" in text and "A: float32(128,)" in text
