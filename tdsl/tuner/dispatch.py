"""A kernel of a function with symbolic dimensions that runs each call with a tuned size's schedule.

`tdsl.build(f, database=db)` returns a `SizeDispatch` when `f` has symbolic dimensions and `db`
holds sizes it was tuned at (`tdsl.tune(f, sizes={"n": [64, 1024]}, database=db)`):

    kernel = tdsl.build(rowsum, database="tuning.db")
    kernel(a, out)              # n = a.shape[0]: the nearest tuned size's schedule
    kernel.buckets              # [{'n': 64}, {'n': 1024}]
    kernel.kernel_for(n=100)    # the Kernel a call with n = 100 runs

Each kernel is compiled once, on the first call that needs it, and kept; a call reads its
sizes from the arrays that define them and looks them up in a dict (about 1 us). A call whose sizes are exactly a tuned size runs that size's
constant-shape kernel (the schedule as measured). Any other size runs the nearest size's trace
replayed on the symbolic function, which is correct for every size (the schedule's splits of a
symbolic loop keep their guards); when that trace does not replay there (a tile that needs the
constant extent, such as a tensorized micro-kernel), those sizes run `tdsl.auto_schedule` of the
symbolic function instead, and a NoTuningRecord warning says so once per bucket.
"""
from __future__ import annotations

import warnings

from ..errors import ArgumentError
from ..ir import Buffer, Var
from .apply import NoTuningRecord
from .sizes import nearest, specialization

_CACHE_LIMIT = 1024   # distinct argument shapes remembered (then the dict starts again)


class SizeDispatch:
    """See the module docstring. `traces[k]` is the best trace at `buckets[k]` (a JSON string)."""

    def __init__(self, func, target: str, buckets: list[dict], traces: list[str], options: dict):
        self.func = func
        self.target = target
        self.buckets = buckets
        self.traces = traces
        self.options = options
        self.fallbacks: dict[int, str] = {}          # bucket -> why its trace did not replay symbolically
        self._exact: dict[int, object] = {}
        self._general: dict[int, object] = {}
        self._by_shapes: dict = {}                     # sizes of a call -> its kernel
        self._where = _size_positions(func)
        self._names = [p.name for p in func.params]
        self._first = [places[0] for places in self._where.values()]   # where each size is read first
        self._one = len(self._first) == 1
        self._i0, self._a0 = self._first[0] if self._first else (0, 0)

    def __repr__(self) -> str:
        sizes = ", ".join("(" + ", ".join(f"{k}={v}" for k, v in b.items()) + ")" for b in self.buckets)
        return f"<SizeDispatch {self.func.name}: tuned at {sizes}; {len(self._exact) + len(self._general)} compiled>"

    def __call__(self, *args, **kwargs):
        if not kwargs:
            # the fast path: the sizes read straight from the positional arrays that define them
            try:
                key = args[self._i0].shape[self._a0] if self._one else \
                    tuple([args[i].shape[a] for i, a in self._first])
            except (IndexError, AttributeError, TypeError):
                key = None
            kernel = self._by_shapes.get(key) if key is not None else None
            if kernel is not None:
                return kernel(*args)
        else:
            key = None
        kernel = self.kernel_for(**self._sizes(args, kwargs))
        if key is not None:
            if len(self._by_shapes) >= _CACHE_LIMIT:
                self._by_shapes.clear()
            self._by_shapes[key] = kernel
        return kernel(*args, **kwargs)

    def _sizes(self, args, kwargs) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for name, places in self._where.items():
            for index, axis in places:
                arg = args[index] if index < len(args) else kwargs.get(self._names[index])
                shape = getattr(arg, "shape", None)
                if shape is not None and len(shape) > axis:
                    sizes[name] = int(shape[axis])
                    break
            else:
                raise ArgumentError(f"{self.func.name}: the call gives no array whose shape says the symbolic "
                                    f"dimension {name!r} (pass the parameters whose shapes use it)")
        return sizes

    def kernel_for(self, **sizes: int):
        """The Kernel that a call with these sizes runs (compiled now if it was not yet)."""
        k = nearest(self.buckets, sizes)
        if sizes == self.buckets[k]:
            if k not in self._exact:
                self._exact[k] = self._build(specialization(self.func, self.buckets[k]), k)
            return self._exact[k]
        if k not in self._general:
            self._general[k] = self._build(self.func, k)
        return self._general[k]

    def _build(self, func, k: int):
        from ..backends import build
        from ..errors import PerformanceWarning, ScheduleError
        from .space import load, replay

        try:
            scheduled = replay(load(self.traces[k]), func, target=self.target).func
        except (ScheduleError, ValueError, KeyError, TypeError) as exc:
            if func is not self.func:
                raise
            reason = " ".join(str(exc).split())
            self.fallbacks[k] = reason if len(reason) <= 240 else reason[:237] + "..."
            sizes = ", ".join(f"{d}={v}" for d, v in self.buckets[k].items())
            warnings.warn(NoTuningRecord(
                f"{self.func.name}: the schedule tuned at {sizes} does not replay on the symbolic function "
                f"({self.fallbacks[k]}); calls of other sizes near it run tdsl.auto_schedule({self.func.name}) "
                f"(calls of exactly {sizes} run the tuned schedule)"), stacklevel=4)
            from ..auto import auto_schedule

            scheduled = auto_schedule(func, target=self.target).func
        with warnings.catch_warnings():
            # the tuner measured this schedule as it builds: a vectorize left scalar is in kernel.notes
            warnings.simplefilter("ignore", PerformanceWarning)
            return build(scheduled, self.target, **self.options)


def _size_positions(func) -> dict[str, list[tuple[int, int]]]:
    """For each symbolic dimension, the (parameter index, axis) whose extent is exactly it."""
    out: dict[str, list[tuple[int, int]]] = {}
    for index, p in enumerate(func.params):
        if isinstance(p, Buffer):
            for axis, dim in enumerate(p.shape):
                if isinstance(dim, Var):
                    out.setdefault(dim.name, []).append((index, axis))
    return out


def _tuned_sizes(func, target: str, db):
    """(sizes, workload, its best record or None) of each size `func` was tuned at: this
    machine's; for CUDA this GPU's, else the unmeasured records' (tuner/gpu.py)."""
    if not target.startswith("cuda"):
        return [(sizes, wl, db.best(wl)) for sizes, wl in db.buckets(func, target)]
    from .gpu import places, ranked

    dbt, here, unmeasured = places(target)
    for machine in (here, unmeasured):
        found = db.buckets(func, dbt, machine) if machine is not None and dbt is not None else []
        if found:
            return [(sizes, wl, next(iter(ranked(db, wl)), None)) for sizes, wl in found]
    return []


def dispatch_from_database(func, target: str, database, options: dict) -> SizeDispatch | None:
    """A SizeDispatch of `func` when the database holds tuned sizes of it, else None."""
    from .database import Database

    db = database if isinstance(database, Database) else Database(database)
    try:
        buckets, traces = [], []
        for sizes, _wl, best in _tuned_sizes(func, target, db):
            if best is not None:
                buckets.append(sizes)
                traces.append(best.trace)
    finally:
        if db is not database:
            db.close()
    return SizeDispatch(func, target, buckets, traces, options) if buckets else None
