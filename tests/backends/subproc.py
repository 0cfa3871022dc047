"""Run a probe that could crash the process (a segfault before its fix) in a child process."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_probe(code: str, timeout: float = 120) -> str:
    """Run `code` in a fresh interpreter with this checkout's tdsl; returns its stdout; fails the
    test with the child's stderr when it dies (a signal) or exits non-zero."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.path.join(ROOT, "tests"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        how = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
        raise AssertionError(f"probe {how}:\n{done.stderr[-3000:]}")
    return done.stdout
