"""Ahead-of-time export of a CUDA kernel: CUBINs for chosen architectures and a C header whose
host launcher loads them and launches the kernels through the CUDA driver API.

    kernel.export("out/add", archs=["sm_80", "sm_90"])
    # out/add/add_sm_80.cubin, out/add/add_sm_90.cubin, out/add/add.h

The header is self-contained (the CUBINs are embedded as byte arrays, the .cubin files are
written as well) and needs only `cuda.h` and `-lcuda`:

    int NAME(CUstream stream, CUdeviceptr A, ..., int64_t n, ..., float s);

one device pointer per buffer parameter in order, an int64_t per symbolic dimension in the
order the signature first names it, then the scalar parameters. On first use in a context it
loads the CUBIN of the current device's architecture (`cuModuleLoadData`), then launches the
kernels in order on `stream`, allocating the function's global intermediates (cuMemAlloc) for
the call. It returns 0 or a code the header lists.

A function whose TMA tensor maps the call path encodes (`tdsl.ir.tensor_maps`; the sm_90a
GEMMs) gets them encoded by the launcher too, before its first launch: `cuTensorMapEncodeTiled`
with the arguments the Python call path passes (`tensor_maps.tiled_arguments`) over the
tensor's device pointer, the 128 bytes copied (`cuMemcpyHtoDAsync` on `stream`) into the map's
device buffer, whose pointer the kernel takes. Such a header needs cuda.h and a driver of CUDA
12.0 or newer.
"""
from __future__ import annotations

import os
import re

from ...errors import TargetError
from ...ir import Binary, Buffer, Cast, IntImm, PrimExpr, PrimFunc, Var, collect
from .shared_memory import STATIC_LIMIT

ERR_DIM, ERR_ALIGN, ERR_NO_CONTEXT, ERR_NO_CUBIN = -10, -13, -20, -21
ERR_CUDA_BASE = -1000         # -1000 - r: a driver call returned CUresult r
ERR_TENSOR_MAP_BASE = -2000   # -2000 - r: cuTensorMapEncodeTiled returned CUresult r
RETURN_CODES = {
    0: ("OK", "success"),
    ERR_DIM: ("ERR_DIM", "a symbolic dimension is negative or past the range of its type"),
    ERR_ALIGN: ("ERR_ALIGN", "a buffer pointer is not aligned as the kernel's vector loads and stores or its TMA "
                             "tensor maps need (16 bytes)"),
    ERR_NO_CONTEXT: ("ERR_NO_CONTEXT", "no CUDA context is current on this thread (cuCtxSetCurrent / the runtime "
                                       "API makes one)"),
    ERR_NO_CUBIN: ("ERR_NO_CUBIN", "no embedded CUBIN for the current device's architecture: export for it"),
}
_C_SCALAR = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t",
             "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t", "float32": "float",
             "float64": "double", "bool": "bool"}


def export_cuda(kernel, path: str, name: str | None = None, archs: list[str] | None = None) -> str:
    """Write path/NAME_<arch>.cubin for each of `archs` (default: the kernel's own) and
    path/NAME.h with the host launcher; returns the header's path."""
    from .nvrtc import check_arch, compile_cuda

    func: PrimFunc = kernel.func
    name = name or func.name
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise TargetError(f"export name {name!r} is not a C identifier; pass name= with letters, digits and _")
    if kernel.plan.steps:
        raise TargetError(f"{func.name!r} {_host_step_text(kernel.plan.steps[0][1])} between its kernels; export "
                          f"takes functions made only of generated kernels")
    for p in func.params:
        if isinstance(p, Var) and str(p.dtype) not in _C_SCALAR:
            raise TargetError(f"scalar parameter {p.name!r} of type {p.dtype} cannot be exported (int, uint, float32, "
                              f"float64 and bool can)")
    archs = list(archs or ([kernel.arch] if kernel.arch else []))
    if not archs:
        raise TargetError("export needs the GPU architectures to compile for: archs=['sm_80', 'sm_90']")
    os.makedirs(path, exist_ok=True)
    images = []
    from .shared_memory import check_limit

    for arch in archs:
        check_arch(arch)
        for spec in kernel.kernels:
            check_limit(spec.name, max(spec.shared_bytes, spec.dynamic_shared_bytes), arch, spec.shared)
        cubin = kernel.cubin if arch == kernel.arch and kernel.cubin else compile_cuda(kernel.source, arch).cubin
        with open(os.path.join(path, f"{name}_{arch}.cubin"), "wb") as fh:
            fh.write(cubin)
        images.append((arch, cubin))
    header = os.path.join(path, f"{name}.h")
    with open(header, "w", encoding="utf-8") as fh:
        fh.write(launcher_header(name, kernel, images))
    return header


