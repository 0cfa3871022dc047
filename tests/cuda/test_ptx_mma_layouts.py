"""The emulator's ldmatrix and mma.sync (include/ptx_mma.h) against an independent description.

The expected lane maps are CUTLASS/CuTe's, transcribed below as data (shape, stride) from
NVIDIA/cutlass, commit 7107b05535f8977f5ecb9d01ee203205b1fd9bc4:

* include/cute/atom/mma_traits_sm80.hpp: MMA_Traits<SM80_16x8x16_F32F16F16F32_TN> (the same
  layouts as SM80_16x8x16_F16F16F16F16_TN and SM80_16x8x16_F32BF16BF16F32_TN) and
  MMA_Traits<SM80_16x8x32_S32S8S8S32_TN>: ALayout (thread, value) -> m + M * k,
  BLayout -> n + N * k, CLayout -> m + M * n;
* include/cute/atom/copy_traits_sm75.hpp: Copy_Traits<SM75_U32x{1,2,4}_LDSM_N> and
  Copy_Traits<SM75_U16x{2,4,8}_LDSM_T>: SrcLayout (thread, bit) -> bit of the 8 x 128-bit rows
  the threads point at, DstLayout (thread, bit of its registers) -> that bit.

Each test feeds the emulated instruction registers built with CuTe's maps and checks the result
with CuTe's maps, so a lane map of the emulator that differs from CuTe's gives wrong numbers.
"""
import ctypes

import numpy as np
import pytest

from tdsl.backends.cuda.emulator import find_compiler

try:
    find_compiler()
except Exception as e:  # noqa: BLE001 - no host C++ compiler: nothing here can run
    pytest.skip(f"no host C++ compiler for the emulator: {e}", allow_module_level=True)

# ---------------------------------------------------------------- CuTe layouts (transcribed)
# (shape, stride) of the (thread, value) modes, as nested tuples
SM80_16x8_Row = (((4, 8), (2, 2)), ((32, 1), (16, 8)))
MMA_16x8x16 = {  # MMA_Traits<SM80_16x8x16_F16F16F16F16_TN>
    "A": (((4, 8), (2, 2, 2)), ((32, 1), (16, 8, 128))),
    "B": (((4, 8), (2, 2)), ((16, 1), (8, 64))),
    "C": SM80_16x8_Row,
}
MMA_16x8x32_S8 = {  # MMA_Traits<SM80_16x8x32_S32S8S8S32_TN>
    "A": (((4, 8), (4, 2, 2)), ((64, 1), (16, 8, 256))),
    "B": (((4, 8), (4, 2)), ((32, 1), (8, 128))),
    "C": SM80_16x8_Row,
}
LDSM = {  # (x, trans): (SrcLayout, DstLayout)
    (1, False): ((((8, 4), 128), ((128, 0), 1)), ((32, 32), (32, 1))),
    (2, False): ((((16, 2), 128), ((128, 0), 1)), ((32, (32, 2)), (32, (1, 1024)))),
    (4, False): (((32, 128), (128, 1)), ((32, (32, 4)), (32, (1, 1024)))),
    (1, True): ((((8, 4), 128), ((128, 0), 1)), (((4, 8), (16, 2)), ((256, 16), (1, 128)))),
    (2, True): ((((16, 2), 128), ((128, 0), 1)), (((4, 8), (16, 2, 2)), ((256, 16), (1, 128, 1024)))),
    (4, True): (((32, 128), (128, 1)), (((4, 8), (16, 2, 4)), ((256, 16), (1, 128, 1024)))),
}


def _size(shape) -> int:
    return int(np.prod([_size(s) for s in shape])) if isinstance(shape, tuple) else shape


def _mode(shape, stride, x: int) -> int:
    """CuTe's layout function of one mode: x split colexicographically over the (nested) shape."""
    if not isinstance(shape, tuple):
        assert 0 <= x < shape
        return x * stride
    out = 0
    for sh, st in zip(shape, stride):
        n = _size(sh)
        out += _mode(sh, st, x % n)
        x //= n
    return out


def layout(lay, thread: int, value: int) -> int:
    (s_t, s_v), (d_t, d_v) = lay
    return _mode(s_t, d_t, thread) + _mode(s_v, d_v, value)


