"""Every schedule of bench/schedules.py computes what numpy computes (small sizes; correctness
only: timings belong to bench/run.py, never to tests)."""
import pathlib
import sys

import numpy as np
import pytest

import tdsl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "bench"))

import numpy_ref
import schedules

RNG = np.random.default_rng(7)


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
    for size in (512, 1000, 1024, 2048, 48):
        mr, nr, mc, kc = schedules.gemm_tiles(size, size, size)
        assert size % mr == 0 and size % nr == 0 and size % mc == 0 and size % kc == 0 and mc % mr == 0


def test_gemm_schedule_matches_the_interpreter():
    """The scheduled GEMM, compiled, agrees with the reference semantics of the plain kernel."""
    a = RNG.standard_normal((16, 16), dtype=np.float32)
    b = RNG.standard_normal((16, 16), dtype=np.float32)
    want = tdsl.interpret(schedules.gemm_func(16), a, b)
    c = tdsl.build(schedules.gemm_schedule(16))(a, b)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows,cols", [(8, 64), (3, 32)])
def test_softmax(rows, cols):
    x = RNG.standard_normal((rows, cols), dtype=np.float32) * 4
    sch = schedules.softmax_schedule(rows, cols)
    _roundtrip(sch)
    np.testing.assert_allclose(tdsl.build(sch)(x), numpy_ref.softmax(x), rtol=1e-5, atol=1e-7)


def test_softmax_exp_is_vectorized():
    """exp is computed in vector registers, not by a libm call per element."""
    asm = tdsl.build(schedules.softmax_schedule(4, 64)).asm
    assert "expf" not in asm
    assert "ymm" in asm or "zmm" in asm


@pytest.mark.parametrize("rows,cols", [(8, 64), (5, 48)])
def test_layernorm(rows, cols):
    x = RNG.standard_normal((rows, cols), dtype=np.float32) + 3
    g = RNG.standard_normal(cols, dtype=np.float32)
    b = RNG.standard_normal(cols, dtype=np.float32)
    sch = schedules.layernorm_schedule(rows, cols)
    _roundtrip(sch)
    np.testing.assert_allclose(tdsl.build(sch)(x, g, b), numpy_ref.layernorm(x, g, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,h,w,k,mr,nr", [(8, 6, 8, 4, 2, None), (16, 5, 16, 6, 2, None), (8, 4, 16, 8, 4, 8)])
def test_conv2d(c, h, w, k, mr, nr):
    x = RNG.standard_normal((1, c, h, w), dtype=np.float32)
    wt = RNG.standard_normal((k, c, 3, 3), dtype=np.float32)
    sch = schedules.conv2d_schedule(1, c, h, w, k, mr=mr, nr=nr)
    _roundtrip(sch)
    np.testing.assert_allclose(tdsl.build(sch)(x, wt), numpy_ref.conv2d_im2col(x, wt), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [64, 16])
def test_int8_gemm(n):
    a = RNG.integers(0, 256, (n, n)).astype(np.uint8)
    b = RNG.integers(-128, 128, (n, n)).astype(np.int8)
    sch = schedules.int8_gemm_schedule(n)
    _roundtrip(sch)
    np.testing.assert_array_equal(tdsl.build(sch)(a, b), a.astype(np.int32) @ b.astype(np.int32))


def test_gemm_with_b_packed_in_the_definition(monkeypatch):
    """Large GEMMs write the packing of B in the kernel itself (see CHECKED_LAYOUT_LIMIT)."""
    monkeypatch.setattr(schedules, "CHECKED_LAYOUT_LIMIT", 0)
    a = RNG.standard_normal((32, 48), dtype=np.float32)
    b = RNG.standard_normal((48, 32), dtype=np.float32)
    sch = schedules.gemm_schedule(32, 32, 48)
    assert "cache_read" not in str(sch.trace) and "transform_layout" not in str(sch.trace)
    _roundtrip(sch)
    np.testing.assert_allclose(tdsl.build(sch)(a, b), a @ b, rtol=1e-4, atol=1e-4)


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
