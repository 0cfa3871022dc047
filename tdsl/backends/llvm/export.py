"""Ahead-of-time export of a CPU kernel: `path/NAME.so` and `path/NAME.h`, no Python at run time.

    kernel.export("out/gemm")            # out/gemm/gemm.so, out/gemm/gemm.h
    k = tdsl.load("out/gemm/gemm.so")    # a Kernel again, without compiling

The library holds the kernel's machine code (the same lowering and LLVM pipeline as a build,
emitted position-independent), the parallel runtime (runtime.py's thread pool, written in LLVM
IR against libc), and a C entry `int NAME(...)`: one pointer per buffer parameter in order, an
int64_t per symbolic dimension in the order the signature first names it, then the scalar
parameters. It checks what can be checked of pointers and sizes (see `RETURN_CODES`) and calls
the kernel. Its only dependencies are libc, libm and libpthread; the system linker (cc, gcc,
clang or ld) makes it. A data symbol holds what `load` needs: the function's script, the entry
points' names and the CPU features the code uses.
"""
from __future__ import annotations

import ctypes
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

from llvmlite import ir

from ...dtypes import DataType
from ...errors import TargetError
from ...ir import Buffer, Evaluate, IntImm, PrimFunc, Var
from ...ir.outputs import read_before_written
from ...script.printer import message_text
from . import entry, jit, runtime
from .abi import FORMAT, META_SYMBOL
from .lltypes import F64, I8, I32, I64, PTR

# the C entry's return codes besides 0 (success) and k > 0 (bounds check k failed: bounds_check=True)
ERR_NOMEM, ERR_TOO_MANY = -2, -3
ERR_DIM, ERR_SHAPE, ERR_NULL, ERR_ALIGN, ERR_OVERLAP = -10, -11, -12, -13, -14
RETURN_CODES = {
    0: ("OK", "success"),
    ERR_NOMEM: ("ERR_NOMEM", "allocating an intermediate buffer failed"),
    ERR_TOO_MANY: ("ERR_TOO_MANY", "an intermediate buffer of these sizes has 2**31 elements or more, past what "
                                   "its int32 indices address"),
    ERR_DIM: ("ERR_DIM", "a symbolic dimension (or a scalar parameter that sizes a buffer) is negative or past the "
                         "range of its type"),
    ERR_SHAPE: ("ERR_SHAPE", "a buffer's shape computed from the dimensions has a negative entry"),
    ERR_NULL: ("ERR_NULL", "a buffer with elements was given as a NULL pointer"),
    ERR_ALIGN: ("ERR_ALIGN", "a buffer pointer is not aligned to its element type"),
    ERR_OVERLAP: ("ERR_OVERLAP", "a buffer the kernel writes overlaps another buffer argument"),
}

_C_TYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
            "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
            "uint64": "uint64_t", "bool": "bool", "float16": "uint16_t", "bfloat16": "uint16_t"}


def c_type(dt: DataType, scalar: bool = False) -> str:
    """The C type of one element (buffers) or of a scalar argument (16-bit floats: double)."""
    name = str(dt)
    if scalar and name in ("float16", "bfloat16"):
        return "double"
    if name not in _C_TYPES:
        raise TargetError(f"dtype {name} has no C type for an exported kernel")
    return _C_TYPES[name]


