"""tdsl.load: a Kernel from a library `Kernel.export` wrote, without compiling (and without
importing LLVM): the library's own entry points are called as a built kernel's are.

The library's data symbol `tdsl_export_meta` (JSON) holds the function's script, the entry
points' names, what the Kernel checks and the CPU features the code uses.
"""
from __future__ import annotations

import ctypes
import json
import os
from dataclasses import dataclass

from ...dtypes import DataType
from ...errors import TargetError
from ...tracebacks import public_entry
from .abi import FORMAT, META_SYMBOL  # noqa: F401 (public here too)


@dataclass
class Loaded:
    """An exported library's machine code as the Kernel calls it (compile.Compiled's fields)."""

    meta: dict
    packed_source: str
    pipeline: str
    addresses: dict[str, int]
    library: object = None          # the ctypes handle: the code lives as long as this does
    from_disk: bool = False
    notes: tuple[str, ...] = ()
    pipeline_notes: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        from .compile import _unpack_text

        return _unpack_text(self.packed_source)

    @property
    def optimized_ir(self) -> str:
        from . import jit

        return jit.optimized_ir(self.source, self.pipeline, f"kernel {self.meta['symbol']!r}")


@public_entry
def load(path):
    """A Kernel from a library `kernel.export` wrote, without compiling: call it as the built
    kernel (numpy arrays or DLPack tensors; outputs may be left out).

        kernel.export("out/gemm")
        k = tdsl.load("out/gemm/gemm.so")     # k(a, b) -> c, as kernel(a, b)
    """
    full = os.path.abspath(os.fspath(path))
    if not os.path.isfile(full):
        raise TargetError(f"tdsl.load: no file {full!r} (kernel.export(dir) writes dir/NAME.so)")
    try:
        lib = ctypes.CDLL(full)
    except OSError as exc:
        raise TargetError(f"tdsl.load: cannot load {full!r}: {exc}") from None
    try:
        blob = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(lib, META_SYMBOL)))
    except ValueError:
        raise TargetError(f"tdsl.load: {full!r} is not a library exported by tdsl (it has no symbol "
                          f"{META_SYMBOL!r})") from None
    meta = json.loads(blob)
    if meta.get("format") != FORMAT:
        raise TargetError(f"tdsl.load: {full!r} was exported in format {meta.get('format')!r}; this tdsl reads "
                          f"format {FORMAT}: export it again")
    flags = _cpu_flags()
    missing = sorted(set(meta["features"]) - flags) if flags is not None else []
    if missing:
        raise TargetError(f"tdsl.load: {full!r} was built for a CPU with {', '.join(missing)}, which this CPU "
                          f"lacks; export it on (or for) this machine")
    _amx_granted(full, meta)
    return _kernel_from(lib, meta)


def _amx_granted(full: str, meta: dict) -> None:
    """A kernel whose code uses AMX tiles runs only after the OS grants this process their state
    (`tdsl.target.amx_permitted`, asked here as a build asks it); refused: a TargetError."""
    import base64
    import zlib

    from ...target import amx_permitted

    if "amx_tile" not in meta["features"] or amx_permitted():
        return
    if "llvm.x86.ldtilecfg" in zlib.decompress(base64.b64decode(meta["source"])).decode():   # compile._pack_text
        raise TargetError(f"tdsl.load: {full!r} uses AMX tiles, and the operating system did not let this process "
                          "use them (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) refused); export it for "
                          "a target without AMX (-mattr=-amx-tile)")


def _kernel_from(lib, meta: dict):
    from ...script import parse
    from .kernel import Kernel

    info = meta["info"]
    addresses: dict[str, int] = {}
    for s in (info["symbol"], info["raw_symbol"], info.get("tuple_symbol")):
        if s:
            addresses[s] = int(ctypes.cast(getattr(lib, s), ctypes.c_void_p).value or 0)
    ctx_addr = ctypes.addressof(ctypes.c_int64.in_dll(lib, info["ctx_symbol"]))
    addresses[info["ctx_symbol"]] = ctx_addr
    _bind_numpy(ctx_addr, info["descr_dtypes"])
    loaded = Loaded(info, meta["source"], meta["pipeline"], addresses, library=lib)
    kernel = Kernel(parse(meta["signature"]), loaded, meta["options"], target=meta.get("target"))
    # `func` is the whole function again, parsed on first use (a scheduled GEMM's script takes
    # ~15 ms to parse, ten times the rest of a load)
    del kernel.func
    kernel.__class__ = type("Kernel", (type(kernel),), {"func": _ParsedOnUse(meta["script"]),
                                                        "__module__": Kernel.__module__, "__qualname__": "Kernel"})
    return kernel


class _ParsedOnUse:
    """A class attribute that parses a script on first access and keeps the result on the instance."""

    def __init__(self, script: str):
        self.script = script

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        from ...script import parse

        func = instance.__dict__["func"] = parse(self.script)
        return func


def _bind_numpy(ctx_addr: int, descr_dtypes: list[str]) -> None:
    """The fast entry's context: numpy's ndarray type and dtype descriptors (ctx[0], the pool's
    launch, was set by the library's constructor)."""
    import numpy as np

    ctx = (ctypes.c_int64 * (2 + len(descr_dtypes))).from_address(ctx_addr)
    ctx[1] = id(np.ndarray)
    for k, name in enumerate(descr_dtypes):
        ctx[2 + k] = id(np.empty(0, DataType.parse(name).numpy).dtype)


def _cpu_flags() -> set[str] | None:
    """This CPU's instruction-set flags as /proc/cpuinfo names them (no LLVM needed); None when
    they cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), None)
    except OSError:
        return None
    return set(flags) if flags is not None else None
