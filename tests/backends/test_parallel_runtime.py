"""The parallel runtime: correct results on the pool, concurrency from Python threads, nesting."""
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