def export_kernel(kernel, path: str, name: str | None = None) -> str:
    """Write `path/NAME.so` and `path/NAME.h` for a built CPU kernel; returns the .so's path."""
    func: PrimFunc = kernel.func
    name = name or func.name
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise TargetError(f"export name {name!r} is not a C identifier; pass name= with letters, digits and _")
    for p in func.params:
        if isinstance(p, Buffer) and p.strides:
            raise TargetError(f"parameter {p.name!r} of {func.name!r} has explicit strides; export takes "
                              f"row-major buffer parameters")
    from .compile import pipeline_for
    from .lower_cpu import lower_for_llvm

    bounds_check = bool(kernel.options.get("bounds_check", False))
    target = getattr(kernel, "target", "cpu")
    machine = jit.machine_for(target)
    lowered = lower_for_llvm(func, target, bounds_check)
    from .bounds import check_static_bounds

    check_static_bounds(lowered)
    host = jit.host_info()
    pipeline = pipeline_for(lowered.body)
    symbol = f"tdsl_{name}"
    result = entry.codegen(lowered, symbol, api=func, bounds_check=bounds_check, triple=host.triple,
                           datalayout=jit.data_layout(), wrappers_optnone=pipeline == jit.SIMPLIFY)
    if result.parts and pipeline == jit.O3:
        pipeline = jit.O3_NO_UNROLL
    info = {k: v for k, v in _asdict(result).items() if k != "ir"}
    info["needed"] = {str(i): why for i, (p, param) in enumerate(zip(result.params, func.params))
                      if isinstance(param, Buffer) and p.written and (why := read_before_written(func, param))}
    mod = jit.parse_and_verify(result.ir, f"kernel {func.name!r}")
    jit.optimize(mod, pipeline, machine)
    rt_text, futex = _runtime_ir(host.triple)
    rt = jit.parse_and_verify(rt_text, "the parallel runtime")
    jit.optimize(rt, machine=machine)
    mod.link_in(rt)
    meta = {"format": FORMAT, "name": name, "script": func.script(), "signature": _signature_script(func), "info": info,
            "source": _pack(result.ir), "pipeline": pipeline, "options": {"bounds_check": bounds_check},
            "triple": host.triple, "cpu": machine.cpu, "features": _simd_features(machine.features),
            "target": str(target)}
    glue = _glue_module(name, func, lowered, result, host.triple, jit.data_layout(), futex,
                        json.dumps(meta).encode())
    glue_mod = jit.parse_and_verify(str(glue), f"the C entry of {name!r}")
    jit.optimize(glue_mod, machine=machine)
    mod.link_in(glue_mod)
    mod.verify()
    obj = jit.emit_shared_object(mod, machine)
    os.makedirs(path, exist_ok=True)
    so = os.path.join(path, f"{name}.so")
    exported = [name, symbol, result.raw_symbol, result.ctx_symbol, META_SYMBOL]
    exported += [result.tuple_symbol] if result.tuple_symbol else []
    _link(obj, so, exported)
    with open(os.path.join(path, f"{name}.h"), "w", encoding="utf-8") as fh:
        fh.write(header(name, func, result))
    return so


def _signature_script(func: PrimFunc) -> str:
    """The function's script with an empty body: what tdsl.load parses to make the Kernel (the
    whole script is parsed only when `kernel.func` is asked for)."""
    from dataclasses import replace

    return replace(func, body=Evaluate(IntImm(0, DataType.parse("int32")))).script()


def _asdict(result) -> dict:
    from dataclasses import asdict

    return asdict(result)


def _pack(text: str) -> str:
    from .compile import _pack_text

    return _pack_text(text)


# the instruction-set features a kernel's code may use and a CPU may lack: LLVM's name -> the
# name in /proc/cpuinfo's flags (what load checks, without LLVM)
_CPUINFO_NAMES = {
    "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "avx": "avx", "avx2": "avx2",
    "fma": "fma", "f16c": "f16c", "bmi": "bmi1", "bmi2": "bmi2", "avx512f": "avx512f", "avx512bw": "avx512bw",
    "avx512dq": "avx512dq", "avx512vl": "avx512vl", "avx512cd": "avx512cd", "avx512vnni": "avx512_vnni",
    "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16", "avxvnni": "avx_vnni", "avx512vbmi": "avx512vbmi",
    "avx512ifma": "avx512ifma", "amx-tile": "amx_tile", "amx-int8": "amx_int8", "amx-bf16": "amx_bf16",
}


def _simd_features(feature_string: str) -> list[str]:
    """The enabled instruction-set features the code may use that a CPU may lack (cpuinfo names)."""
    on = {f[1:] for f in feature_string.split(",") if f.startswith("+")}
    return sorted(_CPUINFO_NAMES[f] for f in on if f in _CPUINFO_NAMES)


def _runtime_ir(triple: str) -> tuple[str, bool]:
    sys_futex = runtime._SYS_FUTEX.get(platform.machine().lower())
    return runtime._ir(triple, sys_futex if sys_futex is not None else -1), sys_futex is not None


def _glue_module(name: str, api: PrimFunc, lowered: PrimFunc, result, triple: str, datalayout: str,
                 futex: bool, meta: bytes) -> ir.Module:
    """The C entry, the constructor that starts the thread pool, and the metadata symbol."""
    m = ir.Module(name=f"{name}_glue")
    m.triple, m.data_layout = triple, datalayout
    blob = meta + b"\0"
    g = ir.GlobalVariable(m, ir.ArrayType(I8, len(blob)), META_SYMBOL)
    g.initializer = ir.Constant(ir.ArrayType(I8, len(blob)), bytearray(blob))
    g.global_constant = True
    _emit_c_entry(m, name, api, lowered, result)
    _emit_init(m, result, futex)
    return m


