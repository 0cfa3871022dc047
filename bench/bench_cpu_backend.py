"""CPU backend benchmark: parallel speedup, build times (cold, from the disk cache), call overhead,
`import tdsl` time. Prints a table with the goals from the backend issue.

    python bench/bench_cpu_backend.py            # about 30 s on 2 cores
    python bench/bench_cpu_backend.py --quick    # smaller sizes, fewer repeats
    python bench/bench_cpu_backend.py --pipelines auto,O1-no-unroll   # A/B of LLVM pipelines
    python bench/bench_cpu_backend.py --phases --pipelines auto,O1-no-unroll --kernels "gemm 1024"

Timings are medians; on a shared machine they are noisy (the load average is printed).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tdsl

ELEMENTWISE = '''
@T.prim_func
def ew(A: T.Buffer((ROWS, 1024), "float32"), B: T.Buffer((ROWS, 1024), "float32")):
    for i in KIND(ROWS):
        for j in range(1024):
            with T.block("b"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = T.exp(A[vi, vj]) * T.float32(0.5) + T.tanh(A[vi, vj])
'''

ROWSUM = '''
@T.prim_func
def rowsum(A: T.Buffer((ROWS, 4096), "float32"), B: T.Buffer((ROWS,), "float32")):
    for i in KIND(ROWS):
        for k in range(4096):
            with T.block("B"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] = B[vi] + A[vi, vk]
'''

ADD = '''
@T.prim_func
def add(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.block("c"):
            vi = T.axis.spatial(16, i)
            C[vi] = A[vi] + B[vi] * T.float32(SCALE)
'''

DISK_RUN = '''
import sys, time
t0 = time.perf_counter()
import tdsl
t1 = time.perf_counter()
f1 = tdsl.parse(sys.argv[1]); f2 = tdsl.parse(sys.argv[2])
t2 = time.perf_counter()
k1 = tdsl.build(f1)
t3 = time.perf_counter()
k2 = tdsl.build(f2)
t4 = time.perf_counter()
print(t3 - t2, t4 - t3, int(k1.from_cache), int(k2.from_cache))
'''


def _kernel(src: str, **subs) -> tdsl.Kernel:
    for k, v in subs.items():
        src = src.replace(k, str(v))
    return tdsl.build(tdsl.parse(src))


def bench_parallel(rows: int, repeat: int) -> list[tuple]:
    rng = np.random.default_rng(0)
    out = []
    a = rng.standard_normal((rows, 1024)).astype(np.float32)
    ser = _kernel(ELEMENTWISE, ROWS=rows, KIND="range")
    par = _kernel(ELEMENTWISE, ROWS=rows, KIND="T.parallel")
    np.testing.assert_allclose(par(a), ser(a), rtol=1e-6)
    ts, tp = ser.time(a, repeat=repeat), par.time(a, repeat=repeat)
    out.append(("parallel speedup, exp+tanh elementwise", f"{ts / tp:.2f}x ({ts * 1e3:.2f} -> {tp * 1e3:.2f} ms)",
                ">= 1.7x on 2 cores", ts / tp >= 1.7))
    a = rng.standard_normal((rows, 4096)).astype(np.float32)
    ser = _kernel(ROWSUM, ROWS=rows, KIND="range")
    par = _kernel(ROWSUM, ROWS=rows, KIND="T.parallel")
    np.testing.assert_allclose(par(a), a.sum(axis=1), rtol=1e-3, atol=1e-3)
    ts, tp = ser.time(a, repeat=repeat), par.time(a, repeat=repeat)
    out.append(("parallel speedup, row-sum reduction", f"{ts / tp:.2f}x ({ts * 1e3:.2f} -> {tp * 1e3:.2f} ms)",
                ">= 1.7x on 2 cores", ts / tp >= 1.7))
    out.append(_worker_share(par, a, repeat))
    tiny = np.ones((2, 1024), np.float32)
    k = _kernel(ELEMENTWISE, ROWS=2, KIND="T.parallel")
    ks = _kernel(ELEMENTWISE, ROWS=2, KIND="range")
    region = (k.time(tiny, repeat=repeat) - ks.time(tiny, repeat=repeat)) * 1e6
    out.append(("parallel region overhead (2 rows)", f"{region:.1f} us", "a few us", region < 10))
    return out


def _thread_ticks() -> dict[str, int]:
    """CPU clock ticks used so far by each thread of this process (Linux /proc)."""
    out = {}
    task_dir = f"/proc/{os.getpid()}/task"
    for tid in os.listdir(task_dir):
        with open(f"{task_dir}/{tid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        out[tid] = int(fields[11]) + int(fields[12])
    return out


def _worker_share(kernel, a, repeat: int) -> tuple:
    """How the CPU time of a parallel kernel splits between the caller and the pool's workers:
    on a loaded machine the wall-clock speedup hides it, this does not."""
    if not os.path.isdir(f"/proc/{os.getpid()}/task"):
        return ("parallel work done by pool workers", "n/a (no /proc)", "", True)
    main = str(threading.get_native_id())
    before = _thread_ticks()
    start = time.perf_counter()
    runs = 0
    while runs < 1000 and (runs < 3 * repeat or time.perf_counter() - start < 1.0):
        kernel(a)
        runs += 1
    after = _thread_ticks()
    used = {t: after[t] - before.get(t, 0) for t in after}
    total = sum(used.values()) or 1
    workers = total - used.get(main, 0)
    from tdsl.backends.llvm import runtime

    n = runtime.num_threads()
    ideal = (n - 1) / n
    return ("parallel work done by pool workers", f"{100 * workers / total:.0f}% of CPU time ({total} ticks)",
            f"~{100 * ideal:.0f}% ({n} threads)", workers / total >= 0.6 * ideal)


BLAS_RUN = """
import time, numpy as np
a = np.random.rand(1024, 1024).astype(np.float32)
a @ a
best = 1e9
for _ in range(5):
    t = time.perf_counter()
    a @ a
    best = min(best, time.perf_counter() - t)
