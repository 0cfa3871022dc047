"""Lowered PrimFunc -> loaded machine code, through the in-memory and disk caches."""
from __future__ import annotations

import base64
import ctypes
import hashlib
import threading
import zlib
from dataclasses import asdict, dataclass

from ...ir import PrimFunc, structural_hash
from .. import cache
from . import codegen, jit, runtime


@dataclass
class Compiled:
    """Loaded machine code of one kernel plus what the Kernel needs to call it."""

    meta: dict                 # CodegenResult fields except the IR text
    packed_source: str         # LLVM IR as generated (compressed; the disk cache stores it so)
    packed_optimized_ir: str
    addresses: dict[str, int]  # symbol -> address
    from_disk: bool = False

    @property
    def source(self) -> str:
        return _unpack_text(self.packed_source)

    @property
    def optimized_ir(self) -> str:
        return _unpack_text(self.packed_optimized_ir)


_LOCK = threading.Lock()


def _key(func: PrimFunc, options: dict) -> str:
    # Taken before lowering (a disk hit does not lower): the function, its parameters (the fast
    # entry checks the user's n-d shapes) and the options; the compiler's own source is in
    # the disk key (cache.disk_key), so a changed lowering cannot reuse stale code.
    program = structural_hash(func) + structural_hash(tuple(func.params))
    opts = ",".join(f"{k}={options[k]!r}" for k in sorted(options))
    return hashlib.sha256(f"{program}|{opts}".encode()).hexdigest()


def _pack_text(text: str) -> str:
    return base64.b64encode(zlib.compress(text.encode(), 1)).decode()


def _unpack_text(blob: str) -> str:
    return zlib.decompress(base64.b64decode(blob)).decode()


def compile_func(func: PrimFunc, lower, bounds_check: bool = False) -> Compiled:
    """Machine code for `func`: memory cache, then disk cache, then lower(func) and LLVM."""
    options = {"bounds_check": bool(bounds_check)}
    program_key = _key(func, options)
    hit = cache.memory_get(program_key)
    if hit is not None:
        return hit
    with _LOCK:
        hit = cache.memory_get(program_key)
        if hit is not None:
            return hit
        disk = cache.disk_key("cpu-kernel", program_key)
        symbol = "tdsl_" + program_key[:24]
        entry = cache.disk_load(disk)
        compiled = None
        if entry is not None:
            compiled = _from_entry(entry)
        if compiled is None:
            compiled = _compile(lower(func), func, symbol, bounds_check, disk)
        _bind_context(compiled)
        cache.memory_put(program_key, compiled)
        return compiled


def _from_entry(entry) -> Compiled | None:
    meta = entry.meta
    try:
        info = meta["info"]
        source, optimized = meta["source"], meta["optimized_ir"]
        if not (isinstance(source, str) and isinstance(optimized, str)):
            return None
        addrs = jit.load_object(entry.obj, _symbols(info))
    except (KeyError, TypeError):
        return None
    return Compiled(info, source, optimized, addrs, from_disk=True)


def _compile(lowered: PrimFunc, api: PrimFunc, symbol: str, bounds_check: bool, disk_key: str) -> Compiled:
    from .bounds import check_static_bounds

    check_static_bounds(lowered)
    host = jit.host_info()
    result = codegen.codegen(lowered, symbol, api=api, bounds_check=bounds_check, triple=host.triple,
                             datalayout=jit.data_layout())
    mod = jit.parse_and_verify(result.ir, f"kernel {api.name!r}")
    jit.optimize(mod)
    optimized = str(mod)
    obj = jit.emit_object(mod)
    info = {k: v for k, v in asdict(result).items() if k != "ir"}
    source, optimized = _pack_text(result.ir), _pack_text(optimized)
    cache.disk_store(disk_key, obj, {"kind": "cpu-kernel", "info": info, "source": source,
                                     "optimized_ir": optimized})
    addrs = jit.load_object(obj, _symbols(info))
    return Compiled(info, source, optimized, addrs)


def _symbols(info: dict) -> list[str]:
    names = [info["symbol"], info["raw_symbol"], info["ctx_symbol"]]
    return names + ([info["tuple_symbol"]] if info.get("tuple_symbol") else [])


def _bind_context(c: Compiled) -> None:
    """Fill the kernel's context: thread pool entry, ndarray type, numpy dtype descriptors."""
    import numpy as np

    from ...dtypes import DataType

    descrs = c.meta["descr_dtypes"]
    ctx = (ctypes.c_int64 * (2 + len(descrs))).from_address(c.addresses[c.meta["ctx_symbol"]])
    ctx[0] = runtime.launch_address() if c.meta["parallel"] else 0
    ctx[1] = id(np.ndarray)
    for k, name in enumerate(descrs):
        # the canonical descriptor instance: arrays made the usual way share it
        ctx[2 + k] = id(np.empty(0, DataType.parse(name).numpy).dtype)
