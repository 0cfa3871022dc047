"""Where a kernel's shared buffers live: static `__shared__` arrays, or one dynamic array.

A kernel whose shared buffers fit in the 48 KiB every GPU gives a block without asking keeps one
`__shared__ __align__(A) T name[N];` per buffer. Above that, the buffers are placed at aligned
offsets in one dynamic array, which the launch sizes (and which the driver must be told to allow,
`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`, up to the architecture's opt-in limit):

    extern __shared__ __align__(1024) unsigned char tdsl_smem[];
    half (&A_shared)[24576] = *reinterpret_cast<half (*)[24576]>(tdsl_smem + 0);
    half (&B_shared)[24576] = *reinterpret_cast<half (*)[24576]>(tdsl_smem + 49152);

Each name stays an array of its own (indexing, `&A_shared[i]` are unchanged), and the emulator
rewrites each view into an array of its own, so its checks and counters are per buffer as before.
Alignment: 1024 bytes for the tiles a TMA copy writes or a wgmma reads (the 128-byte swizzle
repeats every 1024 bytes, and acts on address bits), 16 bytes for the rest.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from ...errors import TargetError
from ...ir import Buffer, BufferLoad, Call, IntImm, collect
from ...ir.opaque_calls import TMA_LOAD, TMA_STORE, WGMMA
from ...target import OPTIN_LIMITS, STATIC_LIMIT, arch_family, optin_limit

DYNAMIC_ARRAY = "tdsl_smem"   # the name of the dynamic shared array


def alignments(body, shared: list[Buffer]) -> dict[Buffer, int]:
    """Byte alignment of each shared buffer: 1024 for TMA destinations and sources and wgmma operands."""
    swizzled: set[Buffer] = set()
    for c in collect(body, Call):
        if c.op == TMA_LOAD and isinstance(c.args[0], BufferLoad):
            swizzled.add(c.args[0].buffer)
        elif c.op == TMA_STORE and isinstance(c.args[1], BufferLoad):
            swizzled.add(c.args[1].buffer)
        elif c.op == WGMMA:
            swizzled.update(a.buffer for a in c.args[1:3] if isinstance(a, BufferLoad))
    return {b: 1024 if b in swizzled else 16 for b in shared}


def _bytes(buf: Buffer) -> int:
    return int(cast(IntImm, buf.shape[0]).value) * buf.dtype.itemsize * buf.dtype.lanes


@dataclass(frozen=True)
class SharedLayout:
    """Offsets of the shared buffers in the dynamic array (empty when static) and the bytes a
    launch passes as its dynamic shared memory (0 when static)."""

    offsets: dict[Buffer, int]
    dynamic_bytes: int
    total_bytes: int


def layout(body, shared: list[Buffer]) -> SharedLayout:
    """Static declarations when the aligned total fits 48 KiB, else offsets in `tdsl_smem`."""
    align = alignments(body, shared)
    offsets, at = {}, 0
    for buf in shared:
        at = -(-at // align[buf]) * align[buf]
        offsets[buf] = at
        at += _bytes(buf)
    if at <= STATIC_LIMIT:
        return SharedLayout({}, 0, at)
    return SharedLayout(offsets, at, at)


def check_limit(name: str, shared_bytes: int, arch: str | None, buffers: list[Buffer]) -> None:
    """TargetError when kernel `name`'s shared memory exceeds what `arch` allows a block."""
    limit = optin_limit(arch)
    if shared_bytes > limit:
        where = f"{arch} allows at most {limit}" if arch else f"no GPU allows more than {limit}"
        if arch and arch_family(arch) not in OPTIN_LIMITS:
            where += " (tdsl does not know this architecture's opt-in limit: 48 KiB assumed)"
        raise TargetError(f"kernel {name!r} uses {shared_bytes} bytes of shared memory "
                          f"({', '.join(b.name for b in buffers)}); {where} per block: use smaller tiles "
                          "or fewer pipeline stages")
