"""x86 tensor intrinsics for the CPU backend.

fp32 register-tile micro-kernel ``x86.<isa>.fp32_<MR>x<NR>x<KC>`` (isa ``avx512`` or
``avx2``): ``C[MR, NR] += A[MR, KC] @ B[KC, NR]``. The implementation keeps the MR x NR tile
of C in vector registers (a small ``local`` accumulator that LLVM promotes to registers) and,
for each k, broadcasts ``A[i, k]`` and FMAs it with the NR/lanes vectors of row k of B
(``llvm.fma.v16f32`` / ``llvm.fma.v8f32``). B and C rows must be contiguous (unit inner stride).
Any MR, KC and any NR that is a multiple of the lanes is made on first use; the defaults are
``x86.avx512.fp32_8x32x<KC>`` (16 zmm accumulators) and ``x86.avx2.fp32_4x16x<KC>``. The
``_pf`` variants (``x86.avx2.fp32_4x16x256_pf``, ``register_fp32(..., prefetch=True)``) also
prefetch A and B PREFETCH_STEPS k steps ahead (``llvm.prefetch`` on ``T.address_of``), for
packed A (strides (1, MR)) and packed B.

int8 dot product ``x86.<isa>.dot_u8s8s32_<N>x4`` (isa ``avx512vnni``: N=16, ``avxvnni``: N=8):
``C[N] += sum_k u8(A[k]) * s8(B[N, k])`` in int32, one ``vpdpbusd`` (``llvm.x86.avx512.vpdpbusd.512``
/ ``.256``, which LLVM encodes as the VEX AVX-VNNI form on CPUs without AVX-512). B's tile is
N rows of 4 bytes, contiguous (a packed layout such as ``B[n // N, k // 4, n % N, k % 4]``).

``x86.avx2.dot_u8s8s32_8x2`` is the exact AVX2 int8 dot product (vpmaddwd) for CPUs without VNNI;
`int8_dot_any()` picks VNNI where the CPU has it, else this one.

`fp32_microkernel(kc)` and `int8_dot()` return the best variant's name for the CPU of a target
(`target=`, default "cpu": the host's, or what tdsl.target.cpu_target makes of it), or raise a
TargetError naming what that CPU lacks; `available(target)` lists what it runs.
"""
from __future__ import annotations

from ..errors import TargetError
from .registry import TensorIntrin

ISAS = {
    # isa: (vector lanes of fp32, CPU features the implementation needs)
    "avx512": (16, ("avx512f",)),
    "avx2": (8, ("avx2", "fma")),
}
VNNI = {
    # isa: (int32 lanes, LLVM intrinsic, CPU features)
    "avx512vnni": (16, "llvm.x86.avx512.vpdpbusd.512", ("avx512f", "avx512vnni")),
    "avxvnni": (8, "llvm.x86.avx512.vpdpbusd.256", ("avxvnni",)),
}
DEFAULT_TILE = {"avx512": (8, 32), "avx2": (4, 16)}
ACCUMULATORS = {"avx512": 16, "avx2": 12}
"""The most vector registers the C tile of an auto-scheduled micro-kernel holds: AVX-512 has 32
zmm (16 accumulators leave B's vectors and the broadcast room; 8x32 measured 1.14x the 8-register
4x32 at 1024^3 on Sapphire Rapids, 2 cores), AVX2 16 ymm (12 + B's vectors + the broadcast)."""


