"""x86 low-precision register-tile micro-kernels: int8 (VNNI, AVX2) and bf16 (AVX512-BF16).

int8 ``x86.<isa>.u8s8s32_<MR>x<NR>x<KC>``: ``C[MR, NR] += A[MR, KC] @ B[KC, NR]``, u8 x s8 -> s32,
exact (int32 accumulation, wrapping as numpy's int32 does; any order of the sums gives the same
result). The MR x NR tile of C stays in vector registers; for each group of 4 k, the 4 bytes
``A[i, 4q:4q+4]`` are broadcast to every 32-bit lane and multiplied with the packed B, whose tile
is k-by-4 interleaved: ``B[q, j, r] = B_logical[4q + r, j]`` (shape (KC/4, NR, 4)), so that one
vector load holds, per 32-bit lane, one column's 4 consecutive k, as vpdpbusd wants. A's rows
must have unit stride along k, C's along j. The packing is what a schedule writes with
``cache_read`` + ``transform_layout(B_pack, lambda k, j: (j // NR, k // 4, j % NR, k % 4))``.

* ``avx512vnni`` (16 int32 lanes, zmm): ``vpdpbusd`` (``llvm.x86.avx512.vpdpbusd.512``);
* ``avxvnni`` (8 lanes, ymm): the VEX ``vpdpbusd`` (``llvm.x86.avx512.vpdpbusd.256`` on a CPU
  with AVX-VNNI and without AVX-512);
* ``avx2`` (8 lanes): the exact fallback for CPUs without VNNI: both operands widened to int16
  (A zero-, B sign-extended; vpmaddubsw would saturate) and multiplied pairwise with vpmaddwd
  into 2 partial sums per column (k pairs 0-1 and 2-3), which are added once per KC steps.

bf16 ``x86.avx512bf16.bf16f32_<MR>x<NR>x<KC>``: ``C[MR, NR] += A[MR, KC] @ B[KC, NR]`` in fp32
from bfloat16 operands on vdpbf16ps, B packed in k pairs (``transform_layout(B_pack, lambda k, j:
(j // NR, k // 2, j % NR, k % 2))``), A's 2 bfloat16 of a pair broadcast as one 32-bit lane; see
`register_bf16` for the order of accumulation.

float16 (and bfloat16 where vdpbf16ps is missing or slow) have no kernel here: their GEMMs convert
the operands to fp32 while packing them (``cache_read(..., dtype="float32")``) and run the fp32
micro-kernel of `tdsl.intrinsics.x86` (see `tdsl.auto.rules.lowp_convert`).

Every kernel has an ``_init`` variant (name suffix): ``C = A @ B`` for a tile that spans the
whole reduction, accumulators starting at zero (`with_init`).

`int8_microkernel(features, kc)` returns the best int8 variant's name for a CPU with `features`
(``tdsl.target.cpu_features(target)``), registered with `kc` steps of k; `int8_isa` names the ISA
a CPU's features allow.
"""
from __future__ import annotations

import re

from ..errors import TargetError
from .registry import TensorIntrin

INT8_ISAS = {
    # isa: (int32 lanes, CPU features, default (MR, NR))
    "avx512vnni": (16, ("avx512f", "avx512bw", "avx512vnni"), (8, 32)),
    "avxvnni": (8, ("avx2", "avxvnni"), (4, 16)),
    "avx2": (8, ("avx2",), (4, 16)),
}
VPDPBUSD = {"avx512vnni": "llvm.x86.avx512.vpdpbusd.512", "avxvnni": "llvm.x86.avx512.vpdpbusd.256"}


def _int8_desc(mr: int, nr: int, kc: int) -> str:
    return f'''
@T.prim_func
def u8s8s32_desc(A: T.Buffer(({mr}, {kc}), "uint8", strides=("a_s", 1)),
                 B: T.Buffer(({kc // 4}, {nr}, 4), "int8", strides=("b_s", 4, 1)),
                 C: T.Buffer(({mr}, {nr}), "int32", strides=("c_s", 1))):
    for i, j, k in T.grid({mr}, {nr}, {kc}):
        with T.block("update"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "int32") * T.cast(B[vk // 4, vj, vk % 4], "int32")
'''


