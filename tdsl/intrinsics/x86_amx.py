"""Intel AMX register-tile micro-kernels: int8 (``tdpbusd``) and bf16 (``tdpbf16ps``).

int8 ``x86.amx.u8s8s32_<MR>x<NR>x<KC>``: ``C[MR, NR] += A[MR, KC] @ B[KC, NR]``, u8 x s8 -> s32,
exact (int32 accumulation, wrapping as numpy's int32 does). The description is the VNNI
kernels' (`tdsl.intrinsics.x86_lowp`): B packed k-by-4, ``B[q, j, r] = B_logical[4q + r, j]``
(shape (KC/4, NR, 4)), which is what one AMX B tile holds (16 rows q of 64 bytes: 16 columns x 4
k), so the packing is the same ``transform_layout(B_pack, lambda k, j: (j // NR, k // 4, j % NR,
k % 4))``. A is read in place (each tile load takes its row stride).

bf16 ``x86.amx.bf16f32_<MR>x<NR>x<KC>``: ``C[MR, NR] += A[MR, KC] @ B[KC, NR]`` in fp32 from
bfloat16, B packed in k pairs (``B[q, j, r] = B_logical[2q + r, j]``, shape (KC/2, NR, 2)); see
`register_bf16` for the order of accumulation.

The implementation keeps C in (MR/16) x (NR/16) accumulator tiles of 16 x 16 (MR, NR in 16, 32:
at most 4 tiles, tmm0-3), loads per step of 64 bytes of k (64 int8, 32 bf16) MR/16 A tiles
(tmm4-5) and NR/16 B tiles (tmm6-7) and multiplies every pair. Each call first loads the tile
configuration (``ldtilecfg`` of a 64-byte palette-1 record: 8 tiles of 16 rows x 64 bytes), as
the configuration is per thread and a parallel loop's body may run on any thread. The
``_init`` variant (name suffix) zeroes the accumulators (``tilezero``) instead of loading C.

Edges: MR and NR may be any of 1..32; the last row (column) tile is then partial, and the
configuration gives each tile its shape (MR = 28, NR = 20: C tiles of 16 and 12 rows by 64 and
16 bytes, A tiles of 16 and 12 rows, B tiles of 64 and 16 bytes per row), so loads and stores
touch only the tile's rows and bytes. KC may be any multiple of the k group (4 int8, 2 bf16):
where it is not a multiple of 64 bytes, the last step is shorter (A tiles of fewer bytes per row,
B tiles of fewer rows) and, after full steps, takes its own A and B tiles from those left over,
so such kernels keep at most 2 accumulator tiles (`fits`). E.g. MR = 12, NR = 32, KC = 100::

    C: tmm0-1 (12 rows x 64 bytes)
    k 0..63:   A tmm4 (12 rows x 64 bytes), B tmm6-7 (16 rows x 64 bytes)  -> 2 tdpbusd
    k 64..99:  A tmm2 (12 rows x 36 bytes), B tmm3, tmm5 (9 rows x 64 bytes) -> 2 tdpbusd

Linux hands AMX's tile data to a process only on request (`tdsl.target.amx_permitted`, asked
once per process before the host's features are read); a host that refuses does not offer the
``amx-*`` features, so these kernels are never chosen there.
"""
from __future__ import annotations

from ..errors import TargetError
from .registry import TensorIntrin
from .x86_lowp import _bf16_desc, _int8_desc, with_init

INT8_FEATURES = ("amx-tile", "amx-int8")
BF16_FEATURES = ("amx-tile", "amx-bf16")
TILE_ROWS, TILE_BYTES = 16, 64
# kind: (A dtype, B dtype, C dtype, bytes per element of A / B, k per 32-bit lane, LLVM intrinsic)
KINDS = {
    "u8s8s32": ("uint8", "int8", "int32", 1, 4, "llvm.x86.tdpbusd"),
    "bf16f32": ("bfloat16", "bfloat16", "float32", 2, 2, "llvm.x86.tdpbf16ps"),
}
DEFAULT_TILE = (32, 32)


