"""The fastest of a block's library, tensorized and generated schedules, measured.

``fastest(sch, block, args, target)`` takes `sch` ("generated") and its candidates for `block`
(`tdsl.auto.candidates.candidates`), builds each, checks that it computes what `sch`
computes on `args` (a candidate that differs is dropped) and times it; fastest first.

    >>> ranked = fastest(sch, "C", (a, b))
    >>> ranked[0].label, ranked[0].seconds              # e.g. ('library:blas.sgemm', 0.0151)
"""
from __future__ import annotations

import numpy as np

from ..auto.candidates import Candidate, candidates


def fastest(sch, block, args, target: str = "cpu", rtol: float = 1e-3) -> list[Candidate]:
    """See the module docstring."""
    from . import build

    found, _ = candidates(sch, block, target)
    ranked = [Candidate("generated", "generated", sch)] + found
    reference = None
    for cand in ranked:
        kernel = build(cand.schedule, target=target)
        copies = [np.copy(a) if isinstance(a, np.ndarray) else a for a in args]
        result = kernel(*copies)
        if result is None:   # every buffer passed: compare what the kernel wrote
            result = tuple(c for c in copies if isinstance(c, np.ndarray))
        result = result if isinstance(result, tuple) else (result,)
        if reference is None:
            reference = result
        elif not all(np.allclose(r, q, rtol=rtol, atol=rtol) for r, q in zip(result, reference)):
            continue
        cand.seconds = kernel.time(*args)
    timed = [c for c in ranked if c.seconds is not None]
    return sorted(timed, key=lambda c: c.seconds or 0.0)
