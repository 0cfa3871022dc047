"""Regression tests for the bugs the fuzzers found and that are fixed (docs/reliability.md)."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl
from tdsl.dtypes import as_dtype
from tdsl.ir import Binary, BufferStore, Cast, FloatImm, IntImm, IRMutator, Not


# R1: T.where / iterator bindings using the block's own iterators were accepted by the parser,
# and the interpreter then failed with an internal InterpretError.
@pytest.mark.parametrize("decl", ["T.where(vi < 5)", "vj = T.axis.spatial(8, vi + j)"])
def test_block_declarations_cannot_use_own_iterators(decl):
    text = f'''
@T.prim_func
def f(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8, 8), "float32")):
    for i, j in T.grid(8, 8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            {decl}
            B[vi, j] = A[vi, j]
'''
    with pytest.raises(tdsl.ScriptError, match='block "B" uses its own iterator vi') as info:
        tdsl.parse(text)
    assert info.value.lineno == 7


def test_where_over_loop_variables_still_parses():
    text = '''
@T.prim_func
def f(A: T.Buffer((5,), "float32"), B: T.Buffer((5,), "float32")):
    for io, ii in T.grid(2, 3):
        with T.block("B"):
            vi = T.axis.spatial(5, io * 3 + ii)
            T.where(io * 3 + ii < 5)
            B[vi] = A[vi]
'''
    func = tdsl.parse(text)
    a = np.arange(5, dtype="float32")
    b = np.zeros(5, "float32")
    tdsl.interpret(func, a, b)
    np.testing.assert_array_equal(a, b)


# R2: an operation whose operands are all plain literals (`4 - 1`, which compute_inline makes
# by substituting a constant) printed as Python that the parser folds, breaking the round trip.
INLINE = '''
@T.prim_func
def f(A: T.Buffer((6, 5), "float32"), C: T.Buffer((6,), "float32")):
    B = T.alloc_buffer((6, 5), "float32")
    for i, j in T.grid(6, 5):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, 4 - vj]
    for i in range(6):
        with T.block("C"):
            vi = T.axis.remap("S", [i])
            C[vi] = B[vi, 1]
'''


def test_roundtrip_after_compute_inline_substitutes_a_constant():
    func = tdsl.parse(INLINE)
    sch = tdsl.Schedule(func)
    sch.compute_inline(sch.get_block("B"))
    back = tdsl.parse(sch.func.script())
    assert tdsl.structural_diff(sch.func, back) is None


def _i(v: int) -> IntImm:
    return IntImm(v, as_dtype("int32"))


TRUE, FALSE = IntImm(1, as_dtype("bool")), IntImm(0, as_dtype("bool"))
CONSTANT_EXPRS = {
    "A": [Binary("sub", _i(4), _i(1)), Binary("floordiv", _i(7), _i(2)), Binary("floormod", _i(-7), _i(2)),
          Binary("min", _i(4), _i(1)), Binary("max", _i(-4), _i(1)), Binary("mul", Binary("add", _i(1), _i(2)), _i(3))],
    "M": [Binary("lt", _i(4), _i(1)), Binary("and", TRUE, FALSE), Binary("or", FALSE, TRUE), Not(TRUE),
          Binary("eq", _i(1), _i(1))],
    "F": [Cast(as_dtype("float32"), _i(3)), Binary("add", FloatImm(1.5, as_dtype("float32")),
                                                    FloatImm(2.0, as_dtype("float32")))],
}
STORES = '''
@T.prim_func
def f(A: T.Buffer((8,), "int32"), M: T.Buffer((8,), "bool"), F: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            A[vi] = 0
            M[vi] = True
            F[vi] = T.float32(0)
'''


class _SetStored(IRMutator):
    """Replace the value stored into one buffer."""

    def __init__(self, buffer: str, value):
        self.buffer, self.value = buffer, value

    def visit_BufferStore(self, s):
        return BufferStore(s.buffer, self.value, s.indices) if s.buffer.name == self.buffer else s


@pytest.mark.parametrize("buffer,index", [(b, i) for b, es in CONSTANT_EXPRS.items() for i in range(len(es))])
def test_roundtrip_of_operations_on_literals(buffer, index):
    func = _SetStored(buffer, CONSTANT_EXPRS[buffer][index]).visit(tdsl.parse(STORES))
    back = tdsl.parse(func.script())
    assert tdsl.structural_diff(func, back) is None, func.script()


# R3: a parameter name given twice (which Python's ast accepts) crashed the parser with
# "TypeError: an IR expression has no truth value" instead of a ScriptError.
def test_duplicate_parameter_is_a_script_error():
    text = '''
@T.prim_func
def f(A: T.Buffer((4,), "float32"), hi: T.float32, hi: T.float32):
    for i in range(4):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            A[vi] = hi
'''
    with pytest.raises(tdsl.ScriptError, match="duplicate parameter 'hi'") as info:
        tdsl.parse(text)
    assert info.value.lineno == 3
