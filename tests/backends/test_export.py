"""Kernel.export / tdsl.load: a shared library and a C header that a C program compiled with the
system C compiler includes, links and runs with no Python in its environment."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tdsl
from tdsl import T

CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc, gcc or clang) to build the test program")


@T.prim_func
def axpy(A: T.Buffer(("n", 8), "float32"), B: T.Buffer(("n", 8), "float32"), C: T.Buffer(("n", 8), "float32"),
         alpha: T.float32):
    for i, j in T.grid(n, 8):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] * alpha + T.exp(B[vi, vj])


@T.prim_func
def row_sum(A: T.Buffer((64, 32), "float64"), S: T.Buffer((64,), "float64")):
    for i, k in T.grid(64, 32):
        with T.block("S"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                S[vi] = T.float64(0)
            S[vi] = S[vi] + A[vi, vk]


@T.prim_func
def shift(A: T.Buffer(("n + 1",), "int32"), B: T.Buffer(("n",), "int32"), k: T.int8):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.spatial(n, i)
            B[vi] = A[vi + 1] - A[vi] + T.cast(k, "int32")


def parallel_axpy():
    s = tdsl.Schedule(axpy)
    i, j = s.get_loops(s.get_block("C"))
    s.parallel(i)
    s.vectorize(j)
    return tdsl.build(s)


# The C program: inputs from a formula numpy repeats, the output written to a file, the checks'
# return codes and the number of threads the process has after the call printed.
AXPY_MAIN = r"""
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include "axpy.h"

static int threads(void) {
    int count = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    if (!d) return -1;
    while ((e = readdir(d))) count += e->d_name[0] != '.';
    closedir(d);
    return count;
}

