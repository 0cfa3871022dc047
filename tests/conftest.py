"""Shared pytest fixtures; puts tests/ on sys.path so every test module can
`from corpus import CORPUS, check_case` (the shared kernel corpus)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator: tests are reproducible."""
    return np.random.default_rng(0)
