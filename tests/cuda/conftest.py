"""CUDA backend tests: a private disk cache, `cuda_kernels` (the shared GPU kernels) importable,
emulated kernels compiled at -O0."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
# the emulator's test problems are small: compile them at -O0 (about twice as fast to build)
os.environ.setdefault("TDSL_EMU_OPT", "0")


@pytest.fixture(autouse=True, scope="session")
def _private_cuda_cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TDSL_CACHE_DIR", str(tmp_path_factory.mktemp("tdsl-cuda-cache")))
    yield
    mp.undo()
