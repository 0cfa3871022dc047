"""auto_schedule against numpy and against the hand schedules of bench/schedules.py, one table.

    python bench/bench_auto.py                 # every kernel (a few minutes on 2 cores)
    python bench/bench_auto.py --quick         # smaller sizes, fewer repeats
    python bench/bench_auto.py --only gemm     # a subset (repeatable): gemm, bmm, conv2d, depthwise,
                                               # softmax, layernorm, chain, rowsum, blur, attention
    python bench/bench_auto.py --only blur --only attention --tune 32   # also tune(trials=32)
    python bench/bench_auto.py --repeat 15     # more rounds of turns (a loaded machine)
    python bench/bench_auto.py --json out.json # where the results go (default bench/results_auto.json)

Columns: auto (tdsl.auto_schedule, no measurement), hand (bench/schedules.py, where there is
one), numpy (as is), and the ratios auto / numpy and auto / hand as speed (time of the other
divided by auto's time), all measured in one run, taking turns (`timing.interleaved`). Every
kernel is checked against numpy before it is timed. Goals (issue 17): >= 0.6x hand everywhere,
>= 1.0x numpy on the fused row kernels (softmax, layernorm, chain, rowsum) and conv2d.

With `--tune N`, the kernels without a hand schedule (blur, attention, bmm, depthwise, chain)
are also tuned (`tdsl.tune(func, trials=N)`, the same design space auto_schedule picks from)
and the best is timed in the same turns: the column "auto vs tune" is tune's time over auto's
(goal for the clamped 3x3 blur and the attention chain: >= 0.9x tune(32), >= 1x numpy). The
attention row also times PyTorch's scaled_dot_product_attention when torch is installed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import numpy_ref
import schedules
from timing import interleaved

import tdsl

KERNELS = ("gemm", "bmm", "conv2d", "depthwise", "softmax", "layernorm", "chain", "rowsum", "blur", "attention")
TUNE_GOAL = ("clamped 3x3 blur", "attention")
ROW_KERNELS = ("row softmax", "layernorm", "elementwise chain", "row sum (symbolic n)")

BMM = '''
@T.prim_func
def bmm(A: T.Buffer(({b}, {n}, {n}), "float32"), B: T.Buffer(({b}, {n}, {n}), "float32"),
        C: T.Buffer(({b}, {n}, {n}), "float32")):
    for b, i, j, k in T.grid({b}, {n}, {n}, {n}):
        with T.block("C"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            with T.init():
                C[vb, vi, vj] = T.float32(0)
            C[vb, vi, vj] = C[vb, vi, vj] + A[vb, vi, vk] * B[vb, vk, vj]
'''

DEPTHWISE = '''
@T.prim_func
def depthwise(X: T.Buffer(({c}, {h} + 2, {w} + 2), "float32"), W: T.Buffer(({c}, 3, 3), "float32"),
              Y: T.Buffer(({c}, {h}, {w}), "float32")):
    for ch, y, x, r, s in T.grid({c}, {h}, {w}, 3, 3):
        with T.block("Y"):
            vc, vy, vx, vr, vs = T.axis.remap("SSSRR", [ch, y, x, r, s])
            with T.init():
                Y[vc, vy, vx] = T.float32(0)
            Y[vc, vy, vx] = Y[vc, vy, vx] + X[vc, vy + vr, vx + vs] * W[vc, vr, vs]
'''

CHAIN = '''
@T.prim_func
def chain(A: T.Buffer(({r}, {c}), "float32"), B: T.Buffer(({r}, {c}), "float32"), D: T.Buffer(({r}, {c}), "float32")):
    T1 = T.alloc_buffer(({r}, {c}), "float32")
    T2 = T.alloc_buffer(({r}, {c}), "float32")
    for i, j in T.grid({r}, {c}):
        with T.block("mul"):
            vi, vj = T.axis.remap("SS", [i, j])
            T1[vi, vj] = A[vi, vj] * B[vi, vj]
    for i, j in T.grid({r}, {c}):
        with T.block("add"):
            vi, vj = T.axis.remap("SS", [i, j])
            T2[vi, vj] = T1[vi, vj] + T.float32(1)
    for i, j in T.grid({r}, {c}):
        with T.block("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = T.max(T2[vi, vj], T.float32(0))
'''

BLUR = '''
@T.prim_func
def blur(A: T.Buffer(({h}, {w}), "float32"), B: T.Buffer(({h}, {w}), "float32")):
    for i, j, di, dj in T.grid({h}, {w}, 3, 3):
        with T.block("B"):
            vi, vj, vdi, vdj = T.axis.remap("SSRR", [i, j, di, dj])
            with T.init():
                B[vi, vj] = T.float32(0)
            B[vi, vj] = B[vi, vj] + A[T.min(T.max(vi + vdi - 1, 0), {h} - 1),
                                      T.min(T.max(vj + vdj - 1, 0), {w} - 1)] * T.float32(1.0 / 9.0)
'''

ATTENTION = '''
@T.prim_func
def attention(Q: T.Buffer(({b}, {s}, {d}), "float32"), K: T.Buffer(({b}, {s}, {d}), "float32"),
              V: T.Buffer(({b}, {s}, {d}), "float32"), O: T.Buffer(({b}, {s}, {d}), "float32")):
    S = T.alloc_buffer(({b}, {s}, {s}), "float32")
    M = T.alloc_buffer(({b}, {s}), "float32")
    E = T.alloc_buffer(({b}, {s}, {s}), "float32")
    L = T.alloc_buffer(({b}, {s}), "float32")
    P = T.alloc_buffer(({b}, {s}, {s}), "float32")
    for b, i, j, k in T.grid({b}, {s}, {s}, {d}):
        with T.block("qk"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            with T.init():
                S[vb, vi, vj] = T.float32(0)
            S[vb, vi, vj] = S[vb, vi, vj] + Q[vb, vi, vk] * K[vb, vj, vk]
    for b, i, j in T.grid({b}, {s}, {s}):
        with T.block("max"):
            vb, vi, vj = T.axis.remap("SSR", [b, i, j])
            with T.init():
                M[vb, vi] = T.min_value("float32")
            M[vb, vi] = T.max(M[vb, vi], S[vb, vi, vj])
    for b, i, j in T.grid({b}, {s}, {s}):
        with T.block("exp"):
            vb, vi, vj = T.axis.remap("SSS", [b, i, j])
            E[vb, vi, vj] = T.exp((S[vb, vi, vj] - M[vb, vi]) * T.float32({scale}))
    for b, i, j in T.grid({b}, {s}, {s}):
        with T.block("sum"):
            vb, vi, vj = T.axis.remap("SSR", [b, i, j])
            with T.init():
                L[vb, vi] = T.float32(0)
            L[vb, vi] = L[vb, vi] + E[vb, vi, vj]
    for b, i, j in T.grid({b}, {s}, {s}):
        with T.block("norm"):
            vb, vi, vj = T.axis.remap("SSS", [b, i, j])
            P[vb, vi, vj] = E[vb, vi, vj] / L[vb, vi]
    for b, i, j, k in T.grid({b}, {s}, {d}, {s}):
        with T.block("pv"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            with T.init():
                O[vb, vi, vj] = T.float32(0)
            O[vb, vi, vj] = O[vb, vi, vj] + P[vb, vi, vk] * V[vb, vk, vj]
'''


def blur_func(h: int, w: int) -> tdsl.PrimFunc:
    """A 3x3 box blur whose borders repeat the edge pixels (clamped indices), as a user writes it."""
    return tdsl.parse(BLUR.format(h=h, w=w))


def blur_ref(a: np.ndarray) -> np.ndarray:
    h, w = a.shape
    p = np.pad(a, 1, mode="edge")
    out = np.zeros_like(a)
    for r in range(3):
        for c in range(3):
            out += p[r:r + h, c:c + w]
    return out * a.dtype.type(1 / 9)


def attention_func(b: int, s: int, d: int) -> tdsl.PrimFunc:
    """softmax(Q K^T / sqrt(d)) V per batch, one block per stage (two GEMMs and a row softmax)."""
    return tdsl.parse(ATTENTION.format(b=b, s=s, d=d, scale=float(np.float32(1 / np.sqrt(d)))))


def attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = np.matmul(q, k.transpose(0, 2, 1))
    s = np.exp((s - s.max(-1, keepdims=True)) * q.dtype.type(1 / np.sqrt(q.shape[-1])))
    s /= s.sum(-1, keepdims=True)
    return np.matmul(s, v)


ROWSUM = '''
@T.prim_func
def rowsum(A: T.Buffer(("n", {c}), "float32"), B: T.Buffer(("n",), "float32")):
    for i, j in T.grid(n, {c}):
        with T.block("B"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vj]
'''


@dataclass
class Row:
    kernel: str
    size: str
    auto_s: float
    numpy_s: float
    hand_s: float | None
    auto_schedule_s: float   # time auto_schedule took
    steps: int
    goal: str = ""
    met: bool | None = None
    tune_s: float | None = None     # the best of tune(trials=N), re-timed in the same turns
    torch_s: float | None = None    # PyTorch's own kernel (attention: scaled_dot_product_attention)
    tune_same: bool | None = None   # tune's best is auto_schedule's own schedule (then any gap is noise)

    @property
    def vs_numpy(self) -> float:
        return self.numpy_s / self.auto_s

    @property
    def vs_hand(self) -> float | None:
        return self.hand_s / self.auto_s if self.hand_s else None

    @property
    def vs_tune(self) -> float | None:
        return self.tune_s / self.auto_s if self.tune_s else None


def _check(got, want, what, rtol=1e-3):
    scale = float(np.abs(want).max()) or 1.0
    err = float(np.abs(np.asarray(got, np.float64) - want).max()) / scale
    if err > rtol:
        raise AssertionError(f"{what}: relative error {err:.2e} against numpy")


TUNE_TRIALS = 0   # --tune N: also tune the kernels without a hand schedule


def measure(name: str, size: str, func, args: list, outputs: list, ref, want, hand=None, repeat: int = 5,
            goal: str = "", torch_fn=None) -> Row:
    """auto_schedule `func`, check it and the hand schedule (or, with --tune, tune's best) against
    `want`, time them all in turns (and `torch_fn`, PyTorch's own kernel, when given)."""
    t = time.perf_counter()
    sch = tdsl.auto_schedule(func, "cpu")
    took = time.perf_counter() - t
    kernel = tdsl.build(sch)
    kernel(*args, *outputs)
    _check(outputs[-1], want, f"{name} (auto)")
    fns = [lambda: kernel(*args, *outputs), ref]
    extra = {}
    extra_same = None
    if hand is not None:
        hand_kernel = tdsl.build(hand)
        hand_out = [np.empty_like(o) for o in outputs]
        hand_kernel(*args, *hand_out)
        _check(hand_out[-1], want, f"{name} (hand)")
        extra["hand"] = len(fns)
        fns.append(lambda: hand_kernel(*args, *hand_out))
    elif TUNE_TRIALS:
        best = tdsl.tune(func, "cpu", trials=TUNE_TRIALS, verbose=0).best
        extra_same = tdsl.structural_equal(best.schedule.func, sch.func)
        tuned = best.build()
        tune_out = [np.empty_like(o) for o in outputs]
        tuned(*args, *tune_out)
        _check(tune_out[-1], want, f"{name} (tune {TUNE_TRIALS})")
        extra["tune"] = len(fns)
        fns.append(lambda: tuned(*args, *tune_out))
    if torch_fn is not None:
        extra["torch"] = len(fns)
        fns.append(torch_fn)
    times = interleaved(fns, repeat)
    pick = {k: times[v] for k, v in extra.items()}
    return Row(name, size, times[0], times[1], pick.get("hand"), took, len(sch.trace), goal,
               tune_s=pick.get("tune"), torch_s=pick.get("torch"),
               tune_same=extra_same if "tune" in pick else None)


def bench_gemm(n: int, repeat: int) -> Row:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    c, ref = np.empty((n, n), np.float32), np.empty((n, n), np.float32)
    return measure("fp32 GEMM", f"{n}^3", schedules.gemm_func(n), [a, b], [c], lambda: np.matmul(a, b, out=ref),
                   a.astype(np.float64) @ b, schedules.gemm_schedule(n), repeat, ">= 0.6x hand")


def bench_bmm(batch: int, n: int, repeat: int) -> Row:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((batch, n, n), dtype=np.float32) for _ in range(2))
    c, ref = np.empty((batch, n, n), np.float32), np.empty((batch, n, n), np.float32)
    return measure("batched matmul", f"{batch}x{n}^3", tdsl.parse(BMM.format(b=batch, n=n)), [a, b], [c],
                   lambda: np.matmul(a, b, out=ref), a.astype(np.float64) @ b, None, repeat, "(no hand schedule)")


def bench_conv2d(size: int, repeat: int) -> Row:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 64, size, size), dtype=np.float32)
    w = rng.standard_normal((64, 64, 3, 3), dtype=np.float32)
    y = np.empty((1, 64, size, size), np.float32)
    return measure("conv2d 3x3 pad 1", f"1x64x{size}x{size}", schedules.conv2d_func(1, 64, size, size, 64), [x, w],
                   [y], lambda: numpy_ref.conv2d_im2col(x, w),
                   numpy_ref.conv2d_im2col(x.astype(np.float64), w.astype(np.float64)),
                   schedules.conv2d_schedule(1, 64, size, size, 64), repeat, ">= 0.6x hand, >= 1x numpy")


