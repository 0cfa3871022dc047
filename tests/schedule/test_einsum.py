"""reindex and pad_einsum (TensorIR semantics): meaning kept (interpreter vs numpy), structure
as TVM makes it, refusals explained with the schedule unchanged, trace replay."""
import numpy as np
import pytest

import tdsl


def matmul(m, n, k, init=True, dtype="float32"):
    zero = f"            with T.init():\n                C[vi, vj] = T.{dtype}(0)\n" if init else ""
    return tdsl.parse(f'''
@T.prim_func
def mm(A: T.Buffer(({m}, {k}), "{dtype}"), B: T.Buffer(({k}, {n}), "{dtype}"), C: T.Buffer(({m}, {n}), "{dtype}")):
    for i, j, k in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
{zero}            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
''')


TRANSPOSE = tdsl.parse('''
@T.prim_func
def tr(A: T.Buffer((8, 4), "float32"), B: T.Buffer((4, 8), "float32")):
    for i, j in T.grid(4, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vj, vi] * T.float32(2)
''')

CONV = tdsl.parse('''
@T.prim_func
def conv(X: T.Buffer((1, 2, 6, 7), "float32"), W: T.Buffer((3, 2, 3, 3), "float32"),
         Y: T.Buffer((1, 3, 4, 5), "float32")):
    for b, co, y, x, ci, r, s in T.grid(1, 3, 4, 5, 2, 3, 3):
        with T.block("conv"):
            vb, vk, vy, vx, vc, vr, vs = T.axis.remap("SSSSRRR", [b, co, y, x, ci, r, s])
            with T.init():
                Y[vb, vk, vy, vx] = T.float32(0)
            Y[vb, vk, vy, vx] = Y[vb, vk, vy, vx] + X[vb, vc, vy + vr, vx + vs] * W[vk, vc, vr, vs]
''')


def blocks(func):
    from tdsl.ir import Block, collect

    return [b.name for b in collect(func.body, Block) if b.name != "root"]


def test_pad_einsum_matmul(rng):
    sch = tdsl.Schedule(matmul(10, 5, 7))
    sch.pad_einsum(sch.get_block("C"), [4, 8, 4])
    assert {"A_pad", "B_pad", "C_pad", "C"} <= set(blocks(sch.func))
    shapes = {b.name: [int(s.value) for s in b.shape] for r in [sch.func.body] for b in r.block.alloc_buffers}
    assert shapes == {"A_pad": [12, 8], "B_pad": [8, 8], "C_pad": [12, 8]}
    a, b = rng.standard_normal((10, 7)).astype("float32"), rng.standard_normal((7, 5)).astype("float32")
    np.testing.assert_allclose(tdsl.interpret(sch, a, b), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tdsl.build(sch, target="cpu")(a, b), a @ b, rtol=1e-5, atol=1e-5)
    again = sch.trace.apply_to(matmul(10, 5, 7))
    assert again.func.script() == sch.func.script()


def test_pad_einsum_only_what_needs_it(rng):
    sch = tdsl.Schedule(matmul(8, 5, 4))
    sch.pad_einsum(sch.get_block("C"), [4, 4, 4])   # only j (5 -> 8) changes: A needs no copy
    assert "A_pad" not in blocks(sch.func) and {"B_pad", "C_pad"} <= set(blocks(sch.func))
    a, b = rng.standard_normal((8, 4)).astype("float32"), rng.standard_normal((4, 5)).astype("float32")
    np.testing.assert_allclose(tdsl.interpret(sch, a, b), a @ b, rtol=1e-5, atol=1e-5)
    before = sch.func
    sch.pad_einsum(sch.get_block("C"), [1, 1, 1])   # nothing to pad: no change
    assert sch.func.script() == before.script()


@pytest.mark.parametrize("func,padding,match", [
    (CONV, [1, 1, 1, 8, 1, 1, 1], "reindex"),                 # X[.., y + r, x + s]
    (matmul(10, 5, 7), [4, 1], "positive ints"),
    (matmul(10, 5, 7), [4, 1, 0], "positive ints"),
])
def test_pad_einsum_refusals(func, padding, match):
    sch = tdsl.Schedule(func)
    block = sch.get_block(blocks(func)[0])
    before = sch.func
    with pytest.raises(tdsl.ScheduleError, match=match):
        sch.pad_einsum(block, padding)
    assert sch.func is before


