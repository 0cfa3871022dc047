"""A design space: rules applied to every block, or the user's own `space(sch)` function.

`rules(target)` is the default rule list, in passes:

1. `AutoInline`, blocks in program order (elementwise chains and padding collapse first);
2. the tiling rules (`LibraryCall`: a matmul as a BLAS call or left to the next rules, `MatmulAmxCPU`, `MatmulLowpCPU`, `MatmulTensorizeCPU`,
   `TensorizeMatching`, `MultiLevelTilingCPU` on the
   CPU; `GPUWgmmaPipeline` (arch sm_90a), `GPUMmaConv`, `GPUMmaTiling`, `GPUWmmaTiling`, `GPUMatmulTiling`, `GPUCrossThreadReduction`, `GPUBind` on CUDA), `ComputeLocation` and `VectorReduction`,
   blocks consumers first (post-order: a consumer is tiled before its producers choose where to go);
3. `RowPrefetch` (CPU), blocks in program order;
4. `ParallelVectorizeUnroll` (CPU), blocks in program order.

On CUDA, `FusedAttentionGPU` runs first in pass 1 (before inlining hides the pattern): an
attention chain becomes one block computed by tdsl's fused attention kernel.

Each rule maps a schedule and a block to the schedules it makes (see `rules.base.Rule`); the
space is every combination, `sketches(func, target)` lists them. To extend the space:

* for every call: `register_rule(MyRule, stage="tiling")` (the hook for library calls and
  auto-tensorized candidates: a rule whose alternatives call a library block or tensorize);
* for one call: `passes = default_passes(hw); passes[1].insert(0, MyRule(hw))`, then `passes=`;
* or replace the rules: write `def space(sch): ...` with ordinary and sampling primitives and
  pass `space=space`; it is then the whole design space (one sketch per call).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..schedule import Schedule
from .analysis import top_level_blocks
from .hardware import Hardware, hardware
from .rules import (
    AutoInline,
    ComputeLocation,
    GPUBind,
    GPUCrossThreadReduction,
    GPUMatmulTiling,
    GPUMmaConv,
    GPUMmaTiling,
    GPUWgmmaPipeline,
    GPUWmmaTiling,
    LibraryCall,
    MatmulAmxCPU,
    MatmulLowpCPU,
    MatmulTensorizeCPU,
    MultiLevelTilingCPU,
    ParallelVectorizeUnroll,
    RowPrefetch,
    Rule,
    TensorizeMatching,
    VectorReduction,
)
from .rules.attention_gpu import FusedAttentionGPU


@dataclass
class Pass:
    """Rules applied to every block, in program order or consumers first."""

    rules: list[Rule]
    consumers_first: bool = False

    def insert(self, index: int, rule: Rule) -> None:
        self.rules.insert(index, rule)

    def append(self, rule: Rule) -> None:
        self.rules.append(rule)


STAGES = ("inline", "tiling", "prefetch", "loops")
_REGISTERED: list[tuple[str, int, str, Callable[[Hardware, bool], Rule]]] = []  # (stage, position, kind, factory)


def register_rule(factory: Callable[[Hardware, bool], Rule], *, stage: str = "tiling", position: int = 0,
                  target: str = "cpu") -> Callable[[Hardware, bool], Rule]:
    """Add a rule to every default design space (auto_schedule, space, and tuning) of `target`
    ("cpu" or "cuda"): `factory(hw, defaults)` makes it, e.g. the `Rule` subclass itself; it runs
    in `stage` ("inline", "tiling": consumers first, "prefetch" and "loops": CPU only) at `position` among that
    stage's rules (0: before the built-in ones, so its alternatives come first and its first one is
    auto_schedule's choice). This is the hook for library calls and auto-tensorized candidates:

        class UseMyLibrary(tdsl.auto.Rule):
            name = "my-library"
            def alternatives(self, sch, block): ...   # callables building one schedule each
        tdsl.auto.register_rule(UseMyLibrary)

    Returns `factory` (usable as a class decorator); `unregister_rule(factory)` removes it."""
    if stage not in STAGES:
        raise ValueError(f"register_rule: stage must be one of {STAGES}, not {stage!r}")
    kind = "cuda" if target in ("cuda", "gpu") else "cpu"
    _REGISTERED.append((stage, position, kind, factory))
    return factory


def unregister_rule(factory) -> None:
    """Remove every registration of `factory`."""
    _REGISTERED[:] = [r for r in _REGISTERED if r[3] is not factory]


def default_passes(hw: Hardware, defaults: bool = True) -> list[Pass]:
    """The default rules for `hw` (see the module docstring) plus the registered ones
    (`register_rule`); `defaults`: every sampled choice is the rule's default (auto_schedule) or
    random (a search's sketches)."""
    if hw.is_gpu:
        passes = [Pass([AutoInline(hw, defaults)]),
                  Pass([GPUWgmmaPipeline(hw, defaults), GPUMmaConv(hw, defaults), GPUMmaTiling(hw, defaults), GPUWmmaTiling(hw, defaults), GPUMatmulTiling(hw, defaults), GPUCrossThreadReduction(hw, defaults),
                        GPUBind(hw, defaults)],
                       consumers_first=True)]
    else:
        passes = [Pass([AutoInline(hw, defaults)]),
                  Pass([LibraryCall(hw, defaults), MatmulAmxCPU(hw, defaults), MatmulLowpCPU(hw, defaults), MatmulTensorizeCPU(hw, defaults), TensorizeMatching(hw, defaults),
                        MultiLevelTilingCPU(hw, defaults), ComputeLocation(hw, defaults),
                        VectorReduction(hw, defaults)], consumers_first=True),
                  Pass([RowPrefetch(hw, defaults)]),
                  Pass([ParallelVectorizeUnroll(hw, defaults)])]
    if hw.is_gpu:
        passes[0].insert(0, FusedAttentionGPU(hw, defaults))
    for stage, position, kind, factory in _REGISTERED:
        if kind == hw.kind and STAGES.index(stage) < len(passes):
            passes[STAGES.index(stage)].insert(position, factory(hw, defaults))
    return passes


def _apply_pass(schedules: list[Schedule], p: Pass, limit: int) -> list[Schedule]:
    """Each schedule's blocks (its own: sketches made by earlier passes differ, a library call
    has none of the packing blocks of a generated one) through the pass's rules."""
    out: list[Schedule] = []
    for sch in schedules:
        out.extend(_apply_pass_to(sch, p, limit - len(out)))
        if len(out) >= limit:
            break
    return out[:limit]


def _apply_pass_to(sch: Schedule, p: Pass, limit: int) -> list[Schedule]:
    names = top_level_blocks(sch.func)
    if p.consumers_first:
        names = list(reversed(names))
    schedules = [sch]
    for name in names:
        for rule in p.rules:
            nxt: list[Schedule] = []
            for s in schedules:
                nxt.extend(rule(s, name))
                if len(nxt) >= limit:
                    break
            schedules = nxt[:limit]
    return schedules


def sketches(func, target="cpu", *, passes: list[Pass] | None = None, space: Callable | None = None,
             defaults: bool = False, seed: int | None = 0, limit: int = 64) -> list[Schedule]:
    """The design space of `func` on `target`: schedules whose traces are its sketches (sampling
    steps included; `trace.with_decisions` / replay explores them). `defaults=True` takes every
    rule's default decision instead of sampling. At most `limit` sketches (the first ones: the
    rules' preferred alternatives come first)."""
    hw = hardware(target)
    if space is not None:
        sch = Schedule(func, seed=seed)
        space(sch)
        return [sch]
    passes = passes if passes is not None else default_passes(hw, defaults)
    schedules = [Schedule(func, seed=seed)]
    for p in passes:
        schedules = _apply_pass(schedules, p, limit)
    return schedules


class Space:
    """The sketches of a design space, printable: `print(tdsl.space(matmul, "cpu"))`."""

    def __init__(self, func, target, schedules: list[Schedule]):
        self.func, self.target, self.schedules = func, target, schedules

    def __len__(self) -> int:
        return len(self.schedules)

    def __iter__(self):
        return iter(self.schedules)

    def __getitem__(self, k: int) -> Schedule:
        return self.schedules[k]

    def __str__(self) -> str:
        parts = []
        for k, s in enumerate(self.schedules):
            parts.append(f"# sketch {k}: {len(s.trace)} steps, {len(s.trace.decisions)} decisions\n{s.trace}")
        return "\n\n".join(parts)

    def __repr__(self) -> str:
        return f"Space({self.func.name}, {self.target!r}, {len(self)} sketches)\n{self}"


def space(func, target="cpu", *, passes: list[Pass] | None = None, seed: int | None = 0, limit: int = 64) -> Space:
    """The design space's sketches of `func` on `target` (decisions sampled with `seed`)."""
    return Space(func, target, sketches(func, target, passes=passes, seed=seed, limit=limit))
