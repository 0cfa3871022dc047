"""Tuning for CUDA: `tdsl.tune(f, target="cuda")` (docs/tuning.md, "Tuning for CUDA").

Every candidate (a replay of the design space, `tdsl.space(f, target)`, with its decisions
sampled anew) is built for the target's architecture (NVRTC CUBIN) and checked:

* static checks on the CUBIN's resources (cuobjdump): at most 255 registers per thread, no
  local memory or stack (spills), shared memory within the architecture's per-block limit;
* with a GPU: run on the device at the function's own size and compared with the unscheduled
  function built for the CPU, then timed with CUDA events (warm-up, the L2 flushed before each
  repeat by writing a buffer twice its size, one measurement at a time on the GPU: a file lock);
  the record lives in the workload of the GPU's name and compute capability ("NVIDIA H200
  (sm_90)"), status "measured";
* without a GPU: run in the CUDA emulator (every thread order compared, bounds checked) and
  compared likewise, its ldmatrix counters showing no bank conflict; the record has no time and
  lives in the workload `unmeasured-<arch>`, status "verified-unmeasured" (or
  "checked-unmeasured", the static checks only, when the function is too large to emulate
  quickly; `where` says why). A later run on a GPU of that architecture measures those first,
  reusing their verification, before it tries new candidates.

    tdsl.tune(mm, target="cuda -arch=sm_80", trials=8, database="tune.db")   # no GPU: verifies
    tdsl.tune(mm, target="cuda", trials=8, database="tune.db")               # on a GPU: measures
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time

# dynamic shared memory one block may opt in to, per architecture (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability")
SHARED_LIMIT = {"sm_70": 96 << 10, "sm_72": 96 << 10, "sm_75": 64 << 10, "sm_80": 163 << 10, "sm_86": 99 << 10,
                "sm_87": 163 << 10, "sm_89": 99 << 10, "sm_90": 227 << 10, "sm_100": 227 << 10,
                "sm_120": 99 << 10}
MAX_REGISTERS = 255
EMULATE_FLOPS = 1 << 23      # larger constant-shape functions are not emulated (minutes per candidate)


def shared_limit(arch: str) -> int:
    base = arch.rstrip("af")
    return SHARED_LIMIT.get(base, 48 << 10)


def unmeasured_machine(arch: str) -> str:
    """The workload machine of records verified without a GPU for `arch`."""
    return f"unmeasured-{arch}"


def gpu_machine(name: str, arch: str) -> str:
    """The workload machine of records measured on the GPU `name` of compute capability `arch`."""
    return f"{name} ({arch})"


def db_target(arch: str) -> str:
    """The target string records are kept under: the architecture always spelled out."""
    return f"cuda -arch={arch}"


def places(target: str) -> tuple[str | None, str | None, str | None]:
    """For `build(database=)`: (the database target, this GPU's machine or None, the machine of
    the unmeasured records) of the target's architecture: its -arch (`apply.lookup_target` puts
    build's `arch=` there), else this GPU's; (None, None, None) when none is known (no -arch, no
    GPU). This GPU's machine only where the GPU is of that architecture (sm_90 for sm_90a):
    records it measured for another architecture are never the target's."""
    from ..backends.cuda import runtime
    from ..target import parse_target

    arch, here = parse_target(target).get("arch"), None
    if runtime.has_gpu():
        info = runtime.device_info()
        arch = arch or info.arch
        if arch.rstrip("af") == info.arch:
            here = gpu_machine(info.name, info.arch)
    if arch is None:
        return None, None, None
    return db_target(arch), here, unmeasured_machine(arch)


def ranked(db, workload) -> list:
    """The records of a CUDA workload that build(database=) tries, in order: the fastest measured
    first; for the unmeasured workload the verified ones first, then the statically checked."""
    if not workload.machine.startswith("unmeasured-"):
        return db.best(workload, k=5)
    rank = {"verified-unmeasured": 0, "checked-unmeasured": 1}
    return sorted((r for r in db.records(workload) if r.unmeasured), key=lambda r: (rank.get(r.status or "", 2),
                                                                                   r.id or 0))


