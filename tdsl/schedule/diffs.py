"""What schedule steps changed: ScriptDiff (text and HTML), checkpoints and step titles.

    mark = sch.checkpoint("tiles")     # a named point in the schedule's history
    ...                                # several steps
    sch.diff(since=mark)               # what they changed together, titled with each step
    sch.show(diff=3)                   # the last three steps' diff, printed or as HTML
"""
from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..ir import PrimExpr, PrimFunc
from .handles import BlockRV, LoopRV


@dataclass(frozen=True)
class Checkpoint:
    """A point in a schedule's history (`sch.checkpoint()`); `sch.diff(since=mark)` diffs from it."""

    name: str
    steps: int                  # how many steps the schedule had made then
    func: PrimFunc = field(repr=False)
    owner: int = field(repr=False)  # id of the schedule's history list (copies share none)

    def __repr__(self) -> str:
        return f"Checkpoint({self.name!r}, after {self.steps} step{'s' if self.steps != 1 else ''})"


class ScriptDiff:
    """What one or more schedule steps changed: `str()` is a unified diff headed by the steps;
    notebooks render it as highlighted HTML (`_repr_html_`)."""

    def __init__(self, before: str, after: str, title: str | Sequence[str] = "", func_name: str = ""):
        self.before, self.after = before, after
        self.steps: list[str] = [title] if isinstance(title, str) and title else list(title) if title else []
        self.func_name = func_name

    @property
    def title(self) -> str:
        """The steps as one line (`; ` between them)."""
        return "; ".join(self.steps)

    def header(self) -> list[str]:
        """The lines above the diff: what it covers, then one line per step."""
        who = f"{self.func_name}: " if self.func_name else ""
        if not self.steps:
            return [f"# {who}no step".rstrip()] if self.before == self.after else []
        if len(self.steps) == 1:
            return [f"# {who}{self.steps[0]}"]
        return [f"# {who}{len(self.steps)} steps"] + [f"#   {s}" for s in self.steps]

    @property
    def text(self) -> str:
        from ..script.highlight import diff

        head = "\n".join(self.header())
        if self.before == self.after:
            return f"{head}\n(no change)\n" if head else "(no change)\n"
        return (head + "\n" if head else "") + diff(self.before, self.after, "before", "after")

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text

    def show(self) -> None:
        """Print the diff, highlighted in a terminal; in a notebook, display it as HTML."""
        from ..script.highlight import display_html, show_diff_text

        if display_html(self):
            return
        show_diff_text(self.text)

    def _repr_html_(self) -> str:
        from ..script.html import diff_html

        return diff_html(self.before, self.after, self.header())


def step_line(kind: str, inputs: Sequence, attrs: Sequence[tuple[str, object]], outputs: Sequence) -> str:
    """One step as the user would write it, with the names the script prints (`i`, `i_0`, "C")
    instead of the trace's b0/l1: ``i_0, i_1 = sch.split(i, factors=[None, 8])``."""
    args = [_arg(x) for x in inputs] + [f"{k}={_arg(v)}" for k, v in attrs]
    call = f"sch.{kind}({', '.join(args)})"
    outs = [_arg(h) for h in outputs]
    return f"{', '.join(outs)} = {call}" if outs else call


def _arg(x) -> str:
    if isinstance(x, LoopRV):
        return x.name
    if isinstance(x, BlockRV):
        return x.name if x.name.isidentifier() else repr(x)
    if isinstance(x, (list, tuple)):
        inner = ", ".join(_arg(v) for v in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner}{',' if len(x) == 1 else ''})"
    if isinstance(x, PrimExpr):
        from .analysis import expr_text

        return expr_text(x)
    if isinstance(x, str):
        return f'"{x}"' if '"' not in x and "\\" not in x else repr(x)
    if isinstance(x, types.FunctionType):
        return "lambda ..." if x.__name__ == "<lambda>" else x.__name__
    return repr(x)   # IndexMap prints as its lambda
