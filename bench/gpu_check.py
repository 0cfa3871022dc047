"""One script for the CUDA backend on any machine (well under 5 minutes).

    python bench/gpu_check.py [--quick]

Always: every GPU kernel of tests/cuda/cuda_kernels.py run in the CPU emulator
(`emulate=True`, needs a host C++ compiler) at small sizes against numpy / the interpreter, with
the emulator's speed; with cuda-python, compile-only checks (each kernel to CUBIN for sm_80 and
sm_90). With a GPU, also: the tests/cuda test suite, correctness of every kernel on the
device against numpy (numpy, DeviceArray and, when torch is installed, torch arguments through
DLPack), and GEMM benchmarks against torch.matmul (cuBLAS) with the ratios printed: fp32, WMMA
fp16, and the fp16 / bf16 GEMMs auto_schedule puts on ldmatrix + mma.sync at 4096^3 and 8192^3
(with their SASS counts, registers and the emulator's bank-conflict figures beside), on both GPU
pipelines: "mma.sync" (auto_schedule for target cuda: ldmatrix + mma.sync) and "wgmma"
(auto_schedule for arch sm_90a: TMA + wgmma; a row says why it is skipped when the sm_90a schedule
has no wgmma step); and the attention forward (32 x 4096 x 128 fp16, causal) that auto_schedule
makes one fused kernel (on an sm_90 GPU scheduled for sm_90a: the wgmma + TMA kernel), against torch's
scaled_dot_product_attention. A row without torch (or
without a GPU for torch) says so instead of its ratio. Without a GPU it says so, builds the
pipeline kernels (NVRTC, with their SASS figures) and exits 0 once those checks pass. Exit status
1 means a check failed.

    python bench/gpu_check.py --pipelines    # only the GPU pipeline rows (GEMMs, attention)
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "cuda"))

import numpy as np

import tdsl

FAILURES: list[str] = []


def report(name: str, ok: bool, detail: str = "") -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        FAILURES.append(name)


def attempt(name: str, fn) -> object:
    """Run one check; a failure is reported (with its traceback) and the script goes on."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        report(name, False, f"{type(exc).__name__}: {exc}")
        traceback.print_exc(limit=3)
        return None


# ----------------------------------------------------------------------------- kernels

def kernel_cases(quick: bool):
    """(label, func, reference, inputs, tolerance) for every device correctness run."""
    import cuda_kernels as ck

    rng = np.random.default_rng(0)
    cases = []
    f, ref = ck.elementwise(1024)
    cases.append(("elementwise float4 (n=1000 symbolic)", f, ref,
                  [rng.standard_normal((1000, 1024)).astype("float32")], 1e-5))
    f, ref = ck.elementwise_fp16(1 << 16)
    try:
        bf16 = tdsl.dtypes.bfloat16.numpy   # needs ml_dtypes
        cases.append(("fp16/bf16 elementwise", f, ref,
                      [rng.standard_normal(1 << 16).astype("float16"),
                       rng.standard_normal(1 << 16).astype(bf16)], 2e-3))
    except TypeError as exc:
        print(f"  fp16/bf16 elementwise skipped: {exc}")
    f, ref = ck.softmax(4096, 1024)
    cases.append(("row softmax 4096x1024 (shared tree)", f, ref,
                  [rng.standard_normal((4096, 1024)).astype("float32")], 1e-5))
    f, ref = ck.matmul(256, 192, 128)
    cases.append(("tiled matmul 256x192x128", f, ref,
                  [rng.standard_normal((256, 128)).astype("float32"),
                   rng.standard_normal((128, 192)).astype("float32")], 1e-4))
    f, ref, make_inputs = ck.kitchen_sink(1024)
    cases.append(("kitchen sink (dtypes, casts, selects) vs interpreter", f, ref, make_inputs(), 2e-3))
    sch, ref = ck.wmma_gemm(256, 128, 256)
    cases.append(("WMMA tensor-core GEMM 256x128x256 (fp16 -> fp32)", sch, ref,
                  [rng.standard_normal((256, 256)).astype("float16"),
                   rng.standard_normal((256, 128)).astype("float16")], 1e-2))
    f, ref = floordiv_kernel()
    cases.append(("floor division / modulo with negatives", f, ref, [np.int32(-37)], 0))
    n = 1024 if quick else 2048
    f, ref = ck.matmul(n, n, n, 128, 128, 8, 8, 8)
    cases.append((f"tiled matmul {n}^3, 128x128 tiles", f, ref,
                  [rng.standard_normal((n, n)).astype("float32"),
                   rng.standard_normal((n, n)).astype("float32")], 1e-3))
    return cases