def _fp32_desc(mr: int, nr: int, kc: int) -> str:
    return f'''
@T.prim_func
def fp32_desc(A: T.Buffer(({mr}, {kc}), "float32", strides=("a_s", "a_t")),
              B: T.Buffer(({kc}, {nr}), "float32", strides=("b_s", 1)),
              C: T.Buffer(({mr}, {nr}), "float32", strides=("c_s", 1))):
    for i, j, k in T.grid({mr}, {nr}, {kc}):
        with T.block("update"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''


PREFETCH_STEPS = 16
"""How many k steps ahead the prefetching micro-kernel fetches packed A and B (measured on Zen 3,
1 thread: 16 beat 8 and 32 for B; A's distance hardly matters)."""


def _prefetch(load: str) -> str:
    """A statement that prefetches the cache line of `load` into L1 for reading
    (`llvm.prefetch(ptr, rw=0, locality=3, data cache)`)."""
    return f'T.evaluate(T.call_extern("void", "llvm.prefetch.p0", T.address_of({load}), 0, 3, 1))'


def _fp32_k_loops(mr: int, nr: int, kc: int, lanes: int, prefetch: bool) -> str:
    """The k loop of the micro-kernel, as script text.

    With `prefetch`, each k step first prefetches A's line and each 64-byte line of B's row
    PREFETCH_STEPS steps ahead (A's line again for each of the 16 // MR steps it holds: no
    slower than once per group on Zen 3, and one loop instead of two). The last steps'
    prefetches point past the tile: a prefetch never faults and is exempt from both bounds
    checks (docs/script.md, `T.address_of`); in a packed GEMM those lines are the next pass's
    data. This builds within ~4 ms of the kernel without prefetch; the earlier form (groups of
    16 // MR steps, then a 16-step tail loop without prefetches so as not to leave the tile)
    cost ~20 ms more for the same kernel speed (0.98-1.02x). A clamped index (T.min: a cmov per
    prefetch) or an `if` around the prefetches (a branch per k) measured 10-40% slower (the FMA
    loop is front-end bound)."""
    nv = nr // lanes
    vec = f"T.Ramp(v * {lanes}, 1, {lanes})"
    fma = f"llvm.fma.v{lanes}f32"
    ahead = [f"A[0, k + {PREFETCH_STEPS}]"] + [f"B[k + {PREFETCH_STEPS}, {j}]" for j in range(0, nr, 16)]
    return (f"    for k in range({kc}):\n"
            + "".join(f"        {_prefetch(load)}\n" for load in (ahead if prefetch else []))
            + f"        for i in T.unroll({mr}):\n"
            f"            for v in T.unroll({nv}):\n"
            f'                acc[i, {vec}] = T.call_extern("float32x{lanes}", "{fma}", '
            f"T.Broadcast(A[i, k], {lanes}), B[k, {vec}], acc[i, {vec}])\n")


def _fp32_impl(mr: int, nr: int, kc: int, lanes: int, prefetch: bool = False) -> str:
    nv = nr // lanes
    vec = f"T.Ramp(v * {lanes}, 1, {lanes})"
    return f'''
@T.prim_func
def fp32_impl(A: T.Buffer(({mr}, {kc}), "float32", strides=("a_s", "a_t")),
              B: T.Buffer(({kc}, {nr}), "float32", strides=("b_s", 1)),
              C: T.Buffer(({mr}, {nr}), "float32", strides=("c_s", 1))):
    acc = T.alloc_buffer(({mr}, {nr}), "float32", scope="local")
    for i in T.unroll({mr}):
        for v in T.unroll({nv}):
            acc[i, {vec}] = C[i, {vec}]
{_fp32_k_loops(mr, nr, kc, lanes, prefetch)}    for i in T.unroll({mr}):
        for v in T.unroll({nv}):
            C[i, {vec}] = acc[i, {vec}]
'''


def fp32_name(isa: str, mr: int, nr: int, kc: int, prefetch: bool = False) -> str:
    return f"x86.{isa}.fp32_{mr}x{nr}x{kc}" + ("_pf" if prefetch else "")


def register_fp32(isa: str, mr: int, nr: int, kc: int, prefetch: bool = False) -> str:
    """Register (once) the fp32 micro-kernel for `isa` with an MR x NR tile and KC steps of k;
    `prefetch` (name suffix `_pf`) adds software prefetches of A and B ahead in the k loop."""
    from ..script import parse

    name = fp32_name(isa, mr, nr, kc, prefetch)
    if TensorIntrin.exists(name):
        return name
    lanes, features = ISAS[isa]
    if nr % lanes or mr <= 0 or nr <= 0 or kc <= 0:
        raise ValueError(f"{name}: NR must be a positive multiple of {lanes} (the {isa} fp32 lanes); MR, KC positive")
    TensorIntrin.register(name, parse(_fp32_desc(mr, nr, kc)), parse(_fp32_impl(mr, nr, kc, lanes, prefetch)),
                          target="cpu", features=features,
                          doc=f"C[{mr},{nr}] += A[{mr},{kc}] @ B[{kc},{nr}] in {isa} registers"
                          + (", prefetching A and B" if prefetch else ""))
    return name


def _dot_desc(n: int) -> str:
    return f'''