def _dims(api: PrimFunc) -> list[Var]:
    return entry._dims_of(api)


def _emit_c_entry(m: ir.Module, name: str, api: PrimFunc, lowered: PrimFunc, result) -> None:
    raw_tys = [PTR if isinstance(p, Buffer) else (F64 if p.dtype.is_float else I64) for p in lowered.params]
    raw_tys += [I64] * len(result.dims)
    raw = ir.Function(m, ir.FunctionType(I32, raw_tys), result.raw_symbol)
    buffers = [p for p in api.params if isinstance(p, Buffer)]
    scalars = [p for p in api.params if isinstance(p, Var)]
    dims = _dims(api)
    arg_tys = [PTR] * len(buffers) + [I64] * len(dims) + [_c_scalar_ir(p.dtype) for p in scalars]
    fn = ir.Function(m, ir.FunctionType(I32, arg_tys), name)
    args = iter(fn.args)
    ptr = {p.name: next(args) for p in buffers}
    dim_args = {d.name: next(args) for d in dims}
    scalar_args = {p.name: next(args) for p in scalars}
    for v in scalars:
        if v.dtype.is_bool or (v.dtype.is_integer and v.dtype.bits < 32):
            scalar_args[v.name].add_attribute("zeroext" if v.dtype.is_uint or v.dtype.is_bool else "signext")
    c = _Checks(fn)
    env: dict[str, ir.Value] = {}
    for d in dims:
        a = dim_args[d.name]
        c.fail_unless(c.b.icmp_signed(">=", a, ir.Constant(I64, 0)), ERR_DIM)
        c.fail_unless(c.b.icmp_signed("<=", a, ir.Constant(I64, (1 << (d.dtype.bits - 1)) - 1)), ERR_DIM)
        env[d.name] = a
    sizing = {v.name for buf in buffers for s in buf.shape for v in entry._used_vars_and_buffers(s)[0]}
    for v in scalars:
        value = _to_i64_or_double(c.b, scalar_args[v.name], v.dtype)
        if v.dtype.is_integer and not v.dtype.is_bool and v.name in sizing:
            if v.dtype.is_int:
                c.fail_unless(c.b.icmp_signed(">=", value, ir.Constant(I64, 0)), ERR_DIM)
            env[v.name] = value
    written = {info.name for info in result.params if info.kind == "buffer" and info.written}
    c.pointers([(buf, ptr[buf.name], buf.name in written) for buf in buffers], env)
    call_args = [ptr[p.name] if isinstance(p, Buffer) else _to_i64_or_double(c.b, scalar_args[p.name], p.dtype)
                 for p in api.params]
    for d_name in result.dims:
        if d_name not in env:
            raise TargetError(f"internal error: dimension {d_name!r} of {api.name!r} has no value in the C entry")
        call_args.append(env[d_name])
    c.b.ret(c.b.call(raw, call_args))


class _Checks:
    """The C entry's argument checks: each failure returns its code before anything runs."""

    def __init__(self, fn: ir.Function):
        self.fn = fn
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))

    def fail_unless(self, cond, code: int) -> None:
        ok, bad = self.fn.append_basic_block("ok"), self.fn.append_basic_block("bad")
        self.b.cbranch(cond, ok, bad)
        ir.IRBuilder(bad).ret(ir.Constant(I32, code))
        self.b.position_at_end(ok)

    def pointers(self, buffers: list, env: dict) -> None:
        """Shapes non-negative, no NULL with elements, aligned, no written buffer overlapping another."""
        b = self.b
        zero = ir.Constant(I64, 0)
        extents = []
        for buf, a, written in buffers:
            count = ir.Constant(I64, 1)
            for s in buf.shape:
                n = entry._fast_shape_value(b, s, env)
                if not isinstance(s, (IntImm, Var)):
                    self.fail_unless(b.icmp_signed(">=", n, zero), ERR_SHAPE)
                count = b.mul(count, n)
            start = b.ptrtoint(a, I64)
            null = b.and_(b.icmp_signed("!=", count, zero), b.icmp_unsigned("==", start, zero))
            self.fail_unless(b.not_(null), ERR_NULL)
            size = buf.dtype.itemsize
            if size > 1:
                self.fail_unless(b.icmp_unsigned("==", b.and_(start, ir.Constant(I64, size - 1)), zero), ERR_ALIGN)
            extents.append((start, b.mul(count, ir.Constant(I64, size)), written))
        for i, (lo_p, size_p, w_p) in enumerate(extents):
            for lo_q, size_q, w_q in extents[i + 1:]:
                if not (w_p or w_q):
                    continue
                overlap = b.and_(b.icmp_unsigned("<", lo_p, b.add(lo_q, size_q)),
                                 b.icmp_unsigned("<", lo_q, b.add(lo_p, size_p)))
                nonempty = b.and_(b.icmp_unsigned("!=", size_p, zero), b.icmp_unsigned("!=", size_q, zero))
                self.fail_unless(b.not_(b.and_(overlap, nonempty)), ERR_OVERLAP)


