"""The design space as the tuner sees it: sketches (traces with sampling steps) and the
decisions it changes.

A *sketch* is the trace of one run of the design space: tdsl's rules (`tdsl.space`), or the
user's `space(sch)` written with ordinary and sampling primitives. A *proposal* is a sketch with
some decisions replaced (`trace.with_decisions`; None: sampled anew when replayed with the
proposal's seed). Mutations change one decision by its kind:

* `sample_perfect_tile` (tile sizes): move one prime factor from one factor to another
  (the product stays the loop's extent; the innermost stays within max_innermost_factor);
* `sample_categorical` (unroll depth, vector width, parallel extent, intrinsic, ...): another
  candidate, chosen uniformly;
* `sample_compute_location`: sampled anew among the legal locations (decision None).

Crossover takes each decision from one of two parents of the same sketch.
"""
from __future__ import annotations

import json
import random


def sketches(func, target: str, space, seed: int, tries: int = 8) -> list:
    """The distinct sketches (Traces) of the design space `space` for `func`: each Schedule of
    `tdsl.space(func, target)` when `space` is None, else the traces of `space(sch)` run with
    `tries` seeds (a space may return a Schedule or a list of them instead of changing `sch`)."""
    from ..schedule import Schedule

    if space is None:
        try:
            from ..auto import space as rules_space  # tdsl.space: the auto-scheduling rules
        except ImportError:
            raise ValueError("tune: tdsl has no rule-based design space in this installation; pass "
                             "space=fn, a function (sch) -> None written with sampling primitives") from None
        found = [s.trace for s in rules_space(func, target)]
    else:
        found = []
        for k in range(tries):
            sch = Schedule(func, seed=seed * 7919 + k)
            result = space(sch)
            schedules = [sch] if result is None else [result] if isinstance(result, Schedule) else list(result)
            found += [s.trace for s in schedules]
    unique, seen = [], set()
    for trace in found:
        shape = structure(trace)
        if shape not in seen:
            seen.add(shape)
            unique.append(trace)
    return unique


def structure(trace) -> str:
    """What a trace does apart from its decisions (sketches with equal structure are one)."""
    data = trace.as_json()
    return json.dumps(data[0] if isinstance(data, (list, tuple)) and len(data) == 2 else data, sort_keys=True)


def trace_text(trace) -> str:
    return json.dumps(trace.as_json())


def load(text: str):
    from ..schedule.trace import Trace

    return Trace.from_json(text)


def _needs_rule_intrinsics(exc: BaseException) -> bool:
    text = str(exc)
    return "'auto." in text and ("unknown tensor intrinsic" in text or "not registered in this process" in text)


def with_rule_intrinsics(step, func, target: str = "cpu"):
    """`step()`, in any process: a rule of `tdsl.space` may tensorize with an intrinsic it
    generates and registers as it runs (RowPrefetch's "auto.row_prefetch_..."), which a fresh
    process (a pool worker, the measuring child, a later `build(database=)`) does not know yet;
    on that refusal the rules run once for `func` here, registering their intrinsics, and
    `step()` is tried again."""
    from ..errors import ScheduleError, TargetError

    try:
        return step()
    except (ScheduleError, TargetError) as exc:
        if not _needs_rule_intrinsics(exc):
            raise
        try:
            from ..auto import space as rules_space
        except ImportError:
            raise exc from None
        rules_space(func, target)
        return step()


def replay(trace, func, seed: int | None = None, target: str = "cpu"):
    """`trace.apply(func, seed=seed)` with the rules' generated intrinsics registered on demand
    (with_rule_intrinsics)."""
    return with_rule_intrinsics(lambda: trace.apply(func, seed=seed), func, target)


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def mutate_decision(ins, decision, rng: random.Random):
    """A new decision for sampling step `ins` (its current one `decision`), or `...` when it
    has no other value."""
    attrs = dict(ins.attrs)
    if ins.kind == "sample_perfect_tile" and isinstance(decision, (list, tuple)) and len(decision) > 1:
        limit = attrs.get("max_innermost_factor", 0) or 0
        factors = list(decision)
        for _ in range(16):
            src, dst = rng.sample(range(len(factors)), 2)
            primes = _prime_factors(factors[src])
            if not primes:
                continue
            p = rng.choice(primes)
            new = list(factors)
            new[src] //= p
            new[dst] *= p
            if limit <= 0 or new[-1] <= limit:
                return new
        return ...
    if ins.kind == "sample_categorical":
        n = len(attrs.get("candidates", ()))
        others = [k for k in range(n) if k != decision]
        return rng.choice(others) if others else ...
    if ins.kind == "sample_compute_location":
        return None
    return ...


def mutate(trace, rng: random.Random, steps: int = 1) -> dict | None:
    """Decisions for a mutant of `trace`: `steps` of its sampling steps changed (None: nothing to change)."""
    decisions = trace.decisions
    keys = list(decisions)
    rng.shuffle(keys)
    changed: dict = {}
    for k in keys:
        new = mutate_decision(trace.instructions[k], decisions[k], rng)
        if new is not ...:
            changed[k] = new
            if len(changed) >= steps:
                break
    return changed or None


def crossover(a, b, rng: random.Random) -> dict | None:
    """Decisions for a child of traces `a` and `b` (each decision from one of them), or None when
    they are not of one sketch."""
    if structure(a) != structure(b):
        return None
    da, db = a.decisions, b.decisions
    child = {k: (da[k] if rng.random() < 0.5 else db[k]) for k in da}
    return child if child != da and child != db else None
