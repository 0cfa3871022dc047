"""Timing that two threaded libraries in one process cannot skew: `interleaved`."""
from __future__ import annotations

import time
from collections.abc import Callable


def interleaved(fns: list[Callable[[], object]], repeat: int, clock: Callable[[], float] = time.perf_counter,
                min_time: float = 0.02, block_time: float = 0.15) -> list[float]:
    """Minimum seconds per call of each function. The functions take turns (`repeat` rounds),
    so that all see the same load; in its turn a function runs for `block_time` seconds and
    at least 3 samples, each of enough calls to last `min_time`, and only its best sample counts.
    The blocks matter with two threaded libraries in one process: after a call OpenBLAS's
    threads keep spinning for up to ~0.1 s, taking a core from whatever runs next, so a
    strict call-by-call alternation measures tdsl on one core."""
    numbers = []
    for fn in fns:
        fn()
        number, t = 1, 0.0
        while True:
            start = clock()
            for _ in range(number):
                fn()
            t = clock() - start
            if t >= min_time or number >= 1 << 12:
                break
            number *= 2
        numbers.append(number)
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for k, (fn, number) in enumerate(zip(fns, numbers)):
            block_start, samples = clock(), 0
            while True:
                start = clock()
                for _ in range(number):
                    fn()
                end = clock()
                best[k] = min(best[k], (end - start) / number)
                samples += 1
                if end - block_start >= block_time and samples >= 3:
                    break
    return best