def _c_scalar_ir(dt: DataType) -> ir.Type:
    if dt.is_float:
        return ir.FloatType() if str(dt) == "float32" else F64
    if dt.is_bool:
        return ir.IntType(1)
    return ir.IntType(dt.bits)


def _to_i64_or_double(b: ir.IRBuilder, v, dt: DataType):
    """A C scalar argument as the raw entry takes it (i64, or double for floats)."""
    if dt.is_float:
        return b.fpext(v, F64) if str(dt) == "float32" else v
    if dt.bits == 64:
        return v
    return b.zext(v, I64) if dt.is_uint or dt.is_bool else b.sext(v, I64)


def _emit_init(m: ir.Module, result, futex: bool) -> None:
    """A constructor (run when the library is loaded): the kernel's context gets the pool's
    launch function, and the pool its workers (TDSL_NUM_THREADS, else the CPUs this process may
    run on, minus the caller); a forked child runs parallel loops serially."""
    init = ir.Function(m, ir.FunctionType(ir.VoidType(), []), f"{result.symbol}_init")
    init.linkage = "internal"
    b = ir.IRBuilder(init.append_basic_block("entry"))
    if "llvm.x86.ldtilecfg" in result.ir and sys.platform.startswith("linux"):
        # AMX tiles: Linux lets a process use their state only after it asks (as tdsl does,
        # tdsl.target.amx_permitted); a C program loading the library gets the request here
        from ...target import ARCH_REQ_XCOMP_PERM, SYS_ARCH_PRCTL, XFEATURE_XTILEDATA

        syscall = ir.Function(m, ir.FunctionType(I64, [I64], var_arg=True), "syscall")
        b.call(syscall, [ir.Constant(I64, v) for v in (SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)])
    if result.parallel:
        launch = ir.Function(m, ir.FunctionType(I32, [PTR, PTR, I64]), "tdsl_rt_launch")
        ctx_ty = ir.ArrayType(I64, 2 + len(result.descr_dtypes))
        ctx = ir.GlobalVariable(m, ctx_ty, result.ctx_symbol)   # defined by the kernel's module
        ctx.linkage = "external"
        b.store(b.ptrtoint(launch, I64), b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, 0)]))
        if futex:
            start = ir.Function(m, ir.FunctionType(I32, [I32]), "tdsl_rt_start")
            reset = ir.Function(m, ir.FunctionType(ir.VoidType(), []), "tdsl_rt_reset_after_fork")
            atfork = ir.Function(m, ir.FunctionType(I32, [PTR, PTR, PTR]), "pthread_atfork")
            threads = _emit_thread_count(m, b)
            more = b.icmp_signed(">", threads, ir.Constant(I32, 1))
            with b.if_then(more):
                b.call(start, [b.sub(threads, ir.Constant(I32, 1))])
            b.call(atfork, [ir.Constant(PTR, None), ir.Constant(PTR, None), reset])
    b.ret_void()
    ctor_ty = ir.LiteralStructType([I32, PTR, PTR])
    ctors = ir.GlobalVariable(m, ir.ArrayType(ctor_ty, 1), "llvm.global_ctors")
    ctors.linkage = "appending"
    ctors.initializer = ir.Constant(ir.ArrayType(ctor_ty, 1),
                                    [ir.Constant(ctor_ty, [ir.Constant(I32, 65535), init, ir.Constant(PTR, None)])])