def floordiv_kernel():
    from tdsl import T

    @T.prim_func
    def fdiv(off: T.int32, Q: T.Buffer((256,), "int32"), R: T.Buffer((256,), "int32")):
        for bx in T.thread_binding(2, thread="blockIdx.x"):
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                with T.block("QR"):
                    i = T.axis.spatial(256, bx * 128 + tx)
                    Q[i] = (i + off) // 7
                    R[i] = (i + off) % 7

    def ref(off):
        i = np.arange(256) + int(off)
        return i // 7, i % 7

    return fdiv, ref


def _close(out, expected, tol) -> str | None:
    outs = out if isinstance(out, tuple) else (out,)
    exps = expected if isinstance(expected, tuple) else (expected,)
    worst = 0.0
    for o, e in zip(outs, exps):
        o = o.numpy() if hasattr(o, "numpy") and not isinstance(o, np.ndarray) else o
        o, e = np.asarray(o, np.float64), np.asarray(e, np.float64)
        if o.shape != e.shape:
            return f"shape {o.shape} != {e.shape}"
        err = float(np.max(np.abs(o - e) / (1 + np.abs(e)))) if o.size else 0.0
        worst = max(worst, err)
    return None if worst <= tol else f"max relative error {worst:.3g} > {tol}"


# ----------------------------------------------------------------------------- steps

def emulated_cases():
    """(label, func, reference, inputs, tolerance) at sizes the CPU emulator runs quickly."""
    import cuda_kernels as ck

    rng = np.random.default_rng(0)
    cases = []
    f, ref = ck.elementwise(1024)
    cases.append(("elementwise float4 (n=8 symbolic)", f, ref, [rng.standard_normal((8, 1024)).astype("float32")],
                  1e-5))
    f, ref = ck.elementwise_fp16(4096)
    try:
        bf16 = tdsl.dtypes.bfloat16.numpy
        cases.append(("fp16/bf16 elementwise", f, ref, [rng.standard_normal(4096).astype("float16"),
                                                        rng.standard_normal(4096).astype(bf16)], 0))
    except TypeError as exc:
        print(f"  fp16/bf16 elementwise skipped: {exc}")
    f, ref = ck.softmax(64, 256)
    cases.append(("row softmax 64x256 (shared tree)", f, ref, [rng.standard_normal((64, 256)).astype("float32")],
                  1e-5))
    f, ref = ck.matmul(256, 192, 128)
    cases.append(("tiled matmul 256x192x128", f, ref, [rng.standard_normal((256, 128)).astype("float32"),
                                                       rng.standard_normal((128, 192)).astype("float32")], 1e-4))
    f, ref, make_inputs = ck.kitchen_sink(256)
    cases.append(("kitchen sink vs interpreter", f, ref, make_inputs(), 2e-6))
    sch, ref = ck.wmma_gemm(64, 32, 64)
    cases.append(("WMMA GEMM 64x32x64 (warp-collective)", sch, ref, [rng.standard_normal((64, 64)).astype("float16"),
                                                                      rng.standard_normal((64, 32)).astype("float16")],
                  1e-4))
    f, ref = floordiv_kernel()
    cases.append(("floor division / modulo with negatives", f, ref, [np.int32(-37)], 0))
    for maker, inputs in ck.reduction_cases():   # cross-thread / rfactor reductions written with schedules
        sch, ref = maker()
        cases.append((f"{maker.__name__} (schedule)", sch, ref, inputs, 1e-5))
    return cases


