"""Tuning functions with symbolic dimensions: `specialize`, `tune(sizes=)`, the size dispatch of
`build(database=)`, the error without sizes; and what `tune` tells the user (the space exhausted
before the trials asked, the summary on stdout, no PerformanceWarning for its own choices)."""
import os
import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.tuner.database import Database
from tdsl.tuner.sizes import nearest


@T.prim_func
def rowsum(A: T.Buffer(("n", 32), "float32"), B: T.Buffer(("n",), "float32")):
    for i, j in T.grid(n, 32):
        with T.block("B"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vj]


@T.prim_func
def shifted(A: T.Buffer(("n + 2", "m"), "float32"), B: T.Buffer(("n", "m"), "float32")):
    for i, j in T.grid(n, m):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi + 2, vj] - A[vi, vj]


def rowsum_space(sch):
    b = sch.get_block("B")
    i, j = sch.get_loops(b)
    lanes = sch.sample_categorical([1, 8], [0.5, 0.5])
    _, j1 = sch.split(j, factors=[None, lanes])
    sch.parallel(i)


def test_specialize_binds_dimensions_and_folds_shapes():
    g = shifted.specialize(n=6, m=5)
    assert [tuple(int(s.value) for s in p.shape) for p in g.params] == [(8, 5), (6, 5)]
    a = np.random.default_rng(0).standard_normal((8, 5)).astype("float32")
    np.testing.assert_allclose(tdsl.build(g)(a), a[2:] - a[:-2], rtol=1e-6)
    part = shifted.specialize(m=5)            # the other dimension stays symbolic
    assert str(part.params[1].shape[0]) in ("n", "Var('n', int32)") or getattr(part.params[1].shape[0], "name", "") == "n"
    assert shifted.params[1].shape[1].name == "m"   # the function itself is unchanged
    with pytest.raises(tdsl.ArgumentError, match="no symbolic dimension 'k' .*it has n, m"):
        shifted.specialize(k=3)
    with pytest.raises(tdsl.ArgumentError, match="positive int"):
        shifted.specialize(n=0)


def test_tuning_a_symbolic_function_without_sizes_says_what_to_do(monkeypatch):
    monkeypatch.delenv("TDSL_FULL_TRACEBACK", raising=False)
    with pytest.raises(tdsl.ArgumentError) as info:
        tdsl.tune(rowsum, trials=2)
    text = str(info.value)
    assert "symbolic shape (n, 32)" in text and "sizes={'n': [" in text and "rowsum.specialize(n=" in text
    assert "Var(" not in text
    frames = [f.filename for f in traceback.extract_tb(info.value.__traceback__)]
    root = os.path.dirname(tdsl.__file__)
    assert frames[0] == __file__ and [os.path.basename(f) for f in frames if f.startswith(root)] == ["tracebacks.py"]
    with pytest.raises(tdsl.ArgumentError, match="sizes= names 'm', which no tuned function has"):
        tdsl.tune(rowsum, sizes={"n": [8], "m": [4]})
    with pytest.raises(tdsl.ArgumentError, match="positive ints"):
        tdsl.tune(rowsum, sizes={"n": [0]})
    with pytest.raises(tdsl.ArgumentError, match="symbolic dimension.*m.*sizes= does not give"):
        tdsl.tune(shifted, sizes={"n": [8]})


def test_nearest_bucket():
    buckets = [{"n": 64}, {"n": 1024}, {"n": 4096}]
    assert [nearest(buckets, {"n": n}) for n in (1, 64, 200, 300, 1024, 2000, 3000, 10 ** 6)] == [0, 0, 0, 1, 1, 1, 2, 2]