def _emit_thread_count(m: ir.Module, b: ir.IRBuilder) -> ir.Value:
    """TDSL_NUM_THREADS when it is a positive number, else the CPUs in this thread's affinity mask
    (sched_getaffinity), else 1."""
    getenv = ir.Function(m, ir.FunctionType(PTR, [PTR]), "getenv")
    atoi = ir.Function(m, ir.FunctionType(I32, [PTR]), "atoi")
    affinity = ir.Function(m, ir.FunctionType(I32, [I32, I64, PTR]), "sched_getaffinity")
    ctpop = m.declare_intrinsic("llvm.ctpop", [I64])
    text = b"TDSL_NUM_THREADS\0"
    g = ir.GlobalVariable(m, ir.ArrayType(I8, len(text)), "tdsl_env_name")
    g.initializer = ir.Constant(ir.ArrayType(I8, len(text)), bytearray(text))
    g.global_constant, g.linkage = True, "internal"
    words = 16   # a 1024-CPU mask
    mask = b.alloca(ir.ArrayType(I64, words))
    env = b.call(getenv, [b.gep(g, [ir.Constant(I32, 0), ir.Constant(I32, 0)])])
    n_env = b.alloca(I32)
    b.store(ir.Constant(I32, 0), n_env)
    with b.if_then(b.icmp_unsigned("!=", b.ptrtoint(env, I64), ir.Constant(I64, 0))):
        b.store(b.call(atoi, [env]), n_env)
    from_env = b.load(n_env)
    b.store(ir.Constant(ir.ArrayType(I64, words), None), mask)
    rc = b.call(affinity, [ir.Constant(I32, 0), ir.Constant(I64, 8 * words), mask])
    count = ir.Constant(I64, 0)
    for k in range(words):
        word = b.load(b.gep(mask, [ir.Constant(I32, 0), ir.Constant(I32, k)]))
        count = b.add(count, b.call(ctpop, [word]))
    cpus = b.select(b.icmp_signed("==", rc, ir.Constant(I32, 0)), b.trunc(count, I32), ir.Constant(I32, 1))
    cpus = b.select(b.icmp_signed(">", cpus, ir.Constant(I32, 0)), cpus, ir.Constant(I32, 1))
    return b.select(b.icmp_signed(">", from_env, ir.Constant(I32, 0)), from_env, cpus)


# -- linking --------------------------------------------------------------------------------------

_COMPILER_DRIVERS = ("cc", "gcc", "clang")
_LINKERS = ("ld", "ld.lld", "ld.gold")


def find_linker() -> tuple[str, bool]:
    """(path, is a compiler driver) of the system linker export uses: $CC, cc, gcc, clang, then ld."""
    for name in (os.environ.get("CC"), *_COMPILER_DRIVERS):
        found = shutil.which(name) if name else None
        if found:
            return found, True
    for name in _LINKERS:
        found = shutil.which(name)
        if found:
            return found, False
    tried = ", ".join(("$CC", *_COMPILER_DRIVERS, *_LINKERS))
    raise TargetError(f"kernel.export needs a system linker to make a shared library and found none on PATH (tried "
                      f"{tried}); install one, e.g. `apt-get install gcc` (or binutils for ld)")


_SYSTEM_LIBRARIES = ("libc.so.6", "libm.so.6", "libpthread.so.0")
_LIBC_NONSHARED = {"pthread_atfork", "atexit", "at_quick_exit"}   # glibc links these statically (libc_nonshared.a)


def check_system_symbols(obj: bytes, name: str, driver: bool) -> None:
    """Refuse code that calls anything but libc, libm and libpthread (e.g. a BLAS routine a
    library intrinsic calls, which only the Python process provides); a compiler driver also
    links libgcc's helpers (__truncsfhf2, ...)."""
    libs = []
    for lib in _SYSTEM_LIBRARIES:
        try:
            libs.append(ctypes.CDLL(lib))
        except OSError:
            continue
    if not libs:
        return   # not a glibc system: the linker and the loader will say
    missing = []
    for sym in jit.undefined_symbols(obj):
        if sym.startswith("_GLOBAL_OFFSET_TABLE_") or sym in _LIBC_NONSHARED or (driver and sym.startswith("__")):
            continue
        if not any(hasattr(lib, sym) for lib in libs):
            missing.append(sym)
    if missing:
        raise TargetError(f"{name!r} cannot be exported: its code calls {', '.join(sorted(missing))}, which only this "
                          f"Python process provides (a library intrinsic such as blas.*, or an extern function), not "
                          f"libc/libm/libpthread; schedule it without that intrinsic to export it")


