"""Progress of a tuning run: a rich live bar in a terminal, a log file, a final summary.

verbose=0: nothing printed; 1 (default): the live bar when stderr is a terminal, the lines that
change what the run means (the design space exhausted before the trials asked) and the final
summary; 2: also one line per measured candidate. The live bar draws on stderr (it is
transient terminal output); the summary and the notes go to stdout, so a notebook shows them as
plain output. The log beside the database (`<database>.log`) gets one line per candidate and the
summary, whatever `verbose` is.
"""
from __future__ import annotations

import sys
import time


def _fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.2f} s"


class Progress:
    def __init__(self, total: int, verbose: int = 1, log_path: str | None = None, time_budget: float | None = None):
        self.total = total
        self.verbose = verbose
        self.time_budget = time_budget
        self.start = time.monotonic()
        self.done = 0
        self.failures = 0
        self.best_time: float | None = None
        self.best_rate: float | None = None
        self.best_name = ""
        self._log = open(log_path, "a") if log_path else None  # noqa: SIM115 - closed by close()
        self._live = None
        if verbose >= 1 and sys.stderr.isatty():
            try:
                from rich.console import Console
                from rich.live import Live

                self._console = Console(stderr=True)
                self._live = Live(self._render(), console=self._console, refresh_per_second=4, transient=False)
                self._live.start()
            except ImportError:   # pragma: no cover - rich is a dependency
                self._live = None
        self.log(f"tuning started: {total} trials")

    def log(self, line: str) -> None:
        if self._log is not None:
            self._log.write(time.strftime("%Y-%m-%d %H:%M:%S ") + line + "\n")
            self._log.flush()

    def note(self, line: str) -> None:
        """A line for the log, and for the user in a terminal (verbose >= 1) or with verbose >= 2."""
        self.log(line)
        if self._live is not None and self.verbose >= 1:
            self._live.console.print(line)
        elif self.verbose >= 2:
            print(line)

    def say(self, line: str) -> None:
        """A line the user sees at the default verbosity (and the log)."""
        self.log(line)
        if self._live is not None and self.verbose >= 1:
            self._live.console.print(line)
        elif self.verbose >= 1:
            print(line)

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def eta(self) -> float | None:
        if not self.done:
            return None
        left = self.elapsed() / self.done * max(0, self.total - self.done)
        if self.time_budget is not None:
            left = min(left, max(0.0, self.time_budget - self.elapsed()))
        return left

    def update(self, task: str, record, rate: float | None, best_time: float | None, best_rate: float | None) -> None:
        self.done += 1
        if not record.ok:
            self.failures += 1
        if best_time is not None and (self.best_time is None or best_time <= self.best_time):
            self.best_time, self.best_rate, self.best_name = best_time, best_rate, task
        what = (f"{_fmt_time(record.time)}" + (f" {rate:.1f} GFLOP/s" if rate else "")) if record.ok \
            else f"failed: {record.error}"
        self.log(f"[{self.done}/{self.total}] {task}: {what}")
        if self.verbose >= 2:
            line = f"[{self.done}/{self.total}] {task}: {what}"
            if self._live is not None:
                self._live.console.print(line)
            else:
                print(line)
        if self._live is not None:
            self._live.update(self._render())

    def _render(self):
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        grid = Table.grid(padding=(0, 1))
        rate = self.done / self.elapsed() if self.elapsed() > 0 else 0.0
        eta = self.eta()
        best = _fmt_time(self.best_time) + (f" ({self.best_rate:.1f} GFLOP/s)" if self.best_rate else "")
        grid.add_row("tuning", ProgressBar(total=max(1, self.total), completed=self.done, width=30),
                     f"{self.done}/{self.total}", f"best {best}", f"failed {self.failures}",
                     f"{rate * 60:.0f} cand/min", f"ETA {eta:.0f} s" if eta is not None else "ETA -")
        return grid

    def close(self, summary: str) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()
            self._live = None
        self.log("summary:\n" + summary)
        if self.verbose >= 1:
            print(summary)
        if self._log is not None:
            self._log.close()
            self._log = None
