"""tensorize's general matching: description dimensions on any real dimensions (a tile in
non-adjacent or permuted dimensions of a larger buffer), operands of + and * in either order,
and precise errors for what still does not match."""
from __future__ import annotations

import numpy as np
import pytest
from sched_check import check

import tdsl
from tdsl.target import cpu_features

RNG = np.random.default_rng(8)
HAS_AVX2 = {"avx2", "fma"} <= cpu_features("cpu")

# A 1x1 convolution in NCHW: the micro-kernel's C tile is Y[b, k0:k0+MR, y, x0:x0+NR] (dims 1
# and 3 of a 4-d buffer, row stride H*W) and its B tile X[b, :, y, x0:x0+NR] (dims 1 and 3).
CONV1X1 = '''
@T.prim_func
def conv1x1(X: T.Buffer((2, 16, 3, 16), "float32"), W: T.Buffer((4, 16), "float32"),
            Y: T.Buffer((2, 4, 3, 16), "float32")):
    for b, k, y, x, c in T.grid(2, 4, 3, 16, 16):
        with T.block("conv"):
            vb, vk, vy, vx, vc = T.axis.remap("SSSSR", [b, k, y, x, c])
            with T.init():
                Y[vb, vk, vy, vx] = T.float32(0)
            Y[vb, vk, vy, vx] = {update}
'''
IN_ORDER = "Y[vb, vk, vy, vx] + W[vk, vc] * X[vb, vc, vy, vx]"
INTRIN = "x86.avx2.fp32_2x8x16"


def conv1x1(update: str = IN_ORDER) -> tdsl.Schedule:
    """The 1x1 convolution, loops tiled to the 2 x 8 x 16 micro-kernel (k1, x1, c innermost)."""
    sch = tdsl.Schedule(tdsl.parse(CONV1X1.format(update=update)))
    conv = sch.get_block("conv")
    b, k, y, x, c = sch.get_loops(conv)
    k0, k1 = sch.split(k, factors=[None, 2])
    x0, x1 = sch.split(x, factors=[None, 8])
    sch.reorder(b, y, k0, x0, k1, x1, c)
    sch.decompose_reduction(conv, k1)
    return sch, k1


def conv1x1_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.einsum("kc,bcyx->bkyx", w, x)


def check_builds_equal(sch: tdsl.Schedule, ref, *inputs) -> None:
    """Interpreter (through the description) and, with AVX2, the CPU build (through the
    implementation, which must be what runs) both equal numpy."""
    np.testing.assert_allclose(tdsl.interpret(sch.func, *inputs), ref(*inputs), rtol=1e-5, atol=1e-5)
    if not HAS_AVX2:
        return
    kernel = tdsl.build(sch)
    assert "llvm.fma.v8f32" in kernel.lowered.script()
    np.testing.assert_allclose(kernel(*inputs), ref(*inputs), rtol=1e-5, atol=1e-5)


def conv_inputs() -> tuple[np.ndarray, np.ndarray]:
    return (RNG.standard_normal((2, 16, 3, 16), dtype=np.float32), RNG.standard_normal((4, 16), dtype=np.float32))


# description dimensions on any real dimensions ------------------------------------------------

def test_tile_in_non_adjacent_dims_of_a_4d_buffer():
    sch, k1 = conv1x1()
    sch.tensorize(k1, INTRIN)
    assert INTRIN in sch.func.script()
    x, w = conv_inputs()
    check_builds_equal(sch, lambda x, w: conv1x1_ref(x, w), x, w)


@pytest.mark.skipif(not HAS_AVX2, reason="the x86 implementation needs AVX2 + FMA")
def test_non_adjacent_tile_lowers_to_the_mapped_dimensions():
    """The implementation's B[k, x] is X[b, c0 + k, y, x0 + x]: one step of its k is one
    channel of X (H*W = 48 elements), its vector runs along X's columns."""
    sch, k1 = conv1x1()
    sch.tensorize(k1, INTRIN)
    text = tdsl.lower(sch, target="cpu").script()
    assert "X[T.Ramp(b * 768 + k * 48 + y * 16 + x_0 * 8, 1, 8)]" in text


TRANSPOSED_A = '''
@T.prim_func
def gemm_at(At: T.Buffer((16, 8), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((8, 16), "float32")):
    for i, j, k in T.grid(8, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + At[vk, vi] * B[vk, vj]
'''


def test_permuted_dims_where_the_strides_are_symbolic():
    """A stored transposed: the description's A[i, k] is At[k, i] (A's strides are symbolic)."""
    sch = tdsl.Schedule(tdsl.parse(TRANSPOSED_A))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 2])
    j0, j1 = sch.split(j, factors=[None, 8])
    sch.reorder(i0, j0, i1, j1, k)
    sch.decompose_reduction(c, i1)
    sch.tensorize(i1, INTRIN)
    at = RNG.standard_normal((16, 8), dtype=np.float32)
    b = RNG.standard_normal((16, 16), dtype=np.float32)
    check_builds_equal(sch, lambda at, b: at.T @ b, at, b)


