"""Issue 22: sizes past int32 are not truncated (a 2**40-element buffer "had 0 elements"; a valid
2 GiB uint8 parameter failed bounds_check=True against "[0, -2147483648)")."""
from __future__ import annotations

import pytest

import tdsl


def test_build_time_bounds_message_has_the_true_size():
    with pytest.raises(tdsl.BoundsError, match="the buffer has 1099511627776 elements there"):
        tdsl.build(tdsl.parse('''
@T.prim_func
def g(A: T.Buffer((2**40,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi - 1]
'''))


def test_run_time_check_of_a_2_gib_parameter_uses_its_true_extent():
    kernel = tdsl.build(tdsl.parse('''
@T.prim_func
def g(A: T.Buffer((2**31,), "uint8"), B: T.Buffer((1,), "uint8")):
    for i in range(1):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[2**31 - 1]
'''), bounds_check=True)
    extents = [c["extent"] for c in kernel._checks if c["buffer"] == "A"]
    assert extents and all("2147483648" in e and "-" not in e for e in extents), extents
