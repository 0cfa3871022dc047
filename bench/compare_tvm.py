"""tdsl next to Apache TVM on the same kernels, when apache-tvm is installed (never a dependency).

    python bench/compare_tvm.py                 # from the repository root
    python bench/compare_tvm.py --threads 2     # both (and numpy's BLAS) on 2 threads
    python bench/compare_tvm.py --quick         # smaller sizes, fewer repeats

Kernels: fp32 GEMM 1024^3, row softmax 4096x1024, conv2d 1x64x56x56 with 64 3x3 filters, pad 1.
tdsl runs the schedules of bench/schedules.py; TVM runs hand schedules written here with its
TensorIR schedule API (tvm.tir.Schedule; tvm.s_tir.Schedule in recent releases such as 0.27):
register tiles in a "local" cache_write, vectorized inner loops, packing of B, parallel outer
loops -- what a user writes by hand, not a MetaSchedule search. Both results are checked
against numpy before anything is timed. Times are the minimum over interleaved repeats (tdsl,
TVM, numpy in turn); with one thread (the default) they are the calling thread's CPU time
(time.thread_time), which other processes on a shared machine inflate less than wall time
(--wall to use wall time anyway).

Without TVM the script prints one line saying how to install it and exits 0: install it in a
throwaway environment, e.g. python3 -m venv /tmp/venv_tvm && /tmp/venv_tvm/bin/pip install
apache-tvm llvmlite rich threadpoolctl, then /tmp/venv_tvm/bin/python bench/compare_tvm.py.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench/: the runner's timing
from timing import interleaved

NOT_INSTALLED = ("apache-tvm is not installed, nothing to compare: pip install apache-tvm in a separate "
                 "virtual environment (tdsl does not depend on it), then run python bench/compare_tvm.py")


@dataclass
class Case:
    """One kernel: how to run it in tdsl, in TVM and in numpy, and its work per call."""

    name: str
    size: str
    tdsl: Callable[[], object]
    tvm: Callable[[], object]
    numpy: Callable[[], object]
    work: float  # flops, or bytes read + written for softmax
    unit: str


# -- checking ------------------------------------------------------------------------------

def check(got, want, what: str, rtol: float = 1e-3) -> None:
    """A fast wrong kernel is not a result: compare with numpy before timing."""
    import numpy as np

    scale = float(np.abs(want).max()) or 1.0
    err = float(np.abs(np.asarray(got, dtype=np.float64) - want).max()) / scale
    if err > rtol:
        raise AssertionError(f"{what}: relative error {err:.2e} against numpy")


# -- TVM schedules -------------------------------------------------------------------------

class TVM:
    """The few TVM entry points used here, across its API renames (tir.Schedule -> s_tir.Schedule,
    get_block -> get_sblock, tvm.build -> tvm.compile, tvm.nd.array -> tvm.runtime.tensor, string
    -> dict targets)."""

    def __init__(self, tvm, threads: int):
        self.tvm = tvm
        self.te = tvm.te
        self.schedule_cls = getattr(getattr(tvm, "s_tir", None), "Schedule", None) or tvm.tir.Schedule
        mcpu = _host_cpu()
        try:
            self.target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": threads})
        except Exception:  # noqa: BLE001 - TVM before dict targets takes the string form
            self.target = tvm.target.Target(f"llvm -mcpu={mcpu} -num-cores={threads}")

    def schedule(self, tensors):
        return self.schedule_cls(self.te.create_prim_func(tensors))

    @staticmethod
    def block(sch, name: str):
        return sch.get_sblock(name) if hasattr(sch, "get_sblock") else sch.get_block(name)

    def build(self, sch):
        build = getattr(self.tvm, "compile", None) or self.tvm.build
        return build(sch.mod, target=self.target)

    def array(self, value):
        runtime = self.tvm.runtime
        return runtime.tensor(value) if hasattr(runtime, "tensor") else self.tvm.nd.array(value)


def _host_cpu() -> str:
    """LLVM's name for this CPU (llvmlite is a tdsl dependency, so it is here)."""
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name()


