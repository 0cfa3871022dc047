"""Sampling primitives (a mixin of `Schedule`): random choices recorded, with their decision, in the trace.

A sampling step does not change the function; it returns values (`IntRV`, `FloatRV`, `StrRV`:
plain ints / floats / strings that remember the step) or a loop handle, which later steps use
like any other argument. The trace records each sampling step with its *decision* (the factors,
the candidate index, the loop index), so

* a trace replays exactly (`trace.apply(func)`: every decision is reused), and
* a search changes only the decisions (`trace.with_decisions({step: decision})`) and replays:
  the changed decision either applies or the replay raises a ScheduleError.

The random source is the schedule's own `random.Random` (`tdsl.Schedule(func, seed=0)`), so a
seeded schedule samples the same decisions every time. Only a value passed on as is stays tied
to its sampling step: `sch.split(l, factors=[None, v])` follows a changed decision,
`factors=[None, v * 2]` records the plain number.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ScheduleError
from ..ir import IntImm, PrimFunc, Var
from .errors import loop_name, schedule_error
from .handles import BlockRV, LoopRV
from .primitives import compute_at as _compute_at
from .primitives import compute_inline as _compute_inline
from .primitives import lookup as _lookup
from .tree import find_loop

if TYPE_CHECKING:
    from .trace import Instruction

ROOT = Var("root")
"""The loop variable of the handle `sample_compute_location` returns for "stay at the root":
`compute_at(block, that_handle)` then leaves the block where it is."""
INLINE = Var("inline")
"""The loop variable of the handle for "inline": `compute_at(block, that_handle)` inlines it."""
ROOT_DECISION, INLINE_DECISION = -1, -2


class _ValueRV:
    """Mixin of the sampled values: the serial of the step that sampled them."""

    serial: int
    _plain: Callable[[], int | float | str]  # each value type's own

    def __getnewargs__(self):
        return (self._plain(), self.serial)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


class IntRV(_ValueRV, int):
    """A sampled integer: behaves as an int; the trace follows it back to its sampling step."""

    def __new__(cls, value: int, serial: int):
        obj = int.__new__(cls, value)
        obj.serial = serial
        return obj

    def _plain(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return repr(int(self))


class FloatRV(_ValueRV, float):
    """A sampled float (from `sample_categorical`)."""

    def __new__(cls, value: float, serial: int):
        obj = float.__new__(cls, value)
        obj.serial = serial
        return obj

    def _plain(self) -> float:
        return float(self)

    def __repr__(self) -> str:
        return repr(float(self))


class StrRV(_ValueRV, str):
    """A sampled string (from `sample_categorical`, e.g. an intrinsic name)."""

    def __new__(cls, value: str, serial: int):
        obj = str.__new__(cls, value)
        obj.serial = serial
        return obj

    def _plain(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return repr(str.__str__(self))


ValueRV = (IntRV, FloatRV, StrRV)


def plain(x):
    """A sampled value as a plain int / float / str (anything else unchanged)."""
    return x._plain() if isinstance(x, _ValueRV) else x


def value_rv(value, serial: int):
    """Wrap a sampled int / float / str."""
    if isinstance(value, bool):
        raise TypeError("sampled values are ints, floats or strings, not bools (sample 0 / 1 instead)")
    if isinstance(value, int):
        return IntRV(value, serial)
    if isinstance(value, float):
        return FloatRV(value, serial)
    if isinstance(value, str):
        return StrRV(value, serial)
    raise TypeError(f"sampled values are ints, floats or strings, not {type(value).__name__}")


# -- pure sampling logic -----------------------------------------------------------------------

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


def _constant_extent(func: PrimFunc, loop_var: Var, primitive: str) -> int:
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
    extent = _constant_extent(func, loop_var, "sample_perfect_tile")
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


def _inlinable(func: PrimFunc, block: str) -> bool:
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
    inlinable = _inlinable(func, block) if stop_after is None else False
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


# -- the Schedule methods ----------------------------------------------------------------------

class SamplingMethods:
    """sample_perfect_tile, sample_categorical, sample_compute_location, seed, fork_seed."""

    # what the mixin uses of its host, Schedule (schedule.py)
    _rng: random.Random
    _func: PrimFunc
    _trace: list[Instruction]
    _live: set[int]
    _resolve: Callable[[Any, str], Any]
    _expect: Callable[[str, Any, tuple[type, ...], str], None]

    def seed(self, value: int) -> None:
        """Reseed the schedule's random source (the next samples follow from `value`)."""
        self._rng.seed(value)

    def fork_seed(self) -> int:
        """A new seed drawn from this schedule's random source (for a copy that samples differently)."""
        return self._rng.randrange(1 << 31)

    def sample_perfect_tile(self, loop: LoopRV, n: int, max_innermost_factor: int = 16,
                            decision: Sequence[int] | None = None) -> list[IntRV]:
        """Sample `n` factors whose product is the loop's (constant) extent, the innermost at most
        `max_innermost_factor` (<= 0: no limit; n = 1 gives [extent]); `decision` forces the factors.

        Call::

            sch = tdsl.Schedule(matmul, seed=0)          # matmul: a 64 x 64 x 64 GEMM
            i, j, k = sch.get_loops(sch.get_block("C"))
            i_factors = sch.sample_perfect_tile(i, n=2)   # e.g. [8, 8]
            i0, i1 = sch.split(i, factors=i_factors)

        Trace::

            v4, v5 = sch.sample_perfect_tile(l1, n=2, max_innermost_factor=16, decision=[8, 8])
            l6, l7 = sch.split(l1, factors=[v4, v5])
        """
        self._expect("sample_perfect_tile", loop, (LoopRV,), "a loop handle (from sch.get_loops)")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ScheduleError(f"sample_perfect_tile: n is the number of factors, a positive int, not {n!r}")
        if not isinstance(max_innermost_factor, int) or isinstance(max_innermost_factor, bool):
            raise ScheduleError("sample_perfect_tile: max_innermost_factor must be an int, "
                                f"not {max_innermost_factor!r}")
        var = self._resolve(loop, "sample_perfect_tile")
        if decision is None:
            extent = _constant_extent(self._func, var, "sample_perfect_tile")
            decision = random_perfect_tile(self._rng, extent, n, max_innermost_factor)
        if isinstance(decision, (list, tuple)):
            decision = [plain(f) for f in decision]
        factors = check_perfect_tile(self._func, var, n, max_innermost_factor, decision)
        return self._record_sample("sample_perfect_tile", [loop], {"n": n, "max_innermost_factor":
                                   max_innermost_factor}, factors, lambda s: [IntRV(f, s) for f in factors])

    def sample_categorical(self, candidates: Sequence[int | float | str], probs: Sequence[float],
                           decision: int | None = None) -> IntRV | FloatRV | StrRV:
        """Sample one of `candidates` with probabilities `probs` (weights, normalised); the
        decision is the index of the candidate chosen.

        Call::

            depth = sch.sample_categorical([0, 16, 64], [0.25, 0.5, 0.25])
            sch.annotate(loop, "pragma_auto_unroll_max_step", depth)

        Trace::

            v3 = sch.sample_categorical(candidates=[0, 16, 64], probs=[0.25, 0.5, 0.25], decision=1)
        """
        cands = [plain(c) for c in candidates] if isinstance(candidates, (list, tuple)) else None
        if not cands:
            raise ScheduleError(f"sample_categorical: candidates must be a non-empty list, not {candidates!r}")
        for c in cands:
            if isinstance(c, bool) or not isinstance(c, (int, float, str)):
                raise ScheduleError(f"sample_categorical: candidate {c!r} is not an int, float or string")
        weights = [plain(p) for p in probs] if isinstance(probs, (list, tuple)) else None
        if weights is None or len(weights) != len(cands) or any(
                isinstance(p, bool) or not isinstance(p, (int, float)) or p < 0 for p in weights) \
                or sum(weights) <= 0:
            raise ScheduleError(f"sample_categorical: probs must be {len(cands)} non-negative weights with a "
                                f"positive sum (one per candidate), not {probs!r}")
        if decision is None:
            decision = self._rng.choices(range(len(cands)), weights=weights)[0]
        decision = plain(decision)
        if isinstance(decision, bool) or not isinstance(decision, int) or not 0 <= decision < len(cands):
            raise ScheduleError(f"sample_categorical: the decision {decision!r} is not the index of one of "
                                f"the {len(cands)} candidates {cands}")
        chosen = cands[decision]
        return self._record_sample("sample_categorical", [], {"candidates": cands, "probs": weights},
                                   decision, lambda s: value_rv(chosen, s))

    def sample_compute_location(self, block: BlockRV, decision: int | None = None) -> LoopRV:
        """Sample where `block` is computed: one of the loops of its consumers where `compute_at`
        is legal, or -1 "stay at the root", or -2 "inline" (where `compute_inline` is legal);
        the decision is the loop's index among those loops, outer to inner, or -1 / -2. Pass the
        result to `compute_at`, which inlines, keeps or moves the block accordingly. A given
        decision (a replay) checks only what it needs: nothing for -1, the inlining for -2, the
        loops up to the k-th legal one for k.

        Call::

            loc = sch.sample_compute_location(sch.get_block("B"))
            sch.compute_at(sch.get_block("B"), loc)

        Trace::

            l2 = sch.sample_compute_location(b1, decision=0)
            sch.compute_at(b1, l2)
        """
        self._expect("sample_compute_location", block, (BlockRV,), "a block handle (from sch.get_block)")
        name = self._resolve(block, "sample_compute_location")
        decision = plain(decision)
        if decision is None or isinstance(decision, bool) or not isinstance(decision, int):
            inlinable, loops = compute_location_candidates(self._func, name)
        elif decision == ROOT_DECISION:         # a given decision: only what it needs is checked
            inlinable, loops = False, []
        elif decision == INLINE_DECISION and _inlinable(self._func, name):
            inlinable, loops = True, []
        else:
            found = compute_location_candidates(self._func, name, stop_after=decision) if decision >= 0 else None
            inlinable, loops = found if found and decision < len(found[1]) else \
                compute_location_candidates(self._func, name)   # refused: the error lists every choice
        choices = [ROOT_DECISION] + ([INLINE_DECISION] if inlinable else []) + list(range(len(loops)))
        if decision is None:
            decision = self._rng.choice(choices)
        if decision not in choices or isinstance(decision, bool):
            raise schedule_error(self._func, "sample_compute_location", f"the decision {decision!r} is not "
                                 f"one of {choices} for block \"{name}\" (-1: root, -2: inline, k: the k-th of "
                                 f"the loops {[v.name for v in loops]})", blocks=(name,))
        var = ROOT if decision == ROOT_DECISION else INLINE if decision == INLINE_DECISION else loops[decision]
        return self._record_sample("sample_compute_location", [block], {}, decision,
                                   lambda s: LoopRV(var, s))

    def _record_sample(self, kind: str, inputs: list, attrs: dict, decision, make):
        """Record a sampling step with its decision; `make(serial)` gives the step's result."""
        from .schedule import _SERIAL
        from .trace import Instruction

        serial = next(_SERIAL)
        result = make(serial)
        outputs = tuple(result) if isinstance(result, list) else (result,)
        shape = "list" if isinstance(result, list) else "one"
        self._trace.append(Instruction(kind, tuple(inputs), tuple(attrs.items()), outputs, shape, serial,
                                       decision))
        self._live.add(serial)
        return result