def _a_quad(lanes: int) -> str:
    """The 4 bytes A[i, 4q:4q+4] repeated over `lanes` 32-bit lanes (a periodic index: LLVM
    makes it one 32-bit broadcast load)."""
    n = 4 * lanes
    return f"A[i, T.Broadcast(q * 4, {n}) + T.Ramp(0, 1, {n}) % T.Broadcast(4, {n})]"


def _int8_vnni_impl(isa: str, mr: int, nr: int, kc: int) -> str:
    lanes = INT8_ISAS[isa][0]
    nv = nr // lanes
    vec = f"T.Ramp(v * {lanes}, 1, {lanes})"
    return f'''
@T.prim_func
def u8s8s32_impl(A: T.Buffer(({mr}, {kc}), "uint8", strides=("a_s", 1)),
                 B: T.Buffer(({kc // 4}, {nr}, 4), "int8", strides=("b_s", 4, 1)),
                 C: T.Buffer(({mr}, {nr}), "int32", strides=("c_s", 1))):
    acc = T.alloc_buffer(({mr}, {nr}), "int32", scope="local")
    for i in T.unroll({mr}):
        for v in T.unroll({nv}):
            acc[i, {vec}] = C[i, {vec}]
    for q in range({kc // 4}):
        for i in T.unroll({mr}):
            for v in T.unroll({nv}):
                acc[i, {vec}] = T.call_extern("int32x{lanes}", "{VPDPBUSD[isa]}", acc[i, {vec}],
                                              {_a_quad(lanes)}, B[q, v * {lanes}, T.Ramp(0, 1, {4 * lanes})])
    for i in T.unroll({mr}):
        for v in T.unroll({nv}):
            C[i, {vec}] = acc[i, {vec}]
'''


def _int8_avx2_impl(mr: int, nr: int, kc: int) -> str:
    # acc2[i, 2j + h]: column j's sum over the k pairs h (k % 4 in {0, 1} or {2, 3}); a vpmaddwd
    # of 16 int16 (4 columns x 4 k) gives those 8 partial sums in this order
    nv = 2 * nr // 8
    vec = "T.Ramp(v * 8, 1, 8)"
    return f'''
@T.prim_func
def u8s8s32_impl(A: T.Buffer(({mr}, {kc}), "uint8", strides=("a_s", 1)),
                 B: T.Buffer(({kc // 4}, {nr}, 4), "int8", strides=("b_s", 4, 1)),
                 C: T.Buffer(({mr}, {nr}), "int32", strides=("c_s", 1))):
    acc = T.alloc_buffer(({mr}, {2 * nr}), "int32", scope="local")
    for i in T.unroll({mr}):
        for v in T.unroll({nv}):
            acc[i, {vec}] = T.Broadcast(0, 8)
    for q in range({kc // 4}):
        for i in T.unroll({mr}):
            for v in T.unroll({nv}):
                acc[i, {vec}] = acc[i, {vec}] + T.call_extern(
                    "int32x8", "llvm.x86.avx2.pmadd.wd", T.cast({_a_quad(4)}, "int16x16"),
                    T.cast(B[q, v * 4, T.Ramp(0, 1, 16)], "int16x16"))
    for i in T.unroll({mr}):
        for v in T.unroll({nr // 8}):
            C[i, {vec}] = C[i, {vec}] + acc[i, T.Ramp(v * 16, 2, 8)] + acc[i, T.Ramp(v * 16 + 1, 2, 8)]
'''


