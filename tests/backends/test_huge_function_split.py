"""Issue 22: a huge kernel body is split into several LLVM functions (backends/llvm/split.py),
so its build time grows linearly; the split kernel computes what numpy does."""
from __future__ import annotations

import pathlib
import re
import sys

import numpy as np

import tdsl
from tdsl.backends.llvm.split import HUGE_BODY, PART_SIZE, Sizes, groups
from tdsl.ir import SeqStmt

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent.parent / "bench"))

from bench_big_function import blocks_program, blocks_reference  # noqa: E402


def test_300_blocks_build_as_several_llvm_functions_and_match_numpy():
    n = 300
    kernel = tdsl.build(tdsl.parse(blocks_program(n)))
    parts = re.findall(r"define internal i32 @\"?\w+_part\d+\"?\(", kernel.source)
    assert len(parts) >= 4, kernel.source[:2000]
    assert any("split into" in note and "LLVM functions" in note for note in kernel.notes), kernel.notes
    a = ((np.arange(n * 16).reshape(n, 16) % 7 + 4) / 6).astype("float32")
    np.testing.assert_allclose(kernel(a), blocks_reference(n, a), rtol=1e-5, atol=1e-6)


def test_small_kernels_are_not_split():
    kernel = tdsl.build(tdsl.parse(blocks_program(20)))
    assert "_part0" not in kernel.source
    assert not any("split into" in note for note in kernel.notes)


def test_a_failure_inside_a_part_is_returned_by_the_kernel():
    # a gather index checked at run time (lower/index_checks.py) in the last of many parts
    n = 300
    text = blocks_program(n).replace('B: T.Buffer((16,), "float32")',
                                     'I: T.Buffer((16,), "int32"), B: T.Buffer((16,), "float32")')
    text = text.replace(f"B[vi] = C[{n - 2}, vi]", f"B[vi] = C[{n - 2}, I[vi]]")
    kernel = tdsl.build(tdsl.parse(text))
    assert "_part" in kernel.source
    a = np.ones((n, 16), "float32")
    index = np.arange(16, dtype="int32")
    np.testing.assert_allclose(kernel(a, index), blocks_reference(n, a), rtol=1e-5)
    index[3] = 99
    try:
        kernel(a, index)
    except tdsl.BoundsError as exc:
        assert "I" in str(exc) or "C" in str(exc)
    else:
        raise AssertionError("the out-of-bounds gather in a split part was not reported")


def test_groups_bound_each_outlined_run():
    func = tdsl.lower(tdsl.parse(blocks_program(300)))
    body = func.body
    while not isinstance(body, SeqStmt):
        body = body.body
    sizes = Sizes()
    assert sizes(body) > HUGE_BODY
    runs = groups(body.seq, sizes, PART_SIZE)
    assert [s for _, run in runs for s in run] == list(body.seq)   # every statement once, in order
    assert all(sum(sizes(s) for s in run) <= PART_SIZE for outline, run in runs if outline)
    assert sum(outline for outline, _ in runs) >= 4
