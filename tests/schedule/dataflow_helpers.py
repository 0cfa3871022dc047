"""Shared by the dataflow schedule tests: extra kernels and the docstring-example runner.

Meaning and round trip are checked with `sched_check.check`, refusals with
`sched_check.expect_error` (the core's shared helpers).
"""
from __future__ import annotations

import inspect
import re
import textwrap

from sched_check import check

import tdsl
from tdsl import T

STENCIL = '''
@T.prim_func
def stencil(A: T.Buffer((16,), "float32"), C: T.Buffer((15,), "float32")):
    B = T.alloc_buffer((16,), "float32")
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            B[vi] = A[vi] * T.float32(2)
    for i in range(15):
        with T.block("C"):
            vi = T.axis.spatial(15, i)
            C[vi] = B[vi] + B[vi + 1]
'''

CHAIN = '''
@T.prim_func
def chain(A: T.Buffer((16, 8), "float32"), D: T.Buffer((16, 8), "float32")):
    B = T.alloc_buffer((16, 8), "float32")
    C = T.alloc_buffer((16, 8), "float32")
    for i, j in T.grid(16, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(16, 8):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] + T.float32(1)
    for i, j in T.grid(16, 8):
        with T.block("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = T.exp(C[vi, vj])
'''

SYMBOLIC_CHAIN = '''
@T.prim_func
def symchain(A: T.Buffer(("n", 8), "float32"), C: T.Buffer(("n", 8), "float32")):
    B = T.alloc_buffer((n, 8), "float32")
    for i, j in T.grid(n, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(3)
    for i, j in T.grid(n, 8):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj] - T.float32(1)
'''

ROWMAX = '''
@T.prim_func
def rowmax(A: T.Buffer((6, 24), "float32"), B: T.Buffer((6,), "float32")):
    for i, k in T.grid(6, 24):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(-3.4e38)
            B[vi] = T.max(B[vi], A[vi, vk])
'''

ROWSUM_THEN_SCALE = '''
@T.prim_func
def rowsum_scale(A: T.Buffer((8, 16), "float32"), C: T.Buffer((8, 16), "float32")):
    S = T.alloc_buffer((8,), "float32")
    for i, k in T.grid(8, 16):
        with T.block("S"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                S[vi] = T.float32(0)
            S[vi] = S[vi] + A[vi, vk]
    for i, j in T.grid(8, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] / S[vi]
'''


def parse(text: str) -> tdsl.PrimFunc:
    return tdsl.parse(text)


def loops(sch: tdsl.Schedule, block: str):
    """The loops around block `block`."""
    return sch.get_loops(sch.get_block(block))


def _section(doc: str, title: str) -> str:
    m = re.search(rf"^\s*{title}::\n\n(.*?)(?=^\s*\w+::\n|\Z)", doc, re.DOTALL | re.MULTILINE)
    assert m, f"no {title}:: section"
    return textwrap.dedent(m.group(1)).strip() + "\n"


def run_docstring_example(name: str) -> None:
    """Execute the Before / Call / After example of Schedule.<name>; check the result."""
    doc = inspect.getdoc(getattr(tdsl.Schedule, name))
    before = tdsl.parse(_section(doc, "Before"))
    after = tdsl.parse(_section(doc, "After"))
    scope = {"tdsl": tdsl, "T": T, "before": before}
    exec(_section(doc, "Call"), scope)  # noqa: S102 - the docstring example is the test
    sch = scope["sch"]
    assert tdsl.structural_diff(sch.func, after) is None, tdsl.structural_diff(sch.func, after)
    check(sch, before)
