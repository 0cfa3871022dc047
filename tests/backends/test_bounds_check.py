"""bounds_check=True turns a bad index into tdsl.BoundsError; a provably bad one fails the build."""
import numpy as np
import pytest

import tdsl
from tdsl import BoundsError

GATHER = '''
@T.prim_func
def gather(data: T.Buffer((10, 8), "float32"), index: T.Buffer((6,), "int32"), out: T.Buffer((6, 8), "float32")):
    for i in T.parallel(6):
        for j in range(8):
            with T.block("g"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, vj] = data[index[vi], vj]
'''


def test_runtime_bounds_error_names_the_buffer(rng):
    kernel = tdsl.build(tdsl.parse(GATHER), bounds_check=True)
    data = rng.standard_normal((10, 8)).astype(np.float32)
    good = np.array([0, 9, 3, 3, 1, 2], np.int32)
    np.testing.assert_array_equal(kernel(data, good), data[good])
    for bad in (10, -1, 1 << 20):
        index = good.copy()
        index[4] = bad
        with pytest.raises(BoundsError, match="'data'") as info:
            kernel(data, index)
        assert isinstance(info.value, IndexError)
    np.testing.assert_array_equal(kernel(data, good), data[good])   # still usable afterwards


def test_bounds_check_is_off_by_default_and_changes_the_code():
    func = tdsl.parse(GATHER)
    checked, plain = tdsl.build(func, bounds_check=True), tdsl.build(func)
    assert checked.source.count("fail") > plain.source.count("fail")   # blocks that return an error code


def test_guarded_accesses_pass_the_checks(rng):
    pad = tdsl.build(tdsl.parse('''
@T.prim_func
def pad(A: T.Buffer((16,), "float32"), B: T.Buffer((18,), "float32")):
    for i in range(18):
        with T.block("b"):
            vi = T.axis.spatial(18, i)
            B[vi] = T.if_then_else(vi >= 1 and vi < 17, A[vi - 1], T.float32(0))
'''), bounds_check=True)
    a = rng.standard_normal(16).astype(np.float32)
    np.testing.assert_array_equal(pad(a), np.pad(a, 1))


def test_provably_out_of_bounds_access_is_a_build_error():
    func = tdsl.parse('''
@T.prim_func
def shifted(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.block("b"):
            vi = T.axis.spatial(16, i)
            B[vi] = A[vi + 1]
''')
    with pytest.raises(BoundsError) as info:
        tdsl.build(func)
    msg = str(info.value)
    assert "'A'" in msg and "[1, 16]" in msg and "16 elements" in msg