def _host_step_text(step) -> str:
    """What a host step of the plan does, for export's refusal."""
    from .host_steps import LibraryStep

    if isinstance(step, LibraryStep):
        return f"calls a library ({step.symbol}, cuBLAS) from the host"
    # the other kind: tdsl's fused attention kernel, launched by the host from its own NVRTC build
    return f"launches tdsl's fused attention kernel, compiled by NVRTC at run time, from the host ({step.text()})"


def dims_of(func: PrimFunc) -> list[Var]:
    """The symbolic dimensions (not scalar parameters) in the order the signature first names them."""
    scalars = {p.name for p in func.params if isinstance(p, Var)}
    seen: dict[str, Var] = {}
    for p in func.params:
        if isinstance(p, Buffer):
            for s in p.shape:
                for v in collect(s, Var):
                    if v.name not in scalars:
                        seen.setdefault(v.name, v)
    return list(seen.values())


def c_expr(e: PrimExpr, names: dict[str, str]) -> str:
    """An integer launch expression as C (int64_t arithmetic, floor division)."""
    if isinstance(e, IntImm):
        return f"INT64_C({e.value})"
    if isinstance(e, Var):
        if e.name not in names:
            raise TargetError(f"launch extent uses {e.name!r}, which is neither a dimension nor a scalar parameter")
        return f"((int64_t){names[e.name]})"
    if isinstance(e, Cast):
        return c_expr(e.value, names)
    if isinstance(e, Binary):
        a, b = c_expr(e.a, names), c_expr(e.b, names)
        infix = {"add": "+", "sub": "-", "mul": "*"}
        if e.op in infix:
            return f"({a} {infix[e.op]} {b})"
        if e.op in ("floordiv", "floormod", "min", "max"):
            return f"tdsl_{e.op}({a}, {b})"
    raise TargetError(f"a launch extent must be integer arithmetic on the dimensions; got {e}")


def _launch_lines(name: str, k: int, dyn: int) -> list[str]:
    """cuLaunchKernel of kernel `k` with `dyn` bytes of dynamic shared memory (over 48 KiB: the
    function's MAX_DYNAMIC_SHARED_SIZE_BYTES raised to it first)."""
    out = []
    if dyn > STATIC_LIMIT:
        out.append(f"        tdsl_rc = {name}_check(cuFuncSetAttribute({name}_functions[{k}], "
                   f"CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, {dyn}));")
    g, b = [f"(unsigned)tdsl_grid[{i}]" for i in range(3)], [f"(unsigned)tdsl_block[{i}]" for i in range(3)]
    out.append(f"        if (!tdsl_rc && {' && '.join(f'{x} > 0' for x in g + b)})")
    out.append(f"            tdsl_rc = {name}_check(cuLaunchKernel({name}_functions[{k}], {', '.join(g + b)}, {dyn}, "
               "stream, tdsl_params, NULL));")
    return out


# C names the launcher keeps for itself (its own locals are tdsl_*): a parameter so named is
# renamed in C (a trailing underscore); the launcher is called by position
_C_RESERVED = frozenset({
    "stream", "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short",
    "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile",
    "while", "bool", "true", "false", "NULL"})


def c_names(names: list[str]) -> dict[str, str]:
    """The launcher's C name of each parameter / dimension name.

    >>> c_names(["A", "stream", "tdsl_rc"])
    {'A': 'A', 'stream': 'stream_', 'tdsl_rc': 'tdsl_rc_'}
    """
    out: dict[str, str] = {}
    for n in names:
        c = f"{n}_" if n in _C_RESERVED or n.startswith("tdsl_") else n
        while c != n and (c in names or c in out.values() or c in _C_RESERVED):
            c += "_"
        out[n] = c
    return out


