"""The compile cache: memory hits, disk hits in a new process, corrupted entries rebuilt."""
import glob
import os
import subprocess
import sys

import tdsl

SRC = '''
@T.prim_func
def scale_add(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i in range(64):
        with T.block("b"):
            vi = T.axis.spatial(64, i)
            B[vi] = A[vi] * T.float32(%s) + T.float32(1)
'''

RUN = '''
import sys, numpy as np, tdsl
k = tdsl.build(tdsl.parse(sys.argv[1]))
a = np.arange(64, dtype=np.float32)
assert np.allclose(k(a), a * float(sys.argv[2]) + 1)
assert "define" in k.source and "define" in k.optimized_ir and "ret" in k.asm   # kept on disk too
print("disk" if k.from_cache else "built")
'''


def _run(cache_dir, factor, extra_env=None):
    env = {**os.environ, "TDSL_CACHE_DIR": str(cache_dir), **(extra_env or {})}
    proc = subprocess.run([sys.executable, "-c", RUN, SRC % factor, factor], check=False, capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def _entries(cache_dir):
    return [p for p in glob.glob(os.path.join(str(cache_dir), "*", "*.tdslobj"))]


def test_memory_cache_returns_the_same_code():
    func = tdsl.parse(SRC % "2.5")
    k1, k2 = tdsl.build(func), tdsl.build(tdsl.parse(SRC % "2.5"))
    assert k1._compiled is k2._compiled       # structurally equal functions share machine code
    assert tdsl.build(tdsl.parse(SRC % "3.5"))._compiled is not k1._compiled


def test_disk_hit_in_a_new_process(tmp_path):
    assert _run(tmp_path, "4.0") == "built"
    assert len(_entries(tmp_path)) == 1
    assert _run(tmp_path, "4.0") == "disk"
    assert _run(tmp_path, "5.0") == "built"


def test_corrupted_and_truncated_entries_are_rebuilt(tmp_path):
    assert _run(tmp_path, "6.0") == "built"
    (entry,) = _entries(tmp_path)
    with open(entry, "rb") as fh:
        data = fh.read()
    middle = len(data) // 2
    flipped = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]
    for bad in (data[:middle], flipped):                     # truncated; one byte changed
        with open(entry, "wb") as fh:
            fh.write(bad)
        assert _run(tmp_path, "6.0") == "built"
        with open(entry, "rb") as fh:
            assert fh.read() == data                           # rewritten intact
    assert _run(tmp_path, "6.0") == "disk"


def test_disk_cache_can_be_disabled(tmp_path):
    assert _run(tmp_path, "7.0", {"TDSL_DISABLE_DISK_CACHE": "1"}) == "built"
    assert _entries(tmp_path) == []
    # run from an empty folder (where a relative cache would land); tdsl found through PYTHONPATH
    root = os.path.dirname(os.path.abspath(tdsl.__file__)).rsplit(os.sep, 1)[0]
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH", "")]))
    env = {**os.environ, "TDSL_CACHE_DIR": "", "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, "-c", RUN, SRC % "7.0", "7.0"], check=False, capture_output=True, text=True,
                          env=env, timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.strip() == "built", proc.stderr[-2000:]
    assert os.listdir(tmp_path) == []