# ---------------------------------------------------------------- running a raw kernel
def _run(source: str, name: str, arrays: list[np.ndarray], lanes: int = 32):
    from tdsl.backends.cuda.emulator.compiler import load
    from tdsl.backends.cuda.emulator.translate import translate

    unit, _ = translate(source)
    lib = load(unit)
    fn = getattr(lib, f"tdsl_emu_run_{name}")
    fn.restype = ctypes.c_int
    ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    sizes = (ctypes.c_longlong * len(arrays))(*[a.size for a in arrays])
    dims = (ctypes.c_longlong * 6)(1, 1, 1, lanes, 1, 1)
    lib.tdsl_emu_bank_clear()
    rc = fn(ptrs, sizes, dims, 0, ctypes.c_ulonglong(0), ctypes.c_longlong(-1))
    lib.tdsl_emu_error.restype = ctypes.c_char_p
    lib.tdsl_emu_bank_report.restype = ctypes.c_char_p
    return rc, lib.tdsl_emu_error().decode(), lib.tdsl_emu_bank_report().decode()


_MMA_SRC = """
extern "C" __global__ void k(const unsigned int* __restrict__ A, const unsigned int* __restrict__ B, const {c}* __restrict__ C, {c}* __restrict__ D) {{
  int l = threadIdx.x;
  unsigned a[4], b[2];
  {c} c[4], d[4];
  for (int i = 0; i < 4; ++i) {{ a[i] = A[l * 4 + i]; c[i] = C[l * 4 + i]; }}
  for (int i = 0; i < 2; ++i) b[i] = B[l * 2 + i];
  {call}(d, a, b, c);
  for (int i = 0; i < 4; ++i) D[l * 4 + i] = d[i];
}}
"""