# -------------------------------------------------------------------------------- checks
def static_problems(kernel, arch: str) -> tuple[list[str], list[str]]:
    """(problems that refuse the candidate, notes) from the CUBIN's resources and, for an
    emulated kernel after a call, its shared-memory bank counters."""
    problems, notes = [], []
    stats = kernel.stats
    if stats.resources is None:
        notes.append("registers and spills unchecked (no cuobjdump: it comes with the test extra, pip install \"tdsl[test]\")")
    for name, r in (stats.resources or {}).items():
        if r["registers"] > MAX_REGISTERS:
            problems.append(f"kernel {name} uses {r['registers']} registers per thread (at most {MAX_REGISTERS})")
        if r["local"] or r["stack"]:
            problems.append(f"kernel {name} spills: {r['local']} bytes of local memory, {r['stack']} of stack")
        if r["shared"] > shared_limit(arch):
            problems.append(f"kernel {name} needs {r['shared']} bytes of shared memory; {arch} allows "
                            f"{shared_limit(arch)} per block")
    for spec in kernel.kernels:
        if spec.shared_bytes > shared_limit(arch):
            problems.append(f"kernel {spec.name} needs {spec.shared_bytes} bytes of shared memory; {arch} "
                            f"allows {shared_limit(arch)} per block")
    for c in stats.shared:
        if c.conflicted:
            problems.append(f"{c.worst}-way bank conflicts on {c.buffer} in kernel {c.kernel} "
                            f"({c.wavefronts} wavefronts for {c.phases} phases)")
    return problems, notes


def emulation_refusal(func) -> str | None:
    """Why `func` is not emulated (too large to run on the CPU quickly), or None."""
    from .flops import flop_count

    flops = flop_count(func)
    if flops is not None and flops > EMULATE_FLOPS:
        return (f"not emulated: {flops:.3g} flops is too large to emulate quickly (limit {EMULATE_FLOPS:.3g}); "
                "tune a symbolic function with sizes= including a small size to verify its schedules")
    return None


# -------------------------------------------------------------------------------- measuring
@contextlib.contextmanager
def gpu_lock(ordinal: int = 0):
    """One measurement at a time on GPU `ordinal` of this machine, whichever process asks."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: measurements may overlap
        yield
        return
    uid = os.getuid() if hasattr(os, "getuid") else 0
    fd = os.open(os.path.join(tempfile.gettempdir(), f"tdsl-tune-{uid}-gpu{ordinal}.lock"), os.O_RDWR | os.O_CREAT,
                 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def l2_bytes() -> int:
    """The GPU's L2 cache size in bytes (the driver's attribute; 50 MiB when it does not say)."""
    from ..backends.cuda import runtime

    driver = runtime._driver()
    info = runtime.device_info()
    attr = getattr(driver.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE", None)
    if attr is None:
        return 50 << 20
    try:
        found = runtime.check(driver.cuDeviceGetAttribute(attr, info.ordinal), "cuDeviceGetAttribute(L2)")
        return int(found) or (50 << 20)
    except Exception:  # noqa: BLE001 - a driver that does not answer: the largest L2 of its time
        return 50 << 20


def measure_on_gpu(kernel, inputs, warmup: int = 3, repeats: int = 10) -> list[float]:
    """Seconds per call of `kernel` on `inputs` (copied to the device once), each repeat one call
    timed with CUDA events after writing a buffer twice the L2's size (so that no repeat finds
    its data in the L2), after `warmup` calls; under the GPU's lock."""
    from ..backends.cuda import runtime

    driver = runtime._driver()
    with gpu_lock(runtime.device_info().ordinal):
        args = [runtime.to_device(a) for a in inputs]
        flush_n = 2 * l2_bytes()
        flush = runtime.device_array((flush_n,), "uint8", zero=False)
        for _ in range(max(1, warmup)):
            kernel(*args)
        runtime.synchronize()
        times = []
        with runtime.Timer() as timer:
            for r in range(max(1, repeats)):
                runtime.check(driver.cuMemsetD8(driver.CUdeviceptr(flush.ptr), r & 0xFF, flush_n),
                              "cuMemsetD8 (L2 flush)")
                times.append(timer.measure(lambda: kernel(*args), 1))
        del flush
    return times