def emulated_checks() -> None:
    """Every case in the CPU emulator; the tiled matmul's speed in thread-iterations per second."""
    import shutil

    print("emulated checks (generated CUDA C++ on the CPU; races and bounds checked):", flush=True)
    if not any(shutil.which(c) for c in ("g++", "clang++", "c++")):
        report("emulator", False, "no host C++ compiler (g++ / clang++) on PATH")
        return
    for label, func, ref, inputs, tol in emulated_cases():
        def run(label=label, func=func, ref=ref, inputs=inputs, tol=tol):
            t = time.perf_counter()
            kernel = tdsl.build(func, target="cuda", emulate=True)
            built = time.perf_counter() - t
            out = kernel(*inputs)
            err = _close(out, ref(*inputs), tol)
            report(label, err is None, err or f"build {built:.2f}s, run {time.perf_counter() - t - built:.2f}s "
                                              "(3 thread orders)")

        attempt(label, run)

    import cuda_kernels as ck

    def speed():
        m, n, k = 256, 192, 128
        func, _ = ck.matmul(m, n, k)
        rng = np.random.default_rng(1)
        a, b = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((k, n)).astype("float32")
        kernel = tdsl.build(func, target="cuda", emulate=True, thread_orders=1)
        seconds = kernel.time(a, b, repeat=3)
        print(f"  emulator speed: tiled matmul {m}x{n}x{k}, one thread order: {seconds * 1e3:.1f} ms per call, "
              f"{m * n * k / seconds / 1e6:.1f} M thread-iterations (multiply-adds) per second, "
              f"{m * n // 16 / seconds / 1e6:.2f} M threads per second", flush=True)

    attempt("emulator speed", speed)


def compile_only() -> None:
    print("compile-only checks (NVRTC -> CUBIN, no GPU needed):", flush=True)
    import cuda_kernels as ck

    makers = [ck.elementwise, ck.elementwise_fp16, ck.softmax, ck.matmul, ck.kitchen_sink, ck.wmma_gemm,
              floordiv_kernel]
    for maker in makers:
        for arch in ("sm_80", "sm_90"):
            def build(maker=maker, arch=arch):
                t = time.perf_counter()
                k = tdsl.build(maker()[0], target="cuda", arch=arch, use_cache=False)
                ok = k.cubin[:4] == b"\x7fELF"
                report(f"{maker.__name__} -> {arch}", ok, f"{len(k.cubin)} bytes in {time.perf_counter() - t:.2f}s")

            attempt(f"{maker.__name__} -> {arch}", build)


def run_tests(budget_s: int) -> None:
    print("tests/cuda (pytest):", flush=True)
    import importlib.util

    if importlib.util.find_spec("pytest") is None:
        print("  pytest is not installed here: skipped")
        return
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pytest", os.path.join(ROOT, "tests", "cuda"), "-q", "-x",
                        "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=budget_s,
                       check=False)
    tail = (r.stdout + r.stderr).strip().splitlines()[-12:]
    for line in tail:
        print("    " + line)
    report("pytest tests/cuda", r.returncode == 0, f"{time.perf_counter() - t:.1f}s")


