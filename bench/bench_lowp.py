"""Low-precision GEMMs and conv2d on the CPU: tdsl.auto_schedule against numpy fp32, onnxruntime
and PyTorch, one run, taking turns (`timing.interleaved`), as ratios.

    python bench/bench_lowp.py                  # 1024^3 and 4096x4096x1024 (M x N x K), conv2d
    python bench/bench_lowp.py --quick          # 512^3 only, fewer turns
    python bench/bench_lowp.py --json out.json  # where the results go (default bench/results_lowp.json)

Rows (ops/s count one multiply-add as 2; a tdsl row names the micro-kernel auto_schedule chose):
numpy fp32 `a @ b`; tdsl fp32 (auto_schedule); tdsl int8 (u8 x s8 -> s32, auto_schedule: AMX's
tdpbusd where the CPU has it, else the VNNI micro-kernel); on an AMX host the same without AMX
(auto_schedule for "llvm -mattr=-amx-tile": VNNI); the exact AVX2 kernel of CPUs without VNNI
(auto_schedule for "llvm -mattr=-avx512vnni,-avxvnni,-amx-tile"); tdsl int8 requantized (the same GEMM with zero points, per-channel scales and a requantize epilogue to
int8); onnxruntime MatMulInteger (u8 x s8 -> s32, B an input: packed per call like tdsl's);
tdsl bf16 (bf16 x bf16 -> fp32: AMX's tdpbf16ps, else vdpbf16ps or converting to fp32 in
packing, as the CPU's table says), on an AMX host also without AMX, and on a CPU with
AVX512-BF16 the path auto_schedule did not pick without AMX (vdpbf16ps or converting);
PyTorch bf16 `a @ b` (oneDNN); tdsl fp16 (fp16 x fp16 -> fp32);
and a 3x3 conv2d 1x64x56x56, 64 filters: tdsl int8 (NHWC, u8 x s8 -> s32) against tdsl fp32
(NCHW). Libraries that are not installed (`pip install "tdsl[bench]"` has onnxruntime and onnx)
are left out. Threads: 2 for every library (tdsl uses the cores it may run on); idle OpenMP
threads sleep (OMP_WAIT_POLICY=PASSIVE unless set) and onnxruntime's do not spin, so that a
library's threads spinning after its call do not slow the next kernel timed. Each kernel is
checked against numpy before it is timed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

# PyTorch's OpenMP threads otherwise spin after each call and take the cores from the next kernel
# timed in this process (a tdsl GEMM measured at half its speed right after a PyTorch one)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import schedules
from timing import interleaved

import tdsl
from tdsl.intrinsics import x86_lowp
from tdsl.target import host_cpu_name, host_features

THREADS = 2

GEMM = '''
@T.prim_func
def gemm(A: T.Buffer(({m}, {k}), "{a}"), B: T.Buffer(({k}, {n}), "{b}"), C: T.Buffer(({m}, {n}), "{c}")):
    for i, j, kk in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
            with T.init():
                C[vi, vj] = T.{c}(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "{c}") * T.cast(B[vk, vj], "{c}")
'''

QGEMM = '''
@T.prim_func
def qgemm(A: T.Buffer(({m}, {k}), "uint8"), B: T.Buffer(({k}, {n}), "int8"), scale: T.Buffer(({n},), "float32"),
          Y: T.Buffer(({m}, {n}), "int8")):
    acc = T.alloc_buffer(({m}, {n}), "int32")
    colsum = T.alloc_buffer(({n},), "int32")
    for j, kk in T.grid({n}, {k}):
        with T.block("colsum"):
            vj, vk = T.axis.remap("SR", [j, kk])
            with T.init():
                colsum[vj] = 0
            colsum[vj] = colsum[vj] + T.cast(B[vk, vj], "int32")
    for i, j, kk in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
            with T.init():
                acc[vi, vj] = 0
            acc[vi, vj] = acc[vi, vj] + T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
    for i, j in T.grid({m}, {n}):
        with T.block("requantize"):
            vi, vj = T.axis.remap("SS", [i, j])
            Y[vi, vj] = T.cast(T.max(T.min(T.cast(T.round(T.cast(acc[vi, vj] - {za} * colsum[vj], "float32")
                                                            * scale[vj]), "int32") + {zy}, 127), -128), "int8")
'''
ZA, ZY = 3, -4

CONV_NHWC_INT8 = '''
@T.prim_func
def conv_int8(X: T.Buffer(({b}, {h} + 2, {w} + 2, {c}), "uint8"), W: T.Buffer((3, 3, {c}, {f}), "int8"),
              Y: T.Buffer(({b}, {h}, {w}, {f}), "int32")):
    for nb, y, x, ko, r, s, ci in T.grid({b}, {h}, {w}, {f}, 3, 3, {c}):
        with T.block("conv"):
            vb, vy, vx, vk, vr, vs, vc = T.axis.remap("SSSSRRR", [nb, y, x, ko, r, s, ci])
            with T.init():
                Y[vb, vy, vx, vk] = 0
            Y[vb, vy, vx, vk] = Y[vb, vy, vx, vk] + T.cast(X[vb, vy + vr, vx + vs, vc], "int32") \\
                * T.cast(W[vr, vs, vc, vk], "int32")
'''


def host_line() -> str:
    from tdsl.target import host_cpu_name, host_features

    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        pass
    units = [f for f in ("avx2", "fma", "f16c", "avx512f", "avxvnni", "avx512vnni", "avx512bf16", "avx512fp16",
                         "amx-int8", "amx-bf16") if f in host_features()]
    return f"{model} ({host_cpu_name()}), {os.cpu_count()} cores; {', '.join(units)}"


def build(text: str, target: str = "cpu", **sizes):
    func = tdsl.parse(text.format(**sizes))
    sch = tdsl.auto_schedule(func, target)
    return tdsl.build(sch, target="cpu"), sch


def intrinsic(sch, default: str = "general rules") -> str:
    """The micro-kernel auto_schedule chose (e.g. x86.amx.u8s8s32_32x32x1024_init)."""
    return next((w for w in str(sch.trace).split('"') if w.startswith("x86.")), default)


NO_AMX = "llvm -mattr=-amx-tile"   # the same CPU without AMX: the VNNI / AVX512-BF16 kernels


def _ints(rng, shape, dtype):
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    return rng.integers(lo, hi, shape).astype(dtype)


def gemm_rows(m: int, n: int, k: int, repeat: int) -> list[dict]:
    import ml_dtypes

    rng = np.random.default_rng(0)
    a8, b8 = _ints(rng, (m, k), "uint8"), _ints(rng, (k, n), "int8")
    af, bf = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((k, n)).astype("float32")
    abf, bbf = af.astype(ml_dtypes.bfloat16), bf.astype(ml_dtypes.bfloat16)
    ah, bh = af.astype("float16"), bf.astype("float16")
    scale = rng.uniform(1e-4, 3e-4, n).astype("float32")
    exact8 = a8.astype(np.int32) @ b8.astype(np.int32)
    rows: list[tuple[str, object, str]] = []   # (name, call, kind of the reference it is compared to)

    rows.append(("numpy fp32 a @ b", lambda: af @ bf, "fp32"))
    k32, _ = build(GEMM, m=m, n=n, k=k, a="float32", b="float32", c="float32")
    c32 = np.zeros((m, n), "float32")
    rows.append(("tdsl fp32 (auto)", lambda: k32(af, bf, c32), "fp32"))

    k8, sch8 = build(GEMM, m=m, n=n, k=k, a="uint8", b="int8", c="int32")
    c8 = np.zeros((m, n), "int32")
    k8(a8, b8, c8)
    assert np.array_equal(c8, exact8), "tdsl int8 GEMM differs from numpy"
    rows.append((f"tdsl int8 (auto: {intrinsic(sch8)})", lambda: k8(a8, b8, c8), "int8"))
    amx = "amx-tile" in host_features()
    if amx:
        # the kernels of the same CPU without AMX (VNNI), chosen through the target's features
        k8v, sch8v = build(GEMM, NO_AMX, m=m, n=n, k=k, a="uint8", b="int8", c="int32")
        c8v = np.zeros((m, n), "int32")
        k8v(a8, b8, c8v)
        assert np.array_equal(c8v, exact8), "tdsl int8 GEMM (without AMX) differs from numpy"
        rows.append((f"tdsl int8 without AMX (auto, -mattr=-amx-tile: {intrinsic(sch8v)})",
                     lambda: k8v(a8, b8, c8v), "int8"))

    if x86_lowp.int8_isa(host_features()) != "avx2" and "avx2" in host_features():
        # the exact AVX2 kernel that CPUs without VNNI run, chosen here through the target's features
        func = tdsl.parse(GEMM.format(m=m, n=n, k=k, a="uint8", b="int8", c="int32"))
        sch2 = tdsl.auto_schedule(func, "llvm -mattr=-avx512vnni,-avxvnni,-amx-tile")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tdsl.PerformanceWarning)   # the note says: no VNNI
            k2 = tdsl.build(sch2, target="cpu")
        c2 = np.zeros((m, n), "int32")
        k2(a8, b8, c2)
        assert np.array_equal(c2, exact8), "tdsl int8 GEMM (AVX2 kernel) differs from numpy"
        rows.append(("tdsl int8, AVX2 kernel (auto, -mattr=-avx512vnni,-avxvnni,-amx-tile)", lambda: k2(a8, b8, c2),
                     "int8"))

    kq, schq = build(QGEMM, m=m, n=n, k=k, za=ZA, zy=ZY)
    yq = np.zeros((m, n), "int8")
    kq(a8, b8, scale, yq)
    acc = exact8 - ZA * b8.astype(np.int32).sum(0)
    want = np.clip(np.rint(acc.astype(np.float32) * scale).astype(np.int32) + ZY, -128, 127).astype("int8")
    assert np.array_equal(yq, want), "tdsl requantized int8 GEMM differs from numpy"
    rows.append((f"tdsl int8 requantized to int8 (auto: {intrinsic(schq)})", lambda: kq(a8, b8, scale, yq), "int8"))

    ort = _onnxruntime_matmul_integer(m, n, k)
    if ort is not None:
        assert np.array_equal(ort(a8, b8), exact8)
        rows.append(("onnxruntime MatMulInteger", lambda: ort(a8, b8), "int8"))

    kbf, schbf = build(GEMM, m=m, n=n, k=k, a="bfloat16", b="bfloat16", c="float32")
    cbf = np.zeros((m, n), "float32")
    kbf(abf, bbf, cbf)
    ref = abf.astype(np.float64) @ bbf.astype(np.float64)
    assert np.allclose(cbf, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
    rows.append((f"tdsl bf16 -> fp32 (auto: {_lowp_path(schbf)})", lambda: kbf(abf, bbf, cbf), "bf16"))
    if amx:
        kbv, schbv = build(GEMM, NO_AMX, m=m, n=n, k=k, a="bfloat16", b="bfloat16", c="float32")
        cbv = np.zeros((m, n), "float32")
        kbv(abf, bbf, cbv)
        assert np.allclose(cbv, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
        rows.append((f"tdsl bf16 -> fp32 without AMX (auto, -mattr=-amx-tile: {_lowp_path(schbv)})",
                     lambda: kbv(abf, bbf, cbv), "bf16"))
    if "avx512bf16" in host_features():
        # the path auto_schedule did not take without AMX on this CPU (the design space, and tune, have both)
        kalt, schalt = _other_bf16_path(m, n, k, NO_AMX if amx else "cpu")
        calt = np.zeros((m, n), "float32")
        kalt(abf, bbf, calt)
        assert np.allclose(calt, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
        rows.append((f"tdsl bf16 -> fp32 (other path: {_lowp_path(schalt)})", lambda: kalt(abf, bbf, calt), "bf16"))
    torch_mm = _torch_bf16(af, bf)
    if torch_mm is not None:
        rows.append(("PyTorch bf16 a @ b", torch_mm, "bf16"))

    kh, schh = build(GEMM, m=m, n=n, k=k, a="float16", b="float16", c="float32")
    ch = np.zeros((m, n), "float32")
    kh(ah, bh, ch)
    refh = ah.astype(np.float64) @ bh.astype(np.float64)
    assert np.allclose(ch, refh, rtol=1e-3, atol=1e-3 * np.abs(refh).max())
    rows.append((f"tdsl fp16 -> fp32 (auto: {_lowp_path(schh)})", lambda: kh(ah, bh, ch), "fp16"))

    seconds = interleaved([call for _, call, _ in rows], repeat)
    ops = 2.0 * m * n * k
    return [{"size": f"{m}x{n}x{k}", "kernel": name, "seconds": s, "gops": ops / s / 1e9} for (name, _, _), s
            in zip(rows, seconds)]


def _lowp_path(sch) -> str:
    """How a float16 / bfloat16 GEMM's schedule computes: vdpbf16ps, or converting in packing."""
    trace = str(sch.trace)
    if "x86.amx." in trace:
        return f"AMX {intrinsic(sch)}"
    if "x86.avx512bf16.bf16f32_" in trace:
        return "vdpbf16ps"
    return "convert in packing, fp32 kernel" if 'dtype="float32"' in trace else "general rules"