@T.prim_func
def dot_desc(A: T.Buffer((4,), "uint8"), B: T.Buffer(({n}, 4), "int8", strides=(4, 1)),
             C: T.Buffer(({n},), "int32")):
    for j, k in T.grid({n}, 4):
        with T.block("update"):
            vj, vk = T.axis.remap("SR", [j, k])
            C[vj] = C[vj] + T.cast(A[vk], "int32") * T.cast(B[vj, vk], "int32")
'''


def _dot_impl(n: int, llvm_name: str) -> str:
    return f'''
@T.prim_func
def dot_impl(A: T.Buffer((4,), "uint8"), B: T.Buffer(({n}, 4), "int8", strides=(4, 1)),
             C: T.Buffer(({n},), "int32")):
    C[T.Ramp(0, 1, {n})] = T.call_extern("int32x{n}", "{llvm_name}", C[T.Ramp(0, 1, {n})],
                                         A[T.Ramp(0, 1, {4 * n}) % T.Broadcast(4, {4 * n})],
                                         B[0, T.Ramp(0, 1, {4 * n})])
'''


def dot_name(isa: str) -> str:
    return f"x86.{isa}.dot_u8s8s32_{VNNI[isa][0]}x4"


def register_dot(isa: str) -> str:
    """Register (once) the u8 x s8 -> s32 dot product of `isa` ("avx512vnni" or "avxvnni")."""
    from ..script import parse

    name = dot_name(isa)
    if TensorIntrin.exists(name):
        return name
    n, llvm_name, features = VNNI[isa]
    TensorIntrin.register(name, parse(_dot_desc(n)), parse(_dot_impl(n, llvm_name)), target="cpu",
                          features=features, doc=f"C[{n}] += A[4] . B[{n}, 4], u8 x s8 -> s32 ({isa} vpdpbusd)")
    return name


# choosing by the target's CPU features --------------------------------------------------------

def _cpu(target) -> tuple[str, frozenset[str]]:
    from ..target import cpu_features, cpu_name

    return cpu_name(target), cpu_features(target)


def available(target="cpu") -> list[str]:
    """The ISAs of this module that the CPU of `target` runs (default: the host's; e.g. ["avx2",
    "avxvnni"]; "llvm -mcpu=x86-64-v3" gives ["avx2"] on any host)."""
    _, feats = _cpu(target)
    out = [isa for isa, (_, need) in ISAS.items() if all(f in feats for f in need)]
    out += [isa for isa, (_, _, need) in VNNI.items() if all(f in feats for f in need)]
    return out


def fp32_microkernel(kc: int = 64, isa: str | None = None, target="cpu") -> str:
    """The name of the fp32 micro-kernel for the CPU of `target` (AVX-512 8x32 if it has
    AVX-512F, else AVX2 4x16), registered with `kc` steps of k; TargetError when it has neither."""
    cpu, feats = _cpu(target)
    for candidate in ([isa] if isa else ["avx512", "avx2"]):
        need = ISAS[candidate][1]
        if all(f in feats for f in need):
            mr, nr = DEFAULT_TILE[candidate]
            return register_fp32(candidate, mr, nr, kc)
    raise TargetError(f"this CPU ({cpu}) has neither AVX-512F nor AVX2+FMA"
                      if isa is None else f"this CPU ({cpu}) lacks {', '.join(ISAS[isa][1])} for the {isa} micro-kernel")


def int8_dot(isa: str | None = None, target="cpu") -> str:
    """The name of the int8 VNNI dot product for the CPU of `target` (AVX512-VNNI, else
    AVX-VNNI); a TargetError when it has neither."""
    cpu, feats = _cpu(target)
    for candidate in ([isa] if isa else ["avx512vnni", "avxvnni"]):
        if all(f in feats for f in VNNI[candidate][2]):
            return register_dot(candidate)
    raise TargetError(f"this CPU ({cpu}) has no AVX512-VNNI and no AVX-VNNI, which the int8 dot-product "
                      "intrinsic needs (vpdpbusd); compute the int8 GEMM without tensorize here")


AVX2_DOT = "x86.avx2.dot_u8s8s32_8x2"
"""The int8 dot product for CPUs without VNNI: ``C[8] += sum_k u8(A[k]) * s8(B[8, k])`` over 2
consecutive k, exact in int32 (vpmaddwd on the operands widened to int16; u8 x s8 pairs cannot
overflow int16 products' int32 sums). B's tile is 8 rows of 2 bytes, contiguous."""

_AVX2_DOT_DESC = '''
@T.prim_func
def dot_desc(A: T.Buffer((2,), "uint8"), B: T.Buffer((8, 2), "int8", strides=(2, 1)),
             C: T.Buffer((8,), "int32")):
    for j, k in T.grid(8, 2):
        with T.block("update"):
            vj, vk = T.axis.remap("SR", [j, k])
            C[vj] = C[vj] + T.cast(A[vk], "int32") * T.cast(B[vj, vk], "int32")