# -------------------------------------------------------------------------------- candidates
def candidates(func, target: str, space, seed: int, count: int, attempts: int | None = None):
    """Up to `count` distinct (key, trace JSON, decisions, scheduled function) of the design space:
    the sketches as they come, then replays with every decision sampled anew."""
    from ..ir import structural_hash
    from .space import replay, sketches, trace_text

    traces = sketches(func, target, space, seed)
    seen: set = set()
    out: list = []
    invalid = 0
    for attempt in range(attempts or count * 4 + 4):
        if len(out) >= count:
            break
        trace = traces[attempt % len(traces)]
        fresh = attempt >= len(traces)
        if fresh:
            trace = trace.with_decisions({k: None for k in trace.decisions})
        try:
            sch = replay(trace, func, seed=seed * 7919 + attempt if fresh else None, target=target)
        except Exception:  # noqa: BLE001 - a sampled decision the schedule refuses
            invalid += 1
            continue
        key = structural_hash(sch.func)
        if key in seen:
            continue
        seen.add(key)
        out.append((key, trace_text(sch.trace), {str(k): v for k, v in sch.trace.decisions.items()}, sch.func))
    return out, invalid


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:400] if str(exc).strip() else ''}"


def _reference(func, seed: int):
    from ..backends import build
    from .checking import random_inputs

    inputs = random_inputs(func, seed)
    want = [a.copy() for a in inputs]
    build(func, target="cpu")(*want)
    return inputs, want


def _build(func, scheduled, arch: str, emulate: bool):
    import warnings

    from ..backends import build
    from ..errors import PerformanceWarning
    from .space import with_rule_intrinsics

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PerformanceWarning)
        return with_rule_intrinsics(lambda: build(scheduled, target=db_target(arch), emulate=emulate), func,
                                    db_target(arch))


def check_candidate(func, scheduled, arch: str, reference, on_gpu: bool, small=None):
    """Build `scheduled` for `arch`, run it (on the GPU, or in the emulator unless the function is
    too large) and compare with `reference` ((inputs, expected)); apply the static checks.
    `small`, for a function too large to emulate: (the unscheduled function at a small size, the
    candidate's schedule at that size, the sizes, its reference) to emulate instead, or why
    there is none. Returns (kernel or None, status, where-or-error)."""
    from .machine import fingerprint

    refusal = None if on_gpu else emulation_refusal(func)
    emulate = not on_gpu and refusal is None
    try:
        kernel = _build(func, scheduled, arch, emulate)
    except Exception as exc:  # noqa: BLE001 - every failure is the candidate's record
        return None, "failed", f"build failed: {_first_line(exc)}"
    if on_gpu or emulate:
        with gpu_lock() if on_gpu else contextlib.nullcontext():    # a check disturbs timing too
            wrong = _run_and_compare(func, kernel, reference, "GPU" if on_gpu else "emulator")
        if wrong is not None:
            return None, "failed", wrong
    problems, notes = static_problems(kernel, arch)
    at = ""
    if refusal is not None and isinstance(small, tuple):
        small_func, small_scheduled, sizes, small_reference = small
        at = " at " + ", ".join(f"{d}={v}" for d, v in sizes.items())
        try:
            small_kernel = _build(small_func, small_scheduled, arch, True)
        except Exception as exc:  # noqa: BLE001
            return None, "failed", f"build failed{at}: {_first_line(exc)}"
        wrong = _run_and_compare(small_func, small_kernel, small_reference, f"emulator{at}")
        if wrong is not None:
            return None, "failed", f"{wrong}{at}"
        problems += [f"{p}{at}" for p in static_problems(small_kernel, arch)[0] if "bank conflicts" in p]
        emulate = True
    elif refusal is not None and small:
        refusal += f"; {small}"
    if problems:
        return None, "failed", "static check: " + "; ".join(problems)
    if on_gpu:
        return kernel, "verified", "on the GPU"
    extra = ("; " + "; ".join(notes)) if notes else ""
    if emulate:
        return kernel, "verified-unmeasured", f"emulator{at} on {fingerprint()}{extra}"
    return kernel, "checked-unmeasured", f"static checks on {fingerprint()}; {refusal}{extra}"


