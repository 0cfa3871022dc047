"""tdsl.torch: kernels as torch.library custom ops (eager, opcheck, torch.compile fullgraph,
autograd with backward=), and torch tensors in -> torch tensors out for a kernel called directly."""
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tdsl
from tdsl import T

try:
    import torch
except ImportError:   # the [torch] extra is not installed
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (pip install -e '.[torch]')")


@T.prim_func
def add_one(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.spatial(n, i)
            B[vi] = A[vi] + T.float32(1)


@T.prim_func
def scale_rows(A: T.Buffer(("m", 4), "float32"), B: T.Buffer(("m", 4), "float32"), s: T.float32):
    for i, j in T.grid(m, 4):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * s


@T.prim_func
def split_sum(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32"), C: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("BC"):
            vi = T.axis.spatial(n, i)
            B[vi] = A[vi] + A[vi]
            C[vi] = A[vi] * A[vi]


@T.prim_func
def accumulate(A: T.Buffer(("n",), "float32"), C: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("C"):
            vi = T.axis.spatial(n, i)
            C[vi] = C[vi] + A[vi]


@T.prim_func
def square(A: T.Buffer(("n",), "float64"), B: T.Buffer(("n",), "float64")):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.spatial(n, i)
            B[vi] = A[vi] * A[vi]


@T.prim_func
def square_grad(A: T.Buffer(("n",), "float64"), dB: T.Buffer(("n",), "float64"), dA: T.Buffer(("n",), "float64")):
    for i in range(n):
        with T.block("dA"):
            vi = T.axis.spatial(n, i)
            dA[vi] = T.float64(2) * A[vi] * dB[vi]


@T.prim_func
def unsized_output(A: T.Buffer(("n",), "float32"), B: T.Buffer(("k",), "float32")):
    for i in range(1):
        with T.block("B"):
            vi = T.axis.spatial(1, i)
            B[vi] = A[vi]


def test_import_tdsl_does_not_import_torch():
    code = ("import sys, numpy as np, tdsl\n"
            "k = tdsl.build(tdsl.parse('''" + add_one.script().replace("'", '"') + "'''))\n"
            "k(np.ones(3, np.float32))\n"
            "assert 'torch' not in sys.modules, 'import tdsl (and a build and call) imported torch'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- a kernel called directly --------------------------------------------------------------------

@needs_torch
def test_direct_call_returns_torch_for_torch_inputs():
    k = tdsl.build(split_sum)
    a = torch.arange(5, dtype=torch.float32)
    b, c = k(a)
    assert isinstance(b, torch.Tensor) and isinstance(c, torch.Tensor)
    torch.testing.assert_close(b, a + a)
    torch.testing.assert_close(c, a * a)
    out = tdsl.build(add_one)(A=a)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, a + 1)
    assert isinstance(tdsl.build(add_one)(np.ones(3, np.float32)), np.ndarray)   # numpy stays numpy


# -- custom ops ----------------------------------------------------------------------------------

@needs_torch
def test_signature_roles_and_schema():
    import tdsl.torch as tt

    assert tt.schema(tt.signature(scale_rows)) == "(Tensor A, float s) -> Tensor"
    assert tt.schema(tt.signature(split_sum)) == "(Tensor A) -> (Tensor, Tensor)"
    assert tt.schema(tt.signature(accumulate)) == "(Tensor A, Tensor(a!) C) -> ()"


@needs_torch
def test_custom_op_matches_numpy_and_passes_opcheck():
    import tdsl.torch as tt

    op = tt.custom_op("tdsl_test::scale_rows", scale_rows)          # a PrimFunc: built on first use
    op2 = tt.custom_op("tdsl_test::split_sum", tdsl.build(split_sum))   # a built kernel
    a = torch.randn(7, 4)
    torch.testing.assert_close(op(a, 2.5), a * 2.5)
    b, c = op2(a[0])
    torch.testing.assert_close(b, a[0] * 2)
    torch.testing.assert_close(c, a[0] * a[0])
    # a non-contiguous input is read through a contiguous copy
    t = torch.randn(4, 7).t()
    torch.testing.assert_close(op(t, -1.0), -t)
    for o, args in ((op, (a, 0.5)), (op2, (a[1],)), (op, (torch.randn(0, 4), 1.0))):
        result = torch.library.opcheck(o, args)
        assert set(result.values()) == {"SUCCESS"}, result


@needs_torch
def test_mutated_buffer_is_updated_in_place():
    import tdsl.torch as tt

    op = tt.custom_op("tdsl_test::accumulate", accumulate)
    a, c = torch.arange(4.0), torch.ones(4)
    assert op(a, c) is None
    torch.testing.assert_close(c, torch.arange(4.0) + 1)
    assert set(torch.library.opcheck(op, (a, torch.zeros(4))).values()) == {"SUCCESS"}


@needs_torch
def test_torch_compile_fullgraph_two_ops():
    import tdsl.torch as tt

    op1 = tt.custom_op("tdsl_test::add_one_c", add_one)
    op2 = tt.custom_op("tdsl_test::scale_rows_c", scale_rows)

    class Model(torch.nn.Module):
        def forward(self, x):
            y = op1(x.reshape(-1)).reshape(x.shape)
            return torch.relu(op2(y, 0.5)) - 1

    model = Model()
    compiled = torch.compile(model, fullgraph=True)   # a graph break would raise
    for rows in (6, 9):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x), model(x))
        torch.testing.assert_close(model(x), torch.relu((x + 1) * 0.5) - 1)


@needs_torch
def test_backward_kernel_gives_gradients():
    import tdsl.torch as tt

    op = tt.custom_op("tdsl_test::square", square, backward=square_grad)
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    (op(x) * torch.arange(6.0, dtype=torch.float64)).sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach() * torch.arange(6.0, dtype=torch.float64))
    assert torch.autograd.gradcheck(op, (torch.randn(5, dtype=torch.float64, requires_grad=True),))
    result = torch.library.opcheck(op, (torch.randn(3, dtype=torch.float64, requires_grad=True),))
    assert set(result.values()) == {"SUCCESS"}, result


