"""The expression walkers of lowering (lower/simplify.py, lower/index_checks.py) take their
traversal from the node definitions (ir.functor.expr_children): a node kind added to the IR is
walked without a list of field names to update, and every kind there is today is walked."""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from tdsl.dtypes import DataType, float32, int32
from tdsl.ir import Binary, Broadcast, Buffer, BufferLoad, Call, Cast, IntImm, Not, PrimExpr, Ramp, Select, Var
from tdsl.ir.functor import expr_children

index_checks = importlib.import_module("tdsl.lower.index_checks")    # the modules, not the passes
lower_simplify = importlib.import_module("tdsl.lower.simplify")


@dataclass(frozen=True, slots=True, eq=False)
class Twice(PrimExpr):   # a node kind the walkers have never heard of
    dtype: DataType
    value: PrimExpr
    others: tuple = ()


def _load() -> BufferLoad:
    return BufferLoad(Buffer("A", (IntImm(8, int32),), int32), (Var("i", int32),))


def test_expr_children_follow_the_fields():
    i, j = Var("i", int32), Var("j", int32)
    assert expr_children(Binary("add", i, j)) == [i, j]
    assert expr_children(Select(Binary("lt", i, j), i, j))[1:] == [i, j]
    assert expr_children(Call(int32, "max", (i, j))) == [i, j]
    assert expr_children(Twice(int32, i, (j, "not an expression"))) == [i, j]
    assert expr_children(i) == [] and expr_children(IntImm(1, int32)) == []


def test_walkers_see_a_load_under_every_kind():
    load = _load()
    wrapped = [Binary("add", load, IntImm(1, int32)), Cast(float32, load), Not(Binary("lt", load, IntImm(0, int32))),
               Select(Binary("lt", load, IntImm(0, int32)), IntImm(0, int32), IntImm(1, int32)),
               Call(int32, "max", (IntImm(0, int32), load)), Broadcast(load, 4),
               Twice(int32, IntImm(0, int32), (load,)), Twice(int32, load)]
    for e in wrapped:
        assert index_checks._reads_data(e), e
        assert lower_simplify._has_load(e), e
    assert index_checks._reads_data(Ramp(load, IntImm(1, int32), 4))
    # a ramp's base and stride are index arithmetic for the simplifier (as a load's indices are)
    assert not lower_simplify._has_load(Ramp(load, IntImm(1, int32), 4))
    assert not index_checks._reads_data(Twice(int32, Var("i", int32), (IntImm(2, int32),)))
