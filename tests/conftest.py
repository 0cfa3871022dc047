"""Shared pytest fixtures. Loading this file puts tests/ on sys.path (pytest's rootdir-relative
import mode), so every test module can `from corpus import CORPUS, check_case`."""
import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator: tests are reproducible."""
    return np.random.default_rng(0)
