"""kernel.export of kernels whose TMA tensor maps the call path encodes (the sm_90a GEMMs of
auto_schedule): the exported C launcher calls cuTensorMapEncodeTiled itself. Without a GPU the
header is compiled with the host C compiler (-Wall -Werror) against cuda.h from the NVIDIA wheel
and linked with a recording stand-in for the driver; the arguments it encodes each map with
must equal those the Python call path passes for the same call (recorded by the fake
cuda.bindings driver), the 128 bytes must reach the map buffers the kernel is launched with, and
an encode failure / a misaligned tensor must come back as the header's error codes. Also: what
export still refuses (host steps) says what the step is."""
import ctypes
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tdsl

pytest.importorskip("cuda.bindings")
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
needs_cc = pytest.mark.skipif(CC is None, reason="no host C compiler")

GEMM = '''
@T.prim_func
def {name}(A: T.Buffer(({b}{M}, {K}), "float16"), B: T.Buffer(({b}{K}, {N}), "float16"),
           C: T.Buffer(({b}{M}, {N}), "float32")):
    for {loops} in T.grid({grid}):
        with T.block("C"):
            {vars} = T.axis.remap("{kinds}", [{loops}])
            with T.init():
                C[{vb}vi, vj] = T.float32(0)
            C[{vb}vi, vj] = C[{vb}vi, vj] + T.cast(A[{vb}vi, vk], "float32") * T.cast(B[{vb}vk, vj], "float32")
'''


def gemm(M, N, K, batch=0):
    """C[b?, i, j] = sum_k f32(A[b?, i, k]) f32(B[b?, k, j]), fp16 operands."""
    if batch:
        return tdsl.parse(GEMM.format(name="bgemm", b=f"{batch}, ", M=M, N=N, K=K, loops="b, i, j, k",
                                      grid=f"{batch}, {M}, {N}, {K}", vars="vb, vi, vj, vk", kinds="SSSR", vb="vb, "))
    return tdsl.parse(GEMM.format(name="gemm", b="", M=M, N=N, K=K, loops="i, j, k", grid=f"{M}, {N}, {K}",
                                  vars="vi, vj, vk", kinds="SSR", vb=""))


def hopper_kernel(batch=0):
    sch = tdsl.auto_schedule(gemm(256, 256, 128, batch), target="cuda", arch="sm_90a")
    kernel = tdsl.build(sch, target="cuda", arch="sm_90a")
    assert [b.spec.map for b in kernel._tensor_maps] == ["A_tmap", "B_tmap", "C_tmap"]   # (C: the TMA store)
    return kernel


# ---------------------------------------------------------------------------- the Python call path

@pytest.fixture
def fake(monkeypatch):
    import cuda.bindings
    from fake_cuda_driver import FakeDriver

    from tdsl.backends.cuda import runtime
    from tdsl.backends.cuda.nvrtc import nvrtc_version

    nvrtc_version()   # load cuda.bindings.nvrtc (which imports the real driver module) first
    drv = FakeDriver()
    monkeypatch.setattr(cuda.bindings, "driver", drv, raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", drv)
    for attr in ("info", "context", "device", "error"):
        monkeypatch.setattr(runtime._State, attr, None)
    monkeypatch.setattr(runtime._State, "local", __import__("threading").local())
    return drv


def python_encodes(fake, kernel) -> list[dict]:
    """What the Python call path passes to cuTensorMapEncodeTiled, the address as the name of
    the kernel parameter pointing there."""
    main = kernel.kernels[-1]
    names = [p.name for p in main.params]
    seen: dict = {}

    def on_launch(name, grid, block, params):
        if name == main.name:
            ptrs = (ctypes.c_void_p * len(names)).from_address(params)
            seen.update({ctypes.c_void_p.from_address(p).value: n for n, p in zip(names, ptrs)})

    fake.on_launch = on_launch
    a, b = (np.zeros(tuple(int(s.value) for s in p.shape), np.float16) for p in kernel.func.params[:2])
    kernel(a, b)
    out = []
    for call in fake.tensor_maps:
        out.append({k: (seen[v] if k == "address" else [int(x) for x in v] if isinstance(v, list) else int(v))
                    for k, v in call.items()})
    return out


# ---------------------------------------------------------------------------- the exported launcher

def _cuda_include() -> str:
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        path = find_nvidia_header_directory("cudart")
    except Exception:  # noqa: BLE001 - pathfinder missing or no wheel
        path = None
    if not path or not os.path.isfile(os.path.join(path, "cuda.h")):
        pytest.skip("cuda.h not found (the nvidia-cuda-runtime wheel of the cuda extra provides it)")
    return path


# A stand-in for libcuda: "device memory" is host memory; it prints what the launcher asks for.
FAKE_DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>
int encode_result = 0, allocs = 0, frees = 0, launches = 0;
static int encodes = 0;
extern const char *kernel_names[]; extern const int kernel_params[], kernel_maps[][8];
CUresult cuCtxGetCurrent(CUcontext *c) { *c = (CUcontext)0x1; return CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return CUDA_SUCCESS; }
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    (void)d; *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9 : 0; return CUDA_SUCCESS; }
CUresult cuModuleLoadData(CUmodule *m, const void *image) { (void)image; *m = (CUmodule)0x2; return CUDA_SUCCESS; }
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    (void)m;
    for (intptr_t k = 0; kernel_names[k]; k++) if (!strcmp(kernel_names[k], name)) { *f = (CUfunction)(k + 1); return CUDA_SUCCESS; }
    return CUDA_ERROR_NOT_FOUND;
}
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) { (void)f; (void)a; (void)v; return CUDA_SUCCESS; }
CUresult cuMemAlloc(CUdeviceptr *p, size_t n) { *p = (CUdeviceptr)(uintptr_t)malloc(n); allocs++; return CUDA_SUCCESS; }
CUresult cuMemFree(CUdeviceptr p) { free((void *)(uintptr_t)p); frees++; return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream s) { (void)s; return CUDA_SUCCESS; }
CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    memcpy((void *)(uintptr_t)dst, src, n);
    printf("copy dst=%llu bytes=%zu stream=%llu\n", (unsigned long long)dst, n, (unsigned long long)(uintptr_t)s);
    return CUDA_SUCCESS;
}
static void list64(const char *key, const cuuint64_t *v, unsigned n) {
    printf(" %s=", key); for (unsigned i = 0; i < n; i++) printf(i ? ",%llu" : "%llu", (unsigned long long)v[i]); }