int main(int argc, char **argv) {
    int64_t n = atoi(argv[1]);
    float *a = malloc(n * 8 * sizeof(float)), *b = malloc(n * 8 * sizeof(float)), *c = malloc(n * 8 * sizeof(float));
    for (int64_t i = 0; i < n * 8; i++) { a[i] = (float)(i % 13) - 6.0f; b[i] = (float)(i % 7) * 0.25f; }
    int rc = axpy(a, b, c, n, 1.5f);
    FILE *f = fopen(argv[2], "wb");
    fwrite(c, sizeof(float), n * 8, f);
    fclose(f);
    printf("rc=%d threads=%d\n", rc, threads());
    printf("null=%d dim=%d overlap=%d align=%d\n", axpy(NULL, b, c, n, 1.0f), axpy(a, b, c, -1, 1.0f),
           axpy(a, b, a, n, 1.0f), axpy(a, (const float *)((char *)b + 1), c, n, 1.0f));
    printf("codes=%d,%d,%d,%d\n", AXPY_ERR_NULL, AXPY_ERR_DIM, AXPY_ERR_OVERLAP, AXPY_ERR_ALIGN);
    printf("empty=%d\n", axpy(NULL, NULL, NULL, 0, 1.0f));
    return 0;
}
"""


def _build_c(tmp_path, lib_dir: str, name: str, source: str) -> str:
    src, exe = tmp_path / f"{name}_main.c", tmp_path / f"{name}_main"
    src.write_text(source)
    subprocess.run([CC, "-O2", "-Wall", "-Werror", "-o", str(exe), str(src), f"-I{lib_dir}", f"-L{lib_dir}",
                    f"-l:{name}.so", f"-Wl,-rpath,{lib_dir}"], check=True, capture_output=True, text=True)
    return str(exe)


@needs_cc
def test_c_program_runs_the_exported_parallel_kernel_without_python(tmp_path):
    lib_dir = str(tmp_path / "axpy")
    so = parallel_axpy().export(lib_dir)
    assert so == os.path.join(lib_dir, "axpy.so") and os.path.isfile(os.path.join(lib_dir, "axpy.h"))
    exe = _build_c(tmp_path, lib_dir, "axpy", AXPY_MAIN)
    n = 301
    i = np.arange(n * 8)
    a = ((i % 13) - 6).astype(np.float32).reshape(n, 8)
    b = ((i % 7) * 0.25).astype(np.float32).reshape(n, 8)
    for threads in ("1", "3"):
        out = tmp_path / f"c_{threads}.bin"
        # no Python, no PYTHONPATH, no site-packages: an empty environment but the thread count
        proc = subprocess.run(["env", "-i", f"TDSL_NUM_THREADS={threads}", exe, str(n), str(out)],
                              check=True, capture_output=True, text=True)
        lines = proc.stdout.splitlines()
        assert lines[0] == f"rc=0 threads={threads}", proc.stdout   # the library's own thread pool
        c = np.fromfile(out, np.float32).reshape(n, 8)
        np.testing.assert_allclose(c, a * 1.5 + np.exp(b), rtol=1e-6)
        assert lines[1] == "null=-12 dim=-10 overlap=-14 align=-13"
        assert lines[2] == "codes=-12,-10,-14,-13"
        assert lines[3] == "empty=0"   # no elements: NULL pointers are fine


@needs_cc
def test_library_needs_no_python_llvmlite_or_tdsl(tmp_path):
    so = tdsl.build(axpy).export(str(tmp_path / "k"))
    readelf = shutil.which("readelf")
    if readelf:
        dyn = subprocess.run([readelf, "-d", so], check=True, capture_output=True, text=True).stdout
        needed = [line.split("[")[1].rstrip("]") for line in dyn.splitlines() if "(NEEDED)" in line]
        assert needed and all(lib.split(".so")[0] in ("libc", "libm", "libpthread") for lib in needed), needed
    with open(so, "rb") as fh:
        data = fh.read()
    for word in (b"libpython", b"llvmlite", b"libLLVM"):
        assert word not in data


@needs_cc
def test_load_gives_a_kernel_without_compiling(tmp_path):
    so = tdsl.build(shift).export(str(tmp_path / "shift"))
    code = ("import sys, numpy as np, tdsl\n"
            f"k = tdsl.load({so!r})\n"
            "a = np.array([1, 4, 9, 16, 25], np.int32)\n"
            "assert (k(a, 2) == np.diff(a) + 2).all()\n"
            "b = np.empty(4, np.int32); k(a, b, -1); assert (b == np.diff(a) - 1).all()\n"
            "try:\n    k(a, np.empty(3, np.int32), 0)\nexcept tdsl.ArgumentError as e:\n    print(e)\n"
            "assert 'llvmlite' not in sys.modules, 'loading or calling imported LLVM'\n")
    proc = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True, cwd=os.path.dirname(os.path.dirname(tdsl.__file__)))
    assert "expected shape (n + 1,), got A.shape[0] = 5 (expected 4)" in proc.stdout   # the kernel's own checks
    k = tdsl.load(so)
    assert repr(k) == repr(tdsl.build(shift))
    np.testing.assert_array_equal(k(np.arange(10, dtype=np.int32) ** 2, 0), np.diff(np.arange(10) ** 2))


@T.prim_func
def accumulate(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            C[vi] = C[vi] + A[vi]


@needs_cc
def test_loaded_kernel_keeps_the_function_and_its_argument_rules(tmp_path):
    k = tdsl.load(tdsl.build(accumulate).export(str(tmp_path / "acc")))
    with pytest.raises(tdsl.ArgumentError, match="'C' cannot be left out"):
        k(np.ones(8, np.float32))
    c = np.ones(8, np.float32)
    k(np.arange(8, dtype=np.float32), c)
    np.testing.assert_array_equal(c, np.arange(8) + 1)
    assert tdsl.structural_equal(k.func, accumulate)   # the whole function, parsed on first use
    scheduled = parallel_axpy()
    loaded = tdsl.load(scheduled.export(str(tmp_path / "axpy")))
    assert tdsl.structural_equal(loaded.func, scheduled.func)


@needs_cc
def test_header_declares_the_c_signature(tmp_path):
    tdsl.build(shift).export(str(tmp_path / "shift"))
    text = (tmp_path / "shift" / "shift.h").read_text()
    assert "int shift(const int32_t *A, int32_t *B, int64_t n, int8_t k);" in text
    assert "#define SHIFT_ERR_SHAPE -11" in text
    tdsl.build(row_sum).export(str(tmp_path / "rs"), name="rowsum64")
    text = (tmp_path / "rs" / "rowsum64.h").read_text()
    assert "int rowsum64(const double *A, double *S);" in text
    if shutil.which("g++"):   # the header is C++ too
        (tmp_path / "use.cc").write_text('#include "rowsum64.h"\nint main() { return rowsum64(0, 0) == 0; }\n')
        subprocess.run(["g++", "-fsyntax-only", f"-I{tmp_path / 'rs'}", str(tmp_path / "use.cc")], check=True)


@needs_cc
def test_c_program_matches_numpy_for_a_constant_shape_kernel(tmp_path):
    lib_dir = str(tmp_path / "rs")
    tdsl.build(row_sum).export(lib_dir)
    exe = _build_c(tmp_path, lib_dir, "row_sum", r"""
