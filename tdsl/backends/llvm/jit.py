"""The process-wide LLVM JIT: one MCJIT engine, a target machine per CPU built for, the new pass manager's pipelines.

Everything that touches llvmlite.binding lives here. Two llvmlite facts shape it
(see TOOLCHAIN.md): a second MCJIT engine on the same target machine kills the process, so
there is exactly one engine and modules are added to it; and the wheel's LLVM has assertions
on, so every module is verified before it is optimised (invalid IR would abort the process).
Machine code is always produced as an object file and loaded with `add_object_file`, so a
fresh build and a disk-cache hit take the same path, and so code for another CPU than the
host's (a target "llvm -mcpu=x86-64-v3": AVX2 code on an AVX-512 host) needs no second engine:
it is optimised and emitted by a target machine of its own (`Machine`, one per CPU and feature
string, cached) and loaded into the one engine.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from llvmlite import binding as llvm

from ...errors import TargetError
from ...target import host_cpu_name, host_feature_string
from ..forksafe import hold_across_fork, hold_lock_across_fork

# a fork never lands inside an LLVM call: ours (_LOCK), nor one llvmlite makes by itself (it
# frees objects under its own lock); registered in this order, the fork takes _LOCK first
hold_lock_across_fork(lambda: getattr(getattr(llvm.ffi, "lib", None), "_lock", None), "_lock")
_LOCK = threading.RLock()
hold_across_fork(__name__, "_LOCK")
_STATE: dict = {}


@dataclass(frozen=True)
class Machine:
    """The CPU code is generated for: LLVM's CPU name and feature string ("+avx2,-avx512f,...")."""

    cpu: str
    features: str


def machine_for(target="cpu") -> Machine:
    """The Machine of a "cpu" target (tdsl.target.cpu_name / cpu_feature_string)."""
    from ...target import cpu_feature_string, cpu_name

    return Machine(cpu_name(target), cpu_feature_string(target))


@dataclass(frozen=True)
class HostInfo:
    """What the generated code is specialised for; part of every cache key."""

    triple: str
    cpu: str
    features: str
    llvm_version: str
    llvmlite_version: str


def _init() -> dict:
    with _LOCK:
        if _STATE:
            return _STATE
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        triple = llvm.get_process_triple()
        cpu = host_cpu_name()
        features = host_feature_string()
        target = llvm.Target.from_triple(triple)
        # The engine owns this target machine; a second one serves optimisation and emission.
        engine_tm = target.create_target_machine(cpu=cpu, features=features, opt=3, jit=True)
        tm = target.create_target_machine(cpu=cpu, features=features, opt=3, jit=True)
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), engine_tm)
        # The engine's code must outlive every thread-pool worker, which may still be spinning in
        # JIT'd code while the interpreter shuts down: never dispose of it (leak it on purpose).
        import ctypes

        ctypes.pythonapi.Py_IncRef(ctypes.py_object(engine))
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(tm))
        import llvmlite

        _STATE.update(
            tm=tm, engine=engine, objects=[], symbols={}, target=target, machines={Machine(cpu, features): tm},
            host=HostInfo(triple, cpu, features, ".".join(map(str, llvm.llvm_version_info)),
                          llvmlite.__version__),
            datalayout=str(tm.target_data))
        return _STATE


def _target_machine(machine: Machine | None):
    """The target machine that optimises and emits code for `machine` (None: the host), made once."""
    state = _init()
    if machine is None:
        return state["tm"]
    with _LOCK:
        tm = state["machines"].get(machine)
        if tm is None:
            tm = state["target"].create_target_machine(cpu=machine.cpu, features=machine.features, opt=3, jit=True)
            if str(tm.target_data) != state["datalayout"]:
                raise TargetError(f"internal error: the data layout for CPU {machine.cpu} differs from the host's")
            import ctypes

            ctypes.pythonapi.Py_IncRef(ctypes.py_object(tm))   # kept for the process, as the host's
            state["machines"][machine] = tm
        return tm


def host_info() -> HostInfo:
    return _init()["host"]


def data_layout() -> str:
    return _init()["datalayout"]


def parse_and_verify(text: str, what: str):
    """Parse IR text and verify it; a failure is a TargetError, never a crash."""
    _init()
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as exc:
        raise TargetError(f"internal error: the LLVM IR generated for {what} is invalid:\n{exc}") from None
    return mod


# The pipelines `optimize` runs, by name (compile.pipeline_for picks one per kernel).
O3 = "O3"                      # the full O3 module pipeline with loop and SLP vectorisation
O3_NO_UNROLL = "O3-no-unroll"  # the same without LLVM's loop unrolling
SIMPLIFY = "simplify"          # O1's function simplification pipeline, one function at a time
O1_NO_UNROLL = "O1-no-unroll"  # the O1 module pipeline with both vectorizers, no unrolling
PIPELINES = (O3, O3_NO_UNROLL, SIMPLIFY, O1_NO_UNROLL)


