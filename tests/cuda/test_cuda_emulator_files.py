"""Building an emulated kernel leaves nothing behind but its cache entry: no `tdsl-emu-*`
work directory in the temporary directory, none under the cache directory (issue 16's test
runs had left 604 of them)."""
import os
import shutil
import tempfile

import pytest

import tdsl
from tdsl import T
from tdsl.backends.cuda.emulator import compiler

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                                reason="no host C++ compiler")


def _scale(factor):
    @T.prim_func
    def scale(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        for i in range(64):
            with T.block("B"):
                vi = T.axis.spatial(64, i)
                B[vi] = A[vi] * T.float32(factor)

    sch = tdsl.Schedule(scale)
    io, ii = sch.split(sch.get_loops(sch.get_block("B"))[0], factors=[None, 32])
    sch.bind(io, "blockIdx.x")
    sch.bind(ii, "threadIdx.x")
    return sch


def _entries(path):
    return set(os.listdir(path)) if os.path.isdir(path) else set()


@pytest.mark.parametrize("use_cache", [True, False])
def test_building_leaves_no_work_directory(tmp_path, monkeypatch, use_cache):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)     # re-read TMPDIR
    kernel = tdsl.build(_scale(3.0 + use_cache), target="cuda", emulate=True, use_cache=use_cache)
    import numpy as np

    a = np.arange(64, dtype="float32")
    np.testing.assert_array_equal(kernel(a), a * np.float32(3.0 + use_cache))
    assert _entries(tmp) == set()
    emu = compiler._cache_root()
    leftovers = {e for e in _entries(emu) if not (e.endswith(".so") or e.startswith("pch-"))}
    assert leftovers == set()
    assert (compiler.cache_key(kernel.emulated_source, compiler.find_compiler()) + ".so" in _entries(emu)) == use_cache


def test_a_failed_compile_leaves_no_work_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(tdsl.TargetError, match="rejected the generated CUDA code"):
        compiler.load('#include "cuda_emu.h"\nthis is not C++;\n', use_cache=True)
    assert {e for e in _entries(compiler._cache_root()) if e.startswith("build-")} == set()
    assert _entries(tmp_path) == set()