print(best)
"""


def bench_machine_reference() -> list[tuple]:
    """The same speedup question asked of OpenBLAS (sgemm 1024, 1 vs all threads), to tell a
    runtime problem from a machine that does not give this process all its cores right now."""
    def run(threads: str) -> float:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads}
        return float(subprocess.run([sys.executable, "-c", BLAS_RUN], env=env, check=True, capture_output=True,
                                    text=True).stdout)

    from tdsl.backends.llvm import runtime

    one, many = run("1"), run(str(runtime.num_threads()))
    measured = f"{one / many:.2f}x ({one * 1e3:.1f} -> {many * 1e3:.1f} ms)"
    return [("reference: OpenBLAS sgemm speedup, same threads", measured, "machine check", True)]


def bench_call_overhead(number: int) -> list[tuple]:
    """Per-call cost of `kernel(a, b, c)` on 16-element arrays: CPU time of the calling thread
    (what the call costs, not inflated by other processes on a loaded machine, nor by OpenBLAS's
    threads still spinning after an earlier benchmark, which process_time would count) and wall
    time."""
    k = _kernel(ADD, SCALE=2)
    a, b, c = (np.ones(16, np.float32) for _ in range(3))
    k(a, b, c)

    def per_call(fn, timer) -> list[float]:
        # many short samples, the best one: on a shared machine a quiet 50 ms window is likelier
        # than a quiet 0.2 s one (the others give the range a loaded machine shows)
        calls = max(1, number // 4)
        return sorted(t / calls * 1e6 for t in timeit.repeat(fn, number=calls, repeat=20, timer=timer))

    cpu = per_call(lambda: k(a, b, c), time.thread_time)
    wall = per_call(lambda: k(a, b, c), time.perf_counter)
    npy = per_call(lambda: np.add(a, b, out=c), time.thread_time)
    text = (f"{cpu[0]:.2f} us CPU, {wall[0]:.2f} us wall (np.add(out=) {npy[0]:.2f} us); "
            f"range over 20 samples {cpu[0]:.2f}-{cpu[-1]:.2f} us CPU, {wall[0]:.2f}-{wall[-1]:.2f} us wall")
    return [("call overhead, 3 numpy args", text, "<= 1 us", cpu[0] <= 1.0)]


def bench_build(count: int) -> list[tuple]:
    os.environ["TDSL_DISABLE_DISK_CACHE"] = "1"
    try:
        _kernel(ADD, SCALE=3)   # LLVM initialised, modules imported
        times, cpu_times = [], []
        for s in range(count):
            f = tdsl.parse(ADD.replace("SCALE", str(100 + s)))
            t0, c0 = time.perf_counter(), time.thread_time()   # the build runs in this thread
            tdsl.build(f)
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.thread_time() - c0)
    finally:
        del os.environ["TDSL_DISABLE_DISK_CACHE"]
    cold, cold_cpu = statistics.median(times), statistics.median(cpu_times)
    rows = [("build time, cold (LLVM warm, no cache)", f"{cold_cpu * 1e3:.1f} ms CPU, {cold * 1e3:.1f} ms wall",
             "<= 100 ms", cold_cpu <= 0.1)]
    with tempfile.TemporaryDirectory() as cache_dir:
        env = {**os.environ, "TDSL_CACHE_DIR": cache_dir}
        src1, src2 = ADD.replace("SCALE", "7"), ADD.replace("SCALE", "8")
        cmd = [sys.executable, "-c", DISK_RUN, src1, src2]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        first, second = [], []
        for _ in range(3):
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout.split()
            assert out[2:] == ["1", "1"], out
            first.append(float(out[0]))
            second.append(float(out[1]))
    warm = statistics.median(second)
    first_ms = statistics.median(first) * 1e3
    rows.append(("build time from disk cache (new process)",
                 f"{warm * 1e3:.2f} ms (first build there, incl. LLVM init: {first_ms:.1f} ms)", "<= 5 ms",
                 warm <= 0.005))
    return rows


def bench_import(count: int) -> list[tuple]:
    code = ("import time; c = time.process_time(); t = time.perf_counter(); import tdsl; "
            "print(time.process_time() - c, time.perf_counter() - t)")
    # What a user's import costs: with bytecode caching on (pip compiles .pyc files at install). A sandbox
    # that sets PYTHONDONTWRITEBYTECODE would otherwise time the compilation of every module, every run.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", "import tdsl"], check=True, env=env)  # writes the .pyc files once
    runs = [subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                           env=env).stdout.split()
            for _ in range(count)]
    cpus, walls = sorted(float(r[0]) for r in runs), sorted(float(r[1]) for r in runs)
    cpu, wall = statistics.median(cpus), statistics.median(walls)
    text = (f"{cpu * 1e3:.0f} ms CPU, {wall * 1e3:.0f} ms wall (median of {count}; range "
            f"{cpus[0] * 1e3:.0f}-{cpus[-1] * 1e3:.0f} ms CPU, {walls[0] * 1e3:.0f}-{walls[-1] * 1e3:.0f} ms wall)")
    return [("import tdsl (subprocess)", text, "<= 150 ms", cpu <= 0.15)]


PLAIN_MATMUL = '''
@T.prim_func
def matmul(A: T.Buffer((256, 256), "float32"), B: T.Buffer((256, 256), "float32"), C: T.Buffer((256, 256), "float32")):
    for i, j, k in T.grid(256, 256, 256):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''

PLAIN_ADD = '''
@T.prim_func
def add(A: T.Buffer((1024, 1024), "float32"), B: T.Buffer((1024, 1024), "float32"), C: T.Buffer((1024, 1024), "float32")):
    for i, j in T.grid(1024, 1024):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] + B[vi, vj]
'''


def _pipeline_kernels() -> dict:
    """The kernels of `bench_pipelines` and `bench_build_phases`: bench/schedules.py's and two
    unscheduled ones that rely on LLVM's loop vectorizer."""
    import schedules

    return {"gemm 512": lambda: schedules.gemm_schedule(512).func,
            "gemm 1000": lambda: schedules.gemm_schedule(1000).func,
            "gemm 1024": lambda: schedules.gemm_schedule(1024).func,
            "conv2d 64x56x56": lambda: schedules.conv2d_schedule(1, 64, 56, 56, 64).func,
            "int8 gemm 1024": lambda: schedules.int8_gemm_schedule(1024).func,
            "softmax 4096x1024": lambda: schedules.softmax_schedule(4096, 1024).func,
            "softmax 64x1024": lambda: schedules.softmax_schedule(64, 1024).func,
            "layernorm 4096x1024": lambda: schedules.layernorm_schedule(4096, 1024).func,
            "plain add 1024^2": lambda: tdsl.parse(PLAIN_ADD),
            "plain matmul 256^3": lambda: tdsl.parse(PLAIN_MATMUL)}


