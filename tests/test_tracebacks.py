"""Errors from public entry points show the user's frames and the message, not tdsl's internals;
tdsl.config.full_traceback / TDSL_FULL_TRACEBACK=1 keep everything."""
from __future__ import annotations

import os
import sys
import traceback

import numpy as np
import pytest

import tdsl
import tdsl.lower  # the callable package, for the case below
from tdsl import T


@T.prim_func
def double(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            B[vi] = A[vi] * T.float32(2)


def _frames(exc: BaseException) -> list[str]:
    return [f.filename for f in traceback.extract_tb(exc.__traceback__)]


def _tdsl_frames(exc: BaseException) -> list[str]:
    root = os.path.dirname(tdsl.__file__)
    return [f for f in _frames(exc) if f.startswith(root)]


def _bad_split():
    sch = tdsl.Schedule(double)
    (i,) = sch.get_loops(sch.get_block("B"))
    sch.split(i, factors=[3, 3])


CASES = {
    "schedule": _bad_split,
    "build": lambda: tdsl.build(double, target="tpu"),
    "lower": lambda: tdsl.lower(double, target="tpu"),
    # `tdsl.lower` may be the package itself, called (which one depends on import order)
    "lower (the callable package)": lambda: sys.modules["tdsl.lower"](double, target="tpu"),
    "parse": lambda: tdsl.parse("@T.prim_func\ndef f(A: T.Buffer((4,), 'float32')):\n    while True:\n        pass\n"),
    "interpret": lambda: tdsl.interpret(double, np.zeros(3, "float32")),
    "entry's own check": lambda: tdsl.Schedule("double"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_user_errors_show_the_users_frame_and_one_tdsl_line(name, monkeypatch):
    monkeypatch.delenv("TDSL_FULL_TRACEBACK", raising=False)
    with pytest.raises(Exception) as info:
        CASES[name]()
    exc = info.value
    assert _frames(exc)[0] == __file__                    # where the user called tdsl
    assert [os.path.basename(f) for f in _tdsl_frames(exc)] == ["tracebacks.py"], _frames(exc)
    text = "".join(traceback.format_exception(exc))
    assert "tdsl.config.full_traceback = True (or TDSL_FULL_TRACEBACK=1) shows them" in text
    assert "During handling of the above exception" not in text
    assert exc.__tdsl_traceback__ is not None             # the full one, for pdb


KERNEL_CALLS = {
    "fast path, output left out": lambda k: k(np.zeros(15, "float32")),
    "fast path, output passed": lambda k: k(np.zeros(16, "float32"), np.zeros(15, "float32")),
    "checked path (keywords)": lambda k: k(A=np.zeros(15, "float32")),
    "checked path (wrong type)": lambda k: k("sixteen floats"),
}


@pytest.mark.parametrize("name", list(KERNEL_CALLS))
def test_kernel_call_errors_keep_only_the_users_frames(name, monkeypatch):
    """Issue 28: a kernel call's traceback kept tdsl's re-raise frame and the generated
    `__call__` (shown as "<string>"); now only the caller's frames remain."""
    monkeypatch.delenv("TDSL_FULL_TRACEBACK", raising=False)
    kernel = tdsl.build(double)
    with pytest.raises(tdsl.ArgumentError) as info:
        KERNEL_CALLS[name](kernel)
    assert set(_frames(info.value)) == {__file__}, _frames(info.value)
    text = "".join(traceback.format_exception(info.value))
    assert "<string>" not in text and "<tdsl" not in text and "During handling" not in text
    monkeypatch.setattr(tdsl.config, "_full_traceback", True)
    with pytest.raises(tdsl.ArgumentError) as info:
        KERNEL_CALLS[name](kernel)
    assert _tdsl_frames(info.value), _frames(info.value)     # everything, when asked for


@pytest.mark.parametrize("how", ["config", "env"])
def test_full_traceback_keeps_the_internals(how, monkeypatch):
    if how == "config":
        monkeypatch.setattr(tdsl.config, "_full_traceback", True)
    else:
        monkeypatch.setenv("TDSL_FULL_TRACEBACK", "1")
    assert tdsl.config.full_traceback
    with pytest.raises(tdsl.ScheduleError) as info:
        _bad_split()
    names = [os.path.basename(f) for f in _tdsl_frames(info.value)]
    assert "loops.py" in names and "base.py" in names   # the primitive and the facade's step (ScheduleBase._apply)


def test_config_follows_the_environment_until_set(monkeypatch):
    monkeypatch.setenv("TDSL_FULL_TRACEBACK", "0")
    assert not tdsl.config.full_traceback
    tdsl.config.full_traceback = True
    try:
        assert tdsl.config.full_traceback
    finally:
        tdsl.config.full_traceback = None
    assert not tdsl.config.full_traceback


def test_a_bug_inside_tdsl_keeps_its_whole_traceback(monkeypatch):
    from tdsl.schedule.primitives import loops

    def broken(*args, **kwargs):
        raise IndexError("a bug")

    monkeypatch.setattr(loops, "parallel", broken)
    sch = tdsl.Schedule(double)
    with pytest.raises(IndexError) as info:
        sch.parallel(sch.get_loops(sch.get_block("B"))[0])
    assert "base.py" in [os.path.basename(f) for f in _tdsl_frames(info.value)]   # ScheduleBase._apply


def test_a_cause_keeps_its_message_but_not_tdsl_frames():
    from tdsl.tracebacks import public_entry

    @public_entry
    def entry():
        try:
            raise KeyError("inner detail")
        except KeyError as exc:
            raise tdsl.TargetError("outer message") from exc

    with pytest.raises(tdsl.TargetError) as info:
        entry()
    text = "".join(traceback.format_exception(info.value))
    assert "KeyError: 'inner detail'" in text and "outer message" in text
    assert "test_tracebacks.py" in text


def test_ipython_shows_the_message_without_internals():
    # the formatter Jupyter kernels use for a cell's uncaught exception
    ultratb = pytest.importorskip("IPython.core.ultratb")
    with pytest.raises(tdsl.ScheduleError) as info:
        _bad_split()
    text = ultratb.VerboseTB(color_scheme="NoColor").text(info.type, info.value, info.value.__traceback__)
    assert "multiply to 9, but loop i has extent 16" in text and "sch.split(i, factors=[3, 3])" in text
    assert "primitives" not in text and "schedule.py" not in text, text
    assert "TDSL_FULL_TRACEBACK=1" in text


def test_kernel_memory_error_keeps_only_the_users_frames(monkeypatch):
    """An intermediate too large for the sizes given is a MemoryError from the kernel: also
    shown from the caller's line only."""
    monkeypatch.delenv("TDSL_FULL_TRACEBACK", raising=False)
    kernel = tdsl.build(tdsl.parse('''
@T.prim_func
def g(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")):
    tmp = T.alloc_buffer((n, n, n, n), "float32")
    for i in range(n):
        with T.block("t"):
            vi = T.axis.remap("S", [i])
            tmp[vi, vi, vi, vi] = A[vi]
    for i in range(n):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = tmp[vi, vi, vi, vi]
'''))
    with pytest.raises(MemoryError, match="2\\*\\*31 elements") as info:
        kernel(np.ones(300, "float32"))
    assert set(_frames(info.value)) == {__file__}, _frames(info.value)
