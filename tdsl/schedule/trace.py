"""The trace: every schedule step as data, printable as Python and replayable on another function.

Replay re-runs each step by its facade method on the target schedule, mapping the handles the
recording produced to the handles the replay produces; lookups run again by name and position
(get_block("C"), get_loops(b0)), so a trace recorded on one size replays on another.

Sampling steps (`sample_perfect_tile`, ...) carry their decision: a replay reuses it, and
`with_decisions` gives the same trace with other decisions (None: sample anew). `as_json()` /
`Trace.from_json()` is the form stored in tuning databases (see `trace_json`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import ScheduleError
from ..ir import Buffer, PrimExpr, PrimFunc, Var, free_vars, substitute
from .analysis import expr_text
from .base import ScheduleBase
from .handles import BlockRV, LoopRV
from .instruction import Instruction
from .primitives.layout import IndexMap
from .trace_json import instructions_from_json, trace_to_json
from .values import ValueRV

__all__ = ["Instruction", "Trace"]


# steps that only look things up: `Trace.simplified` drops them when nothing uses what they give
_LOOKUPS = frozenset({"get_block", "get_sblock", "get_loops", "get_child_blocks", "get_producers",
                      "get_consumers", "get_output_blocks"})


def _is_handle(x) -> bool:
    return isinstance(x, (BlockRV, LoopRV) + ValueRV)


def _prefix(h) -> str:
    return "b" if isinstance(h, BlockRV) else "l" if isinstance(h, LoopRV) else "v"


class Trace:
    """The steps of a schedule, oldest first. `str(trace)` is Python that replays them on `sch`.

    `Trace(steps)`, or TVM's `Trace(insts=steps, decisions={step: decision})` where the
    decisions override those of the sampling steps."""

    def __init__(self, instructions: list[Instruction] | None = None, decisions: dict | None = None, *,
                 insts: list[Instruction] | None = None):
        if instructions is not None and insts is not None:
            raise TypeError("Trace takes the steps once: Trace(steps) or Trace(insts=steps)")
        steps = list(instructions if instructions is not None else insts if insts is not None else [])
        for ins in steps:
            if not isinstance(ins, Instruction):
                raise TypeError(f"a Trace holds Instructions, not {type(ins).__name__}")
        self.instructions: list[Instruction] = steps
        if decisions:
            self.instructions = self.with_decisions(decisions).instructions

    def __eq__(self, other) -> bool:
        return isinstance(other, Trace) and self.instructions == other.instructions

    __hash__ = None  # type: ignore[assignment]

    @property
    def insts(self) -> list[Instruction]:
        """TVM's name for the steps."""
        return self.instructions

    # editing (TVM's append / pop / get_decision / simplified) -----------------------------
    def append(self, inst: Instruction, decision: Any = None) -> None:
        """Add a step at the end (with `decision`, for a sampling step)."""
        if not isinstance(inst, Instruction):
            raise TypeError(f"Trace.append takes an Instruction, not {type(inst).__name__}")
        self.instructions.append(replace(inst, decision=decision) if decision is not None else inst)

    def pop(self) -> Instruction | None:
        """Remove and return the last step; None when the trace is empty."""
        return self.instructions.pop() if self.instructions else None

    def get_decision(self, inst: Instruction) -> Any:
        """The decision of a step of this trace (None for a step that samples nothing)."""
        for ins in self.instructions:
            if ins is inst:
                return ins.decision
        raise ScheduleError(f"get_decision: {inst.kind} is not a step of this trace")

    def simplified(self, remove_postproc: bool = True) -> Trace:
        """The same trace without lookups whose handles no later step uses (TVM's dead-code
        elimination). tdsl traces have no postprocessing steps, so `remove_postproc` changes
        nothing."""
        used: set[int] = set()
        kept: list[Instruction] = []

        def mark(x) -> None:
            if _is_handle(x):
                used.add(id(x))
            elif isinstance(x, (list, tuple)):
                for v in x:
                    mark(v)

        for ins in reversed(self.instructions):
            if ins.kind in _LOOKUPS and not any(id(h) in used for h in ins.outputs):
                continue
            kept.append(ins)
            for x in ins.inputs:
                mark(x)
            for _, v in ins.attrs:
                mark(v)
        return Trace(list(reversed(kept)))

    def __len__(self) -> int:
        return len(self.instructions)

    def __iter__(self):
        return iter(self.instructions)

    # printing ---------------------------------------------------------------------------
    def as_python(self) -> list[str]:
        """One line of Python per step."""
        names: dict[int, str] = {}
        lines = []
        for ins in self.instructions:
            args = [_fmt(x, names) for x in ins.inputs] + [f"{k}={_fmt(v, names)}" for k, v in ins.attrs]
            if ins.is_sampling:
                args.append(f"decision={ins.decision!r}")
            call = f"sch.{ins.kind}({', '.join(args)})"
            outs = []
            for h in ins.outputs:
                names[id(h)] = f"{_prefix(h)}{len(names)}"
                outs.append(names[id(h)])
            if ins.shape == "one":
                lines.append(f"{outs[0]} = {call}")
            elif ins.shape == "list" and len(outs) == 1:
                lines.append(f"({outs[0]},) = {call}")
            elif ins.shape == "list" and outs:
                lines.append(f"{', '.join(outs)} = {call}")
            else:
                lines.append(call)
        return lines

    def __str__(self) -> str:
        return "\n".join(self.as_python())

    def __repr__(self) -> str:
        return f"Trace({len(self.instructions)} steps)\n{self}"

    def _repr_html_(self) -> str:
        from ..script.highlight import to_html

        return to_html(str(self))

    # decisions --------------------------------------------------------------------------
    @property
    def decisions(self) -> dict[int, Any]:
        """The decision of each sampling step, by step index."""
        return {k: ins.decision for k, ins in enumerate(self.instructions) if ins.is_sampling}

    def with_decisions(self, decisions: dict) -> Trace:
        """The same steps with other decisions: keys are step indices (or the Instruction
        objects) of sampling steps, values the new decisions (None: sample anew on replay).

        >>> tiles = {k: d for k, d in trace.decisions.items() if isinstance(d, list)}
        >>> sch = trace.with_decisions({min(tiles): [16, 4]}).apply(func)
        """
        steps = list(self.instructions)
        for key, decision in decisions.items():
            k = key if isinstance(key, int) and not isinstance(key, bool) else next(
                (i for i, ins in enumerate(steps) if ins is key), None)
            if k is None or not 0 <= k < len(steps):
                raise ScheduleError(f"with_decisions: {key!r} is not a step of this trace (0..{len(steps) - 1})")
            if not steps[k].is_sampling:
                raise ScheduleError(f"with_decisions: step {k} ({self.as_python()[k]}) is not a sampling step; "
                                    f"the sampling steps are {sorted(self.decisions)}")
            steps[k] = replace(steps[k], decision=decision)
        return Trace(steps)

    # replay -----------------------------------------------------------------------------
    def apply(self, target: ScheduleBase | PrimFunc, seed: int | None = None):
        """Replay every step, decisions included. On a PrimFunc: returns a new Schedule of it (its
        random source seeded with `seed`, which only matters for decisions that are None). On a
        Schedule: replays onto it and returns the map from recorded handles to the new ones. A
        step the target refuses raises a ScheduleError naming the step."""
        if isinstance(target, PrimFunc):
            sch = ScheduleBase.facade(target, seed=seed)
            self._replay(sch)
            return sch
        if not isinstance(target, ScheduleBase):
            raise TypeError(f"trace.apply takes a PrimFunc or a Schedule, not {type(target).__name__}")
        return self._replay(target)

    def _replay(self, sch: ScheduleBase) -> dict:
        mapping: dict[int, Any] = {}
        dims = _dimensions(sch.func)
        for step, ins in enumerate(self.instructions):
            try:
                inputs = [_map(x, mapping, dims) for x in ins.inputs]
                attrs = {k: _map(v, mapping, dims) for k, v in ins.attrs}
            except KeyError:
                raise ScheduleError(f"replaying step {step} ({self.as_python()[step]}): it uses a handle that no "
                                    "earlier step of the trace made") from None
            if ins.is_sampling:
                attrs["decision"] = ins.decision
            try:
                result = getattr(sch, ins.kind)(*inputs, **attrs)
            except ScheduleError as err:
                raise ScheduleError(f"replaying step {step} ({self.as_python()[step]}) failed:\n{err}") from err
            except AttributeError as err:
                if hasattr(sch, ins.kind):
                    raise
                raise ScheduleError(f"replaying step {step}: the schedule has no primitive {ins.kind!r}") from err
            produced = [] if result is None else [result] if _is_handle(result) else list(result)
            if len(produced) != len(ins.outputs):
                raise ScheduleError(f"replaying step {step} ({self.as_python()[step]}): it gave "
                                    f"{len(produced)} handles here but {len(ins.outputs)} when recorded")
            for old, new in zip(ins.outputs, produced):
                mapping[id(old)] = new
        return mapping

    def apply_to(self, func: PrimFunc, seed: int | None = None) -> ScheduleBase:
        """A new Schedule of `func` with every step replayed (the same as `apply(func)`)."""
        return self.apply(func, seed=seed)

    # JSON ---------------------------------------------------------------------------------
    def as_json(self) -> list:
        """The trace as JSON data, `[instructions, decisions]` as in TVM's `Trace.as_json`:
        each instruction `[kind, inputs, attrs, outputs]`, each decision `[step, decision]`;
        handles are named "b0", "l1", "v2", strings are quoted ('"C"'). `json.dumps` it to store."""
        return trace_to_json(self)

    @staticmethod
    def apply_json_to_schedule(json_obj, sch: ScheduleBase) -> None:
        """TVM's name: replay the steps of `as_json()` data (or its `json.dumps` text) on `sch`."""
        Trace.from_json(json_obj).apply(sch)

    @staticmethod
    def from_json(data) -> Trace:
        """The trace of `as_json()` data (or of its `json.dumps` text)."""
        return Trace(instructions_from_json(data))