def _run_and_compare(func, kernel, reference, where: str) -> str | None:
    from .checking import compare

    inputs, want = reference
    got = [a.copy() for a in inputs]
    try:
        kernel(*got)
    except Exception as exc:  # noqa: BLE001
        return f"run failed ({where}): {_first_line(exc)}"
    return compare(func, got, want)


def small_sizes(buckets) -> dict:
    """For each symbolic function tuned at sizes: the smallest of them small enough to emulate."""
    from .flops import flop_count

    out: dict = {}
    for f, parent in buckets:
        if parent is None or emulation_refusal(f) is not None:
            continue
        flops = flop_count(f) or 0
        if id(parent[0]) not in out or flops < out[id(parent[0])][0]:
            out[id(parent[0])] = (flops, parent[1])
    return {k: v[1] for k, v in out.items()}


def _small(parent, trace: str, sizes: dict | None, target: str, seed: int, references: dict):
    """The candidate (its trace) at a small size of its symbolic function `parent` (see
    check_candidate), or why there is none."""
    from .sizes import specialization
    from .space import load, replay

    if sizes is None:
        return "no tuned size of the symbolic function is small enough to emulate"
    try:
        general = replay(load(trace), parent, target=target).func
    except Exception as exc:  # noqa: BLE001 - a schedule that fits only its own size
        return f"its schedule does not replay on the symbolic function ({_first_line(exc)})"
    key = repr(sorted(sizes.items()))
    if key not in references:
        func = specialization(parent, sizes)
        references[key] = (func, _reference(func, seed))
    func, reference = references[key]
    return func, specialization(general, sizes), sizes, reference


