"""Fuzz tests use a private disk cache, so they neither read nor fill the user's."""
import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TDSL_CACHE_DIR", str(tmp_path_factory.mktemp("tdsl-fuzz-cache")))
    yield
    mp.undo()
