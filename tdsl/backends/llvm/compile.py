"""Lowered PrimFunc -> loaded machine code, through the in-memory and disk caches."""
from __future__ import annotations

import base64
import ctypes
import hashlib
import threading
import zlib
from dataclasses import asdict, dataclass

from ...ir import (
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    For,
    IfThenElse,
    IntImm,
    LetStmt,
    PrimFunc,
    SeqStmt,
    Stmt,
    structural_hash,
)
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
# the block annotation naming a tensorized block's intrinsic (tdsl.schedule.primitives.tensorize,
# not imported here: building a kernel without schedules should not load the schedule package)
INTRIN_ANNOTATION = "tdsl.tensor_intrin"
# name -> (the registered TensorIntrin, its fingerprint): hashing an implementation costs ~0.5 ms
_FINGERPRINTS: dict[str, tuple[object, str]] = {}


def _key(func: PrimFunc, options: dict) -> str:
    # Taken before lowering (a disk hit does not lower): the function, its parameters (the fast
    # entry checks the user's n-d shapes), the tensor intrinsics it names (lowering swaps in
    # their implementation, which the function itself does not hold) and the options; the
    # compiler's own source is in the disk key (cache.disk_key), so a changed lowering cannot
    # reuse stale code.
    program = structural_hash(func) + structural_hash(tuple(func.params))
    intrins = ";".join(_intrin_fingerprint(name) for name in _tensor_intrin_names(func.body))
    opts = ",".join(f"{k}={options[k]!r}" for k in sorted(options))
    return hashlib.sha256(f"{program}|{intrins}|{opts}".encode()).hexdigest()


def _statements(body: Stmt):
    """Every statement under `body` (blocks included, expressions not: blocks and stores cannot
    hide in expressions), cheaply: this runs on every build, memory-cache hits included."""
    stack = [body]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, BlockRealize):
            stack.append(node.block)
        elif isinstance(node, Block):
            stack.append(node.body)
            if node.init is not None:
                stack.append(node.init)
        elif isinstance(node, SeqStmt):
            stack.extend(node.seq)
        elif isinstance(node, IfThenElse):
            stack.append(node.then_case)
            if node.else_case is not None:
                stack.append(node.else_case)
        elif isinstance(node, (For, LetStmt, Allocate)):
            stack.append(node.body)


def _tensor_intrin_names(body: Stmt) -> list[str]:
    """The intrinsic names of the tensorized blocks under `body`, sorted, without repeats."""
    names = {v for node in _statements(body) if isinstance(node, Block)
             for k, v in node.annotations if k == INTRIN_ANNOTATION and isinstance(v, str)}
    return sorted(names)


# an innermost loop with this many vector statements per iteration was register-tiled by its schedule
TILED_LOOP_VECTOR_STORES = 4


def register_tiled(lowered: Stmt) -> bool:
    """Whether a loop of the lowered code holds a register tile: an innermost loop whose body
    (its small unrolled loops expanded) stores at least TILED_LOOP_VECTOR_STORES vectors, like
    the k loop of a GEMM or conv2d micro-kernel. Such code gets the cheaper pipeline (see
    jit.optimize); loops with one or two vector statements (row reductions, copies) still gain
    from LLVM's unrolling, and scalar code from all of O3."""
    return any(isinstance(node, For) and node.kind != "unrolled"
               and _vector_stores(node.body) >= TILED_LOOP_VECTOR_STORES for node in _statements(lowered))


# a loop storing at least this many bits of vectors per iteration needs no unrolling by LLVM
WIDE_LOOP_VECTOR_BITS = 1024


def wide_vector_loops(lowered: Stmt) -> bool:
    """Whether every loop of the lowered code that stores vectors stores at least
    WIDE_LOOP_VECTOR_BITS per iteration (four AVX2 registers: the schedule vectorized it wide,
    like softmax's 32-lane loops) and there is such a loop. LLVM's unroller only adds code to
    these (softmax: 3x the optimisation and emission time, the same speed measured); narrower
    vector loops (layernorm's 16 lanes) keep it."""
    widths = [_vector_stores(node.body, bits=True) for node in _statements(lowered)
              if isinstance(node, For) and node.kind != "unrolled"]
    widths = [w for w in widths if w]
    return bool(widths) and min(widths) >= WIDE_LOOP_VECTOR_BITS


def _vector_stores(stmt: Stmt, bits: bool = False) -> int:
    """Vector stores per run of `stmt` (a loop body), or with `bits` the bits they store; a
    nested loop that is not unrolled counts as none (it is a loop of its own)."""
    if isinstance(stmt, BufferStore):
        dtype = stmt.value.dtype
        return 0 if dtype.lanes == 1 else dtype.lanes * dtype.bits if bits else 1
    if isinstance(stmt, For):
        unrolled = stmt.kind == "unrolled" and isinstance(stmt.extent, IntImm)
        return stmt.extent.value * _vector_stores(stmt.body, bits) if unrolled else 0
    if isinstance(stmt, SeqStmt):
        return sum(_vector_stores(s, bits) for s in stmt.seq)
    if isinstance(stmt, IfThenElse):
        return _vector_stores(stmt.then_case, bits) + (_vector_stores(stmt.else_case, bits) if stmt.else_case else 0)
    if isinstance(stmt, (LetStmt, Allocate)):
        return _vector_stores(stmt.body, bits)
    return 0


def _intrin_fingerprint(name: str) -> str:
    """What lowering takes from the registered intrinsic `name`: its description (matched
    again), implementation, target, CPU features and prelude. An unregistered name makes
    lowering fail, so it needs no more than a marker."""
    from ...errors import ScheduleError
    from ...schedule.tensor_intrin import TensorIntrin

    try:
        intrin = TensorIntrin.get(name)
    except ScheduleError:
        return f"{name}=unregistered"
    known = _FINGERPRINTS.get(name)
    if known is not None and known[0] is intrin:   # registering again makes a new TensorIntrin
        return known[1]
    parts = (structural_hash(intrin.desc), structural_hash(tuple(intrin.desc.params)),
             structural_hash(intrin.impl), structural_hash(tuple(intrin.impl.params)),
             intrin.target, ",".join(intrin.features), intrin.prelude)
    fingerprint = f"{name}=" + hashlib.sha256("\x00".join(parts).encode()).hexdigest()
    _FINGERPRINTS[name] = (intrin, fingerprint)
    return fingerprint


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
    tiled = register_tiled(lowered.body)
    jit.optimize(mod, register_tiled=tiled, loop_unrolling=not (tiled or wide_vector_loops(lowered.body)))
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