def bench_depthwise(c: int, size: int, repeat: int) -> Row:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((c, size + 2, size + 2), dtype=np.float32)
    w = rng.standard_normal((c, 3, 3), dtype=np.float32)
    y = np.empty((c, size, size), np.float32)

    def ref(x=x, w=w):
        out = np.zeros((c, size, size), x.dtype)
        for r in range(3):
            for s in range(3):
                out += x[:, r:r + size, s:s + size] * w[:, r, s][:, None, None]
        return out

    return measure("depthwise conv 3x3", f"{c}x{size}x{size}", tdsl.parse(DEPTHWISE.format(c=c, h=size, w=size)),
                   [x, w], [y], ref, ref(x.astype(np.float64), w.astype(np.float64)), None, repeat,
                   "(no hand schedule)")


def bench_softmax(rows: int, cols: int, repeat: int) -> Row:
    x = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    out = np.empty_like(x)
    return measure("row softmax", f"{rows}x{cols}", schedules.softmax_func(rows, cols), [x], [out],
                   lambda: numpy_ref.softmax(x), numpy_ref.softmax(x.astype(np.float64)),
                   schedules.softmax_schedule(rows, cols), repeat, ">= 0.6x hand, >= 1x numpy")


def bench_layernorm(rows: int, cols: int, repeat: int) -> Row:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    g, b = (rng.standard_normal(cols, dtype=np.float32) for _ in range(2))
    out = np.empty_like(x)
    return measure("layernorm", f"{rows}x{cols}", schedules.layernorm_func(rows, cols), [x, g, b], [out],
                   lambda: numpy_ref.layernorm(x, g, b),
                   numpy_ref.layernorm(x.astype(np.float64), g.astype(np.float64), b.astype(np.float64)),
                   schedules.layernorm_schedule(rows, cols), repeat, ">= 0.6x hand, >= 1x numpy")


