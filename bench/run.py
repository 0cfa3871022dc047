"""The benchmark runner: every CPU kernel of bench/schedules.py next to numpy, in one table.

    python bench/run.py                  # everything (a few minutes on 2 cores)
    python bench/run.py --quick          # smaller sizes, fewer repeats (about a minute)
    python bench/run.py --only gemm      # a subset: gemm, softmax, layernorm, conv2d, int8, backend
    python bench/run.py --json out.json  # where the results go (default bench/results.json)
    python bench/run.py --markdown bench/results.json   # a saved run as a markdown table

Columns: tdsl (time and rate), numpy in this process ("as is"), numpy in a subprocess with
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE removed from the environment ("unset": OpenBLAS picks
its own kernel), the ratio numpy time / tdsl time (against the faster of the two numpy
figures), and the share of the machine's fp32 FMA peak on all cores (bench/peak.py).

Timings are the minimum over repeats, tdsl and numpy (as is) taking turns in blocks of
0.15 s (`interleaved`): on a shared, loaded machine the minimum is the least disturbed figure,
and taking turns exposes both to the same load. The load average is printed; ratios from one run are what to compare.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import numpy_ref
import peak
import schedules
from timing import interleaved

import tdsl

BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
KERNELS = ("gemm", "softmax", "layernorm", "conv2d", "int8", "backend")


@dataclass
class Row:
    """One measured kernel (or one backend metric, with `value` text instead of timings)."""

    kernel: str
    size: str
    tdsl_s: float | None = None
    numpy_s: float | None = None
    numpy_unset_s: float | None = None
    work: float = 0.0          # flops / ops, or bytes for memory-bound kernels
    unit: str = "GFLOP/s"      # or "GB/s", "GOP/s"
    goal: str = ""
    met: bool | None = None
    value: str = ""            # backend metrics: the measured text
    peak: float = 0.0          # fp32 FMA peak, all cores, GFLOP/s, measured right before this row
    notes: list[str] = field(default_factory=list)

    def rate(self, seconds: float | None) -> float | None:
        return None if not seconds else self.work / seconds / 1e9

    @property
    def ratio(self) -> float | None:
        best = min((s for s in (self.numpy_s, self.numpy_unset_s) if s), default=None)
        return best / self.tdsl_s if best and self.tdsl_s else None


# -- timing --------------------------------------------------------------------------------

def numpy_unset(case: str, size: int) -> tuple[float, str]:
    """numpy's time for `case` in a subprocess without the OpenBLAS variables, and its kernel."""
    env = {k: v for k, v in os.environ.items() if k not in BLAS_VARS}
    out = subprocess.run([sys.executable, os.path.join(HERE, "numpy_ref.py"), case, str(size)], env=env,
                         capture_output=True, text=True, check=True).stdout
    data = json.loads(out.strip().splitlines()[-1])
    return data["best"], data["blas"]


def _check(got: np.ndarray, want: np.ndarray, what: str, rtol: float = 1e-3) -> None:
    """Results are checked before they are timed: a fast wrong kernel is not a result."""
    scale = float(np.abs(want).max()) or 1.0
    err = float(np.abs(got.astype(np.float64) - want).max()) / scale
    if err > rtol:
        raise AssertionError(f"{what}: relative error {err:.2e} against numpy")


# -- kernels -------------------------------------------------------------------------------

def bench_gemm(n: int, repeat: int) -> Row:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    kernel = tdsl.build(schedules.gemm_schedule(n))
    c = kernel(a, b)
    _check(c, a.astype(np.float64) @ b, f"gemm {n}")
    ref = np.empty_like(c)
    t, tn = interleaved([lambda: kernel(a, b, c), lambda: np.matmul(a, b, out=ref)], repeat)
    tu, blas = numpy_unset("gemm", n)
    mr, nr, mc, kc = schedules.gemm_tiles(n, n, n)
    return Row("fp32 GEMM", f"{n}^3", t, tn, tu, 2.0 * n ** 3, "GFLOP/s", ">= 1.2x numpy", None,
               notes=[f"tile {mr}x{nr}, MC {mc}, KC {kc}", f"numpy: {blas}"])


