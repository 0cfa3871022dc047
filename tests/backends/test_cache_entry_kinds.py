"""Issue 22: a disk-cache entry that is not a regular file (a FIFO, a symlink to /dev/zero, a
sparse file of gigabytes) is ignored: the build neither blocks nor reads without end, it compiles instead and
rewrites the entry. Each build runs in a child process with a timeout so a hang fails the test."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = """
import numpy as np, tdsl
f = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi] * 2.0
''')
k = tdsl.build(f)
a = np.arange(8, dtype="float32")
assert (k(a) == a * 2).all()
print("FROM_CACHE", k.from_cache)
"""


def _build(root: str) -> str:
    env = dict(os.environ, TDSL_CACHE_DIR=root, PYTHONPATH=ROOT)
    env.pop("TDSL_DISABLE_DISK_CACHE", None)
    try:
        done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                              timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("tdsl.build hung on a cache entry that is not a regular file")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "huge_sparse"])
def test_entry_that_is_not_a_regular_file_is_rebuilt(tmp_path, kind):
    root = str(tmp_path)
    assert "FROM_CACHE False" in _build(root)
    (path,) = glob.glob(os.path.join(root, "*", "*.tdslobj"))
    os.remove(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", path)
    else:   # a sparse file far larger than any entry: not read
        with open(path, "wb") as fh:
            fh.truncate(3 << 30)
    assert "FROM_CACHE False" in _build(root)
    assert os.path.isfile(path) and not os.path.islink(path), "the entry was not rewritten"
    assert "FROM_CACHE True" in _build(root)
