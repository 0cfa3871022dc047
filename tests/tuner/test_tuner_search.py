"""The search, with a synthetic deterministic measurement instead of timing: model-guided search
reaches a toy space's optimum in fewer trials than random search (on average over seeds); a
sketch without tunable decisions (a rule alternative such as a library call) is one candidate;
decision vectors and the model-only evolution."""
import json
import random
import statistics
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tdsl
from tdsl import T
from tdsl.tuner import api
from tdsl.tuner.decisions import UNKNOWN, DecisionSpace, evolve
from tdsl.tuner.progress import Progress
from tdsl.tuner.search import Engine, TuneOptions


@T.prim_func
def mm(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    for i, j, k in T.grid(32, 32, 32):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


FACTORS = [1, 2, 4, 8, 16]
OPTIMUM = (3, 1, 4)          # the decisions (indices) of the fastest program


def toy_space(sch):
    """Three inner split factors (125 points), and a second sketch with no decision at all."""
    plain = sch.copy()
    c = sch.get_block("C")
    for loop in sch.get_loops(c):
        factor = sch.sample_categorical(FACTORS, [0.2] * 5)
        sch.split(loop, factors=[None, factor])
    return [sch, plain]


def synthetic(p: dict) -> dict:
    """A deterministic 'measurement': a smooth bowl around OPTIMUM; the undecided sketch is slow."""
    ds = [v for _, v in sorted((int(k), v) for k, v in p["decisions"].items())]
    t = 1.0 + sum((x - y) ** 2 for x, y in zip(ds, OPTIMUM)) if ds else 40.0
    return {"time": t * 1e-3, "times": [t * 1e-3]}


def trials_to_optimum(cost_model: str, seed: int, trials: int = 24) -> tuple[int, list]:
    tasks, _ = api._tasks([mm], "cpu", toy_space, seed, random.Random(seed), cost_model, None, "toy")
    with ThreadPoolExecutor(1) as pool:
        Engine(tasks, pool, measure_locally=False, database=None, options=TuneOptions(trials=trials, batch=4),
               progress=Progress(trials, verbose=0), measure_fn=synthetic).run()
    records = tasks[0].records
    hit = next((n for n, r in enumerate(records, 1) if r.ok and r.time == pytest.approx(1e-3)), trials + 1)
    return hit, records


def test_model_guided_search_finds_the_optimum_in_fewer_trials_than_random():
    guided, rand = [], []
    for seed in range(3):
        n, records = trials_to_optimum("auto", seed)
        guided.append(n)
        # the sketch with no decisions is a candidate like the others, measured at most once
        assert sum(1 for r in records if not r.decisions) <= 1
        rand.append(trials_to_optimum("random", seed)[0])
    assert statistics.mean(guided) < statistics.mean(rand), (guided, rand)
    assert all(n <= 24 for n in guided), guided


def test_decision_vectors_and_the_model_only_evolution():
    sch = tdsl.Schedule(mm, seed=0)
    traces = [s.trace for s in toy_space(sch)]
    ds = DecisionSpace(traces)
    steps = list(traces[0].decisions)
    assert ds.width == 2 + 3 * 2 and ds.layout[1] == []
    v = ds.encode(0, {steps[0]: 3, steps[1]: None, steps[2]: 0})
    assert v[:2].tolist() == [1.0, 0.0]
    assert v[2:4].tolist() == [3.0, np.log2(1 + 8)] and v[4] == UNKNOWN and v[6:8].tolist() == [0.0, 1.0]
    assert ds.encode(1, {})[2:].tolist() == [-5.0] * 6
    assert ds.sketch_of(json.dumps(traces[1].as_json())) == 1 and ds.sketch_of(json.dumps(traces[0].as_json())) == 0

    class Bowl:      # a "model" that knows the answer: evolution must climb to it
        fitted = True

        def predict(self, X):
            return -((X[:, 2] - OPTIMUM[0]) ** 2 + (X[:, 4] - OPTIMUM[1]) ** 2 + (X[:, 6] - OPTIMUM[2]) ** 2)

    start = [(0, {steps[0]: 0, steps[1]: 4, steps[2]: 0})]
    best = evolve(ds, start, Bowl(), random.Random(0), skip=lambda key: False, want=4)
    assert best[0] == (0, dict(zip(steps, OPTIMUM)))
    tried = {ds.key(*best[0])}
    again = evolve(ds, start, Bowl(), random.Random(0), skip=lambda key: key in tried, want=4)
    assert best[0] not in again and len(again) == 4


def _lucky_run(tmp_path, retime_top: int):
    """Synthetic measurements with a winner's curse: the first candidate measured had a lucky
    moment (its trial reads 1 us); the re-timing sees every candidate's true time."""
    from tdsl.tuner.database import Database
    from tdsl.tuner.machine import fingerprint

    db = Database(tmp_path / f"t{retime_top}.db")
    tasks, _ = api._tasks([mm], "cpu", toy_space, 0, random.Random(0), "auto", db, fingerprint())
    truth: dict = {}

    def noisy(p):
        truth[p["key"]] = synthetic(p)["time"]
        return {"time": 1e-6 if len(truth) == 1 else truth[p["key"]], "times": []}

    with ThreadPoolExecutor(1) as pool:
        Engine(tasks, pool, measure_locally=False, database=db, options=TuneOptions(trials=16, batch=4,
                                                                                    retime_top=retime_top),
               progress=Progress(16, verbose=0), measure_fn=noisy,
               retime_fn=lambda records: [truth[r.candidate] for r in records]).run()
    return tasks[0], truth, db


def test_the_best_is_chosen_by_retiming_not_by_a_lucky_trial(tmp_path):
    task, truth, db = _lucky_run(tmp_path, retime_top=5)
    lucky = task.records[0].candidate
    assert task.retimed and task.best.candidate != lucky
    assert task.best.candidate == min(task.retimed, key=task.retimed.get)
    assert truth[task.best.candidate] == min(truth[c] for c in task.retimed)     # the true best of those timed
    assert db.best(task.workload).candidate == task.best.candidate               # build(database=) agrees
    task0, _, _ = _lucky_run(tmp_path, retime_top=0)                               # without: the lucky one
    assert task0.best.candidate == task0.records[0].candidate and not task0.retimed


def test_the_end_retiming_is_budgeted_inside_time_budget():
    """No round starts within the estimate of the end's re-timing of the budget's end: with a
    history of slow re-timings (20 s for 6 candidates) a 10 s budget starts no round; without
    one (the default estimate, under 3 s) it does."""
    def engine(stats: bool) -> Engine:
        tasks, _ = api._tasks([mm], "cpu", toy_space, 0, random.Random(0), "auto", None, "toy")
        pool = ThreadPoolExecutor(1)
        e = Engine(tasks, pool, measure_locally=False, database=None,
                   options=TuneOptions(trials=8, batch=4, time_budget=10.0),
                   progress=Progress(8, verbose=0), measure_fn=synthetic,
                   retime_fn=lambda records: [synthetic(r.__dict__ | {"decisions": r.decisions})["time"]
                                              for r in records])
        if stats:
            e.retime_seconds, e.retimed_candidates = 20.0, 6
        e.run()
        pool.shutdown()
        return e

    assert engine(stats=True).trials_done == 0
    assert engine(stats=False).trials_done == 8


def test_spread_keeps_half_a_batch_for_the_other_sketches():
    from tdsl.tuner.search import spread

    assert spread([0, 1, 2, 3], ["a", "a", "a", "b"], 2) == [0, 3]
    assert spread([3, 1, 0, 2], ["a", "b", "a", "a"], 3) == [3, 1, 0]
    assert spread([0, 1, 2], ["a", "a", "a"], 2) == [0, 1]        # one sketch only: no cap


def test_fresh_samples_take_the_sketches_in_turns():
    tasks, _ = api._tasks([mm], "cpu", toy_space, 0, random.Random(0), "random", None, "toy")
    task = tasks[0]
    picked = [task.dspace.sketch_of(json.dumps(task._fresh()[0].as_json())) for _ in range(6)]
    assert sorted(picked) == [0, 0, 0, 1, 1, 1]
    assert all(set(picked[i:i + 2]) == {0, 1} for i in (0, 2, 4))
