"""TMA tensor loads and stores (boxes of 1 to 5 dimensions) in the emulator: out-of-bounds zero
fill (loads) and skipping (stores), the swizzle modes, completion on an mbarrier's tx-count (loads)
and bulk groups (stores); the same sources compiled by NVRTC.

Checked facts:
- PTX ISA, cp.async.bulk.tensor: the copy's completion performs complete_tx on the mbarrier with
  the box's bytes (elements outside the tensor are filled with zeros and count too).
- CuTe (cute/swizzle.hpp): Swizzle<B, M, S>(x) = x ^ ((x & (((1 << B) - 1) << (M + S))) >> S);
  TMA's 32B, 64B and 128B modes are Swizzle<1,4,3>, <2,4,3>, <3,4,3> on byte offsets
  (cute/atom/copy_traits_sm90_tma_swizzle.hpp). Transcribed below as `cute_swizzle`, written
  apart from tdsl's own `swizzle_offset`.
"""
import shutil

import numpy as np
import pytest
import sm90_harness as h

import tdsl
from tdsl.backends.cuda import sm90

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")),
                                reason="no host C++ compiler")


def cute_swizzle(x, b, m=4, s=3):
    yyy = ((1 << b) - 1) << (m + s)
    return x ^ ((x & yyy) >> s)


MODES = {"none": 0, "32B": 1, "64B": 2, "128B": 3}