def test_pad_einsum_refuses_a_reduction_that_padding_would_change():
    func = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((6, 5), "float32"), C: T.Buffer((6,), "float32")):
    for i, k in T.grid(6, 5):
        with T.block("C"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                C[vi] = T.float32(0)
            C[vi] = C[vi] + T.exp(A[vi, vk])
''')
    sch = tdsl.Schedule(func)
    with pytest.raises(tdsl.ScheduleError, match="must be zero"):
        sch.pad_einsum(sch.get_block("C"), [1, 4])     # exp(0) = 1 would be summed
    sch.pad_einsum(sch.get_block("C"), [4, 1])         # padding the spatial iterator is safe
    a = np.random.default_rng(0).standard_normal((6, 5)).astype("float32")
    np.testing.assert_allclose(tdsl.interpret(sch, a), np.exp(a).sum(1), rtol=1e-5)


def test_reindex_read_and_write(rng):
    sch = tdsl.Schedule(TRANSPOSE)
    copy = sch.reindex(sch.get_block("B"), "A")
    assert copy.name == "A_reindex"
    a = rng.standard_normal((8, 4)).astype("float32")
    np.testing.assert_allclose(tdsl.interpret(sch, a), a.T * 2)
    sch2 = tdsl.Schedule(matmul(6, 5, 4))
    out = sch2.reindex(sch2.get_block("C"), ("write", 0))
    assert out.name == "C_reindex"
    x, y = rng.standard_normal((6, 4)).astype("float32"), rng.standard_normal((4, 5)).astype("float32")
    np.testing.assert_allclose(tdsl.build(sch2, target="cpu")(x, y), x @ y, rtol=1e-5, atol=1e-5)


def test_reindex_conv_input_makes_an_einsum(rng):
    sch = tdsl.Schedule(CONV)
    sch.reindex(sch.get_block("conv"), "X")
    shape = [int(s.value) for b in sch.func.body.block.alloc_buffers for s in b.shape]
    assert shape == [1, 4, 5, 2, 3, 3]   # (b, y, x, ci, r, s): the iterators X's indices use
    sch.pad_einsum(sch.get_block("conv"), [1, 1, 1, 8, 1, 1, 1])   # now plain: x 5 -> 8
    x, w = rng.standard_normal((1, 2, 6, 7)).astype("float32"), rng.standard_normal((3, 2, 3, 3)).astype("float32")
    np.testing.assert_allclose(tdsl.build(sch, target="cpu")(x, w), tdsl.interpret(CONV, x, w), rtol=1e-5, atol=1e-5)


def test_reindex_refusals():
    func = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32")):
    for i, j in T.grid(4, 4):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vj, vi] + A[vi, vj]
''')
    sch = tdsl.Schedule(func)
    with pytest.raises(tdsl.ScheduleError, match="one access pattern"):
        sch.reindex(sch.get_block("B"), "A")
    with pytest.raises(tdsl.ScheduleError, match="no buffer named"):
        sch.reindex(sch.get_block("B"), "Z")
    with pytest.raises(tdsl.ScheduleError, match="out of range"):
        sch.reindex(sch.get_block("B"), ("read", 5))
    assert sch.func is func or sch.func.script() == tdsl.Schedule(func).func.script()


def test_pad_einsum_of_an_accumulation_starts_from_the_output(rng):
    sch = tdsl.Schedule(matmul(10, 5, 7, init=False))
    sch.pad_einsum(sch.get_block("C"), [4, 8, 4])
    assert {"C_pad_in", "C_pad"} <= set(blocks(sch.func))
    a, b = rng.standard_normal((10, 7)).astype("float32"), rng.standard_normal((7, 5)).astype("float32")
    c0 = rng.standard_normal((10, 5)).astype("float32")
    c = c0.copy()
    tdsl.build(sch, target="cpu")(a, b, c)
    np.testing.assert_allclose(c, c0 + a @ b, rtol=1e-5, atol=1e-5)