def device_correctness(quick: bool) -> dict:
    from tdsl.backends.cuda import runtime

    print("device correctness (against numpy):", flush=True)
    try:
        import torch
        torch_ok = torch.cuda.is_available()
    except ImportError:
        torch, torch_ok = None, False
    built = {}
    for label, func, ref, inputs, tol in kernel_cases(quick):
        def run(label=label, func=func, ref=ref, inputs=inputs, tol=tol):
            t = time.perf_counter()
            kernel = tdsl.build(func, target="cuda")
            built[label] = kernel
            expected = ref(*inputs)
            out = kernel(*inputs)                        # numpy in, numpy out
            err = _close(out, expected, tol)
            report(f"{label} [numpy args]", err is None, err or f"{time.perf_counter() - t:.2f}s incl. build")
            dev = [runtime.to_device(x) if isinstance(x, np.ndarray) and x.ndim else x for x in inputs]
            out = kernel(*dev)                           # DeviceArrays in, DeviceArray out
            err = _close(out, expected, tol)
            report(f"{label} [DeviceArray args]", err is None and not isinstance(out, np.ndarray), err or "")
            if torch_ok and all(x.dtype.name != "bfloat16" for x in inputs if isinstance(x, np.ndarray)):
                tin = [torch.from_numpy(np.ascontiguousarray(x)).cuda() if isinstance(x, np.ndarray) and x.ndim
                       else x for x in inputs]
                outs = kernel(*tin)                      # torch in place through DLPack
                outs = outs if isinstance(outs, tuple) else (outs,)
                err = _close(tuple(o.numpy() for o in outs), expected, tol)
                report(f"{label} [torch args via DLPack]", err is None, err or "")

        attempt(label, run)
    if torch_ok:
        def export():
            a = runtime.to_device(np.arange(12, dtype="float32").reshape(3, 4))
            t = torch.from_dlpack(a)
            ok = t.is_cuda and t.shape == (3, 4) and float(t.sum()) == 66.0
            t.mul_(2)                                    # shares memory with the DeviceArray
            ok = ok and float(a.numpy().sum()) == 132.0
            report("DeviceArray -> torch.from_dlpack (zero copy)", ok)

        attempt("DeviceArray -> torch.from_dlpack", export)
    return built


def gemm_benchmark(quick: bool) -> None:
    import cuda_kernels as ck

    from tdsl.backends.cuda import runtime

    print("GEMM benchmark (fp32):", flush=True)
    try:
        import torch
        torch_ok = torch.cuda.is_available()
    except ImportError:
        torch, torch_ok = None, False
    sizes = [1024, 2048] if quick else [1024, 2048, 4096]
    for n in sizes:
        def bench(n=n):
            func, _ = ck.matmul(n, n, n, 128, 128, 8, 8, 8)
            kernel = tdsl.build(func, target="cuda")
            rng = np.random.default_rng(1)
            a = runtime.to_device(rng.standard_normal((n, n)).astype("float32"))
            b = runtime.to_device(rng.standard_normal((n, n)).astype("float32"))
            c = tdsl.device_array((n, n), "float32")
            secs = kernel.time(a, b, c)
            flops = 2.0 * n ** 3
            line = f"tdsl {flops / secs / 1e9:8.1f} GFLOP/s"
            if torch_ok:
                ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
                torch.backends.cuda.matmul.allow_tf32 = False
                for _ in range(3):
                    torch.matmul(ta, tb)
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                reps = 20
                start.record()
                for _ in range(reps):
                    torch.matmul(ta, tb)
                end.record()
                torch.cuda.synchronize()
                tsecs = start.elapsed_time(end) / 1e3 / reps
                line += f" | cuBLAS {flops / tsecs / 1e9:8.1f} GFLOP/s | ratio tdsl/cuBLAS {tsecs / secs:.2f}"
            else:
                line += " | torch not installed: no cuBLAS reference"
            report(f"sgemm {n}^3", True, line)

        attempt(f"sgemm {n}^3", bench)
    n = 2048

    def bench_fp16():
        sch, _ = ck.wmma_gemm(n, n, n)
        kernel = tdsl.build(sch, target="cuda")
        rng = np.random.default_rng(2)
        a = runtime.to_device(rng.standard_normal((n, n)).astype("float16"))
        b = runtime.to_device(rng.standard_normal((n, n)).astype("float16"))
        c = tdsl.device_array((n, n), "float32")
        secs = kernel.time(a, b, c)
        flops = 2.0 * n ** 3
        line = f"tdsl WMMA {flops / secs / 1e12:6.2f} TFLOP/s (one warp per 16x16 tile, no shared memory)"
        if torch_ok:
            ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
            for _ in range(3):
                torch.matmul(ta, tb)
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(20):
                torch.matmul(ta, tb)
            end.record()
            torch.cuda.synchronize()
            tsecs = start.elapsed_time(end) / 1e3 / 20
            line += f" | cuBLAS fp16 {flops / tsecs / 1e12:6.2f} TFLOP/s | ratio {tsecs / secs:.3f}"
        report(f"hgemm {n}^3 (WMMA)", True, line)

    print("GEMM benchmark (fp16 tensor cores):", flush=True)
    attempt(f"hgemm {n}^3", bench_fp16)