def optimize(mod, pipeline: str = O3, machine: Machine | None = None) -> None:
    """Run the pass pipeline named `pipeline` on `mod` (verified), in place.

    O3 (loop and SLP vectorisation: the new pass manager leaves SLP off by default) is for
    scalar code, whose speed comes from LLVM's vectorizers and unroller; O3_NO_UNROLL for loops
    the schedule already vectorized wide (compile.wide_vector_loops), where the unroller only
    adds code. SIMPLIFY is for register-tiled code (compile.register_tiled): SROA, EarlyCSE,
    InstCombine, LICM, IndVarSimplify, LoopIdiom, ... on each function, without the inliner
    and the vectorizers of the module pipeline. The GEMM, conv2d and int8 micro-kernels run in
    the same time as with O1_NO_UNROLL (what they had before) for about half of its time
    (GEMM 1024: ~23 instead of ~45 ms; compile.pipeline_for has the measurements).
    O1_NO_UNROLL stays for A/B comparisons (bench/bench_cpu_backend.py --pipelines). A fresh
    pass builder per module: its analysis caches are keyed by IR addresses, which a later
    module may reuse. `machine` (None: the host) is the CPU the vectorizers' costs are for."""
    if pipeline not in PIPELINES:
        raise ValueError(f"unknown LLVM pipeline {pipeline!r}; known: {', '.join(PIPELINES)}")
    tm = _target_machine(machine)
    with _LOCK:
        if pipeline == SIMPLIFY:
            _simplify_functions(mod, tm)
            return
        pto = llvm.create_pipeline_tuning_options(speed_level=1 if pipeline == O1_NO_UNROLL else 3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = pipeline == O3
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)


def _simplify_functions(mod, tm) -> None:
    """O1's function simplification pipeline on every function defined in `mod` (optnone ones
    are left as they are). Inlining the parallel loops' bodies into their wrappers afterwards,
    as O1's inliner did, saved ~2 ms of emission and cost as much in the inliner."""
    pto = llvm.create_pipeline_tuning_options(speed_level=1)
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(tm, pto)
    fpm = pb.getFunctionPassManager()
    for fn in mod.functions:
        if not fn.is_declaration:
            fpm.run(fn, pb)


def optimized_ir(text: str, pipeline: str, what: str, machine: Machine | None = None) -> str:
    """The IR text after `pipeline`: the same source, pipeline and machine give the same IR, so
    the optimized IR of a kernel is made again when asked for instead of kept."""
    mod = parse_and_verify(text, what)
    optimize(mod, pipeline, machine)
    return str(mod)


def emit_object(mod, machine: Machine | None = None) -> bytes:
    """Machine code for `mod` (optimised), for `machine` (None: the host)."""
    tm = _target_machine(machine)
    with _LOCK:
        return tm.emit_object(mod)


def emit_assembly(ir_text: str, machine: Machine | None = None) -> str:
    mod = parse_and_verify(ir_text, "the assembly listing")
    tm = _target_machine(machine)
    with _LOCK:
        return tm.emit_assembly(mod)


def undefined_symbols(obj: bytes) -> list[str]:
    """The undefined symbols of an ELF64 little-endian object file (others: none known)."""
    import struct

    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + k * shentsize) for k in range(shnum)]
    out = []
    for sh in sections:
        if sh[1] != 2:   # SHT_SYMTAB
            continue
        offset, size, link, entsize = sh[4], sh[5], sh[6], sh[9]
        strtab = sections[link][4]
        for k in range(1, size // entsize):
            name_off, _, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", obj, offset + k * entsize)
            if shndx == 0 and name_off:
                end = obj.index(b"\0", strtab + name_off)
                out.append(obj[strtab + name_off:end].decode())
    return out


def _check_resolvable(obj: bytes) -> None:
    """A symbol the JIT cannot resolve would crash the process at the first call: refuse it."""
    import ctypes

    process = ctypes.CDLL(None)
    known = _init()["symbols"]
    missing = []
    for name in undefined_symbols(obj):
        if name in known or name.startswith("_GLOBAL_OFFSET_TABLE_"):
            continue
        try:
            getattr(process, name)
        except AttributeError:
            if not llvm.address_of_symbol(name):   # given to LLVM with add_symbol (tdsl.intrinsics.blas)
                missing.append(name)
    if missing:
        raise TargetError(f"the compiled kernel calls {', '.join(missing)}, which this process does not provide "
                          f"(an extern function that is not loaded, or an operation LLVM lowers to a runtime "
                          f"library call); calling it would crash, so it is not loaded")


def load_object(obj: bytes, symbols: list[str]) -> dict[str, int]:
    """Load machine code into the engine; return the addresses of `symbols` (functions or globals).

    An object whose symbols are already loaded (an alpha-equivalent kernel) is not loaded twice.
    """
    state = _init()
    with _LOCK:
        known = state["symbols"]
        if all(s in known for s in symbols):
            return {s: known[s] for s in symbols}
        engine = state["engine"]
        _check_resolvable(obj)
        ref = llvm.ObjectFileRef.from_data(obj)
        engine.add_object_file(ref)
        state["objects"].append(ref)
        engine.finalize_object()
        out = {}
        for s in symbols:
            addr = engine.get_function_address(s) or engine.get_global_value_address(s)
            if not addr:
                raise TargetError(f"internal error: symbol {s!r} missing from the compiled kernel")
            known[s] = addr
            out[s] = addr
        return out


def loaded_symbol(name: str) -> int | None:
    """The address of an already loaded symbol, or None."""
    return _init()["symbols"].get(name)


def emit_shared_object(mod, machine: Machine | None = None) -> bytes:
    """Position-independent object code for `mod`, for a shared library (kernel.export): a
    target machine of its own (the JIT's uses the JIT's relocation model) for the kernel's CPU
    and features (`machine`; None: the host's)."""
    state = _init()
    host = state["host"]
    machine = machine or Machine(host.cpu, host.features)
    with _LOCK:
        cache = state.setdefault("pic_tms", {})
        tm = cache.get(machine)
        if tm is None:
            target = llvm.Target.from_triple(host.triple)
            tm = cache[machine] = target.create_target_machine(cpu=machine.cpu, features=machine.features, opt=3,
                                                               reloc="pic", codemodel="default")
        return tm.emit_object(mod)
