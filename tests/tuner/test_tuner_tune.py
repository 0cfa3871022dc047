"""tdsl.tune end to end on small kernels: the search finds the known-best decision, a wrong
candidate is never chosen, runs resume from the database, build(database=) applies the record,
several functions share one budget, Ctrl-C keeps the best so far."""
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.tuner import worker
from tdsl.tuner.apply import NoTuningRecord


@T.prim_func
def mm(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    for i, j, k in T.grid(64, 64, 64):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@T.prim_func
def zero(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    for i, j in T.grid(64, 64):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = T.float32(0)


@T.prim_func
def rowsum(A: T.Buffer((64, 256), "float32"), B: T.Buffer((64,), "float32")):
    for i, k in T.grid(64, 256):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vk]


LANES = [1, 2, 16]


def space(sch):
    """Vector lanes of j (16 is by far the fastest) and a tile of i (hardly matters)."""
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    lanes = sch.sample_categorical(LANES, [1 / 3] * 3)
    j0, j1 = sch.split(j, factors=[None, lanes])
    ti = sch.sample_perfect_tile(i, n=2, max_innermost_factor=8)
    i0, i1 = sch.split(i, factors=ti)
    sch.reorder(i0, j0, i1, k, j1)
    sch.vectorize(j1)


def rowsum_space(sch):
    b = sch.get_block("B")
    _i, k = sch.get_loops(b)
    tk = sch.sample_perfect_tile(k, n=2, max_innermost_factor=16)
    sch.split(k, factors=tk)


def test_search_finds_the_known_best_decision(tmp_path):
    result = tdsl.tune(mm, trials=8, space=space, batch=4, seed=1, verbose=0, database=tmp_path / "t.db")
    assert len(result.records) == 8 and all(r.ok for r in result.records)
    # the search reached the fast decision, and the result is the fastest of its own timings
    # (re-timed finalists first); which decision measures fastest is the host's, not asserted
    assert 16 in {LANES[d] for r in result.records for d in r.decisions.values() if isinstance(d, int)}
    retimed = result["mm"].retimed
    fastest = min(retimed.values()) if retimed else min(r.time for r in result.records)
    assert result.best.time == pytest.approx(fastest)
    assert result.best.gflops == pytest.approx(2 * 64 ** 3 / result.best.time / 1e9)
    kernel = tdsl.build(result.best.schedule)
    a, b = np.random.rand(64, 64).astype("float32"), np.random.rand(64, 64).astype("float32")
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-5)
    assert "mm" in str(result) and "GFLOP/s" in str(result)
    assert (tmp_path / "t.db.log").read_text().count("mm:") == 8


class InjectWrong(ThreadPoolExecutor):
    """Replaces every prepared candidate's program with `zero` (fast and wrong) once."""

    def __init__(self):
        super().__init__(2)
        self.injected = None

    def submit(self, fn, *args, **kwargs):
        future = super().submit(fn, *args, **kwargs)
        if fn is not worker.prepare or self.injected is not None:
            return future
        out = future.result()
        if "key" in out:
            self.injected = out["key"]
            out.update(script=zero.script(), features=out["features"])
        return future


def test_a_wrong_candidate_is_recorded_failed_and_never_chosen(tmp_path):
    pool = InjectWrong()
    with pool:
        result = tdsl.tune(mm, trials=6, space=space, batch=3, executor=pool, verbose=0)
    failed = [r for r in result.records if r.candidate == pool.injected]
    assert len(failed) == 1 and failed[0].error.startswith("wrong result: C differs")
    assert result.best.record.candidate != pool.injected
    np.testing.assert_allclose(tdsl.build(result.best.schedule)(np.eye(64, dtype="float32"),
                                                                np.eye(64, dtype="float32")), np.eye(64))


def test_resume_and_build_from_the_database(tmp_path):
    db = str(tmp_path / "t.db")
    with ThreadPoolExecutor(2) as pool:
        first = tdsl.tune(mm, trials=3, space=space, batch=3, executor=pool, verbose=0, database=db)
        again = tdsl.tune(mm, trials=5, space=space, batch=3, executor=pool, verbose=0, database=db)
    assert first.stats["trials"] == 3 and again.stats["resumed"] == 3 and again.stats["trials"] == 2
    assert len(again.records) == 5
    assert {r.candidate for r in first.records} < {r.candidate for r in again.records}
    kernel = tdsl.build(mm, database=db)
    assert tdsl.structural_equal(kernel.func, again.best.schedule.func)
    a = np.random.rand(64, 64).astype("float32")
    np.testing.assert_allclose(kernel(a, a), a @ a, rtol=1e-5)
    from tdsl.tuner import Database

    with Database(db) as source, Database(str(tmp_path / "copy.db")) as copy:   # records move as JSON lines
        assert source.export_jsonl(tmp_path / "r.jsonl") == 5 and copy.import_jsonl(tmp_path / "r.jsonl") == 5
    assert tdsl.structural_equal(tdsl.build(mm, database=str(tmp_path / "copy.db")).func, kernel.func)
    with pytest.warns(NoTuningRecord, match="no record of this function"):
        plain = tdsl.build(rowsum, database=db)
    x = np.random.rand(64, 256).astype("float32")
    np.testing.assert_allclose(plain(x), x.sum(1), rtol=1e-5)


def test_several_functions_share_the_budget_and_ctrl_c_keeps_the_best():
    with ThreadPoolExecutor(2) as pool:
        both = tdsl.tune([mm, rowsum], trials=6, space={"mm": space, "rowsum": rowsum_space}, executor=pool,
                         verbose=0, batch=3)
    assert len(both["mm"].records) == 3 and len(both["rowsum"].records) == 3
    assert both["rowsum"].best.time > 0
    with pytest.raises(AttributeError, match="2 functions were tuned"):
        _ = both.best

    class StopAfterOneRound(ThreadPoolExecutor):
        """Ctrl-C as the second round starts preparing."""

        measured = 0

        def submit(self, fn, *args, **kwargs):
            if fn is worker.measure:
                self.measured += 1
            elif fn is worker.prepare and self.measured:
                raise KeyboardInterrupt
            return super().submit(fn, *args, **kwargs)

    with StopAfterOneRound(2) as pool, warnings.catch_warnings():
        result = tdsl.tune(mm, trials=12, space=space, batch=4, executor=pool, verbose=0)
    assert result.interrupted and 1 <= len(result.records) == pool.measured <= 4 and result.best is not None


def test_plot_or_a_clear_error(tmp_path):
    with ThreadPoolExecutor(2) as pool:
        result = tdsl.tune(rowsum, trials=2, space=rowsum_space, batch=2, executor=pool, verbose=0)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install matplotlib"):
            result.plot()
    else:
        result.plot(path=str(tmp_path / "p.png"))
        assert (tmp_path / "p.png").stat().st_size > 0


def test_a_spent_time_budget_measures_nothing():
    with ThreadPoolExecutor(1) as pool:
        result = tdsl.tune(rowsum, trials=50, time_budget=0, space=rowsum_space, executor=pool, verbose=0)
    assert result.stats["trials"] == 0 and result.best is None and "rowsum" in str(result)


def test_bad_arguments():
    with pytest.raises(ValueError, match="trials must be a positive int"):
        tdsl.tune(mm, trials=0, space=space)
    with pytest.raises(tdsl.TargetError, match="unknown target 'metal'"):
        tdsl.tune(mm, target="metal", space=space)