def launcher_header(name: str, kernel, images: list[tuple[str, bytes]]) -> str:
    func: PrimFunc = kernel.func
    plan = kernel.plan
    flat = list(plan.func.params)
    buffers = [p for p in func.params if isinstance(p, Buffer)]
    scalars = [p for p in func.params if isinstance(p, Var)]
    dims = dims_of(func)
    cn = c_names([p.name for p in func.params] + [d.name for d in dims])
    # C names of the values a launch may need: API buffers by position, dimensions, scalars
    ptr_of = {}
    for flat_p, api_p in zip(flat, func.params):
        if isinstance(flat_p, Buffer):
            ptr_of[flat_p] = cn[api_p.name]
    for k, w in enumerate(plan.workspaces):
        ptr_of[w] = f"tdsl_ws[{k}]"
    values = {d.name: cn[d.name] for d in dims} | {p.name: cn[p.name] for p in scalars}
    args = ["CUstream stream"] + [f"CUdeviceptr {cn[p.name]}" for p in buffers] + [f"int64_t {cn[d.name]}" for d in dims]
    args += [f"{_C_SCALAR[str(p.dtype)]} {cn[p.name]}" for p in scalars]
    upper = name.upper()
    body = []
    for d in dims:
        limit = (1 << (d.dtype.bits - 1)) - 1
        body.append(f"    if ({cn[d.name]} < 0 || {cn[d.name]} > INT64_C({limit})) return {upper}_ERR_DIM;")
    maps = kernel._tensor_maps
    body += _align_checks(kernel, buffers, {ptr_of[b.tensor] for b in maps}, upper, cn)
    body.append(f"    int tdsl_rc = {name}_load();")
    body.append("    if (tdsl_rc) return tdsl_rc;")
    if plan.workspaces:
        body.append(f"    CUdeviceptr tdsl_ws[{len(plan.workspaces)}] = {{0}};")
        for k, w in enumerate(plan.workspaces):
            size = f"{c_expr(w.shape[0], values)} * {w.dtype.itemsize * w.dtype.lanes}"
            body.append(f"    if (!tdsl_rc && {size} > 0) tdsl_rc = {name}_check(cuMemAlloc(&tdsl_ws[{k}], (size_t)({size})));")
    body += _tensor_map_lines(name, maps, ptr_of)
    for k, spec in enumerate(kernel.kernels):
        grid = [c_expr(e, values) for e in spec.dims("blockIdx")]
        block = [c_expr(e, values) for e in spec.dims("threadIdx")]
        body.append(f"    if (!tdsl_rc) {{  /* {spec.name} */")
        body.append(f"        int64_t tdsl_grid[3] = {{{', '.join(grid)}}}, tdsl_block[3] = {{{', '.join(block)}}};")
        params = []
        for j, p in enumerate(spec.params):
            if isinstance(p, Buffer):
                body.append(f"        CUdeviceptr tdsl_p{j} = {ptr_of[p]};")
            else:
                if p.name not in values:
                    raise TargetError(f"kernel {spec.name!r} takes {p.name!r}, which the signature does not give")
                body.append(f"        {_C_SCALAR.get(str(p.dtype), 'int64_t')} tdsl_p{j} = "
                            f"({_C_SCALAR.get(str(p.dtype), 'int64_t')}){values[p.name]};")
            params.append(f"&tdsl_p{j}")
        body.append(f"        void *tdsl_params[] = {{{', '.join(params) or 'NULL'}}};")
        body += _launch_lines(name, k, spec.dynamic_shared_bytes)
        body.append("    }")
    for k in range(len(plan.workspaces)):
        body.append(f"    if (tdsl_ws[{k}]) {{ if (!tdsl_rc) tdsl_rc = {name}_check(cuStreamSynchronize(stream)); cuMemFree(tdsl_ws[{k}]); }}")
    body.append("    return tdsl_rc;")
    arrays, table = [], []
    for arch, cubin in images:
        sm = int(re.sub(r"\D", "", arch))
        arrays.append(f"static const unsigned char {name}_cubin_{arch}[{len(cubin)}] = {{\n{_bytes(cubin)}\n}};")
        table.append(f"    {{{sm}, {name}_cubin_{arch}}},")
    codes = [f"#define {upper}_{tag} {code}  /* {text} */" for code, (tag, text) in RETURN_CODES.items()]
    codes.append(f"/* {ERR_CUDA_BASE} - r: a CUDA driver call returned CUresult r (e.g. {ERR_CUDA_BASE - 1}: "
                 f"CUDA_ERROR_INVALID_VALUE) */")
    if maps:
        codes.append(f"/* {ERR_TENSOR_MAP_BASE} - r: cuTensorMapEncodeTiled refused a TMA tensor map with CUresult r "
                     f"(e.g. {ERR_TENSOR_MAP_BASE - 1}: CUDA_ERROR_INVALID_VALUE); nothing was launched */")
    kernel_names = ", ".join(f'"{s.name}"' for s in kernel.kernels)
    params_doc = "\n".join(f" *   {cn[p.name]}: {p.dtype} {_shape(p)} in device memory, row-major" for p in buffers)
    params_doc += "".join(f"\n *   {cn[d.name]}: symbolic dimension ({d.dtype})" for d in dims)
    params_doc += "".join(f"\n *   {cn[p.name]}: scalar {p.dtype}" for p in scalars)
    return f"""/* {name}.h: the host launcher of the tdsl CUDA function {func.name!r}, exported ahead of time.
 *
 * CUBINs embedded for: {', '.join(a for a, _ in images)}. Needs cuda.h and the driver library
 * (-lcuda); no Python, no NVRTC. Call with a CUDA context current on the calling thread; the
 * module is loaded into that context on the first call (and again after the context changes).
 * The launches are asynchronous on `stream` (0: the legacy default stream).
 *
 * Parameters:
{params_doc}
 */
#ifndef TDSL_{upper}_CUDA_H
#define TDSL_{upper}_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cuda.h>
{_version_guard(name) if maps else ""}
{chr(10).join(codes)}

{chr(10).join(arrays)}

static const struct {{ int sm; const unsigned char *image; }} {name}_images[] = {{
{chr(10).join(table)}
}};

static CUcontext {name}_context;
static CUmodule {name}_module;
static CUfunction {name}_functions[{max(len(kernel.kernels), 1)}];

static inline int64_t tdsl_floordiv(int64_t a, int64_t b) {{ int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }}
static inline int64_t tdsl_floormod(int64_t a, int64_t b) {{ return a - tdsl_floordiv(a, b) * b; }}
static inline int64_t tdsl_min(int64_t a, int64_t b) {{ return a < b ? a : b; }}
static inline int64_t tdsl_max(int64_t a, int64_t b) {{ return a > b ? a : b; }}

static inline int {name}_check(CUresult r) {{ return r == CUDA_SUCCESS ? 0 : {ERR_CUDA_BASE} - (int)r; }}
{_tensor_map_helpers(name) if maps else ""}
/* Load the CUBIN for the current device into the current context (once per context). */
static inline int {name}_load(void) {{
    static const char *names[] = {{{kernel_names}}};
    CUcontext ctx = NULL;
    CUdevice dev;
    int major = 0, minor = 0, rc;
    if (cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == NULL) return {upper}_ERR_NO_CONTEXT;
    if (ctx == {name}_context && {name}_module != NULL) return 0;
    if ((rc = {name}_check(cuCtxGetDevice(&dev)))) return rc;
    if ((rc = {name}_check(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)))) return rc;
    if ((rc = {name}_check(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)))) return rc;
    for (size_t i = 0; i < sizeof({name}_images) / sizeof({name}_images[0]); i++) {{
        if ({name}_images[i].sm != major * 10 + minor) continue;
        CUmodule module;
        if ((rc = {name}_check(cuModuleLoadData(&module, {name}_images[i].image)))) return rc;
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
            if ((rc = {name}_check(cuModuleGetFunction(&{name}_functions[k], module, names[k])))) return rc;
        {name}_module = module;
        {name}_context = ctx;
        return 0;
    }}
    return {upper}_ERR_NO_CUBIN;
}}

static inline int {name}({', '.join(args)}) {{
{chr(10).join(body)}
}}

#endif /* TDSL_{upper}_CUDA_H */
"""