def _pack(values: np.ndarray, per_reg: int) -> np.ndarray:
    """(32, n) elements of `per_reg`-per-register width -> (32, n / per_reg) uint32 registers,
    value v in register v // per_reg at bits (v % per_reg) * (32 / per_reg)."""
    return np.ascontiguousarray(values).view(np.uint32).reshape(32, -1)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mma_m16n8k16_lane_layout_is_cutes(dtype):
    import ml_dtypes

    npdt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(1)
    a = rng.integers(-4, 5, (16, 16)).astype(npdt)      # small integers: every sum exact
    b = rng.integers(-4, 5, (16, 8)).astype(npdt)       # B as (k, n)
    c = rng.integers(-8, 9, (16, 8)).astype(np.float32)
    lay = MMA_16x8x16
    regs_a = np.zeros((32, 8), npdt)
    regs_b = np.zeros((32, 4), npdt)
    regs_c = np.zeros((32, 4), np.float32)
    for t in range(32):
        for v in range(8):
            idx = layout(lay["A"], t, v)
            regs_a[t, v] = a[idx % 16, idx // 16]
        for v in range(4):
            idx = layout(lay["B"], t, v)
            regs_b[t, v] = b[idx // 8, idx % 8]
            idx = layout(lay["C"], t, v)
            regs_c[t, v] = c[idx % 16, idx // 16]
    d = np.zeros((32, 4), np.float32)
    ctype = "half" if dtype == "float16" else "nv_bfloat16"
    src = _MMA_SRC.format(c="float", call=f"tdsl_ptx_mma_m16n8k16_f32<{ctype}>")
    rc, err, _ = _run(src, "k", [_pack(regs_a, 2), _pack(regs_b, 2), regs_c, d])
    assert rc == 0, err
    want = a.astype(np.float32) @ b.astype(np.float32) + c
    got = np.zeros((16, 8), np.float32)
    for t in range(32):
        for v in range(4):
            idx = layout(lay["C"], t, v)
            got[idx % 16, idx // 16] = d[t, v]
    np.testing.assert_array_equal(got, want)


def test_mma_m16n8k32_s8_lane_layout_is_cutes():
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    b = rng.integers(-128, 128, (32, 8)).astype(np.int8)
    c = rng.integers(-1000, 1000, (16, 8)).astype(np.int32)
    lay = MMA_16x8x32_S8
    regs_a = np.zeros((32, 16), np.int8)
    regs_b = np.zeros((32, 8), np.int8)
    regs_c = np.zeros((32, 4), np.int32)
    for t in range(32):
        for v in range(16):
            idx = layout(lay["A"], t, v)
            regs_a[t, v] = a[idx % 16, idx // 16]
        for v in range(8):
            idx = layout(lay["B"], t, v)
            regs_b[t, v] = b[idx // 8, idx % 8]
        for v in range(4):
            idx = layout(lay["C"], t, v)
            regs_c[t, v] = c[idx % 16, idx // 16]
    d = np.zeros((32, 4), np.int32)
    src = _MMA_SRC.format(c="int", call="tdsl_ptx_mma_m16n8k32_s32_s8")
    rc, err, _ = _run(src, "k", [_pack(regs_a, 4), _pack(regs_b, 4), regs_c, d])
    assert rc == 0, err
    want = a.astype(np.int32) @ b.astype(np.int32) + c
    got = np.zeros((16, 8), np.int32)
    for t in range(32):
        for v in range(4):
            idx = layout(lay["C"], t, v)
            got[idx % 16, idx // 16] = d[t, v]
    np.testing.assert_array_equal(got, want)


_LDSM_SRC = """
extern "C" __global__ void k(const unsigned short* __restrict__ S, unsigned int* __restrict__ D) {{
  __shared__ __align__(16) unsigned short tile[{n}];
  int l = threadIdx.x;
  for (int e = 0; e < 8; ++e) tile[l * {pitch} + e] = S[l * 8 + e];
  __syncthreads();
  unsigned d[4] = {{0, 0, 0, 0}};
  tdsl_ptx_ldmatrix<{x}, {trans}>(d, &tile[l * {pitch}]);
  for (int m = 0; m < 4; ++m) D[l * 4 + m] = d[m];
}}
"""


@pytest.mark.parametrize("x", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_lane_layout_is_cutes(x, trans):
    # lane t points at row t of a shared tile; element e of row r holds r * 8 + e
    rows = np.arange(32 * 8, dtype=np.uint16).reshape(32, 8)
    d = np.zeros((32, 4), np.uint32)
    src = _LDSM_SRC.format(n=32 * 8, pitch=8, x=x, trans="true" if trans else "false")
    rc, err, report = _run(src, "k", [rows, d])
    assert rc == 0, err
    src_lay, dst_lay = LDSM[(x, trans)]
    row_of_thread = {t: layout(src_lay, t, 0) // 128 for t in range(32)}
    assert all(row_of_thread[t] == t for t in range(8 * x))   # lane t supplies row t
    got = d.view(np.uint16).reshape(32, 4, 2)
    for lane in range(32):
        for bit in range(0, 32 * x, 16):            # each 16-bit element of the lane's registers
            ref = layout(dst_lay, lane, bit)
            row, element = ref // 128, (ref % 128) // 16
            reg, half = bit // 32, (bit % 32) // 16
            assert got[lane, reg, half] == rows[row, element], (lane, reg, half)
    # contiguous 16-byte rows: every phase (matrix) of 8 rows covers the 32 banks once
    name, instructions, phases, wavefronts, worst = report.split()
    assert (name, int(instructions), int(phases), int(wavefronts), int(worst)) == ("tile", 1, x, x, 1)


def test_ldmatrix_counts_bank_conflicts_of_a_128_byte_pitch():
    # rows 128 bytes apart all start in bank 0: each phase's 8 rows share 4 banks, 8-way conflicts
    rows = np.arange(32 * 8, dtype=np.uint16).reshape(32, 8)
    d = np.zeros((32, 4), np.uint32)
    rc, err, report = _run(_LDSM_SRC.format(n=32 * 64, pitch=64, x=4, trans="false"), "k", [rows, d])
    assert rc == 0, err
    assert report.split() == ["tile", "1", "4", "32", "8"]
    # an XOR swizzle of the 16-byte chunk by the row (chunk ^ row % 8) removes them
    src = _LDSM_SRC.format(n=32 * 64, pitch=64, x=4, trans="false").replace(
        "tile[l * 64 + e]", "tile[l * 64 + ((l % 8) * 8) + e]").replace(
        "&tile[l * 64]", "&tile[l * 64 + (l % 8) * 8]")
    rc, err, report = _run(src, "k", [rows, d])
    assert rc == 0, err
    assert report.split() == ["tile", "1", "4", "4", "1"]


def test_ldmatrix_outside_shared_memory_is_an_error():
    src = _LDSM_SRC.format(n=256, pitch=8, x=4, trans="false").replace(
        "tdsl_ptx_ldmatrix<4, false>(d, &tile[l * 8]);", "tdsl_ptx_ldmatrix<4, false>(d, &S[l * 8]);")
    rows = np.zeros((32, 8), np.uint16)
    rc, err, _ = _run(src, "k", [rows, np.zeros((32, 4), np.uint32)])
    assert rc == 1 and "S, which is not in shared memory" in err
