"""The search: evolutionary rounds over a design space's decisions, ranked by a cost model.

One round for one function (a `TaskState`), `batch` trials:

1. propose: while few candidates are measured (and always in random search), fresh samples (a
   sketch with every decision drawn anew); afterwards the decision model's best predictions from
   an evolution of the fastest measured candidates and fresh samples, thousands scored without
   replaying (decisions.evolve), plus a few fresh samples, `pool` times more than the batch;
2. prepare them on the executor (replay, lower, features); a refused decision drops the proposal
   (it is not a trial), as does a program already measured;
3. pick the batch: the best by the mean of the IR-feature model's and the decision model's
   predictions (and `explore` of the batch at random); the first round, with no model yet, is
   random and compiles while it prepares;
4. build the picked candidates on the executor, then measure them one at a time (runner.py);
5. record every trial in the database, failures with their reason, and refit the model;
6. re-time (interleaved turns in one measuring process) the round's candidates that measured
   within `challenge` of the best against the best: the best moves only on a win timed side
   by side. At the end of the run the `retime_top` fastest and the best are re-timed likewise;
   the best is the fastest of the latest re-timing (kept in the database, so that
   `build(database=)` picks the same).
"""
from __future__ import annotations

import contextlib
import copy
import json
import random
import time
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

import numpy as np

from . import space as space_mod
from . import worker
from .cost_model import CostModel, RandomModel, targets
from .database import Database, Record, Workload
from .decisions import DecisionSpace, evolve


@dataclass
class TuneOptions:
    trials: int
    time_budget: float | None = None
    batch: int = 16
    pool: int = 2              # proposals prepared per trial once the model ranks them
    explore: float = 0.2       # share of each batch picked at random
    timeout: float = 60.0      # seconds a measurement may take
    build_timeout: float = 300.0
    repeats: int = 5           # samples at least
    measure_s: float = 0.05    # and more until this long (the minimum counts)
    batch_rounds: int = 3      # then the batch's candidates take this many turns (see _batch_turns)
    batch_block_s: float = 0.02    # of this many seconds of samples each
    warmup: int = 1
    min_sample_s: float = 0.002
    check_seed: int = 0
    retime_top: int = 5        # the best few re-timed against each other at the end (0: never)
    retime_rounds: int = 3     # turns each in a re-timing
    retime_block_s: float = 0.05   # seconds of samples per turn
    challenge: float = 1.15    # a round's candidate measured within this factor of the best is
                               # re-timed against it at once (0: only at the end)
    challengers: int = 3       # at most this many per round


