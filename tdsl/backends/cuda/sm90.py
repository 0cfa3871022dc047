"""Hopper (sm_90a) device functions: mbarrier, named barriers, fence.proxy.async, TMA, wgmma, setmaxnreg.

`device_functions()` is CUDA C++ (inline PTX) that a kernel's source puts before its kernels;
the emulator's header `include/sm90.h` defines the same functions as a model of what the PTX
ISA says they do, so one source runs on a GPU and in the emulator:

    __shared__ __align__(16) unsigned long long bars[1];
    if (threadIdx.x == 0) tdsl_ptx_mbarrier_init(&bars[0], 128);
    __syncthreads();
    tdsl_ptx_mbarrier_arrive(&bars[0]);
    tdsl_ptx_mbarrier_wait(&bars[0], 0);      // phase 0 complete: all 128 arrived

wgmma and setmaxnreg need the architecture-specific target sm_90a: `check_arch_features` refuses
a source that uses them for any other architecture before NVRTC sees it.
"""
from __future__ import annotations

import re

from ...errors import TargetError

# PTX instructions that only the architecture-specific target sm_90a accepts (PTX ISA:
# "wgmma.mma_async ... requires sm_90a", "setmaxnreg requires sm_90a")
ARCH_SPECIFIC = {"wgmma.": "wgmma (warpgroup matrix multiply)", "setmaxnreg.": "setmaxnreg (register reallocation)"}
_ARCH_SPECIFIC_USES = re.compile(r"(wgmma|setmaxnreg)[._]")
_BEGIN, _END = "// tdsl: Hopper device functions", "// tdsl: end of the Hopper device functions"
PRELUDE_MARK = _BEGIN   # in a source that has them already

_MBARRIER = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__device__ __forceinline__ unsigned tdsl_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void tdsl_ptx_mbarrier_init(unsigned long long* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(tdsl_smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ unsigned long long tdsl_ptx_mbarrier_arrive(unsigned long long* bar) {
  unsigned long long state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(tdsl_smem_addr(bar)) : "memory");
  return state;
}
__device__ __forceinline__ unsigned long long tdsl_ptx_mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned tx) {
  unsigned long long state;
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;" : "=l"(state)
               : "r"(tdsl_smem_addr(bar)), "r"(tx) : "memory");
  return state;
}
__device__ __forceinline__ void tdsl_ptx_mbarrier_expect_tx(unsigned long long* bar, unsigned tx) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" :: "r"(tdsl_smem_addr(bar)), "r"(tx)
               : "memory");
}
__device__ __forceinline__ void tdsl_ptx_mbarrier_wait(unsigned long long* bar, int parity) {
  asm volatile("{\n .reg .pred done;\n WAIT_%=:\n"
               " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               " @!done bra WAIT_%=;\n}" :: "r"(tdsl_smem_addr(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void tdsl_ptx_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void tdsl_ptx_fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// TensorIR passes buffer elements to extern calls by reference: the same functions taking them
__device__ __forceinline__ void tdsl_ptx_mbarrier_init(unsigned long long& bar, int count) {
  tdsl_ptx_mbarrier_init(&bar, count);
}
__device__ __forceinline__ unsigned long long tdsl_ptx_mbarrier_arrive(unsigned long long& bar) {
  return tdsl_ptx_mbarrier_arrive(&bar);
}
__device__ __forceinline__ void tdsl_ptx_mbarrier_expect_tx(unsigned long long& bar, unsigned tx) {
  tdsl_ptx_mbarrier_expect_tx(&bar, tx);
}
__device__ __forceinline__ unsigned long long tdsl_ptx_mbarrier_arrive_expect_tx(unsigned long long& bar, unsigned tx) {
  return tdsl_ptx_mbarrier_arrive_expect_tx(&bar, tx);
}
__device__ __forceinline__ void tdsl_ptx_mbarrier_wait(unsigned long long& bar, int parity) {
  tdsl_ptx_mbarrier_wait(&bar, parity);
}
"""

# named barriers (PTX ISA "bar, barrier"): barrier `id` (0..15; 0 is the one __syncthreads uses)
# completes when `count` threads (a multiple of 32: a warp arrives whole) have arrived; bar.sync
# arrives and waits, bar.arrive arrives only
_NAMED_BARRIERS = r"""
__device__ __forceinline__ void tdsl_ptx_bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void tdsl_ptx_bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(count) : "memory");
}
"""

_COORDS = ("x", "y", "z", "w", "v")
_TMA_REFERENCE_FORMS = r"""
#define TDSL_SM90_TMA_REF(T)                                                                                  \
  __device__ __forceinline__ void tdsl_ptx_tma_load_2d(T& dst, const unsigned char& tensor_map, int x, int y,    \
                                                       unsigned long long& bar) {                               \
    tdsl_ptx_tma_load_2d((void*)&dst, (const void*)&tensor_map, x, y, &bar);                                    \
  }
