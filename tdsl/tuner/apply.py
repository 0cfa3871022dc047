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


def _cuda_records(func, target: str, db):
    """(a workload, records to try in order) for CUDA: measured on this GPU, then measured on
    another GPU of the architecture (fastest first), then verified but unmeasured (the first
    verified first: tuner/gpu.py)."""
    from ..backends.cuda import runtime
    from ..target import parse_target
    from .gpu import db_target, gpu_machine, unmeasured_machine

    arch = parse_target(target).get("arch")
    here = None
    if runtime.has_gpu():
        info = runtime.device_info()
        arch, here = arch or info.arch, gpu_machine(info.name, info.arch)
    if arch is None:
        return None, []
    workloads = db.workloads_of(func, db_target(arch))
    order = sorted(workloads, key=lambda w: (w.machine != here, w.machine == unmeasured_machine(arch), w.id))
    found = []
    for w in order:
        if w.machine == unmeasured_machine(arch):
            rank = {"verified-unmeasured": 0, "checked-unmeasured": 1}
            found += sorted((r for r in db.records(w) if r.unmeasured), key=lambda r: (rank.get(r.status or "", 2),
                                                                                       r.id or 0))
        else:
            found += db.best(w, k=5)
    return (workloads[0] if workloads else None), found


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