def bench_rows(kind: str, rows: int, cols: int, repeat: int) -> Row:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    if kind == "softmax":
        kernel = tdsl.build(schedules.softmax_schedule(rows, cols))
        args = (x,)
        ref = lambda: numpy_ref.softmax(x)
    else:
        g = rng.standard_normal(cols, dtype=np.float32)
        b = rng.standard_normal(cols, dtype=np.float32)
        kernel = tdsl.build(schedules.layernorm_schedule(rows, cols))
        args = (x, g, b)
        ref = lambda: numpy_ref.layernorm(x, g, b)
    out = kernel(*args)
    _check(out, ref(), kind)
    t, tn = interleaved([lambda: kernel(*args, out), ref], repeat)
    tu, _ = numpy_unset(kind, rows) if cols == 1024 else (None, "")
    label = "row softmax" if kind == "softmax" else "layernorm"
    row = Row(label, f"{rows}x{cols}", t, tn, tu, 2.0 * rows * cols * 4, "GB/s", ">= 20 GB/s")
    row.met = row.rate(t) >= 20
    row.notes.append("bytes read + written / time")
    return row


def bench_conv2d(size: int, repeat: int) -> Row:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 64, size, size), dtype=np.float32)
    w = rng.standard_normal((64, 64, 3, 3), dtype=np.float32)
    kernel = tdsl.build(schedules.conv2d_schedule(1, 64, size, size, 64))
    y = kernel(x, w)
    _check(y, numpy_ref.conv2d_im2col(x.astype(np.float64), w.astype(np.float64)), "conv2d")
    t, tn = interleaved([lambda: kernel(x, w, y), lambda: numpy_ref.conv2d_im2col(x, w)], repeat)
    tu, _ = numpy_unset("conv2d", size)
    return Row("conv2d 3x3 pad 1", f"1x64x{size}x{size}, 64 filters", t, tn, tu, 2.0 * 64 * 64 * 9 * size * size,
               "GFLOP/s", ">= 2x numpy im2col+sgemm", notes=["numpy: im2col + sgemm"])


def bench_int8(n: int, repeat: int) -> Row:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (n, n)).astype(np.uint8)
    b = rng.integers(-128, 128, (n, n)).astype(np.int8)
    kernel = tdsl.build(schedules.int8_gemm_schedule(n))
    c = kernel(a, b)
    if not np.array_equal(c, a.astype(np.int32) @ b.astype(np.int32)):
        raise AssertionError(f"int8 gemm {n}: wrong result")
    af, bf = a.astype(np.float32), b.astype(np.float32)
    fk = tdsl.build(schedules.gemm_schedule(n))
    cf = fk(af, bf)
    t, tf = interleaved([lambda: kernel(a, b, c), lambda: fk(af, bf, cf)], repeat)
    row = Row("int8 GEMM u8*s8->s32", f"{n}^3", t, None, None, 2.0 * n ** 3, "GOP/s", ">= 3x fp32 GEMM ops/s")
    row.notes.append(f"{tf / t:.2f}x the tdsl fp32 GEMM's rate ({2.0 * n ** 3 / tf / 1e9:.1f} GFLOP/s, same run)")
    row.met = tf / t >= 3
    row.value = f"{tf / t:.2f}x fp32"
    return row


GEMM_BUILD = r'''
import os, sys, time
sys.path.insert(0, sys.argv[1])
import tdsl, schedules
sch = schedules.gemm_schedule({n})
tdsl.build(schedules.softmax_schedule(8, 64))   # LLVM initialised, as in a running program
t = time.perf_counter(); k = tdsl.build(sch); t = time.perf_counter() - t
print(t, int(k.from_cache))
'''


