"""Every corpus kernel builds for the CPU and matches its numpy reference (symbolic ones at several sizes)."""
import numpy as np
import pytest
from corpus import CORPUS, SYMBOLIC_SIZES, check_case

import tdsl


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_corpus_kernel_builds_and_matches(case):
    kernel = tdsl.build(case.func)
    check_case(case, lambda func, *args: kernel(*args))
    if case.symbolic:
        for n in SYMBOLIC_SIZES:
            check_case(case, lambda func, *args: kernel(*args), args=case.sizes(n)(np.random.default_rng(n)))


@pytest.mark.parametrize("case", [c for c in CORPUS if c.name in ("softmax", "matmul", "conv2d_nchw", "row_sum")],
                         ids=lambda c: c.name)
def test_corpus_kernel_with_bounds_checks(case):
    kernel = tdsl.build(case.func, bounds_check=True)
    check_case(case, lambda func, *args: kernel(*args))
