"""The reference interpreter: runs any PrimFunc (blocks or lowered IR) on numpy arrays.

It is the test oracle for every schedule primitive and backend. Each PrimFunc is translated
once into a plain Python function (see `python_source`) that is cached per function object.

Semantics in brief: blocks bind their iterators from the realize's values (checked against the
iterator domains), run only when `T.where` holds, and run their init when every reduce iterator
is at the minimum of its domain. Loops of every kind run serially. Intermediate buffers are
allocated fresh at block entry / `Allocate` and filled with NaN (floats), the byte 0xA5 (ints)
or True (bool), so reading uninitialised memory shows up. `T.if_then_else` is lazy, `T.Select`
eager. Arithmetic follows numpy scalar semantics in the IR dtype: float16 in float16, integers
wrap around, casts from float to int truncate toward zero, `//` and `%` are floor division and
floor modulo. Every access outside a buffer's shape raises `tdsl.BoundsError`.
"""
from __future__ import annotations

import itertools
import linecache
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from .interp.binding import bind_arguments, written_buffers
from .interp.codegen import BASE_GLOBALS, InterpretError, PythonCodegen
from .interp.runtime import GARBAGE_BYTE, ExternCallError
from .ir.buffer import Buffer
from .ir.expr import Var
from .ir.stmt import PrimFunc, as_prim_func
from .tracebacks import public_entry

__all__ = ["GARBAGE_BYTE", "ExternCallError", "InterpretError", "interpret", "python_source"]

_CACHE_SIZE = 256


@dataclass(frozen=True)
class _Compiled:
    func: PrimFunc  # kept alive so that its id() stays unique while cached
    run: object
    source: str
    sig_buffers: list[Buffer]
    sig_vars: list[Var]
    written: set[Buffer]
    filename: str


_cache: OrderedDict[int, _Compiled] = OrderedDict()
_serial = itertools.count()


def _compile(func: PrimFunc) -> _Compiled:
    hit = _cache.get(id(func))
    if hit is not None and hit.func is func:
        _cache.move_to_end(id(func))
        return hit
    gen = PythonCodegen(func)
    source = gen.generate()
    namespace = dict(BASE_GLOBALS)
    namespace.update(gen.globals)
    filename = f"<tdsl interpreter: {func.name} #{next(_serial)}>"
    # Registered so that tracebacks through the generated code show its lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    compiled = _Compiled(func, namespace[gen.entry_name], source, gen.sig_buffers, gen.sig_vars,
                         written_buffers(func), filename)
    _cache[id(func)] = compiled
    if len(_cache) > _CACHE_SIZE:
        _, old = _cache.popitem(last=False)
        linecache.cache.pop(old.filename, None)
    return compiled


def _prepare(func: PrimFunc, args, kwargs):
    compiled = _compile(func)
    return compiled, bind_arguments(func, compiled.sig_buffers, compiled.sig_vars, compiled.written, args, kwargs)


def python_source(func: PrimFunc) -> str:
    """The Python code the interpreter runs for `func` (useful to see what a program means)."""
    return _compile(as_prim_func(func, "tdsl.interpret")).source


@public_entry
def interpret(func: PrimFunc, *args, **kwargs):
    """Run `func` (a PrimFunc, or a Schedule's current function) on numpy arrays, following
    the calling convention of docs/calling.md.

    Arguments match parameters in order (or by name). Buffers the function writes may be left
    out: they are allocated and returned (one -> the array, several -> a tuple in parameter
    order, none left out -> None). Wrong arguments raise `tdsl.ArgumentError`.
    """
    from .deep import run_deep

    func = as_prim_func(func, "tdsl.interpret")
    # a deep program (a 3,000-term sum) is generated and its arguments matched on a big stack
    compiled, call = run_deep(lambda: _prepare(func, args, kwargs))
    with np.errstate(all="ignore"):
        compiled.run(*call.storages, *call.values)
    call.finish()
    if not call.allocated:
        return None
    if len(call.allocated) == 1:
        return call.allocated[0]
    return tuple(call.allocated)
