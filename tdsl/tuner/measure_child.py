"""The measuring process: `python -m tdsl.tuner.measure_child`, started and fed by tdsl.tuner.runner.

It reads one JSON request per line on stdin and answers one JSON line on its private copy of
stdout (fd 1 itself goes to stderr, so that nothing printed by the code it runs can corrupt the
answers). A request names the unscheduled function (script), the candidate (the scheduled
function's script) and how to measure; the answer is the times or the error. A candidate that
crashes this process or hangs is the runner's to record: it kills this process and starts another.

Per request: parse both scripts, build the candidate (the builder has usually just compiled it,
so the disk cache answers), run it on random inputs and compare with the unscheduled function's
results (built once per function and seed, kept here), then time it: `warmup` calls, then
samples of `number` calls each (`number` grows until one sample lasts `min_sample_s`), at least
`repeats` of them and more until `measure_s` seconds have passed: the minimum of many short
samples is the least disturbed figure on a shared machine.

A `retime` request (one with `candidates`, a list of scripts) times several candidates taking
turns (tdsl.tuner.timing.interleaved): the tuner's re-timing of its best few.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time
import traceback


def _channel():
    """A private copy of stdout for the answers; fd 1 becomes stderr."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


class _References:
    """Reference outputs of the unscheduled functions, by (function hash, seed)."""

    def __init__(self):
        self._known: dict = {}

    def get(self, func, func_hash: str, seed: int):
        key = (func_hash, seed)
        if key not in self._known:
            from ..backends import build
            from .checking import random_inputs

            inputs = random_inputs(func, seed)
            outputs = [a.copy() for a in inputs]
            build(func, target="cpu")(*outputs)
            if len(self._known) > 8:
                self._known.clear()
            self._known[key] = (inputs, outputs)
        return self._known[key]


_FUNCS: dict[str, object] = {}


def _parse(script: str):
    from ..script import parse

    found = _FUNCS.get(script)
    if found is None:
        if len(_FUNCS) > 64:
            _FUNCS.clear()
        found = _FUNCS[script] = parse(script)
    return found


def _checked(req: dict, script: str, refs: _References):
    """(kernel, its arguments) of the candidate `script`, built and checked against the
    unscheduled function on random inputs; or an answer with the error."""
    from ..backends import build
    from .checking import compare, signature_change
    from .space import with_rule_intrinsics

    func = _parse(req["func"])
    candidate = _parse(script)
    changed = signature_change(func, candidate)
    if changed is not None:
        return {"error": changed}
    try:
        kernel = with_rule_intrinsics(lambda: build(candidate, target="cpu"), func)
    except Exception as exc:  # noqa: BLE001 - every failure is the candidate's record
        return {"error": f"build failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    inputs, want = refs.get(func, req["func_hash"], int(req.get("seed", 0)))
    got = [a.copy() for a in inputs]
    kernel(*got)
    wrong = compare(func, got, want)
    if wrong is not None:
        return {"error": wrong}
    return kernel, [a.copy() for a in inputs]


def measure(req: dict, refs: _References) -> dict:
    """Check and time one candidate (`req["candidate"]`); see the module."""
    checked = _checked(req, req["candidate"], refs)
    if isinstance(checked, dict):
        return checked
    kernel, args = checked
    for _ in range(max(1, int(req.get("warmup", 1)))):
        kernel(*args)
    number, min_sample = 1, float(req.get("min_sample_s", 0.002))
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            kernel(*args)
        elapsed = time.perf_counter() - t0
        if elapsed >= min_sample or number >= 1 << 16:
            break
        number = max(number * 2, int(number * min_sample / max(elapsed, 1e-9) * 1.2))
    times: list[float] = []
    repeats, budget = max(1, int(req.get("repeats", 5))), float(req.get("measure_s", 0.1))
    deadline = time.perf_counter() + budget
    while len(times) < repeats or (time.perf_counter() < deadline and len(times) < 500):
        t0 = time.perf_counter()
        for _ in range(number):
            kernel(*args)
        times.append((time.perf_counter() - t0) / number)
    return {"times": times, "time": min(times), "number": number}


def retime(req: dict, refs: _References) -> dict:
    """Time several candidates (`req["candidates"]`, scripts) against each other: each is built
    and checked, then they take turns (`rounds` of them; in its turn each runs for `block_s`
    seconds of samples lasting `min_sample_s`), so that all see the same load. Answers
    `times` (each one's best sample, None for one that failed), `rounds` (each one's best per
    round) and `errors`."""
    from .timing import interleaved

    fns: list = []
    where: list[int] = []
    errors: dict[str, str] = {}
    for k, script in enumerate(req["candidates"]):
        checked = _checked(req, script, refs)
        if isinstance(checked, dict):
            errors[str(k)] = checked["error"]
            continue
        kernel, args = checked
        fns.append(functools.partial(kernel, *args))
        where.append(k)
    per_round: list = []
    best = interleaved(fns, repeat=max(1, int(req.get("rounds", 3))), min_time=float(req.get("min_sample_s", 0.002)),
                       block_time=float(req.get("block_s", 0.05)), per_round=per_round) if fns else []
    times: list = [None] * len(req["candidates"])
    rounds: list = [[] for _ in req["candidates"]]
    for k, t, r in zip(where, best, per_round):
        times[k], rounds[k] = t, r
    return {"times": times, "rounds": rounds, "errors": errors}


def main() -> None:
    channel = _channel()
    refs = _References()
    from .machine import fingerprint

    machine = fingerprint()
    for line in sys.stdin:
        if not line.strip():
            continue
        t0 = time.perf_counter()
        try:
            req = json.loads(line)
            answer = retime(req, refs) if "candidates" in req else measure(req, refs)
        except Exception as exc:  # noqa: BLE001 - reported to the runner, this process goes on
            answer = {"error": f"measurement failed: {type(exc).__name__}: {exc}"[:500],
                      "traceback": traceback.format_exc()[-2000:]}
        answer["machine"] = machine
        answer["elapsed_s"] = time.perf_counter() - t0
        channel.write(json.dumps(answer) + "\n")
        channel.flush()


if __name__ == "__main__":
    main()