@dataclass
class TaskState:
    """The search state of one function."""

    func: object
    target: str
    sketches: list
    model: CostModel
    rng: random.Random
    workload: Workload | None = None
    flops: int | None = None
    records: list = field(default_factory=list)          # this workload's records, oldest first
    seen: set = field(default_factory=set)                # program keys measured (or failed)
    stale: int = 0                                         # rounds in a row without a new candidate
    tried: set = field(default_factory=set)                # (sketch structure, decisions) measured or refused
    pending: dict = field(default_factory=dict)            # the same key -> prepared, not yet measured
    measured_here: int = 0                                 # trials of this run
    dmodel: CostModel | None = None                        # the model of decision vectors (decisions.py)
    retimed: dict = field(default_factory=dict)            # candidate -> seconds, the latest re-timing
    scripts: dict = field(default_factory=dict)            # candidate -> scheduled script, this run's

    def __post_init__(self):
        from ..ir import structural_hash

        self.name = self.func.name
        self.func_script = self.func.script()
        self.func_hash = structural_hash(self.func)
        self.dspace = DecisionSpace(self.sketches)
        self.sketch_texts = [space_mod.trace_text(t) for t in self.sketches]
        if self.dmodel is None:
            self.dmodel = copy.deepcopy(self.model)
        self._sketch_of: dict[str, int | None] = {}
        self.fresh_per_sketch = [0] * len(self.sketches)

    @property
    def random_search(self) -> bool:
        """cost_model="random": fresh samples of the design space only, picked at random."""
        return isinstance(self.model, RandomModel)

    def sketch_of(self, trace_text: str) -> int | None:
        found = self._sketch_of.get(trace_text, ...)
        if found is ...:
            try:
                found = self.dspace.sketch_of(trace_text)
            except Exception:  # noqa: BLE001 - a trace of another tdsl: not one of these sketches
                found = None
            self._sketch_of[trace_text] = found
        return found

    @staticmethod
    def _int_keys(decisions: dict) -> dict:
        return {int(k): v for k, v in decisions.items()}

    @property
    def best(self) -> Record | None:
        """The best record that passed: the fastest of the latest re-timing, else the fastest."""
        return best_record(self.records, self.retimed)

    def add(self, record: Record) -> None:
        self.records.append(record)
        self.seen.add(record.candidate)
        if record.trace and record.decisions:
            # a record from another tdsl (a trace this one cannot replay): it is only not deduplicated
            with contextlib.suppress(Exception):
                self.note_tried(record.trace, record.decisions)

    # proposals ------------------------------------------------------------------------------
    def _fresh(self) -> tuple:
        """A fresh sample: a sketch with every decision drawn anew (DecisionSpace.sample; compute
        locations None, sampled by the replay from the proposal's seed). The sketches take turns
        (the one sampled least so far, ties at random), in random search too: the first rounds
        see every sketch, and a model fitted on a few trials cannot know a sketch never seen."""
        least = min(self.fresh_per_sketch)
        k = self.rng.choice([i for i, c in enumerate(self.fresh_per_sketch) if c == least])
        self.fresh_per_sketch[k] += 1
        return self.sketches[k], self.dspace.sample(k, self.rng)

    def _child(self, parents: list) -> tuple:
        roll = self.rng.random()
        parent = self.rng.choice(parents[:8]) if self.rng.random() < 0.7 else self.rng.choice(parents)
        if roll < 0.15:
            return self._fresh()
        decisions = None
        if roll < 0.35 and len(parents) > 1:
            decisions = space_mod.crossover(parent, self.rng.choice(parents), self.rng)
        if decisions is None:
            decisions = space_mod.mutate(parent, self.rng, steps=1 if self.rng.random() < 0.7 else 2)
        return (parent, decisions) if decisions is not None else self._fresh()

    @staticmethod
    def candidate_key(trace_text: str, decisions: dict) -> tuple:
        """(sketch structure, decisions): what a proposal is, before its program is known."""
        return (space_mod.structure(space_mod.load(trace_text)),
                json.dumps({str(k): v for k, v in decisions.items()}, sort_keys=True))

    def note_tried(self, trace_text: str, decisions: dict) -> None:
        """Remember a measured candidate so that it is not proposed again."""
        key = self.candidate_key(trace_text, decisions)
        self.tried.add(key)
        self.pending.pop(key, None)

    def propose(self, n: int, random_only: bool) -> list[dict]:
        """Up to `n` proposals none of which was measured, refused or prepared before (a proposal
        whose decisions are all known is compared before any replay; one with decisions left to the
        replay after it). Prepared candidates that were not picked wait in `pending` for a later
        round's ranking: they are not replayed again."""
        ok = sorted((r for r in self.records if r.ok), key=lambda r: r.time)
        parents = [space_mod.load(r.trace) for r in ok[: max(4, min(16, len(ok) // 3 + 1))]]
        out: list[dict] = []
        keys: set = set()
        for _ in range(8 * n):
            if len(out) >= n:
                break
            trace, changed = self._fresh() if random_only or not parents else self._child(parents)
            merged = dict(trace.decisions)
            merged.update(changed)
            key = None
            if all(v is not None for v in merged.values()):
                key = (space_mod.structure(trace), json.dumps({str(k): v for k, v in merged.items()}, sort_keys=True))
                if key in self.tried or key in self.pending or key in keys:
                    continue
                keys.add(key)
            out.append({"trace": space_mod.trace_text(trace), "decisions": {str(k): v for k, v in changed.items()},
                        "seed": self.rng.randrange(1 << 30), "_key": key})
        return out

    # the model ------------------------------------------------------------------------------
    def refit(self) -> None:
        """Fit the IR-feature model and the decision model on every record (failures as 0)."""
        rows = [r for r in self.records if r.features is not None]
        if len(rows) >= 4:
            X = np.array([r.features for r in rows], dtype=np.float64)
            self.model.fit(X, targets([r.time if r.ok else None for r in rows]))
        known = [(r, self.sketch_of(r.trace)) for r in self.records if r.trace and r.decisions is not None]
        known = [(r, s) for r, s in known if s is not None]
        if len(known) >= 4 and self.dmodel is not None:
            X = self.dspace.matrix([(s, self._int_keys(r.decisions)) for r, s in known])
            self.dmodel.fit(X, targets([r.time if r.ok else None for r, _ in known]))

    def scores(self, prepared: list[dict]) -> np.ndarray:
        """Predicted normalised throughput of prepared candidates: the mean of the IR-feature
        model's and the decision model's predictions (the IR model alone for a candidate whose
        trace is not one of the sketches)."""
        ir = self.model.predict(np.array([p["features"] for p in prepared], dtype=np.float64))
        if self.dmodel is None or not self.dmodel.fitted or self.random_search:
            return ir
        sk = [self.sketch_of(p["trace"]) for p in prepared]
        rows = [i for i, s in enumerate(sk) if s is not None]
        out = np.array(ir, dtype=np.float64)
        if rows:
            dec = self.dmodel.predict(self.dspace.matrix([(sk[i], self._int_keys(prepared[i]["decisions"]))
                                                          for i in rows]))
            out[rows] = 0.5 * (out[rows] + dec)
        return out

    def propose_guided(self, n: int, explore: float) -> list[dict]:
        """`n` proposals: the decision model's best predictions from an evolution of the fastest
        measured candidates (decisions.evolve: thousands scored, none replayed), plus `explore`
        of them fresh samples (and fresh samples where the evolution finds too few)."""
        ok = sorted((r for r in self.records if r.ok), key=lambda r: r.time)
        parents = []
        for r in ok[:16]:
            s = self.sketch_of(r.trace)
            if s is not None:
                parents.append((s, self._int_keys(r.decisions)))
        n_fresh = max(1, round(n * explore))
        ranked = evolve(self.dspace, parents, self.dmodel, self.rng, want=4 * (n - n_fresh),
                        skip=lambda key: key in self.tried or key in self.pending)
        chosen = [ranked[i] for i in spread(range(len(ranked)), [s for s, _ in ranked], n - n_fresh)]
        out = []
        for s, d in chosen:
            key = self.dspace.key(s, d) if all(v is not None for v in d.values()) else None
            out.append({"trace": self.sketch_texts[s], "decisions": {str(k): v for k, v in d.items()},
                        "seed": self.rng.randrange(1 << 30), "_key": key})
        return out + self.propose(n - len(out), random_only=True)

    def rank(self, prepared: list[dict], k: int, explore: float) -> list[dict]:
        if not self.model.fitted or len(prepared) <= k:
            return prepared[:k]
        scores = self.scores(prepared)
        order = [int(i) for i in np.argsort(-scores)]
        n_random = round(k * explore)
        chosen = spread(order, [self.sketch_of(p["trace"]) for p in prepared], k - n_random)
        rest = [i for i in order if i not in chosen]
        self.rng.shuffle(rest)
        chosen += rest[: k - len(chosen)]
        return [prepared[i] for i in chosen]


class Interrupted(Exception):
    pass


class Engine:
    """Runs rounds over several TaskStates until the trials or the time budget are spent."""

    def __init__(self, tasks: list[TaskState], executor, measure_locally: bool, database: Database | None,
                 options: TuneOptions, progress, kill=None, measure_fn=None, retime_fn=None):
        self.tasks = tasks
        self.measure_fn = measure_fn       # a stand-in for measuring (tests: a synthetic objective)
        self.retime_fn = retime_fn         # likewise for re-timing: records -> seconds (None: measure_fn
                                           # given, no re-timing)
        self.executor = executor
        self.measure_locally = measure_locally
        self.db = database
        self.opt = options
        self.progress = progress
        self.kill = kill
        self.start = time.monotonic()
        self.trials_done = 0
        self.invalid = 0
        self.duplicates = 0
        self.builds = 0
        self.build_seconds = 0.0
        self.prepare_seconds = 0.0
        self.interrupted = False
        self.machines: set = set()
        self.retimings = 0
        self.retime_seconds = 0.0
        self.retimed_candidates = 0

    def _time_left(self) -> float | None:
        if self.opt.time_budget is None:
            return None
        return self.opt.time_budget - (time.monotonic() - self.start)

    def _out_of_time(self, reserve: float = 0.0) -> bool:
        left = self._time_left()
        return left is not None and left <= reserve

    def _final_retime_s(self) -> float:
        """About how long the end's re-timing of every task takes: per candidate, the mean of this
        run's re-timings so far, else its turns and 0.3 s to start it in the measuring process."""
        if self.opt.retime_top <= 0:
            return 0.0
        per = (self.retime_seconds / self.retimed_candidates if self.retimed_candidates
               else self.opt.retime_rounds * self.opt.retime_block_s + 0.3)
        return len(self.tasks) * (self.opt.retime_top + 1) * per

    def _wait(self, futures, timeout: float | None) -> list:
        """Each future's result, or {"error": ...} for one that raised or overran `timeout`."""
        out = []
        deadline = None if timeout is None else time.monotonic() + timeout
        for f in futures:
            try:
                left = None if deadline is None else max(0.1, deadline - time.monotonic())
                out.append(f.result(timeout=left))
            except FutureTimeout:
                if self.kill is not None:
                    self.kill(f)
                f.cancel()
                out.append({"error": f"build timeout: no result within {timeout:g} s"})
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001 - a worker crash fails that candidate
                out.append({"error": f"worker failed: {type(exc).__name__}: {str(exc)[:300]}"})
        return out

    def run(self) -> None:
        turn = 0
        try:
            # the end's re-timing is budgeted: no round starts within its estimate of the budget's end
            while self.trials_done < self.opt.trials and not self._out_of_time(self._final_retime_s()):
                active = [t for t in self.tasks if t.stale < 3]
                if not active:
                    self.progress.say(self.exhausted_line())
                    break
                # the task with the fewest trials this run goes next (ties: in order)
                task = min(active, key=lambda t: (t.measured_here, (self.tasks.index(t) - turn) % len(self.tasks)))
                turn += 1
                left = self.opt.trials - self.trials_done
                self.round(task, min(self.opt.batch, left))
            for task in self.tasks:
                self.retime(task, self.finalists(task))
        except KeyboardInterrupt:
            self.interrupted = True
            self.progress.note("tuning interrupted: keeping the best candidates measured so far")

    def exhausted_line(self) -> str:
        """What the run says when no task has a new candidate to propose before the trials asked."""
        asked = self.opt.trials
        counts = ", ".join(f"{t.name}: {len({r.candidate for r in t.records})}" for t in self.tasks)
        if len(self.tasks) == 1:
            n = len({r.candidate for r in self.tasks[0].records})
            return (f"tuning {self.tasks[0].name}: the design space is exhausted after {n} distinct candidates "
                    f"({self.trials_done} of the {asked} trials asked were run; more trials would only repeat them)")
        return (f"tuning: the design spaces are exhausted ({counts} distinct candidates; {self.trials_done} of "
                f"the {asked} trials asked were run)")

    def round(self, task: TaskState, batch: int) -> None:
        # random rounds (the first ones, and every round of random search) compile all they prepare
        first = not task.model.fitted or sum(r.features is not None for r in task.records) < 4 or task.random_search
        n = batch if first else int(batch * self._pool_factor())
        if first or not task.dmodel or not task.dmodel.fitted:
            proposals = task.propose(n, random_only=first)
        else:
            proposals = task.propose_guided(n, self.opt.explore)
        common = {"func": task.func_script, "compile": first and self.measure_fn is None}
        t0 = time.monotonic()
        futures = [self.executor.submit(worker.prepare, dict(common, **p)) for p in proposals]
        prepared = self._wait(futures, self.opt.build_timeout)
        self.prepare_seconds += time.monotonic() - t0
        if not first and proposals:
            self._prepare_wall = (time.monotonic() - t0) / len(proposals)
        self._collect(task, proposals, prepared)
        valid = list(task.pending.values())
        if not valid:
            task.stale += 1 if proposals else 3        # nothing left to propose: the space is exhausted
            return
        task.stale = 0
        picked = task.rank([p for p in valid if "features" in p], batch, self.opt.explore) if not first else valid[:batch]
        if not first:
            picked += [p for p in valid if "features" not in p][: max(0, batch - len(picked))]
        for p in picked:
            task.pending.pop(task.candidate_key(p["trace"], p["decisions"]), None)
        if self._out_of_time():
            return
        self._build(picked, task.func_script)
        for p in picked:
            if "build_s" in p:
                self.builds += 1
        t0 = time.monotonic()
        self.measure(task, picked)
        if picked:
            self._trial_wall = (time.monotonic() - t0) / len(picked)
        task.refit()
        self.challenge(task, {p["key"] for p in picked})

    # re-timing ------------------------------------------------------------------------------
    def finalists(self, task: TaskState) -> list[Record]:
        """The end of a run's re-timing: the `retime_top` fastest records (their own times) and
        the current best."""
        ok = sorted((r for r in task.records if r.ok), key=lambda r: r.time)[: self.opt.retime_top]
        best = task.best
        if best is not None and all(r.candidate != best.candidate for r in ok):
            ok.append(best)
        return ok if self.opt.retime_top > 0 else []

    def challenge(self, task: TaskState, new: set) -> None:
        """Re-time this round's candidates (`new`: their keys) measured within `challenge` of the
        best before the round against it, so that the best moves only on a win timed side by
        side: a single measurement's minimum, under a load that changes, is often lucky (the
        winner's curse)."""
        if not self.opt.challenge or self._out_of_time(self._final_retime_s()):
            return
        old = [r for r in task.records if r.ok and r.candidate not in new]
        best = best_record(old, task.retimed)
        if best is None or best.time is None:
            return
        rivals = sorted((r for r in task.records if r.ok and r.candidate in new
                         and (r.time or 0.0) < self.opt.challenge * best.time), key=lambda r: r.time or 0.0)
        if rivals:
            self.retime(task, [best] + rivals[: self.opt.challengers])

    def retime(self, task: TaskState, records: list[Record]) -> None:
        """Time `records` against each other (interleaved turns in one measuring process) and
        make that the task's latest re-timing (in the database too): the best is its fastest."""
        if len(records) < 2 or self.opt.retime_top <= 0 or (self.measure_fn is not None and self.retime_fn is None):
            return
        t0 = time.monotonic()
        if self.retime_fn is not None:
            times, rounds, machine = self.retime_fn(records), None, None
        else:
            missing = [r for r in records if r.candidate not in task.scripts]
            if missing:
                futures = [self.executor.submit(worker.prepare, {"func": task.func_script, "trace": r.trace,
                                                                 "decisions": {}}) for r in missing]
                for r, p in zip(missing, self._wait(futures, self.opt.build_timeout)):
                    if p.get("key") == r.candidate and "script" in p:
                        task.scripts[r.candidate] = p["script"]
            records = [r for r in records if r.candidate in task.scripts]
            if len(records) < 2:
                return
            turns = self.opt.retime_rounds
            left = self._time_left()
            if left is not None:                # a spent budget: one turn each (the check still runs)
                per = self.opt.retime_block_s * len(records)
                turns = max(1, min(turns, int(max(0.0, left) / per) if per else turns))
            request = {"func": task.func_script, "func_hash": task.func_hash, "seed": self.opt.check_seed,
                       "candidates": [task.scripts[r.candidate] for r in records], "rounds": turns,
                       "block_s": self.opt.retime_block_s, "min_sample_s": self.opt.min_sample_s,
                       "timeout": self.opt.timeout}
            if self.measure_locally:
                answer = worker.retime(request)
            else:
                answer = self._wait([self.executor.submit(worker.retime, request)], None)[0]
            if "times" not in answer:
                self.progress.note(f"tuning {task.name}: re-timing failed ({answer.get('error', '?')}); "
                                   "keeping the measured times")
                return
            times, rounds, machine = answer["times"], answer.get("rounds"), answer.get("machine")
        found = {r.candidate: (t, rounds[k] if rounds else [t]) for k, (r, t) in enumerate(zip(records, times))
                 if t is not None}
        self.retime_seconds += time.monotonic() - t0
        self.retimings += 1
        self.retimed_candidates += len(records)
        if len(found) < 1:
            return
        wl = task.workload
        if self.db is not None and wl is not None:
            if machine and machine != wl.machine:
                wl = self.db.workload(task.func, task.target, machine=machine)
            if wl is not None:
                self.db.add_retimes(wl, found)
        if machine is None or task.workload is None or machine == task.workload.machine:
            task.retimed = {c: t for c, (t, _) in found.items()}

    def _pool_factor(self) -> float:
        """Proposals prepared per trial: `pool`, fewer when preparing (replaying) a proposal costs
        much more than building and measuring one (the prepare phase then stays within about
        twice the measure phase), at least 1.5."""
        prep, trial = getattr(self, "_prepare_wall", None), getattr(self, "_trial_wall", None)
        if not prep or not trial:
            return float(self.opt.pool)
        return max(1.5, min(float(self.opt.pool), 2.0 * trial / prep))

    def _collect(self, task: TaskState, proposals: list[dict], prepared: list[dict]) -> None:
        """Put the new prepared candidates into the task's pending pool (refused and duplicate
        ones are remembered as tried)."""
        keys = {p["key"] for p in task.pending.values()}
        for proposal, p in zip(proposals, prepared):
            if "invalid" in p or "key" not in p:
                self.invalid += 1
                if proposal.get("_key") is not None:
                    task.tried.add(proposal["_key"])
                continue
            ckey = task.candidate_key(p["trace"], p["decisions"])
            if p["key"] in task.seen or p["key"] in keys or ckey in task.tried:
                self.duplicates += 1
                task.tried.add(ckey)
                continue
            keys.add(p["key"])
            task.pending[ckey] = p
        for ckey in [k for k, p in task.pending.items() if p["key"] in task.seen]:
            del task.pending[ckey]
        while len(task.pending) > 512:                  # the oldest unpicked go first
            del task.pending[next(iter(task.pending))]

    def _build(self, picked: list[dict], func: str | None = None) -> None:
        """Compile the picked candidates that the prepare step did not (`func`: the unscheduled
        function's script)."""
        todo = [p for p in picked if "error" not in p and "build_s" not in p]
        if todo and self.measure_fn is None:
            t0 = time.monotonic()
            futures = [self.executor.submit(worker.build, {"script": p["script"], "key": p["key"], "func": func})
                       for p in todo]
            for p, res in zip(todo, self._wait(futures, self.opt.build_timeout)):
                p.update({k: v for k, v in res.items() if k in ("build_s", "error")})
            self.build_seconds += time.monotonic() - t0

    def measure(self, task: TaskState, picked: list[dict]) -> None:
        requests = []
        for p in picked:
            requests.append({"func": task.func_script, "func_hash": task.func_hash, "candidate": p["script"],
                             "seed": self.opt.check_seed, "warmup": self.opt.warmup, "repeats": self.opt.repeats,
                             "min_sample_s": self.opt.min_sample_s, "measure_s": self.opt.measure_s,
                             "timeout": self.opt.timeout})
        runnable = [i for i, p in enumerate(picked) if "error" not in p]
        answers: dict[int, dict] = {}
        if self.measure_fn is not None:
            for i in runnable:
                answers[i] = self.measure_fn(picked[i])
        elif self.measure_locally:
            for i in runnable:
                answers[i] = worker.measure(requests[i])
        else:
            futures = {i: self.executor.submit(worker.measure, requests[i]) for i in runnable}
            for i, res in zip(futures, self._wait(list(futures.values()), None)):
                answers[i] = res
        self._batch_turns(task, picked, answers)
        for i, p in enumerate(picked):
            self._record(task, p, answers[i] if i in answers else {"error": p["error"]})

    def _batch_turns(self, task: TaskState, picked: list[dict], answers: dict) -> None:
        """Time the batch's candidates that passed again, taking `batch_rounds` turns in one
        measuring process, and keep each one's best sample of its trial and its turns: the
        candidates of a batch then see the same load, and each one's figure is the best of
        several moments instead of one (a moment of a neighbour's load doubles a parallel
        kernel's time on 2 cores)."""
        ok = [i for i, a in answers.items() if a.get("error") is None and a.get("time") and picked[i].get("script")]
        if self.opt.batch_rounds <= 0 or len(ok) < 2 or self.measure_fn is not None:
            return
        request = {"func": task.func_script, "func_hash": task.func_hash, "seed": self.opt.check_seed,
                   "candidates": [picked[i]["script"] for i in ok], "rounds": self.opt.batch_rounds,
                   "block_s": self.opt.batch_block_s, "min_sample_s": self.opt.min_sample_s,
                   "timeout": self.opt.timeout}
        if self.measure_locally:
            answer = worker.retime(request)
        else:
            answer = self._wait([self.executor.submit(worker.retime, request)], None)[0]
        for i, t, rounds in zip(ok, answer.get("times") or [], answer.get("rounds") or []):
            a = answers[i]
            if t is None or (answer.get("machine") and a.get("machine") and answer["machine"] != a["machine"]):
                continue
            a["times"] = list(a.get("times") or []) + list(rounds)
            a["time"] = min(a["time"], t)

    def _record(self, task: TaskState, p: dict, answer: dict) -> None:
        error = answer.get("error")
        if error is None and p.get("script"):
            task.scripts[p["key"]] = p["script"]
        record = Record(candidate=p["key"], trace=p["trace"], decisions=p.get("decisions", {}),
                        time=None if error else answer.get("time"), times=answer.get("times", []),
                        error=error, build_time=p.get("build_s"), features=p.get("features"))
        machine = answer.get("machine") or p.get("machine")
        if machine:
            self.machines.add(machine)
        if self.db is not None:
            wl = task.workload
            if machine and wl is not None and machine != wl.machine:
                wl = self.db.workload(task.func, task.target, machine=machine)
            if wl is not None:
                self.db.add(wl, record)
        if machine is None or task.workload is None or machine == task.workload.machine:
            task.add(record)
        else:
            task.seen.add(record.candidate)
        task.measured_here += 1
        self.trials_done += 1
        best = task.best
        rate = task.flops / record.time / 1e9 if record.time and record.ok and task.flops else None
        best_rate = task.flops / best.time / 1e9 if best is not None and best.time and task.flops else None
        self.progress.update(task.name, record, rate, best.time if best else None, best_rate)


def spread(order, groups: list, k: int) -> list[int]:
    """The first `k` of `order` (indices, best first), at most half of them (rounded up) from one
    group (`groups[i]`: candidate i's sketch) while other groups have candidates left: a model
    fitted on a few trials is confidently wrong about whole sketches.

        spread([0, 1, 2, 3], ["a", "a", "a", "b"], 2) == [0, 3]
    """
    order = list(order)
    cap = max(1, -(-k // 2))
    chosen: list[int] = []
    per: dict = {}
    for i in order:
        if len(chosen) >= k:
            break
        if per.get(groups[i], 0) < cap:
            chosen.append(i)
            per[groups[i]] = per.get(groups[i], 0) + 1
    return chosen + [i for i in order if i not in chosen][: k - len(chosen)]     # the cap left slots


def best_record(records: list, retimed: dict) -> Record | None:
    """The best of `records` that passed: by the re-timed seconds (`retimed`, candidate ->
    seconds of the latest re-timing) among those re-timed, else by their own time (as
    Database.best orders them)."""
    ok = [r for r in records if r.ok]
    if not ok:
        return None
    return min(ok, key=lambda r: (0, retimed[r.candidate]) if r.candidate in retimed else (1, r.time))


def decisions_json(decisions: dict) -> str:
    return json.dumps({str(k): v for k, v in decisions.items()}, sort_keys=True)
