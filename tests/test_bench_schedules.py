"""Every schedule of bench/schedules.py computes what numpy computes (small sizes; correctness
only: timings belong to bench/run.py, never to tests)."""
import pathlib
import platform
import sys

import numpy as np
import pytest

import tdsl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "bench"))

import numpy_ref
import schedules

RNG = np.random.default_rng(7)
AVX2, AVX512 = "llvm -mcpu=x86-64-v3", "llvm -mcpu=x86-64-v4"   # scheduling for a CPU needs no such host


def _roundtrip(sch: tdsl.Schedule) -> None:
    """The scheduled function prints as tdsl that parses back to the same function."""
    tdsl.assert_structural_equal(tdsl.parse(sch.func.script()), sch.func)


@pytest.mark.parametrize("m,n,k", [(64, 64, 64), (48, 32, 40), (20, 24, 16)])
def test_gemm(m, n, k):
    a = RNG.standard_normal((m, k), dtype=np.float32)
    b = RNG.standard_normal((k, n), dtype=np.float32)
    sch = schedules.gemm_schedule(m, n, k)
    _roundtrip(sch)
    c = tdsl.build(sch)(a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_gemm_tiles_divide_the_extents():
    for size in (512, 960, 1000, 1024, 2048, 48):
        mr, nr, mc, kc = schedules.gemm_tiles(size, size, size)
        nc = schedules.gemm_nc(size, nr)
        assert kc * nr * 4 <= schedules.L1_SLIVER_BYTES
        assert size % mr == 0 and size % nr == 0 and size % mc == 0 and size % kc == 0 and mc % mr == 0
        assert size % nc == 0 and nc % nr == 0
        if size >= 512:
            assert (size // mc) % 2 == 0  # the row blocks split evenly over 2 cores
            assert kc >= 64  # the largest fitting divisor, not a small one from a list (960: 240)


@pytest.mark.parametrize("pack_a,pack_c,pack_b", [(True, True, True), (True, False, True), (False, True, True),
                                                  (False, False, False), (True, True, False)])
def test_gemm_packing_switches(pack_a, pack_c, pack_b):
    """Every combination of packed / in-place operands computes the same product, with more than
    one block of rows, of columns (jc) and of k so that every loop around the tile runs."""
    a = RNG.standard_normal((32, 48), dtype=np.float32)
    b = RNG.standard_normal((48, 64), dtype=np.float32)
    sch = schedules.gemm_schedule(32, 64, 48, tiles=(4, 16, 16, 16), nc=32,
                                  pack_a=pack_a, pack_c=pack_c, pack_b=pack_b)
    trace = str(sch.trace)
    assert ('buffer="A"' in trace) == pack_a and ('buffer="C"' in trace) == pack_c
    _roundtrip(sch)
    np.testing.assert_allclose(tdsl.build(sch)(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_gemm_micro_kernel_reads_packed_a_transposed():
    """With A packed to (i // MR, k, i % MR) the micro-kernel's A operand is contiguous per k
    (strides (1, MR)): its broadcasts read A_global at k * MR + row, not A a row apart."""
    lowered = tdsl.lower(schedules.gemm_schedule(32, 32, 32, tiles=(4, 16, 16, 16)), target="cpu").script()
    assert "T.Broadcast(A_global[" in lowered and "T.Broadcast(A[" not in lowered
    assert "k * 4 + 3]" in lowered  # row 3 of the tile, step k: offset k * MR + 3


def test_gemm_tile_of_1000():
    """The 2 x 40 tile (5 vectors) that 1000 gets, at a small size with the same tile."""
    a = RNG.standard_normal((20, 50), dtype=np.float32)
    b = RNG.standard_normal((50, 80), dtype=np.float32)
    mr, nr, _, kc = schedules.gemm_tiles(1000, 1000, 1000, target=AVX2)
    assert kc * nr * 4 <= schedules.L1_SLIVER_BYTES  # the B sliver stays in L1 (KC 100, not 250)
    assert (mr, nr) == (2, 40)
    # 1000 is not a multiple of 16: an AVX-512 CPU gets the same tile (AVX2's micro-kernel)
    assert schedules.gemm_tiles(1000, 1000, 1000, target=AVX512)[:2] == (2, 40)
    sch = schedules.gemm_schedule(20, 80, 50, tiles=(2, 40, 10, 25))
    np.testing.assert_allclose(tdsl.build(sch)(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_gemm_schedule_matches_the_interpreter():
    """The scheduled GEMM, compiled, agrees with the reference semantics of the plain kernel."""
    a = RNG.standard_normal((16, 16), dtype=np.float32)
    b = RNG.standard_normal((16, 16), dtype=np.float32)
    want = tdsl.interpret(schedules.gemm_func(16), a, b)
    c = tdsl.build(schedules.gemm_schedule(16))(a, b)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows,cols,prefetch", [(8, 64, True), (3, 32, True), (5, 128, True), (3, 8, True),
                                                (5, 128, False)])
def test_softmax(rows, cols, prefetch):
    # 128: 32 lanes, partials combined through a second rfactor; 32 and 8: 16 and 4 lanes, one by one
    x = RNG.standard_normal((rows, cols), dtype=np.float32) * 4
    sch = schedules.softmax_schedule(rows, cols, prefetch=prefetch)
    _roundtrip(sch)
    np.testing.assert_allclose(tdsl.build(sch)(x), numpy_ref.softmax(x), rtol=1e-5, atol=1e-7)


def test_softmax_special_rows_match_the_interpreter():
    """NaN, +inf and -inf in a row give what the unscheduled kernel gives under the interpreter
    (a NaN or +inf anywhere: a row of NaN; -inf: a zero; all -inf: NaN), prefetch past the last
    row included."""
    rows, cols = 8, 64
    x = RNG.standard_normal((rows, cols), dtype=np.float32)
    x[1, 5] = np.nan
    x[2, 7] = np.inf
    x[3, 9] = -np.inf
    x[4, :] = -np.inf
    x[5, [3, 40]] = np.inf
    x[6, 0], x[6, 63] = np.nan, np.inf
    x[7, 33] = np.nan  # the last row, in the second vector step
    want = tdsl.interpret(schedules.softmax_func(rows, cols), x)
    assert np.isnan(want[[1, 2, 4, 5, 6, 7]]).all() and want[3, 9] == 0 and not np.isnan(want[[0, 3]]).any()
    for prefetch in (True, False):
        sch = schedules.softmax_schedule(rows, cols, prefetch=prefetch)
        for got in (tdsl.build(sch)(x), tdsl.interpret(sch.func, x)):  # the prefetch: a no-op there
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_softmax_exp_is_vectorized():
    """exp is computed in vector registers, not by a libm call per element."""
    asm = tdsl.build(schedules.softmax_schedule(4, 64)).asm
    assert "expf" not in asm
    assert "ymm" in asm or "zmm" in asm


def test_softmax_exp_step_prefetches_the_next_row():
    """The tensorized exp step prefetches A one row (cols elements) ahead, one line per 16
    columns; without `prefetch` the step is a plain vector loop."""
    cols = 64
    lowered = tdsl.lower(schedules.softmax_schedule(4, cols), target="cpu").script()
    prefetches = [line for line in lowered.splitlines() if "llvm.prefetch" in line]
    assert len(prefetches) == 2  # 32 lanes: two 64-byte lines per step
    assert f"* 32 + {cols}])" in prefetches[0] and f"* 32 + {cols + 16}])" in prefetches[1]
    assert "llvm.prefetch" not in tdsl.lower(schedules.softmax_schedule(4, cols, prefetch=False), target="cpu").script()
    if platform.machine() in ("x86_64", "AMD64"):
        assert "prefetcht0" in tdsl.build(schedules.softmax_schedule(4, cols)).asm


@pytest.mark.parametrize("rows,cols", [(8, 64), (5, 48)])
def test_layernorm(rows, cols):
    x = RNG.standard_normal((rows, cols), dtype=np.float32) + 3
    g = RNG.standard_normal(cols, dtype=np.float32)
    b = RNG.standard_normal(cols, dtype=np.float32)
    sch = schedules.layernorm_schedule(rows, cols)
    _roundtrip(sch)
    np.testing.assert_allclose(tdsl.build(sch)(x, g, b), numpy_ref.layernorm(x, g, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,h,w,k,mr,nr", [(8, 6, 8, 4, 1, None), (8, 6, 8, 4, 2, None), (16, 5, 16, 6, 2, None),
                                            (8, 4, 16, 8, 4, 8)])
def test_conv2d(c, h, w, k, mr, nr):
    x = RNG.standard_normal((1, c, h, w), dtype=np.float32)
    wt = RNG.standard_normal((k, c, 3, 3), dtype=np.float32)
    sch = schedules.conv2d_schedule(1, c, h, w, k, mr=mr, nr=nr)
    _roundtrip(sch)
    np.testing.assert_allclose(tdsl.build(sch)(x, wt), numpy_ref.conv2d_im2col(x, wt), rtol=1e-4, atol=1e-4)


def test_conv2d_computes_y_in_place_with_the_micro_kernel():
    """Two images: the micro-kernel's tile is Y[b, k, y, x0:x0+NR] in NCHW itself (no copy of Y
    or W), the definition multiplies Xpad * W (tensorize takes the operands in either order)."""
    x = RNG.standard_normal((2, 8, 4, 16), dtype=np.float32)
    wt = RNG.standard_normal((4, 8, 3, 3), dtype=np.float32)
    assert "Xpad[vb, vc, vy + vr, vx + vs] * W[vk, vc, vr, vs]" in schedules.CONV2D
    sch = schedules.conv2d_schedule(2, 8, 4, 16, 4)
    trace = str(sch.trace)
    assert "tensorize" in trace and "cache_write" not in trace and "cache_read" not in trace
    assert "llvm.fma.v" in tdsl.lower(sch, target="cpu").script()  # v8f32 (AVX2) or v16f32 (AVX-512)
    kernel = tdsl.build(sch)
    np.testing.assert_allclose(kernel(x, wt), numpy_ref.conv2d_im2col(x, wt), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [64, 16])
def test_int8_gemm(n):
    a = RNG.integers(0, 256, (n, n)).astype(np.uint8)
    b = RNG.integers(-128, 128, (n, n)).astype(np.int8)
    sch = schedules.int8_gemm_schedule(n)
    _roundtrip(sch)
    np.testing.assert_array_equal(tdsl.build(sch)(a, b), a.astype(np.int32) @ b.astype(np.int32))


@pytest.mark.parametrize("target,nr,isa", [(AVX2, 16, "avx2"), (AVX512, 32, "avx512")])
def test_gemm_schedule_of_2048_packs_through_the_schedule(target, nr, isa):
    """2048^3 packs A, B and C with cache_read / cache_write + transform_layout like every size
    (transform_layout proves the digit maps one-to-one for buffers of any size), and each
    packed buffer gets the map the micro-kernel expects (NR = 2 vectors of the target's lanes).
    Scheduling only: no build, so both targets are checked on any host."""
    sch = schedules.gemm_schedule(2048, target=target)
    trace = str(sch.trace)
    assert 'cache_read(b0, buffer="A"' in trace and 'cache_read(b0, buffer="B"' in trace
    assert 'cache_write(b0, buffer="C"' in trace and trace.count("transform_layout") == 3
    assert f"x86.{isa}.fp32_4x{nr}x" in trace
    shapes = {b.name: [x.value for x in b.shape] for b in _allocated_buffers(sch.func)}
    assert shapes == {"B_global": [2048 // nr, 2048, nr], "A_global": [512, 2048, 4],
                      "C_global": [2048 // nr, 512, 4, nr]}


def test_gemm_uses_the_avx2_micro_kernel_where_n_is_not_whole_avx512_vectors():
    """n = 24 is 3 AVX2 vectors but not whole AVX-512 ones: an AVX-512 target tensorizes with
    the AVX2 micro-kernel (which that CPU runs too) instead of refusing."""
    sch = schedules.gemm_schedule(20, 24, 16, target=AVX512)
    assert "x86.avx2.fp32_" in str(sch.trace)


def _allocated_buffers(func: tdsl.PrimFunc) -> list:
    """The buffers a scheduled function allocates (its root block's alloc_buffers)."""
    return list(func.body.block.alloc_buffers)


def test_gemm_refuses_columns_that_are_not_whole_vectors():
    with pytest.raises(ValueError, match="multiple of the"):
        schedules.gemm_schedule(20, 20, 20)


def test_int8_gemm_uses_the_dot_product():
    sch = schedules.int8_gemm_schedule(32)
    assert "tensorize" in str(sch.trace)


def test_int8_gemm_schedule_matches_vnni():
    """The same schedule tensorizes with the built-in VNNI dot product (built only on VNNI CPUs)."""
    from tdsl.intrinsics import x86

    name = x86.register_dot("avx512vnni")
    sch = schedules.int8_gemm_schedule(64, intrin=(name, 16, 4))
    _roundtrip(sch)
