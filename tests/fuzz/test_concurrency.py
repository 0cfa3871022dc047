"""Concurrency: 8 threads calling kernels (and building, and interpreting) at once.

Every thread checks its own results against the reference, so a race in argument binding,
output allocation, the parallel runtime, the compile cache or the interpreter's cache shows
up as a wrong answer or an exception in some thread.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from corpus import CORPUS, check_case
from fuzz.fuzz_common import examples

import tdsl

THREADS = 8
NAMES = ["add_broadcast", "matmul", "row_sum", "scale", "loop_kinds", "add_symbolic", "matvec_accumulate",
         "compare_mask"]
CASES = [c for c in CORPUS if c.name in NAMES]


def _run_all(work) -> None:
    """Run work(thread_index) on THREADS threads released together; re-raise the first error."""
    barrier = threading.Barrier(THREADS)

    def task(t: int):
        barrier.wait()
        return work(t)

    with ThreadPoolExecutor(THREADS) as pool:
        for future in [pool.submit(task, t) for t in range(THREADS)]:
            future.result()


def test_threads_calling_kernels_at_once():
    kernels = {c.name: tdsl.build(c.func, target="cpu") for c in CASES}
    rounds = examples(25)

    def work(t: int) -> None:
        rng = np.random.default_rng(t)
        for r in range(rounds):
            case = CASES[(t + r) % len(CASES)]
            args = case.sizes(int(rng.integers(1, 40)))(rng) if case.symbolic else case.inputs(rng)
            check_case(case, lambda _f, *a, name=case.name: kernels[name](*a), args=args)

    _run_all(work)


def test_threads_sharing_inputs_and_allocating_outputs():
    """All threads read the same input arrays and let the kernel allocate the outputs."""
    case = next(c for c in CASES if c.name == "matmul")
    kernel = tdsl.build(case.func, target="cpu")
    a, b, _ = case.inputs(np.random.default_rng(0))
    a.setflags(write=False)
    b.setflags(write=False)
    want = a.astype(np.float64) @ b.astype(np.float64)

    def work(t: int) -> None:
        for _ in range(examples(40)):
            np.testing.assert_allclose(kernel(a, b), want, rtol=1e-4, atol=1e-4)

    _run_all(work)


def test_threads_building_the_same_new_kernel():
    """Eight threads build one kernel nobody built before; all get a correct kernel."""
    text = '''
@T.prim_func
def concurrent_build(A: T.Buffer((24, 5), "float32"), B: T.Buffer((24,), "float32")):
    for i, k in T.grid(24, 5):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(1.5)
            B[vi] = B[vi] + A[vi, vk] * T.float32(2)
'''
    func = tdsl.parse(text)
    a = np.random.default_rng(0).standard_normal((24, 5)).astype("float32")
    want = 1.5 + 2 * a.astype(np.float64).sum(axis=1)

    def work(t: int) -> None:
        kernel = tdsl.build(func, target="cpu")
        np.testing.assert_allclose(kernel(a), want, rtol=1e-5, atol=1e-5)

    _run_all(work)


def test_threads_interpreting_at_once():
    """The interpreter (the test oracle) is safe to call from several threads."""
    cases = [c for c in CASES if not c.symbolic]

    def work(t: int) -> None:
        for r in range(examples(6)):
            check_case(cases[(t + r) % len(cases)], tdsl.interpret, rng=np.random.default_rng(t))

    _run_all(work)
