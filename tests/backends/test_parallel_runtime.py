"""The parallel runtime: correct results on the pool, concurrency from Python threads, nesting."""
import functools
import subprocess
import sys
import threading

import numpy as np

import tdsl

ROWSUM = '''
@T.prim_func
def rowsum(A: T.Buffer(("n", 256), "float32"), B: T.Buffer(("n",), "float32")):
    for i in T.parallel("n"):
        for k in range(256):
            with T.block("B"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] = B[vi] + A[vi, vk]
'''


def _rowsum():
    return tdsl.build(tdsl.parse(ROWSUM.replace('T.parallel("n")', "T.parallel(n)")))


def test_parallel_loop_results_for_many_sizes(rng):
    kernel = _rowsum()
    assert "_par0" in kernel.source   # the loop body was outlined onto the thread pool
    for n in (1, 2, 3, 7, 64, 1001):
        a = rng.standard_normal((n, 256)).astype(np.float32)
        np.testing.assert_allclose(kernel(a), a.sum(axis=1), rtol=1e-4, atol=1e-4)


def test_eight_python_threads_call_one_parallel_kernel(rng):
    kernel = _rowsum()
    inputs = [rng.standard_normal((97 + t, 256)).astype(np.float32) for t in range(8)]
    errors: list = []

    def work(t):
        try:
            for _ in range(30):
                out = kernel(inputs[t])
                np.testing.assert_allclose(out, inputs[t].sum(axis=1), rtol=1e-4, atol=1e-4)
        except Exception as exc:  # noqa: BLE001 - collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]


def test_nested_parallel_loops_and_heap_buffer_per_iteration(rng):
    func = tdsl.parse('''
@T.prim_func
def nested(A: T.Buffer((16, 8, 4096), "float32"), B: T.Buffer((16, 8, 4096), "float32")):
    for i in T.parallel(16):
        for j in T.parallel(8):
            for k in range(4096):
                with T.block("B"):
                    vi, vj, vk = T.axis.remap("SSS", [i, j, k])
                    B[vi, vj, vk] = A[vi, vj, vk] * T.float32(3) + T.float32(1)
''')
    kernel = tdsl.build(func)
    a = rng.standard_normal((16, 8, 4096)).astype(np.float32)
    np.testing.assert_allclose(kernel(a), a * 3 + 1, rtol=1e-6)


def test_parallel_loop_with_intermediate_buffer(rng):
    func = tdsl.parse('''
@T.prim_func
def two_stage(A: T.Buffer((64, 8192), "float32"), B: T.Buffer((64, 8192), "float32")):
    T_tmp = T.alloc_buffer((64, 8192), "float32")
    for i in T.parallel(64):
        for j in range(8192):
            with T.block("t"):
                vi, vj = T.axis.remap("SS", [i, j])
                T_tmp[vi, vj] = A[vi, vj] + T.float32(1)
        for j in range(8192):
            with T.block("b"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = T_tmp[vi, vj] * T_tmp[vi, vj]
''')
    kernel = tdsl.build(func)
    a = rng.standard_normal((64, 8192)).astype(np.float32)
    np.testing.assert_allclose(kernel(a), (a + 1) ** 2, rtol=1e-6)


def test_pool_survives_fork_and_single_thread_setting():
    code = '''
import os, numpy as np, tdsl
src = """ROWSUM_SOURCE"""
k = tdsl.build(tdsl.parse(src.replace('T.parallel("n")', "T.parallel(n)")))
a = np.ones((50, 256), np.float32)
assert np.allclose(k(a), 256)
pid = os.fork()
if pid == 0:
    ok = np.allclose(k(a), 256)
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
print("ok")
'''.replace("ROWSUM_SOURCE", ROWSUM)
    for env_threads in ("1", ""):
        env = {"TDSL_NUM_THREADS": env_threads, "TDSL_DISABLE_DISK_CACHE": "1"}
        import os

        proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120,
                              env={**os.environ, **env})
        assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


CHUNKS = '''
import ctypes, json, sys, threading
from tdsl.backends.llvm import runtime
launch = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(runtime.launch_address())
body = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
out = {"runs": {}}
alive = []   # every body stays alive, so no two share an address
for n in json.loads(sys.argv[1]):
    chunks = []
    alive.append(body(lambda lo, hi, cl: chunks.append((lo, hi, cl))))
    launch(ctypes.cast(alive[-1], ctypes.c_void_p), ctypes.c_void_p(0x5a5a), n)
    out["runs"][str(n)] = sorted(chunks)
print(json.dumps(out))
'''

SIZES = [-3, 0, 1, 2, 3, 4, 5, 7, 8, 9, 31, 64, 100, 1001, 4096, 100003, 2 ** 32 + 5]


@functools.cache
def _chunks(threads: int) -> dict:
    """The chunks the runtime cuts loops of SIZES into, driven from ctypes with `threads` threads."""
    import json
    import os

    env = {**os.environ, "TDSL_NUM_THREADS": str(threads)}
    proc = subprocess.run([sys.executable, "-c", CHUNKS, json.dumps(SIZES)], capture_output=True, text=True,
                          timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_iteration_runs_exactly_once_for_any_size_and_thread_count():
    for threads in (1, 2, 3, 5):
        runs = _chunks(threads)["runs"]
        for n in SIZES:
            chunks = runs[str(n)]
            assert all(cl == 0x5A5A for _, _, cl in chunks), (threads, n)
            # sorted chunks tile [0, n): no iteration skipped or run twice
            ends = [0] + [hi for _, hi, _ in chunks]
            assert [lo for lo, _, _ in chunks] == ends[:-1], (threads, n, chunks[:8])
            assert all(lo < hi for lo, hi, _ in chunks), (threads, n)
            assert ends[-1] == max(n, 0), (threads, n)


def test_chunks_shrink_towards_the_end_and_stay_bounded():
    runs = _chunks(2)["runs"]
    chunks = [hi - lo for lo, hi, _ in runs["100003"]]
    assert len(chunks) > 8                       # more than the 4 chunks per thread of a static split
    assert max(chunks) <= -(-100003 // 8)        # none is more than 1/(4 * threads) of the loop
    assert min(chunks[:-1]) >= 100003 // 64      # nor, but the very last, less than 1/(32 * threads)
    assert chunks[:-1] == sorted(chunks[:-1], reverse=True)   # in loop order, never growing
    # a loop over more than 2**31 iterations runs as regions of at most 2**31
    big = runs[str(2 ** 32 + 5)]
    assert all(hi - lo <= 2 ** 31 for lo, hi, _ in big)
    assert any(lo == 2 ** 31 for lo, _, _ in big) and any(lo == 2 ** 32 for lo, _, _ in big)