def k_step(kind: str) -> int:
    """k per tile step: 64 bytes of A's row (64 int8, 32 bfloat16)."""
    return TILE_BYTES // KINDS[kind][3]


def _call(op: str, *args) -> str:
    return f'    T.evaluate(T.call_extern("void", "llvm.x86.{op}"{"".join(", " + str(a) for a in args)}))\n'


def _tile(n: int) -> str:
    return f"T.int8({n})"


def _parts(extent: int) -> list[int]:
    """The 16-row (16-column) tiles covering `extent`: full ones, then the edge (17 -> [16, 1])."""
    return [min(TILE_ROWS, extent - t) for t in range(0, extent, TILE_ROWS)]


def _layout(kind: str, mr: int, nr: int, kc: int) -> tuple[list[int], list[int], list[int], int]:
    """(rows per A / C row tile, columns of C per column tile, k per step, the tiles needed): each
    step's A tiles take its k in bytes per row, its B tiles a row per 4 bytes of k. A last step
    shorter than 64 bytes after full ones needs its own A and B tiles (a tile's shape is fixed
    by the configuration)."""
    step = k_step(kind)
    steps = [step] * (kc // step) + ([kc % step] if kc % step else [])
    rows, cols = _parts(mr), _parts(nr)
    return rows, cols, steps, len(rows) * len(cols) + len(set(steps)) * (len(rows) + len(cols))


def _numbers(rows: list[int], cols: list[int], steps: list[int]) -> tuple[list[int], list[int], list[int], list[int]]:
    """Tile numbers: C (row tile ti, column tile tj) is ti * nt + tj, A tile ti is 4 + ti, B tile
    tj is 6 + tj (the full-tile kernels' numbering); a short last step's A and B tiles take the
    numbers left over, in order."""
    mt, nt = len(rows), len(cols)
    a, b = [4 + ti for ti in range(mt)], [6 + tj for tj in range(nt)]
    free = [t for t in range(8) if t >= mt * nt and t not in a + b]
    if len(set(steps)) > 1:
        a2, b2 = free[:mt], free[mt:mt + nt]
    else:
        a2, b2 = a, b
    return a, b, a2, b2


def _shapes(kind: str, mr: int, nr: int, kc: int) -> dict[int, tuple[int, int]]:
    """(rows, bytes per row) of each tile number in the configuration; the tiles the kernel does
    not use stay 16 x 64 (as every tile of the full-tile kernels)."""
    size = KINDS[kind][3]
    rows, cols, steps, _ = _layout(kind, mr, nr, kc)
    a_n, b_n, a2_n, b2_n = _numbers(rows, cols, steps)
    shape = {t: (TILE_ROWS, TILE_BYTES) for t in range(8)}
    for ti, r in enumerate(rows):
        for tj, c in enumerate(cols):
            shape[ti * len(cols) + tj] = (r, 4 * c)
    for nums, width in ((a_n, steps[0]), (a2_n, steps[-1])):
        for ti, t in enumerate(nums):
            shape[t] = (rows[ti], width * size)
    for nums, width in ((b_n, steps[0]), (b2_n, steps[-1])):
        for tj, t in enumerate(nums):
            shape[t] = (width * size // 4, 4 * cols[tj])
    return shape


def _impl(kind: str, mr: int, nr: int, kc: int, init: bool) -> str:
    a_t, b_t, c_t, size, group, mul = KINDS[kind]
    rows, cols, steps, _ = _layout(kind, mr, nr, kc)
    mt, nt = len(rows), len(cols)
    a_n, b_n, a2_n, b2_n = _numbers(rows, cols, steps)
    full = kc // k_step(kind)
    shape = _shapes(kind, mr, nr, kc)
    text = f'''
@T.prim_func
def amx_impl(A: T.Buffer(({mr}, {kc}), "{a_t}", strides=("a_s", 1)),
             B: T.Buffer(({kc // group}, {nr}, {group}), "{b_t}", strides=("b_s", {group}, 1)),
             C: T.Buffer(({mr}, {nr}), "{c_t}", strides=("c_s", 1))):
    cfg = T.alloc_buffer((64,), "uint8", scope="local")
    cfg[T.Ramp(0, 1, 64)] = T.Broadcast(T.uint8(0), 64)
    cfg[0] = T.uint8(1)
'''
    for t in range(8):   # palette 1: tile t has shape[t] rows (byte 48 + t) of bytes (u16 at 16 + 2t)
        text += f"    cfg[{16 + 2 * t}] = T.uint8({shape[t][1]})\n    cfg[{48 + t}] = T.uint8({shape[t][0]})\n"
    text += _call("ldtilecfg", "T.address_of(cfg[0])")
    c_stride = 'T.cast(c_s * 4, "int64")'
    for ti in range(mt):
        for tj in range(nt):
            if init:
                text += _call("tilezero", _tile(ti * nt + tj))
            else:
                text += _call("tileloadd64", _tile(ti * nt + tj), f"T.address_of(C[{16 * ti}, {16 * tj}])", c_stride)

    def step(a_nums: list[int], b_nums: list[int], k0: str, q0: str, indent: str) -> str:
        out = ""
        for ti in range(mt):
            out += indent + _call("tileloadd64", _tile(a_nums[ti]), f"T.address_of(A[{16 * ti}, {k0}])",
                                  f'T.cast(a_s * {size}, "int64")')
        for tj in range(nt):
            out += indent + _call("tileloadd64", _tile(b_nums[tj]), f"T.address_of(B[{q0}, {16 * tj}, 0])",
                                  f'T.cast(b_s * {size}, "int64")')
        for ti in range(mt):
            for tj in range(nt):
                out += indent + _call(mul.removeprefix("llvm.x86."), _tile(ti * nt + tj), _tile(a_nums[ti]),
                                      _tile(b_nums[tj]))
        return out

    # per step all loads, then the products (measured faster than each load next to its first
    # product); C's tiles are stored straight to C (through a contiguous scratch tile: slower)
    if full:
        text += f"    for q in range({full}):\n"
        text += step(a_n, b_n, f"q * {k_step(kind)}", f"q * {TILE_ROWS}", "    ")
    if kc % k_step(kind):   # the short last step (k not a multiple of 64 bytes)
        text += step(a2_n, b2_n, str(full * k_step(kind)), str(full * TILE_ROWS), "")
    for ti in range(mt):
        for tj in range(nt):
            text += _call("tilestored64", _tile(ti * nt + tj), f"T.address_of(C[{16 * ti}, {16 * tj}])", c_stride)
    return text


def fits(kind: str, mr: int, nr: int, kc: int) -> bool:
    """An MR x NR x KC kernel of `kind` can be made: MR, NR in 1..32, KC a multiple of the k group,
    and its tiles (a short last step after full ones takes its own A and B tiles) within AMX's 8."""
    return (1 <= mr <= 2 * TILE_ROWS and 1 <= nr <= 2 * TILE_ROWS and kc > 0 and kc % KINDS[kind][4] == 0
            and _layout(kind, mr, nr, kc)[3] <= 8)


def name(kind: str, mr: int, nr: int, kc: int, init: bool = False) -> str:
    return f"x86.amx.{kind}_{mr}x{nr}x{kc}" + ("_init" if init else "")


def register(kind: str, mr: int, nr: int, kc: int, init: bool = False) -> str:
    """Register (once) the AMX micro-kernel of `kind` ("u8s8s32" or "bf16f32") with an MR x NR tile
    of C (MR, NR each 1..32: 16-row / 16-column tiles, the last one partial) and KC of k (a multiple
    of 4 for int8, 2 for bf16; steps of 64 bytes, the last one shorter where KC is not a multiple;
    see `fits`)."""
    from ..script import parse

    full = name(kind, mr, nr, kc, init)
    if TensorIntrin.exists(full):
        return full
    if kind not in KINDS:
        raise ValueError(f"{full}: unknown AMX kernel kind {kind!r}; one of {', '.join(KINDS)}")
    group = KINDS[kind][4]
    if not (1 <= mr <= 2 * TILE_ROWS and 1 <= nr <= 2 * TILE_ROWS) or kc <= 0 or kc % group:
        raise ValueError(f"{full}: MR and NR must be 1..32 (at most 2 x 2 accumulator tiles of up to 16 rows / "
                         f"columns), KC a positive multiple of {group} (a 32-bit lane of the tile's rows)")
    tiles = _layout(kind, mr, nr, kc)[3]
    if tiles > 8:
        raise ValueError(f"{full}: needs {tiles} of AMX's 8 tiles (KC = {kc} ends with a step shorter than "
                         f"{k_step(kind)} after full ones, which takes its own A and B tiles); with such a KC use "
                         f"at most 2 accumulator tiles (MR or NR at most 16), or a KC that is a multiple of "
                         f"{k_step(kind)} or below it")
    if kind == "u8s8s32":
        desc, zero, features, unit = _int8_desc(mr, nr, kc), "0", INT8_FEATURES, "tdpbusd"
    else:
        desc, zero, features, unit = _bf16_desc(mr, nr, kc), "T.float32(0)", BF16_FEATURES, "tdpbf16ps"
    if init:
        desc = with_init(desc, "", zero)[0]
    a_t, b_t, c_t, _, group, _ = KINDS[kind]
    TensorIntrin.register(full, parse(desc), parse(_impl(kind, mr, nr, kc, init)), target="cpu", features=features,
                          doc=f"C[{mr},{nr}] += A[{mr},{kc}] @ B[{kc},{nr}], {a_t} x {b_t} -> {c_t}, B packed "
                              f"k-by-{group} (AMX {unit})")
    return full


def register_int8(mr: int, nr: int, kc: int, init: bool = False) -> str:
    """`register` of the u8 x s8 -> s32 kernel (``tdpbusd``, exact)."""
    return register("u8s8s32", mr, nr, kc, init)


def register_bf16(mr: int, nr: int, kc: int, init: bool = False) -> str:
    """`register` of the bf16 x bf16 -> fp32 kernel (``tdpbf16ps``).

    Order of accumulation: tdpbf16ps adds, for each pair of k (2q, 2q + 1) in increasing q, the
    product of the even element, then that of the odd one (each exact in fp32) to the fp32
    accumulator, each addition rounded to nearest even (Intel's pseudo-code; measured:
    1 + 2^-24 + 2^-24 gives 1, not 1 + 2^-23); denormal inputs and results are flushed to zero.
    The description adds k one at a time in increasing order too, so results agree with it up
    to the flushed denormals, and with an exact sum within fp32 rounding of the sum."""
    return register("bf16f32", mr, nr, kc, init)


def kind_features(kind: str) -> tuple[str, ...]:
    return INT8_FEATURES if kind == "u8s8s32" else BF16_FEATURES


def available(kind: str, features) -> bool:
    """The CPU with `features` (`tdsl.target.cpu_features`) runs the AMX kernel of `kind`."""
    return all(f in features for f in kind_features(kind))


def microkernel(kind: str, features, kc: int, tile: tuple[int, int] = DEFAULT_TILE) -> str:
    """The AMX kernel of `kind` for a CPU with `features`: a TargetError when it lacks them."""
    missing = [f for f in kind_features(kind) if f not in features]
    if missing:
        raise TargetError(f"the CPU lacks {', '.join(missing)} for the AMX {kind} micro-kernel")
    return register(kind, tile[0], tile[1], kc)


def _from_name(m) -> None:
    register(m[1], int(m[2]), int(m[3]), int(m[4]), bool(m[5]))


def register_families() -> None:
    """Make ``x86.amx.<kind>_<MR>x<NR>x<KC>[_init]`` on first use of the name."""
    TensorIntrin.register_family(r"x86\.amx\.(u8s8s32|bf16f32)_(\d+)x(\d+)x(\d+)(_init)?", _from_name)