def tvm_gemm(t: TVM, n: int, mr: int = 4, nr: int = 16):
    """C = A @ B: B packed into NR-wide panels, MR x NR tiles of C accumulated in a local
    (register) buffer over all of k, rows of tiles in parallel."""
    te = t.te
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    packed = te.compute((n // nr, n, nr), lambda x, y, z: b[y, x * nr + z], name="packedB")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * packed[j // nr, k, j % nr], axis=k), name="C")
    sch = t.schedule([a, b, c])
    block = t.block(sch, "C")
    store = sch.cache_write(block, 0, "local")
    i, j, kk = sch.get_loops(block)
    io, ii = sch.split(i, factors=[None, mr])
    jo, ji = sch.split(j, factors=[None, nr])
    sch.reorder(io, jo, kk, ii, ji)
    sch.reverse_compute_at(store, jo)
    sch.parallel(io)  # before decompose_reduction: TVM parallelizes over whole reduction blocks only
    sch.unroll(ii)
    sch.vectorize(ji)
    sch.vectorize(sch.get_loops(store)[-1])
    init = sch.decompose_reduction(block, kk)
    sch.vectorize(sch.get_loops(init)[-1])
    x, _, z = sch.get_loops(t.block(sch, "packedB"))
    sch.parallel(x)
    sch.vectorize(z)
    return t.build(sch)


def tvm_softmax(t: TVM, rows: int, cols: int, lanes: int = 8):
    """Row softmax, one row per parallel iteration: max and sum as `lanes`-wide partial
    reductions (rfactor), exp as TVM's vectorizable fast_exp."""
    te, topi = t.te, t.tvm.topi
    a = te.placeholder((rows, cols), name="A")
    k1 = te.reduce_axis((0, cols), name="k1")
    mx = te.compute((rows,), lambda i: te.max(a[i, k1], axis=k1), name="maxelem")
    shifted = te.compute((rows, cols), lambda i, j: a[i, j] - mx[i], name="shifted")
    ex = topi.fast_exp(shifted)
    k2 = te.reduce_axis((0, cols), name="k2")
    total = te.compute((rows,), lambda i: te.sum(ex[i, k2], axis=k2), name="expsum")
    out = te.compute((rows, cols), lambda i, j: ex[i, j] / total[i], name="norm")
    sch = t.schedule([a, out])
    sch.compute_inline(t.block(sch, "shifted"))
    partials = []
    for name in ("expsum", "maxelem"):  # rfactor while each reduction still has its own loops
        _, ki = sch.split(sch.get_loops(t.block(sch, name))[-1], factors=[None, lanes])
        partials.append(sch.rfactor(ki, 0))
    i, j = sch.get_loops(t.block(sch, "norm"))
    sch.parallel(i)
    sch.vectorize(sch.split(j, factors=[None, lanes])[1])
    exp_block = t.block(sch, ex.op.name)
    for block in (t.block(sch, "expsum"), partials[0], exp_block, t.block(sch, "maxelem"), partials[1]):
        sch.compute_at(block, i)
    sch.vectorize(sch.split(sch.get_loops(exp_block)[-1], factors=[None, lanes])[1])
    for partial in partials:  # compute_at made the loops (lane, step): lanes go innermost
        lane, step = sch.get_loops(partial)[-2:]
        sch.reorder(step, lane)
        sch.vectorize(lane)
    return t.build(sch)


def tvm_conv2d(t: TVM, n: int, c: int, h: int, w: int, k: int, kr: int = 8, xr: int = 8):
    """3x3 conv, pad 1, NCHW: a padded copy, then KR filters x XR columns of one output row
    accumulated in a local (register) buffer over channels and taps, rows in parallel."""
    te = t.te
    x = te.placeholder((n, c, h, w), name="X")
    wt = te.placeholder((k, c, 3, 3), name="W")
    pad = te.compute((n, c, h + 2, w + 2), lambda b, ci, yy, xx: te.if_then_else(
        te.all(yy >= 1, yy <= h, xx >= 1, xx <= w), x[b, ci, yy - 1, xx - 1], 0.0), name="pad")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    y = te.compute((n, k, h, w), lambda b, ko, yy, xx: te.sum(
        pad[b, rc, yy + ry, xx + rx] * wt[ko, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    sch = t.schedule([x, wt, y])
    conv = t.block(sch, "conv")
    store = sch.cache_write(conv, 0, "local")
    b, ko, yy, xx, kc, kr_, ks = sch.get_loops(conv)
    k0, k1 = sch.split(ko, factors=[None, kr])
    x0, x1 = sch.split(xx, factors=[None, xr])
    sch.reorder(b, k0, yy, x0, kc, kr_, ks, k1, x1)
    sch.reverse_compute_at(store, x0)
    sch.parallel(sch.fuse(b, k0, yy))
    sch.unroll(k1)
    sch.vectorize(x1)
    sch.vectorize(sch.get_loops(store)[-1])
    init = sch.decompose_reduction(conv, kc)
    sch.vectorize(sch.get_loops(init)[-1])
    pb, pc, _, _ = sch.get_loops(t.block(sch, "pad"))
    sch.parallel(sch.fuse(pb, pc))
    return t.build(sch)


# -- the cases -----------------------------------------------------------------------------

def cases(t: TVM, quick: bool) -> list[Case]:
    import numpy as np

    import tdsl
    from bench import numpy_ref
    from bench.schedules import conv2d_schedule, gemm_schedule, softmax_schedule

    rng = np.random.default_rng(0)
    out = []

    n = 256 if quick else 1024
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c, ref = np.empty((n, n), np.float32), a @ b
    kernel, fn = tdsl.build(gemm_schedule(n)), tvm_gemm(t, n)
    ta, tb, tc = t.array(a), t.array(b), t.array(np.zeros((n, n), np.float32))
    out.append(_checked("GEMM fp32", f"{n}^3", lambda: kernel(a, b, c), lambda: fn(ta, tb, tc),
                        lambda: np.matmul(a, b, out=c), (c, tc), ref, 2.0 * n ** 3, "GFLOP/s"))

    rows, cols = (512, 1024) if quick else (4096, 1024)
    xs = rng.standard_normal((rows, cols), dtype=np.float32) * 4
    ys = np.empty_like(xs)
    kernel_s, fn_s = tdsl.build(softmax_schedule(rows, cols)), tvm_softmax(t, rows, cols)
    txs, tys = t.array(xs), t.array(np.zeros_like(xs))
    out.append(_checked("row softmax", f"{rows}x{cols}", lambda: kernel_s(xs, ys), lambda: fn_s(txs, tys),
                        lambda: numpy_ref.softmax(xs), (ys, tys), numpy_ref.softmax(xs).astype(np.float64),
                        2.0 * xs.nbytes, "GB/s"))

    hw = 32 if quick else 56  # a multiple of the vector lanes: the tdsl schedule needs whole vectors
    x = rng.standard_normal((1, 64, hw, hw), dtype=np.float32)
    w = rng.standard_normal((64, 64, 3, 3), dtype=np.float32)
    yc = np.empty((1, 64, hw, hw), np.float32)
    kernel_c, fn_c = tdsl.build(conv2d_schedule(1, 64, hw, hw, 64)), tvm_conv2d(t, 1, 64, hw, hw, 64)
    tx, tw, ty = t.array(x), t.array(w), t.array(np.zeros_like(yc))
    out.append(_checked("conv2d 3x3 pad 1", f"1x64x{hw}x{hw}, 64 filters", lambda: kernel_c(x, w, yc),
                        lambda: fn_c(tx, tw, ty), lambda: numpy_ref.conv2d_im2col(x, w), (yc, ty),
                        numpy_ref.conv2d_im2col(x, w).astype(np.float64), 2.0 * 64 * 64 * 9 * hw * hw, "GFLOP/s"))
    return out


def _checked(name, size, run_tdsl, run_tvm, run_numpy, outputs, want, work, unit) -> Case:
    """The case, after both kernels have been run once and checked against numpy."""
    ours, theirs = outputs
    run_tdsl()
    check(ours, want, f"tdsl {name}")
    run_tvm()
    check(theirs.numpy(), want, f"TVM {name}")
    return Case(name, size, run_tdsl, run_tvm, run_numpy, work, unit)


# -- main ----------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="threads for tdsl, TVM and numpy's BLAS (1)")
    parser.add_argument("--repeat", type=int, default=None, help="timing rounds (default 15, --quick 5)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--wall", action="store_true", help="wall time even with one thread")
    args = parser.parse_args(argv)
    # before anything starts a thread pool
    os.environ["TDSL_NUM_THREADS"] = os.environ["TVM_NUM_THREADS"] = str(args.threads)
    try:
        import tvm
    except (ImportError, OSError):  # OSError: an installed TVM whose shared library does not load
        print(NOT_INSTALLED)
        return 0
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    t = TVM(tvm, args.threads)
    clock = time.thread_time if args.threads == 1 and not args.wall else time.perf_counter
    with _blas_threads(args.threads):
        measured = [(case, interleaved([case.tdsl, case.tvm, case.numpy], args.repeat or (5 if args.quick else 15),
                                       clock)) for case in cases(t, args.quick)]
    _print(measured, tvm.__version__, str(t.target), args.threads, clock)
    return 0


class _blas_threads:
    """threadpoolctl's limit on numpy's BLAS threads when threadpoolctl is installed."""

    def __init__(self, threads: int):
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            self.limit = None
        else:
            self.limit = threadpool_limits(threads)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.limit is not None:
            self.limit.restore_original_limits()


def _print(measured, version: str, target: str, threads: int, clock) -> None:
    from rich.console import Console
    from rich.table import Table

    how = "thread CPU time" if clock is time.thread_time else "wall time"
    table = Table(title=f"tdsl vs Apache TVM {version} ({target}, {threads} thread(s), min {how} over "
                        "interleaved repeats)")
    for col in ("kernel", "size", "tdsl", "TVM", "numpy", "TVM time / tdsl time"):
        table.add_column(col, justify="left" if col in ("kernel", "size") else "right")
    for case, (t_ours, t_tvm, t_np) in measured:
        cells = [f"{s * 1e3:.2f} ms  {case.work / s / 1e9:.1f} {case.unit}" for s in (t_ours, t_tvm, t_np)]
        table.add_row(case.name, case.size, *cells, f"{t_tvm / t_ours:.2f}x")
    Console(width=None if sys.stdout.isatty() else 150).print(table)


if __name__ == "__main__":
    sys.exit(main())
