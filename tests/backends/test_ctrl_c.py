"""Issue 22: Ctrl-C stops a running parallel kernel between chunks (backends/llvm/runtime.py):
KeyboardInterrupt reaches the caller and the process stays usable. In a child process that
the test sends SIGINT, as a terminal would."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from backends.subproc import ROOT

CHILD = r'''
import time
import numpy as np
import tdsl

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
    env = dict(os.environ, PYTHONPATH=ROOT)
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", child.stderr.read() if child.stderr else ""
        lines = []
        for _ in range(2):
            time.sleep(0.5)            # the kernel is running
            child.send_signal(signal.SIGINT)
            lines.append(child.stdout.readline().strip())
            if lines[-1].startswith("interrupted "):
                lines.append(child.stdout.readline().strip())
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err[-3000:]
    assert lines[0].startswith("interrupted "), (lines, err)
    assert lines[1] == "after [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]", lines
    assert lines[2] == "interrupted again", (lines, err)
