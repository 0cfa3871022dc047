"""Parallel kernels with and without another process holding a core: the contention harness.

    python3 bench/bench_contention.py                       # softmax, layernorm, gemm, conv2d; 2 and 1 threads
    python3 bench/bench_contention.py --only softmax --rounds 20
    python3 bench/bench_contention.py --config "TDSL_NUM_THREADS=2 FOO=a" --config "TDSL_NUM_THREADS=2 FOO=b"

Every configuration (a set of environment variables; default TDSL_NUM_THREADS=2 and =1) runs in
its own child process, because the thread pool is set up once per process. The children time
every kernel call by call (perf_counter) in short phases, one child at a time, taking turns,
so that all see the same background load; phases alternate between "quiet" (nothing of ours
running besides the kernel) and "hog" (a `while True: pass` subprocess, pinned to the last
allowed core with `--hog-core`, which is the default; -1 leaves it unpinned). The table gives
the minimum, median and 90th percentile per call over all samples of a (configuration, phase).
The minimum says what the kernel can do; the median and p90 say what a user sees under load.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = ("softmax", "layernorm", "gemm", "conv2d")
HOG = "while True: pass"


def _kernels(only: list[str]) -> dict[str, tuple[Callable[[], object], int]]:
    """name -> (a call of the built kernel on prepared arrays, calls per phase)."""
    sys.path.insert(0, HERE)
    import schedules

    import tdsl

    rng = np.random.default_rng(0)
    out: dict[str, tuple[Callable[[], object], int]] = {}
    if "softmax" in only:
        x = rng.standard_normal((4096, 1024), dtype=np.float32)
        k = tdsl.build(schedules.softmax_schedule(4096, 1024))
        y = k(x)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-3, atol=1e-6)
        out["softmax"] = (lambda: k(x, y), 60)
    if "layernorm" in only:
        x = rng.standard_normal((4096, 1024), dtype=np.float32)
        g = rng.standard_normal(1024, dtype=np.float32)
        b = rng.standard_normal(1024, dtype=np.float32)
        kl = tdsl.build(schedules.layernorm_schedule(4096, 1024))
        yl = kl(x, g, b)
        ref = (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5) * g + b
        np.testing.assert_allclose(yl, ref, rtol=1e-3, atol=1e-3)
        out["layernorm"] = (lambda: kl(x, g, b, yl), 60)
    if "gemm" in only:
        a = rng.standard_normal((1024, 1024), dtype=np.float32)
        bm = rng.standard_normal((1024, 1024), dtype=np.float32)
        kg = tdsl.build(schedules.gemm_schedule(1024))
        c = kg(a, bm)
        np.testing.assert_allclose(c, a.astype(np.float64) @ bm, rtol=1e-3, atol=1e-2)
        out["gemm"] = (lambda: kg(a, bm, c), 8)
    if "conv2d" in only:
        xc = rng.standard_normal((1, 64, 56, 56), dtype=np.float32)
        w = rng.standard_normal((64, 64, 3, 3), dtype=np.float32)
        kc = tdsl.build(schedules.conv2d_schedule(1, 64, 56, 56, 64))
        yc = kc(xc, w)
        out["conv2d"] = (lambda: kc(xc, w, yc), 40)
    return out


def _start_hog(core: int) -> subprocess.Popen:
    """A busy loop in another process, pinned to `core` (or anywhere when core < 0)."""
    pin = f"import os\nos.sched_setaffinity(0, {{{core}}})\n" if core >= 0 else ""
    return subprocess.Popen([sys.executable, "-c", pin + HOG])


def _stop_hog(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def child(only: list[str]) -> None:
    """Serve the parent: build the kernels, then for each line "quiet" or "hog" on stdin time
    every kernel once more (the parent runs the hog) and answer the per-call seconds as JSON."""
    kernels = _kernels(only)
    for fn, _ in kernels.values():   # warm: pool started, caches filled
        for _ in range(3):
            fn()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "end":
            break
        times: dict[str, list[float]] = {}
        for name, (fn, calls) in kernels.items():
            times[name] = []
            for _ in range(calls):
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
        print(json.dumps(times), flush=True)


def measure(configs: list[str], only: list[str], rounds: int, hog_core: int) -> dict[str, dict[str, dict[str, list[float]]]]:
    """config -> kernel -> "quiet" / "hog" -> per-call seconds. One child per configuration,
    all alive at once but only one timing at a time, taking turns phase by phase (a phase is
    ~0.1-0.5 s), so that all configurations see the same background load."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--only", ",".join(only)]
    procs = {c: subprocess.Popen(cmd, env={**os.environ, **_parse_config(c)}, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for c in configs}
    merged: dict[str, dict[str, dict[str, list[float]]]] = {c: {k: {"quiet": [], "hog": []} for k in only}
                                                           for c in configs}
    try:
        for conf, proc in procs.items():
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit(f"child for {conf!r} failed (see its error above)")
        for r in range(rounds):
            for kind in ("quiet", "hog"):
                hog = _start_hog(hog_core) if kind == "hog" else None
                try:
                    time.sleep(0.05)   # the hog is running before the first timed call
                    order = configs[r % len(configs):] + configs[:r % len(configs)]
                    for conf in order:
                        procs[conf].stdin.write(kind + "\n")
                        procs[conf].stdin.flush()
                        for name, times in json.loads(procs[conf].stdout.readline()).items():
                            merged[conf][name][kind].extend(times)
                finally:
                    if hog is not None:
                        _stop_hog(hog)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.stdin.write("end\n")
                proc.stdin.close()
            proc.wait()
    return merged


def _parse_config(text: str) -> dict[str, str]:
    env = {}
    for item in shlex.split(text):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--config {text!r}: {item!r} is not NAME=VALUE")
        env[key] = value
    return env


def _stats(times: list[float]) -> tuple[float, float, float]:
    a = np.asarray(times) * 1e3
    return float(a.min()), float(np.median(a)), float(np.percentile(a, 90))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(KERNELS), help="comma-separated subset of " + ", ".join(KERNELS))
    ap.add_argument("--config", action="append", help="environment of one configuration (repeatable)")
    ap.add_argument("--rounds", type=int, default=10, help="quiet/hog phase pairs per configuration")
    ap.add_argument("--hog-core", type=int, default=None, help="core the hog is pinned to; -1: unpinned")
    ap.add_argument("--json", help="write the raw samples here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    only = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = [k for k in only if k not in KERNELS]
    if unknown:
        raise SystemExit(f"--only: unknown kernel(s) {unknown}; choose from {list(KERNELS)}")
    hog_core = args.hog_core if args.hog_core is not None else max(os.sched_getaffinity(0))
    if args.child:
        child(only)
        return
    configs = args.config or ["TDSL_NUM_THREADS=2", "TDSL_NUM_THREADS=1"]
    load0 = os.getloadavg()[0]
    merged = measure(configs, only, args.rounds, hog_core)
    print(f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after; hog on core {hog_core}; "
          f"{args.rounds} rounds; ms per call: min / median / p90")
    print(f"{'kernel':<10} {'config':<40} {'quiet':>22} {'hog':>22}")
    for name in only:
        for conf in configs:
            cells = ["{:6.2f} {:6.2f} {:6.2f}".format(*_stats(merged[conf][name][kind])) for kind in ("quiet", "hog")]
            print(f"{name:<10} {conf:<40} {cells[0]:>22} {cells[1]:>22}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(merged, f)


if __name__ == "__main__":
    main()