@pytest.mark.parametrize("mode", list(MODES))
def test_swizzle_offsets_are_cutes(mode):
    for x in range(0, 4096, 2):
        assert sm90.swizzle_offset(x, mode) == cute_swizzle(x, MODES[mode])
    # 128B by hand: row r's 16-byte chunk c lands in chunk c ^ (r % 8)
    if mode == "128B":
        assert [sm90.swizzle_offset(3 * 128 + 16 * c, mode) // 16 % 8 for c in range(8)] == [3, 2, 1, 0, 7, 6, 5, 4]


LOAD = r'''
extern "C" __global__ void tma_tile(half* __restrict__ out, const unsigned char* __restrict__ tmap, int x, int y, int expect) {
  __shared__ __align__(16) half tile[BOX];
  __shared__ __align__(16) unsigned long long bars[1];
  if (threadIdx.x == 0) { tdsl_ptx_mbarrier_init(&bars[0], 1); tdsl_ptx_fence_mbarrier_init(); }
  __syncthreads();
  if (threadIdx.x == 0) {
    tdsl_ptx_mbarrier_arrive_expect_tx(&bars[0], (unsigned)expect);
    tdsl_ptx_tma_load_2d(&tile[0], tmap, x, y, &bars[0]);
  }
  tdsl_ptx_mbarrier_wait(&bars[0], 0);
  for (int i = threadIdx.x; i < BOX; i += blockDim.x) out[i] = tile[i];
}
'''


def _load(a, box, mode, x, y, expect=None):
    rows, cols = box
    src = h.source(LOAD.replace("BOX", str(rows * cols)))
    tmap = sm90.emulator_tensor_map(a, box, mode)
    out = np.zeros(rows * cols, a.dtype)
    import ctypes
    nbytes = rows * cols * a.itemsize
    h.emulate(src, "tma_tile", [out, tmap, ctypes.c_int(x), ctypes.c_int(y),
                                ctypes.c_int(nbytes if expect is None else expect)], block=(64, 1, 1))
    return out


def _expected(a, box, mode, x, y):
    rows, cols = box
    box_vals = np.zeros((rows, cols), a.dtype)
    for r in range(rows):
        for c in range(cols):
            gy, gx = y + r, x + c
            if 0 <= gy < a.shape[0] and 0 <= gx < a.shape[1]:
                box_vals[r, c] = a[gy, gx]
    raw = box_vals.reshape(-1).view(np.uint8)
    out = np.zeros_like(raw)
    for off in range(raw.size):
        out[cute_swizzle(off, MODES[mode])] = raw[off]
    return out.view(a.dtype)


@pytest.mark.parametrize("mode, box", [("none", (8, 16)), ("32B", (8, 16)), ("64B", (16, 32)), ("128B", (16, 64))])
@pytest.mark.parametrize("x, y", [(0, 0), (8, 4), (-8, -3), (40, 20)])
def test_box_load_with_fill_and_swizzle(mode, box, x, y):
    a = (np.arange(24 * 48).reshape(24, 48) % 2003).astype(np.float16)
    np.testing.assert_array_equal(_load(a, box, mode, x, y), _expected(a, box, mode, x, y))


def test_expect_tx_short_of_the_box_is_a_mismatch():
    a = np.ones((16, 16), np.float16)
    with pytest.raises(tdsl.TargetError, match=r"transaction count mismatch on mbarrier bars\[0\]: every arrival of "
                       r"phase 0 came but its tx-count is -128 \(expect_tx announced 128 bytes, the copies completed "
                       r"256\)"):
        _load(a, (8, 16), "none", 0, 0, expect=128)


NO_WAIT = r'''
extern "C" __global__ void no_wait(half* __restrict__ out, const unsigned char* __restrict__ tmap) {
  __shared__ __align__(16) half tile[128];
  __shared__ __align__(16) unsigned long long bars[1];
  if (threadIdx.x == 0) tdsl_ptx_mbarrier_init(&bars[0], 1);
  __syncthreads();
  if (threadIdx.x == 0) { tdsl_ptx_mbarrier_arrive_expect_tx(&bars[0], 256); tdsl_ptx_tma_load_2d(&tile[0], tmap, 0, 0, &bars[0]); }
  for (int i = threadIdx.x; i < 128; i += blockDim.x) out[i] = tile[i];   // no wait: the copy has not landed
  tdsl_ptx_mbarrier_wait(&bars[0], 0);
}
'''


def test_a_tile_read_before_its_wait_is_not_the_data():
    a = np.ones((8, 16), np.float16)
    out = np.zeros(128, np.float16)
    h.emulate(h.source(NO_WAIT), "no_wait", [out, sm90.emulator_tensor_map(a, (8, 16))], block=(32, 1, 1))
    assert not np.any(out == 1)   # the shared array's poison, not the copy


@pytest.mark.parametrize("box, mode, message", [
    ((8, 12), "none", "its rows are 24 bytes, not a multiple of 16"),
    ((8, 128), "128B", "its rows are 256 bytes, more than the 128B swizzle span"),
    ((300, 16), "none", "each side is 1 to 256 elements"),
    ((8, 16), "16B", "unknown TMA swizzle '16B'"),
])
def test_tensor_map_checks(box, mode, message):
    with pytest.raises(tdsl.TargetError, match=message):
        sm90.emulator_tensor_map(np.zeros((32, 256), np.float16), box, mode)


def test_the_same_source_compiles_for_sm90a():
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda.nvrtc import compile_cuda

    mod = compile_cuda(h.source(LOAD.replace("BOX", "1024")), "sm_90a", want_ptx=True)
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in mod.ptx
    assert "mbarrier.arrive.expect_tx.shared::cta.b64" in mod.ptx


ND = r'''
extern "C" __global__ void tma_nd(float* __restrict__ out, const unsigned char* __restrict__ tmap, int x, int y, int z, int w, int v, int expect) {
  __shared__ __align__(16) float tile[BOX];
  __shared__ __align__(16) unsigned long long bars[1];
  if (threadIdx.x == 0) tdsl_ptx_mbarrier_init(&bars[0], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    tdsl_ptx_mbarrier_arrive_expect_tx(&bars[0], (unsigned)expect);
    tdsl_ptx_tma_load_RANKd(&tile[0], tmap, COORDS, &bars[0]);
  }
  tdsl_ptx_mbarrier_wait(&bars[0], 0);
  for (int i = threadIdx.x; i < BOX; i += blockDim.x) out[i] = tile[i];
}
'''


def _expected_nd(a, box, start, mode):
    """The box at `start` (axis order) with zero fill, its bytes placed by CuTe's swizzle."""
    vals = np.zeros(box, a.dtype)
    for idx in np.ndindex(*box):
        g = tuple(s + i for s, i in zip(start, idx))
        if all(0 <= gi < n for gi, n in zip(g, a.shape)):
            vals[idx] = a[g]
    raw = vals.reshape(-1).view(np.uint8)
    out = np.zeros_like(raw)
    for off in range(raw.size):
        out[cute_swizzle(off, MODES[mode])] = raw[off]
    return out.view(a.dtype)


@pytest.mark.parametrize("shape, box, start, mode", [
    ((40,), (16,), (-4,), "none"),
    ((5, 6, 20), (2, 4, 8), (4, -1, 16), "32B"),
    ((3, 4, 5, 8), (2, 2, 3, 8), (1, 3, -1, 0), "none"),
    ((2, 3, 2, 4, 16), (2, 2, 2, 2, 8), (1, 2, 0, 3, 12), "32B"),
])
def test_boxes_of_1_to_5_dimensions(shape, box, start, mode):
    import ctypes

    rng = np.random.default_rng(len(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    rank = len(shape)
    coords = list(start[::-1]) + [0] * (5 - rank)         # innermost first
    names = ["x", "y", "z", "w", "v"][:rank]
    src = h.source(ND.replace("BOX", str(int(np.prod(box)))).replace("RANK", str(rank))
                   .replace("COORDS", ", ".join(names)))
    out = np.zeros(int(np.prod(box)), np.float32)
    h.emulate(src, "tma_nd", [out, sm90.emulator_tensor_map(a, box, mode), *map(ctypes.c_int, coords),
                              ctypes.c_int(out.nbytes)], block=(32, 1, 1))
    np.testing.assert_array_equal(out, _expected_nd(a, box, start, mode))


def test_a_map_of_another_rank_is_refused():
    import ctypes

    src = h.source(ND.replace("BOX", "16").replace("RANK", "2").replace("COORDS", "x, y"))
    with pytest.raises(tdsl.TargetError, match="tma_load_2d with a tensor map of 1 dimensions"):
        h.emulate(src, "tma_nd", [np.zeros(16, np.float32), sm90.emulator_tensor_map(np.zeros(32, np.float32), (16,)),
                                  *map(ctypes.c_int, [0] * 5), ctypes.c_int(64)], block=(32, 1, 1))


def test_nd_loads_compile_for_sm90a():
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda.nvrtc import compile_cuda

    src = "".join(ND.replace("tma_nd", f"tma_{r}d").replace("BOX", "256").replace("RANK", str(r))
                  .replace("COORDS", ", ".join("xyzwv"[:r])) for r in range(1, 6))
    ptx = compile_cuda(h.source(src), "sm_90a", want_ptx=True).ptx
    for r in range(1, 6):
        assert f"cp.async.bulk.tensor.{r}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx


# TMA stores (PTX ISA, cp.async.bulk.tensor .global.shared::cta, .bulk_group completion): the box
# is written to the tensor, elements outside it are not written; the data is in global memory
# once cp.async.bulk.wait_group has retired the store's bulk group.
STORE = r'''
extern "C" __global__ void tma_store(const float* __restrict__ src, const unsigned char* __restrict__ tmap, int x, int y, int race) {
  __shared__ __align__(16) float tile[128];
  for (int i = threadIdx.x; i < 128; i += blockDim.x) tile[i] = src[i];
  tdsl_ptx_fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    tdsl_ptx_tma_store_2d(tmap, x, y, &tile[0]);
    tdsl_ptx_bulk_commit_group();
    if (race) tile[5] = -1.0f;   // reused before the store read it
    tdsl_ptx_bulk_wait_group_read<0>();
  }
}
'''


@pytest.mark.parametrize("mode", ["none", "32B"])
@pytest.mark.parametrize("x, y", [(0, 0), (4, 6), (-4, -2)])
def test_store_writes_the_box_inside_the_tensor(mode, x, y):
    import ctypes

    g = np.full((12, 16), 7.0, np.float32)
    src = np.arange(128, dtype=np.float32)            # the shared tile's bytes as they are (swizzled)
    h.emulate(h.source(STORE), "tma_store", [src, sm90.emulator_tensor_map(g, (16, 8), mode), ctypes.c_int(x),
                                             ctypes.c_int(y), ctypes.c_int(0)], block=(32, 1, 1))
    want = np.full((12, 16), 7.0, np.float32)
    raw = src.view(np.uint8)
    for r in range(16):
        for c in range(8):
            gy, gx = y + r, x + c
            if 0 <= gy < 12 and 0 <= gx < 16:
                off = cute_swizzle((r * 8 + c) * 4, MODES[mode])
                want[gy, gx] = raw[off:off + 4].view(np.float32)[0]
    np.testing.assert_array_equal(g, want)


def test_shared_memory_reused_before_the_store_read_it_is_a_race():
    import ctypes

    g = np.zeros((16, 8), np.float32)
    with pytest.raises(tdsl.TargetError, match="TMA store: the shared memory it reads was written after the store"):
        h.emulate(h.source(STORE), "tma_store", [np.ones(128, np.float32), sm90.emulator_tensor_map(g, (16, 8)),
                                                 ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(1)], block=(32, 1, 1))


def test_a_store_of_what_threads_wrote_without_a_proxy_fence_is_refused():
    """The TMA store reads shared memory through the async proxy: without fence.proxy.async after
    the threads' stores it may read stale bytes on a GPU, so the emulator stops."""
    import ctypes

    g = np.zeros((16, 8), np.float32)
    src = h.source(STORE.replace("  tdsl_ptx_fence_proxy_async();\n", ""))
    with pytest.raises(tdsl.TargetError, match=r"TMA store reads tile byte 0, which threads stored to after the last "
                                               r"fence.proxy.async"):
        h.emulate(src, "tma_store", [np.ones(128, np.float32), sm90.emulator_tensor_map(g, (16, 8)),
                                     ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)], block=(32, 1, 1))


def test_store_compiles_for_sm90a():
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda.nvrtc import compile_cuda

    ptx = compile_cuda(h.source(STORE), "sm_90a", want_ptx=True).ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group" in ptx
    assert "cp.async.bulk.commit_group" in ptx and "cp.async.bulk.wait_group.read 0" in ptx


def test_a_box_larger_than_its_shared_array_is_an_out_of_bounds_access():
    import ctypes

    src = h.source(LOAD.replace("BOX", "64"))      # a 64-element tile for a 128-element box
    with pytest.raises(tdsl.TargetError, match=r"out-of-bounds access by tma_load: 256 bytes at byte offset 0 of tile, "
                       r"which has 128 bytes"):
        h.emulate(src, "tma_tile", [np.zeros(64, np.float16), sm90.emulator_tensor_map(np.ones((8, 16), np.float16),
                                                                                       (8, 16)),
                                    ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(256)], block=(32, 1, 1))


def test_a_tensor_map_not_made_by_tdsl_is_refused():
    import ctypes

    with pytest.raises(tdsl.TargetError, match="tma_load_2d: the tensor map is not one of tdsl's"):
        h.emulate(h.source(LOAD.replace("BOX", "128")), "tma_tile",
                  [np.zeros(128, np.float16), np.zeros(128, np.uint8), ctypes.c_int(0), ctypes.c_int(0),
                   ctypes.c_int(256)], block=(32, 1, 1))


# TMA stores of 1 to 5 dimensions: the same model for every rank (the box read from shared memory
# through the swizzle, elements outside the tensor skipped), checked against numpy.
STORE_ND = r'''
extern "C" __global__ void tma_store_nd(const float* __restrict__ src, const unsigned char* __restrict__ tmap, int x, int y, int z, int w, int v) {
  __shared__ __align__(128) float tile[BOX];
  for (int i = threadIdx.x; i < BOX; i += blockDim.x) tile[i] = src[i];
  tdsl_ptx_fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    tdsl_ptx_tma_store_RANKd(tmap, COORDS, &tile[0]);
    tdsl_ptx_bulk_commit_group();
    tdsl_ptx_bulk_wait_group<0>();
  }
}
'''


def _store_nd_source(rank: int, box_elems: int, name: str = "tma_store_nd") -> str:
    return (STORE_ND.replace("tma_store_nd", name).replace("BOX", str(box_elems)).replace("RANK", str(rank))
            .replace("COORDS", ", ".join("xyzwv"[:rank])))


def _stored_nd(g, tile, box, start, mode):
    """`g` after storing the shared tile's bytes (`tile`, as they sit in shared memory) as the
    box at `start` (axis order): box element e is at byte CuTe-swizzle(e * 4) of the tile, and
    only elements inside the tensor are written."""
    out = g.copy()
    raw = tile.view(np.uint8)
    for e, idx in enumerate(np.ndindex(*box)):          # C order: the innermost axis fastest, as in the box
        dst = tuple(s + i for s, i in zip(start, idx))
        if all(0 <= d < n for d, n in zip(dst, g.shape)):
            off = cute_swizzle(e * 4, MODES[mode])
            out[dst] = raw[off:off + 4].view(np.float32)[0]
    return out


@pytest.mark.parametrize("shape, box, start, mode", [
    ((3, 4, 5, 8), (2, 2, 3, 8), (1, 3, -1, 0), "none"),             # past axis 1's end, before axis 2's start
    ((2, 3, 4, 16), (2, 2, 2, 8), (1, 2, 3, 12), "32B"),             # past the ends of axes 1, 2 and 3
    ((2, 3, 2, 4, 16), (2, 2, 2, 2, 8), (1, 2, 0, 3, 12), "32B"),
    ((3, 2, 2, 3, 16), (2, 2, 1, 2, 16), (-1, 1, 1, 2, 0), "64B"),   # before axis 0's start
    ((1, 2, 2, 9, 32), (1, 2, 1, 8, 32), (0, 0, 1, 4, 0), "128B"),
])
def test_stores_of_4_and_5_dimensions_write_the_box_inside_the_tensor(shape, box, start, mode):
    import ctypes

    rank = len(shape)
    g = np.full(shape, 7.0, np.float32)
    n = int(np.prod(box))
    tile = np.arange(1, n + 1, dtype=np.float32)        # the shared tile's contents, as they are (swizzled)
    want = _stored_nd(g, tile, box, start, mode)
    assert (want != g).any() and (want == 7.0).any()    # some of the box lands, some falls outside
    coords = list(start[::-1]) + [0] * (5 - rank)       # innermost first
    h.emulate(h.source(_store_nd_source(rank, n)), "tma_store_nd",
              [tile, sm90.emulator_tensor_map(g, box, mode), *map(ctypes.c_int, coords)], block=(32, 1, 1))
    np.testing.assert_array_equal(g, want)


def test_a_store_with_a_map_of_another_rank_is_refused():
    import ctypes

    g = np.zeros((2, 2, 2, 8), np.float32)
    with pytest.raises(tdsl.TargetError, match="tma_store_5d with a tensor map of 4 dimensions"):
        h.emulate(h.source(_store_nd_source(5, 64)), "tma_store_nd",
                  [np.zeros(64, np.float32), sm90.emulator_tensor_map(g, (2, 2, 2, 8)), *map(ctypes.c_int, [0] * 5)],
                  block=(32, 1, 1))


def test_nd_stores_compile_for_sm90_to_tma_stores():
    pytest.importorskip("cuda.bindings")
    from tdsl.backends.cuda.nvrtc import compile_cuda
    from tdsl.backends.cuda.stats import cuobjdump_path, opcodes

    src = "".join(_store_nd_source(r, 256, f"tma_store_{r}d") for r in range(1, 6))
    mod = compile_cuda(h.source(src), "sm_90", want_ptx=True)
    for r in range(1, 6):
        assert f"cp.async.bulk.tensor.{r}d.global.shared::cta.tile.bulk_group" in mod.ptx
    if cuobjdump_path() is None:
        pytest.skip("cuobjdump not installed (it comes with the test extra: pip install -e \".[test]\")")
    ops = opcodes(mod.cubin)
    assert [ops[f"UTMASTG.{r}D"] for r in range(1, 6)] == [1] * 5, sorted(ops)   # one TMA store of each rank
