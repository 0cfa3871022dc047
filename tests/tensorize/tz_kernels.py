"""Kernels, intrinsics and checks shared by the tensorize tests."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl

GEMM = '''
@T.prim_func
def gemm(A: T.Buffer(({m}, {k}), "{dt}"), B: T.Buffer(({k}, {n}), "{dt}"), C: T.Buffer(({m}, {n}), "{dt}")):
    for i, j, k in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.{dt}(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''


def gemm(m: int = 32, n: int = 32, k: int = 32, dt: str = "float32") -> tdsl.PrimFunc:
    return tdsl.parse(GEMM.format(m=m, n=n, k=k, dt=dt))


DOUBLE16_DESC = '''
@T.prim_func
def double16_desc(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for j in range(16):
        with T.block("B"):
            vj = T.axis.spatial(16, j)
            B[vj] = A[vj] * T.float32(2)
'''

DOUBLE16_IMPL = '''
@T.prim_func
def double16_impl(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    B[T.Ramp(0, 1, 16)] = A[T.Ramp(0, 1, 16)] * T.Broadcast(T.float32(2), 16)
'''


def register_double16() -> str:
    """A tiny user intrinsic: B[0:16] = A[0:16] * 2 (generic LLVM vector code, any x86)."""
    if not tdsl.TensorIntrin.exists("double16"):
        tdsl.TensorIntrin.register("double16", tdsl.parse(DOUBLE16_DESC), tdsl.parse(DOUBLE16_IMPL))
    return "double16"


def tiled_gemm(m, n, k, mr, nr, kc, dt="float32"):
    """(schedule, loop to tensorize): GEMM tiled as i0, j0, k0, i1, j1, k1."""
    f = gemm(m, n, k, dt)
    sch = tdsl.Schedule(f)
    i, j, kk = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, factors=[None, mr])
    j0, j1 = sch.split(j, factors=[None, nr])
    k0, k1 = sch.split(kk, factors=[None, kc])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    return f, sch, i1


def same_results(func: tdsl.PrimFunc, original: tdsl.PrimFunc, args: list, tol: float = 1e-4) -> None:
    """Round trip through the printer, then interpret both on copies of `args`."""
    back = tdsl.parse(func.script())
    assert tdsl.structural_diff(back, func) is None, tdsl.structural_diff(back, func)
    want = [a.copy() for a in args]
    got = [a.copy() for a in args]
    tdsl.interpret(original, *want)
    tdsl.interpret(func, *got)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g.astype("float64"), w.astype("float64"), rtol=tol, atol=tol)


def refused(sch: tdsl.Schedule, step, *words: str) -> str:
    """`step()` raises ScheduleError containing `words`; the schedule is unchanged."""
    before, length = sch.func, len(sch.trace)
    with pytest.raises(tdsl.ScheduleError) as info:
        step()
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{w!r} not in:\n{msg}"
    assert sch.func is before and len(sch.trace) == length
    return msg


def cpu_build_available() -> bool:
    try:
        tdsl.build  # noqa: B018
    except (ImportError, AttributeError):
        return False
    return True
