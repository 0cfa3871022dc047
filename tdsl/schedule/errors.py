"""ScheduleError construction: the user's names, the loop nest around the culprit, the rule, the fix.

A message reads like this::

    split: factors [4, 30] multiply to 120, but loop i has extent 128
      rule: without a None factor, the factors of a split must multiply to the loop's extent
      fix: write factors=[None, 30] to let tdsl infer the outer factor (...)
        >> for i, j, k in T.grid(128, 128, 128):  # <-- i
               with T.block("C"):
"""
from __future__ import annotations

import re

from ..errors import ScheduleError, block_name, loop_name
from ..ir import PrimFunc, Var

__all__ = ["block_name", "loop_name", "render_context", "schedule_error"]

_CONTEXT_BEFORE = 2
_CONTEXT_AFTER = 3
_FOR_LINE = re.compile(r"^\s*for\s+(.+?)\s+in\s")


def schedule_error(func: PrimFunc, primitive: str, message: str, *, loops: tuple[Var, ...] = (),
                   blocks: tuple[str, ...] = (), rule: str | None = None, fix: str | None = None) -> ScheduleError:
    """Build a ScheduleError for `primitive`; `loops`/`blocks` are the culprits marked in the context."""
    parts = [f"{primitive}: {message}"]
    if rule:
        parts.append(f"  rule: {rule}")
    if fix:
        parts.append(f"  fix: {fix}")
    context = render_context(func, loops, blocks)
    if context:
        parts.append(context)
    err = ScheduleError("\n".join(parts))
    err.primitive = primitive  # type: ignore[attr-defined]
    err.rule = rule  # type: ignore[attr-defined]
    err.fix = fix  # type: ignore[attr-defined]
    return err


def _marked_lines(lines: list[str], loops: tuple[Var, ...], blocks: tuple[str, ...]) -> dict[int, str]:
    """Culprit line index -> a note naming the culprit when the line holds several loops."""
    names = {v.name for v in loops}
    quoted = [f'T.block("{b}")' for b in blocks]
    marked: dict[int, str] = {}
    for idx, line in enumerate(lines):
        m = _FOR_LINE.match(line)
        if m:
            on_line = [n.strip() for n in m.group(1).split(",")]
            hit = [n for n in on_line if n in names]
            if hit:
                marked[idx] = f"  # <-- {', '.join(hit)}" if len(on_line) > 1 else ""
        elif any(q in line for q in quoted):
            marked[idx] = ""
    return marked


def _body_start(lines: list[str]) -> int:
    """The index of the first line of the function body (after the decorator and signature)."""
    for idx, line in enumerate(lines):
        if line.rstrip().endswith(":") and not line[:1].isspace() and not line.startswith("@"):
            return idx + 1
    return 0


def render_context(func: PrimFunc, loops: tuple[Var, ...] = (), blocks: tuple[str, ...] = ()) -> str:
    """The printed lines around the culprits, each culprit line marked with `>>`."""
    if not loops and not blocks:
        return ""
    try:
        text = func.script()
    except Exception:  # an error message must never fail because the printer did
        return ""
    lines = text.splitlines()
    start = _body_start(lines)
    marked = {i: note for i, note in _marked_lines(lines, loops, blocks).items() if i >= start}
    if not marked:
        return ""
    shown: set[int] = set()
    for idx in marked:
        shown.update(range(max(idx - _CONTEXT_BEFORE, start), min(idx + _CONTEXT_AFTER + 1, len(lines))))
    shown.update(marked)
    order = sorted(shown)
    indent = min(len(lines[i]) - len(lines[i].lstrip()) for i in order if lines[i].strip())
    out = []
    prev = None
    for idx in order:
        if prev is not None and idx != prev + 1:
            out.append("          ...")
        gutter = "    >> " if idx in marked else "       "
        out.append(gutter + lines[idx][indent:] + marked.get(idx, ""))
        prev = idx
    return "\n".join(out)