def _build_with(func, lowered, pipeline: str | None, tag: str) -> tuple[tdsl.Kernel, float]:
    """`func` compiled with `pipeline` (None: the one tdsl picks) under its own symbol, outside
    the caches; and the CPU time the compilation took."""
    from tdsl import Kernel
    from tdsl.backends.llvm import compile as llvm_compile

    t = time.thread_time()
    compiled = llvm_compile._compile(lowered, func, f"tdsl_ab_{tag}", False, None, pipeline)
    took = time.thread_time() - t
    llvm_compile._bind_context(compiled)
    return Kernel(func, compiled, {"bounds_check": False}), took


def _inputs(kernel: tdsl.Kernel, rng: np.random.Generator) -> list[np.ndarray]:
    """Every parameter as an array (destination passing), small values of its dtype."""
    out = []
    for p in kernel._params:
        shape = tuple(int(s.value) for s in p.shape)
        if np.issubdtype(p.np_dtype, np.floating):
            out.append(rng.standard_normal(shape).astype(p.np_dtype))
        else:
            low = -3 if np.issubdtype(p.np_dtype, np.signedinteger) else 0
            out.append(rng.integers(low, 4, shape).astype(p.np_dtype))
    return out


def bench_pipelines(pipelines: list[str], names: list[str] | None, repeat: int) -> None:
    """A/B of LLVM pipelines: each kernel built with each pipeline ("auto": tdsl's choice), the
    results compared, then one-thread CPU time per call (min over `repeat` interleaved rounds)
    as ratios to the first pipeline, and the compile CPU time (code generation + LLVM)."""
    os.environ["TDSL_NUM_THREADS"] = "1"
    from tdsl.backends.llvm.compile import pipeline_for
    from tdsl.lower import lower

    rng = np.random.default_rng(0)
    for name, make in _pipeline_kernels().items():
        if names and not any(n in name for n in names):
            continue
        func = make()
        lowered = lower(func, target="cpu")
        chosen = [pipeline_for(lowered.body) if p == "auto" else p for p in pipelines]
        built = [_build_with(func, lowered, p, f"{abs(hash(name))}_{k}") for k, p in enumerate(chosen)]
        args = _inputs(built[0][0], rng)
        results = []
        for kernel, _ in built:
            copies = [a.copy() for a in args]
            kernel(*copies)
            results.append(copies)
        for other in results[1:]:
            for want, got in zip(results[0], other):
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)
        best = [float("inf")] * len(built)
        start = time.thread_time()
        built[0][0](*args)
        calls = max(1, int(0.003 / max(time.thread_time() - start, 1e-6)))   # ~3 ms per sample
        for _ in range(repeat):
            for k, (kernel, _) in enumerate(built):
                start = time.thread_time()
                for _ in range(calls):
                    kernel(*args)
                best[k] = min(best[k], (time.thread_time() - start) / calls)
        # a pipeline named twice is built twice (code placement alone moves a kernel's time by
        # a few percent): its best build and its cheapest compilation count
        runs: dict[str, tuple[float, float]] = {}
        for p, b, (_, t) in zip(chosen, best, built):
            run, took = runs.get(p, (b, t))
            runs[p] = (min(run, b), min(took, t))
        first_run = runs[chosen[0]][0]
        cells = [f"{p}: run {b * 1e3:.3f} ms ({b / first_run:.3f}x), build {t * 1e3:.0f} ms" for p, (b, t) in runs.items()]
        print(f"{name:<20} " + " | ".join(cells), flush=True)