def _other_bf16_path(m: int, n: int, k: int, target: str = "cpu"):
    """The bf16 GEMM built on the path the per-CPU table does not pick for this host."""
    from tdsl.auto.rules import lowp_convert

    name = host_cpu_name()
    table = lowp_convert.BF16_DOT_PATH
    saved = table.get(name)
    table[name] = not lowp_convert.bf16_prefers_dot("cpu")[0]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tdsl.PerformanceWarning)
            return build(GEMM, target, m=m, n=n, k=k, a="bfloat16", b="bfloat16", c="float32")
    finally:
        if saved is None:
            del table[name]
        else:
            table[name] = saved


def conv_rows(repeat: int) -> list[dict]:
    b, c, h, w, f = 1, 64, 56, 56, 64
    rng = np.random.default_rng(1)
    x8, w8 = _ints(rng, (b, h + 2, w + 2, c), "uint8"), _ints(rng, (3, 3, c, f), "int8")
    k8, sch8 = build(CONV_NHWC_INT8, b=b, c=c, h=h, w=w, f=f)
    y8 = np.zeros((b, h, w, f), "int32")
    k8(x8, w8, y8)
    x32, w32 = x8.astype(np.int64), w8.astype(np.int64)
    want = sum(np.einsum("byxc,ck->byxk", x32[:, r:r + h, s:s + w, :], w32[r, s]) for r in range(3) for s in range(3))
    assert np.array_equal(y8, want.astype(np.int32)), "tdsl int8 conv2d differs from numpy"
    func32 = schedules.conv2d_func(b, c, h, w, f)
    k32 = tdsl.build(tdsl.auto_schedule(func32, "cpu"), target="cpu")
    xf, wf = rng.standard_normal((b, c, h, w)).astype("float32"), rng.standard_normal((f, c, 3, 3)).astype("float32")
    yf = np.zeros((b, f, h, w), "float32")
    intrin = intrinsic(sch8)
    seconds = interleaved([lambda: k8(x8, w8, y8), lambda: k32(xf, wf, yf)], repeat)
    ops = 2.0 * b * f * h * w * c * 9
    names = [f"tdsl int8 conv2d NHWC (auto: {intrin})", "tdsl fp32 conv2d NCHW (auto)"]
    return [{"size": f"{b}x{c}x{h}x{w}, {f} 3x3", "kernel": nm, "seconds": s, "gops": ops / s / 1e9}
            for nm, s in zip(names, seconds)]


