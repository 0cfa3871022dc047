"""Errors from public entry points show the user's code, not tdsl's internals.

`public_entry` wraps a public function: when it raises one of tdsl's user errors (or any error
raised by the entry function's own argument checks), the traceback keeps only frames outside
the tdsl package (the user's line and any callback of theirs, e.g. a transform_layout lambda)
and the chain of internal causes is hidden; the message, its notes and `__cause__` messages
stay. The one tdsl frame left is the wrapper's re-raise, whose source line says how to see
everything: `tdsl.config.full_traceback = True` or TDSL_FULL_TRACEBACK=1 (then nothing is
trimmed). The untrimmed traceback stays on the exception as `__tdsl_traceback__` (for pdb).
"""
from __future__ import annotations

import functools
import types

from .config import config
from .errors import ArgumentError, BoundsError, ScheduleError, ScriptError, TargetError

USER_ERRORS = (ScriptError, ScheduleError, TargetError, ArgumentError, BoundsError)


def _internal(frame: types.FrameType) -> bool:
    name = frame.f_globals.get("__name__", "")
    return isinstance(name, str) and (name == "tdsl" or name.startswith("tdsl."))


def user_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """A copy of the traceback chain `tb` without tdsl's own frames."""
    kept = []
    while tb is not None:
        if not _internal(tb.tb_frame):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


# code of thin wrappers between an entry and the function it wraps (tvm_spelling's renaming)
PASSTHROUGH: set = set()


def _raised_by_entry(tb: types.TracebackType | None) -> bool:
    """The error came from the entry function's own frame (a deliberate argument check), not
    from deeper down (which may be a bug in tdsl: that keeps its whole traceback)."""
    if tb is None or tb.tb_next is None:
        return False
    tb = tb.tb_next
    while tb.tb_next is not None and tb.tb_frame.f_code in PASSTHROUGH:
        tb = tb.tb_next
    return tb.tb_next is None


def trimmed(error: BaseException) -> BaseException:
    """`error` with its traceback (and those of its causes) cut to the user's frames."""
    if getattr(error, "__tdsl_traceback__", None) is None:
        error.__tdsl_traceback__ = error.__traceback__  # type: ignore[attr-defined]
    cause = error.__cause__
    seen = {id(error)}
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        cause.__traceback__ = user_frames(cause.__traceback__)
        cause.__suppress_context__ = True
        cause = cause.__cause__
    error.__suppress_context__ = True  # the internal exception being handled when it was raised
    return error.with_traceback(user_frames(error.__traceback__))


def public_entry(fn):
    """Decorate a public function so that its user errors show the user's frames only."""

    @functools.wraps(fn)
    def entry(*args, **kwargs):
        __tracebackhide__ = True  # read by IPython and pytest: they skip this frame
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # re-raised below, trimmed or as it is
            if config.full_traceback or not (isinstance(exc, USER_ERRORS) or _raised_by_entry(exc.__traceback__)):
                raise
            error = trimmed(exc)
        raise error  # tdsl internals hidden: tdsl.config.full_traceback = True (or TDSL_FULL_TRACEBACK=1) shows them

    entry.__tdsl_entry__ = True  # type: ignore[attr-defined]
    return entry


def wrap_public_methods(cls: type) -> type:
    """Apply public_entry to every public method `cls` has (its own and inherited from tdsl's
    mixins), once."""
    for name in dir(cls):
        if name.startswith("_") and name != "__init__":
            continue
        raw = _class_attr(cls, name)
        if isinstance(raw, (staticmethod, classmethod, property)) or not isinstance(raw, types.FunctionType):
            continue
        if getattr(raw, "__tdsl_entry__", False):
            continue
        setattr(cls, name, public_entry(raw))
    return cls


def _class_attr(cls: type, name: str):
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None
