"""The unroll pipeline cliff: a depthwise 3x3 conv (padding in its own scalar loop, taps split
off and vectorized by 8), with and without `unroll` of the r, s taps, each compiled with the
LLVM pipeline tdsl chooses now and with `simplify` (the register-tile pipeline without LLVM's
vectorizer, which unrolling the taps used to choose). One process, interleaved timing (min of
rounds), so the ratios share the machine's load.

    python bench/depthwise_unroll.py [--channels 64 --size 56 --repeat 5]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from timing import interleaved

import tdsl
from tdsl.backends.llvm import compile as cpu_compile
from tdsl.backends.llvm import jit
from tdsl.backends.llvm.kernel import Kernel

SOURCE = '''
@T.prim_func
def dwconv(X: T.Buffer(({c}, {h}, {w}), "float32"), Wt: T.Buffer(({c}, 3, 3), "float32"),
           Y: T.Buffer(({c}, {h}, {w}), "float32")):
    P = T.alloc_buffer(({c}, {h} + 2, {w} + 2), "float32")
    for c, y, x in T.grid({c}, {h} + 2, {w} + 2):
        with T.block("pad"):
            vc, vy, vx = T.axis.remap("SSS", [c, y, x])
            P[vc, vy, vx] = T.if_then_else(1 <= vy and vy < {h} + 1 and 1 <= vx and vx < {w} + 1,
                                           X[vc, vy - 1, vx - 1], T.float32(0))
    for c, y, x, r, s in T.grid({c}, {h}, {w}, 3, 3):
        with T.block("dw"):
            vc, vy, vx, vr, vs = T.axis.remap("SSSRR", [c, y, x, r, s])
            with T.init():
                Y[vc, vy, vx] = T.float32(0)
            Y[vc, vy, vx] = Y[vc, vy, vx] + P[vc, vy + vr, vx + vs] * Wt[vc, vr, vs]
'''


def schedule(func: tdsl.PrimFunc, unroll: bool) -> tdsl.Schedule:
    sch = tdsl.Schedule(func)
    c, y, x, r, s = sch.get_loops(sch.get_block("dw"))
    x0, x1 = sch.split(x, factors=[None, 8])
    sch.reorder(c, y, x0, r, s, x1)
    sch.vectorize(x1)
    sch.parallel(c)
    if unroll:
        sch.unroll(r)
        sch.unroll(s)
    return sch


def kernel_with(sch: tdsl.Schedule, pipeline: str | None) -> tuple[Kernel, str]:
    lowered = tdsl.lower(sch)
    chosen = pipeline or cpu_compile.pipeline_for(lowered.body)
    symbol = f"dw_{abs(hash((sch.func.script(), chosen))) % 10**12}"
    compiled = cpu_compile._compile(lowered, sch.func, symbol, False, None, pipeline=chosen)
    cpu_compile._bind_context(compiled)
    return Kernel(sch.func, compiled, {"bounds_check": False}), chosen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--size", type=int, default=56)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    func = tdsl.parse(SOURCE.format(c=args.channels, h=args.size, w=args.size))
    rng = np.random.default_rng(0)
    x = rng.random((args.channels, args.size, args.size), np.float32)
    w = rng.random((args.channels, 3, 3), np.float32)
    want = tdsl.build(schedule(func, False))(x, w)
    cases = []
    for unroll in (False, True):
        for forced in (None, jit.SIMPLIFY):
            kernel, pipeline = kernel_with(schedule(func, unroll), forced)
            np.testing.assert_allclose(kernel(x, w), want, rtol=1e-5)
            out = np.empty_like(x)
            label = f"unroll={unroll!s:5} pipeline={pipeline:13} ({'chosen now' if forced is None else 'forced'})"
            cases.append((label, lambda k=kernel, o=out: k(x, w, o)))
    times = interleaved([fn for _, fn in cases], args.repeat)
    print(f"depthwise 3x3 conv, {args.channels} x {args.size} x {args.size}, load average "
          f"{os.getloadavg()[0]:.1f} (min of {args.repeat} interleaved rounds)")
    for (label, _), t in zip(cases, times):
        print(f"  {label}  {t * 1e6:8.0f} us  ({times[0] / t:4.2f}x the plain schedule)")


if __name__ == "__main__":
    main()
