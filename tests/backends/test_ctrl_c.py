"""Issue 22: Ctrl-C stops a running parallel kernel between chunks (backends/llvm/runtime.py):
KeyboardInterrupt reaches the caller and the process stays usable. In a child process that
the test sends SIGINT, as a terminal would."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from backends.subproc import ROOT

CHILD = r'''
import signal
import time
import numpy as np
import tdsl

# a process started in the background by a non-interactive shell inherits SIGINT ignored (and
# then Ctrl-C rightly does nothing): this child stands for an interactive Python
signal.signal(signal.SIGINT, signal.default_int_handler)
spin = tdsl.build(tdsl.parse("""
@T.prim_func
def spin(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i in T.parallel(2**40):
        with T.block("b"):
            vi = T.axis.spatial(2**40, i)
            B[vi % 64] = A[vi % 64] * T.float32(2)
"""))
add = tdsl.build(tdsl.parse("""
@T.prim_func
def add(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    for i in T.parallel(8):
        with T.block("b"):
            vi = T.axis.spatial(8, i)
            B[vi] = A[vi] + T.float32(1)
"""))
print("ready", flush=True)
t = time.perf_counter()
try:
    spin(np.ones(64, "float32"))
    print("finished")
except KeyboardInterrupt:
    print("interrupted", round(time.perf_counter() - t, 1), flush=True)
print("after", add(np.ones(8, "float32")).tolist(), flush=True)
try:                       # a second Ctrl-C interrupts again
    spin(np.ones(64, "float32"))
except KeyboardInterrupt:
    print("interrupted again", flush=True)
'''


def test_ctrl_c_interrupts_a_parallel_kernel():
    import queue
    import threading

    env = dict(os.environ, PYTHONPATH=ROOT)
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    got: queue.Queue = queue.Queue()
    assert child.stdout is not None
    stdout = child.stdout
    threading.Thread(target=lambda: [got.put(line.strip()) for line in stdout], daemon=True).start()

    def interrupt() -> str:
        """Ctrl-C every 0.5 s until the child answers (a signal that lands while the runtime
        starts, before its handler is chained, only sets CPython's flag); at most 60 s."""
        for _ in range(120):
            try:
                return got.get(timeout=0.5)
            except queue.Empty:
                child.send_signal(signal.SIGINT)
        raise AssertionError("the kernel did not stop on Ctrl-C within 60 s")

    try:
        assert got.get(timeout=120) == "ready", child.stderr.read() if child.stderr else ""
        lines = [interrupt()]
        lines.append(got.get(timeout=60))
        lines.append(interrupt())
        child.wait(timeout=60)
        err = child.stderr.read() if child.stderr else ""
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err[-3000:]
    assert lines[0].startswith("interrupted "), (lines, err)
    assert lines[1] == "after [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]", lines
    assert lines[2] == "interrupted again", (lines, err)
