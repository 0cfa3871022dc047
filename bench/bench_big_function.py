"""Build time of huge functions (issue 22): N small blocks in one function, and long expressions.

    python bench/bench_big_function.py                       # 1k, 2k, 4k, 10k blocks
    python bench/bench_big_function.py --blocks 1000,2000 --phases
    python bench/bench_big_function.py --exprs               # 3,000-term sum, 300 nested lets

Each size is built once, cold (a fresh cache directory), in a child process so that sizes do
not share caches; the table gives wall seconds of parse + build and the growth factor per
doubling of N (1.0 = linear, 2.0 = quadratic). `--phases` splits the time into the parser,
every lowering pass and the LLVM steps. The machine's load average is printed: on a shared
machine the absolute times are noisy, the growth factors less so.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

ROW = 16


def _pattern(n: int, pattern) -> list[tuple[str, int]]:
    return list(pattern) if pattern is not None else [("+*-"[k % 3], 1 + k % 5) for k in range(n)]


def blocks_program(n: int, pattern=None) -> str:
    """`n` small blocks, each a 16-element loop: blocks 0 .. n-2 write the rows of an
    intermediate C, each from the row before (so nothing is dead and the rows differ in their
    operation), the last block writes the output B from C's last row. `pattern`: per block
    (operator among + * -, scale in quarters); by default they cycle."""
    lines = [
        "@T.prim_func",
        f'def big(A: T.Buffer(({n}, {ROW}), "float32"), B: T.Buffer(({ROW},), "float32")):',
        f'    C = T.alloc_buffer(({max(n - 1, 1)}, {ROW}), "float32")',
    ]
    for k, (op, scale) in enumerate(_pattern(n, pattern)):
        src = "A[0, vi]" if k == 0 else f"C[{k - 1}, vi]"
        dst = "B[vi]" if k == n - 1 else f"C[{k}, vi]"
        lines += [
            f"    for i in range({ROW}):",
            f'        with T.block("b{k}"):',
            f"            vi = T.axis.spatial({ROW}, i)",
            f"            {dst} = {src} {op} A[{k}, vi] * T.float32({scale / 4})",
        ]
    return "\n".join(lines) + "\n"


def blocks_reference(n: int, a, pattern=None):
    """What blocks_program(n, pattern) computes, with numpy (float32 throughout)."""
    import numpy as np

    row = a[0]
    for k, (op, scale) in enumerate(_pattern(n, pattern)):
        term = a[k] * np.float32(scale / 4)
        row = row + term if op == "+" else row * term if op == "*" else row - term
    return row


def sum_program(n: int) -> str:
    terms = " + ".join(f"A[{k % 4}]" for k in range(n))
    return f'''
@T.prim_func
def long_sum(A: T.Buffer((4,), "float32"), B: T.Buffer((1,), "float32")):
    with T.block("B"):
        B[0] = {terms}
'''


def lets_program(n: int) -> str:
    lets = "\n".join(f"        x{k} = x{k - 1} + T.float32(1)" for k in range(1, n))
    return f'''
@T.prim_func
def many_lets(A: T.Buffer((4,), "float32"), B: T.Buffer((1,), "float32")):
    with T.block("B"):
        x0 = A[0]
{lets}
        B[0] = x{n - 1}
'''


def measure_child(kind: str, n: int, phases: bool) -> dict:
    """In this process: parse and build the program, timing each step (wall seconds)."""
    import numpy as np

    import tdsl
    from tdsl.backends.llvm import compile as llvm_compile
    from tdsl.backends.llvm import entry, jit
    from tdsl.backends.llvm.bounds import check_static_bounds
    from tdsl.deep import run_deep
    from tdsl.lower import lower

    text = {"blocks": blocks_program, "sum": sum_program, "lets": lets_program}[kind](n)
    out: dict = {"kind": kind, "n": n}
    t0 = time.perf_counter()
    func = tdsl.parse(text)
    out["parse"] = time.perf_counter() - t0
    if not phases:
        t0 = time.perf_counter()
        kernel = tdsl.build(func)
        out["build"] = time.perf_counter() - t0
        out["llvm_functions"] = kernel.source.count("\ndefine ")
        out["notes"] = list(kernel.notes)
    else:
        t0 = time.perf_counter()
        run_deep(func.script)
        out["print"] = time.perf_counter() - t0
        marks: list[tuple[str, float]] = []
        t0 = time.perf_counter()
        lowered = run_deep(lambda: lower(func, target="cpu", trace=lambda name, f: marks.append((name, time.perf_counter()))))
        prev = t0
        for name, t in marks:
            key = f"lower:{name}"
            out[key] = out.get(key, 0.0) + t - prev
            prev = t
        steps = []
        t = time.perf_counter()
        run_deep(lambda: check_static_bounds(lowered))
        steps.append(("bounds", time.perf_counter()))
        pipeline = llvm_compile.pipeline_for(lowered.body)
        host = jit.host_info()
        result = run_deep(lambda: entry.codegen(lowered, f"tdsl_big_{kind}_{n}", api=func, triple=host.triple,
                                                datalayout=jit.data_layout(), wrappers_optnone=pipeline == jit.SIMPLIFY))
        if result.parts and pipeline == jit.O3:
            pipeline = jit.O3_NO_UNROLL   # as compile._compile
        steps.append(("codegen", time.perf_counter()))
        mod = jit.parse_and_verify(result.ir, kind)
        steps.append(("llvm parse+verify", time.perf_counter()))
        jit.optimize(mod, pipeline)
        steps.append((f"llvm optimize ({pipeline})", time.perf_counter()))
        jit.emit_object(mod)
        steps.append(("llvm emit", time.perf_counter()))
        for name, t1 in steps:
            out[name] = t1 - t
            t = t1
        out["llvm_functions"] = result.ir.count("\ndefine ")
        kernel = tdsl.build(func)
    if kind == "blocks":
        a = ((np.arange(n * ROW).reshape(n, ROW) % 7 + 4) / 6).astype("float32")
        got = kernel(a)
        out["correct"] = bool(np.allclose(got, blocks_reference(n, a), rtol=1e-5, atol=1e-6, equal_nan=True))
    else:
        got = kernel(np.ones(4, "float32"))
        out["correct"] = bool(got[0] == n)
    return out


def run_child(kind: str, n: int, phases: bool, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TDSL_CACHE_DIR=cache, PYTHONPATH=ROOT)
        cmd = [sys.executable, __file__, "--child", kind, str(n)] + (["--phases"] if phases else [])
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"kind": kind, "n": n, "timeout": timeout}
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"kind": kind, "n": n, "error": proc.stderr[-2000:]}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process"] = wall
    return result


def _print_row(r: dict, prev: tuple[int, float] | None, phases: bool) -> tuple[int, float] | None:
    """One table line (and with `phases` the steps); returns (n, seconds) for the next growth."""
    if "timeout" in r or "error" in r:
        print(f"{r['kind']:>6} {r['n']:>6}: " + (f"timed out after {r['timeout']:.0f} s" if "timeout" in r else r["error"]))
        return None
    steps = ("lower:", "bounds", "codegen", "llvm ")
    total = r["parse"] + (r["build"] if "build" in r else sum(v for k, v in r.items() if k.startswith(steps)))
    growth = ""
    if prev is not None and prev[0] != r["n"]:
        growth = f", growth exponent {math.log(total / prev[1]) / math.log(r['n'] / prev[0]):.2f}"
    print(f"{r['kind']:>6} {r['n']:>6}: parse+build {total:7.2f} s (parse {r['parse']:.2f} s), "
          f"{r['llvm_functions']} LLVM functions, correct {r['correct']}{growth}", flush=True)
    if phases:
        for k, v in r.items():
            if isinstance(v, float) and k not in ("parse", "process") and v >= 0.005:
                print(f"        {k:<32} {v:8.3f} s")
    for note in r.get("notes", []):
        print(f"        note: {note}")
    return r["n"], total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", default="1000,2000,4000,10000", help="block counts, comma-separated")
    parser.add_argument("--exprs", action="store_true", help="instead: a long sum and nested lets")
    parser.add_argument("--terms", default="750,1500,3000", help="with --exprs: sum lengths")
    parser.add_argument("--lets", default="75,150,300", help="with --exprs: let counts")
    parser.add_argument("--phases", action="store_true", help="time parse, print, each lowering pass, LLVM")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per size")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_child(args.child[0], int(args.child[1]), args.phases)))
        return
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}, "
          f"{os.cpu_count()} CPUs", flush=True)
    jobs = ([("sum", int(n)) for n in args.terms.split(",")] + [("lets", int(n)) for n in args.lets.split(",")]
            if args.exprs else [("blocks", int(n)) for n in args.blocks.split(",")])
    prev: tuple[int, float] | None = None
    last_kind = None
    for kind, n in jobs:
        if kind != last_kind:
            prev, last_kind = None, kind
        prev = _print_row(run_child(kind, n, args.phases, args.timeout), prev, args.phases)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
