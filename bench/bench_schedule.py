"""Median time of each schedule primitive on a 3-block kernel (goal: <= 5 ms each).

    python bench/bench_schedule.py [--repeat N]

Each sample builds a fresh schedule up to the step (not timed) and times the one call.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import tdsl

KERNEL = '''
@T.prim_func
def mlp(A: T.Buffer((128, 128), "float32"), W: T.Buffer((128, 128), "float32"),
        D: T.Buffer((128, 128), "float32")):
    C = T.alloc_buffer((128, 128), "float32")
    E = T.alloc_buffer((128, 128), "float32")
    for i, j, k in T.grid(128, 128, 128):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * W[vk, vj]
    for i, j in T.grid(128, 128):
        with T.block("E"):
            vi, vj = T.axis.remap("SS", [i, j])
            E[vi, vj] = T.max(C[vi, vj], T.float32(0))
    for i, j in T.grid(128, 128):
        with T.block("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = E[vi, vj] + A[vi, vj]
'''

GOAL_MS = 5.0


def _tiled(sch):
    """The matmul block split into i0, j0, k, i1, j1 (handles returned)."""
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, factors=[None, 8])
    j0, j1 = sch.split(j, factors=[None, 16])
    return i0, i1, j0, j1, k


# name -> (setup(sch) -> args, call(sch, *args))
CASES: dict[str, tuple[Callable, Callable]] = {
    "get_block": (lambda s: (), lambda s: s.get_block("E")),
    "get_loops": (lambda s: (s.get_block("C"),), lambda s, b: s.get_loops(b)),
    "get_child_blocks": (lambda s: (s.get_block("root"),), lambda s, b: s.get_child_blocks(b)),
    "get_producers": (lambda s: (s.get_block("D"),), lambda s, b: s.get_producers(b)),
    "get_consumers": (lambda s: (s.get_block("C"),), lambda s, b: s.get_consumers(b)),
    "split": (lambda s: (s.get_loops(s.get_block("C"))[0],), lambda s, i: s.split(i, factors=[None, 32])),
    "split (non-dividing)": (lambda s: (s.get_loops(s.get_block("C"))[2],),
                             lambda s, k: s.split(k, factors=[None, 3, 7])),
    "fuse": (lambda s: tuple(s.get_loops(s.get_block("C"))[:2]), lambda s, i, j: s.fuse(i, j)),
    "reorder": (lambda s: _tiled(s), lambda s, i0, i1, j0, j1, k: s.reorder(i0, j0, k, i1, j1)),
    "parallel": (lambda s: (s.get_loops(s.get_block("C"))[0],), lambda s, i: s.parallel(i)),
    "vectorize": (lambda s: (s.get_loops(s.get_block("E"))[1],), lambda s, j: s.vectorize(j)),
    "unroll": (lambda s: (s.get_loops(s.get_block("C"))[2],), lambda s, k: s.unroll(k)),
    "bind": (lambda s: (s.get_loops(s.get_block("D"))[0],), lambda s, i: s.bind(i, "blockIdx.x")),
    "annotate": (lambda s: (s.get_block("C"),), lambda s, b: s.annotate(b, "note", 1)),
    "unannotate": (lambda s: _annotated(s), lambda s, b: s.unannotate(b, "note")),
    "undo": (lambda s: _one_step(s), lambda s: s.undo()),
    "copy": (lambda s: (), lambda s: s.copy()),
    "refused split": (lambda s: (s.get_loops(s.get_block("C"))[0],), lambda s, i: _refused(s, i)),
}


def _annotated(sch):
    block = sch.get_block("C")
    sch.annotate(block, "note", 1)
    return (block,)


def _one_step(sch):
    sch.unroll(sch.get_loops(sch.get_block("C"))[2])
    return ()


def _refused(sch, loop):
    try:
        sch.split(loop, factors=[3, 5])
    except tdsl.ScheduleError:
        return
    raise AssertionError("the split should have been refused")


def measure(func, repeat: int) -> dict[str, float]:
    """Median milliseconds of each case."""
    out = {}
    for name, (setup, call) in CASES.items():
        samples = []
        for _ in range(repeat):
            sch = tdsl.Schedule(func)
            args = setup(sch)
            t0 = time.perf_counter()
            call(sch, *args)
            samples.append((time.perf_counter() - t0) * 1e3)
        out[name] = statistics.median(samples)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    func = tdsl.parse(KERNEL)
    results = measure(func, args.repeat)
    width = max(map(len, results))
    print(f"{'primitive':<{width}}  median ms  goal <= {GOAL_MS} ms")
    for name, ms in results.items():
        print(f"{name:<{width}}  {ms:9.3f}  {'ok' if ms <= GOAL_MS else 'SLOW'}")


if __name__ == "__main__":
    main()
