"""Tuning (docs/tuning.md): measure candidates of a design space, learn a cost model, search, remember.

`tdsl.tune(...)` is `tdsl.tuner.api.tune`; the layers, bottom up:

* machine.py: the machine fingerprint; database.py: the SQLite records;
* checking.py, flops.py, features.py: random inputs and the comparison with the unscheduled
  function, FLOP counts, the cost model's features from the lowered IR;
* measure_child.py, runner.py: measurement in an isolated process, one at a time per machine;
* pool.py: the default executor (fresh local processes); worker.py: the tasks it runs;
* cost_model.py, space.py, search.py: models, decisions and their mutations, the search rounds;
* progress.py: the live bar and log; apply.py: `build(..., database=)`; api.py: `tune`;
* gpu.py: `tune(target="cuda")`: candidates checked on the GPU and timed with CUDA events, or
  verified in the emulator and stored unmeasured where there is no GPU.
"""
from __future__ import annotations

from .api import Best, TaskResult, TuneResult, tune
from .database import Database, Record, Workload

__all__ = ["Best", "Database", "Record", "TaskResult", "TuneResult", "Workload", "tune"]