# operands in either order ------------------------------------------------------------------

@pytest.mark.parametrize("update", [
    "Y[vb, vk, vy, vx] + X[vb, vc, vy, vx] * W[vk, vc]",   # product swapped
    "W[vk, vc] * X[vb, vc, vy, vx] + Y[vb, vk, vy, vx]",   # sum swapped
    "X[vb, vc, vy, vx] * W[vk, vc] + Y[vb, vk, vy, vx]",   # both
])
def test_commutative_operands_match_in_either_order(update):
    sch, k1 = conv1x1(update)
    sch.tensorize(k1, INTRIN)
    x, w = conv_inputs()
    check_builds_equal(sch, lambda x, w: conv1x1_ref(x, w), x, w)


# real mismatches still fail, precisely ------------------------------------------------------

def refused(update: str) -> str:
    sch, k1 = conv1x1(update)
    with pytest.raises(tdsl.ScheduleError) as info:
        sch.tensorize(k1, INTRIN)
    return str(info.value)


def test_subtraction_is_not_commutative():
    msg = refused("W[vk, vc] * X[vb, vc, vy, vx] - Y[vb, vk, vy, vx]")
    assert "does not match the description of 'x86.avx2.fp32_2x8x16': the code computes W[" in msg
    assert "where the description of 'x86.avx2.fp32_2x8x16' computes C[vk_i, vx_i] + A[vk_i, vc] * B[vc, vx_i]" in msg


@pytest.mark.parametrize("update", [
    "Y[vb, vk, vy, vx] + W[vk, vc] * X[vb, vc, vx % 3, vy]",
    "Y[vb, vk, vy, vx] + X[vb, vc, vx % 3, vy] * W[vk, vc]",
])
def test_wrong_access_is_named_in_either_operand_order(update):
    """X read at a row that is no tile of it: the message names X's access and the dimension
    that does not fit, whichever order the operands of the product come in."""
    msg = refused(update)
    assert "the code reads X[vb_o, vc, (vx_o * 8 + vx_i) % 3, vy_o] where the description reads B[vc, vx_i]" in msg
    assert "dimension 2 differs by (vx_o * 8 + vx_i) % 3 - vx_i, which varies inside the tile" in msg


def test_tile_dimension_with_the_wrong_stride_is_named():
    """x maps to dimension 2 of a (2, 16, 16, 3) input, whose stride is 3, where the
    micro-kernel's B needs unit stride along NR."""
    src = CONV1X1.replace('X: T.Buffer((2, 16, 3, 16)', 'X: T.Buffer((2, 16, 16, 3)')
    sch = tdsl.Schedule(tdsl.parse(src.format(update="Y[vb, vk, vy, vx] + W[vk, vc] * X[vb, vc, vx, vy]")))
    conv = sch.get_block("conv")
    b, k, y, x, c = sch.get_loops(conv)
    k0, k1 = sch.split(k, factors=[None, 2])
    x0, x1 = sch.split(x, factors=[None, 8])
    sch.reorder(b, y, k0, x0, k1, x1, c)
    sch.decompose_reduction(conv, k1)
    with pytest.raises(tdsl.ScheduleError) as info:
        sch.tensorize(k1, INTRIN)
    msg = str(info.value)
    assert "buffer X has stride 3 in dimension 2" in msg and "needs 1 for its operand B" in msg


def test_tile_iterator_in_no_dimension_is_refused():
    """W read at a fixed channel: the reduction iterator appears in no dimension of W."""
    msg = refused("Y[vb, vk, vy, vx] + W[vk, 0] * X[vb, vc, vy, vx]")
    assert "the code reads W[vk_o * 2 + vk_i, 0] where the description reads A[vk_i, vc]" in msg
    assert "dimension 1 differs by" in msg and "varies inside the tile" in msg


def test_blockize_keeps_the_declared_read_order():
    # TVM's te GEMM declares T.reads(A, B) (the C it updates last): after blockize, read 0 is
    # still A, so TVM's cache_read(block, 0, ...) caches A
    f = tdsl.parse('''
@T.prim_func
def gemm(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    for i, j, k in T.grid(32, 32, 32):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
''')
    sch = tdsl.Schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i, ii = sch.split(i, factors=[None, 16])
    sch.reorder(i, j, k, ii)
    outer = sch.blockize(ii)
    assert [r.buffer.name for r in sch.get(outer).reads] == ["A", "B", "C"]
    assert sch.get(sch.cache_read(outer, 0, "shared")).name == "A_shared"
    check(sch, f)