TDSL_SM90_TMA_REF(half) TDSL_SM90_TMA_REF(nv_bfloat16) TDSL_SM90_TMA_REF(float) TDSL_SM90_TMA_REF(unsigned char)
"""


def _tma_load_function(rank: int) -> str:
    """tdsl_ptx_tma_load_{rank}d(dst, tensor_map, x[, y, z, w, v], bar): a box of the tensor map at
    those coordinates (innermost first) into shared memory, completing on `bar`'s tx-count."""
    coords = _COORDS[:rank]
    params = ", ".join(f"int {c}" for c in coords)
    regs = ", ".join(f"%{2 + i}" for i in range(rank))
    binds = ", ".join(f'"r"({c})' for c in coords)
    return (f"__device__ __forceinline__ void tdsl_ptx_tma_load_{rank}d(void* dst, const void* tensor_map, {params}, "
            f"unsigned long long* bar) {{\n"
            f'  asm volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"\n'
            f'               " [%0], [%1, {{{regs}}}], [%{2 + rank}];"\n'
            f'               :: "r"(tdsl_smem_addr(dst)), "l"(tensor_map), {binds}, "r"(tdsl_smem_addr(bar)) : "memory");\n'
            f"}}\n")


def _tma_store_function(rank: int) -> str:
    """tdsl_ptx_tma_store_{rank}d(tensor_map, x[, y, z, w, v], src): the box at `src` in shared memory into the
    tensor at those coordinates (elements outside it are skipped), in the thread's current bulk group."""
    coords = _COORDS[:rank]
    params = ", ".join(f"int {c}" for c in coords)
    regs = ", ".join(f"%{1 + i}" for i in range(rank))
    binds = ", ".join(f'"r"({c})' for c in coords)
    return (f"__device__ __forceinline__ void tdsl_ptx_tma_store_{rank}d(const void* tensor_map, {params}, "
            f"const void* src) {{\n"
            f'  asm volatile("cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group"\n'
            f'               " [%0, {{{regs}}}], [%{1 + rank}];"\n'
            f'               :: "l"(tensor_map), {binds}, "r"(tdsl_smem_addr(src)) : "memory");\n'
            f"}}\n")


_BULK_GROUPS = r"""
__device__ __forceinline__ void tdsl_ptx_bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void tdsl_ptx_bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void tdsl_ptx_bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}
"""

_TMA_LOADS = ("".join(_tma_load_function(rank) for rank in range(1, 6))
              + "".join(_tma_store_function(rank) for rank in range(1, 6)) + _BULK_GROUPS)

_ARCH_SPECIFIC_FUNCTIONS = r"""
// a matrix descriptor (PTX ISA "Matrix Descriptor Format"); swizzle 0 none, 1 128B, 2 64B, 3 32B
__device__ __forceinline__ unsigned long long tdsl_ptx_wgmma_desc(const void* smem, int lbo, int sbo, int swizzle) {
  return (unsigned long long)((tdsl_smem_addr(smem) >> 4) & 0x3fff) | ((unsigned long long)((lbo >> 4) & 0x3fff) << 16)
         | ((unsigned long long)((sbo >> 4) & 0x3fff) << 32) | ((unsigned long long)(swizzle & 3) << 62);
}
__device__ __forceinline__ unsigned long long tdsl_ptx_wgmma_desc(half& smem, int lbo, int sbo, int swizzle) {
  return tdsl_ptx_wgmma_desc((const void*)&smem, lbo, sbo, swizzle);
}
__device__ __forceinline__ unsigned long long tdsl_ptx_wgmma_desc(nv_bfloat16& smem, int lbo, int sbo, int swizzle) {
  return tdsl_ptx_wgmma_desc((const void*)&smem, lbo, sbo, swizzle);
}
__device__ __forceinline__ void tdsl_ptx_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void tdsl_ptx_wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> __device__ __forceinline__ void tdsl_ptx_wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
template <int R> __device__ __forceinline__ void tdsl_ptx_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(R));
}
template <int R> __device__ __forceinline__ void tdsl_ptx_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(R));
}
"""


B_MAJORS = {"k": ("", 0), "mn": ("_bmn", 1)}   # B's major-ness: name suffix, imm-trans-b
A_SOURCES = {"ss": "", "rs": "_rs"}              # A from shared memory (a descriptor) or from registers


def wgmma_name(n: int, dtype: str, b_major: str = "k", a_source: str = "ss") -> str:
    """The device function's name: tdsl_ptx_wgmma_m64n{n}k16_f32_{dtype}[_rs][_bmn]."""
    return f"tdsl_ptx_wgmma_m64n{n}k16_f32_{dtype}{A_SOURCES[a_source]}{B_MAJORS[b_major][0]}"


