"""Issue 22's cast classes on the CUDA path, run in the emulator: a cast to float16/bfloat16
rounds once from every source dtype (CUDA's __double2half, __int2half_rn, __ll2bfloat16_rn, ...,
which the emulator implements by rounding to odd), and float16/bfloat16 convert to every
dtype, bit-exactly as numpy/ml_dtypes do; float16/bfloat16 constants round once too."""
import shutil

import ml_dtypes
import numpy as np
import pytest

import tdsl
from tdsl.dtypes import SCALAR_NAMES

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                                reason="no host C++ compiler")

N = 32
HALVES = ("float16", "bfloat16")
HALFWAY_PLUS = 1 + 2**-8 + 2**-30     # just above a bfloat16 tie: through float32 it lands on the tie


def _np(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype("bool" if name == "bool" else name)


def _sources(name) -> np.ndarray:
    """Values of dtype `name` near the float16/bfloat16 rounding ties, edges, specials."""
    dt = _np(name)
    if name == "bool":
        vals = [0, 1] * (N // 2)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        vals = [int(info.min), int(info.max), 0, 1, 2049, 2051, 65519, 65520]
        for k in range(11, info.bits - (1 if info.min < 0 else 0)):
            vals += [(1 << k) + (1 << (k - 8)) + 1, (1 << k) + (1 << (k - 11)) + 1]
        vals = [v for v in vals if info.min <= v <= info.max]
        vals += [-v for v in vals if info.min <= -v <= info.max]
    else:
        vals = [HALFWAY_PLUS, -HALFWAY_PLUS, 1 + 2**-11 + 2**-40, 65519.99, 65520.0, 1e-40, 6e-8, 3.0e38, 1e300,
                float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1.0, -2.5]
    with np.errstate(over="ignore", invalid="ignore"):
        return np.resize(np.array(vals, np.float64 if dt.kind == "f" or name == "bfloat16" else object).astype(dt), N)


def _targets_values(name) -> np.ndarray:
    """float16/bfloat16 values every dtype holds (no out-of-range float -> int casts: undefined)."""
    vals = [0, 1, 2, 3.5, 7.75, 100.25, 127, -1, -3.5, -128, 250.5]
    if name in ("float16", "bfloat16", "float32", "float64"):
        vals += [float("inf"), -float("inf"), float("nan"), 65504.0, 1e-7, -0.0]
    if name.startswith("uint") or name == "bool":
        vals = [abs(v) for v in vals if v == v]
    if name == "int8":
        vals = [v for v in vals if -128 <= v <= 127]
    if name == "uint8":
        vals = [v for v in vals if v <= 255]
    return np.resize(np.array(vals, np.float64), N)


def _script(pairs) -> str:
    params = ", ".join(f'{a}: T.Buffer(({N},), "{s}"), {b}: T.Buffer(({N},), "{d}")' for a, s, b, d in pairs)
    lines = ["@T.prim_func", f"def casts({params}):"]
    for a, _, b, d in pairs:
        lines += [f'    for i in T.thread_binding({N}, thread="threadIdx.x"):',
                  f'        with T.block("{b}"):',
                  "            vi = T.axis.spatial(32, i)",
                  f'            {b}[vi] = T.cast({a}[vi], "{d}")']
    return "\n".join(lines) + "\n"


def test_casts_to_and_from_float16_and_bfloat16_are_bit_exact():
    pairs, inputs = [], []
    for src in SCALAR_NAMES:
        for dst in HALVES:
            if src != dst:
                pairs.append((f"a{len(pairs)}", src, f"b{len(pairs)}", dst))
                inputs.append(_sources(src))
    for src in HALVES:
        for dst in SCALAR_NAMES:
            if src != dst and dst not in HALVES:
                pairs.append((f"a{len(pairs)}", src, f"b{len(pairs)}", dst))
                inputs.append(_targets_values(dst).astype(_np(src)))
    kernel = tdsl.build(tdsl.parse(_script(pairs)), target="cuda", emulate=True, thread_orders=1)
    for name in ("__double2half", "__ll2bfloat16_rn", "__uint2half_rn", "__ull2bfloat16_rn", "__int2bfloat16_rn"):
        assert name in kernel.source
    args = []
    for (_, _, _, dst), a in zip(pairs, inputs):
        args += [a, np.zeros(N, _np(dst))]
    kernel(*args)
    for k, (_, src, _, dst) in enumerate(pairs):
        a, got = args[2 * k], args[2 * k + 1]
        with np.errstate(over="ignore", invalid="ignore"):
            want = a.astype(_np(dst))
        if want.dtype.kind == "f" or dst == "bfloat16":
            bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[want.dtype.itemsize]
            g, w = got.view(bits), want.view(bits)
            nan = np.isnan(want.astype(np.float64))
            np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), nan, err_msg=f"{src} -> {dst}")
            np.testing.assert_array_equal(g[~nan], w[~nan], err_msg=f"{src} -> {dst}: {a[~nan]}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{src} -> {dst}")


def test_float16_and_bfloat16_constants_round_once():
    text = f'''
@T.prim_func
def consts(B: T.Buffer(({N},), "bfloat16"), H: T.Buffer(({N},), "float16")):
    for i in T.thread_binding({N}, thread="threadIdx.x"):
        with T.block("B"):
            vi = T.axis.spatial({N}, i)
            B[vi] = T.bfloat16({HALFWAY_PLUS!r})
            H[vi] = T.float16({1 + 2**-11 + 2**-40!r})
'''
    b, h = tdsl.build(tdsl.parse(text), target="cuda", emulate=True, thread_orders=1)()
    assert b.view(np.uint16)[0] == np.array(HALFWAY_PLUS).astype(ml_dtypes.bfloat16).view(np.uint16)
    assert h.view(np.uint16)[0] == np.array(1 + 2**-11 + 2**-40).astype(np.float16).view(np.uint16)
    assert b.view(np.uint16)[0] != np.float32(HALFWAY_PLUS).astype(ml_dtypes.bfloat16).view(np.uint16)