def with_init(desc: str, impl: str, zero: str) -> tuple[str, str]:
    """The `_init` variant of a micro-kernel's script texts: C = A @ B over the whole reduction
    (the description's block gets `T.init()`, the accumulators start at zero instead of C), so
    that a tile spanning all of k writes C once and never reads it."""
    desc = desc.replace("            C[vi, vj] = C[vi, vj] + ",
                        f"            with T.init():\n                C[vi, vj] = {zero}\n            C[vi, vj] = C[vi, vj] + ")
    impl = re.sub(r"acc\[i, (T\.Ramp\(v \* (\d+), 1, \d+\))\] = C\[i, \1\]",
                  lambda m: f"acc[i, {m[1]}] = T.Broadcast({zero}, {m[2]})", impl)
    impl = impl.replace("C[i, T.Ramp(v * 8, 1, 8)] = C[i, T.Ramp(v * 8, 1, 8)] + acc", "C[i, T.Ramp(v * 8, 1, 8)] = acc")
    return desc, impl


def int8_name(isa: str, mr: int, nr: int, kc: int, init: bool = False) -> str:
    return f"x86.{isa}.u8s8s32_{mr}x{nr}x{kc}" + ("_init" if init else "")


def register_int8(isa: str, mr: int, nr: int, kc: int, init: bool = False) -> str:
    """Register (once) the u8 x s8 -> s32 micro-kernel of `isa` ("avx512vnni", "avxvnni" or
    "avx2") with an MR x NR tile of C and KC steps of k (a multiple of 4); `init` (name suffix
    `_init`): C = A @ B for a tile that spans the whole reduction (see `with_init`)."""
    from ..script import parse

    name = int8_name(isa, mr, nr, kc, init)
    if TensorIntrin.exists(name):
        return name
    if isa not in INT8_ISAS:
        raise ValueError(f"{name}: unknown int8 ISA {isa!r}; one of {', '.join(INT8_ISAS)}")
    lanes, features, _ = INT8_ISAS[isa]
    if nr % lanes or mr <= 0 or nr <= 0 or kc <= 0 or kc % 4:
        raise ValueError(f"{name}: NR must be a positive multiple of {lanes} (the {isa} int32 lanes), KC a "
                         "positive multiple of 4, MR positive")
    desc = _int8_desc(mr, nr, kc)
    impl = _int8_avx2_impl(mr, nr, kc) if isa == "avx2" else _int8_vnni_impl(isa, mr, nr, kc)
    if init:
        desc, impl = with_init(desc, impl, "0")
    unit = "vpmaddwd on int16" if isa == "avx2" else "vpdpbusd"
    TensorIntrin.register(name, parse(desc), parse(impl), target="cpu", features=features,
                          doc=f"C[{mr},{nr}] += A[{mr},{kc}] @ B[{kc},{nr}], u8 x s8 -> s32, B packed k-by-4 "
                              f"({isa} {unit})")
    return name


def int8_isa(features) -> str | None:
    """The best int8 micro-kernel ISA for a CPU with `features` (LLVM names), or None."""
    return next((isa for isa, (_, need, _) in INT8_ISAS.items() if all(f in features for f in need)), None)


def int8_microkernel(features, kc: int = 256, isa: str | None = None) -> str:
    """The name of the int8 micro-kernel for a CPU with `features` (`tdsl.target.cpu_features`):
    AVX512-VNNI 8x32, else AVX-VNNI 4x16, else the exact AVX2 4x16; a TargetError without AVX2."""
    chosen = isa or int8_isa(features)
    if chosen is None or not all(f in features for f in INT8_ISAS[chosen][1]):
        raise TargetError(f"the CPU lacks {', '.join(INT8_ISAS[chosen or 'avx2'][1])} for the int8 micro-kernel")
    mr, nr = INT8_ISAS[chosen][2]
    return register_int8(chosen, mr, nr, kc)


def _int8_from_name(m) -> None:
    register_int8(m[1], int(m[2]), int(m[3]), int(m[4]), bool(m[5]))


BF16_FEATURES = ("avx512f", "avx512bf16")
BF16_TILE = (8, 32)


def _bf16_desc(mr: int, nr: int, kc: int) -> str:
    return f'''
@T.prim_func
def bf16_desc(A: T.Buffer(({mr}, {kc}), "bfloat16", strides=("a_s", 1)),
              B: T.Buffer(({kc // 2}, {nr}, 2), "bfloat16", strides=("b_s", 2, 1)),
              C: T.Buffer(({mr}, {nr}), "float32", strides=("c_s", 1))):
    for i, j, k in T.grid({mr}, {nr}, {kc}):
        with T.block("update"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk // 2, vj, vk % 2], "float32")
'''