def _link(obj: bytes, so: str, exported: list[str]) -> None:
    linker, driver = find_linker()
    check_system_symbols(obj, exported[0], driver)
    with tempfile.TemporaryDirectory(prefix="tdsl-export-") as tmp:
        o, vs = os.path.join(tmp, "kernel.o"), os.path.join(tmp, "exports.map")
        with open(o, "wb") as fh:
            fh.write(obj)
        with open(vs, "w", encoding="utf-8") as fh:
            fh.write("{ global: " + " ".join(f"{s};" for s in exported) + " local: *; };\n")
        if driver:
            cmd = [linker, "-shared", "-o", so, o, f"-Wl,--version-script={vs}", "-Wl,-Bsymbolic",
                   "-Wl,-z,noexecstack", "-lm", "-lpthread"]
        else:
            cmd = [linker, "-shared", "-o", so, o, "--version-script", vs, "-Bsymbolic", "-z", "noexecstack",
                   "-lm", "-lpthread", "-lc"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise TargetError(f"linking {os.path.basename(so)} with {linker} failed ({' '.join(cmd[1:3])} ...):\n"
                              f"{proc.stderr.strip() or proc.stdout.strip()}")


# -- the header -----------------------------------------------------------------------------------

def header(name: str, func: PrimFunc, result) -> str:
    """The C header of an exported kernel: the entry's declaration and its return codes."""
    guard = f"TDSL_{name.upper()}_H"
    written = {info.name for info in result.params if info.kind == "buffer" and info.written}
    buffers = [p for p in func.params if isinstance(p, Buffer)]
    scalars = [p for p in func.params if isinstance(p, Var)]
    dims = _dims(func)
    args, lines = [], []
    for buf in buffers:
        const = "" if buf.name in written else "const "
        args.append(f"{const}{c_type(buf.dtype)} *{buf.name}")
        role = "written" if buf.name in written else "read"
        note = f"; {buf.dtype} bits" if str(buf.dtype) in ("float16", "bfloat16") else ""
        lines.append(f" *   {buf.name}: {buf.dtype} {_shape_text(buf.shape)}, row-major, {role}{note}")
    for d in dims:
        args.append(f"int64_t {d.name}")
        lines.append(f" *   {d.name}: symbolic dimension ({d.dtype}, 0 <= {d.name} <= {(1 << (d.dtype.bits - 1)) - 1})")
    for p in scalars:
        args.append(f"{c_type(p.dtype, scalar=True)} {p.name}")
        lines.append(f" *   {p.name}: scalar {p.dtype}")
    codes = [f"#define {name.upper()}_{tag} {code}  /* {text} */" for code, (tag, text) in RETURN_CODES.items()]
    for k, c in enumerate(result.checks, 1):
        param = c.get("param")
        buf_name = func.params[param].name if param is not None else c["buffer"]
        where = f"on axis {c['axis']} " if "axis" in c else ""
        codes.append(f"/* {k}: index out of bounds in buffer {buf_name!r}: index {c['index']} {where}is outside "
                     f"[0, {c['extent']}) */")
    return f"""/* {name}.h: the C entry of the tdsl kernel {func.name!r}, exported ahead of time.
 *
 * Link with {name}.so (no Python needed). Call from any thread; a parallel kernel runs on the
 * library's own thread pool (TDSL_NUM_THREADS threads, default: the CPUs this process may use).
 *
 * Parameters:
{chr(10).join(lines) if lines else ' *   (none)'}
 *
 * Returns 0, or one of the codes below (nothing is written when a check before the run fails).
 */
#ifndef {guard}
#define {guard}

#include <stdbool.h>
#include <stdint.h>

{chr(10).join(codes)}

#ifdef __cplusplus
extern "C" {{
#endif

int {name}({', '.join(args) or 'void'});

#ifdef __cplusplus
}}
#endif

#endif /* {guard} */
"""


def _shape_text(shape) -> str:
    parts = [str(s.value) if isinstance(s, IntImm) else s.name if isinstance(s, Var) else message_text(s)
             for s in shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
