"""The convert-in-packing path of float16 / bfloat16 GEMMs on the CPU, and the per-CPU choice
between it and AVX512-BF16's vdpbf16ps.

A GEMM `C[i, j] += float32(A[i, k]) * float32(B[k, j])` with A and B float16 or bfloat16 becomes
an fp32 GEMM on converted copies: the packing copies convert (`cache_read(..., dtype="float32")`,
vcvtph2ps for float16, a 16-bit shift for bfloat16), so the hot loop is exactly the fp32 FMA
micro-kernel `x86.<isa>.fp32_<MR>x<NR>x<KC>`, tiled as `matmul_cpu` tiles an fp32 GEMM (B into
NR-wide fp32 panels, A per MC block into MR-interleaved fp32 micro-panels, C in micro-tiles).
Each product is exact in fp32 and each sum one FMA rounding, as for the fp32 GEMM.

Where A is not a plain matrix (conv2d in NHWC: `X[b, y + r, x + s, c]`) it is converted once,
whole, into an fp32 copy of the same shape that the micro-kernel reads in place; B is still
converted while it is packed.

bfloat16 on a CPU with AVX512-BF16 has two paths, both in the design space (`tdsl.tune` measures
them); the default follows `BF16_DOT_PATH`, keyed by the LLVM CPU name: Intel's cores run
vdpbf16ps at half the fp32 FMA rate (one 512-bit vdpbf16ps per cycle against two FMAs, each
vdpbf16ps doing two products per lane), so converting is about 2x faster there; AMD's Zen 4 /
Zen 5 run it at the FMA rate, so the dot product does twice the work per instruction.
"""
from __future__ import annotations

from ...intrinsics import x86
from ...ir.attrs import INFO_NOTE
from ...target import cpu_name

CONVERT_FEATURES = {
    # the fp32 micro-kernel ISA: what it and the vector conversion need (float16: F16C's
    # vcvtph2ps, part of AVX-512F; bfloat16: only shifts)
    "avx512": ("avx512f",),
    "avx2": ("avx2", "fma", "f16c"),
}

BF16_DOT_PATH = {
    # LLVM CPU name: vdpbf16ps is the faster path there
    "znver4": True, "znver5": True,
    "cooperlake": False, "sapphirerapids": False, "emeraldrapids": False, "graniterapids": False,
    "graniterapids-d": False, "diamondrapids": False,
}
"""Per CPU, whether bfloat16 GEMMs default to vdpbf16ps (True) or to converting in packing
(False). A CPU not listed: AMD's (`znver*`) take vdpbf16ps, others convert (an Intel core, or a
virtual machine whose CPU LLVM names after an older Intel core, as "rocketlake" with AVX512-BF16)."""


def convert_isa(features, dtype: str) -> str | None:
    """The fp32 micro-kernel ISA that can run a `dtype` GEMM converted in packing, or None."""
    return next((isa for isa, need in CONVERT_FEATURES.items()
                 if all(f in features for f in need if dtype == "float16" or f != "f16c")), None)


def bf16_prefers_dot(target) -> tuple[bool, str]:
    """(vdpbf16ps first?, why) for a CPU target with AVX512-BF16."""
    name = cpu_name(target)
    dot = BF16_DOT_PATH.get(name, name.startswith("znver"))
    why = (f"on {name} vdpbf16ps runs at the fp32 FMA rate, doing 2 products per lane" if dot else
           f"on {name} vdpbf16ps runs at half the fp32 FMA rate, so converting to fp32 in packing and "
           "running the fp32 FMA kernel is about 2x faster")
    return dot, why


def convert_note(dtype: str, block: str, why: str, a_whole: bool = False) -> str:
    """The `kernel.notes` line (informational: it does not warn) of a converted GEMM ({intrin}: the
    micro-kernel's name); `a_whole`: A (a conv2d's input) is converted into a copy of its shape, B
    while packed."""
    what = "A converted to float32 whole and B while packed" if a_whole else "A and B converted to float32 while packed"
    return (f"{INFO_NOTE}{dtype} GEMM block {block!r}: {what} (cache_read dtype='float32'), then the fp32 FMA "
            f"micro-kernel {{intrin}}; {why}")


def fp32_kernel(isa: str, mr: int, nr: int, kc: int) -> str:
    """The fp32 micro-kernel a converted tile is tensorized with."""
    return x86.register_fp32(isa, mr, nr, kc)


__all__ = ["BF16_DOT_PATH", "CONVERT_FEATURES", "bf16_prefers_dot", "convert_isa", "convert_note"]
