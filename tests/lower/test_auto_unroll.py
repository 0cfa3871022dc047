"""The `pragma_auto_unroll_max_step` loop annotation: small serial nests inside are unrolled."""
import numpy as np
import pytest

import tdsl
from tdsl.ir import For, collect

ROWSUM = '''
@T.prim_func
def rowsum(A: T.Buffer((16, {k}), "float32"), B: T.Buffer((16,), "float32")):
    for i, k in T.grid(16, {k}):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vk]
'''


@pytest.mark.parametrize("k, step, unrolled", [(8, 16, True), (8, 8, True), (8, 4, False), (32, 16, False),
                                                (8, 0, False)])
def test_inner_loops_within_the_step_are_unrolled(k, step, unrolled):
    f = tdsl.parse(ROWSUM.format(k=k))
    sch = tdsl.Schedule(f)
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.annotate(i, "pragma_auto_unroll_max_step", step)
    low = tdsl.lower(sch.func)
    loops = collect(low.body, For)
    assert [loop.loop_var.name for loop in loops] == (["i"] if unrolled else ["k", "i"])
    a = np.random.default_rng(0).standard_normal((16, k)).astype("float32")
    np.testing.assert_allclose(tdsl.build(sch)(a), a.sum(axis=1), rtol=1e-5, atol=1e-5)