def _mma_gemm(n: int, dtype: str):
    from tdsl import T

    @T.prim_func
    def gemm(A: T.Buffer((n, n), dtype), B: T.Buffer((n, n), dtype), C: T.Buffer((n, n), "float32")):
        for i, j, k in T.grid(n, n, n):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")

    return gemm


def mma_figures(dtype: str) -> str:
    """The auto-scheduled GEMM's static figures: SASS counts and resources (sm_80 CUBIN) and the
    emulator's ldmatrix bank conflicts at 256^3 (the same rule, the same tiles)."""
    from tdsl.backends.cuda.stats import cuobjdump_path, opcodes

    parts = []
    if cuobjdump_path():
        built = tdsl.build(tdsl.auto_schedule(_mma_gemm(4096, dtype), target="cuda"), target="cuda", arch="sm_80")
        ops = opcodes(built.cubin) or {}
        counts = {k: sum(v for o, v in ops.items() if o.startswith(k)) for k in ("HMMA", "LDSM", "LDGSTS", "LDL", "STL")}
        (usage,) = built.stats.resources.values()
        parts.append("SASS " + " ".join(f"{k}={v}" for k, v in counts.items())
                     + f", {usage['registers']} registers, {usage['shared']} B shared")
    try:
        emu = tdsl.build(tdsl.auto_schedule(_mma_gemm(256, dtype), target="cuda"), target="cuda", emulate=True)
        rng = np.random.default_rng(3)
        a = rng.standard_normal((256, 256)).astype(np.float32)
        b = rng.standard_normal((256, 256)).astype(np.float32)
        if dtype == "bfloat16":
            import ml_dtypes
            a, b = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
        else:
            a, b = a.astype(np.float16), b.astype(np.float16)
        err = np.abs(emu(a, b) - a.astype(np.float32) @ b.astype(np.float32)).max()
        worst = max((c.worst for c in emu.stats.shared), default=0)
        parts.append(f"emulator 256^3 max error {err:.1e}, worst ldmatrix bank conflict {worst}-way")
    except tdsl.TargetError as exc:
        parts.append(f"emulator: {exc}")
    return "; ".join(parts)


PIPELINES = ("mma.sync", "wgmma")
SASS_NAMES = ("HMMA", "HGMMA", "LDSM", "LDGSTS", "UTMALDG", "SYNCS", "LDL", "STL")


