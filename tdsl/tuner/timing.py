"""Timing that load changing over time cannot skew: `interleaved` (functions take turns).

The tuner re-times its best candidates with it (measure_child's `retime` request) and the
benchmarks time tdsl against numpy with it (bench/timing.py re-exports it)."""
from __future__ import annotations

import time
from collections.abc import Callable


def calls_per_sample(fn: Callable[[], object], min_time: float, clock: Callable[[], float] = time.perf_counter,
                     most: int = 1 << 12) -> int:
    """How many calls of `fn` (already warmed up) make a sample of at least `min_time` seconds."""
    number = 1
    while True:
        start = clock()
        for _ in range(number):
            fn()
        if clock() - start >= min_time or number >= most:
            return number
        number *= 2


def interleaved(fns: list[Callable[[], object]], repeat: int, clock: Callable[[], float] = time.perf_counter,
                min_time: float = 0.02, block_time: float = 0.15, per_round: list | None = None) -> list[float]:
    """Minimum seconds per call of each function. The functions take turns (`repeat` rounds),
    so that all see the same load; in its turn a function runs for `block_time` seconds and
    at least 3 samples, each of enough calls to last `min_time`, and only its best sample counts.
    The blocks matter with two threaded libraries in one process: after a call OpenBLAS's
    threads keep spinning for up to ~0.1 s, taking a core from whatever runs next, so a
    strict call-by-call alternation measures tdsl on one core. `per_round`, when given, gets one
    list per function of its best sample in each round."""
    numbers = []
    for fn in fns:
        fn()
        numbers.append(calls_per_sample(fn, min_time, clock))
    best = [float("inf")] * len(fns)
    rounds: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for k, (fn, number) in enumerate(zip(fns, numbers)):
            block_start, samples, block_best = clock(), 0, float("inf")
            while True:
                start = clock()
                for _ in range(number):
                    fn()
                end = clock()
                block_best = min(block_best, (end - start) / number)
                samples += 1
                if end - block_start >= block_time and samples >= 3:
                    break
            rounds[k].append(block_best)
            best[k] = min(best[k], block_best)
    if per_round is not None:
        per_round[:] = rounds
    return best
