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
"""
from __future__ import annotations

import os
import re

from ...errors import TargetError
from ...ir import Binary, Buffer, Cast, IntImm, PrimExpr, PrimFunc, Var, collect
from .shared_memory import STATIC_LIMIT

ERR_DIM, ERR_ALIGN, ERR_NO_CONTEXT, ERR_NO_CUBIN = -10, -13, -20, -21
ERR_CUDA_BASE = -1000   # -1000 - r: a driver call returned CUresult r
RETURN_CODES = {
    0: ("OK", "success"),
    ERR_DIM: ("ERR_DIM", "a symbolic dimension is negative or past the range of its type"),
    ERR_ALIGN: ("ERR_ALIGN", "a buffer pointer is not aligned as the kernel's vector loads and stores need "
                             "(16 bytes)"),
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
        raise TargetError(f"{func.name!r} calls a library (cuBLAS) from the host between its kernels; export "
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
        out.append(f"        rc = {name}_check(cuFuncSetAttribute({name}_functions[{k}], "
                   f"CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, {dyn}));")
    out.append("        if (!rc && g[0] > 0 && g[1] > 0 && g[2] > 0 && b[0] > 0 && b[1] > 0 && b[2] > 0)")
    out.append(f"            rc = {name}_check(cuLaunchKernel({name}_functions[{k}], (unsigned)g[0], (unsigned)g[1], "
               f"(unsigned)g[2], (unsigned)b[0], (unsigned)b[1], (unsigned)b[2], {dyn}, stream, params, NULL));")
    return out


def launcher_header(name: str, kernel, images: list[tuple[str, bytes]]) -> str:
    func: PrimFunc = kernel.func
    plan = kernel.plan
    flat = list(plan.func.params)
    buffers = [p for p in func.params if isinstance(p, Buffer)]
    scalars = [p for p in func.params if isinstance(p, Var)]
    dims = dims_of(func)
    # C names of the values a launch may need: API buffers by position, dimensions, scalars
    ptr_of = {}
    for flat_p, api_p in zip(flat, func.params):
        if isinstance(flat_p, Buffer):
            ptr_of[flat_p] = api_p.name
    for k, w in enumerate(plan.workspaces):
        ptr_of[w] = f"ws[{k}]"
    values = {d.name: d.name for d in dims} | {p.name: p.name for p in scalars}
    args = ["CUstream stream"] + [f"CUdeviceptr {p.name}" for p in buffers] + [f"int64_t {d.name}" for d in dims]
    args += [f"{_C_SCALAR[str(p.dtype)]} {p.name}" for p in scalars]
    upper = name.upper()
    body = []
    for d in dims:
        limit = (1 << (d.dtype.bits - 1)) - 1
        body.append(f"    if ({d.name} < 0 || {d.name} > INT64_C({limit})) return {upper}_ERR_DIM;")
    vector = set().union(*kernel._vector_params.values()) if kernel._vector_params else set()
    for p in buffers:
        if p.name in vector:
            body.append(f"    if ({p.name} % 16) return {upper}_ERR_ALIGN;")
    body.append(f"    int rc = {name}_load();")
    body.append("    if (rc) return rc;")
    if plan.workspaces:
        body.append(f"    CUdeviceptr ws[{len(plan.workspaces)}] = {{0}};")
        for k, w in enumerate(plan.workspaces):
            size = f"{c_expr(w.shape[0], values)} * {w.dtype.itemsize * w.dtype.lanes}"
            body.append(f"    if (!rc && {size} > 0) rc = {name}_check(cuMemAlloc(&ws[{k}], (size_t)({size})));")
    for k, spec in enumerate(kernel.kernels):
        grid = [c_expr(e, values) for e in spec.dims("blockIdx")]
        block = [c_expr(e, values) for e in spec.dims("threadIdx")]
        body.append(f"    if (!rc) {{  /* {spec.name} */")
        body.append(f"        int64_t g[3] = {{{', '.join(grid)}}}, b[3] = {{{', '.join(block)}}};")
        params = []
        for j, p in enumerate(spec.params):
            if isinstance(p, Buffer):
                body.append(f"        CUdeviceptr p{j} = {ptr_of[p]};")
            else:
                if p.name not in values:
                    raise TargetError(f"kernel {spec.name!r} takes {p.name!r}, which the signature does not give")
                body.append(f"        {_C_SCALAR.get(str(p.dtype), 'int64_t')} p{j} = "
                            f"({_C_SCALAR.get(str(p.dtype), 'int64_t')}){values[p.name]};")
            params.append(f"&p{j}")
        body.append(f"        void *params[] = {{{', '.join(params) or 'NULL'}}};")
        body += _launch_lines(name, k, spec.dynamic_shared_bytes)
        body.append("    }")
    for k in range(len(plan.workspaces)):
        body.append(f"    if (ws[{k}]) {{ if (!rc) rc = {name}_check(cuStreamSynchronize(stream)); cuMemFree(ws[{k}]); }}")
    body.append("    return rc;")
    arrays, table = [], []
    for arch, cubin in images:
        sm = int(re.sub(r"\D", "", arch))
        arrays.append(f"static const unsigned char {name}_cubin_{arch}[{len(cubin)}] = {{\n{_bytes(cubin)}\n}};")
        table.append(f"    {{{sm}, {name}_cubin_{arch}}},")
    codes = [f"#define {upper}_{tag} {code}  /* {text} */" for code, (tag, text) in RETURN_CODES.items()]
    codes.append(f"/* {ERR_CUDA_BASE} - r: a CUDA driver call returned CUresult r (e.g. {ERR_CUDA_BASE - 1}: "
                 f"CUDA_ERROR_INVALID_VALUE) */")
    kernel_names = ", ".join(f'"{s.name}"' for s in kernel.kernels)
    params_doc = "\n".join(f" *   {p.name}: {p.dtype} {_shape(p)} in device memory, row-major" for p in buffers)
    params_doc += "".join(f"\n *   {d.name}: symbolic dimension ({d.dtype})" for d in dims)
    params_doc += "".join(f"\n *   {p.name}: scalar {p.dtype}" for p in scalars)
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


def _bytes(data: bytes) -> str:
    rows = []
    for k in range(0, len(data), 24):
        rows.append("    " + ",".join(str(b) for b in data[k:k + 24]) + ",")
    return "\n".join(rows)


def _shape(p: Buffer) -> str:
    parts = [str(s.value) if isinstance(s, IntImm) else s.name if isinstance(s, Var) else str(s) for s in p.shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