def wgmma_function(n: int, dtype: str, b_major: str = "k", a_source: str = "ss") -> str:
    """The device function `tdsl_ptx_wgmma_m64n{n}k16_f32_{dtype}(float* d, desc_a, desc_b, scale_d)`:
    D (n / 2 floats per thread of the warpgroup) = A * B (+ D when scale_d != 0), A and B from shared
    memory through matrix descriptors, A K-major; B K-major, or with `b_major="mn"` N-major
    (``..._bmn``: imm-trans-b = 1, the PTX ISA's "transposed" B, a [K, N] tile with N contiguous).

    With `a_source="rs"` A comes from registers (``..._rs[_bmn](float* d, const unsigned* a,
    desc_b, scale_d)``, 4 x .b32 holding 8 halves per thread): the PTX ISA's register fragment of
    A for m64nNk16, warp w holding rows 16w..16w+15, lane l the rows l/4 and l/4 + 8, columns
    2 (l % 4) + {0, 1} and + 8 (a0 = row l/4, a1 = row l/4 + 8, a2 / a3 the same 8 columns on;
    the lower half of a register the lower column). The register form has no imm-trans-a (A is
    K-major) and the instruction reads the registers asynchronously: they must not change before
    the wgmma's wait_group."""
    if (dtype not in ("f16", "bf16") or n % 8 or not 8 <= n <= 256 or b_major not in B_MAJORS
            or a_source not in A_SOURCES):
        raise TargetError(f"wgmma m64nNk16 takes N a multiple of 8 in [8, 256], f16 or bf16 inputs, B major-ness "
                          f"'k' or 'mn' and A from 'ss' (shared memory) or 'rs' (registers), got N={n}, {dtype}, "
                          f"{b_major!r}, {a_source!r}")
    regs = n // 2
    name, trans_b = wgmma_name(n, dtype, b_major, a_source), B_MAJORS[b_major][1]
    outs = ", ".join(f"%{i}" for i in range(regs))
    binds = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    if a_source == "rs":
        return (f"__device__ __forceinline__ void {name}(float* d, const unsigned* a, unsigned long long desc_b, "
                f"int scale_d) {{\n"
                f'  asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, %{regs + 5}, 0;\\n'
                f" wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dtype}.{dtype} {{{outs}}}, "
                f"{{%{regs}, %{regs + 1}, %{regs + 2}, %{regs + 3}}}, %{regs + 4}, p, "
                f'1, 1, {trans_b};\\n}}"\n'
                f'    : {binds}\n    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d) '
                f': "memory");\n}}\n'
                f"__device__ __forceinline__ void {name}(float& d, const unsigned& a, unsigned long long desc_b, "
                f"int scale_d) {{\n"
                f"  {name}(&d, &a, desc_b, scale_d);\n}}\n")
    return (f"__device__ __forceinline__ void {name}(float* d, unsigned long long "
            f"desc_a, unsigned long long desc_b, int scale_d) {{\n"
            f'  asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, %{regs + 2}, 0;\\n'
            f" wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dtype}.{dtype} {{{outs}}}, %{regs}, %{regs + 1}, p, "
            f'1, 1, 0, {trans_b};\\n}}"\n'
            f'    : {binds}\n    : "l"(desc_a), "l"(desc_b), "r"(scale_d) : "memory");\n}}\n'
            f"__device__ __forceinline__ void {name}(float& d, unsigned long long "
            f"desc_a, unsigned long long desc_b, int scale_d) {{\n"
            f"  {name}(&d, desc_a, desc_b, scale_d);\n}}\n")


def device_functions(wgmma: tuple[tuple, ...] = ()) -> str:
    """The Hopper device functions as CUDA C++ for NVRTC (skipped by the emulator, whose header
    defines them); `wgmma` lists the wgmma wanted as (N, dtype), (N, dtype, b_major) or
    (N, dtype, b_major, a_source) (b_major "k" or "mn", a_source "ss" or "rs"; see `wgmma_function`)."""
    specific = _ARCH_SPECIFIC_FUNCTIONS + "".join(wgmma_function(*w) for w in wgmma)
    # (__CUDA_ARCH_FEAT_SM90_ALL: defined when compiling for sm_90a only)
    portable = _MBARRIER + _NAMED_BARRIERS + _TMA_LOADS + _TMA_REFERENCE_FORMS
    return (f"{_BEGIN}\n#ifndef TDSL_CUDA_EMU_H\n{portable}#ifdef __CUDA_ARCH_FEAT_SM90_ALL\n{specific}#endif\n"
            f"#endif\n{_END}\n")


