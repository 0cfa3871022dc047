"""CUDA backend tests: a private disk cache, and `cuda_kernels` (the shared GPU kernels) importable."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True, scope="session")
def _private_cuda_cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TDSL_CACHE_DIR", str(tmp_path_factory.mktemp("tdsl-cuda-cache")))
    yield
    mp.undo()