@needs_torch
def test_bad_uses_are_clear_errors():
    import tdsl.torch as tt

    op = tt.custom_op("tdsl_test::add_one_e", add_one)
    torch.testing.assert_close(op(torch.zeros(2)), torch.ones(2))   # built now: later calls take the fast path
    with pytest.raises(tdsl.ArgumentError, match="parameter 'A': expected dtype (torch.)?float32, got (torch.)?float64"):
        op(torch.ones(3, dtype=torch.float64))
    with pytest.raises(tdsl.ArgumentError, match="expected 1 dimensions"):
        op(torch.ones(3, 2))
    with pytest.raises(tdsl.ArgumentError, match=r"'A': expected shape \(m, 4\), got shape with A.shape\[1\] = 5"):
        tt.custom_op("tdsl_test::scale_e", scale_rows)(torch.ones(3, 5), 1.0)
    assert op(torch.ones(3, device="meta")).device.type == "meta"   # the fake implementation
    with pytest.raises(tdsl.ArgumentError, match="already registered"):
        tt.custom_op("tdsl_test::add_one_e", add_one)
    with pytest.raises(tdsl.ArgumentError, match="'k' that no input gives"):
        tt.custom_op("tdsl_test::unsized", unsized_output)
    with pytest.raises(tdsl.ArgumentError, match="namespace::name"):
        tt.custom_op("no_namespace", add_one)
    with pytest.raises(tdsl.ArgumentError, match="must take the forward's 1 input"):
        tt.custom_op("tdsl_test::square_bad", square, backward=square)
    mutating = tt.custom_op("tdsl_test::accumulate_e", accumulate)
    with pytest.raises(tdsl.ArgumentError, match="'C' is updated in place and must be a contiguous"):
        mutating(torch.ones(3), torch.ones(6)[::2])


@needs_torch
@pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_tensors_run_on_the_gpu():
    import tdsl.torch as tt

    s = tdsl.Schedule(add_one)
    i, = s.get_loops(s.get_block("B"))
    bx, tx = s.split(i, [None, 64])
    s.bind(bx, "blockIdx.x")
    s.bind(tx, "threadIdx.x")
    op = tt.custom_op("tdsl_test::add_one_gpu", s.func)
    x = torch.randn(1000, device="cuda")
    torch.testing.assert_close(op(x), x + 1)
    torch.testing.assert_close(op(x.cpu()), x.cpu() + 1)   # the same op on the CPU


@T.prim_func
def offset(A: T.Buffer(("n", "m"), "int32"), B: T.Buffer(("m", "n"), "int32"), k: T.int8):
    for i, j in T.grid(m, n):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vj, vi] + T.cast(k, "int32")


@needs_torch
def test_fast_and_checked_calls_agree():
    import tdsl.torch as tt

    op = tt.custom_op("tdsl_test::offset", tdsl.build(offset))
    for n, m in ((3, 5), (1, 7), (0, 4)):
        a = torch.arange(n * m, dtype=torch.int32).reshape(n, m)
        want = a.t() + 3
        torch.testing.assert_close(op(a, 3), want)                  # the generated fast call
        torch.testing.assert_close(op(a.t().contiguous().t(), 3), want)   # non-contiguous: the checked path
    with pytest.raises(tdsl.ArgumentError, match="out of the range of int8"):
        op(torch.zeros(2, 2, dtype=torch.int32), 300)
    with pytest.raises(RuntimeError, match="Expected a value of type 'int' for argument 'k'"):   # torch's schema check
        op(torch.zeros(2, 2, dtype=torch.int32), 1.5)


@needs_torch
def test_direct_call_checks_and_odd_tensors():
    k = tdsl.build(split_sum)
    with pytest.raises(tdsl.ArgumentError, match="parameter 'A': expected dtype float32, got float64"):
        k(torch.ones(3, dtype=torch.float64))
    b, c = torch.empty(3), torch.empty(3)
    assert k(torch.arange(3.0), b, c) is None                     # all given: written in place
    torch.testing.assert_close(c, torch.tensor([0.0, 1.0, 4.0]))
    a = torch.arange(6.0)[::2]                                    # a strided view: read through a copy
    b, c = k(a)
    torch.testing.assert_close(b, a * 2)
    x = torch.ones(3, requires_grad=True)
    b, c = k(x)
    assert isinstance(b, torch.Tensor) and not b.requires_grad


@needs_torch
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                    reason="the CUDA emulator needs a host C++ compiler")
def test_emulated_cuda_kernel_returns_torch_for_torch_inputs():
    pytest.importorskip("cuda.bindings")
    s = tdsl.Schedule(add_one)
    i, = s.get_loops(s.get_block("B"))
    bx, tx = s.split(i, [None, 32])
    s.bind(bx, "blockIdx.x")
    s.bind(tx, "threadIdx.x")
    k = tdsl.build(s, target="cuda", emulate=True)
    a = torch.arange(40, dtype=torch.float32)
    out = k(a)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, a + 1)
    assert isinstance(k(a.numpy()), np.ndarray)