def needs_sm90a(source: str) -> bool:
    """Whether `source` uses sm_90a-only PTX (wgmma, setmaxnreg) outside the device functions."""
    try:
        check_arch_features(source, "sm_90")
    except TargetError:
        return True
    return False


def check_arch_features(source: str, arch: str) -> None:
    """Refuse a source using sm_90a-only PTX (wgmma, setmaxnreg) for any other architecture:
    TargetError naming the instruction and the source line."""
    if arch == "sm_90a":
        return
    inside = False
    for number, line in enumerate(source.splitlines(), 1):
        inside = (inside or line == _BEGIN) and line != _END
        m = None if inside else _ARCH_SPECIFIC_USES.search(line)
        if m:
            what = ARCH_SPECIFIC[m.group(1) + "."]
            raise TargetError(f"{what} needs the architecture-specific target sm_90a, but the kernel is "
                              f"built for {arch} (line {number}: {line.strip()[:80]}); build with arch=\"sm_90a\" "
                              f"(an H100/H200), or leave {m.group(1).rstrip('.')} out")


# ---------------------------------------------------------------------------- TMA tensor maps

SWIZZLES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}
TENSOR_MAP_MAGIC = 0x31444D54   # "TMD1": tdsl's own 128-byte tensor-map encoding, read by the emulator


def swizzle_offset(offset: int, swizzle: str) -> int:
    """Where byte `offset` of a box lands in shared memory under a TMA swizzle mode: CuTe's
    Swizzle<B, 4, 3> on byte offsets (B = 1, 2, 3 for 32B, 64B, 128B): the 16-byte chunk index
    (bits 4..) XOR the row of 128 bytes (bits 7..), B bits of each.

    >>> swizzle_offset(128 + 16, "128B")   # row 1, chunk 1 -> chunk 0
    128
    """
    bits = {"none": 0, "32B": 1, "64B": 2, "128B": 3}[swizzle]
    return offset ^ ((offset & (((1 << bits) - 1) << 7)) >> 3)


def emulator_tensor_map(array, box: tuple[int, ...], swizzle: str = "none"):
    """tdsl's encoding of a tiled tensor map over the C-contiguous numpy `array` (1 to 5
    dimensions) for the emulator's tdsl_ptx_tma_load_{1..5}d: 128 bytes, as a CUtensorMap is.
    `box` is in the array's axis order (outermost first, like its shape); the load's coordinates
    are innermost first (x = column). The checks are the driver's (cuTensorMapEncodeTiled): box
    sides 1..256, the box's innermost extent a multiple of 16 bytes and at most the swizzle span,
    the strides multiples of 16 bytes, the base 16-byte aligned.

    >>> emulator_tensor_map(np.zeros((64, 64), np.float16), (64, 16), "32B").nbytes
    128
    """
    import numpy as np

    if not 1 <= array.ndim <= 5 or not array.flags.c_contiguous:
        raise TargetError(f"a tensor map needs a C-contiguous array of 1 to 5 dimensions, got shape {array.shape}")
    if swizzle not in SWIZZLES:
        raise TargetError(f"unknown TMA swizzle {swizzle!r}; expected one of {', '.join(SWIZZLES)}")
    box = tuple(box)
    if len(box) != array.ndim:
        raise TargetError(f"TMA box {box} has {len(box)} sides for an array of {array.ndim} dimensions")
    elem = array.dtype.itemsize
    if any(not 1 <= side <= 256 for side in box):
        raise TargetError(f"TMA box {box}: each side is 1 to 256 elements")
    inner = box[-1] * elem
    if inner % 16:
        raise TargetError(f"TMA box {box}: its rows are {inner} bytes, not a multiple of 16")
    if SWIZZLES[swizzle] and inner > SWIZZLES[swizzle]:
        raise TargetError(f"TMA box {box}: its rows are {inner} bytes, more than the {swizzle} swizzle span; use a "
                          f"narrower box or a wider swizzle")
    if any(st % 16 for st in array.strides[:-1]) or array.ctypes.data % 16:
        raise TargetError("a tensor map's rows start at multiples of 16 bytes (strides and base address)")
    dims, strides, sides = array.shape[::-1], array.strides[::-1], box[::-1]   # innermost first
    fields = np.zeros(16, np.int64)
    fields[0] = TENSOR_MAP_MAGIC | (elem << 32) | (array.ndim << 40) | (SWIZZLES[swizzle] << 48)
    fields[1] = array.ctypes.data
    fields[2:2 + array.ndim] = dims
    fields[7:6 + array.ndim] = strides[1:]
    fields[11] = sum(side << (16 * d) for d, side in enumerate(sides[:4]))
    fields[12] = sides[4] if array.ndim == 5 else 0
    return fields.view(np.uint8)
