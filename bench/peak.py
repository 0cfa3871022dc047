"""The machine's measured fp32 FMA peak (GFLOP/s), for context in the benchmark tables.

A JIT-compiled loop of 12 independent vector FMA chains at the host's widest vector width,
timed on one thread and on all cores at once (Python threads; ctypes releases the GIL).
"""
from __future__ import annotations

import ctypes
import os
import threading
import time

CHAINS = 12


def _build():
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features().flatten()
    lanes = 16 if "+avx512f" in features else 8
    vec = f"<{lanes} x float>"
    body = []
    for c in range(CHAINS):
        body.append(f"  %a{c} = phi {vec} [ zeroinitializer, %entry ], [ %n{c}, %loop ]")
    body.append("  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]")
    for c in range(CHAINS):
        body.append(f"  %n{c} = call {vec} @llvm.fma.v{lanes}f32({vec} %a{c}, {vec} %x, {vec} %y)")
    body.append("  %i1 = add i64 %i, 1")
    body.append("  %done = icmp eq i64 %i1, %n")
    body.append("  br i1 %done, label %exit, label %loop")
    total = " ".join(f"%s{c} = fadd {vec} %s{c - 1}, %n{c}" if c else "" for c in range(CHAINS))
    sums = ["  %s0 = fadd " + vec + " %n0, zeroinitializer"] + [
        f"  %s{c} = fadd {vec} %s{c - 1}, %n{c}" for c in range(1, CHAINS)]
    del total
    ir = f"""
declare {vec} @llvm.fma.v{lanes}f32({vec}, {vec}, {vec})
define float @peak(i64 %n, float %xs) {{
entry:
  %xi = insertelement {vec} undef, float %xs, i32 0
  %x = shufflevector {vec} %xi, {vec} undef, <{lanes} x i32> zeroinitializer
  %y = fadd {vec} %x, %x
  br label %loop
loop:
{chr(10).join(body)}
exit:
{chr(10).join(sums)}
  %r = extractelement {vec} %s{CHAINS - 1}, i32 0
  ret float %r
}}
"""
    mod = llvm.parse_assembly(ir)
    mod.verify()
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=features, opt=3, jit=True)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float)(engine.get_function_address("peak"))
    return fn, lanes, engine


def measure(seconds: float = 0.3) -> dict:
    """{'lanes', 'single': GFLOP/s on one core, 'all': on all cores, 'cores'}."""
    fn, lanes, engine = _build()
    iters = 2_000_000
    fn(1000, 0.0)

    def one() -> float:
        t = time.perf_counter()
        fn(iters, 1e-9)
        return time.perf_counter() - t

    single = min(one() for _ in range(3))
    flops = iters * CHAINS * lanes * 2
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    times = [0.0] * cores

    def worker(k):
        times[k] = one()

    best_all = 0.0
    for _ in range(3):
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(cores)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        best_all = max(best_all, flops * cores / (time.perf_counter() - t) / 1e9)
    del engine
    return {"lanes": lanes, "single": flops / single / 1e9, "all": best_all, "cores": cores}


if __name__ == "__main__":
    r = measure()
    print(f"fp32 FMA peak: {r['single']:.0f} GFLOP/s on one core, {r['all']:.0f} GFLOP/s on {r['cores']} cores "
          f"({r['lanes']} lanes)")