# -------------------------------------------------------------------------------- the run
def tune_cuda(funcs, buckets, tgt, trials: int, database, space, seed: int, verbose: int, repeats: int):
    """tdsl.tune for a CUDA target (see the module); returns a TuneResult."""
    from ..backends.cuda import runtime
    from ..errors import TargetError
    from .api import TuneResult
    from .database import Database

    on_gpu = runtime.has_gpu()
    arch = tgt.get("arch")
    if on_gpu:
        info = runtime.device_info()
        if arch is not None and arch.rstrip("af") != info.arch:
            raise TargetError(f"tune: target {str(tgt)!r} is for {arch} but this machine's GPU, {info.name}, is "
                              f"{info.arch}; tune for target='cuda' (this GPU) or on a machine without a GPU "
                              "(verified, unmeasured records)")
        arch = arch or info.arch
        machine = gpu_machine(info.name, info.arch)
    elif arch is None:
        raise TargetError(f"tune: target {str(tgt)!r} names no architecture and this machine has no GPU; give "
                          "one, e.g. target='cuda -arch=sm_80': every candidate is then built for it, verified in "
                          "the emulator and stored unmeasured, for a later run on such a GPU to measure")
    else:
        machine = unmeasured_machine(arch)
    target = db_target(arch)
    db = database if isinstance(database, Database) or database is None else Database(database)
    t0 = time.monotonic()
    tasks, done = [], 0
    per_task = max(1, trials // max(1, len(funcs)))
    run = _Run(target, arch, machine, on_gpu, space, seed, repeats, verbose, db)
    run.small = small_sizes(buckets)
    try:
        for k, (f, (_, parent)) in enumerate(zip(funcs, buckets)):
            task, tried = run.task(f, parent, per_task, k)
            tasks.append(task)
            done += tried
    finally:
        if db is not None and db is not database:
            db.close()
    seconds = time.monotonic() - t0
    result = TuneResult(tasks, stats={"trials": done, "seconds": seconds, "invalid": 0, "duplicates": 0,
                                      "candidates_per_minute": done / seconds * 60 if seconds else 0.0,
                                      "model": "random (CUDA)", "machines": [machine]},
                        database=db.path if db is not None else None)
    if verbose:
        print(result.table() + "\n" + summary(tasks, machine))
    return result


class _Run:
    """One tdsl.tune call for CUDA: what every function's task shares."""

    def __init__(self, target, arch, machine, on_gpu, space, seed, repeats, verbose, db):
        self.target, self.arch, self.machine, self.on_gpu = target, arch, machine, on_gpu
        self.space, self.seed, self.repeats, self.verbose, self.db = space, seed, repeats, verbose, db
        self.small: dict = {}          # id(symbolic function) -> its smallest emulatable tuned size
        self.references: dict = {}

    def task(self, f, parent, per_task: int, k: int):
        """(the TaskResult of `f`, how many candidates were tried now)."""
        from .api import TaskResult
        from .flops import flop_count

        db, arch = self.db, self.arch
        reference = _reference(f, self.seed)
        wl = db.workload(f, self.target, machine=self.machine) if db is not None else None
        records = db.records(wl) if wl is not None else []
        known = {r.candidate for r in records}
        tried = 0
        if self.on_gpu and db is not None:       # first measure what a machine without a GPU verified
            pending = db.workload(f, self.target, machine=unmeasured_machine(arch), create=False)
            for r in (db.records(pending) if pending is not None else []):
                if tried < per_task and r.unmeasured and r.candidate not in known:
                    records.append(_measure_reused(f, r, arch, reference, self.repeats, self.machine, db, wl))
                    known.add(r.candidate)
                    tried += 1
        found = candidates(f, self.target, self.space, self.seed + k, per_task - tried + len(known))[0] \
            if tried < per_task else []
        for key, trace, decisions, scheduled in found:
            if tried >= per_task:
                break
            if key in known:
                continue
            known.add(key)
            tried += 1
            small = None
            if not self.on_gpu and parent is not None and emulation_refusal(f) is not None:
                small = _small(parent[0], trace, self.small.get(id(parent[0])), self.target, self.seed,
                               self.references)
            rec = _try(f, scheduled, key, trace, decisions, arch, reference, self.on_gpu, self.repeats, self.machine,
                       small)
            records.append(rec)
            if db is not None and wl is not None:
                db.add(wl, rec)
            if self.verbose >= 2:
                print(f"tune {f.name}: {key[:12]} {rec.status}" + (f" {rec.time * 1e3:.4f} ms" if rec.time else "")
                      + (f" ({rec.error})" if rec.error else ""))
        if db is not None and wl is not None and parent is not None:
            db.add_bucket(parent[0], self.target, parent[1], wl, self.machine)
        return TaskResult(f, records, flop_count(f), wl.key if wl is not None else None, {},
                          parent[1] if parent else None), tried


def summary(tasks, machine: str) -> str:
    """One line per function: how many records of each status, and where."""
    from collections import Counter

    lines = []
    for t in tasks:
        counts = Counter(r.status or ("failed" if r.error else "measured") for r in t.records)
        lines.append(f"{t.name}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f" ({machine})")
    return "\n".join(lines)


def _try(func, scheduled, key, trace, decisions, arch, reference, on_gpu: bool, repeats: int, machine: str,
         small=None):
    """The record of one new candidate: checked, and measured on a GPU."""
    from .database import Record

    kernel, status, where = check_candidate(func, scheduled, arch, reference, on_gpu, small)
    rec = Record(key, trace, decisions, status=status, created=time.time())
    if kernel is None:
        rec.error = where
    elif on_gpu:
        try:
            rec.times = measure_on_gpu(kernel, reference[0], repeats=repeats)
            rec.time, rec.status, rec.where = min(rec.times), "measured", machine
        except Exception as exc:  # noqa: BLE001
            rec.error, rec.status = f"measuring failed: {_first_line(exc)}", "failed"
    else:
        rec.where = where
    return rec


def _measure_reused(func, record, arch: str, reference, repeats: int, machine: str, db, wl):
    """Measure a record verified without a GPU (its verification reused: built, not checked again)."""
    from .database import Record
    from .space import load, replay

    rec = Record(record.candidate, record.trace, record.decisions, created=time.time())
    try:
        kernel = _build(func, replay(load(record.trace), func, target=db_target(arch)).func, arch, False)
        rec.times = measure_on_gpu(kernel, reference[0], repeats=repeats)
        rec.time, rec.status, rec.where = min(rec.times), "measured", f"{machine}; verified: {record.where}"
    except Exception as exc:  # noqa: BLE001
        rec.error, rec.status = f"measuring failed: {_first_line(exc)}", "failed"
    db.add(wl, rec)
    return rec
