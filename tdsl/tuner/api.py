"""`tdsl.tune`: measure, learn, search, remember (docs/tuning.md).

    result = tdsl.tune(matmul, target="cpu", trials=64, database="tuning.db")
    result.best.time, result.best.gflops, result.best.trace
    result.best.schedule.show()
    print(result)                      # the summary table
    result.plot()                      # best time so far against trials (needs matplotlib)
    kernel = tdsl.build(matmul, target="cpu", database="tuning.db")
"""
from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArgumentError
from ..tracebacks import public_entry
from .cost_model import make_model
from .database import Database, Record
from .flops import flop_count
from .search import Engine, TaskState, TuneOptions, best_record


@dataclass
class Best:
    """The fastest verified candidate of one function. `time` is its re-timed seconds (timed
    against the other finalists, taking turns) when it was re-timed, else its trial's."""

    func: Any
    record: Record
    flops: int | None = None
    retimed: float | None = None

    @property
    def time(self) -> float:
        return self.retimed or self.record.time or 0.0   # a Best is a record that passed: it has a time

    @property
    def gflops(self) -> float | None:
        return self.flops / self.time / 1e9 if self.flops and self.time else None

    @property
    def decisions(self) -> dict:
        return self.record.decisions

    @property
    def trace(self):
        """The candidate's trace (print it: Python that replays it)."""
        from .space import load

        return load(self.record.trace)

    @property
    def schedule(self):
        """A Schedule of the function with the trace replayed, ready for more hand steps."""
        from .space import replay

        return replay(self.trace, self.func)

    def build(self, target: str = "cpu"):
        """The candidate compiled (without a PerformanceWarning: the tuner measured it as it
        builds; a vectorize left scalar is in `kernel.notes`)."""
        import warnings

        from ..backends import build
        from ..errors import PerformanceWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PerformanceWarning)
            return build(self.schedule, target=target)

    def __repr__(self) -> str:
        rate = f", {self.gflops:.1f} GFLOP/s" if self.gflops else ""
        return f"<Best {self.func.name}: {self.time * 1e3:.4f} ms{rate}>"


@dataclass
class TaskResult:
    """What tuning found for one function: its records (this workload's, oldest first) and best."""

    func: Any
    records: list
    flops: int | None
    workload_key: str | None = None
    retimed: dict = field(default_factory=dict)     # candidate -> seconds of the latest re-timing
    sizes: dict | None = None                       # tune(sizes=): the symbolic dimensions' values

    @property
    def name(self) -> str:
        return self.func.name

    @property
    def best(self) -> Best | None:
        """The fastest of the latest re-timing (see docs/tuning.md), else the fastest record."""
        found = best_record(self.records, self.retimed)
        return Best(self.func, found, self.flops, self.retimed.get(found.candidate)) if found else None

    @property
    def verified(self) -> list:
        """CUDA tuned without a GPU: the records built and checked but not measured (`time` None)."""
        return [r for r in self.records if r.unmeasured]

    @property
    def failures(self) -> list:
        return [r for r in self.records if not r.ok and not r.unmeasured]

    def best_so_far(self) -> list[float | None]:
        out, best = [], None
        for r in self.records:
            if r.ok and (best is None or r.time < best):
                best = r.time
            out.append(best)
        return out


