"""The one check every schedule test passes its result through, plus shared kernels.

`check(sch_or_func, original)`: the print -> parse round trip is structurally equal, and the
scheduled function computes what `original` computes on random inputs (tdsl.interpret).
`same_on_cpu(sch_or_func, original)`: the same, with CPU builds of both.
`expect_error(sch, step, *names)`: the step raises ScheduleError naming `names`, and the
schedule is left exactly as it was (same function object, same trace).
"""
from __future__ import annotations

import numpy as np
import pytest

import tdsl

MATMUL = '''
@T.prim_func
def matmul(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''

ELEMWISE2 = '''
@T.prim_func
def elemwise(A: T.Buffer((12, 10), "float32"), C: T.Buffer((12, 10), "float32")):
    B = T.alloc_buffer((12, 10), "float32")
    for i, j in T.grid(12, 10):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(12, 10):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] + T.float32(1)
'''

ROWSUM = '''
@T.prim_func
def rowsum(A: T.Buffer((9, 20), "float32"), B: T.Buffer((9,), "float32")):
    for i, k in T.grid(9, 20):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vk]
'''

SYMBOLIC = '''
@T.prim_func
def scale(A: T.Buffer(("n", 8), "float32"), B: T.Buffer(("n", 8), "float32")):
    for i, j in T.grid(n, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(3)
'''

THREE_BLOCKS = '''
@T.prim_func
def mlp(A: T.Buffer((32, 32), "float32"), W: T.Buffer((32, 32), "float32"), D: T.Buffer((32, 32), "float32")):
    C = T.alloc_buffer((32, 32), "float32")
    E = T.alloc_buffer((32, 32), "float32")
    for i, j, k in T.grid(32, 32, 32):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * W[vk, vj]
    for i, j in T.grid(32, 32):
        with T.block("E"):
            vi, vj = T.axis.remap("SS", [i, j])
            E[vi, vj] = T.max(C[vi, vj], T.float32(0))
    for i, j in T.grid(32, 32):
        with T.block("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = E[vi, vj] + A[vi, vj]
'''

KERNELS = {"matmul": MATMUL, "elemwise": ELEMWISE2, "rowsum": ROWSUM}


def kernel(name_or_text: str) -> tdsl.PrimFunc:
    """A kernel of this file by name (see KERNELS), or parsed from script text."""
    return tdsl.parse(KERNELS.get(name_or_text, name_or_text))


def _inputs(func: tdsl.PrimFunc, dims: dict[str, int], rng) -> list[np.ndarray]:
    arrays = []
    for p in func.params:
        assert hasattr(p, "shape"), f"random inputs are for buffers only, not scalar {p.name}: pass args="
        shape = tuple(dims[s.name] if hasattr(s, "name") else int(s.value) for s in p.shape)
        arrays.append(rng.standard_normal(shape).astype(str(p.dtype)))
    return arrays


def check(scheduled, original: tdsl.PrimFunc, dims: dict[str, int] | None = None, seed: int = 0,
          args: list | None = None, tol: float = 1e-5) -> None:
    """Round trip (parse(script(f)) == f) and same results as `original` on random inputs
    (or on `args`, the arguments in parameter order, scalars included)."""
    func = scheduled.func if isinstance(scheduled, tdsl.Schedule) else scheduled
    text = func.script()
    back = tdsl.parse(text)
    diff = tdsl.structural_diff(back, func)
    assert diff is None, f"print -> parse round trip changed the function:\n{diff}\n{text}"
    interpret = tdsl.interpret
    if args is None:
        args = _inputs(original, dims or {}, np.random.default_rng(seed))
    want = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    got = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    interpret(original, *want)
    interpret(func, *got)
    for p, w, g in zip(original.params, want, got):
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g.astype("float64"), w.astype("float64"), rtol=tol, atol=tol,
                                       err_msg=f"buffer {p.name} differs\n{text}")


def same_on_cpu(scheduled, original: tdsl.PrimFunc, seed: int = 0, tol: float = 1e-5) -> None:
    """A CPU build of the scheduled function computes what a CPU build of `original` computes
    on random inputs (constant shapes)."""
    func = scheduled.func if isinstance(scheduled, tdsl.Schedule) else scheduled
    args = _inputs(original, {}, np.random.default_rng(seed))
    want, got = [a.copy() for a in args], [a.copy() for a in args]
    tdsl.build(original)(*want)
    tdsl.build(func)(*got)
    for p, w, g in zip(original.params, want, got):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"buffer {p.name} differs")


def expect_error(sch: tdsl.Schedule, step, *names: str) -> str:
    """`step()` raises ScheduleError mentioning every one of `names`; `sch` is left untouched."""
    before = sch.func
    trace_len = len(sch.trace)
    with pytest.raises(tdsl.ScheduleError) as info:
        step()
    message = str(info.value)
    for name in names:
        assert name in message, f"{name!r} is not in the message:\n{message}"
    assert sch.func is before, "a refused step replaced the function"
    assert tdsl.structural_equal(sch.func, before)
    assert len(sch.trace) == trace_len, "a refused step was recorded in the trace"
    return message