def _align_checks(kernel, buffers: list[Buffer], tma: set[str], upper: str, cn: dict[str, str]) -> list[str]:
    """16-byte alignment checks of the buffer parameters read with 16-byte vectors or through a
    TMA tensor map (`tma`: their C names; `cn`: the C name of each parameter)."""
    vector = set().union(*kernel._vector_params.values()) if kernel._vector_params else set()
    return [f"    if ({cn[p.name]} % 16) return {upper}_ERR_ALIGN;" for p in buffers
            if p.name in vector or cn[p.name] in tma]


def _version_guard(name: str) -> str:
    return (f"#if CUDA_VERSION < 12000\n#error \"{name}.h encodes TMA tensor maps (cuTensorMapEncodeTiled): it needs "
            f"cuda.h and a driver of CUDA 12.0 or newer\"\n#endif\n")


def _tensor_map_helpers(name: str) -> str:
    """C helpers: one tiled map encoded into 128-byte aligned room on the stack (the driver asks
    for 64; C99 cannot align a local), with the arguments the Python call path passes."""
    return f"""
/* The 128-byte aligned CUtensorMap inside `room` (CU_TENSOR_MAP_NUM_QWORDS + 16 words). */
static inline CUtensorMap *{name}_map_in(cuuint64_t *room) {{
    return (CUtensorMap *)(void *)(room + ((128 - ((uintptr_t)room & 127)) & 127) / 8);
}}

/* A tiled TMA tensor map over the tensor at `tensor` (sizes and box innermost first, byte strides
 * of dimensions 1 .. rank-1): element strides 1, no interleave, 128-byte L2 promotion, zero fill
 * outside the tensor. Returns 0 or {ERR_TENSOR_MAP_BASE} - the driver's CUresult. */
static inline int {name}_encode_map(cuuint64_t *room, CUtensorMapDataType dtype, cuuint32_t rank, CUdeviceptr tensor,
                                    const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                    CUtensorMapSwizzle swizzle) {{
    static const cuuint32_t ones[5] = {{1, 1, 1, 1, 1}};
    CUresult r = cuTensorMapEncodeTiled({name}_map_in(room), dtype, rank, (void *)(uintptr_t)tensor, dims, strides,
                                        box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : {ERR_TENSOR_MAP_BASE} - (int)r;
}}
"""