@dataclass
class TuneResult:
    """The result of `tdsl.tune`: `.best`, `.records`, `.tasks`, `.plot()`, and `print(result)`."""

    tasks: list
    stats: dict = field(default_factory=dict)
    interrupted: bool = False
    database: str | None = None

    def _single(self, what: str) -> TaskResult:
        if len(self.tasks) != 1:
            names = ", ".join(t.name for t in self.tasks)
            raise AttributeError(f"result.{what}: {len(self.tasks)} functions were tuned ({names}); use "
                                 f"result[name].{what} or result.tasks")
        return self.tasks[0]

    def __getitem__(self, name: str) -> TaskResult:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(f"no tuned function named {name!r}; tuned: {[t.name for t in self.tasks]}")

    @property
    def best(self) -> Best | None:
        return self._single("best").best

    @property
    def records(self) -> list:
        return self._single("records").records

    def table(self) -> str:
        rows = [("function", "trials", "failed", "best time", "GFLOP/s", "first valid", "speedup")]
        for t in self.tasks:
            b = t.best
            first = next((r.time for r in t.records if r.ok), None)
            rows.append((t.name, str(len(t.records)), str(len(t.failures)),
                         f"{b.time * 1e3:.4f} ms" if b else "-", f"{b.gflops:.1f}" if b and b.gflops else "-",
                         f"{first * 1e3:.4f} ms" if first else "-", f"{first / b.record.time:.2f}x" if b and first and b.record.time else "-"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        s = self.stats
        if s:
            lines.append(f"{s.get('trials', 0)} trials in {s.get('seconds', 0):.1f} s "
                         f"({s.get('candidates_per_minute', 0):.0f} candidates/min), "
                         f"{s.get('invalid', 0)} proposals refused by the schedule, {s.get('duplicates', 0)} "
                         f"duplicates skipped; cost model: {s.get('model', '-')}"
                         + (f"; {s['retimings']} re-timings of the best few ({s.get('retime_seconds', 0):.1f} s)"
                            if s.get("retimings") else "")
                         + (f"; resumed from {s['resumed']} records" if s.get("resumed") else "")
                         + ("; interrupted" if self.interrupted else ""))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return self.table()

    def plot(self, ax=None, path: str | None = None):
        """Best time so far against trials, one line per function; returns the matplotlib Axes
        (saved to `path` when given). Needs matplotlib: pip install matplotlib."""
        try:
            import matplotlib

            if ax is None and path is not None:
                matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("result.plot() needs matplotlib: pip install matplotlib "
                              "(print(result) shows the same figures as a table)") from None
        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3.5))
        for t in self.tasks:
            ys = [None if v is None else v * 1e3 for v in t.best_so_far()]
            ax.step(range(1, len(ys) + 1), [float("nan") if v is None else v for v in ys], where="post", label=t.name)
        ax.set_xlabel("trial")
        ax.set_ylabel("best time so far (ms)")
        ax.set_yscale("log")
        ax.legend()
        ax.set_title("tdsl.tune")
        if path is not None:
            ax.figure.savefig(path, dpi=100, bbox_inches="tight")
        return ax