def bench_chain(rows: int, cols: int, repeat: int) -> Row:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((rows, cols), dtype=np.float32) for _ in range(2))
    out = np.empty_like(a)
    tmp = np.empty_like(a)

    def ref():
        np.multiply(a, b, out=tmp)
        np.add(tmp, 1, out=tmp)
        return np.maximum(tmp, 0, out=tmp)

    want = np.maximum(a.astype(np.float64) * b + 1, 0)
    return measure("elementwise chain", f"{rows}x{cols}", tdsl.parse(CHAIN.format(r=rows, c=cols)), [a, b], [out],
                   ref, want, None, repeat, ">= 1x numpy")


def bench_blur(size: int, repeat: int) -> Row:
    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    out = np.empty_like(a)
    return measure("clamped 3x3 blur", f"{size}x{size}", blur_func(size, size), [a], [out], lambda: blur_ref(a),
                   blur_ref(a.astype(np.float64)), None, repeat, ">= 0.9x tune(32), >= 1x numpy")


def bench_attention(b: int, s: int, d: int, repeat: int) -> Row:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((b, s, d), dtype=np.float32) for _ in range(3))
    out = np.empty_like(q)
    torch_fn = None
    try:
        import torch

        tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))

        def torch_fn():
            with torch.no_grad():
                return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)
    except ImportError:
        pass
    want = attention_ref(*(x.astype(np.float64) for x in (q, k, v)))
    return measure("attention", f"B={b} S={s} D={d}", attention_func(b, s, d), [q, k, v], [out],
                   lambda: attention_ref(q, k, v), want, None, repeat, ">= 0.9x tune(32), >= 1x numpy",
                   torch_fn=torch_fn)


