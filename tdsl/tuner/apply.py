"""`tdsl.build(func, database=...)`: the best record of the function's workload, applied.

The workload is the function's structural hash, the target and this machine. The best record
that still replays (a trace recorded by an older tdsl may not) gives the schedule; with no such
record the function is auto-scheduled (`tdsl.auto_schedule`) or, where this installation has no
auto-scheduler, built as written, and a NoTuningRecord warning says so.
"""
from __future__ import annotations

import warnings


class NoTuningRecord(UserWarning):
    """build(database=) found no usable record for the function and fell back."""


def lookup_target(target, options: dict) -> str:
    """The target string build(database=) looks records up under: for CUDA, the architecture
    given to build (`arch=`, or the target string's -arch; they must agree) spelled into it, so
    that only that architecture's records are found (a record tuned for sm_90a is never applied
    to an sm_80 build, whatever GPU this machine has)."""
    from ..backends import _cuda_options
    from ..target import parse_target

    tgt = parse_target(target)
    if tgt.kind != "cuda":
        return str(tgt)
    arch = _cuda_options(tgt, options).get("arch")
    return str(tgt) if arch is None or tgt.get("arch") is not None else f"{tgt} -arch={arch}"


def _cuda_records(func, target: str, db):
    """(a workload, records to try in order) for CUDA, all of the target's architecture (its
    -arch, else this GPU's): measured on this GPU (when it is of that architecture), then on
    another GPU of the architecture, then verified but unmeasured (tuner/gpu.py)."""
    from .gpu import places, ranked

    dbt, here, unmeasured = places(target)
    workloads = db.workloads_of(func, dbt) if dbt is not None else []
    order = sorted(workloads, key=lambda w: (w.machine != here, w.machine == unmeasured, w.id))
    return (order[0] if order else None), [r for w in order for r in ranked(db, w)]


def schedule_from_database(func, target: str, database):
    """The function scheduled by its best replayable record, or the fallback (see the module)."""
    from ..errors import ScheduleError
    from .database import Database
    from .space import load, replay

    db = database if isinstance(database, Database) else Database(database)
    try:
        if target.startswith("cuda"):
            wl, candidates = _cuda_records(func, target, db)
        else:
            wl = db.workload(func, target, create=False)
            candidates = db.best(wl, k=5) if wl is not None else []
        for record in candidates:
            try:
                return replay(load(record.trace), func, target=target).func
            except (ScheduleError, ValueError, KeyError, TypeError) as exc:
                warnings.warn(NoTuningRecord(f"build(database={db.path!r}): record {record.id} of {func.name} no "
                                             f"longer replays ({str(exc).splitlines()[0]}); trying the next"),
                              stacklevel=3)
        why = "has no record of this function" if wl is None or not db.count(wl) else \
            "has no record of this function that passed and replays"
    finally:
        if db is not database:
            db.close()
    try:
        from ..auto import auto_schedule
    except ImportError:
        auto_schedule = None  # type: ignore[assignment]
    if auto_schedule is not None:
        try:
            scheduled = auto_schedule(func, target=target).func
        except Exception as exc:  # noqa: BLE001 - the function as written still builds
            warnings.warn(NoTuningRecord(f"build(database={db.path!r}): the database {why} on this machine and "
                                         f"target {target!r}, and tdsl.auto_schedule({func.name}) failed "
                                         f"({type(exc).__name__}: {str(exc).splitlines()[0]}); building it as "
                                         "written"), stacklevel=3)
            return func
        warnings.warn(NoTuningRecord(f"build(database={db.path!r}): the database {why} on this machine "
                                     f"and target {target!r}; using tdsl.auto_schedule({func.name}) instead"),
                      stacklevel=3)
        return scheduled
    warnings.warn(NoTuningRecord(f"build(database={db.path!r}): the database {why} on this machine and "
                                 f"target {target!r}, and this tdsl has no auto_schedule; building {func.name} "
                                 "as written (unscheduled)"), stacklevel=3)
    return func
