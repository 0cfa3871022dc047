"""`python -m tdsl`: the demo. A matmul written in tdsl script, scheduled step by step with the
IR printed between steps, built for the CPU, called like a numpy function and checked."""
from __future__ import annotations

import sys
import time

import numpy as np

import tdsl
from tdsl import T

N = 256


@T.prim_func
def matmul(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"), C: T.Buffer((N, N), "float32")):  # type: ignore[valid-type]
    for i, j, k in T.grid(N, N, N):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def step(title: str, sch) -> None:
    print(f"\n# --- {title} " + "-" * max(0, 60 - len(title)))
    sch.show()


def main() -> int:
    print(f"tdsl {tdsl.__version__}: the kernel as written")
    matmul.show()
    sch = tdsl.Schedule(matmul)
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    i0, i1 = sch.split(i, factors=[None, 8])
    j0, j1 = sch.split(j, factors=[None, 32])
    step("split i by 8 and j by 32", sch)
    sch.reorder(i0, j0, k, i1, j1)
    step("reorder into register tiles", sch)
    sch.parallel(i0)
    sch.vectorize(j1)
    step("parallel outer rows, vectorize the inner columns", sch)
    print("\n# the trace replays every step:")
    print(sch.trace)

    t0 = time.perf_counter()
    kernel = tdsl.build(sch, target="cpu")
    print(f"\nbuilt for the CPU in {time.perf_counter() - t0:.3f} s")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((N, N), dtype=np.float32)
    b = rng.standard_normal((N, N), dtype=np.float32)
    c = kernel(a, b)
    ok = np.allclose(c, a @ b, rtol=1e-4, atol=1e-3)
    seconds = kernel.time(a, b, c)
    print(f"C = kernel(A, B) matches numpy: {ok}; {2 * N ** 3 / seconds / 1e9:.1f} GFLOP/s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
