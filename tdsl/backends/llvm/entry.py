"""The entry points of a CPU kernel and `codegen()`, which emits them around the kernel body.

* `<sym>_raw(ptr noalias A, ..., scalars, i64 dims...) -> i32`: the kernel on raw pointers.
  Integer and bool scalars arrive as i64, floats as double; symbolic dimensions as i64.
* `<sym>(ptr objA, ..., scalars) -> i32`: the fast entry Kernel calls with the numpy arrays
  themselves (ctypes `py_object`). It checks type, dtype, shape, flags and overlap by reading
  the ndarray struct (offsets in `abi`) and returns -1 when anything is unusual, so the Python
  side re-checks slowly with clear messages and calls `_raw`. It never writes to the objects.
* `<sym>_tuple(ptr tuple) -> i32`: the fast entry taking one tuple of arrays (kernels without
  scalar parameters).

The kernel body itself is emitted by `codegen._Emitter`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from ...dtypes import DataType
from ...errors import TargetError
from ...ir import (
    Allocate,
    Binary,
    Buffer,
    BufferStore,
    Cast,
    For,
    IfThenElse,
    IntImm,
    LetStmt,
    PrimExpr,
    PrimFunc,
    SeqStmt,
    Stmt,
    Var,
)
from ...ir.attrs import NONTEMPORAL_BUFFERS
from ...ir.tree import walk
from ...script.printer import message_text as expr_text
from .abi import (
    ERR_SLOW,
    ND_DATA,
    ND_DESCR,
    ND_DIMS,
    ND_FLAGS,
    ND_NDIM,
    NPY_ALIGNED,
    NPY_C_CONTIGUOUS,
    NPY_WRITEABLE,
    OB_TYPE,
    TUPLE_ITEMS,
)
from .codegen import ENTRY_ATTRIBUTES, _Emitter, _Module, _used_vars_and_buffers
from .lltypes import F64, I8, I32, I64, PTR, _gep, lltype
from .split import HUGE_BODY, PART_SIZE


@dataclass
class ParamInfo:
    """What the Kernel needs to know about one parameter."""

    name: str
    kind: str                    # "buffer" or "scalar"
    dtype: str
    shape: list                  # ints and dimension names (buffers)
    written: bool = False


@dataclass
class CodegenResult:
    ir: str
    symbol: str
    raw_symbol: str
    ctx_symbol: str
    params: list[ParamInfo]
    dims: list[str]              # symbolic dimension names, in the raw entry's order
    checks: list[dict]           # bounds check k (1-based) -> {"buffer", "param", "index", "extent"}
    parallel: bool
    descr_dtypes: list[str]      # ctx[2 + k] holds numpy's descriptor of descr_dtypes[k]
    tuple_symbol: str = ""       # the entry taking one tuple of arrays (kernels without scalars)
    dim_sources: list = field(default_factory=list)   # per dim: [param index, axis] (axis -1: a scalar)
    parts: int = 0               # functions a huge body was split into (split.py); 0: not split
    size: int = 0                # the body's estimated size (split.Sizes)


def _dims_of(func: PrimFunc) -> list[Var]:
    """Symbolic dimensions: Vars in parameter buffer shapes that are not scalar parameters."""
    scalars = {p for p in func.params if isinstance(p, Var)}
    seen: dict[str, Var] = {}
    for p in func.params:
        if isinstance(p, Buffer):
            for s in p.shape:
                for v, _ in ((v, None) for v in _used_vars_and_buffers(s)[0]):
                    if v not in scalars and v.name not in seen:
                        seen[v.name] = v
    return list(seen.values())


def _written_buffers(func: PrimFunc) -> set:
    """The buffers stored to (stores are statements: the walk skips expressions)."""
    return {s.buffer for s in walk(func.body) if isinstance(s, BufferStore)}


def codegen(lowered: PrimFunc, symbol: str, api: PrimFunc | None = None, bounds_check: bool = False,
            triple: str = "", datalayout: str = "", wrappers_optnone: bool = False,
            split_size: int | None = PART_SIZE) -> CodegenResult:
    """Compile a lowered PrimFunc to an LLVM module (text) with the two entry points.

    `api` is the function as the user wrote it (n-d parameter shapes, checked by the fast
    entry); it defaults to `lowered`. Parameters correspond by position. `wrappers_optnone`
    compiles the parallel loops' wrappers as written, like the entries (for pipelines without
    an inliner, jit.SIMPLIFY, which keep them apart from the loop bodies anyway; with one, the
    inliner folds each body into its wrapper instead). With the tuple entry and a launch-only
    raw function also optnone, bench's GEMM, conv2d and softmax builds spend ~3-5 ms less CPU in
    LLVM, the loop bodies' machine code unchanged. In a body estimated past split.HUGE_BODY
    IR nodes, a top-level statement sequence becomes calls to functions of about `split_size`
    nodes (split.py; None: one function however big).
    """
    api = api or lowered
    if len(api.params) != len(lowered.params):
        raise TargetError(f"internal error: lowering changed the parameters of {api.name!r}")
    module = ir.Module(name=symbol)
    module.triple = triple
    module.data_layout = datalayout
    dims = _dims_of(lowered)
    api_dim_names = {v.name for v in _dims_of(api)} | {p.name for p in api.params if isinstance(p, Var)}
    for d in dims:
        if d.name not in api_dim_names:
            raise TargetError(f"symbolic dimension {d.name!r} of {api.name!r} is not bound by any parameter")

    written = _written_buffers(lowered)
    api_written = _written_buffers(api) if api is not lowered else written
    params: list[ParamInfo] = []
    descr_dtypes: list[str] = []
    for p_api, p in zip(api.params, lowered.params):
        if isinstance(p, Buffer):
            shape = [int(s.value) if isinstance(s, IntImm) else s.name if isinstance(s, Var) else expr_text(s)
                     for s in p_api.shape]  # type: ignore[union-attr]
            # a buffer the user's code stores to is written even where lowering replaced those
            # stores by a library call that writes through a pointer (tdsl.intrinsics.blas)
            params.append(ParamInfo(p_api.name, "buffer", str(p.dtype), shape,
                                    p in written or p_api in api_written))
            if str(p.dtype) not in descr_dtypes:
                descr_dtypes.append(str(p.dtype))
        else:
            params.append(ParamInfo(p_api.name, "scalar", str(p.dtype), []))

    ctx_ty = ir.ArrayType(I64, 2 + len(descr_dtypes))
    ctx = ir.GlobalVariable(module, ctx_ty, f"{symbol}_ctx")
    ctx.initializer = ir.Constant(ctx_ty, None)
    ctx.align = 64
    m = _Module(module, symbol, bounds_check, ctx)
    m.param_index = {p: i for i, p in enumerate(lowered.params) if isinstance(p, Buffer)}
    m.nontemporal = frozenset(dict(lowered.attrs).get(NONTEMPORAL_BUFFERS, ()))
    m.wrappers_optnone = wrappers_optnone
    m.split_size = split_size if split_size is not None and m.sizes(lowered.body) > HUGE_BODY else None

    raw = _emit_raw(m, lowered, dims)
    fast = _emit_fast(m, api, lowered, params, dims, descr_dtypes, raw)
    if all(isinstance(p, Buffer) for p in lowered.params):
        _emit_tuple_entry(m, fast, len(lowered.params))
    tuple_symbol = f"{symbol}_tuple" if all(isinstance(p, Buffer) for p in lowered.params) else ""
    return CodegenResult(str(module), symbol, f"{symbol}_raw", f"{symbol}_ctx", params, [d.name for d in dims],
                         m.checks, m.parallel, descr_dtypes, tuple_symbol, _dim_sources(api, dims),
                         m.n_parts, m.sizes(lowered.body))


def _dim_sources(api: PrimFunc, dims: list[Var]) -> list[list[int]]:
    """Where each symbolic dimension's value comes from, by position (names may differ between
    alpha-equivalent functions that share this machine code)."""
    out = []
    for d in dims:
        for i, p in enumerate(api.params):
            if isinstance(p, Var) and p.name == d.name:
                out.append([i, -1])
                break
            if isinstance(p, Buffer):
                axis = next((k for k, s in enumerate(p.shape) if isinstance(s, Var) and s.name == d.name), None)
                if axis is not None:
                    out.append([i, axis])
                    break
        else:
            raise TargetError(f"symbolic dimension {d.name!r} of {api.name!r} is not a dimension of any parameter")
    return out


def _scalar_abi(dt: DataType) -> ir.Type:
    return F64 if dt.is_float else I64


def _emit_raw(m: _Module, func: PrimFunc, dims: list[Var]) -> ir.Function:
    arg_tys = []
    for p in func.params:
        arg_tys.append(PTR if isinstance(p, Buffer) else _scalar_abi(p.dtype))
    arg_tys += [I64] * len(dims)
    fn = ir.Function(m.module, ir.FunctionType(I32, arg_tys), f"{m.symbol}_raw")
    em = _Emitter(m, fn, in_parallel=False)
    b = em.b
    for d, a in zip(dims, fn.args[len(func.params):]):
        a.name = f"dim_{d.name}"
        em.env[d] = em.cast_int(a, d.dtype) if not d.dtype.is_float else b.sitofp(a, lltype(d.dtype))
    scalar_args = []
    for p, a in zip(func.params, fn.args):
        a.name = p.name
        if isinstance(p, Var):
            scalar_args.append((p, a))
    for p, a in scalar_args:
        dt = p.dtype
        if dt.is_float:
            v = a
            if dt.code == "bfloat":
                v = em.bf16_round(em._to_f32_round_to_odd(a))
            elif dt.bits == 16:
                v = b.fptrunc(em._to_f32_round_to_odd(a), lltype(dt))
            elif dt.bits < 64:
                v = b.fptrunc(a, lltype(dt))
            em.env[p] = v
        elif dt.is_bool:
            em.env[p] = b.icmp_unsigned("!=", a, ir.Constant(I64, 0))
        else:
            em.env[p] = em.cast_int(a, dt)
    for p, a in zip(func.params, fn.args):
        if isinstance(p, Buffer):
            a.add_attribute("noalias")
            em.bufs[p] = (a, em.extent_of(p))
    em.stmt(func.body)
    em.finish()
    fn.attributes.add("nounwind")
    if _only_launches(func.body):
        # allocates and launches parallel loops (outlined): nothing for LLVM to speed up here
        for attr in ENTRY_ATTRIBUTES:
            fn.attributes.add(attr)
    return fn


def _only_launches(stmt: Stmt) -> bool:
    """Whether all the work of `stmt` is in parallel loops (outlined into functions of their
    own): outside them only allocations, lets, ifs and sequences, no store, call or other loop
    (a serial loop, or one the unroll pass expanded into stores, is code worth optimising)."""
    for node in walk(stmt, descend=lambda s: not isinstance(s, For)):
        if isinstance(node, For):
            if node.kind != "parallel":
                return False
        elif not isinstance(node, (SeqStmt, IfThenElse, LetStmt, Allocate)):
            return False
    return True


def _emit_fast(m: _Module, api: PrimFunc, lowered: PrimFunc, params: list[ParamInfo], dims: list[Var],
               descr_dtypes: list[str], raw: ir.Function) -> ir.Function:
    """The entry taking numpy arrays: validate cheaply, else return -1 for the slow path."""
    arg_tys = [PTR if isinstance(p, Buffer) else _scalar_abi(p.dtype) for p in lowered.params]
    fn = ir.Function(m.module, ir.FunctionType(I32, arg_tys), m.symbol)
    for attr in ENTRY_ATTRIBUTES:
        fn.attributes.add(attr)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    slow = fn.append_basic_block("slow")
    ir.IRBuilder(slow).ret(ir.Constant(I32, ERR_SLOW))

    def require(cond):
        ok = fn.append_basic_block("ok")
        b.cbranch(cond, ok, slow)
        b.position_at_end(ok)

    def field(obj, offset, ty):
        return b.load(_gep(b, obj, [ir.Constant(I64, offset)], I8), typ=ty)

    def ctx(i):
        return b.load(_gep(b, m.ctx, [ir.Constant(I64, i)], I64), typ=I64)

    bound: dict[str, ir.Value] = {}
    for p, a in zip(lowered.params, fn.args):
        if isinstance(p, Var):
            bound[p.name] = a   # a scalar parameter may size a buffer
    nd_type = ctx(1)
    datas, sizes = [], []
    pending = []   # (dimension value, shape expr) checked once every name is bound
    for i, (p_api, p, info) in enumerate(zip(api.params, lowered.params, params)):
        if not isinstance(p, Buffer):
            continue
        obj = fn.args[i]
        require(b.icmp_unsigned("==", b.ptrtoint(field(obj, OB_TYPE, PTR), I64), nd_type))
        require(b.icmp_unsigned("==", b.ptrtoint(field(obj, ND_DESCR, PTR), I64),
                                ctx(2 + descr_dtypes.index(info.dtype))))
        require(b.icmp_signed("==", field(obj, ND_NDIM, I32), ir.Constant(I32, len(p_api.shape))))  # type: ignore[union-attr]
        flags = field(obj, ND_FLAGS, I32)
        need = NPY_C_CONTIGUOUS | NPY_ALIGNED | (NPY_WRITEABLE if info.written else 0)
        require(b.icmp_unsigned("==", b.and_(flags, ir.Constant(I32, need)), ir.Constant(I32, need)))
        dims_ptr = field(obj, ND_DIMS, PTR)
        count = ir.Constant(I64, 1)
        for k, s in enumerate(p_api.shape):  # type: ignore[union-attr]
            d = b.load(_gep(b, dims_ptr, [ir.Constant(I64, k)], I64), typ=I64)
            count = b.mul(count, d)
            if isinstance(s, Var) and s.name not in bound:
                limit = (1 << (s.dtype.bits - 1)) - 1 if s.dtype.is_int else (1 << s.dtype.bits) - 1
                require(b.icmp_unsigned("<=", d, ir.Constant(I64, limit)))
                bound[s.name] = d
            else:
                pending.append((d, s))
        datas.append((i, field(obj, ND_DATA, PTR)))
        sizes.append((i, b.mul(count, ir.Constant(I64, p.dtype.itemsize)), info.written))
    for d, s in pending:
        require(b.icmp_signed("==", d, _fast_shape_value(b, s, bound)))
    # an output must not overlap any other array (noalias): such calls go the slow way
    starts = {i: b.ptrtoint(ptr, I64) for i, ptr in datas}
    for i, size_i, w_i in sizes:
        for j, size_j, w_j in sizes:
            if j <= i or not (w_i or w_j):
                continue
            lo_i, lo_j = starts[i], starts[j]
            overlap = b.and_(b.icmp_unsigned("<", lo_i, b.add(lo_j, size_j)),
                             b.icmp_unsigned("<", lo_j, b.add(lo_i, size_i)))
            nonempty = b.and_(b.icmp_unsigned("!=", size_i, ir.Constant(I64, 0)),
                              b.icmp_unsigned("!=", size_j, ir.Constant(I64, 0)))
            require(b.not_(b.and_(overlap, nonempty)))
    call_args = []
    data_by_index = dict(datas)
    for i, p in enumerate(lowered.params):
        call_args.append(data_by_index[i] if isinstance(p, Buffer) else fn.args[i])
    for d in dims:
        call_args.append(bound[d.name])
    b.ret(b.call(raw, call_args))
    return fn


def _emit_tuple_entry(m: _Module, fast: ir.Function, count: int) -> None:
    """`<sym>_tuple(args)`: the fast entry taking the Python tuple of arrays as one argument
    (one ctypes argument instead of several is what makes a call cheap)."""
    fn = ir.Function(m.module, ir.FunctionType(I32, [PTR]), f"{m.symbol}_tuple")
    for attr in ENTRY_ATTRIBUTES:   # loads and a call: nothing to optimise, and no copy of `fast`
        fn.attributes.add(attr)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    items = [b.load(_gep(b, fn.args[0], [ir.Constant(I64, TUPLE_ITEMS + 8 * k)], I8), typ=PTR) for k in range(count)]
    b.ret(b.call(fast, items))


def _fast_shape_value(b: ir.IRBuilder, s: PrimExpr, bound: dict[str, ir.Value]) -> ir.Value:
    """An expected dimension (a constant, a bound name, or arithmetic on them) as i64."""
    if isinstance(s, IntImm):
        return ir.Constant(I64, s.value)
    if isinstance(s, Var):
        return bound[s.name]
    if isinstance(s, Binary) and s.op in ("add", "sub", "mul"):
        x, y = _fast_shape_value(b, s.a, bound), _fast_shape_value(b, s.b, bound)
        return {"add": b.add, "sub": b.sub, "mul": b.mul}[s.op](x, y)
    if isinstance(s, Binary) and s.op in ("floordiv", "floormod"):
        x, y = _fast_shape_value(b, s.a, bound), _fast_shape_value(b, s.b, bound)
        zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)
        y = b.select(b.icmp_signed("==", y, zero), one, y)   # n // 0 never matches a shape (checked below)
        q, r = b.sdiv(x, y), b.srem(x, y)
        fix = b.and_(b.icmp_signed("!=", r, zero), b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero)))
        if s.op == "floordiv":
            return b.select(fix, b.sub(q, one), q)
        return b.select(fix, b.add(r, y), r)
    if isinstance(s, Cast):
        return _fast_shape_value(b, s.value, bound)
    raise TargetError(f"a parameter shape entry must be a constant, a name, or +, -, *, //, % of them, not "
                      f"{expr_text(s)}")


__all__ = ["CodegenResult", "ParamInfo", "codegen"]
