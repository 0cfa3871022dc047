"""Lowering reuses the match that `tensorize` made at schedule time (same nodes, same match)
instead of matching the block against the description again, and matches again whenever a
later step changed what the match reads."""
from __future__ import annotations

import numpy as np
import pytest
from tz_kernels import register_double16

import tdsl
from tdsl.intrinsics import match as tz
from tdsl.ir.attrs import TENSOR_INTRIN
from tdsl.target import host_features

SCALE = '''
@T.prim_func
def scale(A: T.Buffer((4, 64), "float32"), B: T.Buffer((4, 64), "float32")):
    for i, j in T.grid(4, 64):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2)
'''


@pytest.fixture
def match_runs(monkeypatch):
    """Counts the full matches (Matcher.run) made while a test runs."""
    runs: list[str] = []
    real_run = tz.Matcher.run

    def counting_run(self):
        runs.append(self.block.name)
        return real_run(self)

    monkeypatch.setattr(tz.Matcher, "run", counting_run)
    return runs


def _tensorized_scale() -> tuple[tdsl.PrimFunc, tdsl.Schedule]:
    f = tdsl.parse(SCALE)
    sch = tdsl.Schedule(f)
    _i, j = sch.get_loops(sch.get_block("B"))
    _, j1 = sch.split(j, factors=[None, 16])
    sch.tensorize(j1, register_double16())
    return f, sch


def test_lowering_reuses_the_schedule_time_match(match_runs):
    _, sch = _tensorized_scale()
    assert len(match_runs) == 1   # tensorize checked the block
    reused = tdsl.lower(sch, target="cpu").script()
    assert len(match_runs) == 1   # lowering took that match
    tz._MATCHES.clear()
    fresh = tdsl.lower(sch, target="cpu").script()
    assert len(match_runs) == 2   # nothing remembered: matched again
    assert reused == fresh and "T.Ramp" in reused


def test_reused_match_computes_the_same_as_numpy():
    f, sch = _tensorized_scale()
    a = np.random.default_rng(3).standard_normal((4, 64)).astype("float32")
    b = np.zeros_like(a)
    tdsl.build(sch)(a, b)
    np.testing.assert_array_equal(b, a * 2)
    want = np.zeros_like(a)
    tdsl.interpret(f, a, want)
    np.testing.assert_array_equal(b, want)


def test_changed_loops_around_the_block_match_again(match_runs):
    _, sch = _tensorized_scale()
    i, _j0 = sch.get_loops(sch.get_block("B_o"))   # the block tensorize made of the j1 loop
    sch.split(i, factors=[2, 2])   # new loops outside the tensorized block
    tdsl.lower(sch, target="cpu")
    assert len(match_runs) == 2
    a = np.random.default_rng(4).standard_normal((4, 64)).astype("float32")
    b = np.zeros_like(a)
    tdsl.build(sch)(a, b)
    np.testing.assert_array_equal(b, a * 2)


def test_a_mismatch_is_not_remembered(match_runs):
    f = tdsl.parse(SCALE.replace("T.float32(2)", "T.float32(3)"))
    sch = tdsl.Schedule(f)
    _i, j = sch.get_loops(sch.get_block("B"))
    _, j1 = sch.split(j, factors=[None, 16])
    for attempt in (1, 2):
        with pytest.raises(tdsl.ScheduleError, match="double16"):
            sch.tensorize(j1, register_double16())
        assert len(match_runs) == attempt


def test_callers_get_their_own_bindings():
    _, sch = _tensorized_scale()
    realize = next(r for r in tdsl.ir.collect(sch.func.body, tdsl.ir.BlockRealize)
                   if TENSOR_INTRIN in dict(r.block.annotations))
    from tdsl.schedule.tree import find_block

    _, path = find_block(sch.func, realize.block.name, "test")
    intrin = tdsl.TensorIntrin.get(register_double16())
    first = tz.match(intrin, realize.block, path + (realize,))
    first[0].base.clear()
    again = tz.match(intrin, realize.block, path + (realize, realize.block))
    assert again[0].base and len(again) == len(first)


def test_host_features_asked_once():
    feats = host_features()
    assert isinstance(feats, frozenset) and feats is host_features()
    assert all(isinstance(f, str) for f in feats)
