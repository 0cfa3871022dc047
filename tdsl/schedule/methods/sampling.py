"""Sampling primitives (a part of `Schedule`): random choices recorded, with their decision, in the trace.

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

from collections.abc import Sequence

from ...errors import ScheduleError
from ..base import ScheduleBase
from ..errors import schedule_error
from ..handles import BlockRV, LoopRV
from ..primitives.sampling import (
    INLINE,
    INLINE_DECISION,
    ROOT,
    ROOT_DECISION,
    can_inline,
    check_perfect_tile,
    compute_location_candidates,
    constant_extent,
    random_perfect_tile,
)
from ..values import FloatRV, IntRV, StrRV, plain, value_rv


class SamplingMethods(ScheduleBase):
    """sample_perfect_tile, sample_categorical, sample_compute_location, seed, fork_seed."""

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
            extent = constant_extent(self._func, var, "sample_perfect_tile")
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
        elif decision == INLINE_DECISION and can_inline(self._func, name):
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