def _dimensions(func: PrimFunc) -> dict[str, Var]:
    """The scalar parameters and symbolic dimensions of `func`, by name."""
    out = {p.name: p for p in func.params if isinstance(p, Var)}
    for p in func.params:
        if isinstance(p, Buffer):
            out.update((v.name, v) for s in p.shape for v in free_vars(s))
    return out


def _map(x, mapping: dict, dims: dict[str, Var]):
    """A recorded argument for the replay: handles mapped, dimensions taken from the target."""
    if isinstance(x, ValueRV):  # a sampled value: the replay's, or the number if made elsewhere
        return mapping.get(id(x), x._plain())
    if _is_handle(x):
        return mapping[id(x)]
    if isinstance(x, list):
        return [_map(v, mapping, dims) for v in x]
    if isinstance(x, tuple):
        return tuple(_map(v, mapping, dims) for v in x)
    if isinstance(x, PrimExpr):
        return substitute(x, {v: dims[v.name] for v in free_vars(x) if v.name in dims})
    if isinstance(x, IndexMap):  # a map over symbolic dimensions: the target's
        return x.bind_dims(dims)
    return x


def _fmt(x, names: dict) -> str:
    if _is_handle(x):
        return names.get(id(x), repr(x))
    if isinstance(x, list):
        return "[" + ", ".join(_fmt(v, names) for v in x) + "]"
    if isinstance(x, tuple):
        return "(" + ", ".join(_fmt(v, names) for v in x) + ("," if len(x) == 1 else "") + ")"
    if isinstance(x, PrimExpr):
        return expr_text(x)
    if isinstance(x, str) and '"' not in x and "\\" not in x:
        return f'"{x}"'  # TVMScript style: sch.get_block("C")
    return repr(x)
