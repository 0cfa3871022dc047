"""Deep but reasonable programs: run a recursive job again on a thread with a large stack.

The parser, printer, analyzer and passes recurse as deep as a program nests (a 3,000-term sum is
a 3,000-deep tree). Python's default limit (1,000 frames) refuses such programs with a raw
RecursionError; `run_deep` retries the job on a helper thread with a 512 MiB stack and a
recursion limit of DEEP_LIMIT frames, so the normal (shallow) path costs nothing. A program
deeper than that still ends in RecursionError, which the callers turn into their own error."""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TypeVar

R = TypeVar("R")
DEEP_LIMIT = 60_000
_STACK_BYTES = 512 * 1024 * 1024
_LIMIT_LOCK = threading.Lock()


def run_deep(fn: Callable[[], R]) -> R:
    """`fn()`, retried on a big-stack thread if it runs out of recursion depth."""
    try:
        return fn()
    except RecursionError:
        pass
    box: dict = {}

    def job() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    with _LIMIT_LOCK:
        old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
        try:
            threading.stack_size(_STACK_BYTES)
            sys.setrecursionlimit(max(old_limit, DEEP_LIMIT))
            worker = threading.Thread(target=job, name="tdsl-deep")
            worker.start()
            worker.join()
        finally:
            threading.stack_size(old_stack)
            sys.setrecursionlimit(old_limit)
    if "error" in box:
        raise box["error"]
    return box["value"]
