"""Lowered, kernel-split IR (`HostPlan`) -> readable CUDA C++.

One `extern "C" __global__` function per kernel: buffer parameters are `__restrict__`
pointers (`const` when only read), symbolic dimensions and scalar parameters are passed by
value. Index arithmetic is 32-bit unless a buffer may hold 2**31 elements or more (symbolic or
large sizes), where it is done in `long long`. Floor division and modulo use helper functions
unless both operands are provably non-negative. Vector code (`Ramp` loads/stores from
`vectorize`: 4 lanes, or 16 bytes of narrower elements) uses float4/int4/... transactions, and
`tdsl_vec<half, 8>`-style structs of 4, 8 or 16 bytes for elements narrower than 32 bits, where
the alignment is provable, and is written lane by lane otherwise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...dtypes import DataType, bfloat16, int32, int64
from ...errors import TargetError
from ...ir import (
    Allocate,
    Binary,
    Broadcast,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    Evaluate,
    FloatImm,
    For,
    IfThenElse,
    IntImm,
    IRMutator,
    LetStmt,
    Not,
    PrimExpr,
    Ramp,
    Range,
    Select,
    SeqStmt,
    Stmt,
    StringImm,
    Var,
    collect,
)
from ...ir.attrs import CUDA_PRELUDE as PRELUDE_ATTR
from ...ir.expr import BIT_SYMBOLS, BITWISE_OPS, SHIFT_OPS, shift_in_range
from ...ir.opaque_calls import (
    FENCE_PROXY_ASYNC,
    HOPPER_CALLS,
    MBARRIER_ARRIVE,
    MBARRIER_ARRIVE_EXPECT_TX,
    MBARRIER_INIT,
    MBARRIER_WAIT,
    SETMAXNREG,
    TMA_LOAD,
    TMA_STORE,
    WGMMA,
    WGMMA_COMMIT_GROUP,
    WGMMA_FENCE,
    WGMMA_WAIT_GROUP,
    WMMA_BUILTINS,
    wgmma_b_mn,
    wmma_refusal,
)
from ...lower.cross_thread import ALLREDUCE
from ...lower.index_checks import INDEX_CHECK
from ...lower.software_pipeline import ASYNC_CALLS, COMMIT_GROUP, WAIT_GROUP
from . import shared_memory, sm90
from .c_text import HELPERS as _HELPERS
from .c_text import KEYWORDS as _KEYWORDS
from .c_text import atom as _atom
from .c_text import infix as _infix
from .c_text import strip_parens as _strip
from .lower_gpu import SYNC, _extern_call_args
from .plan import HostPlan, KernelSpec

_SCALAR_TYPES = {
    "bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int", "uint64": "unsigned long long",
    "float16": "half", "bfloat16": "nv_bfloat16", "float32": "float", "float64": "double",
}
# native CUDA vector types with .x/.y/.z/.w fields
_VECTOR_TYPES = {("float32", 2): "float2", ("float32", 4): "float4", ("int32", 2): "int2", ("int32", 4): "int4",
                 ("uint32", 2): "uint2", ("uint32", 4): "uint4", ("float64", 2): "double2"}
_LANE_FIELDS = "xyzw"
# elements narrower than 32 bits: an aligned run of 4, 8 or 16 bytes moves as one tdsl_vec (a
# struct as aligned as it is long, so one LDG/STG/LDS/STS .32/.64/.128)
_PACKED_TYPES = ("float16", "bfloat16", "int8", "uint8", "int16", "uint16")
_PACKED_BYTES = (4, 8, 16)
_PACKED_RAW = {4: "unsigned int", 8: "uint2", 16: "uint4"}

_BINOPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
           "gt": ">", "ge": ">=", "and": "&&", "or": "||"}

# float32 names; float64 drops the "f"
_MATH = {"exp": "expf", "log": "logf", "sqrt": "sqrtf", "rsqrt": "rsqrtf", "tanh": "tanhf", "erf": "erff",
         "abs": "fabsf", "floor": "floorf", "ceil": "ceilf", "pow": "powf", "exp2": "exp2f", "log2": "log2f",
         "sin": "sinf", "cos": "cosf", "round": "rintf", "trunc": "truncf", "fma": "fmaf"}



# conversions to half / bfloat16 from types float32 cannot hold exactly: CUDA's own, one rounding
_ROUND_ONCE = {"float64": "__double2{}", "int32": "__int2{}_rn", "uint32": "__uint2{}_rn", "int64": "__ll2{}_rn",
               "uint64": "__ull2{}_rn"}


def c_type(dt: DataType) -> str:
    """The C type of one lane of `dt`."""
    name = str(dt.element)
    if name not in _SCALAR_TYPES:
        raise TargetError(f"dtype {dt} has no CUDA C type")
    return _SCALAR_TYPES[name]


def needs_int64(buf: Buffer) -> bool:
    """Index arithmetic for `buf` must be 64-bit: its size is symbolic or at least 2**31."""
    (size,) = buf.shape
    return not isinstance(size, IntImm) or size.value >= 2**31


class _Widen(IRMutator):
    """An int32 index expression rebuilt in int64 (leaves cast), so that it cannot overflow.

    What tdsl's int32 semantics wrap stays int32 below a cast (as the CPU backend does): the
    operands of //, %, min, max and the bit operations (`(i + 2**31 - 1) % 10` wraps before the
    modulo; a shift's amount is modulo 32), and a
    narrowing or reinterpreting cast to int32 (from int64, uint32, uint64, floats)."""

    def visit_Binary(self, e: Binary) -> PrimExpr:
        if e.op in ("floordiv", "floormod", "min", "max", *BITWISE_OPS) and e.dtype == int32:
            return Cast(int64, e)
        return self.generic_visit(e)

    def visit_Var(self, v: Var) -> PrimExpr:
        return Cast(int64, v) if v.dtype == int32 else v

    def visit_IntImm(self, e: IntImm) -> PrimExpr:
        return IntImm(e.value, int64) if e.dtype == int32 else e

    def visit_BufferLoad(self, e: BufferLoad) -> PrimExpr:
        return Cast(int64, e) if e.dtype == int32 else e

    def visit_Cast(self, e: Cast) -> PrimExpr:
        if e.dtype == int32:
            src = e.value.dtype
            exact = src.lanes == 1 and (src.is_bool or (src.is_integer and src.bits < 32)
                                        or (src.is_int and src.bits == 32))
            return Cast(int64, e.value) if exact else Cast(int64, e)
        return e

    def visit_Call(self, e: Call) -> PrimExpr:
        args = tuple(self.visit(a) for a in e.args)
        dtype = int64 if e.dtype == int32 else e.dtype
        if e.op == "if_then_else":
            args = (e.args[0],) + args[1:]
        return Call(dtype, e.op, args)


def widen(e: PrimExpr) -> PrimExpr:
    if e.dtype.element != int32:
        return e
    return _Widen().visit(e)


@dataclass
class _Kernel:
    """Per-kernel code generation state."""

    spec: KernelSpec
    names: dict[object, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    lines: list[str] = field(default_factory=list)
    ranges: dict[Var, Range] = field(default_factory=dict)
    tmp: int = 0


def _field(vec: str, k: int) -> str:
    """Lane `k` of a value of the CUDA vector type `vec`: ``.y`` of a float4, ``.v[1]`` of a tdsl_vec."""
    return f".v[{k}]" if vec.startswith("tdsl_vec<") else f".{_LANE_FIELDS[k]}"


class CudaCodegen:
    """Prints a HostPlan as one CUDA C++ translation unit."""

    def __init__(self, plan: HostPlan):
        self.plan = plan
        self.helpers: set[str] = set()
        self.wgmma_shapes: set[tuple] = set()   # (N, "f16" | "bf16"[, "mn"]) of the T.ptx_wgmma calls
        self.fp16 = False
        self.bf16 = False
        self.k: _Kernel | None = None
        self.vector_params: dict[str, set[str]] = {}   # kernel -> params loaded/stored as vectors

    # naming --------------------------------------------------------------------------
    def name(self, obj) -> str:
        k = self.k
        if obj in k.names:
            return k.names[obj]
        base = re.sub(r"\W", "_", obj.name) or "v"
        if base[0].isdigit():
            base = "v" + base
        if base in _KEYWORDS or base.startswith(("tdsl_", "__")):
            base = base.strip("_") + "_"
        cand, i = base, 1
        while cand in k.used:
            cand, i = f"{base}_{i}", i + 1
        k.used.add(cand)
        k.names[obj] = cand
        return cand

    def fresh(self, prefix: str) -> str:
        k = self.k
        while True:
            k.tmp += 1
            cand = f"{prefix}{k.tmp}"
            if cand not in k.used:
                k.used.add(cand)
                return cand

    def emit(self, depth: int, text: str) -> None:
        self.k.lines.append("  " * depth + text)

    def type_of(self, dt: DataType) -> str:
        if dt.code == "float" and dt.bits == 16:
            self.fp16 = True
        if dt.code == "bfloat":
            self.bf16 = True
        return c_type(dt)

    # top level ----------------------------------------------------------------------
    def generate(self) -> str:
        kernels = [self.kernel(spec) for spec in self.plan.kernels]
        from .host_steps import plan_text

        head = [f"// generated by tdsl from prim_func {self.plan.func.name!r}"] + (
            [plan_text(self.plan.steps)] if self.plan.steps else [])
        if self.fp16:
            head.append("#include <cuda_fp16.h>")
        if self.bf16:
            head.append("#include <cuda_bf16.h>")
        helpers = [_HELPERS[h] if h != "sm90" else sm90.device_functions(tuple(sorted(self.wgmma_shapes)))
                   for h in sorted(self.helpers)
                   if h != "sm90" or sm90.PRELUDE_MARK not in (dict(self.plan.func.attrs).get(PRELUDE_ATTR) or "")]
        # device functions that tensor intrinsics call (e.g. the WMMA wrappers), as they gave them
        prelude = dict(self.plan.func.attrs).get(PRELUDE_ATTR)
        parts = ["\n".join(head)] + ([prelude.strip("\n")] if prelude else []) + helpers + kernels
        return "\n\n".join(parts) + "\n"

    def kernel(self, spec: KernelSpec) -> str:
        self.k = _Kernel(spec)
        self.vector_params[spec.name] = set()
        for tag, var in spec.tag_vars.items():
            ext = spec.launch[tag]
            self.k.ranges[var] = Range(IntImm(0, var.dtype), ext)
        # buffers passed to extern calls may be written by them (e.g. a WMMA store)
        stored = {n.buffer for n in collect(spec.body, BufferStore)} | {a.buffer for a in _extern_call_args(spec.body)}
        params = []
        for p in spec.params:
            if isinstance(p, Buffer):
                const = "" if p in stored else "const "
                params.append(f"{const}{self.type_of(p.dtype)}* __restrict__ {self.name(p)}")
            else:
                params.append(f"{self.type_of(p.dtype)} {self.name(p)}")
        for tag, var in spec.tag_vars.items():
            self.emit(1, f"const {self.type_of(var.dtype)} {self.name(var)} = {tag};")
        self.shared_decls(spec)
        self.stmt(spec.body, 1)
        threads = 1
        for e in spec.dims("threadIdx"):
            threads = threads * e.value if isinstance(e, IntImm) and threads else 0
        bounds = f"__launch_bounds__({threads}) " if threads else ""
        sig = f'extern "C" __global__ void {bounds}{spec.name}({", ".join(params)}) {{'
        return "\n".join([sig] + self.k.lines + ["}"])

    def shared_decls(self, spec: KernelSpec) -> None:
        """Static `__shared__` arrays, or views into the dynamic `tdsl_smem` above 48 KiB
        (tdsl.backends.cuda.shared_memory); the dynamic bytes go to `spec.dynamic_shared_bytes`."""
        placed = shared_memory.layout(spec.body, spec.shared)
        spec.dynamic_shared_bytes = placed.dynamic_bytes
        align = shared_memory.alignments(spec.body, spec.shared)
        if placed.dynamic_bytes:
            self.emit(1, f"extern __shared__ __align__(1024) unsigned char {shared_memory.DYNAMIC_ARRAY}[];")
        for buf in spec.shared:
            ty, n = self.type_of(buf.dtype), buf.shape[0].value
            if placed.dynamic_bytes:
                at = placed.offsets[buf]
                self.emit(1, f"{ty} (&{self.name(buf)})[{n}] = *reinterpret_cast<{ty} (*)[{n}]>"
                             f"({shared_memory.DYNAMIC_ARRAY} + {at});")
            else:
                self.emit(1, f"__shared__ __align__({align[buf]}) {ty} {self.name(buf)}[{n}];")

    # statements ------------------------------------------------------------------------
    def stmt(self, s: Stmt, d: int) -> None:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise TargetError(f"the CUDA backend cannot generate a {type(s).__name__} statement here")
        method(s, d)

    def stmt_SeqStmt(self, s: SeqStmt, d: int) -> None:
        for x in s.seq:
            self.stmt(x, d)

    def stmt_Evaluate(self, s: Evaluate, d: int) -> None:
        v = s.value
        if isinstance(v, IntImm):
            return
        if isinstance(v, Call) and v.op == SYNC:
            self.emit(d, "__syncthreads();")
            return
        if isinstance(v, Call) and v.op == ALLREDUCE:
            self.allreduce(v, d)
            return
        self.emit(d, f"{self.expr(v)};")

    def stmt_For(self, s: For, d: int) -> None:
        var = self.name(s.loop_var)
        ty = self.type_of(s.loop_var.dtype)
        lo = self.expr(s.min)
        end = self.expr(s.extent if isinstance(s.min, IntImm) and s.min.value == 0 else s.min + s.extent)
        if s.kind == "unrolled":
            self.emit(d, "#pragma unroll")
        self.emit(d, f"for ({ty} {var} = {lo}; {var} < {end}; ++{var}) {{")
        self.k.ranges[s.loop_var] = Range(s.min, s.extent)
        self.stmt(s.body, d + 1)
        del self.k.ranges[s.loop_var]
        self.emit(d, "}")

    def stmt_IfThenElse(self, s: IfThenElse, d: int) -> None:
        self.emit(d, f"if ({_strip(self.expr(s.condition))}) {{")
        self.stmt(s.then_case, d + 1)
        if s.else_case is not None:
            self.emit(d, "} else {")
            self.stmt(s.else_case, d + 1)
        self.emit(d, "}")

    def stmt_LetStmt(self, s: LetStmt, d: int) -> None:
        var = self.name(s.var)
        dt = s.value.dtype
        if dt.lanes == 1:
            self.emit(d, f"const {self.type_of(dt)} {var} = {_strip(self.expr(s.value))};")
        else:
            lanes = self.lanes(s.value, d)
            self.emit(d, f"{self.type_of(dt)} {var}[{dt.lanes}] = {{{', '.join(lanes)}}};")
        self.stmt(s.body, d)

    def stmt_Allocate(self, s: Allocate, d: int) -> None:
        buf = s.buffer
        if buf.scope != "local":
            raise TargetError(f"buffer {buf.name!r}: scope {buf.scope!r} cannot be allocated here")
        self.emit(d, f"__align__(16) {self.type_of(buf.dtype)} {self.name(buf)}[{buf.shape[0].value}];")
        self.stmt(s.body, d)

    def stmt_BufferStore(self, s: BufferStore, d: int) -> None:
        buf = self.name(s.buffer)
        (index,) = s.indices
        if s.value.dtype.lanes == 1 and index.dtype.lanes == 1:
            self.emit(d, f"{buf}[{_strip(self.index(s.buffer, index))}] = {_strip(self.expr(s.value))};")
            return
        lanes = index.dtype.lanes
        vec = self.native_vector(s.buffer, index)
        self.emit(d, "{")
        values = self.lanes(s.value, d + 1)
        if vec is not None:
            tmp = self.fresh("vst")
            self.emit(d + 1, f"{vec} {tmp};")
            for k in range(lanes):
                self.emit(d + 1, f"{tmp}{_field(vec, k)} = {_strip(values[k])};")
            dst = f"({buf} + {_atom(self.index(s.buffer, index.base))})"
            if vec.startswith("tdsl_vec<"):   # stored as one integer vector (NVVM may split a struct's store)
                raw = _PACKED_RAW[s.buffer.dtype.itemsize * lanes]
                self.emit(d + 1, f"*({raw}*){dst} = *(const {raw}*)&{tmp};")
            else:
                self.emit(d + 1, f"*({vec}*){dst} = {tmp};")
        else:
            for k in range(lanes):
                self.emit(d + 1, f"{buf}[{_strip(self.index(s.buffer, self.lane_index(index, k)))}] = "
                                 f"{_strip(values[k])};")
        self.emit(d, "}")

    def allreduce(self, call: Call, d: int) -> None:
        """`tdsl_allreduce(op, acc, tx, E)`: every one of the E threadIdx.x threads gets the
        reduction of all their `acc` (see tdsl.lower.cross_thread)."""
        op_imm, acc, _tx, extent = call.args
        op, dt = op_imm.value, acc.dtype
        spec = self.k.spec
        dims = spec.dims("threadIdx")
        if not all(isinstance(e, IntImm) for e in dims) or not isinstance(extent, IntImm):
            raise TargetError(f"kernel {spec.name!r}: a cross-thread reduction needs constant thread-block dimensions")
        bx, by, bz = (e.value for e in dims)
        n = extent.value
        if n != bx:
            raise TargetError(f"kernel {spec.name!r}: a cross-thread reduction runs over {n} threads but the kernel "
                              f"launches threadIdx.x = {bx}; give every threadIdx.x loop of the kernel the extent {n} "
                              "(every thread of the block takes part)")
        total = bx * by * bz
        ty = self.type_of(dt)
        ref = self.expr(acc)
        v = self.fresh("red")

        def comb(a: str, b: str) -> str:
            return self.binary(op, dt, a, b, acc, acc)

        tx = "threadIdx.x"
        lin = "(" + " + ".join([tx] + ([f"threadIdx.y * {bx}"] if by > 1 else [])
                               + ([f"threadIdx.z * {bx * by}"] if bz > 1 else [])) + ")"
        if by == bz == 1:
            lin = tx
        # the group of threads reducing together: one per (threadIdx.y, threadIdx.z)
        group = "0" if total == n else f"({lin} / {n})"
        self.emit(d, f"{{  // all-reduce ({op}) over the {n} threads of threadIdx.x")
        d1 = d + 1
        self.emit(d1, f"{ty} {v} = {ref};")
        pow2 = n & (n - 1) == 0
        if total % 32 == 0 or total <= 32:
            mask = "0xffffffffu" if total >= 32 else f"{(1 << total) - 1:#x}u"
        else:
            mask = f"(({lin} | 31) < {total} ? 0xffffffffu : {(1 << (total % 32)) - 1:#x}u)"
        if pow2 and n <= 32:
            self.emit(d1, f"for (int tdsl_o = {n // 2}; tdsl_o > 0; tdsl_o >>= 1) {{")
            self.emit(d1 + 1, f"{v} = {comb(v, f'__shfl_xor_sync({mask}, {v}, tdsl_o, {n})')};")
            self.emit(d1, "}")
        else:
            groups = total // n
            if n % 32 == 0 and n // 32 <= 32:
                warps = n // 32
                buf = self.fresh("tdsl_red_smem")
                self.emit(d1, "for (int tdsl_o = 16; tdsl_o > 0; tdsl_o >>= 1) {")
                self.emit(d1 + 1, f"{v} = {comb(v, f'__shfl_xor_sync(0xffffffffu, {v}, tdsl_o, 32)')};")
                self.emit(d1, "}")
                self.emit(d1, f"__shared__ __align__(16) {ty} {buf}[{groups * warps}];")
                self.emit(d1, "__syncthreads();")
                self.emit(d1, f"if (({tx} & 31) == 0) {{")
                self.emit(d1 + 1, f"{buf}[{group} * {warps} + {tx} / 32] = {v};")
                self.emit(d1, "}")
                self.emit(d1, "__syncthreads();")
                self.emit(d1, f"{v} = {buf}[{group} * {warps}];")
                self.emit(d1, f"for (int tdsl_w = 1; tdsl_w < {warps}; ++tdsl_w) {{")
                self.emit(d1 + 1, f"{v} = {comb(v, f'{buf}[{group} * {warps} + tdsl_w]')};")
                self.emit(d1, "}")
            else:
                buf = self.fresh("tdsl_red_smem")
                self.emit(d1, f"__shared__ __align__(16) {ty} {buf}[{total}];")
                self.emit(d1, "__syncthreads();")
                self.emit(d1, f"{buf}[{lin}] = {v};")
                self.emit(d1, "__syncthreads();")
                self.emit(d1, f"{v} = {buf}[{group} * {n}];")
                self.emit(d1, f"for (int tdsl_w = 1; tdsl_w < {n}; ++tdsl_w) {{")
                self.emit(d1 + 1, f"{v} = {comb(v, f'{buf}[{group} * {n} + tdsl_w]')};")
                self.emit(d1, "}")
        self.emit(d1, f"{ref} = {v};")
        self.emit(d, "}")

    # vectors ------------------------------------------------------------------------------
    def native_vector(self, buf: Buffer, index: PrimExpr) -> str | None:
        """The CUDA vector type for a contiguous, provably aligned access, else None."""
        if not isinstance(index, Ramp) or not (isinstance(index.stride, IntImm) and index.stride.value == 1):
            return None
        element = str(buf.dtype.element)
        vec = _VECTOR_TYPES.get((element, index.lanes))
        if vec is None and element in _PACKED_TYPES and buf.dtype.itemsize * index.lanes in _PACKED_BYTES:
            self.helpers.add("vec")
            vec = f"tdsl_vec<{self.type_of(buf.dtype.element)}, {index.lanes}>"
        if vec is None:
            return None
        from ...arith import prove

        if not prove((index.base % index.lanes).eq(0), self.k.ranges or None):
            return None
        if buf in self.k.spec.params:
            self.vector_params[self.k.spec.name].add(buf.name)
        return vec

    def lanes(self, value: PrimExpr, d: int) -> list[str]:
        """C expressions for each lane of `value`; vector loads outside lazy branches are
        hoisted into native vector temporaries first."""
        hoisted: dict[BufferLoad, tuple[str, str]] = {}
        for load in _eager_vector_loads(value):
            vec = self.native_vector(load.buffer, load.indices[0])
            if vec is None:
                continue
            tmp = self.fresh("vld")
            ptr = f"({self.name(load.buffer)} + {_atom(self.index(load.buffer, load.indices[0].base))})"
            self.emit(d, f"const {vec} {tmp} = *(const {vec}*){ptr};")
            hoisted[load] = (tmp, vec)
        return [self.lane(value, k, hoisted) for k in range(value.dtype.lanes)]

    def lane_index(self, index: PrimExpr, k: int) -> PrimExpr:
        if isinstance(index, Ramp):
            from ...arith import simplify

            return simplify(index.base + index.stride * k) if k else index.base
        if isinstance(index, Broadcast):
            return index.value
        raise TargetError(f"unsupported vector index {type(index).__name__}")

    def lane(self, e: PrimExpr, k: int, hoisted: dict) -> str:
        """Lane `k` of a (possibly scalar) expression."""
        if e.dtype.lanes == 1:
            return self.expr(e)
        if isinstance(e, Ramp):
            return self.expr(self.lane_index(e, k))
        if isinstance(e, Broadcast):
            return self.expr(e.value)
        if isinstance(e, Var):
            return f"{self.name(e)}[{k}]"
        if isinstance(e, BufferLoad):
            if e in hoisted:
                tmp, vec = hoisted[e]
                return f"{tmp}{_field(vec, k)}"
            return f"{self.name(e.buffer)}[{_strip(self.index(e.buffer, self.lane_index(e.indices[0], k)))}]"
        sub = lambda x: self.lane(x, k, hoisted)
        if isinstance(e, Binary):
            return self.binary(e.op, e.a.dtype.element, sub(e.a), sub(e.b), e.a, e.b)
        if isinstance(e, Not):
            return f"!{_atom(sub(e.a))}"
        if isinstance(e, Select):
            return f"({sub(e.condition)} ? {sub(e.true_value)} : {sub(e.false_value)})"
        if isinstance(e, Cast):
            return self.cast(e.dtype.element, e.value.dtype.element, sub(e.value))
        if isinstance(e, Call):
            if e.op == "if_then_else":
                c, t, f = e.args
                return f"({sub(c)} ? {sub(t)} : {sub(f)})"
            if e.op == INDEX_CHECK:
                return self.index_check(e, sub(e.args[0]))
            return self.call(e.op, e.args[0].dtype.element, [sub(a) for a in e.args], e.dtype.element)
        raise TargetError(f"the CUDA backend cannot generate a vector {type(e).__name__}")

    # expressions -----------------------------------------------------------------------
    def index(self, buf: Buffer, index: PrimExpr) -> str:
        return self.expr(widen(index) if needs_int64(buf) else index)

    def expr(self, e: PrimExpr) -> str:
        if e.dtype.lanes != 1:
            raise TargetError(f"unexpected vector value ({e.dtype}) outside a vector store")
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            raise TargetError(f"the CUDA backend cannot generate a {type(e).__name__} expression")
        return method(e)

    def expr_Var(self, e: Var) -> str:
        return self.name(e)

    def expr_IntImm(self, e: IntImm) -> str:
        dt, v = e.dtype, e.value
        if dt.is_bool:
            return "true" if v else "false"
        if dt == int32:
            return str(v) if v >= 0 else f"({v})"
        if dt == int64:
            return f"{v}LL" if v >= 0 else f"({v}LL)"
        if dt.is_uint and dt.bits >= 32:
            return f"{v}U" if dt.bits == 32 else f"{v}ULL"
        return f"({c_type(dt)}){v}"

    def expr_FloatImm(self, e: FloatImm) -> str:
        return self.float_const(e.value, e.dtype)

    def float_const(self, v: float, dt: DataType) -> str:
        import math

        if dt.bits == 64:
            if math.isnan(v):
                return "__longlong_as_double(0x7ff8000000000000LL)"
            if math.isinf(v):
                return f"{'-' if v < 0 else ''}__longlong_as_double(0x7ff0000000000000LL)"
            return f"({v!r})" if v < 0 else repr(v)
        if math.isnan(v):
            f32 = "__int_as_float(0x7fc00000)"
        elif math.isinf(v):
            f32 = f"{'-' if v < 0 else ''}__int_as_float(0x7f800000)"
        else:
            f32 = f"({v!r}f)" if v < 0 or repr(v).startswith("-") else f"{v!r}f"
        if dt.bits == 32 and dt.code == "float":
            return f32
        if dt.bits == 16 and not (math.isnan(v) or math.isinf(v)):
            # rounded once here (the float32 text of the rounded value is exact), not twice
            import numpy as np

            return self.cast(dt.element, DataType("float", 32),
                             self.float_const(float(np.asarray(v, np.float64).astype(dt.numpy)), DataType("float", 32)))
        return self.cast(dt.element, DataType("float", 32), f32)

    def expr_StringImm(self, e: StringImm) -> str:
        return '"' + e.value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    def expr_Binary(self, e: Binary) -> str:
        return self.binary(e.op, e.a.dtype.element, self.expr(e.a), self.expr(e.b), e.a, e.b)

    def binary(self, op: str, dt: DataType, a: str, b: str, ea: PrimExpr, eb: PrimExpr) -> str:
        half = dt.is_float and dt.bits == 16
        if op in ("min", "max"):
            if half:
                return f"__h{op}_nan({a}, {b})"
            if dt.is_float:
                self.helpers.add(f"f{op}")
                return f"tdsl_f{op}({a}, {b})"
            if dt.is_bool:
                return _infix(a, "&&" if op == "min" else "||", b)
            return f"{op}({a}, {b})"
        if op in ("floordiv", "floormod"):
            if dt.is_float:
                q = f"{_MATH['floor'] if dt.bits == 32 else 'floor'}({_infix(a, '/', b)})"
                if half:
                    q = self.cast(dt, DataType("float", 32), f"floorf({self.cast(DataType('float', 32), dt, a)} / "
                                                            f"{self.cast(DataType('float', 32), dt, b)})")
                return q if op == "floordiv" else _infix(a, "-", _infix(q, "*", b))
            if dt.is_uint or self.nonnegative(ea, eb):
                return _infix(a, "/" if op == "floordiv" else "%", b)
            self.helpers.add(op)
            return f"tdsl_{op}({a}, {b})"
        if op in BITWISE_OPS:
            return self.bitwise(op, dt, a, b, eb)
        code = _infix(a, _BINOPS[op], b)
        if dt.is_integer and dt.bits < 32 and op in ("add", "sub", "mul", "div"):
            # C computes in int: wrap back to the narrow type as tdsl's semantics do
            return f"({c_type(dt)})({code})"
        return code

    def bitwise(self, op: str, dt: DataType, a: str, b: str, eb: PrimExpr) -> str:
        """& | ^ << >> as tdsl defines them: `<<` computed unsigned (no signed overflow in C++),
        `>>` arithmetic on signed types (as nvcc and g++ compile it), the amount taken modulo
        the bit width; a narrow type's result converted back to it."""
        if dt.is_bool:
            return f"{_atom(a)} {({'bitwise_and': '&&', 'bitwise_or': '||', 'bitwise_xor': '!='})[op]} {_atom(b)}"
        ctype = c_type(dt)
        if op in SHIFT_OPS and not self.shift_in_range(eb, dt):
            b = f"{_atom(b)} & {dt.bits - 1}"
        if op == "shift_left":
            unsigned = "unsigned long long" if dt.bits == 64 else "unsigned int"
            return f"(({ctype})(({unsigned})({a}) << {_atom(b)}))"
        # operands in parentheses: C's & | ^ binding looser than == trips readers (and -Wparentheses)
        code = f"{_atom(a)} {BIT_SYMBOLS[op]} {_atom(b)}"
        return f"(({ctype})({code}))" if dt.bits < 32 else code

    def shift_in_range(self, amount: PrimExpr, dt: DataType) -> bool:
        """The shift amount provably lies in [0, bits): no mask needed."""
        from ...arith import const_bound

        amount = amount.value if isinstance(amount, Broadcast) else amount
        if isinstance(amount, IntImm):
            return shift_in_range(amount.value, dt)
        if amount.dtype.lanes != 1:
            return False
        lo, hi = const_bound(amount, self.k.ranges or None)
        return lo is not None and hi is not None and lo >= 0 and hi < dt.bits

    def nonnegative(self, a: PrimExpr, b: PrimExpr) -> bool:
        from ...arith import const_bound

        if a.dtype.lanes != 1:
            return False
        lo_a, hi_a = const_bound(a, self.k.ranges or None)
        lo_b, _ = const_bound(b, self.k.ranges or None)
        # the bounds assume no overflow: a dividend that may pass its type's maximum may wrap negative
        top = (1 << (a.dtype.bits - 1)) - 1 if a.dtype.is_int else None
        fits = top is None or (hi_a is not None and hi_a <= top)
        return lo_a is not None and lo_a >= 0 and fits and lo_b is not None and lo_b > 0

    def expr_Not(self, e: Not) -> str:
        return f"!{_atom(self.expr(e.a))}"

    def expr_Select(self, e: Select) -> str:
        return f"({self.expr(e.condition)} ? {self.expr(e.true_value)} : {self.expr(e.false_value)})"

    def expr_Cast(self, e: Cast) -> str:
        return self.cast(e.dtype, e.value.dtype, self.expr(e.value))

    def cast(self, dst: DataType, src: DataType, x: str) -> str:
        if dst == src:
            return x
        f32 = DataType("float", 32)
        if src.code == "float" and src.bits == 16:
            self.fp16 = True
            return self.cast(dst, f32, f"__half2float({x})")
        if src.code == "bfloat":
            self.bf16 = True
            return self.cast(dst, f32, f"__bfloat162float({x})")
        if dst.code == "float" and dst.bits == 16:
            self.fp16 = True
            if str(src) in _ROUND_ONCE:   # one rounding, not two through float
                return f"{_ROUND_ONCE[str(src)].format('half')}({x})"
            return f"__float2half_rn({self.cast(f32, src, x)})"
        if dst.code == "bfloat":
            self.bf16 = True
            if str(src) in _ROUND_ONCE:
                return f"{_ROUND_ONCE[str(src)].format('bfloat16')}({x})"
            return f"__float2bfloat16_rn({self.cast(f32, src, x)})"
        if dst.is_bool:
            return f"({_infix(x, '!=', '0')})"
        return f"({c_type(dst)}){_atom(x)}"

    def expr_Call(self, e: Call) -> str:
        if e.op == "if_then_else":
            c, t, f = e.args
            return f"({self.expr(c)} ? {self.expr(t)} : {self.expr(f)})"
        if e.op == SYNC:
            return "__syncthreads()"
        if e.op == INDEX_CHECK:
            return self.index_check(e, self.expr(e.args[0]))
        if e.op in WMMA_BUILTINS:
            raise TargetError(wmma_refusal(e.op, "the CUDA backend cannot compile it"))
        if e.op in ASYNC_CALLS:
            return self.async_call(e)
        if e.op in HOPPER_CALLS:
            return self.hopper_call(e)
        args = [self.expr(a) for a in e.args]
        if e.op not in _MATH and e.op != "sigmoid":
            return f"{e.op}({', '.join(args)})"
        return self.call(e.op, e.args[0].dtype.element, args, e.dtype.element)

    def async_call(self, e: Call) -> str:
        """T.ptx_cp_async(dst, src, bytes) / T.ptx_commit_group() / T.ptx_wait_group(n): the cp.async
        device functions (the helper "cp_async")."""
        self.helpers.add("cp_async")
        if e.op == COMMIT_GROUP:
            return "tdsl_cp_async_commit()"
        if e.op == WAIT_GROUP:
            return f"tdsl_cp_async_wait<{self.expr(e.args[0])}>()"
        dst, src, nbytes = e.args
        fn = "tdsl_cp_async_cg16" if nbytes.value == 16 else f"tdsl_cp_async_ca<{nbytes.value}>"
        return f"{fn}(&{self.expr(dst)}, &{self.expr(src)})"

    def hopper_call(self, e: Call) -> str:
        """T.ptx_*_barrier / T.ptx_fence_proxy_async / T.ptx_tma_load: the device functions of
        tdsl.backends.cuda.sm90 (the helper "sm90"), barriers and buffers by address."""
        self.helpers.add("sm90")
        if e.op == FENCE_PROXY_ASYNC:
            return "tdsl_ptx_fence_proxy_async()"
        if e.op in (WGMMA_FENCE, WGMMA_COMMIT_GROUP):
            return f"tdsl_{e.op}()"
        if e.op == WGMMA_WAIT_GROUP:
            return f"tdsl_ptx_wgmma_wait_group<{self.expr(e.args[0])}>()"
        if e.op == SETMAXNREG:   # (the arch check refuses it for all but sm_90a)
            inc, count = e.args
            return f"tdsl_ptx_setmaxnreg_{'inc' if inc.value else 'dec'}<{count.value}>()"
        if e.op == WGMMA:   # K-major tiles, rows a swizzle span: descriptor swizzle code, 8-row groups apart
            d, a, b, n, _, span = e.args[:6]
            dt = "bf16" if a.buffer.dtype == bfloat16 else "f16"
            code = {128: 1, 64: 2, 32: 3}
            desc_a = f"tdsl_ptx_wgmma_desc(&{self.expr(a)}, 16, {8 * span.value}, {code[span.value]})"
            mn = wgmma_b_mn(e)
            if mn is None:
                self.wgmma_shapes.add((n.value, dt))
                desc_b = f"tdsl_ptx_wgmma_desc(&{self.expr(b)}, 16, {8 * span.value}, {code[span.value]})"
                return f"{sm90.wgmma_name(n.value, dt)}(&{self.expr(d)}, {desc_a}, {desc_b}, 1)"
            # B N-major: LBO from one box of columns (a swizzle atom's width) to the next, SBO from one
            # group of 8 K rows to the next (8 rows of the span)
            row_bytes, box_stride = mn
            self.wgmma_shapes.add((n.value, dt, "mn"))
            desc_b = f"tdsl_ptx_wgmma_desc(&{self.expr(b)}, {box_stride}, {8 * row_bytes}, {code[row_bytes]})"
            return f"{sm90.wgmma_name(n.value, dt, 'mn')}(&{self.expr(d)}, {desc_a}, {desc_b}, 1)"
        if e.op == TMA_LOAD:
            dst, _, tmap, bar, *coords = e.args
            xs = ", ".join(_strip(self.expr(c)) for c in reversed(coords))   # innermost first
            return (f"tdsl_ptx_tma_load_{len(coords)}d(&{self.expr(dst)}, &{self.expr(tmap)}, {xs}, "
                    f"&{self.expr(bar)})")
        if e.op == TMA_STORE:   # issued, committed and waited for (the box has left shared memory)
            _, src, tmap, *coords = e.args
            xs = ", ".join(_strip(self.expr(c)) for c in reversed(coords))   # innermost first
            return (f"(tdsl_ptx_tma_store_{len(coords)}d(&{self.expr(tmap)}, {xs}, &{self.expr(src)}), "
                    "tdsl_ptx_bulk_commit_group(), tdsl_ptx_bulk_wait_group<0>())")
        fn = {MBARRIER_INIT: "init", MBARRIER_ARRIVE: "arrive", MBARRIER_ARRIVE_EXPECT_TX: "arrive_expect_tx",
              MBARRIER_WAIT: "wait"}[e.op]
        rest = "".join(f", {_strip(self.expr(a))}" for a in e.args[1:])
        return f"tdsl_ptx_mbarrier_{fn}(&{self.expr(e.args[0])}{rest})"

    def index_check(self, e: Call, index: str) -> str:
        """`tdsl.index_check(index, extent, "A", axis)` (only in the emulator's checked variant,
        see lower_for_cuda): `tdsl_emu_check`, which the emulator's header defines."""
        _, extent, buf, axis = e.args
        return f"tdsl_emu_check({_strip(index)}, {_strip(self.expr(extent))}, {self.expr(buf)}, {self.expr(axis)})"

    def call(self, op: str, dt: DataType, args: list[str], out: DataType) -> str:
        if dt.is_integer or dt.is_bool:
            if op == "abs":
                return f"llabs({args[0]})" if dt.bits == 64 else self.cast(dt, int32, f"abs({args[0]})")
            if op in ("floor", "ceil", "round", "trunc"):
                return args[0]
            raise TargetError(f"math function {op} needs a float argument, got {dt}")
        if dt.bits == 16:  # half / bfloat16: compute in float
            f32 = DataType("float", 32)
            return self.cast(out, f32, self.call(op, f32, [self.cast(f32, dt, a) for a in args], f32))
        suffix_f = dt.bits == 32
        if op == "sigmoid":
            one = "1.0f" if suffix_f else "1.0"
            return f"({one} / ({one} + {'expf' if suffix_f else 'exp'}(-{_atom(args[0])})))"
        name = _MATH[op] if suffix_f else _MATH[op][:-1]
        return f"{name}({', '.join(args)})"

    def expr_BufferLoad(self, e: BufferLoad) -> str:
        return f"{self.name(e.buffer)}[{_strip(self.index(e.buffer, e.indices[0]))}]"

    def expr_Ramp(self, e: Ramp) -> str:
        raise TargetError("a vector index outside a vector load/store")

    expr_Broadcast = expr_Ramp


def _eager_vector_loads(e: PrimExpr) -> list[BufferLoad]:
    """Vector loads in `e` that are always evaluated (not inside a lazy if_then_else branch)."""
    out: list[BufferLoad] = []

    def walk(x) -> None:
        if isinstance(x, BufferLoad):
            if x.dtype.lanes > 1 and x not in out:
                out.append(x)
            return
        if isinstance(x, Call) and x.op == "if_then_else":
            walk(x.args[0])
            return
        from ...ir import node_fields

        for f in node_fields(type(x)):
            v = getattr(x, f)
            if isinstance(v, PrimExpr):
                walk(v)
            elif isinstance(v, tuple):
                for item in v:
                    if isinstance(item, PrimExpr):
                        walk(item)

    walk(e)
    return out


def generate(plan: HostPlan) -> tuple[str, dict[str, set[str]]]:
    """(CUDA C++ source, {kernel name: names of parameters accessed with vector instructions})."""
    gen = CudaCodegen(plan)
    return gen.generate(), gen.vector_params