@public_entry
def tune(func_or_funcs, target: str = "cpu", trials: int = 64, time_budget: float | None = None,
         database: str | os.PathLike | Database | None = None, space=None, executor=None, seed: int = 0,
         verbose: int = 1, cost_model="auto", batch: int = 16, timeout: float = 60.0,
         repeats: int = 5, retime: int = 5, sizes: dict | None = None) -> TuneResult:
    """Search the design space of one function (or several sharing the budget) by measuring.

    * `target`: "cpu", or "cuda" (tuner/gpu.py): on a machine with a GPU each candidate is
      checked on the device and timed with CUDA events; without one ("cuda -arch=sm_80") each
      is built, verified in the CUDA emulator and stored unmeasured, for a GPU run to measure.

    * `sizes`: for a function with symbolic dimensions, the sizes to tune it at, e.g.
      `sizes={"n": [64, 1024, 4096]}` (several dimensions: every combination). Each size is a
      constant-shape copy (`func.specialize(n=64)`, a task named `<name>_n64`) sharing the
      trials; with `database`, `tdsl.build(func, database=)` then returns a kernel that runs
      each call with the schedule of the nearest tuned size (tdsl.tuner.dispatch).

    * `trials`: measurements in all (the records of an earlier run in `database` count: an
      interrupted run resumes where it stopped); `time_budget`: seconds, stops starting rounds.
    * `database`: a SQLite path (or Database) keeping every record; None keeps nothing.
    * `space`: None for tdsl's rules (`tdsl.space`), or a function `space(sch)` written with
      ordinary and sampling primitives (or a dict of them by function name).
    * `executor`: any concurrent.futures.Executor for builds (and, when given, measurements);
      default a pool of fresh local processes, one per core (`tdsl.tuner.pool.LocalPool`, which
      may also be passed, to reuse one pool; with it this process measures). Any other executor
      also measures: a Dask `client.get_executor()` builds and measures on the cluster's workers.
    * `cost_model`: "auto" (lightgbm when installed, else numpy), "lightgbm", "numpy",
      "random" (random search) or a CostModel.
    * `retime`: at the end, the `retime` fastest candidates (and the best) are timed again
      against each other, taking turns, and `.best` is the fastest of that re-timing (also in
      the database, for `build(database=)`); during the run a candidate measured close to the
      best is re-timed against it at once. 0: neither (the best is the fastest trial).
    * `verbose`: 0 silent, 1 live bar / summary, 2 one line per candidate. Ctrl-C stops and
      returns the best so far.
    """
    from ..target import parse_target
    from .checking import check_tunable
    from .machine import fingerprint
    from .pool import LocalPool
    from .progress import Progress

    buckets, space = _buckets(func_or_funcs, sizes, space)
    funcs = [f for f, _ in buckets]
    tgt = parse_target(target)
    if not isinstance(trials, int) or trials < 1:
        raise ValueError(f"tune: trials must be a positive int, not {trials!r}")
    for f in funcs:
        check_tunable(f)
    if tgt.kind == "cuda":       # built, verified and (on a GPU) measured one at a time: gpu.py
        from .gpu import tune_cuda

        return tune_cuda(funcs, buckets, tgt, trials, database, space, seed, verbose, repeats)
    db = database if isinstance(database, Database) or database is None else Database(database)
    machine = fingerprint()
    if len(funcs) > 1:   # rounds small enough that every function (every size) gets its share
        batch = min(batch, max(4, trials // len(funcs)))
    options = TuneOptions(trials=trials, time_budget=time_budget, batch=max(1, batch), timeout=timeout,
                          repeats=repeats, retime_top=max(0, int(retime)))
    if not retime:
        options.challenge = 0.0
    rng = random.Random(seed)
    owned = executor is None
    pool = LocalPool() if owned else executor           # its workers start while the sketches are made
    local = isinstance(pool, LocalPool)                 # its workers are on this machine: measure here
    if local:
        from .runner import runner

        runner().prestart()
    try:
        tasks, resumed = _tasks(funcs, tgt, space, seed, rng, cost_model, db, machine)
        if db is not None:
            for task, (_, parent) in zip(tasks, buckets):
                if parent is not None:
                    db.add_bucket(parent[0], str(tgt), parent[1], task.workload, machine)
    except BaseException:
        if owned:
            pool.shutdown(wait=False, cancel_futures=True)
        raise
    already = sum(len(t.records) for t in tasks)
    options.trials = max(0, trials - already)
    progress = Progress(options.trials, verbose=verbose, log_path=db.log_path if db is not None else None,
                        time_budget=time_budget)
    if resumed and db is not None:
        progress.note(f"tuning: resuming from {db.path}: {resumed} records already measured, "
                      f"{options.trials} trials left")
    engine = Engine(tasks, pool, measure_locally=local, database=db, options=options, progress=progress,
                    kill=pool.kill_worker if local else None)
    try:
        engine.run()
    finally:
        if owned:
            pool.shutdown(wait=not engine.interrupted, cancel_futures=True)
    seconds = time.monotonic() - engine.start
    result = TuneResult(
        [TaskResult(t.func, t.records, t.flops, t.workload.key if t.workload else None, dict(t.retimed),
                    parent[1] if parent else None)
         for t, (_, parent) in zip(tasks, buckets)],
        stats={"trials": engine.trials_done, "seconds": seconds, "invalid": engine.invalid,
               "duplicates": engine.duplicates, "builds": engine.builds,
               "candidates_per_minute": engine.trials_done / seconds * 60 if seconds else 0.0,
               "prepare_seconds": engine.prepare_seconds, "build_seconds": engine.build_seconds,
               "model": tasks[0].model.name if tasks else "-", "machines": sorted(engine.machines),
               "retimings": engine.retimings, "retime_seconds": engine.retime_seconds,
               "resumed": resumed},
        interrupted=engine.interrupted, database=db.path if db is not None else None)
    progress.close(result.table())
    if db is not None and not isinstance(database, Database):
        db.close()
    return result


def _buckets(func_or_funcs, sizes, space):
    """(function to tune, (symbolic function, sizes) or None) for each task (`sizes.expand`), and
    the design space with each size's copy taking its symbolic function's entry of a dict."""
    from .sizes import expand

    funcs = list(func_or_funcs) if isinstance(func_or_funcs, (list, tuple)) else [func_or_funcs]
    funcs = [getattr(f, "func", f) for f in funcs]        # a Schedule: its current function
    buckets = expand(funcs, sizes)
    if isinstance(space, dict):
        space = {**{f.name: space[p[0].name] for f, p in buckets if p and p[0].name in space}, **space}
    return buckets, space


def _tasks(funcs, tgt, space, seed: int, rng: random.Random, cost_model, db, machine: str):
    """One TaskState per function (its sketches; its records when a database is given)."""
    from .space import sketches

    tasks, resumed = [], 0
    for k, f in enumerate(funcs):
        fn = space.get(f.name) if isinstance(space, dict) else space
        if isinstance(space, dict) and fn is None:
            raise ArgumentError(f"tune: space= names no design space for {f.name!r} (it has {sorted(space)})")
        found = sketches(f, str(tgt), fn, seed + k)
        if not found:
            raise ArgumentError(f"tune: the design space of {f.name} is empty (space() made no trace)")
        task = TaskState(f, str(tgt), found, make_model(cost_model), random.Random(rng.randrange(1 << 30)),
                         flops=flop_count(f))
        if db is not None:
            task.workload = db.workload(f, str(tgt), machine=machine)
            for r in db.records(task.workload):
                task.add(r)
            task.retimed = db.retimes(task.workload)
            resumed += len(task.records)
            task.refit()
        tasks.append(task)
    return tasks, resumed