static void list32(const char *key, const cuuint32_t *v, unsigned n) {
    printf(" %s=", key); for (unsigned i = 0; i < n; i++) printf(i ? ",%u" : "%u", v[i]); }
CUresult cuTensorMapEncodeTiled(CUtensorMap *m, CUtensorMapDataType dtype, cuuint32_t rank, void *address,
                                const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                const cuuint32_t *element_strides, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2_promotion,
                                CUtensorMapFloatOOBfill oob_fill) {
    printf("encode aligned64=%d dtype=%d rank=%u address=%llu", ((uintptr_t)m & 63) == 0, (int)dtype, rank,
           (unsigned long long)(uintptr_t)address);
    list64("dims", dims, rank); list64("strides", strides, rank - 1); list32("box", box, rank);
    list32("element_strides", element_strides, rank);
    printf(" interleave=%d swizzle=%d l2_promotion=%d oob_fill=%d\n", (int)interleave, (int)swizzle,
           (int)l2_promotion, (int)oob_fill);
    if (encode_result) return (CUresult)encode_result;
    encodes++;
    for (int i = 0; i < 16; i++) m->opaque[i] = ((cuuint64_t)encodes << 32) + (cuuint64_t)i;
    return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void **params, void **extra) {
    int k = (int)(intptr_t)f - 1;
    (void)s; (void)extra; launches++;
    printf("launch %s grid=%u,%u,%u block=%u,%u,%u shared=%u params=", kernel_names[k], gx, gy, gz, bx, by, bz, shared);
    for (int i = 0; i < kernel_params[k]; i++)
        printf(i ? ",%llu" : "%llu", (unsigned long long)*(CUdeviceptr *)params[i]);
    for (int j = 0; kernel_maps[k][j] >= 0; j++) {   /* the map buffers: the 16 words the kernel reads */
        const cuuint64_t *w = (const cuuint64_t *)(uintptr_t)*(CUdeviceptr *)params[kernel_maps[k][j]];
        printf(" map%d=", kernel_maps[k][j]);
        for (int i = 0; i < 16; i++) printf(i ? ",%llu" : "%llu", (unsigned long long)w[i]);
    }
    printf("\n");
    return CUDA_SUCCESS;
}
"""

MAIN = r"""
#include <stdio.h>
#include "{name}.h"
extern int encode_result, allocs, frees, launches;
const char *kernel_names[] = {{{names}, NULL}};
const int kernel_params[] = {{{counts}}};
const int kernel_maps[][8] = {{{maps}}};
int main(void) {{
    CUdeviceptr a = 0x10000, b = 0x20000, c = 0x30000;
    int rc = {name}((CUstream)0x77, a, b, c);
    printf("rc=%d allocs=%d frees=%d\n", rc, allocs, frees);
    printf("unaligned=%d launches=%d\n", {name}((CUstream)0x77, a + 8, b, c), launches);
    encode_result = CUDA_ERROR_INVALID_VALUE; allocs = frees = launches = 0;
    rc = {name}((CUstream)0x77, a, b, c);
    printf("refused=%d launches=%d allocs=%d frees=%d\n", rc, launches, allocs, frees);
    return 0;
}}
"""


def exported_run(kernel, tmp_path) -> list[str]:
    include = _cuda_include()
    name = kernel.name
    kernel.export(str(tmp_path))
    specs = kernel.kernels
    map_names = {b.spec.map for b in kernel._tensor_maps}
    maps = ", ".join("{" + ", ".join([str(i) for i, p in enumerate(s.params) if p.name in map_names] + ["-1"]) + "}"
                     for s in specs)
    (tmp_path / "fake_driver.c").write_text(FAKE_DRIVER)
    (tmp_path / "main.c").write_text(MAIN.format(name=name, names=", ".join(f'"{s.name}"' for s in specs),
                                                 counts=", ".join(str(len(s.params)) for s in specs), maps=maps))
    exe = tmp_path / "main"
    subprocess.run([CC, "-std=c99", "-Wall", "-Werror", "-Wno-unused-function", f"-I{include}", f"-I{tmp_path}",
                    "-o", str(exe), str(tmp_path / "main.c"), str(tmp_path / "fake_driver.c")],
                   check=True, capture_output=True, text=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()


def _fields(line: str) -> dict:
    out = {}
    for key, value in re.findall(r"(\w+)=(\S+)", line):
        out[key] = [int(x) for x in value.split(",")] if "," in value or key in (
            "dims", "strides", "box", "element_strides") else int(value)
    return out


@needs_cc
@pytest.mark.parametrize("batch", [0, 2])
def test_the_exported_launcher_encodes_the_maps_as_the_call_path_does(fake, tmp_path, batch):
    kernel = hopper_kernel(batch)
    want = python_encodes(fake, kernel)
    assert [w["address"] for w in want] == ["A", "B", "C"] and all(w["rank"] == (3 if batch else 2) for w in want)
    lines = exported_run(kernel, tmp_path)
    first = lines[:lines.index(next(x for x in lines if x.startswith("rc=")))]
    encodes = [_fields(x) for x in first if x.startswith("encode")]
    copies = [_fields(x) for x in first if x.startswith("copy")]
    launches = [(x.split()[1], _fields(x)) for x in first if x.startswith("launch")]
    # encode x 3, copy x 3, then the GEMM's launch (B[k, j] read N-major: no transposing kernel)
    assert [x.split()[0] for x in first] == ["encode"] * 3 + ["copy"] * 3 + ["launch"], first
    assert [n for n, _ in launches] == [s.name for s in kernel.kernels]
    main = kernel.kernels[-1]
    params = dict(zip([p.name for p in main.params], launches[-1][1]["params"]))
    assert params["A"] == 0x10000 and params["C"] == 0x30000
    for got, py in zip(encodes, want, strict=True):
        assert got.pop("aligned64") == 1                      # the driver's alignment for the map
        address = got.pop("address")
        assert address == params[py["address"]]               # the tensor the kernel reads (A, B) or writes (C)
        assert got == {k: v for k, v in py.items() if k != "address"}
    # each map's 128 bytes go to its buffer on the call's stream, and the kernel is given that buffer
    for k, (copy, name) in enumerate(zip(copies, ("A_tmap", "B_tmap", "C_tmap")), 1):
        assert copy == {"dst": params[name], "bytes": 128, "stream": 0x77}
        assert launches[-1][1][f"map{[p.name for p in main.params].index(name)}"] == [(k << 32) + i for i in range(16)]
    rest = lines[len(first):]
    assert rest[0].startswith("rc=0 ") and _fields(rest[0])["allocs"] == _fields(rest[0])["frees"] == 3
    assert rest[1] == "unaligned=-13 launches=1"              # A at an address TMA cannot use: nothing launched
    assert rest[-1] == "refused=-2001 launches=0 allocs=3 frees=3"   # -2000 - CUDA_ERROR_INVALID_VALUE


def test_the_header_says_what_a_hopper_export_needs(tmp_path):
    with open(hopper_kernel().export(str(tmp_path))) as fh:
        text = fh.read()
    assert "#if CUDA_VERSION < 12000" in text and "cuTensorMapEncodeTiled" in text
    assert "-2000 - r: cuTensorMapEncodeTiled refused a TMA tensor map" in text
    assert "if (A % 16) return GEMM_ERR_ALIGN;" in text
    cxx = shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")
    if cxx is not None:   # C++ callers too (where CUtensorMap is alignas(128))
        (tmp_path / "use.cpp").write_text('#include "gemm.h"\nint main() { return 0; }\n')
        subprocess.run([cxx, "-std=c++17", "-Wall", "-Werror", "-fsyntax-only", f"-I{_cuda_include()}",
                        f"-I{tmp_path}", str(tmp_path / "use.cpp")], check=True, capture_output=True, text=True)


# ---------------------------------------------------------------------------- what export still refuses

def test_export_names_the_host_step_it_cannot_write(tmp_path):
    from test_cublas_host_steps import gemm_relu, scheduled

    kernel = tdsl.build(scheduled(gemm_relu()), target="cuda", arch="sm_80")
    with pytest.raises(tdsl.TargetError, match=r"'mm' calls a library \(cublasSgemm_v2, cuBLAS\) from the host "
                                               "between its kernels"):
        kernel.export(str(tmp_path))
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    from attention_gpu import attention_lowp_func

    kernel = tdsl.build(tdsl.auto_schedule(attention_lowp_func(2, 128, 64, causal=False), target="cuda"),
                        target="cuda", arch="sm_90")
    with pytest.raises(tdsl.TargetError, match="launches tdsl's fused attention kernel, compiled by NVRTC at run "
                                               r"time, from the host \(tdsl_flash_attention_fwd_f16_d64<<<") as err:
        kernel.export(str(tmp_path))
    assert "cuBLAS" not in str(err.value)
