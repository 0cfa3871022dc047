"""Call overhead where kernels are used: a tdsl torch custom op, the exported C function, tdsl.load.

    python bench/bench_torch_aot.py            # ~15 s

On 16 float32 elements (C = A + B), in one process:

1. the torch op (`tdsl.torch.custom_op`, called as `op(a, b)`: it allocates C) against
   `torch.add(a, b, out=c)` and `torch.add(a, b)`; the ratio is op / torch.add(out=).
2. The exported function called from C: a C program (system C compiler) times a loop of calls
   with clock_gettime and prints ns per call; the same loop over a plain C function doing the
   same addition (compiled -O2 in the program itself) for reference.
3. tdsl.load of an exported kernel: each load opens a fresh copy of the library (dlopen of a
   path already open would only count a reference); also the first load in a fresh process,
   which includes importing tdsl's Kernel modules.

Times are the best of several rounds (the least disturbed on a shared machine).
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import tdsl

ADD16 = '''
@T.prim_func
def add16(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.block("C"):
            vi = T.axis.spatial(16, i)
            C[vi] = A[vi] + B[vi]
'''

C_LOOP = r"""
#include <stdio.h>
#include <time.h>
#include "add16.h"

__attribute__((noinline)) static int plain_add(const float *a, const float *b, float *c) {
    for (int i = 0; i < 16; i++) c[i] = a[i] + b[i];
    return 0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(void) {
    static float a[16], b[16], c[16];
    for (int i = 0; i < 16; i++) { a[i] = (float)i; b[i] = 1.0f; }
    const long n = 2000000;
    double best = 1e9, best_plain = 1e9;
    for (int round = 0; round < 7; round++) {
        double t0 = now();
        for (long i = 0; i < n; i++) if (add16(a, b, c)) return 1;
        double t1 = now();
        for (long i = 0; i < n; i++) plain_add(a, b, c);
        double t2 = now();
        if (t1 - t0 < best) best = t1 - t0;
        if (t2 - t1 < best_plain) best_plain = t2 - t1;
    }
    printf("%.2f %.2f %g\n", best / n * 1e9, best_plain / n * 1e9, c[15]);
    return 0;
}
"""


def best_us(fn, number: int = 20000, rounds: int = 7) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best * 1e6


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def torch_rows(kernel) -> None:
    try:
        import torch
    except ImportError:
        print("1. torch op: skipped (torch is not installed: pip install -e '.[torch]')")
        return
    import tdsl.torch

    op = tdsl.torch.custom_op("bench::add16", kernel)
    a, b, c = torch.randn(16), torch.randn(16), torch.empty(16)
    assert torch.equal(op(a, b), a + b)
    t_op = best_us(lambda: op(a, b))
    t_out = best_us(lambda: torch.add(a, b, out=c))
    t_add = best_us(lambda: torch.add(a, b))
    an, bn, cn = a.numpy(), b.numpy(), c.numpy()
    t_kernel = best_us(lambda: kernel(an, bn, cn))
    t_direct = best_us(lambda: kernel(a, b), number=5000)
    print(f"1. torch op op(a, b): {t_op:.2f} us; torch.add(out=) {t_out:.2f} us, torch.add {t_add:.2f} us "
          f"-> op / torch.add(out=) = {t_op / t_out:.1f}x (goal <= 3x), op / torch.add = {t_op / t_add:.1f}x; "
          f"the kernel called with numpy arrays: {t_kernel:.2f} us, with torch tensors (C left out, a torch "
          f"tensor returned): {t_direct:.2f} us   [torch {torch.__version__}]")


def c_row(kernel, work: str) -> str | None:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        print("2./3. skipped: no C compiler (cc, gcc or clang)")
        return None
    so = kernel.export(os.path.join(work, "add16"))
    lib_dir = os.path.dirname(so)
    with open(os.path.join(work, "loop.c"), "w") as fh:
        fh.write(C_LOOP)
    exe = os.path.join(work, "loop")
    subprocess.run([cc, "-O2", "-o", exe, os.path.join(work, "loop.c"), f"-I{lib_dir}", f"-L{lib_dir}",
                    "-l:add16.so", f"-Wl,-rpath,{lib_dir}"], check=True)
    out = subprocess.run(["env", "-i", exe], check=True, capture_output=True, text=True).stdout.split()
    ns, plain = float(out[0]), float(out[1])
    print(f"2. exported add16 called from C: {ns / 1e3:.4f} us per call ({ns:.1f} ns; goal <= 0.2 us); "
          f"a plain C function doing the same addition through a call: {plain:.1f} ns")
    return so


def load_rows(so: str, work: str) -> None:
    copies = []
    for k in range(20):
        path = os.path.join(work, f"copy{k}.so")
        shutil.copy(so, path)
        copies.append(path)
    tdsl.load(copies[0])   # Kernel's modules imported
    times = []
    for path in copies[1:]:
        t0 = time.perf_counter()
        tdsl.load(path)
        times.append(time.perf_counter() - t0)
    code = ("import time, tdsl, sys\nt0 = time.perf_counter()\n"
            f"k = tdsl.load({copies[0]!r})\n"
            "print((time.perf_counter() - t0) * 1e3, 'llvmlite' in sys.modules)")
    fresh = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                           cwd=os.path.dirname(os.path.dirname(tdsl.__file__))).stdout.split()
    print(f"3. tdsl.load of an exported kernel (a fresh copy of the library each time): best "
          f"{min(times) * 1e3:.2f} ms, median {sorted(times)[len(times) // 2] * 1e3:.2f} ms (goal <= 5 ms); "
          f"the first load in a fresh process (after `import tdsl`, importing the Kernel's modules): "
          f"{float(fresh[0]):.1f} ms, LLVM imported: {fresh[1]}")


def main() -> None:
    print(f"host: {cpu_name()}, {os.cpu_count()} cores; python {platform.python_version()}, numpy {np.__version__}")
    kernel = tdsl.build(tdsl.parse(ADD16))
    torch_rows(kernel)
    with tempfile.TemporaryDirectory(prefix="tdsl-bench-aot-") as work:
        so = c_row(kernel, work)
        if so is not None:
            load_rows(so, work)


if __name__ == "__main__":
    main()
