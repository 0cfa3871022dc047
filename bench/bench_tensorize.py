"""Tensorized GEMMs on the CPU against numpy/OpenBLAS.

    python bench/bench_tensorize.py            # 1024^3; --size N for another size

* fp32 GEMM with the x86 register-tile micro-kernel (AVX-512 8x32 where the CPU has AVX-512F,
  else AVX2 4x16), B packed into NR-wide panels by a block of the same function, the panel loop
  parallel; numpy `a @ b` in this process and in a subprocess with OPENBLAS_CORETYPE and
  OPENBLAS_L2_SIZE unset (OpenBLAS then picks its own kernel, the AVX-512 one on AVX-512 CPUs).
* int8 GEMM (u8 x s8 -> s32) through the VNNI dot product where the CPU has AVX512-VNNI or
  AVX-VNNI, in ops/s next to the fp32 GEMM's flop/s; otherwise it says why it cannot run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

import tdsl
from tdsl.intrinsics import x86

FP32_GEMM = '''
@T.prim_func
def gemm_packed(A: T.Buffer(({n}, {n}), "float32"), B: T.Buffer(({n}, {n}), "float32"),
                C: T.Buffer(({n}, {n}), "float32")):
    Bp = T.alloc_buffer(({n} // {nr}, {n}, {nr}), "float32")
    for jo, k, ji in T.grid({n} // {nr}, {n}, {nr}):
        with T.block("pack"):
            vjo, vk, vji = T.axis.remap("SSS", [jo, k, ji])
            Bp[vjo, vk, vji] = B[vk, vjo * {nr} + vji]
    for i, j, k in T.grid({n}, {n}, {n}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * Bp[vj // {nr}, vk, vj % {nr}]
'''

INT8_GEMM = '''
@T.prim_func
def gemm_u8s8(A: T.Buffer(({n}, {n}), "uint8"), Bp: T.Buffer(({n} // {lanes}, {n} // 4, {lanes}, 4), "int8"),
              C: T.Buffer(({n}, {n}), "int32")):
    for i, j, k in T.grid({n}, {n}, {n}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "int32") * T.cast(Bp[vj // {lanes}, vk // 4, vj % {lanes}, vk % 4], "int32")
'''


def fp32_schedule(n: int, kc: int) -> tdsl.Schedule:
    name = x86.fp32_microkernel(kc)
    intrin = tdsl.TensorIntrin.get(name)
    mr, nr = (int(s.value) for s in intrin.desc.params[2].shape)
    sch = tdsl.Schedule(tdsl.parse(FP32_GEMM.format(n=n, nr=nr)))
    jo, _, _ = sch.get_loops(sch.get_block("pack"))
    sch.parallel(jo)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, factors=[None, mr])
    j0, j1 = sch.split(j, factors=[None, nr])
    k0, k1 = sch.split(k, factors=[None, kc])
    sch.reorder(j0, k0, i0, i1, j1, k1)
    sch.parallel(j0)
    sch.tensorize(i1, name)
    return sch


def int8_schedule(n: int, name: str, lanes: int) -> tdsl.Schedule:
    sch = tdsl.Schedule(tdsl.parse(INT8_GEMM.format(n=n, lanes=lanes)))
    i, j, k = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, factors=[None, lanes])
    k0, k1 = sch.split(k, factors=[None, 4])
    sch.reorder(i, j0, k0, j1, k1)
    sch.parallel(i)
    sch.tensorize(j1, name)
    return sch


def numpy_seconds(a: np.ndarray, b: np.ndarray, repeat: int = 7) -> float:
    a @ b
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


_SUBPROCESS = r'''
import json, time, numpy as np
n = {n}
rng = np.random.default_rng(0)
a = rng.standard_normal((n, n), dtype=np.float32); b = rng.standard_normal((n, n), dtype=np.float32)
a @ b
t = []
for _ in range(7):
    s = time.perf_counter(); a @ b; t.append(time.perf_counter() - s)
print(json.dumps(sorted(t)[3]))
'''


def numpy_unset_seconds(n: int) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    out = subprocess.run([sys.executable, "-c", _SUBPROCESS.format(n=n)], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--kc", type=int, default=256)
    args = parser.parse_args()
    n = args.size
    flops = 2.0 * n ** 3
    cpu = x86._host()[0]
    print(f"# tensorized GEMM {n}^3 on {cpu}, {os.cpu_count()} cores; host ISAs: {', '.join(x86.available())}")
    print(f"# OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')} OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE')}")

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    sch = fp32_schedule(n, args.kc)
    t0 = time.perf_counter()
    kernel = tdsl.build(sch, target="cpu")
    build_s = time.perf_counter() - t0
    c = kernel(a, b)
    ref = a @ b
    err = float(np.abs(c - ref).max() / np.abs(ref).max())
    t_tdsl = kernel.time(a, b, c)
    t_np = numpy_seconds(a, b)
    t_np_unset = numpy_unset_seconds(n)
    name = sch.trace.instructions[-1].attrs[0][1]
    print(f"fp32 {name:28s} {flops / t_tdsl / 1e9:7.1f} GFLOP/s  ({t_tdsl * 1e3:.2f} ms, build {build_s:.2f} s, "
          f"rel err {err:.1e})")
    print(f"fp32 numpy (this env)              {flops / t_np / 1e9:7.1f} GFLOP/s  ({t_np * 1e3:.2f} ms)  "
          f"ratio tdsl/numpy {t_np / t_tdsl:.2f}")
    print(f"fp32 numpy (CORETYPE/L2 unset)     {flops / t_np_unset / 1e9:7.1f} GFLOP/s  ({t_np_unset * 1e3:.2f} ms)  "
          f"ratio tdsl/numpy {t_np_unset / t_tdsl:.2f}")

    try:
        dot = x86.int8_dot()
    except tdsl.TargetError as exc:
        print(f"int8 VNNI GEMM: not run: {exc}")
        return
    lanes = tdsl.TensorIntrin.get(dot).desc.params[2].shape[0].value
    a8 = rng.integers(0, 256, (n, n)).astype("uint8")
    b8 = rng.integers(-128, 128, (n, n)).astype("int8")
    packed = np.ascontiguousarray(b8.reshape(n // 4, 4, n // lanes, lanes).transpose(2, 0, 3, 1))
    k8 = tdsl.build(int8_schedule(n, dot, lanes), target="cpu")
    c8 = k8(a8, packed)
    ok = np.array_equal(c8, a8.astype(np.int32) @ b8.astype(np.int32))
    t8 = k8.time(a8, packed, c8)
    print(f"int8 {dot:28s} {flops / t8 / 1e9:7.1f} GOP/s    ({t8 * 1e3:.2f} ms, exact: {ok}); "
          f"{t_tdsl / t8:.2f}x the fp32 GEMM's rate")


if __name__ == "__main__":
    main()
