"""Call cost of a kernel with symbolic shapes: outputs passed vs left out (allocated by the
call), against the same kernel with constant shapes and against numpy (and PyTorch, when
installed) on the same data.

    PYTHONPATH=. python3 bench/bench_call_path.py [--number N]

Row softmax over a (1, 8) float32 array ("n = 1": one row): per-call CPU time of the calling
thread (min of 20 repeats), so other processes on a loaded machine do not inflate it.
"""
from __future__ import annotations

import argparse
import platform
import time
import timeit

import numpy as np

import tdsl

SOFTMAX = '''
@T.prim_func
def softmax(A: T.Buffer(({sn}, {sm}), "float32"), B: T.Buffer(({sn}, {sm}), "float32")):
    mx = T.alloc_buffer(({n},), "float32")
    sm = T.alloc_buffer(({n},), "float32")
    for i, j in T.grid({n}, {m}):
        with T.block("max"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                mx[vi] = T.float32(-3.4e38)
            mx[vi] = T.max(mx[vi], A[vi, vj])
    for i, j in T.grid({n}, {m}):
        with T.block("sum"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                sm[vi] = T.float32(0)
            sm[vi] = sm[vi] + T.exp(A[vi, vj] - mx[vi])
    for i, j in T.grid({n}, {m}):
        with T.block("out"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = T.exp(A[vi, vj] - mx[vi]) / sm[vi]
'''


def per_call_us(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=20, timer=time.thread_time)) / number * 1e6


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def numpy_softmax(a):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000)
    args = parser.parse_args()
    rows, cols = 1, 8
    symbolic = tdsl.build(tdsl.parse(SOFTMAX.format(sn='"n"', sm='"m"', n="n", m="m")))
    constant = tdsl.build(tdsl.parse(SOFTMAX.format(sn=rows, sm=cols, n=rows, m=cols)))
    a = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    b = np.empty_like(a)
    np.testing.assert_allclose(symbolic(a), numpy_softmax(a), rtol=1e-5)
    np.testing.assert_allclose(constant(a), numpy_softmax(a), rtol=1e-5)
    t = {
        "symbolic, output passed": per_call_us(lambda: symbolic(a, b), args.number),
        "symbolic, output left out": per_call_us(lambda: symbolic(a), args.number),
        "constant, output passed": per_call_us(lambda: constant(a, b), args.number),
        "constant, output left out": per_call_us(lambda: constant(a), args.number),
        "numpy softmax": per_call_us(lambda: numpy_softmax(a), args.number),
    }
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        ta = torch.from_numpy(a)
        with torch.no_grad():
            t["torch.softmax"] = per_call_us(lambda: torch.softmax(ta, dim=1), args.number)
    print(f"host: {cpu_model()}; row softmax ({rows}, {cols}) float32; "
          "CPU time of the calling thread per call, min of 20 repeats")
    for name, us in t.items():
        print(f"  {name:28s} {us:7.2f} us   ({us / t['numpy softmax']:.2f}x numpy)")
    extra = t["symbolic, output left out"] - t["symbolic, output passed"]
    print(f"  allocating the symbolic output costs {extra:+.2f} us (target <= 1 us)")


if __name__ == "__main__":
    main()
