"""What every schedule rule is: `rule(sch, block) -> list[Schedule]`, with choices as sampling steps.

A rule looks at one block (by name) of a schedule and returns the schedules it makes of it,
best guess first: `[sch]` unchanged when it does not apply, several when it offers
alternatives (the design space branches there), never an empty list. A rule never changes the
schedule it is given; it works on copies. Every tile size, unroll depth or location it picks is
a sampling step (`sample_categorical`, `sample_perfect_tile`, ...) whose decision is the rule's
hardware-aware default when `defaults` is on (what `tdsl.auto_schedule` uses) and random
otherwise (the sketches a search starts from).

Writing a rule: subclass `Rule`, set `name`, implement `apply(sch, block) -> list[Schedule]`
(the base class's `__call__` copies the schedule, drops alternatives that raise ScheduleError
and falls back to `[sch]`). Add it to a design space with `tdsl.auto.default_rules(target) +
[MyRule(hw)]`, or pass `rules=` to `tdsl.auto_schedule` / `tdsl.space`.
"""
from __future__ import annotations

from collections.abc import Sequence

from ...errors import ScheduleError
from ...schedule import Schedule
from ..hardware import Hardware


class Rule:
    """One schedule rule. `hw` is the machine; `defaults` makes every sampled choice the default."""

    name = "rule"

    def __init__(self, hw: Hardware, defaults: bool = True):
        self.hw = hw
        self.defaults = defaults

    def __call__(self, sch: Schedule, block: str) -> list[Schedule]:
        if not _exists(sch, block):
            return [sch]
        out = []
        for make in self.alternatives(sch, block):
            s = sch.copy()
            try:
                if make(s) is not False:
                    out.append(s)
            except ScheduleError:
                continue
        return out or [sch]

    def alternatives(self, sch: Schedule, block: str) -> list:
        """Callables `make(copy) -> None | False`, each building one alternative on a copy of `sch`
        (False: not applicable after all); the first is the default."""
        return []

    # sampling with defaults ---------------------------------------------------------------
    def choose(self, sch: Schedule, candidates: Sequence, default: int = 0, probs: Sequence[float] | None = None):
        """A sampled choice among `candidates`; `default` (an index) when defaults are on. The
        weights (`probs`) are the rule's prior: by default the default candidate weighs as much
        as all the others together, so a search's fresh samples start near the rules' choice
        (on a shared machine 64 trials of uniform samples rarely met it: softmax's default
        decisions are 6, each of 2-4 candidates)."""
        if probs is None:
            probs = [1.0] * len(candidates)
            probs[default] = float(max(1, len(candidates) - 1))
        probs = list(probs)
        return sch.sample_categorical(list(candidates), probs, decision=default if self.defaults else None)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _exists(sch: Schedule, block: str) -> bool:
    """The block is there and is not part of a tensorized block (the inside of a library call or
    a micro-kernel is the intrinsic's description: no rule schedules it) nor of a fused kernel's."""
    from ...intrinsics.cuda_attention import FUSED_KERNEL
    from ...ir import BlockRealize
    from ...ir.attrs import TENSOR_INTRIN
    from ...ir.tree import block_names
    from ...schedule.tree import find_block

    if block not in block_names(sch.func):
        return False
    realize, path = find_block(sch.func, block, "auto")
    if any(k == FUSED_KERNEL for k, _ in realize.block.annotations):   # a fused kernel's block (and inside)
        return False
    return not any(isinstance(p, BlockRealize) and any(k in (TENSOR_INTRIN, FUSED_KERNEL) for k, _ in p.block.annotations)
                   for p in path)


def index_of(candidates: Sequence, value) -> int:
    """The index of `value` in `candidates` (the nearest one when it is missing)."""
    if value in candidates:
        return list(candidates).index(value)
    return min(range(len(candidates)), key=lambda k: abs(candidates[k] - value))
