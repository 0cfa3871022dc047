"""ScheduleBase: what every part of the Schedule facade stands on.

The state (the function so far, the steps for undo, the trace, which handles live), the
machinery of a step (`_resolve` a handle, `_expect` its kind, `_apply` a pure primitive and
commit it only on success, `_record_sample` a sampling step) and undo / copy. The facade methods
of each family live in `methods/<family>.py` as subclasses of this class; `Schedule`
(schedule.py) joins them. A family's method checks its handles and runs its pure primitive::

    class LoopMethods(ScheduleBase):
        def unroll(self, loop: LoopRV) -> None:
            self._expect("unroll", loop, (LoopRV,), "a loop handle")
            return self._apply("unroll", _loops.unroll, [loop])
"""
from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from typing import ClassVar, TypeVar

from ..errors import RemovedHandleError, ScheduleError
from ..ir import PrimFunc, Var
from ..ir.module import IRModule
from .handles import BlockRV, LoopRV
from .instruction import Instruction
from .primitives import lookup as _lookup
from .tree import ambiguous_block_error, repeated_block_names, unique_names
from .tvm_spelling import absent_method, check_schedule_options
from .values import plain

_SERIAL = itertools.count()
_S = TypeVar("_S", bound="ScheduleBase")


class ScheduleBase:
    """The state and step machinery of a schedule (module docstring). Use `tdsl.Schedule`."""

    facade: ClassVar[type[ScheduleBase]]
    """The class that joins every family's methods (`Schedule`): what `Trace.apply(func)` makes."""

    def __init_subclass__(cls, facade: bool = False, **kwargs):
        super().__init_subclass__(**kwargs)
        if facade:
            ScheduleBase.facade = cls

    def __init__(self, func: PrimFunc | IRModule, seed: int | None = None, *, debug_mask: str | int = "none",
                 error_render_level: str = "detail", enable_check: bool = True):
        if isinstance(func, IRModule):
            func = func.func
        if not isinstance(func, PrimFunc):
            raise TypeError(f"tdsl.Schedule takes a PrimFunc (a @T.prim_func), not {type(func).__name__}")
        self._render = check_schedule_options(debug_mask, error_render_level, enable_check)
        self._func = unique_names(func)
        self._history: list[tuple[PrimFunc, int]] = []  # (function before, trace length before) per step
        self._trace: list[Instruction] = []
        self._live: set[int] = set()
        self._dead: set[int] = set()
        self._removed: set[tuple] = set()  # handles given to remove_rv: (serial, block name or id(loop var))
        self._rng = random.Random(seed)

    def __getattr__(self, name: str):
        # only reached for names the schedule does not have: TVM's get a pointer to tdsl's way
        raise absent_method(name)

    @property
    def func(self) -> PrimFunc:
        """The function as scheduled so far."""
        return self._func

    @property
    def mod(self) -> IRModule:
        """TVM's view of the function as scheduled so far: `sch.mod["main"]` is `sch.func`."""
        return IRModule({"main": self._func})

    def copy(self: _S) -> _S:
        """An independent schedule at the same point; handles of this one work on it too. Its
        random source starts where this one's is (reseed it with `copy.seed(n)` to sample apart)."""
        other = type(self)(self._func, error_render_level=self._render)
        other._history = list(self._history)
        other._trace = list(self._trace)
        other._live = set(self._live)
        other._dead = set(self._dead)
        other._removed = set(self._removed)
        other._rng.setstate(self._rng.getstate())
        return other

    def undo(self) -> None:
        """Go back one step; the handles that step (and later lookups) produced die."""
        if not self._history:
            raise ScheduleError("undo: there is no step to undo")
        func, length = self._history.pop()
        for ins in self._trace[length:]:
            self._live.discard(ins.serial)
            self._dead.add(ins.serial)
        del self._trace[length:]
        self._func = func

    def _resolve(self, x, primitive: str):
        """A handle's identity (block name / loop Var), after checking the handle is alive here."""
        if isinstance(x, (BlockRV, LoopRV)):
            if x.serial not in self._live:
                why = ("the step that made it was undone" if x.serial in self._dead
                       else "it belongs to another schedule (replay with trace.apply)")
                raise ScheduleError(f"{primitive}: the handle {x!r} is no longer valid: {why}")
            if (x.serial, x.name if isinstance(x, BlockRV) else id(x.var)) in self._removed:
                raise RemovedHandleError(f"{primitive}: the handle {x!r} was removed with sch.remove_rv; look the "
                                         "block or loop up again")
            return x.name if isinstance(x, BlockRV) else x.var
        if isinstance(x, (list, tuple)):
            return [self._resolve(v, primitive) for v in x]
        return plain(x)

    def _expect(self, primitive: str, x, kinds: tuple[type, ...], what: str) -> None:
        if isinstance(x, str) and BlockRV in kinds:
            # a block may be named by its name, as in TVM (sch.compute_at("B", loop))
            _lookup.get_block(self._func, x)
            return
        if not isinstance(x, kinds):
            shown = repr(x) if isinstance(x, (BlockRV, LoopRV, str, int)) else type(x).__name__
            raise ScheduleError(f"{primitive}: expected {what}, got {shown}")

    def _wrap(self, result, serial: int):
        if result is None:
            return (), "none", None
        if isinstance(result, (str, Var)):
            h = self._handle(result, serial)
            return (h,), "one", h
        handles = [self._handle(r, serial) for r in result]
        return tuple(handles), "list", handles

    @staticmethod
    def _handle(identity, serial: int):
        return BlockRV(identity, serial) if isinstance(identity, str) else LoopRV(identity, serial)

    def _apply(self, kind: str, fn: Callable, inputs: Sequence, attrs: dict | None = None, *, step: bool = True):
        """Run pure primitive `fn` on the current function; commit and record it only on success."""
        attrs = attrs or {}
        if isinstance(attrs.get("buffer"), list):  # ["read", 0] (a trace read back from JSON) is ("read", 0)
            attrs = {**attrs, "buffer": tuple(attrs["buffer"])}
        resolved = [self._resolve(x, kind) for x in inputs]
        new_func, result = fn(self._func, *resolved, **{k: self._resolve(v, kind) for k, v in attrs.items()})
        _refuse_repeated_names(kind, new_func, result)
        serial = next(_SERIAL)
        outputs, shape, wrapped = self._wrap(result, serial)
        if step:
            self._history.append((self._func, len(self._trace)))
        self._trace.append(Instruction(kind, tuple(inputs), tuple(attrs.items()), outputs, shape, serial))
        self._live.add(serial)
        self._func = new_func
        return wrapped

    def _record_sample(self, kind: str, inputs: list, attrs: dict, decision, make):
        """Record a sampling step with its decision; `make(serial)` gives the step's result."""
        serial = next(_SERIAL)
        result = make(serial)
        outputs = tuple(result) if isinstance(result, list) else (result,)
        shape = "list" if isinstance(result, list) else "one"
        self._trace.append(Instruction(kind, tuple(inputs), tuple(attrs.items()), outputs, shape, serial,
                                       decision))
        self._live.add(serial)
        return result


def _refuse_repeated_names(primitive: str, func: PrimFunc, result) -> None:
    """A lookup (get_child_blocks, get_consumers, ...) cannot hand out a handle to a block whose
    name several blocks have: the handle would stand for all of them."""
    repeated = repeated_block_names(func)
    if not repeated:
        return
    names = [result] if isinstance(result, str) else [r for r in result or () if isinstance(r, str)] \
        if isinstance(result, (list, tuple)) else []
    for name in names:
        if name in repeated:
            raise ambiguous_block_error(func, name, primitive)