def _torch_cuda():
    """(torch, None) when torch sees a GPU, else (None, the reason)."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "torch has no CUDA device"
    return torch, None


def pipeline_schedule(func, pipeline: str):
    """(schedule, build arch, why-not) for one GPU pipeline: "mma.sync" is auto_schedule for
    target cuda (ldmatrix + mma.sync, sm_80 and later); "wgmma" asks for sm_90a (TMA + wgmma,
    warp-specialized). why-not says why the sm_90a schedule is not a wgmma one."""
    if pipeline == "mma.sync":
        return tdsl.auto_schedule(func, target="cuda"), "sm_80", None
    try:
        sch = tdsl.auto_schedule(func, target="cuda", arch="sm_90a")
    except TypeError:   # an auto_schedule without arch=: the target string names it
        sch = tdsl.auto_schedule(func, target="cuda -arch=sm_90a")
    trace = str(sch.trace)
    if "wgmma" not in trace:
        return sch, "sm_90a", "the sm_90a schedule has no wgmma step (no wgmma rule in this tdsl, or it did not apply)"
    return sch, "sm_90a", None


def sass_figures(cubin: bytes) -> str:
    """SASS counts and resources of a CUBIN ('' without cuobjdump)."""
    from tdsl.backends.cuda.stats import cuobjdump_path, opcodes, resource_usage

    if not cubin or not cuobjdump_path():
        return ""
    ops = opcodes(cubin) or {}
    counts = {k: sum(v for o, v in ops.items() if o.startswith(k)) for k in SASS_NAMES}
    usage = resource_usage(cubin) or {}
    regs = ", ".join(f"{u['registers']} regs, {u['shared']} B shared, {u['local']} B local" for u in usage.values())
    return "SASS " + " ".join(f"{k}={v}" for k, v in counts.items() if v or k in ("LDL", "STL")) + f" ({regs})"


def _timed(fn, reps: int) -> float:
    """Seconds per call of `fn` on torch's stream (CUDA events), after warm-up."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def _typed(host: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        import ml_dtypes
        return host.astype(ml_dtypes.bfloat16)
    return host.astype(np.float16)


def pipeline_gemm_rows(quick: bool, on_gpu: bool) -> None:
    """fp16 / bf16 GEMMs (fp32 accumulation) auto-scheduled for each GPU pipeline, against
    torch.matmul (cuBLAS) in the same process; without a GPU only built (NVRTC) for the
    pipeline's architecture with their SASS figures."""
    from tdsl.backends.cuda import runtime

    torch, why_torch = _torch_cuda() if on_gpu else (None, "no GPU")
    print("GEMM benchmark, GPU pipelines (auto_schedule; fp16 / bf16 in, fp32 out):", flush=True)
    for pipeline in PIPELINES:
        for dtype in ("float16", "bfloat16"):
            if pipeline == "mma.sync":
                attempt(f"{dtype} GEMM figures", lambda dtype=dtype: print(f"  {dtype}: {mma_figures(dtype)}", flush=True))
            for n in ([4096] if quick else [4096, 8192]):
                label = f"{dtype} GEMM {n}^3 ({pipeline})"

                def row(n=n, dtype=dtype, pipeline=pipeline, label=label):
                    sch, arch, why_not = pipeline_schedule(_mma_gemm(n, dtype), pipeline)
                    if why_not:
                        report(label, True, f"skipped: {why_not}")
                        return
                    kernel = tdsl.build(sch, target="cuda", arch=arch)
                    figures = sass_figures(kernel.cubin)
                    if not on_gpu:
                        report(label, kernel.cubin[:4] == b"\x7fELF", f"built for {arch} (no GPU: not run); {figures}")
                        return
                    rng = np.random.default_rng(4)
                    typed = [_typed(rng.standard_normal((n, n)).astype(np.float32), dtype) for _ in range(2)]
                    a, b = (runtime.to_device(x) for x in typed)
                    c = tdsl.device_array((n, n), "float32")
                    secs = kernel.time(a, b, c, repeat=3)
                    flops = 2.0 * n ** 3
                    line = f"tdsl {flops / secs / 1e12:6.1f} TFLOP/s"
                    ok = True
                    if torch is not None:
                        tdt = torch.float16 if dtype == "float16" else torch.bfloat16
                        ta, tb = (torch.from_numpy(x.astype(np.float32)).cuda().to(tdt) for x in typed)
                        ref = torch.matmul(ta.float()[:256], tb.float()).cpu().numpy()
                        err = float(np.abs(c.numpy()[:256] - ref).max() / (np.abs(ref).max() + 1e-30))
                        tsecs = _timed(lambda: torch.matmul(ta, tb), 10)
                        line += (f" | cuBLAS ({dtype} out) {flops / tsecs / 1e12:6.1f} TFLOP/s | ratio tdsl/cuBLAS "
                                 f"{tsecs / secs:.2f} | rows 0-255 rel. error {err:.1e}")
                        ok = err < 1e-2
                    else:
                        line += f" | no cuBLAS reference ({why_torch})"
                    report(label, ok, f"{line}; {figures}")

                attempt(label, row)