def bench_rowsum(rows: int, cols: int, repeat: int) -> Row:
    a = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    out = np.empty(rows, np.float32)
    ref_out = np.empty(rows, np.float32)
    return measure("row sum (symbolic n)", f"n={rows} x {cols}", tdsl.parse(ROWSUM.format(c=cols)), [a], [out],
                   lambda: np.sum(a, axis=1, out=ref_out), a.astype(np.float64).sum(axis=1), None, repeat,
                   ">= 1x numpy")


def judge(row: Row) -> None:
    if row.kernel in TUNE_GOAL:
        row.met = row.vs_numpy >= 1.0 and (row.vs_tune is None or row.vs_tune >= 0.9 or bool(row.tune_same))
        return
    ok = True
    if row.vs_hand is not None:
        ok = ok and row.vs_hand >= 0.6
    if row.kernel in ROW_KERNELS or row.kernel.startswith("conv2d"):
        ok = ok and row.vs_numpy >= 1.0
    row.met = ok if (row.vs_hand is not None or row.kernel in ROW_KERNELS or row.kernel.startswith("conv2d")) \
        else None


def markdown(rows: list[Row], machine: dict) -> str:
    lines = ["| kernel | size | auto | numpy | hand | tune | torch | auto vs numpy | auto vs hand | auto vs tune "
             "| auto_schedule | goal | met |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def ms(v):
        return f"{v * 1e3:.3f} ms" if v else "-"

    def ratio(v):
        return f"{v:.2f}x" if v else "-"

    for r in rows:
        met = "" if r.met is None else ("yes" if r.met else "NO")
        same = " (auto's schedule)" if r.tune_same else ""
        lines.append(f"| {r.kernel} | {r.size} | {ms(r.auto_s)} | {ms(r.numpy_s)} | {ms(r.hand_s)} | {ms(r.tune_s)}{same} | "
                     f"{ms(r.torch_s)} | {r.vs_numpy:.2f}x | {ratio(r.vs_hand)} | {ratio(r.vs_tune)} | "
                     f"{r.auto_schedule_s:.2f} s, {r.steps} steps | {r.goal} | {met} |")
    lines.append("")
    lines.append(f"{machine['cpu']}, {machine['cores']} cores; load average {machine['load']:.2f} -> "
                 f"{machine['load_after']:.2f}; OpenBLAS env {machine['blas_env']}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", action="append", choices=KERNELS)
    parser.add_argument("--json", default=os.path.join(HERE, "results_auto.json"))
    parser.add_argument("--repeat", type=int, default=0, metavar="R",
                        help="rounds of turns (default 5, 3 with --quick); more on a loaded machine")
    parser.add_argument("--tune", type=int, default=0, metavar="N",
                        help="also tune the kernels without a hand schedule (trials=N) and time the best")
    args = parser.parse_args(argv)
    global TUNE_TRIALS
    TUNE_TRIALS = args.tune
    only = set(args.only or KERNELS)
    repeat = args.repeat or (3 if args.quick else 5)
    rows_n = 1024 if args.quick else 4096
    from tdsl.backends.llvm import jit

    vector = [f[1:] for f in jit.host_info().features.split(",")
              if f.startswith("+") and f[1:] in ("avx2", "fma", "avx512f", "avx512vnni", "avx512bf16", "amx-tile")]
    machine = {"cpu": f"{jit.host_info().cpu} ({', '.join(vector)})", "cores": len(os.sched_getaffinity(0)),
               "load": os.getloadavg()[0],
               "blas_env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}}
    rows: list[Row] = []
    if "gemm" in only:
        rows += [bench_gemm(n, repeat) for n in (512, 1024)]
    if "bmm" in only:
        rows.append(bench_bmm(8 if args.quick else 16, 256, repeat))
    if "conv2d" in only:
        rows.append(bench_conv2d(56, repeat))
    if "depthwise" in only:
        rows.append(bench_depthwise(64, 56, repeat))
    if "softmax" in only:
        rows.append(bench_softmax(rows_n, 1024, repeat))
    if "layernorm" in only:
        rows.append(bench_layernorm(rows_n, 1024, repeat))
    if "chain" in only:
        rows.append(bench_chain(rows_n, 1024, repeat))
    if "rowsum" in only:
        rows.append(bench_rowsum(rows_n, 1024, repeat))
    if "blur" in only:
        rows.append(bench_blur(1024, repeat))
    if "attention" in only:
        rows.append(bench_attention(8, 128, 64, repeat))
    for r in rows:
        judge(r)
    machine["load_after"] = os.getloadavg()[0]
    text = markdown(rows, machine)
    print(text)
    with open(args.json, "w") as fh:
        json.dump({"machine": machine, "rows": [dict(asdict(r), vs_numpy=r.vs_numpy, vs_hand=r.vs_hand,
                                                      vs_tune=r.vs_tune) for r in rows]},
                  fh, indent=1)
    return rows


if __name__ == "__main__":
    main()
