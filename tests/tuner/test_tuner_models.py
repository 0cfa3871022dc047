"""Cost models learn a ranking; features read the lowered IR; FLOP counts; the result check."""
import contextlib

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.tuner.checking import compare, random_inputs, written_params
from tdsl.tuner.cost_model import NumpyGBDT, RandomModel, make_model, targets
from tdsl.tuner.features import FEATURE_NAMES, features
from tdsl.tuner.flops import flop_count


@T.prim_func
def mm(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    for i, j, k in T.grid(64, 64, 64):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def _models():
    out = [NumpyGBDT()]
    with contextlib.suppress(ImportError):
        out.append(make_model("lightgbm"))
    return out


@pytest.mark.parametrize("model", _models(), ids=lambda m: m.name)
def test_model_ranks_held_out_points(model):
    rng = np.random.default_rng(0)
    X = rng.random((120, 8))
    y = np.sin(3 * X[:, 0]) + X[:, 1] * X[:, 2]
    model.fit(X, y)
    Xt = rng.random((200, 8))
    yt = np.sin(3 * Xt[:, 0]) + Xt[:, 1] * Xt[:, 2]
    assert np.corrcoef(model.predict(Xt), yt)[0, 1] > 0.8


def test_random_model_and_targets():
    assert list(targets([2.0, None, 1.0])) == [0.5, 0.0, 1.0]
    assert len(RandomModel().predict(np.zeros((5, 3)))) == 5
    with pytest.raises(ValueError, match="cost_model="):
        make_model("xgb")


def test_features_see_vectorization_and_parallelism():
    plain = features(tdsl.lower(mm))
    sch = tdsl.Schedule(mm)
    i, j, k = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, factors=[None, 16])
    sch.reorder(i, j0, k, j1)
    sch.vectorize(j1)
    sch.parallel(i)
    tuned = features(tdsl.lower(sch))
    assert len(plain) == len(tuned) == len(FEATURE_NAMES)
    f = dict(zip(FEATURE_NAMES, tuned))
    g = dict(zip(FEATURE_NAMES, plain))
    assert f["max_store_lanes"] == 16 and g["max_store_lanes"] == 1
    assert f["vector_store_share"] > 0.9 and g["vector_store_share"] == 0
    assert f["parallel_extent"] == np.log2(65) and g["parallel_extent"] == 1.0
    assert f["float_ops"] == g["float_ops"]          # the same work either way


def test_flop_count():
    assert flop_count(mm) == 2 * 64 ** 3


def test_compare_catches_a_wrong_output():
    inputs = random_inputs(mm, 0)
    want = [a.copy() for a in inputs]
    want[2][:] = want[0] @ want[1]
    assert written_params(mm) == [2]
    got = [a.copy() for a in want]
    got[2] += 1e-7 * np.abs(got[2]).max()              # rounding: accepted
    assert compare(mm, got, want) is None
    got[2][3, 5] += 0.5
    assert "wrong result: C differs at 1 of 4096" in compare(mm, got, want)
    got = [a.copy() for a in want]
    got[2][0, 0] = np.nan
    assert "NaN" in compare(mm, got, want)
