"""The Schedule facade: one short method per primitive, a trace, undo and diffs.

Each method checks its handles, runs the pure primitive on the current function and commits
the result only when the primitive succeeded: a refused step leaves the schedule untouched.
The methods live by family in `methods/<family>.py`, each a part on `ScheduleBase` (base.py:
state, handles, `_apply`, undo, copy), mirroring `primitives/<family>.py` and
`tests/schedule/test_<family>.py`. Adding a primitive = a pure function in
`primitives/<family>.py` + one method calling `self._apply(...)` in `methods/<family>.py`.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir import PrimFunc
from ..tracebacks import wrap_public_methods
from .diffs import Checkpoint, ScriptDiff, step_line
from .methods.annotate import AnnotateMethods
from .methods.auto_tensorize import AutoTensorizeMethods
from .methods.block_layout import BlockLayoutMethods
from .methods.blockize import BlockizeMethods
from .methods.cache import CacheMethods
from .methods.compute_at import ComputeAtMethods
from .methods.compute_inline import ComputeInlineMethods
from .methods.einsum import EinsumMethods
from .methods.hopper import HopperMethods
from .methods.layout import LayoutMethods
from .methods.lookup import LookupMethods
from .methods.loops import LoopMethods
from .methods.reduction import ReductionMethods
from .methods.reindex_cache import ReindexCacheMethods
from .methods.sampling import SamplingMethods
from .trace import Trace
from .tvm_spelling import accept_tvm_spelling


class Schedule(LookupMethods, LoopMethods, AnnotateMethods, CacheMethods, ComputeAtMethods, ComputeInlineMethods,
               ReductionMethods, LayoutMethods, BlockLayoutMethods, ReindexCacheMethods, EinsumMethods,
               BlockizeMethods, AutoTensorizeMethods, HopperMethods, SamplingMethods, facade=True):
    """Transforms a PrimFunc step by step. `sch.func` is the current function.

    Loops written with the same name in two nests are told apart as the printer shows them
    (`i`, `i_1`), so messages and traces use the names `sch.show()` prints.

    >>> sch = tdsl.Schedule(matmul)
    >>> i, j, k = sch.get_loops(sch.get_block("C"))
    >>> i0, i1 = sch.split(i, factors=[None, 32])

    `seed` seeds the random source of the sampling primitives (`sample_perfect_tile`, ...):
    the same seed samples the same decisions; None draws a fresh seed.
    """

    @property
    def trace(self) -> Trace:
        """The steps so far; `print(sch.trace)` shows them as Python."""
        return Trace(list(self._trace))

    def checkpoint(self, name: str | None = None) -> Checkpoint:
        """Mark this point of the schedule: ``mark = sch.checkpoint("tiles")``; later
        ``sch.diff(since=mark)`` / ``sch.show(diff=mark)`` show what the steps since changed."""
        if name is not None and not isinstance(name, str):
            raise ScheduleError(f"checkpoint: the name must be a string, not {type(name).__name__}")
        steps = len(self._history)
        return Checkpoint(name if name is not None else f"step {steps}", steps, self._func, id(self._history))

    def _func_after(self, steps: int) -> PrimFunc:
        return self._history[steps][0] if steps < len(self._history) else self._func

    def _since(self, since) -> int:
        """The number of steps made before `since` (a Checkpoint, or how many steps back)."""
        if isinstance(since, Checkpoint):
            if since.owner != id(self._history):
                raise ScheduleError(f"diff: {since!r} belongs to another schedule (made by its checkpoint())")
            if since.steps > len(self._history) or self._func_after(since.steps) is not since.func:
                raise ScheduleError(f"diff: {since!r} no longer exists: the steps since then were undone "
                                    f"(this schedule has made {len(self._history)} steps)")
            return since.steps
        if isinstance(since, bool) or not isinstance(since, int) or since < 0:
            raise ScheduleError(f"diff: expected a checkpoint (sch.checkpoint()) or a number of steps >= 0, "
                                f"got {since!r}")
        return max(len(self._history) - since, 0)

    def step_lines(self, start: int = 0) -> list[str]:
        """The steps from number `start` on, one line each, with the names the script prints."""
        lines = []
        for k in range(start, len(self._history)):
            first = self._history[k][1]
            if first < len(self._trace):
                ins = self._trace[first]
                lines.append(step_line(ins.kind, ins.inputs, ins.attrs, ins.outputs))
        return lines

    def diff(self, since: Checkpoint | int | None = None) -> ScriptDiff:
        """What steps changed, as a unified diff of the script headed by the steps:
        the last step (default), the steps since a checkpoint (``since=mark``) or the last
        `since` steps (``since=3``)."""
        start = self._since(1 if since is None else since)
        before = self._func_after(start)
        return ScriptDiff(before.script(), self._func.script(), self.step_lines(start), self._func.name)

    def show(self, diff: bool | int | Checkpoint = False, style: str | None = None) -> None:
        """Show the function: highlighted in a terminal, HTML in a notebook. ``diff=True``: what
        the last step changed; ``diff=3``: the last three steps; ``diff=mark``: since a checkpoint."""
        if diff is True:
            self.diff().show()
        elif diff is False or diff is None:
            from ..script.highlight import display_html

            if not display_html(self):
                self._func.show(style=style)
        else:
            self.diff(since=diff).show()

    def __repr__(self) -> str:
        n = len(self._history)
        return f"# Schedule of {self._func.name}, {n} step{'s' if n != 1 else ''}\n{self._func.script()}"

    def _repr_html_(self) -> str:
        from ..script.html import script_html

        n = len(self._history)
        last = self.step_lines(n - 1) if n else []
        head = f"# Schedule of {self._func.name}, {n} step{'s' if n != 1 else ''}"
        return script_html(self._func.script(), [head + (f"; last: {last[0]}" if last else "")])


accept_tvm_spelling(Schedule)
wrap_public_methods(Schedule)
