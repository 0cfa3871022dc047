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
    source: str                # LLVM IR as generated
    optimized_ir: str
    addresses: dict[str, int]  # symbol -> address
    from_disk: bool = False


_LOCK = threading.Lock()


def _key(lowered: PrimFunc, api: PrimFunc, options: dict) -> str:
    # The fast entry checks the user's n-d parameter shapes, so they are part of the key too.
    program = structural_hash(lowered) + structural_hash(tuple(api.params))
    opts = ",".join(f"{k}={options[k]!r}" for k in sorted(options))
    return hashlib.sha256(f"{program}|{opts}".encode()).hexdigest()


def _pack_text(text: str) -> str:
    return base64.b64encode(zlib.compress(text.encode(), 1)).decode()


def _unpack_text(blob: str) -> str:
    return zlib.decompress(base64.b64decode(blob)).decode()


def compile_lowered(lowered: PrimFunc, api: PrimFunc, bounds_check: bool = False) -> Compiled:
    """Machine code for `lowered` (called as `api`): memory cache, then disk cache, then LLVM."""
    options = {"bounds_check": bool(bounds_check)}
    program_key = _key(lowered, api, options)
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
            compiled = _compile(lowered, api, symbol, bounds_check, disk)
        _bind_context(compiled)
        cache.memory_put(program_key, compiled)
        return compiled


def _from_entry(entry) -> Compiled | None:
    meta = entry.meta
    try:
        source = _unpack_text(meta["source"])
        optimized = _unpack_text(meta["optimized_ir"])
        info = meta["info"]
        addrs = jit.load_object(entry.obj, [info["symbol"], info["raw_symbol"], info["ctx_symbol"]])
    except (KeyError, ValueError, zlib.error, TypeError):
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
    cache.disk_store(disk_key, obj, {"kind": "cpu-kernel", "info": info, "source": _pack_text(result.ir),
                                     "optimized_ir": _pack_text(optimized)})
    addrs = jit.load_object(obj, [result.symbol, result.raw_symbol, result.ctx_symbol])
    return Compiled(info, result.ir, optimized, addrs)


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