ATTENTION_SIZE = (32, 4096, 128)   # batch x heads, sequence, head dim


def attention_func(bh: int, seq: int, dim: int, causal: bool = True):
    """fp16 attention forward as a user writes it (bench/attention_gpu.py), fp16 output."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from attention_gpu import attention_lowp_func

    return attention_lowp_func(bh, seq, dim, "float16", causal=causal, out="float16", p_cast=True)


def attention_figures() -> str:
    """The fused kernels (mma.sync; the sm_90a wgmma one) in the emulator at 2 x 128 x 64 (causal)
    against numpy: their max errors."""
    from attention_gpu import attention_lowp_ref

    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 128, 64)).astype(np.float16) for _ in range(3))
    out = []
    for arch in ("sm_80", "sm_90a"):
        kernel = tdsl.build(tdsl.auto_schedule(attention_func(2, 128, 64), target="cuda", arch=arch), target="cuda",
                            emulate=True)
        err = float(np.abs(kernel(q, k, v).astype(np.float64) - attention_lowp_ref(q, k, v, True)).max())
        out.append(f"{arch} kernel {err:.1e}")
    return f"emulator 2x128x64 causal max error: {', '.join(out)}"


def attention_arch(device_arch: str | None) -> str:
    """The architecture the attention is scheduled for: sm_90a (the wgmma + TMA kernel) on an
    sm_90 GPU, and without a GPU (built, not run); the device's own otherwise (mma.sync)."""
    if device_arch is None or device_arch.removesuffix("a") == "sm_90":
        return "sm_90a"
    return device_arch


