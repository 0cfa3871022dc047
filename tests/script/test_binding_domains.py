"""Issue 22: a block iterator bound outside its domain (`T.axis.spatial(10, i)` under
`range(16)`) was accepted by parse and build while the interpreter raised; the parser refuses it
unless a T.where or an if keeps the block from running there."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl

TEXT = '''
@T.prim_func
def f(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
{guard}        with T.block("B"):
            vi = T.axis.spatial(10, i{shift})
{where}            B[vi] = A[vi]
'''


@pytest.mark.parametrize("shift,span", [("", "[0, 15]"), (" - 1", "[-1, 14]")])
def test_binding_outside_its_domain_is_a_script_error(shift, span):
    with pytest.raises(tdsl.ScriptError, match=rf"iterator vi is bound to i{shift}, which ranges over "
                                               rf"\[{span[1:-1]}\], outside its domain \[0, 10\)"):
        tdsl.parse(TEXT.format(guard="", shift=shift, where=""))


GUARDED_BY_IF = '''
@T.prim_func
def f(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        if i < 10:
            with T.block("B"):
                vi = T.axis.spatial(10, i)
                B[vi] = A[vi]
'''


@pytest.mark.parametrize("text", [TEXT.format(guard="", shift="", where="            T.where(i < 10)\n"),
                                  GUARDED_BY_IF])
def test_guarded_binding_is_accepted(text):
    func = tdsl.parse(text)
    a = np.arange(16, dtype="float32")
    b = np.zeros(16, "float32")
    tdsl.interpret(func, a, b)
    np.testing.assert_array_equal(b[:10], a[:10])
