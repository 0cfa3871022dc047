"""IRModule: TVM's module of functions, for the one function a tdsl program schedules.

TVM code reaches a schedule's function through a module (`sch.mod["main"]`) and may build a
schedule from one (`Schedule(IRModule({"main": func}))`). tdsl schedules, lowers and builds one
PrimFunc at a time, so a module here holds exactly one; it answers to "main" and to the
function's own name, and goes wherever a PrimFunc goes (`tdsl.build(sch.mod)`).

    >>> mod = sch.mod
    >>> mod["main"] is sch.func
    True
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

from .stmt import PrimFunc


class IRModule(Mapping):
    """A module holding one PrimFunc: `mod["main"]`, `mod[func.name]`, `mod.script()`."""

    def __init__(self, functions: Mapping[str, PrimFunc] | PrimFunc):
        if isinstance(functions, PrimFunc):
            functions = {"main": functions}
        if not isinstance(functions, Mapping):
            raise TypeError(f"IRModule takes a PrimFunc or a dict of one, not {type(functions).__name__}")
        funcs = dict(functions)
        bad = [k for k, f in funcs.items() if not isinstance(f, PrimFunc)]
        if bad:
            raise TypeError(f"IRModule: {bad[0]!r} is a {type(funcs[bad[0]]).__name__}, not a PrimFunc")
        if len(funcs) != 1:
            raise ValueError(f"IRModule holds one function in tdsl, got {len(funcs)} ({', '.join(funcs) or 'none'}); "
                             "tdsl schedules, lowers and builds one PrimFunc at a time: make a module "
                             "(or a Schedule) per function")
        (self._key, self._func), = funcs.items()

    @classmethod
    def from_expr(cls, func: PrimFunc) -> IRModule:
        """TVM's `IRModule.from_expr(func)`: the module holding `func` as "main"."""
        return cls({"main": func})

    @property
    def func(self) -> PrimFunc:
        """The one function (what `tdsl.build(mod)`, `tdsl.lower(mod)` and `Schedule(mod)` take)."""
        return self._func

    def _names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self._key, "main", self._func.name)))

    def __getitem__(self, name: str) -> PrimFunc:
        if name in self._names():
            return self._func
        raise KeyError(f"this module holds one function, {self._key!r} (also reachable as "
                       f"{' / '.join(repr(n) for n in self._names() if n != self._key)}), not {name!r}")

    def __iter__(self) -> Iterator[str]:
        return iter((self._key,))

    def __len__(self) -> int:
        return 1

    @property
    def functions(self) -> dict[str, PrimFunc]:
        return {self._key: self._func}

    def script(self) -> str:
        """The function as TVMScript-style text (one function: its script)."""
        return self._func.script()

    def __repr__(self) -> str:
        return f"IRModule({{{self._key!r}: {self._func.name}}})"