#include <stdio.h>
#include "row_sum.h"
int main(int argc, char **argv) {
    double a[64 * 32], s[64];
    for (int i = 0; i < 64 * 32; i++) a[i] = (i % 11) * 0.5 - 2.0;
    int rc = row_sum(a, s);
    FILE *f = fopen(argv[1], "wb");
    fwrite(s, sizeof(double), 64, f);
    fclose(f);
    return rc;
}
""")
    out = tmp_path / "s.bin"
    subprocess.run(["env", "-i", exe, str(out)], check=True)
    a = ((np.arange(64 * 32) % 11) * 0.5 - 2.0).reshape(64, 32)
    np.testing.assert_allclose(np.fromfile(out, np.float64), a.sum(axis=1), rtol=1e-12)


@needs_cc
def test_export_links_with_plain_ld_when_there_is_no_compiler(tmp_path, monkeypatch):
    ld = shutil.which("ld")
    if ld is None:
        pytest.skip("no ld")
    only_ld = tmp_path / "bin"
    only_ld.mkdir()
    os.symlink(ld, only_ld / "ld")
    monkeypatch.setenv("PATH", str(only_ld))
    monkeypatch.delenv("CC", raising=False)
    so = tdsl.build(shift).export(str(tmp_path / "k"))
    monkeypatch.undo()
    a = np.arange(6, dtype=np.int32) * 3
    np.testing.assert_array_equal(tdsl.load(so)(a, 1), np.diff(a) + 1)


def test_export_without_a_linker_names_what_it_looked_for(tmp_path, monkeypatch):
    kernel = tdsl.build(shift)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(tdsl.TargetError, match=r"needs a system linker.*found none.*cc, gcc, clang, ld"):
        kernel.export(str(tmp_path / "k"))


def test_bad_names_and_files_are_clear_errors(tmp_path):
    with pytest.raises(tdsl.TargetError, match="not a C identifier"):
        tdsl.build(shift).export(str(tmp_path), name="my-kernel")
    with pytest.raises(tdsl.TargetError, match="no file"):
        tdsl.load(str(tmp_path / "missing.so"))
    libm = next((p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                             "/lib64/libm.so.6") if os.path.exists(p)), None)
    if libm:
        with pytest.raises(tdsl.TargetError, match="not a library exported by tdsl"):
            tdsl.load(libm)


@T.prim_func
def gemm(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@needs_cc
def test_a_kernel_calling_what_only_python_provides_is_refused(tmp_path):
    sch = tdsl.Schedule(gemm)
    sch.tensorize(sch.get_block("C"), "blas.sgemm")   # calls the BLAS numpy loaded
    kernel = tdsl.build(sch)
    with pytest.raises(tdsl.TargetError, match=r"cannot be exported: its code calls .*sgemm.*only this Python process"):
        kernel.export(str(tmp_path / "g"))
    assert not (tmp_path / "g" / "gemm.so").exists()


@T.prim_func
def gather(A: T.Buffer((8,), "float32"), idx: T.Buffer((4,), "int32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        with T.block("B"):
            vi = T.axis.spatial(4, i)
            B[vi] = A[idx[vi]]


@needs_cc
def test_bounds_checked_export_returns_the_check_the_header_names(tmp_path):
    lib_dir = str(tmp_path / "gather")
    tdsl.build(gather, bounds_check=True).export(lib_dir)
    header = (tmp_path / "gather" / "gather.h").read_text()
    assert "/* 2: index out of bounds in buffer 'A': index idx[i] on axis 0 is outside [0, 8) */" in header
    exe = _build_c(tmp_path, lib_dir, "gather", r"""
#include <stdio.h>
#include "gather.h"
int main(void) {
    float a[8] = {0, 1, 2, 3, 4, 5, 6, 7}, b[4];
    int ok[4] = {7, 0, 3, 3}, bad[4] = {1, 2, 8, 0};
    int rc = gather(a, ok, b);
    printf("%d %g %g %g %g\n", rc, b[0], b[1], b[2], b[3]);
    printf("%d\n", gather(a, bad, b));
    return 0;
}
""")
    lines = subprocess.run(["env", "-i", exe], check=True, capture_output=True, text=True).stdout.splitlines()
    assert lines == ["0 7 0 3 3", "2"]   # check 2 of the header


@needs_cc
def test_c_entry_takes_small_scalars_and_shape_expressions(tmp_path):
    lib_dir = str(tmp_path / "shift")
    tdsl.build(shift).export(lib_dir)
    exe = _build_c(tmp_path, lib_dir, "shift", r"""
#include <stdio.h>
#include "shift.h"
int main(void) {
    int32_t a[6] = {1, 4, 9, 16, 25, 36}, b[5];
    int rc = shift(a, b, 5, (int8_t)-3);   /* A has n + 1 = 6 elements */
    printf("%d %d %d %d %d %d\n", rc, b[0], b[1], b[2], b[3], b[4]);
    return 0;
}
""")
    out = subprocess.run(["env", "-i", exe], check=True, capture_output=True, text=True).stdout.split()
    assert out == ["0", "0", "2", "4", "6", "8"]   # np.diff(a) - 3: the int8 -3 arrives sign-extended


@pytest.mark.skipif(shutil.which("objdump") is None, reason="no objdump to read the library's machine code")
def test_export_follows_the_kernels_cpu_target(tmp_path):
    """A kernel built for an AVX2-only CPU exports AVX2 code (no zmm register), and loads back."""
    target = "llvm -mcpu=x86-64-v3"
    s = tdsl.Schedule(axpy)
    s.vectorize(s.get_loops(s.get_block("C"))[1])
    so = tdsl.build(s, target=target).export(str(tmp_path / "axpy"))
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", so], check=True, capture_output=True,
                         text=True).stdout
    assert "ymm" in asm and "zmm" not in asm
    with open(so, "rb") as fh:   # the library records the CPU it was built for (tdsl.load checks it)
        assert b'"cpu": "x86-64-v3"' in fh.read()
    a, b = np.random.rand(2, 5, 8).astype("float32")
    np.testing.assert_allclose(tdsl.load(so)(a, b, 2.0), a * 2 + np.exp(b), rtol=1e-5)