def attention_row(on_gpu: bool) -> None:
    """Attention forward (fp16, causal) as tdsl's fused kernel against torch's
    scaled_dot_product_attention (on an H100/H200 the sm_90a wgmma kernel); without a GPU only
    the kernels' builds and figures."""
    from tdsl.backends.cuda import flash_attention_sm90, runtime
    from tdsl.backends.cuda.flash_attention import AttentionShape, kernel_source
    from tdsl.backends.cuda.nvrtc import compile_cuda

    bh, seq, dim = ATTENTION_SIZE
    label = f"attention fwd {bh}x{seq}x{dim} fp16 causal (fused kernel)"
    print("attention forward (auto_schedule: one fused kernel):", flush=True)
    attempt("attention figures", lambda: print(f"  {attention_figures()}", flush=True))

    def row():
        func = attention_func(bh, seq, dim)
        device_arch = runtime.device_info().arch if on_gpu else None
        arch = attention_arch(device_arch)
        sch = tdsl.auto_schedule(func, target="cuda", arch=arch)
        trace = str(sch.trace)
        if '"tdsl.fused_kernel"' not in trace:
            report(label, False, "auto_schedule did not fuse the attention")
            return
        hopper = "flash_attention_fwd_sm90a" in trace
        if hopper != (arch == "sm_90a"):
            report(label, False, f"auto_schedule for {arch} chose the {'wgmma' if hopper else 'mma.sync'} kernel")
            return
        shape = AttentionShape(bh, seq, dim, "float16", "float16", True)
        source = flash_attention_sm90.kernel_source(shape) if hopper else kernel_source(shape)
        which = "wgmma + TMA kernel" if hopper else "mma.sync kernel"
        figures = f"{which}, {arch}: {sass_figures(compile_cuda(source, arch, name='attention.cu').cubin)}"
        kernel = tdsl.build(sch, target="cuda", arch=device_arch or arch)
        if not on_gpu:
            report(label, True, f"built (no GPU: not run); {figures}")
            return
        torch, why_torch = _torch_cuda()
        rng = np.random.default_rng(6)
        host = [rng.standard_normal((bh, seq, dim)).astype(np.float16) for _ in range(3)]
        q, k, v = (runtime.to_device(x) for x in host)
        o = tdsl.device_array((bh, seq, dim), "float16")
        secs = kernel.time(q, k, v, o, repeat=3)
        flops = 4.0 * bh * seq * seq * dim / 2    # causal: half of Q K^T and P V
        line = f"tdsl {flops / secs / 1e12:6.1f} TFLOP/s ({secs * 1e3:.2f} ms)"
        ok = True
        if torch is not None:
            import torch.nn.functional as F

            tq, tk, tv = (torch.from_numpy(x).cuda().view(1, bh, seq, dim) for x in host)
            ref = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
            err = float((torch.from_numpy(o.numpy().astype(np.float32)).cuda().view(1, bh, seq, dim)
                         - ref.float()).abs().max())
            tsecs = _timed(lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=True), 10)
            line += (f" | torch SDPA {flops / tsecs / 1e12:6.1f} TFLOP/s ({tsecs * 1e3:.2f} ms) | ratio tdsl/SDPA "
                     f"{tsecs / secs:.2f} | max abs error {err:.1e}")
            ok = err < 2e-2
        else:
            line += f" | no SDPA reference ({why_torch})"
        if hopper:   # the mma.sync kernel on the same GPU, for comparison (after the error check: it writes o)
            mma = tdsl.build(tdsl.auto_schedule(func, target="cuda", arch="sm_80"), target="cuda", arch=device_arch)
            msecs = mma.time(q, k, v, o, repeat=3)
            line += f" | mma.sync kernel {flops / msecs / 1e12:6.1f} TFLOP/s ({msecs * 1e3:.2f} ms)"
        report(label, ok, f"{line}; {figures}")

    attempt(label, row)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--no-tests", action="store_true", help="skip the pytest run")
    parser.add_argument("--pipelines", action="store_true",
                        help="only the GPU pipelines: the mma.sync and wgmma GEMM rows and the fused attention row")
    args = parser.parse_args()
    t0 = time.perf_counter()
    print(f"tdsl {tdsl.__version__}, Python {sys.version.split()[0]}, numpy {np.__version__}")
    if not args.pipelines:
        emulated_checks()
    try:
        import cuda.bindings

        from tdsl.backends.cuda.nvrtc import nvrtc_version

        print(f"cuda-bindings {cuda.bindings.__version__}, NVRTC {'.'.join(map(str, nvrtc_version()))}")
    except ImportError:
        print("cuda-python is not installed: no NVRTC or device checks (pip install 'tdsl[cuda]')")
        return 1 if FAILURES else 0
    except tdsl.TargetError as exc:
        print(f"NVRTC is not usable: {exc}")
        return 1
    if not args.pipelines:
        compile_only()
    from tdsl.backends.cuda import runtime

    try:
        info = runtime.device_info()
    except tdsl.TargetError as exc:
        print(f"no GPU here ({str(exc).split(';')[0]}): device checks skipped; the GPU pipelines built only")
        pipeline_gemm_rows(True, on_gpu=False)
        attention_row(on_gpu=False)
        print(f"done in {time.perf_counter() - t0:.1f}s; {len(FAILURES)} failure(s)")
        return 1 if FAILURES else 0
    print(f"device: {info.name} ({info.arch}), {info.max_shared_per_block} B shared/block")
    if not args.pipelines:
        if not args.no_tests:
            attempt("pytest tests/cuda", lambda: run_tests(150))
        device_correctness(args.quick)
        gemm_benchmark(args.quick)
    pipeline_gemm_rows(args.quick, on_gpu=True)
    attention_row(on_gpu=True)
    print(f"done in {time.perf_counter() - t0:.1f}s; {len(FAILURES)} failure(s)"
          + (": " + ", ".join(FAILURES) if FAILURES else ""))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
