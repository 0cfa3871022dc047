"""CudaKernel.export: CUBINs for chosen archs and a C header with a host launcher through the
CUDA driver API. Without a GPU: the header compiles against cuda.h from the NVIDIA wheels with
-Wall -Werror, and a program linking it against a recording stand-in for the seven driver calls
it uses checks what it would do on a device: which CUBIN it loads for a compute capability,
the kernel names, grid and block, and the kernel arguments' values and types."""
import os
import shutil
import subprocess

import pytest

import tdsl
from tdsl import T

pytest.importorskip("cuda.bindings")
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


@T.prim_func
def scale_add(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32"), s: T.float32):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.spatial(n, i)
            B[vi] = A[vi] * s + T.float32(1)


def _kernel():
    sch = tdsl.Schedule(scale_add)
    i, = sch.get_loops(sch.get_block("B"))
    bx, tx = sch.split(i, [None, 128])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return tdsl.build(sch, target="cuda", arch="sm_80")


def _cuda_include() -> str:
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        path = find_nvidia_header_directory("cudart")
    except Exception:  # noqa: BLE001 - pathfinder missing or no wheel
        path = None
    if not path or not os.path.isfile(os.path.join(path, "cuda.h")):
        pytest.skip("cuda.h not found (the nvidia-cuda-runtime wheel of the cuda extra provides it)")
    return path


# a stand-in for libcuda: records what the launcher asks for
FAKE_DRIVER = r"""
#include <stdio.h>
#include <string.h>
#include <cuda.h>
int fake_major = 8, fake_minor = 0;
const void *loaded_image;
char launched[64];
unsigned grid[3], block[3];
CUdeviceptr arg_a, arg_b; float arg_s; int arg_n;
CUresult cuCtxGetCurrent(CUcontext *c) { *c = (CUcontext)0x1; return CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return CUDA_SUCCESS; }
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    (void)d; *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? fake_major : fake_minor; return CUDA_SUCCESS; }
CUresult cuModuleLoadData(CUmodule *m, const void *image) { loaded_image = image; *m = (CUmodule)0x2; return CUDA_SUCCESS; }
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    (void)m; strcpy(launched, name); *f = (CUfunction)0x3; return CUDA_SUCCESS; }
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void **params, void **extra) {
    (void)f; (void)shared; (void)s; (void)extra;
    grid[0] = gx; grid[1] = gy; grid[2] = gz; block[0] = bx; block[1] = by; block[2] = bz;
    arg_a = *(CUdeviceptr *)params[0]; arg_b = *(CUdeviceptr *)params[1];
    arg_s = *(float *)params[2]; arg_n = *(int *)params[3];
    return CUDA_SUCCESS;
}
CUresult cuMemAlloc(CUdeviceptr *p, size_t n) { (void)p; (void)n; return CUDA_ERROR_OUT_OF_MEMORY; }
CUresult cuMemFree(CUdeviceptr p) { (void)p; return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream s) { (void)s; return CUDA_SUCCESS; }
"""

MAIN = r"""
#include <stdio.h>
#include "scale_add.h"
extern int fake_major, fake_minor; extern const void *loaded_image; extern char launched[64];
extern unsigned grid[3], block[3]; extern CUdeviceptr arg_a, arg_b; extern float arg_s; extern int arg_n;
int main(void) {
    int rc = scale_add(0, (CUdeviceptr)0x1000, (CUdeviceptr)0x2000, 1000, 2.5f);
    printf("rc=%d image=%s kernel=%s grid=%u,%u,%u block=%u,%u,%u a=%#llx b=%#llx s=%g n=%d\n", rc,
           loaded_image == scale_add_cubin_sm_80 ? "sm_80" : loaded_image == scale_add_cubin_sm_90 ? "sm_90" : "?",
           launched, grid[0], grid[1], grid[2], block[0], block[1], block[2],
           (unsigned long long)arg_a, (unsigned long long)arg_b, arg_s, arg_n);
    printf("dim=%d\n", scale_add(0, 0, 0, -1, 1.0f));
    scale_add_module = NULL; fake_major = 9;      /* another device: the sm_90 image */
    rc = scale_add(0, (CUdeviceptr)0x1000, (CUdeviceptr)0x2000, 0, 1.0f);
    printf("rc=%d image=%s\n", rc, loaded_image == scale_add_cubin_sm_90 ? "sm_90" : "?");
    scale_add_module = NULL; fake_major = 7; fake_minor = 5;
    printf("nocubin=%d\n", scale_add(0, 0, 0, 1, 1.0f));
    return 0;
}
"""


def test_export_writes_cubins_and_a_header(tmp_path):
    kernel = _kernel()
    header = kernel.export(str(tmp_path / "out"), archs=["sm_80", "sm_90"])
    out = tmp_path / "out"
    assert header == str(out / "scale_add.h")
    assert (out / "scale_add_sm_80.cubin").read_bytes() == kernel.cubin
    sm90 = (out / "scale_add_sm_90.cubin").read_bytes()
    assert sm90[:4] == b"\x7fELF" and sm90 != kernel.cubin
    text = (out / "scale_add.h").read_text()
    assert "static inline int scale_add(CUstream stream, CUdeviceptr A, CUdeviceptr B, int64_t n, float s)" in text
    assert f"scale_add_cubin_sm_80[{len(kernel.cubin)}]" in text


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_launcher_compiles_and_launches_through_a_recording_driver(tmp_path):
    include = _cuda_include()
    _kernel().export(str(tmp_path), archs=["sm_80", "sm_90"])
    (tmp_path / "fake_driver.c").write_text(FAKE_DRIVER)
    (tmp_path / "main.c").write_text(MAIN)
    exe = tmp_path / "main"
    subprocess.run([CC, "-std=c99", "-Wall", "-Werror", "-Wno-unused-function", f"-I{include}", f"-I{tmp_path}",
                    "-o", str(exe), str(tmp_path / "main.c"), str(tmp_path / "fake_driver.c")],
                   check=True, capture_output=True, text=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    assert lines[0] == ("rc=0 image=sm_80 kernel=scale_add_kernel grid=8,1,1 block=128,1,1 a=0x1000 b=0x2000 "
                        "s=2.5 n=1000")   # ceil(1000 / 128) = 8 blocks
    assert lines[1] == "dim=-10"
    assert lines[2] == "rc=0 image=sm_90"     # n = 0: loaded, nothing launched
    assert lines[3] == "nocubin=-21"


def test_export_refuses_what_it_cannot_write(tmp_path):
    with pytest.raises(tdsl.TargetError, match="not a C identifier"):
        _kernel().export(str(tmp_path), name="bad-name")


@T.prim_func
def clash(b: T.Buffer(("n",), "float32"), stream: T.Buffer(("n",), "float32"), rc: T.float32):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.spatial(n, i)
            stream[vi] = b[vi] * rc + T.float32(1)


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_parameters_named_like_the_launchers_own_names_still_launch(tmp_path):
    """`b`, `stream` and `rc` are the launcher's names too: the parameters keep working (renamed in C
    where they would clash: `stream_`), called by position as before."""
    include = _cuda_include()
    sch = tdsl.Schedule(clash)
    i, = sch.get_loops(sch.get_block("B"))
    bx, tx = sch.split(i, [None, 128])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    tdsl.build(sch, target="cuda", arch="sm_80").export(str(tmp_path), archs=["sm_80", "sm_90"])
    text = (tmp_path / "clash.h").read_text()
    assert "static inline int clash(CUstream stream, CUdeviceptr b, CUdeviceptr stream_, int64_t n, float rc)" in text
    (tmp_path / "fake_driver.c").write_text(FAKE_DRIVER)
    (tmp_path / "main.c").write_text(MAIN.replace("scale_add", "clash"))
    exe = tmp_path / "main"
    subprocess.run([CC, "-std=c99", "-Wall", "-Werror", "-Wno-unused-function", f"-I{include}", f"-I{tmp_path}",
                    "-o", str(exe), str(tmp_path / "main.c"), str(tmp_path / "fake_driver.c")],
                   check=True, capture_output=True, text=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    assert lines[0] == "rc=0 image=sm_80 kernel=clash_kernel grid=8,1,1 block=128,1,1 a=0x1000 b=0x2000 s=2.5 n=1000"
