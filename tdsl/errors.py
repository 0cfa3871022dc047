"""The four user-facing error classes, and the caret rendering of a source span."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A place in the user's source: file, 1-based line, 0-based column range."""

    file: str
    line: int
    col: int = 0
    end_col: int | None = None
    source_line: str | None = None

    def render(self) -> str:
        """`file:line:col` followed by the source line and a caret under the span."""
        head = f'  File "{self.file}", line {self.line}'
        if self.source_line is None:
            return head
        text = self.source_line.rstrip("\n")
        stripped = text.lstrip()
        indent = len(text) - len(stripped)
        col = max(self.col - indent, 0)
        end = self.end_col if self.end_col is not None and self.end_col > self.col else self.col + 1
        width = max(min(end, len(text)) - self.col, 1)
        return f"{head}\n    {stripped}\n    {' ' * col}{'^' * width}"


class ScriptError(SyntaxError):
    """The parser rejected a program; the message names the file and line and shows a caret."""

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None):
        self.message = message
        self.span = span
        self.hint = hint
        full = message if not hint else f"{message}\n{hint}"
        if span is not None:
            end = span.end_col + 1 if span.end_col is not None else span.col + 2
            args = (span.file, span.line, span.col + 1, span.source_line, span.line, end)
            super().__init__(full, args)
        else:
            super().__init__(full)

    def __str__(self) -> str:
        parts = [self.message]
        if self.span is not None:
            parts.append(self.span.render())
        if self.hint:
            parts.append(self.hint)
        return "\n".join(parts)


class ScheduleError(Exception):
    """A schedule primitive refused a step; the schedule is unchanged."""


class RemovedHandleError(ScheduleError, IndexError):
    """A handle given to `sch.remove_rv` was used again (an IndexError too, as TVM raises)."""


class UnknownIntrinError(ScheduleError, ValueError):
    """`TensorIntrin.get` of a name nobody registered (a ValueError too, as TVM raises)."""


class TargetError(Exception):
    """build(): unknown target, missing toolchain, or no device."""


class ArgumentError(TypeError, ValueError):
    """A compiled kernel was called with wrong arguments."""


class BoundsError(IndexError):
    """A run-time bounds check (build(..., bounds_check=True)) failed."""


# how messages name the user's loops and blocks -----------------------------------------------

def loop_name(var) -> str:
    """How a message names a loop: `loop i_1`."""
    return f"loop {var.name}"


def block_name(name: str) -> str:
    """How a message names a block: `block "C"`."""
    return f'block "{name}"'


class PerformanceWarning(UserWarning):
    """build() could not do something the schedule asked for (e.g. a `vectorize` that stayed
    scalar): the kernel is correct but slower than requested; `kernel.notes` says what and why."""
