"""Disk-cache fuzzing: truncated, corrupted, swapped or missing entries in TDSL_CACHE_DIR.

A damaged entry must never be trusted: the kernel is rebuilt (not loaded from disk), gives the
right answer, and the entry is rewritten intact so the next build loads it again.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from corpus import CORPUS, check_case
from fuzz.fuzz_common import fuzz_settings
from hypothesis import assume, given
from hypothesis import strategies as st

import tdsl
from tdsl.backends import cache as _cache  # clear_memory(): forces the next build to read the disk

RELU = next(c for c in CORPUS if c.name == "relu")
OTHER = next(c for c in CORPUS if c.name == "add_broadcast")


def _entries(root: str) -> list[str]:
    return sorted(glob.glob(os.path.join(root, "*", "*.tdslobj")))


def _fresh_build(case):
    _cache.clear_memory()
    return tdsl.build(case.func, target="cpu")


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    """A private cache holding exactly the entries of RELU and OTHER."""
    root = str(tmp_path_factory.mktemp("tdsl-cache-fuzz"))
    mp = pytest.MonkeyPatch()
    mp.setenv("TDSL_CACHE_DIR", root)
    _fresh_build(OTHER)
    other_path = _entries(root)[0]
    _fresh_build(RELU)
    relu_path = next(p for p in _entries(root) if p != other_path)
    with open(relu_path, "rb") as fh, open(other_path, "rb") as gh:
        yield _Entries(root, relu_path, fh.read(), gh.read())
    mp.undo()


class _Entries:
    """The cache under test; its repr stays short in hypothesis reports."""

    def __init__(self, root: str, path: str, pristine: bytes, other: bytes):
        self.root, self.path, self.pristine, self.other = root, path, pristine, other

    def __repr__(self) -> str:
        return f"<cache {self.root}>"


def _corrupt(data: bytes, other: bytes, mode: str, where: float, byte: int) -> bytes | None:
    """The damaged content (None: remove the file)."""
    at = min(int(where * len(data)), len(data) - 1)
    if mode == "truncate":
        return data[:at]
    if mode == "flip":
        return data[:at] + bytes([data[at] ^ byte]) + data[at + 1:]
    if mode == "zero_tail":
        return data[:at] + bytes(len(data) - at)
    if mode == "append":
        return data + bytes([byte]) * 17
    if mode == "garbage":
        return bytes((i * 131 + byte) % 256 for i in range(len(data)))
    if mode == "other_entry":
        return other
    if mode == "empty":
        return b""
    return None


@fuzz_settings(25)
@given(mode=st.sampled_from(["truncate", "flip", "zero_tail", "append", "garbage", "other_entry", "empty",
                             "missing", "directory", "fifo", "dev_zero", "symlink_to_other"]),
       where=st.floats(0, 1), byte=st.integers(1, 255))
def test_damaged_entry_is_rebuilt(cache_root, mode, where, byte):
    path, pristine, other = cache_root.path, cache_root.pristine, cache_root.other
    special = ("directory", "fifo", "dev_zero", "symlink_to_other")
    damaged = None if mode in special else _corrupt(pristine, other, mode, where, byte)
    assume(damaged != pristine)  # e.g. zeroing bytes that are already zero
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)
    if mode == "directory":
        os.makedirs(path)
    elif mode == "fifo":          # issue 22: open() blocked forever on it
        os.mkfifo(path)
    elif mode == "dev_zero":      # issue 22: read without end
        os.symlink("/dev/zero", path)
    elif mode == "symlink_to_other":
        other_path = os.path.join(cache_root.root, "other-entry")
        with open(other_path, "wb") as fh:
            fh.write(other)
        os.symlink(other_path, path)
    elif damaged is not None:
        with open(path, "wb") as fh:
            fh.write(damaged)
    kernel = _fresh_build(RELU)
    assert not kernel.from_cache, f"a {mode} cache entry was trusted"
    check_case(RELU, lambda _f, *args: kernel(*args))
    if mode == "directory":
        shutil.rmtree(path)
        _fresh_build(RELU)
    assert os.path.isfile(path) and not os.path.islink(path) or mode == "directory"
    again = _fresh_build(RELU)
    assert again.from_cache, f"after a {mode} entry was rebuilt, the cache was not rewritten"
    check_case(RELU, lambda _f, *args: again(*args))


def test_new_process_with_corrupted_cache(tmp_path):
    """A fresh process meeting a corrupted entry rebuilds and computes the right answer."""
    tests_dir = os.path.dirname(os.path.dirname(__file__))
    script = (
        f"import sys; sys.path.insert(0, {tests_dir!r})\n"
        "import tdsl\nfrom corpus import CORPUS, check_case\n"
        "case = next(c for c in CORPUS if c.name == 'relu')\n"
        "k = tdsl.build(case.func, target='cpu')\n"
        "check_case(case, lambda _f, *a: k(*a))\nprint('FROM_CACHE', k.from_cache)\n"
    )
    env = dict(os.environ, TDSL_CACHE_DIR=str(tmp_path))
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                           check=False)
    assert first.returncode == 0 and "FROM_CACHE False" in first.stdout, first.stderr[-2000:]
    for path in _entries(str(tmp_path)):
        with open(path, "r+b") as fh:
            data = fh.read()
            fh.seek(len(data) // 2)
            fh.write(bytes(b ^ 0xFF for b in data[len(data) // 2: len(data) // 2 + 64]))
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                           check=False)
    assert second.returncode == 0, f"corrupted cache crashed a new process (rc {second.returncode})\n" \
                                   f"{second.stderr[-2000:]}"
    assert "FROM_CACHE False" in second.stdout
    third = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                           check=False)
    assert third.returncode == 0 and "FROM_CACHE True" in third.stdout, third.stderr[-2000:]


def test_unwritable_cache_dir_still_builds(tmp_path):
    """A cache path that is a file (not a directory) just means no disk cache."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_bytes(b"x")
    mp = pytest.MonkeyPatch()
    mp.setenv("TDSL_CACHE_DIR", str(blocker))
    try:
        kernel = _fresh_build(RELU)
        check_case(RELU, lambda _f, *args: kernel(*args))
    finally:
        mp.undo()
    assert np.all(np.frombuffer(blocker.read_bytes(), np.uint8) == ord("x"))