def test_tune_at_sizes_then_build_dispatches_per_call(tmp_path):
    db = tmp_path / "t.db"
    with ThreadPoolExecutor(2) as pool:
        result = tdsl.tune(rowsum, trials=8, sizes={"n": [16, 64]}, space=rowsum_space, executor=pool,
                           database=db, verbose=0, batch=2)
    assert [(t.name, t.sizes) for t in result.tasks] == [("rowsum_n16", {"n": 16}), ("rowsum_n64", {"n": 64})]
    assert all(t.best is not None for t in result.tasks)
    with Database(db) as d:
        assert [b for b, _ in d.buckets(rowsum, "cpu")] == [{"n": 16}, {"n": 64}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel = tdsl.build(rowsum, database=db)
        rng = np.random.default_rng(0)
        for n in (16, 64, 20, 100, 1, 16):
            a = rng.standard_normal((n, 32)).astype("float32")
            out = np.empty(n, "float32")
            kernel(a, out)
            np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5, atol=1e-5)
    assert kernel.buckets == [{"n": 16}, {"n": 64}]
    # exact sizes run their constant-shape kernels, others the bucket's schedule on the symbolic function
    assert set(kernel._exact) == {0, 1} and set(kernel._general) == {0, 1}
    assert kernel.kernel_for(n=16) is kernel.kernel_for(n=16) and kernel.kernel_for(n=20) is kernel.kernel_for(n=3)
    assert not kernel.fallbacks


def _tiny():
    @T.prim_func
    def tiny(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        for i in range(64):
            with T.block("B"):
                vi = T.axis.spatial(64, i)
                B[vi] = A[vi] * T.float32(2)
    return tiny


def tiny_space(sch):
    (i,) = sch.get_loops(sch.get_block("B"))
    lanes = sch.sample_categorical([1, 4, 8], [1 / 3] * 3)
    sch.split(i, factors=[None, lanes])


def test_an_exhausted_space_is_reported_and_the_summary_goes_to_stdout(capsys):
    with ThreadPoolExecutor(2) as pool:
        result = tdsl.tune(_tiny(), trials=32, space=tiny_space, executor=pool, retime=0)
    out, err = capsys.readouterr()
    assert result.stats["trials"] == 3
    assert "tuning tiny: the design space is exhausted after 3 distinct candidates (3 of the 32 trials" in out
    assert "best time" in out and "best time" not in err and "exhausted" not in err


def test_building_the_tuned_best_does_not_warn_about_its_own_vectorize():
    @T.prim_func
    def gather(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        for i in range(64):
            with T.block("B"):
                vi = T.axis.spatial(64, i)
                B[vi] = A[T.max(vi - 1, 0)]

    def space(sch):   # a vectorize that cannot vectorize (a clamped load): scalar, noted
        (i,) = sch.get_loops(sch.get_block("B"))
        _, inner = sch.split(i, factors=[None, sch.sample_categorical([4, 8], [0.5, 0.5])])
        sch.vectorize(inner)

    with ThreadPoolExecutor(2) as pool:
        result = tdsl.tune(gather, trials=2, space=space, executor=pool, verbose=0, retime=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel = result.best.build()
    assert kernel.notes   # still said where a user looks for it


@T.prim_func
def mm_rows(A: T.Buffer(("n", 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer(("n", 64), "float32")):
    for i, j, k in T.grid(n, 64, 64):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def test_a_trace_that_does_not_replay_symbolically_falls_back_clearly(tmp_path):
    """A library call or micro-kernel needs constant extents: the tuned size runs it, other sizes
    run auto_schedule of the symbolic function, and a warning says so once."""
    from tdsl.tuner.apply import NoTuningRecord

    def library_only(sch):
        sch.tensorize(sch.get_block("C"), "blas.sgemm")

    from tdsl.intrinsics import blas
    if not blas.available():
        pytest.skip("this process has no BLAS")
    db = tmp_path / "t.db"
    with ThreadPoolExecutor(2) as pool:
        tdsl.tune(mm_rows, trials=1, sizes={"n": [64]}, space=library_only, executor=pool, database=db,
                  verbose=0, retime=0)
    kernel = tdsl.build(mm_rows, database=db)
    rng = np.random.default_rng(0)
    b = rng.standard_normal((64, 64)).astype("float32")
    for n, warns in ((64, False), (40, True), (100, False)):
        a = rng.standard_normal((n, 64)).astype("float32")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
        said = [str(w.message) for w in caught if issubclass(w.category, NoTuningRecord)]
        assert bool(said) == warns, said
        if warns:
            assert "tuned at n=64 does not replay on the symbolic function" in said[0]
            assert "auto_schedule(mm_rows)" in said[0]
    assert list(kernel.fallbacks) == [0]
