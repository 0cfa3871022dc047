"""CUDA C++ generation: golden sources of the shipped kernels, and the details of the printer."""
import os
from pathlib import Path

import cuda_kernels as ck
import pytest

from tdsl import T
from tdsl.backends.cuda import cuda_source

GOLDEN = Path(__file__).parent / "golden"
KERNELS = {"elementwise": ck.elementwise, "elementwise_fp16": ck.elementwise_fp16, "softmax": ck.softmax,
           "matmul": ck.matmul}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_golden_source(name):
    text = cuda_source(KERNELS[name]()[0])
    path = GOLDEN / f"{name}.cu"
    if os.environ.get("TDSL_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"CUDA source of {name} changed; rerun with TDSL_UPDATE_GOLDEN=1 if on purpose"


def test_kernel_signature_and_thread_indices():
    src = cuda_source(ck.matmul()[0])
    assert ('extern "C" __global__ void __launch_bounds__(64) mm_kernel(const float* __restrict__ A, '
            'const float* __restrict__ B, float* __restrict__ C)') in src
    for line in ("const int by = blockIdx.y;", "const int tx = threadIdx.x;", "__shared__ __align__(16) float A_sh[256];",
                 "float C_loc[16];"):
        assert line in src
    # the cooperative fetch loops bound to the same threadIdx became the thread index itself
    assert "ty2" not in src and "tx2" not in src


def test_vectorized_loop_uses_float4_and_symbolic_sizes_use_int64():
    src = cuda_source(ck.elementwise()[0])
    assert "const float4 vld1 = *(const float4*)(A + ((long long)bx * 1024LL + (long long)tx * 4LL));" in src
    assert "*(float4*)(B + ((long long)bx * 1024LL + (long long)tx * 4LL)) = vst2;" in src
    assert "int n" not in src   # n only sets the grid; the kernel does not need it


def test_constant_sizes_use_int32_indices():
    src = cuda_source(ck.matmul()[0])
    assert "long long" not in src


def test_unaligned_vector_access_is_written_lane_by_lane():
    @T.prim_func
    def shifted(A: T.Buffer((130,), "float32"), B: T.Buffer((128,), "float32")):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            for v in T.vectorized(4):
                with T.block("B"):
                    vi = T.axis.spatial(128, tx * 4 + v)
                    B[vi] = A[vi + 1]

    src = cuda_source(shifted)
    assert "float4 vld" not in src            # A + 4*tx + 1 is not 16-byte aligned
    assert "A[tx * 4 + 1]" in src and "A[tx * 4 + 4]" in src
    assert "*(float4*)(B + (tx * 4)) = vst" in src


def test_floor_division_helpers_only_where_signs_are_unknown():
    @T.prim_func
    def fd(A: T.Buffer((64,), "int32"), off: T.int32):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            with T.block("A"):
                vi = T.axis.spatial(64, tx)
                A[vi] = (vi - off) // 8 + (vi - off) % 8 + vi // 4 + vi % 4

    src = cuda_source(fd)
    assert "tdsl_floordiv(tx - off, 8)" in src and "tdsl_floormod(tx - off, 8)" in src
    assert "tx / 4" in src and "tx % 4" in src
    assert "template <typename T> __device__ __forceinline__ T tdsl_floordiv(T a, T b)" in src


def test_math_functions_float_and_double():
    @T.prim_func
    def math(A: T.Buffer((32,), "float32"), D: T.Buffer((32,), "float64"), B: T.Buffer((32,), "float32"),
             E: T.Buffer((32,), "float64")):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.block("B"):
                i = T.axis.spatial(32, tx)
                B[i] = (T.exp(A[i]) + T.log(A[i]) + T.sqrt(A[i]) + T.rsqrt(A[i]) + T.tanh(A[i]) + T.erf(A[i])
                        + T.abs(A[i]) + T.floor(A[i]) + T.ceil(A[i]) + T.pow(A[i], A[i]) + T.sigmoid(A[i]))
                E[i] = T.exp(D[i]) + T.rsqrt(D[i]) + T.erf(D[i]) + T.abs(D[i]) + T.pow(D[i], D[i])

    src = cuda_source(math)
    for fn in ("expf(", "logf(", "sqrtf(", "rsqrtf(", "tanhf(", "erff(", "fabsf(", "floorf(", "ceilf(", "powf(",
               "(1.0f / (1.0f + expf(-A[tx])))"):
        assert fn in src, fn
    for fn in ("exp(D[tx])", "rsqrt(D[tx])", "erf(D[tx])", "fabs(D[tx])", "pow(D[tx], D[tx])"):
        assert fn in src, fn


def test_if_then_else_is_lazy():
    @T.prim_func
    def guarded(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.block("B"):
                i = T.axis.spatial(32, tx)
                B[i] = T.if_then_else(i > 0, A[i - 1], T.float32(0))

    assert "B[tx] = tx > 0 ? A[tx - 1] : 0.0f;" in cuda_source(guarded)


def test_half_types_include_their_headers():
    src = cuda_source(ck.elementwise_fp16()[0])
    assert "#include <cuda_fp16.h>" in src and "#include <cuda_bf16.h>" in src
    assert "const half* __restrict__ A" in src and "const nv_bfloat16* __restrict__ W" in src
    assert "__float2half_rn(" in src and "__half2float(" in src and "__bfloat162float(" in src
    assert "#include" not in cuda_source(ck.matmul()[0])


def test_special_float_constants_and_names():
    @T.prim_func
    def consts(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.block("B"):
                i = T.axis.spatial(32, tx)
                B[i] = T.max(A[i], T.float32("-inf")) + T.min(A[i], T.float32("inf"))

    src = cuda_source(consts)
    assert "tdsl_fmax(A[tx], -__int_as_float(0x7f800000))" in src
    assert "tdsl_fmin(A[tx], __int_as_float(0x7f800000))" in src


def test_min_max_propagate_nan_as_numpy_does():
    # fmaxf/fminf return the other operand when one is NaN; T.max/T.min give NaN (numpy, CPU)
    @T.prim_func
    def mm(A: T.Buffer((32,), "float32"), H: T.Buffer((32,), "float16"), B: T.Buffer((32,), "float32"),
           C: T.Buffer((32,), "float16")):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.block("B"):
                i = T.axis.spatial(32, tx)
                B[i] = T.max(A[i], T.float32(0))
                C[i] = T.min(H[i], T.float16(0))

    src = cuda_source(mm)
    assert "(a != a || b != b) ? a + b : fmax(a, b)" in src and "tdsl_fmax(A[tx], 0.0f)" in src
    assert "__hmin_nan(" in src and "fmaxf(" not in src


def test_without_cuda_python_source_works_and_build_says_what_to_install():
    import subprocess
    import sys

    code = ("import sys; sys.modules['cuda'] = None\n"
            f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "import tdsl, cuda_kernels as ck\n"
            "from tdsl.backends.cuda import cuda_source\n"
            "f = ck.matmul()[0]\n"
            "assert '__syncthreads' in cuda_source(f)\n"
            "try:\n"
            "    tdsl.build(f, target='cuda', arch='sm_90')\n"
            "except tdsl.TargetError as e:\n"
            "    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert "needs cuda-python, which is not installed" in r.stdout and "pip install" in r.stdout
