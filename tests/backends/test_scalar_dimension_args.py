"""Issue 22: a scalar parameter that also names a dimension is checked against the arrays by the
compiled kernel, wherever it stands in the signature (it segfaulted with n = 10**8 and wrote past
the buffer with n = 40). The probes run in a child process so a crash fails only this test."""
from __future__ import annotations

import pytest
from backends.subproc import run_probe

SIGNATURES = [
    ('A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32"), n: T.int32', "k(a, b, n)"),
    ('n: T.int32, A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")', "k(n, a, b)"),
    ('A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32"), n: T.int32', "k(n=n, B=b, A=a)"),
]
PROBE = '''
import numpy as np, tdsl
for params, call in {signatures!r}:
    f = tdsl.parse(f"""
@T.prim_func
def f({{params}}):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi] + T.float32(1)
""")
    k = tdsl.build(f, bounds_check={bounds_check})
    a, b = np.ones(5, "float32"), np.zeros(5, "float32")
    for n in (10**8, 40, 4):
        try:
            eval(call)
            print("ACCEPTED", call, n)
        except tdsl.ArgumentError as e:
            print("REFUSED", n, e)
    k(**dict(A=a, B=b, n=5))
    print("OK", (b == 2).all())
'''


@pytest.mark.parametrize("bounds_check", [False, True])
def test_scalar_dimension_is_checked_against_the_arrays(bounds_check):
    out = run_probe(PROBE.format(signatures=SIGNATURES, bounds_check=bounds_check))
    for n in (10**8, 40, 4):
        want = f"REFUSED {n} inconsistent symbolic dimension 'n': scalar parameter 'n' = {n}"
        assert out.count(want) == len(SIGNATURES), out
    assert "ACCEPTED" not in out and out.count("OK True") == len(SIGNATURES), out