PHASES = ("lower", "bounds+codegen", "parse+verify", "optimize", "emit", "pack+load+bind")


def bench_build_phases(pipelines: list[str], names: list[str] | None, repeat: int) -> None:
    """CPU time of each phase of a cold build (compile.compile_func's steps, outside the
    caches), min over `repeat` rounds that take the pipelines in turn ("auto": tdsl's choice)."""
    from dataclasses import asdict

    from tdsl.backends.llvm import compile as llvm_compile
    from tdsl.backends.llvm import entry, jit
    from tdsl.backends.llvm.bounds import check_static_bounds
    from tdsl.lower import lower

    host = jit.host_info()
    for name, make in _pipeline_kernels().items():
        if names and not any(n in name for n in names):
            continue
        func = make()
        best: dict[str, dict[str, float]] = {}
        for r in range(repeat):
            for k, choice in enumerate(pipelines):
                marks = [time.thread_time()]     # after each phase
                lowered = lower(func, target="cpu")
                marks.append(time.thread_time())
                check_static_bounds(lowered)
                pipeline = llvm_compile.pipeline_for(lowered.body) if choice == "auto" else choice
                result = entry.codegen(lowered, f"tdsl_phases_{abs(hash(name))}_{r}_{k}", api=func,
                                         triple=host.triple, datalayout=jit.data_layout(),
                                         wrappers_optnone=pipeline == jit.SIMPLIFY)   # as compile._compile
                marks.append(time.thread_time())
                mod = jit.parse_and_verify(result.ir, name)
                marks.append(time.thread_time())
                jit.optimize(mod, pipeline)
                marks.append(time.thread_time())
                obj = jit.emit_object(mod)
                marks.append(time.thread_time())
                info = {key: v for key, v in asdict(result).items() if key != "ir"}
                compiled = llvm_compile.Compiled(info, llvm_compile._pack_text(result.ir), pipeline,
                                                 jit.load_object(obj, llvm_compile._symbols(info)))
                llvm_compile._bind_context(compiled)
                marks.append(time.thread_time())
                phases = {p: b - a for p, a, b in zip(PHASES, marks, marks[1:])}
                phases["LLVM half"] = sum(phases[p] for p in ("parse+verify", "optimize", "emit", "pack+load+bind"))
                mins = best.setdefault(pipeline, {})
                for phase, took in phases.items():
                    mins[phase] = min(mins.get(phase, took), took)
        for pipeline, mins in best.items():
            print(f"{name:<20} {pipeline:<13} " + "  ".join(f"{p} {v * 1e3:.1f}" for p, v in mins.items()) + " (ms CPU)",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    parser.add_argument("--pipelines", help="instead of the table: A/B of LLVM pipelines, comma-separated "
                        "(auto = tdsl's choice; jit.PIPELINES), e.g. auto,O1-no-unroll")
    parser.add_argument("--phases", action="store_true", help="instead of the table: CPU time per phase of a cold "
                        "build, for each of --pipelines (default auto)")
    parser.add_argument("--kernels", help="with --pipelines or --phases: kernels whose name contains one of these "
                        "(comma-separated)")
    parser.add_argument("--repeat", type=int, default=25, help="with --pipelines or --phases: interleaved rounds")
    args = parser.parse_args()
    kernels = args.kernels.split(",") if args.kernels else None
    if args.phases:
        bench_build_phases((args.pipelines or "auto").split(","), kernels, args.repeat)
        return
    if args.pipelines:
        bench_pipelines(args.pipelines.split(","), kernels, args.repeat)
        return
    rows = []
    rows += bench_parallel(512 if args.quick else 4096, 3 if args.quick else 7)
    rows += bench_machine_reference()
    rows += bench_call_overhead(20_000 if args.quick else 200_000)
    rows += bench_build(3 if args.quick else 7)
    rows += bench_import(3 if args.quick else 7)
    from tdsl.backends.llvm import jit, runtime

    host = jit.host_info()
    print(f"\nCPU backend on {host.cpu}, {runtime.num_threads()} threads, load average "
          f"{os.getloadavg()[0]:.2f}, LLVM {host.llvm_version}")
    width = max(len(r[0]) for r in rows)
    print(f"{'metric':<{width}}  {'measured':<52} {'goal':<20} ok")
    for name, value, goal, ok in rows:
        print(f"{name:<{width}}  {value:<52} {goal:<20} {'yes' if ok else 'NO'}")


if __name__ == "__main__":
    main()