def bench_gemm_build(n: int) -> list[Row]:
    """Build time of the GEMM that the GEMM rows run: cold (LLVM initialised, memory cache
    emptied, disk cache off; the best of 5, CPU time of the building thread and wall time) and
    from the disk cache in a new process (LLVM initialised by an earlier build there; the
    schedule is not timed). The build runs in the calling thread; its CPU time is what it
    costs, while wall time also counts other processes, and OpenBLAS's threads that spin for
    up to ~0.1 s after the GEMM rows' numpy calls (hence the pause before timing)."""
    from tdsl.backends import cache as kernel_cache

    os.environ["TDSL_DISABLE_DISK_CACHE"] = "1"
    try:
        sch = schedules.gemm_schedule(n)
        time.sleep(0.3)
        walls, cpus = [], []
        for _ in range(5):
            kernel_cache.clear_memory()
            start, start_cpu = time.perf_counter(), time.thread_time()
            tdsl.build(sch)
            cpus.append(time.thread_time() - start_cpu)
            walls.append(time.perf_counter() - start)
        cold, cold_cpu = min(walls), min(cpus)
    finally:
        del os.environ["TDSL_DISABLE_DISK_CACHE"]
    rows = [Row("GEMM build, cold", f"{n}^3", goal="<= 0.1 s", met=cold_cpu <= 0.1,
                value=f"{cold_cpu * 1e3:.0f} ms CPU, {cold * 1e3:.0f} ms wall")]
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TDSL_CACHE_DIR": cache}
        cmd = [sys.executable, "-c", GEMM_BUILD.format(n=n), HERE]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        runs = [subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout.split()
                for _ in range(3)]
    warm = min(float(r[0]) for r in runs)
    cached = all(r[1] == "1" for r in runs)
    rows.append(Row("GEMM build, from disk cache", f"{n}^3", goal="<= 5 ms", met=warm <= 0.005 and cached,
                    value=f"{warm * 1e3:.1f} ms" + ("" if cached else " (NOT from the cache)")))
    return rows


def bench_backend(quick: bool) -> list[Row]:
    """Call overhead, build of a small kernel, import time: bench/bench_cpu_backend.py's rows."""
    import bench_cpu_backend as be

    out = []
    for name, value, goal, ok in (be.bench_call_overhead(20_000 if quick else 200_000)
                                  + be.bench_build(3 if quick else 7) + be.bench_import(3 if quick else 7)):
        out.append(Row(name, "", goal=goal, met=bool(ok), value=value))
    return out


# -- report --------------------------------------------------------------------------------

def _fmt_time(s: float | None) -> str:
    return "-" if not s else f"{s * 1e3:.2f} ms"