'''

# The pair (a0, a1) is repeated over the 16 int16 lanes by a select of two broadcasts, which LLVM
# turns into vpbroadcastw + vpunpcklwd (an index like Ramp % 2 would become a gather).
_AVX2_DOT_IMPL = '''
@T.prim_func
def dot_impl(A: T.Buffer((2,), "uint8"), B: T.Buffer((8, 2), "int8", strides=(2, 1)),
             C: T.Buffer((8,), "int32")):
    C[T.Ramp(0, 1, 8)] = C[T.Ramp(0, 1, 8)] + T.call_extern(
        "int32x8", "llvm.x86.avx2.pmadd.wd",
        T.Select(T.Ramp(0, 1, 16) % T.Broadcast(2, 16) == T.Broadcast(0, 16),
                 T.Broadcast(T.cast(A[0], "int16"), 16), T.Broadcast(T.cast(A[1], "int16"), 16)),
        T.cast(B[0, T.Ramp(0, 1, 16)], "int16x16"))
'''


def int8_dot_any(target="cpu") -> str:
    """The best exact int8 dot product the CPU of `target` runs: VNNI (`int8_dot`) where it has
    it, else the AVX2 vpmaddwd one (`AVX2_DOT`); a TargetError without AVX2."""
    try:
        return int8_dot(target=target)
    except TargetError:
        pass
    cpu, feats = _cpu(target)
    if "avx2" not in feats:
        raise TargetError(f"this CPU ({cpu}) has neither VNNI nor AVX2 for an int8 dot product")
    return AVX2_DOT


def _register_builtins() -> None:
    from ..script import parse

    TensorIntrin.register(AVX2_DOT, parse(_AVX2_DOT_DESC), parse(_AVX2_DOT_IMPL), target="cpu",
                          features=("avx2",), doc="C[8] += A[2] . B[8, 2], u8 x s8 -> s32 (AVX2 vpmaddwd)")
    for isa, (mr, nr) in DEFAULT_TILE.items():
        for kc in (16, 64):
            register_fp32(isa, mr, nr, kc)
    for isa in VNNI:
        register_dot(isa)
    TensorIntrin.register_family(r"x86\.(avx512|avx2)\.fp32_(\d+)x(\d+)x(\d+)(_pf)?",
                                 lambda m: register_fp32(m[1], int(m[2]), int(m[3]), int(m[4]), bool(m[5])))
