"""Tuning benchmark (issue 18): tdsl.tune against numpy, TVM MetaSchedule's figure, and random search.

    python bench/bench_tune.py gemm                # GEMM 512^3, 64 trials (the MetaSchedule comparison)
    python bench/bench_tune.py compare             # model-guided vs random search, same budget: GEMM, conv2d
    python bench/bench_tune.py model-vs-random     # the same over several seeds (--seeds 3): mean ratio, spread
    python bench/bench_tune.py search-on-table     # both searches on a table of measured programs (no noise)
    python bench/bench_tune.py build-speed         # candidates prepared + built per minute on this machine
    python bench/bench_tune.py full                # the issue's table: GEMM 1024, conv2d, softmax, layernorm,
                                                   # 256 trials each (long: an idle machine only)
    options: --space rules|hand (default: rules when tdsl.space exists), --trials N, --seed S,
             --model auto|numpy|lightgbm, --json out.json

TVM 0.27 MetaSchedule on this machine (issue 18): GEMM 512^3 fp32, 64 trials, 337 s, 46 GFLOP/s =
0.30x numpy. Kernel times are the minimum over interleaved turns with numpy (bench/timing.py,
2 ms samples as in the tuner); the tuner's own figures are printed beside them (its best trial
and its re-timing of the best few against each other, which chooses `.best`);
the machine's load average is printed with every figure: it is shared, ratios from one run are
what to compare.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import numpy_ref
import schedules
from timing import interleaved

import tdsl

TVM_GFLOPS, TVM_SECONDS = 46.0, 337.0
SAMPLE_S = 0.002
"""Seconds per timing sample: as short as the tuner's (its minimum over many short samples is the
undisturbed figure; with 20 ms samples on a machine at load 8 a 0.4 ms GEMM 256 timed 1-2 ms)."""


# -- hand-written design spaces (used when the rules are absent, or with --space hand) ----------

def gemm_space(sch):
    """A register tile of C in a local buffer: sampled rows, vector width, k step; outer loops parallel."""
    c = sch.get_block("C")
    acc = sch.cache_write(c, 0, "local")
    i, j, k = sch.get_loops(c)
    ti = sch.sample_perfect_tile(i, n=3, max_innermost_factor=8)
    lanes = sch.sample_categorical([8, 16, 32, 64], [0.25] * 4)
    tk = sch.sample_perfect_tile(k, n=2, max_innermost_factor=256)
    i0, i1, i2 = sch.split(i, factors=ti)
    j0, j1 = sch.split(j, factors=[None, lanes])
    k0, k1 = sch.split(k, factors=tk)
    sch.reorder(i0, j0, i1, k0, k1, i2, j1)
    sch.reverse_compute_at(acc, i1)
    sch.parallel(sch.fuse(i0, j0))
    sch.vectorize(j1)


def conv2d_space(sch):
    """conv2d: tiles of filters, output columns and channels, a local accumulator, the padding
    block at a sampled location."""
    conv = sch.get_block("conv")
    acc = sch.cache_write(conv, 0, "local")
    b, ko, y, x, ci, r, s = sch.get_loops(conv)
    tk = sch.sample_perfect_tile(ko, n=2, max_innermost_factor=8)
    tx = sch.sample_perfect_tile(x, n=2, max_innermost_factor=64)
    tc = sch.sample_perfect_tile(ci, n=2, max_innermost_factor=64)
    k0, k1 = sch.split(ko, factors=tk)
    x0, x1 = sch.split(x, factors=tx)
    c0, c1 = sch.split(ci, factors=tc)
    sch.reorder(b, y, k0, x0, c0, r, s, c1, k1, x1)
    sch.reverse_compute_at(acc, x0)
    sch.parallel(sch.fuse(b, y))
    sch.vectorize(x1)
    pad = sch.get_block("pad")
    sch.compute_at(pad, sch.sample_compute_location(pad))


# -- kernels ---------------------------------------------------------------------------------

def kernels(small: bool = False):
    """name -> (function, hand space, numpy reference maker, hand schedule maker or None)."""
    rng = np.random.default_rng(0)

    def gemm(n):
        a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
        out = np.empty((n, n), np.float32)
        return (schedules.gemm_func(n), gemm_space, (a, b), lambda: np.matmul(a, b, out=out),
                lambda: schedules.gemm_schedule(n))

    def conv(c, hw):
        x = rng.random((1, c, hw, hw), dtype=np.float32)
        w = rng.random((c, c, 3, 3), dtype=np.float32)
        return (schedules.conv2d_func(1, c, hw, hw, c), conv2d_space, (x, w), lambda: numpy_ref.conv2d_im2col(x, w),
                lambda: schedules.conv2d_schedule(1, c, hw, hw, c))

    def rows(kind, n, cols=1024):
        x = rng.standard_normal((n, cols), dtype=np.float32)
        if kind == "softmax":
            return (schedules.softmax_func(n, cols), None, (x,), lambda: numpy_ref.softmax(x),
                    lambda: schedules.softmax_schedule(n, cols))
        g, b = rng.standard_normal(cols, dtype=np.float32), rng.standard_normal(cols, dtype=np.float32)
        return (schedules.layernorm_func(n, cols), None, (x, g, b), lambda: numpy_ref.layernorm(x, g, b),
                lambda: schedules.layernorm_schedule(n, cols))

    return {"gemm512": lambda: gemm(512), "gemm1024": lambda: gemm(1024), "gemm256": lambda: gemm(256),
            "conv2d56": lambda: conv(64, 56), "conv2d28": lambda: conv(32, 28),
            "softmax4096": lambda: rows("softmax", 4096), "layernorm4096": lambda: rows("layernorm", 4096)}


def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def _space(choice: str, hand):
    if choice == "hand":
        return hand
    if choice == "rules" or (choice == "auto" and hasattr(tdsl, "space")):
        return None
    return hand


def time_against_numpy(kernel, inputs, numpy_fn, repeat: int = 5) -> tuple[float, float]:
    out = kernel(*inputs)
    args = (*inputs, out)
    t_tdsl, t_np = interleaved([lambda: kernel(*args), numpy_fn], repeat=repeat, min_time=SAMPLE_S)
    return t_tdsl, t_np


def run_gemm(args) -> dict:
    func, hand, inputs, numpy_fn, _ = kernels()["gemm512"]()
    db = os.path.join(tempfile.mkdtemp(prefix="bench-tune-"), "tune.db")
    print(f"GEMM 512^3, {args.trials} trials, space={'hand' if _space(args.space, hand) else 'rules'}; {load()}")
    t0 = time.perf_counter()
    result = tdsl.tune(func, trials=args.trials, space=_space(args.space, hand), database=db, seed=args.seed,
                       cost_model=args.model)
    seconds = time.perf_counter() - t0
    print(result)
    t_tdsl, t_np = time_against_numpy(tdsl.build(result.best.schedule), inputs, numpy_fn)
    flops = 2 * 512 ** 3
    row = {"kernel": "gemm512", "trials": len(result.records), "tune_s": seconds,
           "gflops": flops / t_tdsl / 1e9, "numpy_gflops": flops / t_np / 1e9, "ratio_numpy": t_np / t_tdsl,
           "vs_tvm_gflops": flops / t_tdsl / 1e9 / TVM_GFLOPS, "failures": len([r for r in result.records if not r.ok]),
           "candidates_per_minute": result.stats["candidates_per_minute"], "load": load()}
    print(f"GEMM 512: tuned {row['gflops']:.1f} GFLOP/s, numpy {row['numpy_gflops']:.1f} GFLOP/s -> "
          f"{row['ratio_numpy']:.2f}x numpy (goal >= 0.6x); {row['vs_tvm_gflops']:.2f}x MetaSchedule's "
          f"{TVM_GFLOPS:.0f} GFLOP/s (goal >= 2x); tuning took {seconds:.0f} s (MetaSchedule {TVM_SECONDS:.0f} s); "
          f"{row['failures']} failed; {load()}")
    return row


def child_times(func, results, turns: int = 4) -> list[float]:
    """Each result's best kernel timed again in one fresh measuring process, the kernels taking
    `turns` turns of 0.1 s each (the tuner's re-timing request, tdsl.tuner.timing.interleaved):
    each one's best sample."""
    from tdsl.tuner.runner import Runner

    runner = Runner()
    try:
        answer = runner.measure({"func": func.script(), "func_hash": tdsl.structural_hash(func),
                                 "candidates": [r.best.schedule.func.script() for r in results], "rounds": turns,
                                 "block_s": 0.1, "min_sample_s": SAMPLE_S}, timeout=600)
    finally:
        runner.close()
    if "times" not in answer:
        raise RuntimeError(f"re-timing failed: {answer}")
    return [t if t is not None else float("inf") for t in answer["times"]]


def run_compare(args) -> list[dict]:
    rows = []
    for name in args.only or ("gemm256", "conv2d28"):
        func, hand, inputs, _, _ = kernels()[name]()
        best = {}
        for model in ("auto", "random"):
            result = tdsl.tune(func, trials=args.trials, space=_space(args.space, hand), seed=args.seed,
                               cost_model=model if model != "auto" else args.model, verbose=0, batch=8)
            print(f"  {name} {model}: best measured while tuning {result.best.time * 1e3:.3f} ms "
                  f"({result.stats['seconds']:.0f} s); {load()}")
            best[model] = (result, tdsl.build(result.best.schedule))
        model_kernel, random_kernel = best["auto"][1], best["random"][1]
        args_ = (*inputs, model_kernel(*inputs))
        t_model, t_random = interleaved([lambda k=model_kernel, a=args_: k(*a), lambda k=random_kernel, a=args_: k(*a)],
                                        repeat=5, min_time=SAMPLE_S)
        c_model, c_random = child_times(func, [best["auto"][0], best["random"][0]])
        row = {"kernel": name, "trials": args.trials, "model": best["auto"][0].stats["model"],
               "model_s": t_model, "random_s": t_random, "random_over_model": t_random / t_model,
               "child_model_s": c_model, "child_random_s": c_random, "child_random_over_model": c_random / c_model,
               "load": load()}
        print(f"{name}: {args.trials} trials each, {row['model']} {t_model * 1e3:.3f} ms vs random "
              f"{t_random * 1e3:.3f} ms -> model-guided is {row['random_over_model']:.2f}x faster (in this process); "
              f"measuring process, 4 turns each: {c_model * 1e3:.3f} vs {c_random * 1e3:.3f} ms -> "
              f"{row['child_random_over_model']:.2f}x; {load()}")
        rows.append(row)
    return rows


def run_model_vs_random(args) -> list[dict]:
    """Model-guided search against random search (fresh samples of the design space, picked at
    random), the same trials and batch, seeds 0..seeds-1; every final best timed again in one
    measuring process, 8 turns each (child_times), so that the ratios compare like with like."""
    rows = []
    for name in args.only or ("gemm256", "conv2d28"):
        func, hand, _, _, _ = kernels()[name]()
        results: dict[str, list] = {"model": [], "random": []}
        for seed in range(args.seeds):
            for mode in ("model", "random"):
                result = tdsl.tune(func, trials=args.trials, space=_space(args.space, hand), seed=seed, verbose=0,
                                   batch=args.batch, cost_model=args.model if mode == "model" else "random")
                results[mode].append(result)
                print(f"  {name} seed {seed} {mode:6s}: best trial {result.best.record.time * 1e3:.3f} ms, re-timed "
                      f"at the end {result.best.time * 1e3:.3f} ms, "
                      f"{len(result.tasks[0].failures)} failed, {result.stats['seconds']:.0f} s; {load()}", flush=True)
        timed = child_times(func, results["model"] + results["random"], turns=8)
        t_model, t_random = timed[: args.seeds], timed[args.seeds:]
        ratios = [r / m for m, r in zip(t_model, t_random)]
        row = {"kernel": name, "trials": args.trials, "batch": args.batch, "seeds": args.seeds,
               "model": results["model"][0].stats["model"], "model_s": t_model, "random_s": t_random,
               "ratios": ratios, "mean_ratio": float(np.mean(ratios)), "min_ratio": min(ratios),
               "max_ratio": max(ratios), "load": load()}
        print(f"{name}: {args.trials} trials, batch {args.batch}, {row['model']} vs random, seeds 0..{args.seeds - 1}: "
              "random best / model best = " + ", ".join(f"{r:.2f}" for r in ratios)
              + f" -> mean {row['mean_ratio']:.2f}x (min {row['min_ratio']:.2f}, max {row['max_ratio']:.2f}); "
              f"retimed in one measuring process; {load()}", flush=True)
        rows.append(row)
    return rows


def run_search_on_table(args) -> list[dict]:
    """The search alone, with measurement noise frozen: every program is measured once, the
    first time any search proposes it (in this process's measuring child, checked like a trial),
    and every later search that proposes it reads the same time from the table; model-guided and
    random search then run `trials` trials each, seeds 0..seeds-1. `--table-file` keeps the
    table between runs (JSON: program key -> seconds or the failure). Reports each search's best
    as a multiple of the best program in the table, which grows with every search."""
    import random as random_mod
    from concurrent.futures import ThreadPoolExecutor

    from tdsl.tuner import api
    from tdsl.tuner.progress import Progress
    from tdsl.tuner.runner import Runner
    from tdsl.tuner.search import Engine, TuneOptions

    rows = []
    saved = {}
    if args.table_file and os.path.exists(args.table_file):
        with open(args.table_file) as f:
            saved = json.load(f)
    runner = Runner()
    try:
        for name in args.only or ("gemm256", "conv2d28"):
            func, hand, _, _, _ = kernels()[name]()
            space = _space(args.space, hand)
            table = saved.setdefault(f"{name}/{'hand' if space else 'rules'}", {})
            request = {"func": func.script(), "func_hash": tdsl.structural_hash(func), "seed": 0, "warmup": 1,
                       "repeats": 5, "min_sample_s": SAMPLE_S, "measure_s": 0.1}

            def lookup(p, table=table, request=request):
                if p["key"] not in table:
                    answer = runner.measure(dict(request, candidate=p["script"]), timeout=60)
                    table[p["key"]] = answer.get("time") if answer.get("error") is None else str(answer["error"])[:200]
                t = table[p["key"]]
                return {"time": t, "times": [t]} if isinstance(t, float) else {"error": t}

            found: dict[str, list[float]] = {"model": [], "random": []}
            for seed in range(args.seeds):
                for mode in ("model", "random"):
                    tasks, _ = api._tasks([func], "cpu", space, seed, random_mod.Random(seed),
                                          args.model if mode == "model" else "random", None, "table")
                    with ThreadPoolExecutor(2) as pool:
                        Engine(tasks, pool, measure_locally=False, database=None,
                               options=TuneOptions(trials=args.trials, batch=args.batch),
                               progress=Progress(args.trials, verbose=0), measure_fn=lookup).run()
                    found[mode].append(min(r.time for r in tasks[0].records if r.ok))
                    print(f"  {name} seed {seed} {mode:6s}: best {found[mode][-1] * 1e3:.3f} ms; table "
                          f"{len(table)} programs; {load()}", flush=True)
            optimum = min(t for t in table.values() if isinstance(t, float))
            model_x = [t / optimum for t in found["model"]]
            random_x = [t / optimum for t in found["random"]]
            ratios = [r / m for m, r in zip(model_x, random_x)]
            row = {"kernel": name, "programs": len(table), "trials": args.trials, "seeds": args.seeds,
                   "model_x_optimum": model_x, "random_x_optimum": random_x, "ratios": ratios,
                   "mean_ratio": float(np.mean(ratios)), "load": load()}
            print(f"{name}, {args.trials} trials, seeds 0..{args.seeds - 1}, a table of {len(table)} programs: best "
                  "found / best in the table: model " + ", ".join(f"{x:.2f}" for x in model_x) + "; random "
                  + ", ".join(f"{x:.2f}" for x in random_x) + " -> random/model " + ", ".join(f"{x:.2f}" for x in ratios)
                  + f", mean {row['mean_ratio']:.2f}x; " + load(), flush=True)
            rows.append(row)
    finally:
        runner.close()
        if args.table_file:
            with open(args.table_file, "w") as f:
                json.dump(saved, f)
    return rows


def run_build_speed(args) -> dict:
    """Candidates prepared (replayed, lowered, featurized) and compiled per minute on a local pool."""
    from tdsl.tuner import space as space_mod
    from tdsl.tuner import worker
    from tdsl.tuner.pool import LocalPool

    func, hand, *_ = kernels()["gemm512"]()
    sk = space_mod.sketches(func, "cpu", _space(args.space, hand), args.seed)
    n = args.trials
    tasks = [{"func": func.script(), "trace": space_mod.trace_text(sk[k % len(sk)]), "compile": True,
              "decisions": {str(s): None for s in sk[k % len(sk)].decisions}, "seed": 1000 + k} for k in range(n)]
    with LocalPool() as pool:
        pool.submit(abs, 0).result()
        t0 = time.perf_counter()
        results = [f.result() for f in [pool.submit(worker.prepare, t) for t in tasks]]
        seconds = time.perf_counter() - t0
    built = [r for r in results if "build_s" in r]
    row = {"candidates": n, "built": len(built), "seconds": seconds, "per_minute": len(built) / seconds * 60,
           "mean_prepare_s": float(np.mean([r["prepare_s"] for r in results])),
           "mean_compile_s": float(np.mean([r["build_s"] for r in built])) if built else None, "load": load()}
    print(f"build speed: {len(built)}/{n} GEMM 512 candidates built in {seconds:.1f} s on {pool.workers} "
          f"workers = {row['per_minute']:.0f}/min (per candidate: {row['mean_prepare_s']:.2f} s in all, of which "
          f"compile {row['mean_compile_s'] or 0:.2f} s); {load()}")
    return row


FULL = ("gemm1024", "conv2d56", "softmax4096", "layernorm4096")


def run_full(args) -> list[dict]:
    """The issue's table: `trials` trials (10 minutes at most) per kernel; the tuned kernel, the
    hand schedule of bench/schedules.py and numpy timed in turns in this process."""
    out = []
    for name in args.only or FULL:
        func, hand, inputs, numpy_fn, hand_schedule = kernels()[name]()
        t0 = time.perf_counter()
        result = tdsl.tune(func, trials=args.trials, time_budget=600, space=_space(args.space, hand), seed=args.seed,
                           verbose=0)
        seconds = time.perf_counter() - t0
        tuned = tdsl.build(result.best.schedule)
        try:
            hand_kernel = tdsl.build(hand_schedule())
        except ValueError as exc:   # bench/schedules.py has no micro-kernel for this shape (conv2d28: 28 columns)
            print(f"  {name}: no hand schedule ({exc}); comparing with numpy only")
            hand_kernel = None
        out_buf = tuned(*inputs)
        args_ = (*inputs, out_buf)
        fns = [lambda k=tuned, a=args_: k(*a), numpy_fn] + ([lambda k=hand_kernel, a=args_: k(*a)] if hand_kernel else [])
        t_tuned, t_np, *rest = interleaved(fns, repeat=5, min_time=SAMPLE_S)
        t_hand = rest[0] if rest else float("nan")
        row = {"kernel": name, "trials": len(result.records), "tune_s": seconds,
               "failures": len(result.tasks[0].failures), "best_trial_s": result.best.record.time,
               "best_retimed_s": result.best.time,
               "tuned_s": t_tuned, "hand_s": t_hand, "numpy_s": t_np, "ratio_hand": t_hand / t_tuned,
               "ratio_numpy": t_np / t_tuned, "candidates_per_minute": result.stats["candidates_per_minute"],
               "load": load()}
        out.append(row)
        print(f"{name}: {row['trials']} trials in {seconds:.0f} s, {row['failures']} failed; best trial "
              f"{result.best.record.time * 1e3:.3f} ms, re-timed by the tuner {result.best.time * 1e3:.3f} ms; "
              f"here tuned {t_tuned * 1e3:.3f} ms, "
              f"hand {t_hand * 1e3:.3f} ms, numpy {t_np * 1e3:.3f} ms -> {row['ratio_hand']:.2f}x the hand schedule, "
              f"{row['ratio_numpy']:.2f}x numpy; {load()}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("gemm", "compare", "model-vs-random", "search-on-table", "build-speed", "full"))
    ap.add_argument("--trials", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--space", choices=("auto", "rules", "hand"), default="auto")
    ap.add_argument("--model", default="auto")
    ap.add_argument("--json", default=None)
    ap.add_argument("--seeds", type=int, default=3, help="model-vs-random: seeds 0..N-1")
    ap.add_argument("--batch", type=int, default=8, help="model-vs-random, search-on-table: trials per round")
    ap.add_argument("--table-file", help="search-on-table: keep the table of measured programs in this JSON file")
    ap.add_argument("--only", nargs="*", default=None,
                    help="compare / model-vs-random / full: kernels (gemm256, conv2d28, softmax4096, ...)")
    args = ap.parse_args()
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if os.environ.get(var):
            print(f"note: {var}={os.environ[var]} is set")
    if args.what == "gemm":
        args.trials = args.trials or 64
        out = run_gemm(args)
    elif args.what == "compare":
        args.trials = args.trials or 32
        out = run_compare(args)
    elif args.what == "model-vs-random":
        args.trials = args.trials or 32
        out = run_model_vs_random(args)
    elif args.what == "search-on-table":
        args.trials = args.trials or 32
        out = run_search_on_table(args)
    elif args.what == "build-speed":
        args.trials = args.trials or 16
        out = run_build_speed(args)
    else:
        args.trials = args.trials or 256
        out = run_full(args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