def _tensor_map_lines(name: str, maps, ptr_of: dict) -> list[str]:
    """Encode every map (host only: a refused one launches nothing), then copy each into its
    device buffer on `stream`, ahead of the launches that read it (a pageable source: the driver
    has copied it out when cuMemcpyHtoDAsync returns)."""
    from .tensor_maps import tiled_arguments

    if not maps:
        return []
    out = [f"    cuuint64_t tdsl_maps[{len(maps)}][CU_TENSOR_MAP_NUM_QWORDS + 16];   /* room to align each map */"]
    for k, b in enumerate(maps):
        a = tiled_arguments(b.shape, b.dtype, b.spec.box, b.spec.swizzle)
        strides = ", ".join(str(x) for x in a.strides) or "0"
        out.append(f"    if (!tdsl_rc) {{  /* {b.spec.map}: {b.spec.tensor} {b.shape}, box {b.spec.box}, swizzle "
                   f"{b.spec.swizzle} */")
        out.append(f"        static const cuuint64_t tdsl_dims[{a.rank}] = {{{', '.join(map(str, a.dims))}}}, "
                   f"tdsl_strides[{max(a.rank - 1, 1)}] = {{{strides}}};")
        out.append(f"        static const cuuint32_t tdsl_box[{a.rank}] = {{{', '.join(map(str, a.box))}}};")
        out.append(f"        tdsl_rc = {name}_encode_map(tdsl_maps[{k}], CU_TENSOR_MAP_DATA_TYPE_{a.data_type}, {a.rank}, "
                   f"{ptr_of[b.tensor]}, tdsl_dims, tdsl_strides, tdsl_box, CU_TENSOR_MAP_SWIZZLE_{a.swizzle});")
        out.append("    }")
    for k, b in enumerate(maps):
        out.append(f"    if (!tdsl_rc) tdsl_rc = {name}_check(cuMemcpyHtoDAsync({ptr_of[b.map]}, {name}_map_in(tdsl_maps[{k}]), "
                   "sizeof(CUtensorMap), stream));")
    return out


def _bytes(data: bytes) -> str:
    rows = []
    for k in range(0, len(data), 24):
        rows.append("    " + ",".join(str(b) for b in data[k:k + 24]) + ",")
    return "\n".join(rows)


def _shape(p: Buffer) -> str:
    parts = [str(s.value) if isinstance(s, IntImm) else s.name if isinstance(s, Var) else str(s) for s in p.shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