def _bf16_impl(mr: int, nr: int, kc: int) -> str:
    nv = nr // 16
    vec = "T.Ramp(v * 16, 1, 16)"
    pair = "A[i, T.Broadcast(q * 2, 32) + T.Ramp(0, 1, 32) % T.Broadcast(2, 32)]"
    return f'''
@T.prim_func
def bf16_impl(A: T.Buffer(({mr}, {kc}), "bfloat16", strides=("a_s", 1)),
              B: T.Buffer(({kc // 2}, {nr}, 2), "bfloat16", strides=("b_s", 2, 1)),
              C: T.Buffer(({mr}, {nr}), "float32", strides=("c_s", 1))):
    acc = T.alloc_buffer(({mr}, {nr}), "float32", scope="local")
    for i in T.unroll({mr}):
        for v in T.unroll({nv}):
            acc[i, {vec}] = C[i, {vec}]
    for q in range({kc // 2}):
        for i in T.unroll({mr}):
            for v in T.unroll({nv}):
                acc[i, {vec}] = T.call_extern("float32x16", "llvm.x86.avx512bf16.dpbf16ps.512", acc[i, {vec}],
                                              {pair}, B[q, v * 16, T.Ramp(0, 1, 32)])
    for i in T.unroll({mr}):
        for v in T.unroll({nv}):
            C[i, {vec}] = acc[i, {vec}]
'''


def bf16_name(mr: int, nr: int, kc: int, init: bool = False) -> str:
    return f"x86.avx512bf16.bf16f32_{mr}x{nr}x{kc}" + ("_init" if init else "")


def register_bf16(mr: int, nr: int, kc: int, init: bool = False) -> str:
    """Register (once) the bf16 x bf16 -> fp32 micro-kernel (AVX512-BF16 vdpbf16ps) with an MR x NR
    tile of C (NR a multiple of 16) and KC steps of k (even); B packed pair-interleaved:
    ``B[q, j, r] = B_logical[2q + r, j]``.

    Order of accumulation: for each pair of k (2q, 2q + 1), vdpbf16ps adds the product of the odd
    element, then that of the even one, to the fp32 accumulator, each rounded to nearest even (the
    products of two bfloat16 are exact in fp32); denormal inputs and results are flushed to zero.
    The description adds k in increasing order, so results agree within fp32 rounding of the sum."""
    from ..script import parse

    name = bf16_name(mr, nr, kc, init)
    if TensorIntrin.exists(name):
        return name
    if nr % 16 or mr <= 0 or nr <= 0 or kc <= 0 or kc % 2:
        raise ValueError(f"{name}: NR must be a positive multiple of 16 (the fp32 lanes of a zmm), KC a positive "
                         "even number, MR positive")
    desc, impl = _bf16_desc(mr, nr, kc), _bf16_impl(mr, nr, kc)
    if init:
        desc, impl = with_init(desc, impl, "T.float32(0)")
    TensorIntrin.register(name, parse(desc), parse(impl), target="cpu",
                          features=BF16_FEATURES,
                          doc=f"C[{mr},{nr}] += A[{mr},{kc}] @ B[{kc},{nr}], bf16 x bf16 -> fp32, B packed in "
                              "k pairs (AVX512-BF16 vdpbf16ps)")
    return name


def _bf16_from_name(m) -> None:
    register_bf16(int(m[1]), int(m[2]), int(m[3]), bool(m[4]))


def register_families() -> None:
    """Make ``x86.<isa>.u8s8s32_<MR>x<NR>x<KC>`` on first use of the name."""
    TensorIntrin.register_family(r"x86\.(avx512vnni|avxvnni|avx2)\.u8s8s32_(\d+)x(\d+)x(\d+)(_init)?", _int8_from_name)
    TensorIntrin.register_family(r"x86\.avx512bf16\.bf16f32_(\d+)x(\d+)x(\d+)(_init)?", _bf16_from_name)
