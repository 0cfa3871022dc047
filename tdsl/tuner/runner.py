"""Runner: measures candidates in an isolated process, one measurement at a time per machine.

Each process that measures (a local pool worker, a Dask worker, or the tuning process itself)
keeps one measuring child (`python -m tdsl.tuner.measure_child`) and talks to it over pipes. A
machine-wide file lock (in the temporary directory) lets one measurement run at a time on the
machine, whichever process asks, so that candidates do not disturb each other. A child that dies
(a crashing candidate) or does not answer within the timeout (a hanging one; it is killed) fails
that candidate with the reason; the next request starts a fresh child.
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no machine-wide lock, measurements may overlap
    fcntl = None  # type: ignore[assignment]


def lock_path() -> str:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"tdsl-tune-{uid}-measure.lock")


@contextlib.contextmanager
def machine_lock():
    """Hold the machine's measurement lock (a blocking flock on lock_path())."""
    if fcntl is None:
        yield
        return
    fd = os.open(lock_path(), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


class Runner:
    """Measures candidates in a child process it restarts when a candidate kills it."""

    def __init__(self):
        self._child: subprocess.Popen | None = None
        self._stderr = None
        self._buffer = b""
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - kept for the child's lifetime
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self._child = subprocess.Popen([sys.executable, "-m", "tdsl.tuner.measure_child"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=self._stderr, env=env,
                                       start_new_session=True)
        self._buffer = b""
        return self._child

    def prestart(self) -> None:
        """Start the child now (its imports then overlap the first builds)."""
        with self._lock:
            if self._child is None or self._child.poll() is not None:
                self._start()

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - 1500))
            lines = self._stderr.read().decode(errors="replace").strip().splitlines()
            return " | ".join(lines[-4:])
        except OSError:
            return ""

    def close(self) -> None:
        child, self._child = self._child, None
        if child is not None and child.poll() is None:
            with contextlib.suppress(OSError):
                child.stdin.close()  # type: ignore[union-attr]
            try:
                child.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._kill(child)

    @staticmethod
    def _kill(child: subprocess.Popen) -> None:
        with contextlib.suppress(OSError, ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            child.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=5)

    def _read_line(self, child: subprocess.Popen, deadline: float) -> bytes | None:
        fd = child.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return b""
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def measure(self, request: dict, timeout: float = 60.0, lock: bool = True) -> dict:
        """Measure one candidate (see measure_child for the request); the answer has `time` and
        `times`, or `error`. Holds the machine lock while the child works on it."""
        with self._lock, (machine_lock() if lock else contextlib.nullcontext()):
            child = self._child if self._child is not None and self._child.poll() is None else self._start()
            try:
                child.stdin.write((json.dumps(request) + "\n").encode())  # type: ignore[union-attr]
                child.stdin.flush()  # type: ignore[union-attr]
            except OSError:
                child = self._start()
                child.stdin.write((json.dumps(request) + "\n").encode())  # type: ignore[union-attr]
                child.stdin.flush()  # type: ignore[union-attr]
            try:
                line = self._read_line(child, time.monotonic() + timeout)
            except BaseException:
                # interrupted (Ctrl-C) mid-measurement: the child's answer would arrive late and
                # answer the next request; end it, the next request starts a fresh one
                self._kill(child)
                self._child = None
                raise
            if line is None:
                self._kill(child)
                self._child = None
                return {"error": f"timeout: no result within {timeout:g} s (the candidate hangs or is far too slow)"}
            if not line:
                code = child.wait()
                self._child = None
                why = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
                tail = self._stderr_tail()
                return {"error": f"crashed: the measuring process died ({why})" + (f": {tail}" if tail else "")}
            return json.loads(line)


_RUNNER: Runner | None = None


def runner() -> Runner:
    """This process's Runner (made on first use, its child closed when the process exits)."""
    global _RUNNER
    if _RUNNER is None:
        import atexit

        _RUNNER = Runner()
        atexit.register(_RUNNER.close)
    return _RUNNER
