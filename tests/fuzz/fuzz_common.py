"""Shared knobs and checks of the fuzz tests.

`TDSL_FUZZ_DEEP=1` (or any integer N > 1) multiplies every example count (by 20, or by N) and
lets hypothesis pick fresh random examples; without it every test runs a fixed, derandomized
set so CI is reproducible.
"""
from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, Phase, settings

import tdsl


def deep_factor() -> int:
    """How much the deep mode multiplies example counts (1 when off)."""
    raw = os.environ.get("TDSL_FUZZ_DEEP", "").strip()
    if raw in ("", "0"):
        return 1
    return int(raw) if raw.isdigit() and int(raw) > 1 else 20


def examples(n: int) -> int:
    """`n` examples in CI, more in the deep mode."""
    return n * deep_factor()


def fuzz_settings(n: int) -> settings:
    """Hypothesis settings for a fuzz test with `n` examples in CI."""
    deep = deep_factor() > 1
    # no shrinking: shrinking a schedule sequence can take many minutes; the failing example
    # is printed as drawn, with its @reproduce_failure blob
    return settings(max_examples=examples(n), deadline=None, derandomize=not deep, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate])


def run_interpreter(func, args: list) -> list:
    """Interpret `func` on copies of `args`; returns the arguments after the run."""
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    tdsl.interpret(func, *copies)
    return copies


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, what: str) -> None:
    """Exact for integers; within tolerance for floats (NaN equal to NaN)."""
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.shape}/{got.dtype} vs {want.shape}/{want.dtype}"
    if got.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=what)


def assert_roundtrip(func) -> None:
    """The printed script parses back to a structurally equal function."""
    text = func.script()
    back = tdsl.parse(text)
    diff = tdsl.structural_diff(func, back)
    assert diff is None, f"print/parse round trip differs: {diff}\n{text}"