def print_table(rows: list[Row], machine: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    title = (f"tdsl CPU kernels on {machine['cpu']} ({machine['cores']} cores, FMA peak at the start "
             f"{machine['peak_all']:.0f} GFLOP/s all cores, {machine['peak_single']:.0f} one core), "
             f"load average {machine['load']:.2f}; % peak: of the peak measured right before each row")
    table = Table(title=title, show_lines=False)
    for col in ("kernel", "size", "tdsl", "numpy (as is)", "numpy (unset)", "ratio", "% peak", "goal", "met"):
        table.add_column(col, justify="left" if col in ("kernel", "size", "goal") else "right")
    for r in rows:
        if r.tdsl_s is None:
            table.add_row(r.kernel, r.size, r.value, "", "", "", "", r.goal, _met(r.met))
            continue
        rate = r.rate(r.tdsl_s)
        cells = [f"{_fmt_time(r.tdsl_s)}  {rate:.1f} {r.unit}"]
        for s in (r.numpy_s, r.numpy_unset_s):
            cells.append("-" if not s else f"{_fmt_time(s)}  {r.rate(s):.1f} {r.unit}")
        ratio = r.value if r.ratio is None else f"{r.ratio:.2f}x"
        pk = f"{100 * rate / r.peak:.0f}%" if r.unit != "GB/s" and r.peak else "-"
        table.add_row(r.kernel, r.size, *cells, ratio, pk, r.goal, _met(r.met))
    Console(width=max(Console().width, 170)).print(table)
    for r in rows:
        if r.notes:
            print(f"  {r.kernel} {r.size}: " + "; ".join(r.notes))


def markdown(data: dict) -> str:
    """The table of a results.json as markdown (for docs/performance.md)."""
    lines = ["| kernel | size | tdsl | numpy (as is) | numpy (unset) | ratio | % peak | goal | met |",
             "|---|---|---|---|---|---|---|---|---|"]
    for d in data["rows"]:
        r = Row(**{k: v for k, v in d.items() if k != "ratio"})
        if r.tdsl_s is None:
            lines.append(f"| {r.kernel} | {r.size} | {r.value} | | | | | {r.goal} | {_met(r.met)} |")
            continue
        cells = [f"{_fmt_time(s)}, {r.rate(s):.1f} {r.unit}" if s else "-" for s in (r.tdsl_s, r.numpy_s,
                                                                                      r.numpy_unset_s)]
        ratio = r.value if r.ratio is None else f"{r.ratio:.2f}x"
        pk = f"{100 * r.rate(r.tdsl_s) / r.peak:.0f}%" if r.unit != "GB/s" and r.peak else "-"
        lines.append(f"| {r.kernel} | {r.size} | {' | '.join(cells)} | {ratio} | {pk} | {r.goal} | {_met(r.met)} |")
    m = data["machine"]
    lines.append("")
    lines.append(f"{m['cpu']}, {m['cores']} cores, ISAs {', '.join(m['isas'])}; FMA peak at the start "
                 f"{m['peak_all']:.0f} GFLOP/s (all cores), load average {m['load']:.2f} -> {m['load_after']:.2f}.")
    return "\n".join(lines)


def _met(ok: bool | None) -> str:
    return "" if ok is None else ("yes" if ok else "NO")


def with_peak(measure: Callable[[], Row]) -> Row:
    """Run one kernel's measurement with the FMA peak measured right before it: on a shared
    machine the available peak changes from minute to minute."""
    available = peak.measure()["all"]
    row = measure()
    row.peak = available
    return row


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--only", action="append", choices=KERNELS, help="run only these (repeatable)")
    parser.add_argument("--json", default=os.path.join(HERE, "results.json"), help="where to write the results")
    parser.add_argument("--markdown", metavar="RESULTS_JSON", help="print a saved run as a markdown table and exit")
    args = parser.parse_args(argv)
    if args.markdown:
        with open(args.markdown) as fh:
            print(markdown(json.load(fh)))
        return []
    only = set(args.only or KERNELS)
    repeat = 3 if args.quick else 7
    pk = peak.measure()
    from tdsl.backends.llvm import jit

    machine = {"cpu": jit.host_info().cpu, "cores": pk["cores"], "peak_all": pk["all"], "peak_single": pk["single"],
               "lanes": pk["lanes"], "load": os.getloadavg()[0], "isas": schedules.x86.available(),
               "blas_env": {k: os.environ.get(k) for k in BLAS_VARS}, "quick": args.quick}
    rows: list[Row] = []
    if "gemm" in only:
        for n in ((512, 1024) if args.quick else (512, 1000, 1024, 2048)):
            rows.append(with_peak(lambda n=n: bench_gemm(n, repeat)))
            rows[-1].met = rows[-1].ratio is not None and rows[-1].ratio >= 1.2
        rows += bench_gemm_build(256 if args.quick else 1024)
    if "softmax" in only:
        rows.append(with_peak(lambda: bench_rows("softmax", 1024 if args.quick else 4096, 1024, repeat)))
    if "layernorm" in only:
        rows.append(with_peak(lambda: bench_rows("layernorm", 1024 if args.quick else 4096, 1024, repeat)))
    if "conv2d" in only:
        rows.append(with_peak(lambda: bench_conv2d(56, repeat)))
        rows[-1].met = rows[-1].ratio is not None and rows[-1].ratio >= 2
    if "int8" in only:
        rows.append(with_peak(lambda: bench_int8(512 if args.quick else 1024, repeat)))
    if "backend" in only:
        rows += bench_backend(args.quick)
    machine["load_after"] = os.getloadavg()[0]
    print_table(rows, machine)
    with open(args.json, "w") as fh:
        json.dump({"machine": machine, "rows": [dict(asdict(r), ratio=r.ratio) for r in rows]}, fh, indent=1)
    print(f"results written to {args.json}")
    return rows


if __name__ == "__main__":
    main()
