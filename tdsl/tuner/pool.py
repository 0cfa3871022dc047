"""LocalPool: a concurrent.futures.Executor of worker processes started fresh (never forked).

Forking a process while tdsl builds in a thread can hang the child (LLVM's and the thread
pool's locks are copied held); multiprocessing's 'spawn' and 'forkserver' re-import the
caller's main module, which re-runs a script that has no `if __name__ == "__main__"` guard (a
tutorial, a notebook export). So the workers here are `python -m tdsl.tuner.pool` processes fed
pickled calls over pipes: the function must be importable (module level), as for any process
pool. A worker that dies fails its call with `WorkerCrashed` and is replaced; `kill_worker`
ends one whose call overran its timeout.

    with LocalPool(2) as pool:
        pool.submit(fn, *args).result()
"""
from __future__ import annotations

import contextlib
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
from concurrent.futures import Executor, Future


class WorkerCrashed(RuntimeError):
    """The worker process running the call died."""


def _send(fh, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(struct.pack("<Q", len(data)) + data)
    fh.flush()


def _recv_bytes(fh) -> bytes:
    head = fh.read(8)
    if len(head) < 8:
        raise EOFError
    (n,) = struct.unpack("<Q", head)
    data = fh.read(n)
    if len(data) < n:
        raise EOFError
    return data


def _recv(fh):
    return pickle.loads(_recv_bytes(fh))


class _Worker:
    def __init__(self):
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, "-m", "tdsl.tuner.pool"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, start_new_session=True)
        self.future: Future | None = None

    def kill(self) -> None:
        with contextlib.suppress(OSError, ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.proc.kill()


class LocalPool(Executor):
    """`workers` fresh Python processes (default: the cores this process may use)."""

    def __init__(self, workers: int | None = None):
        from .machine import cores

        self.workers = max(1, workers or cores())
        self._queue: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._current: dict[int, _Worker] = {}
        self._closed = False
        self._lock = threading.Lock()
        for slot in range(self.workers):
            t = threading.Thread(target=self._serve, args=(slot,), name=f"tdsl-tune-pool-{slot}", daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, slot: int) -> None:
        worker: _Worker | None = _Worker()          # started now: its imports overlap the caller's own work
        while True:
            item = self._queue.get()
            if item is None:
                break
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            if worker is None or worker.proc.poll() is not None:
                worker = _Worker()
            with self._lock:
                self._current[slot] = worker
            worker.future = future
            try:
                _send(worker.proc.stdin, (fn, args, kwargs))
                ok, value = _recv(worker.proc.stdout)
            except (EOFError, OSError, pickle.PickleError) as exc:
                code = worker.proc.poll()
                if code is None:
                    worker.kill()
                    code = worker.proc.wait()
                why = f"signal {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"
                if not future.done():
                    future.set_exception(WorkerCrashed(f"the worker process died ({why})"
                                                       if not isinstance(exc, pickle.PickleError) else str(exc)))
                worker = None
                continue
            finally:
                with self._lock:
                    self._current.pop(slot, None)
            if future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
        if worker is not None:
            with contextlib.suppress(OSError):
                worker.proc.stdin.close()
            try:
                worker.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                worker.kill()

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if self._closed:
            raise RuntimeError("cannot submit to a LocalPool that was shut down")
        future: Future = Future()
        self._queue.put((future, fn, args, kwargs))
        return future

    def kill_worker(self, future: Future) -> bool:
        """End the worker running `future` (its call fails with WorkerCrashed); False if none does."""
        with self._lock:
            for worker in self._current.values():
                if worker.future is future:
                    worker.kill()
                    return True
        return False

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._closed:
            return
        self._closed = True
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in self._threads:
            self._queue.put(None)
        if not wait:
            with self._lock:
                for worker in self._current.values():
                    worker.kill()
        else:
            for t in self._threads:
                t.join()


def _main() -> None:
    """A worker: read pickled (fn, args, kwargs), answer (True, result) or (False, exception)."""
    stdin, stdout = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                      # what the calls print goes to stderr, not into the answers
    sys.stdout = sys.stderr
    while True:
        try:
            data = _recv_bytes(stdin)
        except EOFError:
            break
        try:
            fn, args, kwargs = pickle.loads(data)
            answer = (True, fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - sent back to the caller
            answer = (False, exc)
        try:
            _send(stdout, answer)
        except (pickle.PickleError, TypeError, AttributeError) as exc:
            _send(stdout, (False, RuntimeError(f"the result could not be sent back: {exc}")))


if __name__ == "__main__":
    _main()
