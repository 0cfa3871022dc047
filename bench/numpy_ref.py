"""numpy reference timings, run in a subprocess so that the OpenBLAS environment can differ.

    python bench/numpy_ref.py gemm 1024          -> {"seconds": ..., "blas": ...}
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np


def median_seconds(fn, repeat: int = 7, min_time: float = 0.05) -> float:
    """Median seconds per call of `fn`."""
    return seconds(fn, repeat, min_time)[0]


def seconds(fn, repeat: int = 7, min_time: float = 0.05) -> tuple[float, float]:
    """(median, minimum) seconds per call of `fn`, each sample at least `min_time` long."""
    fn()
    number = 1
    while True:
        t = time.perf_counter()
        for _ in range(number):
            fn()
        if time.perf_counter() - t >= min_time or number >= 1 << 16:
            break
        number *= 2
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t) / number)
    times.sort()
    return times[len(times) // 2], times[0]


def softmax(x):
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=1, keepdims=True)


def layernorm(x, g, b, eps=1e-5):
    mean = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


def conv2d_im2col(x, w):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (r, s), axis=(2, 3))  # n c h w r s
    cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * wd, c * r * s)
    return (cols @ w.reshape(k, -1).T).reshape(n, h, wd, k).transpose(0, 3, 1, 2)


def case(name: str, size: int):
    rng = np.random.default_rng(0)
    if name == "gemm":
        a = rng.standard_normal((size, size), dtype=np.float32)
        b = rng.standard_normal((size, size), dtype=np.float32)
        c = np.empty((size, size), np.float32)
        return lambda: np.matmul(a, b, out=c)
    if name == "softmax":
        x = rng.standard_normal((size, 1024), dtype=np.float32)
        return lambda: softmax(x)
    if name == "layernorm":
        x = rng.standard_normal((size, 1024), dtype=np.float32)
        g = rng.standard_normal(1024, dtype=np.float32)
        b = rng.standard_normal(1024, dtype=np.float32)
        return lambda: layernorm(x, g, b)
    if name == "conv2d":
        x = rng.standard_normal((1, 64, size, size), dtype=np.float32)
        w = rng.standard_normal((64, 64, 3, 3), dtype=np.float32)
        return lambda: conv2d_im2col(x, w)
    raise SystemExit(f"unknown case {name}")


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info

        info = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        if info:
            return f"{info[0].get('internal_api')} {info[0].get('architecture')} x{info[0].get('num_threads')}"
    except ImportError:
        pass
    return "openblas (install threadpoolctl to see its kernel)"


if __name__ == "__main__":
    name, size = sys.argv[1], int(sys.argv[2])
    median, best = seconds(case(name, size))
    print(json.dumps({"seconds": median, "best": best, "blas": blas_info()}))
