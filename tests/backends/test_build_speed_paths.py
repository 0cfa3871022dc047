"""The cheaper build paths keep meaning.

* The fast entry is compiled `optnone` (not inlined into the tuple entry): it still rejects bad
  arguments with ArgumentError, and every benchmark kernel equals numpy through both entries.
* Register-tiled code (the GEMM) gets O1's function simplification pipeline (jit.SIMPLIFY);
  it still equals numpy.
* Loops the schedule vectorized wide (every vector loop storing >= 1024 bits per iteration, as
  a 32-lane fp32 loop) get no LLVM unrolling; narrower ones keep it.
* `simplify` shares one analyzer per loop scope: its output equals running
  tdsl.arith.simplify on each expression separately, as before.
* remove_no_op's buffer search stops at the first use but still drops unused allocations.
"""
import sys

import numpy as np
import pytest

import tdsl
from bench import numpy_ref
from bench.schedules import conv2d_schedule, gemm_schedule, softmax_schedule
from tdsl import ArgumentError
from tdsl.arith import simplify as arith_simplify
from tdsl.backends.llvm import codegen
from tdsl.backends.llvm.compile import register_tiled, wide_vector_loops
from tdsl.ir import IRMutator, PrimExpr, Range, structural_equal
from tdsl.lower import lower, passes_for

lower_simplify = sys.modules["tdsl.lower.simplify"]


def _rng():
    return np.random.default_rng(7)


def test_fast_entry_is_optnone_and_not_inlined():
    k = tdsl.build(softmax_schedule(8, 64))
    fast = next(line for line in k.source.splitlines() if line.startswith(f'define i32 @"{k._compiled.meta["symbol"]}"('))
    assert "optnone" in fast and "noinline" in fast and "alwaysinline" not in k.source
    assert codegen.ENTRY_ATTRIBUTES == ("noinline", "optnone")


def test_entries_reject_bad_arguments():
    k = tdsl.build(gemm_schedule(64))
    a, b = (_rng().standard_normal((64, 64), np.float32) for _ in range(2))
    with pytest.raises(ArgumentError, match="'A'"):
        k(a.astype(np.float64), b)
    with pytest.raises(ArgumentError, match="'B'"):
        k(a, b[:32])
    with pytest.raises(ArgumentError, match="'C'"):
        k(a, b, np.empty((32, 64), np.float32))
    # a non-contiguous or misaligned input takes the slow path and still computes the result
    c = k(np.asfortranarray(a), b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["gemm", "conv2d", "softmax"])
def test_benchmark_kernels_equal_numpy(case):
    r = _rng()
    if case == "gemm":
        k = tdsl.build(gemm_schedule(96))
        args = [r.standard_normal((96, 96), np.float32) for _ in range(2)]
        want, tol = args[0] @ args[1], 1e-4
    elif case == "conv2d":
        k = tdsl.build(conv2d_schedule(1, 16, 12, 16, 8))
        args = [r.standard_normal((1, 16, 12, 16), np.float32), r.standard_normal((8, 16, 3, 3), np.float32)]
        want, tol = numpy_ref.conv2d_im2col(*args), 1e-4
    else:
        k = tdsl.build(softmax_schedule(16, 256))
        args = [r.standard_normal((16, 256), np.float32)]
        want, tol = numpy_ref.softmax(args[0]), 1e-6
    out = np.empty(want.shape, np.float32)
    k(*args, out)                       # the fast entry (all arrays given: the tuple entry)
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(k(*args), want, rtol=tol, atol=tol)   # output allocated


SCALE = '''
@T.prim_func
def scale(A: T.Buffer((64, 1024), "float32"), B: T.Buffer((64, 1024), "float32")):
    for i, j in T.grid(64, 1024):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2)
'''


def vector_scale(lanes: int) -> tdsl.Schedule:
    """B = 2A with the column loop vectorized `lanes` wide."""
    sch = tdsl.Schedule(tdsl.parse(SCALE))
    _, j = sch.get_loops(sch.get_block("B"))
    sch.vectorize(sch.split(j, factors=[None, lanes])[1])
    return sch


def test_unrolling_choice():
    gemm = lower(gemm_schedule(96).func, target="cpu").body
    assert register_tiled(gemm)        # jit.SIMPLIFY (compile.pipeline_for)
    wide = lower(vector_scale(32).func, target="cpu").body
    assert wide_vector_loops(wide) and not register_tiled(wide)
    narrow = lower(vector_scale(8).func, target="cpu").body
    assert not wide_vector_loops(narrow) and not register_tiled(narrow)
    scalar = tdsl.parse('''
@T.prim_func
def add(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i in range(64):
        with T.block("b"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi] + T.float32(1)
''')
    assert not wide_vector_loops(lower(scalar, target="cpu").body)


class _PerExpression(IRMutator):
    """The former simplify: tdsl.arith.simplify on each expression with a copy of the ranges."""

    def __init__(self):
        self.ranges = {}

    def visit(self, node):
        if isinstance(node, PrimExpr) and node.dtype.lanes == 1 and (node.dtype.is_integer or node.dtype.is_bool):
            return arith_simplify(node, dict(self.ranges) or None)
        return super().visit(node)

    def visit_For(self, loop):
        from dataclasses import replace

        lo, ext = self.visit(loop.min), self.visit(loop.extent)
        self.ranges[loop.loop_var] = Range(lo, ext)
        body = self.visit(loop.body)
        del self.ranges[loop.loop_var]
        return replace(loop, min=lo, extent=ext, body=body)

    def visit_LetStmt(self, op):
        from dataclasses import replace

        return replace(op, value=self.visit(op.value), body=self.visit(op.body))


@pytest.mark.parametrize("make", [lambda: gemm_schedule(96), lambda: conv2d_schedule(1, 16, 12, 16, 8),
                                  lambda: softmax_schedule(16, 256)])
def test_scoped_simplify_equals_per_expression(make):
    func = make().func
    for p in passes_for("cpu"):
        if p.name == "simplify":
            want = func.with_body(_PerExpression().visit(func.body))
            got = lower_simplify.simplify(func)
            assert structural_equal(got.body, want.body)
        func = p(func)


def test_remove_no_op_drops_unused_allocation_only():
    func = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((8,), "float32")):
    unused = T.alloc_buffer((8,), "float32")
    used = T.alloc_buffer((8,), "float32")
    for i in range(8):
        used[i] = A[i]
    for i in range(8):
        A[i] = used[i] * T.float32(2)
''')
    low = lower(func, target="cpu")
    text = low.script()
    assert "unused" not in text and "used" in text
    a = np.arange(8, dtype=np.float32)
    tdsl.build(func)(a)
    np.testing.assert_array_equal(a, np.arange(8, dtype=np.float32) * 2)
