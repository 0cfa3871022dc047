"""The trace: every schedule step as data, printable as Python and replayable on another function.

Replay re-runs each step by its facade method on the target schedule, mapping the handles the
recording produced to the handles the replay produces; lookups run again by name and position
(get_block("C"), get_loops(b0)), so a trace recorded on one size replays on another.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ScheduleError
from ..ir import Buffer, PrimExpr, Var, free_vars, substitute
from .handles import BlockRV, LoopRV

if TYPE_CHECKING:
    from ..ir import PrimFunc
    from .schedule import Schedule


@dataclass(frozen=True)
class Instruction:
    """One step: `outputs = sch.<kind>(*inputs, **attrs)`; `shape` is "none", "one" or "list"."""

    kind: str
    inputs: tuple
    attrs: tuple[tuple[str, Any], ...]
    outputs: tuple
    shape: str
    serial: int


def _is_handle(x) -> bool:
    return isinstance(x, (BlockRV, LoopRV))


@dataclass
class Trace:
    """The steps of a schedule, oldest first. `str(trace)` is Python that replays them on `sch`."""

    instructions: list[Instruction] = field(default_factory=list)

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
            call = f"sch.{ins.kind}({', '.join(args)})"
            outs = []
            for h in ins.outputs:
                names[id(h)] = f"{'b' if isinstance(h, BlockRV) else 'l'}{len(names)}"
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

    # replay -----------------------------------------------------------------------------
    def apply(self, sch: Schedule) -> dict:
        """Replay every step on `sch`; returns the map from recorded handles to the new ones."""
        mapping: dict[int, Any] = {}
        dims = _dimensions(sch.func)
        for step, ins in enumerate(self.instructions):
            inputs = [_map(x, mapping, dims) for x in ins.inputs]
            attrs = {k: _map(v, mapping, dims) for k, v in ins.attrs}
            try:
                result = getattr(sch, ins.kind)(*inputs, **attrs)
            except ScheduleError as err:
                raise ScheduleError(f"replaying step {step} ({self.as_python()[step]}) failed:\n{err}") from err
            produced = [] if result is None else [result] if _is_handle(result) else list(result)
            if len(produced) != len(ins.outputs):
                raise ScheduleError(f"replaying step {step} ({self.as_python()[step]}): it gave "
                                    f"{len(produced)} handles here but {len(ins.outputs)} when recorded")
            for old, new in zip(ins.outputs, produced):
                mapping[id(old)] = new
        return mapping

    def apply_to(self, func: PrimFunc) -> Schedule:
        """A new Schedule of `func` with every step replayed."""
        from .schedule import Schedule

        sch = Schedule(func)
        self.apply(sch)
        return sch


def _dimensions(func: PrimFunc) -> dict[str, Var]:
    """The scalar parameters and symbolic dimensions of `func`, by name."""
    out = {p.name: p for p in func.params if isinstance(p, Var)}
    for p in func.params:
        if isinstance(p, Buffer):
            out.update((v.name, v) for s in p.shape for v in free_vars(s))
    return out


def _map(x, mapping: dict, dims: dict[str, Var]):
    """A recorded argument for the replay: handles mapped, dimensions taken from the target."""
    if _is_handle(x):
        return mapping[id(x)]
    if isinstance(x, list):
        return [_map(v, mapping, dims) for v in x]
    if isinstance(x, tuple):
        return tuple(_map(v, mapping, dims) for v in x)
    if isinstance(x, PrimExpr):
        return substitute(x, {v: dims[v.name] for v in free_vars(x) if v.name in dims})
    return x


def _fmt(x, names: dict) -> str:
    if _is_handle(x):
        return names.get(id(x), repr(x))
    if isinstance(x, list):
        return "[" + ", ".join(_fmt(v, names) for v in x) + "]"
    if isinstance(x, tuple):
        return "(" + ", ".join(_fmt(v, names) for v in x) + ("," if len(x) == 1 else "") + ")"
    if isinstance(x, PrimExpr):
        from .analysis import expr_text

        return expr_text(x)
    if isinstance(x, str) and '"' not in x and "\\" not in x:
        return f'"{x}"'  # TVMScript style: sch.get_block("C")
    return repr(x)
