"""The pure logic of the sampling primitives: perfect tiles and compute locations.

`random_perfect_tile` draws factors, `check_perfect_tile` checks a given decision against the loop,
`compute_location_candidates` lists where a block may be computed. The facade methods
(`tdsl.schedule.methods.sampling`) record each choice, with its decision, in the trace.
"""
from __future__ import annotations

import random

from ...errors import ScheduleError
from ...ir import IntImm, PrimFunc, Var
from ..errors import loop_name, schedule_error
from ..tree import find_loop
from . import compute_at as _compute_at
from . import compute_inline as _compute_inline
from . import lookup as _lookup

ROOT = Var("root")
"""The loop variable of the handle `sample_compute_location` returns for "stay at the root":
`compute_at(block, that_handle)` then leaves the block where it is."""
INLINE = Var("inline")
"""The loop variable of the handle for "inline": `compute_at(block, that_handle)` inlines it."""
ROOT_DECISION, INLINE_DECISION = -1, -2


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


def divisors(n: int) -> list[int]:
    """The positive divisors of n, ascending."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def random_perfect_tile(rng: random.Random, extent: int, n: int, max_innermost_factor: int) -> list[int]:
    """n factors whose product is `extent`, the innermost at most `max_innermost_factor`: the
    innermost a uniform choice among the allowed divisors, each prime factor of the rest given to
    a uniformly chosen outer factor."""
    if n == 1:
        return [extent]
    allowed = [d for d in divisors(extent) if max_innermost_factor <= 0 or d <= max_innermost_factor]
    inner = rng.choice(allowed)
    factors = [1] * n
    factors[-1] = inner
    for p in _prime_factors(extent // inner):
        factors[rng.randrange(n - 1)] *= p
    return factors


def constant_extent(func: PrimFunc, loop_var: Var, primitive: str) -> int:
    loop, _ = find_loop(func, loop_var, primitive)
    if not isinstance(loop.extent, IntImm):
        raise schedule_error(func, primitive, f"{loop_name(loop_var)} has the symbolic extent "
                             f"{loop.extent}; perfect tiles need a constant extent", loops=(loop_var,),
                             fix="split it with a sampled inner factor instead: v = sch.sample_categorical("
                                 "[8, 16, 32], [1/3] * 3); sch.split(loop, [None, v]) (a predicate covers "
                                 "the remainder)")
    return int(loop.extent.value)


def check_perfect_tile(func: PrimFunc, loop_var: Var, n: int, max_innermost_factor: int,
                       decision) -> list[int]:
    """The decision's factors, after checking them against the loop (a ScheduleError otherwise)."""
    extent = constant_extent(func, loop_var, "sample_perfect_tile")
    if not isinstance(decision, (list, tuple)) or len(decision) != n or not all(
            isinstance(f, int) and not isinstance(f, bool) and f >= 1 for f in decision):
        raise schedule_error(func, "sample_perfect_tile", f"the decision {decision!r} is not a list of {n} "
                             "positive integers", loops=(loop_var,))
    product = 1
    for f in decision:
        product *= int(f)
    if product != extent:
        raise schedule_error(func, "sample_perfect_tile", f"the decision {list(decision)} multiplies to "
                             f"{product}, but {loop_name(loop_var)} has extent {extent}", loops=(loop_var,),
                             rule="the factors of a perfect tile multiply to the loop's extent")
    if n > 1 and max_innermost_factor > 0 and decision[-1] > max_innermost_factor:
        raise schedule_error(func, "sample_perfect_tile", f"the decision's innermost factor {decision[-1]} is "
                             f"above max_innermost_factor={max_innermost_factor}", loops=(loop_var,))
    return [int(f) for f in decision]


def can_inline(func: PrimFunc, block: str) -> bool:
    try:
        _compute_inline.compute_inline(func, block)
        return True
    except ScheduleError:
        return False


def compute_location_candidates(func: PrimFunc, block: str, stop_after: int | None = None
                                ) -> tuple[bool, list[Var]]:
    """(whether `block` can be inlined, the loops it can be computed at): the loops around its
    consumers, outer to inner, where `compute_at` succeeds. With `stop_after` k, the search
    stops once k + 1 loops are found (the k-th is all a given decision needs) and the inlining
    is not tried (False)."""
    inlinable = can_inline(func, block) if stop_after is None else False
    loops: list[Var] = []
    _, consumers = _lookup.get_consumers(func, block)
    for consumer in consumers:
        _, around = _lookup.get_loops(func, consumer)
        for var in around:
            if any(v is var for v in loops):
                continue
            try:
                _compute_at.compute_at(func, block, var)
            except ScheduleError:
                continue
            loops.append(var)
            if stop_after is not None and len(loops) > stop_after:
                return inlinable, loops
    return inlinable, loops