def _onnxruntime_matmul_integer(m: int, n: int, k: int):
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "mmi",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [m, k]),
         helper.make_tensor_value_info("B", TensorProto.INT8, [k, n])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [m, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = THREADS
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")   # idle threads sleep
    sess = ort.InferenceSession(onnx._serialize(model) if hasattr(onnx, "_serialize") else model.SerializeToString(),
                                opts, providers=["CPUExecutionProvider"])
    return lambda a, b: sess.run(None, {"A": a, "B": b})[0]


def _torch_bf16(af, bf):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(THREADS)
    ta, tb = torch.from_numpy(af).to(torch.bfloat16), torch.from_numpy(bf).to(torch.bfloat16)
    return lambda: ta @ tb


def ratios(rows: list[dict]) -> list[dict]:
    """Speed of each row against numpy fp32 of its size and against the library of its kind."""
    by_size: dict[str, dict[str, float]] = {}
    for r in rows:
        by_size.setdefault(r["size"], {})[r["kernel"]] = r["seconds"]
    for r in rows:
        times = by_size[r["size"]]
        base = times.get("numpy fp32 a @ b") or times.get("tdsl fp32 conv2d NCHW (auto)")
        r["vs_fp32"] = base / r["seconds"] if base else None
        tdsl32 = times.get("tdsl fp32 (auto)")
        r["vs_tdsl_fp32"] = tdsl32 / r["seconds"] if tdsl32 else None
        lib = times.get("onnxruntime MatMulInteger") if "int8" in r["kernel"] else \
            times.get("PyTorch bf16 a @ b") if "bf16" in r["kernel"] else None
        r["vs_library"] = lib / r["seconds"] if lib else None
    return rows


def table(rows: list[dict]) -> str:
    out = ["| size | kernel | GOP/s | vs numpy fp32 (conv: tdsl fp32) | vs tdsl fp32 | vs library |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        vs = f"{r['vs_fp32']:.2f}x" if r["vs_fp32"] else "-"
        lib = f"{r['vs_library']:.2f}x" if r["vs_library"] and r["vs_library"] != 1.0 else "-"
        vt = f"{r['vs_tdsl_fp32']:.2f}x" if r["vs_tdsl_fp32"] else "-"
        out.append(f"| {r['size']} | {r['kernel']} | {r['gops']:.0f} | {vs} | {vt} | {lib} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=os.path.join(HERE, "results_lowp.json"))
    ap.add_argument("--repeat", type=int, default=None)
    args = ap.parse_args()
    repeat = args.repeat or (3 if args.quick else 5)
    sizes = [(512, 512, 512)] if args.quick else [(1024, 1024, 1024), (4096, 4096, 1024)]
    start = time.time()
    rows: list[dict] = []
    for m, n, k in sizes:
        rows += gemm_rows(m, n, k, repeat)
    rows += conv_rows(repeat)
    rows = ratios(rows)
    print(f"host: {host_line()}")
    print("numpy:", np.__version__, {v: os.environ.get(v) for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")})
    print(table(rows))
    print(f"({time.time() - start:.0f} s)")
    with open(args.json, "w") as fh:
        json.dump({"host": host_line(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
