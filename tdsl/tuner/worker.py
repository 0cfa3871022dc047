"""The tasks the tuner sends to an executor's workers (plain functions of JSON-able dicts, so
that any concurrent.futures.Executor, a local pool or a Dask cluster, can run them).

* `prepare(task)`: replay a trace with some decisions changed (None: sampled anew from the
  task's seed) on the function, lower it, extract its features; with `compile` also compile it
  (into the disk cache, where the measuring process finds it). Replay failures are answered,
  not raised: a decision the schedule refuses makes an invalid proposal, not a failed trial.
* `build(task)`: compile a scheduled function given as script (the lowering of a recent
  `prepare` in this process is reused).
* `measure(task)`: check and time a candidate in this process's measuring child (runner.py),
  one measurement at a time on the machine.
* `retime(task)`: time several candidates against each other (the tuner's re-timing of its
  best few), likewise.
"""
from __future__ import annotations

import json
import time
import traceback
from collections import OrderedDict

_FUNCS: OrderedDict = OrderedDict()
_LOWERED: OrderedDict = OrderedDict()


def _remember(cache: OrderedDict, key, value, limit: int):
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)
    return value


def _parse(script: str):
    from ..script import parse

    found = _FUNCS.get(script)
    return found if found is not None else _remember(_FUNCS, script, parse(script), 32)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text[:600]}"


def _compile(scheduled, lowered) -> float:
    """Compile `scheduled` (already lowered) through the caches; returns the seconds taken."""
    from ..backends.llvm.compile import compile_func

    t0 = time.perf_counter()
    compile_func(scheduled, lambda _f: lowered)
    return time.perf_counter() - t0


def prepare(task: dict) -> dict:
    """Replay, lower, featurize (and with task["compile"] compile) one proposal."""
    from ..ir import structural_hash
    from ..lower import lower
    from ..schedule.trace import Trace
    from .features import features
    from .machine import fingerprint
    from .space import replay

    t0 = time.perf_counter()
    out: dict = {"machine": fingerprint()}
    try:
        func = _parse(task["func"])
        trace = Trace.from_json(task["trace"])
        decisions = {int(k): v for k, v in (task.get("decisions") or {}).items()}
        if decisions:
            trace = trace.with_decisions(decisions)
        sch = replay(trace, func, seed=task.get("seed"))
    except Exception as exc:  # noqa: BLE001 - a refused decision: an invalid proposal
        out.update(invalid=f"replay: {_first_line(exc)}", prepare_s=time.perf_counter() - t0)
        return out
    realized = sch.trace
    out["trace"] = json.dumps(realized.as_json())
    out["decisions"] = {str(k): v for k, v in realized.decisions.items()}
    scheduled = sch.func
    key = structural_hash(scheduled)
    out["key"] = key
    out["script"] = scheduled.script()
    try:
        lowered = lower(scheduled, target="cpu")
        out["features"] = features(lowered)
        _remember(_LOWERED, key, (scheduled, lowered), 64)
    except Exception as exc:  # noqa: BLE001 - a failed lowering fails the candidate
        out.update(error=f"lowering failed: {_first_line(exc)}", prepare_s=time.perf_counter() - t0)
        return out
    if task.get("compile"):
        try:
            out["build_s"] = _compile(scheduled, lowered)
        except Exception as exc:  # noqa: BLE001
            out["error"] = f"build failed: {_first_line(exc)}"
    out["prepare_s"] = time.perf_counter() - t0
    return out


def build(task: dict) -> dict:
    """Compile the scheduled function `task["script"]` (key `task["key"]`; `task["func"]`, the
    unscheduled function's script, lets the rules register their generated intrinsics here)."""
    from ..ir import structural_hash
    from ..lower import lower
    from .space import with_rule_intrinsics

    t0 = time.perf_counter()
    try:
        found = _LOWERED.get(task.get("key"))
        if found is None:
            scheduled = _parse(task["script"])
            if task.get("key") and structural_hash(scheduled) != task["key"]:
                return {"error": "internal error: the candidate's script does not parse back to its program"}
            func = _parse(task["func"]) if task.get("func") else None
            lowered = with_rule_intrinsics(lambda: lower(scheduled, target="cpu"), func) if func is not None \
                else lower(scheduled, target="cpu")
            found = (scheduled, lowered)
        return {"build_s": _compile(*found), "reused_lowering": task.get("key") in _LOWERED,
                "total_s": time.perf_counter() - t0}
    except Exception as exc:  # noqa: BLE001
        return {"error": f"build failed: {_first_line(exc)}", "traceback": traceback.format_exc()[-1500:]}


def measure(task: dict) -> dict:
    """Check and time one candidate in this process's measuring child (see runner.Runner)."""
    from .runner import runner

    request = {k: task[k] for k in ("func", "func_hash", "candidate", "seed", "warmup", "repeats", "min_sample_s",
                                     "measure_s") if k in task}
    return runner().measure(request, timeout=float(task.get("timeout", 60.0)))


def retime(task: dict) -> dict:
    """Time several verified candidates against each other, taking turns, in this process's
    measuring child (measure_child.retime)."""
    from .runner import runner

    request = {k: task[k] for k in ("func", "func_hash", "candidates", "seed", "rounds", "block_s", "min_sample_s")
               if k in task}
    return runner().measure(request, timeout=float(task.get("timeout", 60.0)) * max(1, len(task["candidates"])))
