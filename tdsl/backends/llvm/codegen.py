"""Lowered PrimFunc -> LLVM IR (llvmlite.ir): the emitter of kernel bodies and outlined
parallel loops (`_Emitter`). The entry points around a body and `codegen()` are in `entry`,
the math functions in `mathlib`, LLVM types in `lltypes`.

Return codes: 0 ok, -1 "check slowly", -2 out of memory, k > 0 run-time bounds check k failed.

Process-specific addresses (the thread pool's launch function, numpy's ndarray type and dtype
descriptors) are never baked into the code, so the object code can be cached on disk: they
sit in the global `<sym>_ctx`, filled by the Kernel after loading.

Value representation in registers: bool is i1 (i8 in memory); bfloat16 is a float rounded to
bfloat16 after every operation (i16 in memory), which is what ml_dtypes computes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from llvmlite import ir

from ...dtypes import DataType, int64, void
from ...errors import TargetError
from ...ir import (
    MATH_CALLS,
    Allocate,
    Binary,
    Block,
    BlockRealize,
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
    LetStmt,
    Not,
    PrimExpr,
    Ramp,
    Select,
    SeqStmt,
    StringImm,
    Var,
    const,
    is_const,
)
from ...ir.expr import shift_in_range
from ...ir.functor import IRVisitor
from ...ir.opaque_calls import WMMA_BUILTINS, wmma_refusal
from ...script.printer import message_text as expr_text
from .abi import ERR_INTERRUPTED, ERR_NOMEM, ERR_TOO_MANY
from .lltypes import (
    BF16,
    F32,
    F64,
    I1,
    I8,
    I16,
    I32,
    I64,
    PTR,
    _Callee,
    _const,
    _gep,
    _size_of,
    _suffix,
    lltype,
    memtype,
)
from .mathlib import MathEmitter
from .split import UNROLL_LIMIT, Sizes, groups

STACK_LIMIT = 64 * 1024          # constant-size allocations up to this many bytes go on the stack

# The fast entry is straight-line checks already in SSA form: LLVM's pipeline has little to
# improve there, yet cost ~25% of every kernel's optimisation and emission time while the entry
# was inlined into the tuple entry (two copies, each with the raw function inlined). `optnone`
# compiles it as written, once (optnone requires noinline): ~20-30 ms less per build, and no
# measurable change in call overhead (docs/performance.md, "Build time").
ENTRY_ATTRIBUTES: tuple[str, ...] = ("noinline", "optnone")


class _LoadFinder(IRVisitor):
    """Counts loads and calls of unknown code (visitor classes live at module level: a class
    made per call would start with an empty dispatch table every time)."""

    def __init__(self):
        self.found = 0

    def visit_BufferLoad(self, n):
        self.found += 1

    def visit_Call(self, n):
        if n.op not in MATH_CALLS:
            self.found += 1
        self.generic_visit(n)


def _has_load(e) -> bool:
    """True when evaluating `e` may touch memory or call unknown code (not safe to speculate)."""
    finder = _LoadFinder()
    finder.visit(e)
    return finder.found > 0


class _UseCollector(IRVisitor):
    def __init__(self):
        self.vars: dict[Var, None] = {}
        self.bufs: dict[Buffer, None] = {}

    def visit_Var(self, v):
        self.vars[v] = None

    def visit_buffer(self, b):
        self.bufs[b] = None
        for s in b.shape:
            self.visit(s)


def _used_vars_and_buffers(node) -> tuple[list[Var], list[Buffer]]:
    uses = _UseCollector()
    uses.visit(node)
    return list(uses.vars), list(uses.bufs)


def lane_expr(e: PrimExpr, lane: int) -> PrimExpr:
    """The scalar expression computing lane `lane` of a vector expression."""
    from dataclasses import replace

    if e.dtype.lanes == 1:
        return e
    if isinstance(e, Ramp):
        return e.base + e.stride * lane if lane else e.base
    if isinstance(e, Broadcast):
        return e.value
    if isinstance(e, Binary):
        return Binary(e.op, lane_expr(e.a, lane), lane_expr(e.b, lane))
    if isinstance(e, Not):
        return Not(lane_expr(e.a, lane))
    if isinstance(e, Select):
        return Select(lane_expr(e.condition, lane), lane_expr(e.true_value, lane), lane_expr(e.false_value, lane))
    if isinstance(e, Cast):
        return Cast(e.dtype.element, lane_expr(e.value, lane))
    if isinstance(e, Call) and (e.op in MATH_CALLS or e.op == "if_then_else"):
        return Call(e.dtype.element, e.op, tuple(lane_expr(a, lane) for a in e.args))
    if isinstance(e, BufferLoad) and e.buffer.dtype.lanes == 1:
        return replace(e, indices=tuple(lane_expr(i, lane) for i in e.indices))
    raise TargetError(f"cannot split the vector expression {expr_text(e)} into lanes")


_BIT_BUILDERS = {"bitwise_and": "and_", "bitwise_or": "or_", "bitwise_xor": "xor"}
_INDEX_OPS = ("add", "sub", "mul", "floordiv", "floormod", "min", "max")


def _fold_index(op: str, a: ir.Value, c: ir.Value) -> ir.Value | None:
    """a op c for scalar i64 index terms when it needs no instruction (x * 1, x + 0, constants):
    flattened indices are full of them, and smaller IR parses and optimizes faster."""
    ka = a.constant if isinstance(a, ir.Constant) and a.type == I64 else None
    kc = c.constant if isinstance(c, ir.Constant) and c.type == I64 else None
    if ka is not None and kc is not None:
        value = ka + kc if op == "add" else ka - kc if op == "sub" else ka * kc
        return ir.Constant(I64, (value + 2 ** 63) % 2 ** 64 - 2 ** 63)
    if kc == 0 and op in ("add", "sub") or kc == 1 and op == "mul":
        return a
    if ka == 0 and op == "add" or ka == 1 and op == "mul":
        return c
    return None


_NULLS: dict[ir.Type, ir.Constant] = {}
_I32_ZERO = ir.Constant(I32, 0)


def _null(ty: ir.Type) -> ir.Constant:
    """The zero constant of `ty`, one object per type: llvmlite caches a constant's text on the
    object, and a vector of zeros spells out every lane."""
    c = _NULLS.get(ty)
    if c is None:
        c = _NULLS[ty] = ir.Constant(ty, None)
    return c


def _operand_key(v: ir.Value):
    """An operand in a `_pure` key: i64 constants by value (each use makes a new Constant),
    any other value by identity."""
    if isinstance(v, ir.Constant) and v.type == I64 and isinstance(v.constant, int):
        return ("i64", v.constant)
    return id(v)


def _widened(var: Var) -> bool:
    """int32 loop variables run as i64 induction variables (truncated where an int32 value is
    used): no sign extension of the variable in the loop, no widening left to LLVM."""
    return var.dtype.is_int and var.dtype.lanes == 1 and var.dtype.bits == 32


# ----------------------------------------------------------------------------- module context

@dataclass
class _Module:
    module: ir.Module
    symbol: str
    bounds_check: bool
    ctx: ir.GlobalVariable
    checks: list[dict] = field(default_factory=list)
    param_index: dict = field(default_factory=dict)
    n_outlined: int = 0
    parallel: bool = False
    nontemporal: frozenset = frozenset()   # names of buffers written with streaming stores
    wrappers_optnone: bool = False         # parallel loops' wrappers noinline optnone (codegen)
    split_size: int | None = None          # a sequence estimated past this becomes calls (split.py)
    n_parts: int = 0                       # functions made by outlined_call
    sizes: Sizes = field(default_factory=Sizes)

    def intrinsic(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """Declare (once) an intrinsic or extern function; vector overloads by their full name."""
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name)
        return fn

    def add_check(self, buffer: Buffer, index: PrimExpr, extent) -> int:
        self.checks.append({"buffer": buffer.name, "param": self.param_index.get(buffer),
                            "index": expr_text(index), "extent": expr_text(extent)})
        return len(self.checks)


class _Emitter(MathEmitter):
    """Emits one LLVM function: a kernel body or an outlined parallel loop body."""

    def __init__(self, mod: _Module, fn: ir.Function, in_parallel: bool):
        self.m = mod
        self.fn = fn
        self.in_parallel = in_parallel
        entry = fn.append_basic_block("entry")
        self.alloca_block = entry
        self.b = ir.IRBuilder(fn.append_basic_block("body"))
        self.env: dict[Var, ir.Value] = {}
        self.wide: dict[Var, ir.Value] = {}    # int32 loop variable -> its i64 value (see `_widened`)
        self.wide_range: dict[Var, tuple[int, int]] = {}   # widened variable -> constant bounds, if known
        self.bufs: dict[Buffer, tuple[ir.Value, ir.Value]] = {}   # buffer -> (pointer, extent as i64)
        self.heap: list[ir.Value] = []                               # live heap allocations
        # (block, operation, operands) -> (value, operands): index arithmetic and addresses
        # computed once per basic block (see `_pure`)
        self.cse: dict[tuple, tuple] = {}
        self.loop_depth = 0   # loops around the statement being emitted

    def finish(self) -> None:
        """Close the entry block (allocas) and return 0 from the body's end."""
        if not self.b.block.is_terminated:
            self._free_all()
            if self.m.nontemporal:
                self.b.fence("seq_cst")   # streaming stores are weakly ordered: drain them first
            self.b.ret(ir.Constant(I32, 0))
        ir.IRBuilder(self.alloca_block).branch(self.fn.blocks[1])

    def alloca(self, ty: ir.Type, count: int = 1, align: int = 64) -> ir.Value:
        b = ir.IRBuilder(self.alloca_block)
        slot = b.alloca(ty, size=ir.Constant(I64, count) if count != 1 else None)
        slot.align = align
        return slot

    # -- exits -----------------------------------------------------------------------------
    def _free_all(self) -> None:
        free = self.m.intrinsic("free", ir.VoidType(), [PTR])
        for p in reversed(self.heap):
            self.b.call(free, [p])

    def fail_if(self, cond: ir.Value, code: ir.Value | int) -> None:
        """Return `code` (freeing live heap buffers) when `cond` holds."""
        if isinstance(code, int):
            code = ir.Constant(I32, code)
        bad = self.fn.append_basic_block("fail")
        ok = self.fn.append_basic_block("ok")
        self.b.cbranch(cond, bad, ok)
        self.b.position_at_end(bad)
        self._free_all()
        self.b.ret(code)
        self.b.position_at_end(ok)

    # -- statements ------------------------------------------------------------------------
    def stmt(self, s) -> None:
        method = getattr(self, "s_" + type(s).__name__, None)
        if method is None:
            if isinstance(s, (Block, BlockRealize)):
                raise TargetError(f"the CPU code generator takes lowered IR, but found block "
                                  f"{getattr(s, 'name', None) or s.block.name!r}: call tdsl.lower first")
            raise TargetError(f"the CPU code generator cannot compile a {type(s).__name__} statement")
        method(s)

    def s_SeqStmt(self, s: SeqStmt) -> None:
        limit = self.m.split_size
        # only straight-line code runs once per call: a sequence inside a loop is never split
        if limit is None or self.loop_depth or self.in_parallel or len(s.seq) < 2 or self.m.sizes(s) <= limit:
            for x in s.seq:
                self.stmt(x)
            return
        for outline, run in groups(s.seq, self.m.sizes, limit):
            if outline:
                self.outlined_call(run[0] if len(run) == 1 else SeqStmt(tuple(run)))
            else:
                for x in run:
                    self.stmt(x)

    def outlined_call(self, s) -> None:
        """Emit `s` as an internal noinline function and call it here (a huge body cut into
        LLVM functions of bounded size, see split.py): the buffers (pointer and extent) and
        variables in scope that `s` uses are its arguments; its return code, when not 0 (a
        failed bounds check, out of memory), is returned from here too."""
        m = self.m
        k = m.n_parts
        m.n_parts += 1
        used_vars, used_bufs = _used_vars_and_buffers(s)
        vars_ = [v for v in used_vars if v in self.env or v in self.wide]
        bufs = [b for b in used_bufs if b in self.bufs]
        var_vals = [self.wide[v] if v in self.wide else self.env[v] for v in vars_]
        arg_tys = [PTR] * len(bufs) + [I64] * len(bufs) + [v.type for v in var_vals]
        part = ir.Function(m.module, ir.FunctionType(I32, arg_tys), f"{m.symbol}_part{k}")
        part.linkage = "internal"
        part.attributes.add("noinline")   # called once: the inliner would undo the split
        part.attributes.add("nounwind")
        for a in part.args[:len(bufs)]:
            a.add_attribute("noalias")
        sub = _Emitter(m, part, in_parallel=self.in_parallel)
        for i, b in enumerate(bufs):
            sub.bufs[b] = (part.args[i], part.args[len(bufs) + i])
        for i, v in enumerate(vars_):
            (sub.wide if v in self.wide else sub.env)[v] = part.args[2 * len(bufs) + i]
            if v in self.wide_range:
                sub.wide_range[v] = self.wide_range[v]
        sub.stmt(s)
        sub.finish()
        args = [self.bufs[b][0] for b in bufs] + [self.bufs[b][1] for b in bufs] + var_vals
        rc = self.b.call(part, args)
        self.fail_if(self.b.icmp_signed("!=", rc, ir.Constant(I32, 0)), rc)

    def s_Evaluate(self, s: Evaluate) -> None:
        if isinstance(s.value, (IntImm, FloatImm)):
            return
        self.expr(s.value)

    def s_LetStmt(self, s: LetStmt) -> None:
        self.env[s.var] = self.expr(s.value)
        self.stmt(s.body)
        del self.env[s.var]

    def s_IfThenElse(self, s: IfThenElse) -> None:
        cond = self.expr(s.condition)
        if isinstance(cond.type, ir.VectorType):
            raise TargetError(f"an if statement needs a scalar condition, not {expr_text(s.condition)}")
        if s.else_case is None:
            with self.b.if_then(cond):
                self.stmt(s.then_case)
        else:
            with self.b.if_else(cond) as (then, otherwise):
                with then:
                    self.stmt(s.then_case)
                with otherwise:
                    self.stmt(s.else_case)

    def s_BufferStore(self, s: BufferStore) -> None:
        value = self.expr(s.value)
        self.store(s.buffer, s.indices, value, s.value.dtype)

    def s_Allocate(self, s: Allocate) -> None:
        buf = s.buffer
        count = self.extent_of(buf)
        size_bytes = None
        if isinstance(count, ir.Constant):
            size_bytes = int(count.constant) * buf.dtype.itemsize * max(buf.dtype.lanes, 1)
        elem = memtype(buf.dtype)
        if size_bytes is not None and (size_bytes <= STACK_LIMIT or (buf.scope == "local" and size_bytes <= 1 << 20)):
            ptr = self.alloca(elem, max(int(count.constant), 1))
            self.bufs[buf] = (ptr, count)
            self.stmt(s.body)
            del self.bufs[buf]
            return
        wrapped = None
        if not isinstance(count, ir.Constant):
            count, wrapped = self.checked_count(buf)
        if _int32_addressed(buf.shape[0]):
            # an int32-indexed buffer of symbolic shape: its true (int64) count must fit int32
            too_many = self.b.icmp_unsigned(">", count, ir.Constant(I64, 2**31 - 1))
            self.fail_if(too_many if wrapped is None else self.b.or_(too_many, wrapped), ERR_TOO_MANY)
        elif wrapped is not None:
            self.fail_if(wrapped, ERR_NOMEM)
        # a count past 2**56 elements is no allocation any machine makes (and its bytes could wrap)
        self.fail_if(self.b.icmp_unsigned(">", count, ir.Constant(I64, 2**56)), ERR_NOMEM)
        nbytes = self.b.mul(count, ir.Constant(I64, buf.dtype.itemsize * buf.dtype.lanes))
        rounded = self.b.and_(self.b.add(nbytes, ir.Constant(I64, 127)), ir.Constant(I64, -64))
        aligned_alloc = self.m.intrinsic("aligned_alloc", PTR, [I64, I64])
        ptr = self.b.call(aligned_alloc, [ir.Constant(I64, 64), rounded])
        self.fail_if(self.b.icmp_unsigned("==", ptr, ir.Constant(PTR, None)), ERR_NOMEM)
        self.heap.append(ptr)
        self.bufs[buf] = (ptr, count)
        self.stmt(s.body)
        del self.bufs[buf]
        self.heap.pop()
        if not self.b.block.is_terminated:
            self.b.call(self.m.intrinsic("free", ir.VoidType(), [PTR]), [ptr])

    def s_For(self, s: For) -> None:
        self.loop_depth += 1
        try:
            self._for(s)
        finally:
            self.loop_depth -= 1

    def _for(self, s: For) -> None:
        if s.kind == "parallel" and not self.in_parallel:
            self.parallel_for(s)
            return
        if s.kind == "unrolled" and isinstance(s.extent, IntImm) and s.extent.value <= UNROLL_LIMIT:
            widen = _widened(s.loop_var)
            lo = self.index(s.min) if widen else self.expr(s.min)
            for k in range(s.extent.value):
                self._bind_loop_var(s.loop_var, self._add_index(lo, k) if widen else
                                    self.b.add(lo, _const(lo.type, k)) if k else lo, widen)
                self.stmt(s.body)
            self._unbind_loop_var(s.loop_var)
            return
        if _widened(s.loop_var):
            lo = self.index(s.min)
            hi = self._add_index(lo, self.index(s.extent))
        else:
            lo = self.expr(s.min)
            hi = self.b.add(lo, self.expr(s.extent))
        self.serial_loop(s.loop_var, lo, hi, s.body)

    def serial_loop(self, var: Var, lo: ir.Value, hi: ir.Value, body) -> None:
        """`for var in [lo, hi)`; lo and hi are i64 for a widened variable (see `_widened`)."""
        widen = _widened(var)
        pre = self.b.block
        head = self.fn.append_basic_block(f"for_{var.name}")
        loop = self.fn.append_basic_block(f"for_{var.name}_body")
        end = self.fn.append_basic_block(f"for_{var.name}_end")
        signed = not var.dtype.is_uint
        cmp = self.b.icmp_signed if signed else self.b.icmp_unsigned
        self.b.cbranch(cmp("<", lo, hi), head, end)
        self.b.position_at_end(head)
        phi = self.b.phi(lo.type, name=var.name)
        phi.add_incoming(lo, pre)
        self.b.branch(loop)
        self.b.position_at_end(loop)
        self._bind_loop_var(var, phi, widen)
        if widen and isinstance(lo, ir.Constant) and isinstance(hi, ir.Constant):
            self.wide_range[var] = (lo.constant, hi.constant - 1)
        self.stmt(body)
        self._unbind_loop_var(var)
        # phi < hi, so phi + 1 <= hi cannot overflow: nsw lets LLVM keep the variable in i64
        nxt = self.b.add(phi, _const(lo.type, 1), flags=("nsw",) if signed else ())
        phi.add_incoming(nxt, self.b.block)
        self.b.cbranch(cmp("<", nxt, hi), head, end)
        self.b.position_at_end(end)

    def _add_index(self, a: ir.Value, c: ir.Value | int) -> ir.Value:
        """a + c for i64 index values (c may be a Python int), folded when it can be."""
        c = ir.Constant(I64, c) if isinstance(c, int) else c
        folded = _fold_index("add", a, c)
        return folded if folded is not None else self.b.add(a, c, flags=self.nsw)

    def _bind_loop_var(self, var: Var, value: ir.Value, widened: bool) -> None:
        """A widened variable's i64 value serves indices; a use as a value truncates it there."""
        (self.wide if widened else self.env)[var] = value

    def _unbind_loop_var(self, var: Var) -> None:
        self.env.pop(var, None)
        self.wide.pop(var, None)
        self.wide_range.pop(var, None)

    # -- parallel loops --------------------------------------------------------------------
    def parallel_for(self, s: For) -> None:
        """Outline the loop body into (lo, hi, closure) and run it on the thread pool."""
        m = self.m
        m.parallel = True
        k = m.n_outlined
        m.n_outlined += 1
        used_vars, used_bufs = _used_vars_and_buffers(s)
        vars_ = [v for v in used_vars if (v in self.env or v in self.wide) and v is not s.loop_var]
        bufs = [b for b in used_bufs if b in self.bufs]
        var_vals = [self.wide[v] if v in self.wide else self.env[v] for v in vars_]
        # body(lo, hi, ptr noalias bufs..., i64 extents..., captured vars...) -> i32
        arg_tys = [I64, I64] + [PTR] * len(bufs) + [I64] * len(bufs) + [v.type for v in var_vals]
        body_fn = ir.Function(m.module, ir.FunctionType(I32, arg_tys), f"{m.symbol}_par{k}_body")
        body_fn.linkage = "internal"
        for a in body_fn.args[2:2 + len(bufs)]:
            a.add_attribute("noalias")
        sub = _Emitter(m, body_fn, in_parallel=True)
        args = body_fn.args
        for i, b in enumerate(bufs):
            sub.bufs[b] = (args[2 + i], args[2 + len(bufs) + i])
        for i, v in enumerate(vars_):
            (sub.wide if v in self.wide else sub.env)[v] = args[2 + 2 * len(bufs) + i]
            if v in self.wide_range:
                sub.wide_range[v] = self.wide_range[v]
        if isinstance(s.min, IntImm) and isinstance(s.extent, IntImm):
            sub.wide_range[s.loop_var] = (s.min.value, s.min.value + s.extent.value - 1)
        if _widened(s.loop_var):
            start = sub.index(s.min)
            lo, hi = sub._add_index(args[0], start), sub._add_index(args[1], start)
        else:
            lo = sub.b.add(sub.cast_int(args[0], s.loop_var.dtype), sub.expr(s.min))
            hi = sub.b.add(sub.cast_int(args[1], s.loop_var.dtype), sub.expr(s.min))
        sub.serial_loop(s.loop_var, lo, hi, s.body)
        sub.finish()

        # closure: one 64-byte slot per value (slot 0: the error code), addressed by byte offset
        values = [ir.Constant(I32, 0)] + [self.bufs[b][0] for b in bufs] + [self.bufs[b][1] for b in bufs] + var_vals
        offsets, total = [], 0
        for v in values:
            offsets.append(total)
            total += -(-_size_of(v.type) // 64) * 64
        tramp = ir.Function(m.module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR]), f"{m.symbol}_par{k}")
        tramp.linkage = "internal"
        if m.wrappers_optnone:   # a few loads and a call, once per chunk: nothing to optimise
            for attr in ENTRY_ATTRIBUTES:
                tramp.attributes.add(attr)
        tb = ir.IRBuilder(tramp.append_basic_block("entry"))
        cl = tramp.args[2]
        fields = [tb.load(_gep(tb, cl, [ir.Constant(I64, off)], I8), typ=v.type)
                  for off, v in zip(offsets[1:], values[1:])]
        rc = tb.call(body_fn, [tramp.args[0], tramp.args[1]] + fields)
        with tb.if_then(tb.icmp_signed("!=", rc, ir.Constant(I32, 0))):
            tb.cmpxchg(cl, ir.Constant(I32, 0), rc, "monotonic", "monotonic")
        tb.ret_void()

        slot = self.alloca(I8, total)
        for off, v in zip(offsets, values):
            self.b.store(v, _gep(self.b, slot, [ir.Constant(I64, off)], I8))
        launch_addr = self.b.load(_gep(self.b, m.ctx, [ir.Constant(I64, 0)], I64), typ=I64)
        launch = _Callee(self.b.block, launch_addr, ir.FunctionType(I32, [PTR, PTR, I64]))
        self.b._insert(launch)
        extent = self.index(s.extent)
        stopped = self.b.call(launch, [tramp, slot, extent])   # 1: Ctrl-C stopped the loop (runtime.py)
        self.fail_if(self.b.icmp_signed("!=", stopped, ir.Constant(I32, 0)), ERR_INTERRUPTED)
        err = self.b.load(slot, typ=I32)
        self.fail_if(self.b.icmp_signed("!=", err, ir.Constant(I32, 0)), err)

    # -- buffers ---------------------------------------------------------------------------
    def extent_of(self, buf: Buffer) -> ir.Value:
        """The number of elements of a buffer, as i64 (a constant when the shape is)."""
        if all(isinstance(s, IntImm) for s in buf.shape):
            return ir.Constant(I64, math.prod(s.value for s in buf.shape))
        total = None
        for s in buf.shape:
            v = self.to_i64(self.expr(s), s.dtype)
            total = v if total is None else self.b.mul(total, v)
        if total is None:
            return ir.Constant(I64, 1)
        if isinstance(total, ir.Constant):
            return total
        return total

    def checked_count(self, buf: Buffer) -> tuple[ir.Value, ir.Value | None]:
        """The element count of a buffer of symbolic shape, multiplied factor by factor with an
        overflow flag (None when nothing can overflow): n * n * n * n with n = 65536 is 2**64,
        which int64 arithmetic would wrap to 0 and allocate nothing."""
        factors: list[PrimExpr] = []
        for dim in buf.shape:
            stack = [dim]
            while stack:
                e = stack.pop()
                if isinstance(e, Binary) and e.op == "mul" and e.dtype.bits == 64 and e.dtype.lanes == 1:
                    stack += [e.b, e.a]
                else:
                    factors.append(e)
        smul = self.m.intrinsic("llvm.smul.with.overflow.i64", ir.LiteralStructType([I64, ir.IntType(1)]),
                                [I64, I64])
        total: ir.Value = ir.Constant(I64, 1)
        wrapped: ir.Value | None = None
        for i, f in enumerate(factors):
            v = self.to_i64(self.expr(f), f.dtype)
            if i == 0:
                total = v
                continue
            both = self.b.call(smul, [total, v])
            total, flag = self.b.extract_value(both, 0), self.b.extract_value(both, 1)
            wrapped = flag if wrapped is None else self.b.or_(wrapped, flag)
        return total, wrapped

    def flat_index(self, buf: Buffer, indices) -> PrimExpr:
        """The one flat index of an access (lowered IR has one already)."""
        if len(indices) == 1 and not buf.strides and buf.elem_offset is None:
            return indices[0]
        if len(indices) != len(buf.shape):
            raise TargetError(f"buffer {buf.name!r} has {len(buf.shape)} dimensions but is indexed with "
                              f"{len(indices)} indices")
        strides = list(buf.strides)
        if not strides:
            acc = None
            for s in reversed(buf.shape):
                strides.insert(0, acc if acc is not None else IntImm(1, s.dtype))
                acc = s if acc is None else acc * s
        idx = None
        for i, st in zip(indices, strides):
            st = st if st.dtype == i.dtype.element else Cast(i.dtype.element, st)
            if i.dtype.lanes > 1:
                st = Broadcast(st, i.dtype.lanes)
            term = i * st
            idx = term if idx is None else idx + term
        if buf.elem_offset is not None:
            off = buf.elem_offset if buf.elem_offset.dtype == idx.dtype.element else Cast(idx.dtype.element,
                                                                                             buf.elem_offset)
            idx = idx + (Broadcast(off, idx.dtype.lanes) if idx.dtype.lanes > 1 else off)
        return idx

    def buffer_ptr(self, buf: Buffer) -> tuple[ir.Value, ir.Value]:
        if buf not in self.bufs:
            raise TargetError(f"buffer {buf.name!r} is used outside its allocation (or is not a parameter)")
        return self.bufs[buf]

    def check_bounds(self, buf: Buffer, index: PrimExpr, lo: ir.Value, hi: ir.Value, extent: ir.Value) -> None:
        """Fail with the check's code unless lo >= 0 and hi < extent (i64 values)."""
        code = self.m.add_check(buf, index, Var("n") if not isinstance(extent, ir.Constant) else
                                IntImm(int(extent.constant), int64))
        if not isinstance(extent, ir.Constant):
            self.m.checks[-1]["extent"] = " * ".join(expr_text(s) for s in buf.shape) or "1"
        bad = self.b.or_(self.b.icmp_signed("<", lo, ir.Constant(I64, 0)), self.b.icmp_signed(">=", hi, extent))
        self.fail_if(bad, code)

    def address(self, buf: Buffer, indices) -> tuple[str, ir.Value, int]:
        """Classify an access: ("scalar", i64 index), ("contig", i64 base), ("lanes", <n x i64>)."""
        _, extent = self.buffer_ptr(buf)
        index = self.flat_index(buf, indices)
        lanes = index.dtype.lanes
        if lanes == 1:
            i = self.index(index)
            if self.m.bounds_check:
                self.check_bounds(buf, index, i, i, extent)
            return "scalar", i, 1
        if isinstance(index, Ramp) and isinstance(index.stride, IntImm) and index.stride.value == 1:
            base = self.index(index.base)
            if self.m.bounds_check:
                last = self.b.add(base, ir.Constant(I64, lanes - 1))
                self.check_bounds(buf, index, base, last, extent)
            return "contig", base, lanes
        if isinstance(index, Broadcast):
            i = self.index(index.value)
            if self.m.bounds_check:
                self.check_bounds(buf, index, i, i, extent)
            return "bcast", i, lanes
        periodic = _periodic(index)
        if periodic is not None:
            base, width = periodic
            b = self.index(base)
            if self.m.bounds_check:
                self.check_bounds(buf, index, b, self.b.add(b, ir.Constant(I64, width - 1)), extent)
            return f"periodic{width}", b, lanes
        vec64 = self.index(index)
        if self.m.bounds_check:
            vty = vec64.type
            neg = self.b.icmp_signed("<", vec64, _const(vty, 0))
            over = self.b.icmp_signed(">=", vec64, self._splat(extent, lanes))
            anybad = self.b.or_(neg, over)
            red = self.m.intrinsic(f"llvm.vector.reduce.or.v{lanes}i1", I1, [anybad.type])
            code = self.m.add_check(buf, index, IntImm(0, int64))
            self.m.checks[-1]["extent"] = " * ".join(expr_text(s) for s in buf.shape) or "1"
            self.fail_if(self.b.call(red, [anybad]), code)
        return "lanes", vec64, lanes

    def load(self, e: BufferLoad) -> ir.Value:
        return self.from_memory(self.load_raw(e), e.dtype)

    def load_raw(self, e: BufferLoad) -> ir.Value:
        """The loaded value in its memory type (bfloat16 as i16 bits, bool as i8)."""
        buf = e.buffer
        ptr, _ = self.buffer_ptr(buf)
        kind, where, lanes = self.address(buf, e.indices)
        elem = memtype(buf.dtype)
        align = buf.dtype.itemsize
        if kind == "scalar":
            raw = self.b.load(self._pure("gep", ptr, where, elem), typ=elem, align=align)
        elif kind == "contig":
            vty = ir.VectorType(elem, lanes)
            raw = self.b.load(self._pure("gep", ptr, where, elem), typ=vty, align=align)
        elif kind == "bcast":
            one = self.b.load(self._pure("gep", ptr, where, elem), typ=elem, align=align)
            raw = self._splat(one, lanes)
        elif kind.startswith("periodic"):
            # `width` contiguous elements repeated over the lanes: one load and a shuffle (on x86
            # a broadcast of 4 bytes is one vpbroadcastd)
            width = int(kind[len("periodic"):])
            part = self.b.load(self._pure("gep", ptr, where, elem), typ=ir.VectorType(elem, width), align=align)
            mask = ir.Constant(ir.VectorType(I32, lanes), [j % width for j in range(lanes)])
            raw = self.b.shuffle_vector(part, _null(part.type), mask)
        else:
            raw = ir.Constant(ir.VectorType(elem, lanes), None)
            for j in range(lanes):
                ij = self.b.extract_element(where, ir.Constant(I32, j))
                v = self.b.load(_gep(self.b, ptr, [ij], elem), typ=elem, align=align)
                raw = self.b.insert_element(raw, v, ir.Constant(I32, j))
        return raw

    def store(self, buf: Buffer, indices, value: ir.Value, vdt: DataType) -> None:
        ptr, _ = self.buffer_ptr(buf)
        kind, where, lanes = self.address(buf, indices)
        elem = memtype(buf.dtype)
        align = buf.dtype.itemsize
        raw = self.to_memory(value, vdt)
        if kind.startswith("periodic"):
            kind, where = "lanes", self.index(self.flat_index(buf, indices))
        if kind == "scalar" or kind == "contig":
            if kind == "contig" and not isinstance(raw.type, ir.VectorType):
                raw = self._splat(raw, lanes)
            addr = self._pure("gep", ptr, where, elem)
            if buf.name in self.m.nontemporal and buf.scope == "global":
                self.streaming_store(raw, addr, align)
            else:
                self.b.store(raw, addr, align=align)
            return
        for j in range(lanes):
            if kind == "bcast":
                ij = where
            else:
                ij = self.b.extract_element(where, ir.Constant(I32, j))
            v = self.b.extract_element(raw, ir.Constant(I32, j)) if isinstance(raw.type, ir.VectorType) else raw
            self.b.store(v, _gep(self.b, ptr, [ij], elem), align=align)

    def streaming_store(self, raw: ir.Value, addr: ir.Value, align: int) -> None:
        """A non-temporal store (no read of the line first, no cache pollution). x86's vector
        streaming stores need an address aligned to 16 bytes (LLVM splits a wider one into
        16-byte halves) and numpy only promises the element's alignment, so the address is
        tested: aligned -> `vmovntps`, else a plain store."""
        nt_align = 16 if isinstance(raw.type, ir.VectorType) and _size_of(raw.type) >= 16 else align
        md = self.m.module.add_metadata([ir.Constant(I32, 1)])
        if nt_align == align:
            self.b.store(raw, addr, align=align).set_metadata("nontemporal", md)
            return
        low = self.b.and_(self.b.ptrtoint(addr, I64), ir.Constant(I64, nt_align - 1))
        with self.b.if_else(self.b.icmp_unsigned("==", low, ir.Constant(I64, 0)), likely=True) as (aligned, other):
            with aligned:
                self.b.store(raw, addr, align=nt_align).set_metadata("nontemporal", md)
            with other:
                self.b.store(raw, addr, align=align)

    def from_memory(self, raw: ir.Value, dt: DataType) -> ir.Value:
        if dt.code == "bool":
            return self.b.icmp_unsigned("!=", raw, _const(raw.type, 0))
        if dt.code == "bfloat":
            wide = self.b.shl(self.b.zext(raw, self._same_shape(raw.type, I32)), _const(self._same_shape(raw.type, I32), 16))
            return self.b.bitcast(wide, self._same_shape(raw.type, F32))
        return raw

    def to_memory(self, v: ir.Value, dt: DataType) -> ir.Value:
        if dt.code == "bool":
            return self.b.zext(v, self._same_shape(v.type, I8))
        if dt.code == "bfloat":
            return self.bf16_bits(v)
        return v

    # -- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _same_shape(ty: ir.Type, elem: ir.Type) -> ir.Type:
        return ir.VectorType(elem, ty.count) if isinstance(ty, ir.VectorType) else elem

    def _splat(self, v: ir.Value, lanes: int) -> ir.Value:
        """`v` in every lane, made once per basic block (see `_pure`)."""
        key = (self.b.block, "splat", _operand_key(v), lanes)
        hit = self.cse.get(key)
        if hit is None:
            vty = ir.VectorType(v.type, lanes)
            one = self.b.insert_element(_null(vty), v, _I32_ZERO)
            hit = self.cse[key] = (self.b.shuffle_vector(one, _null(vty), _null(ir.VectorType(I32, lanes))), v)
        return hit[0]

    def _pure(self, op: str, a: ir.Value, c: ir.Value, elem: ir.Type | None = None) -> ir.Value:
        """`a op c` for op add/sub/mul (i64 index arithmetic, `nsw` flags) or gep (the address
        of element c of the elem array at a), made once per basic block: the flattened indices
        of an unrolled micro-kernel repeat the same sums in every statement. An earlier value
        of the same block dominates the insertion point, and these operations have no side
        effects, so reusing it changes nothing (LLVM's CSE merged them before)."""
        key = (self.b.block, op, _operand_key(a), _operand_key(c), elem)
        hit = self.cse.get(key)
        if hit is None:
            value = _gep(self.b, a, [c], elem) if op == "gep" else getattr(self.b, op)(a, c, flags=self.nsw)
            hit = self.cse[key] = (value, a, c)   # the operands kept alive: their ids are in the key
        return hit[0]

    @property
    def nsw(self) -> tuple[str, ...]:
        """Flags of index arithmetic: no signed wrap, except under bounds checks, which must see
        (and report) whatever value an overflowing index takes."""
        return () if self.m.bounds_check else ("nsw",)

    def index(self, e: PrimExpr) -> ir.Value:
        """An index (address, loop bound) as i64 or <n x i64>, computed in 64 bits.

        Signed int32/int64 index arithmetic (+, -, *, //, %, min, max and int32 -> int64 casts
        over loop variables and constants) is done in i64 with `nsw`: an in-bounds index does not
        overflow, and 64-bit arithmetic keeps the sign extensions out of inner loops. Where an
        int32 sum or product that may have wrapped meets //, %, min, max or a cast to int64, it
        is wrapped to int32 first (`_wrapped_i32`), as the interpreter computes it. Anything
        else (loads, calls, other casts, values bound by `let`, int8/int16 arithmetic) is computed
        in its own type, with its own wrap-around, and extended. Under bounds checks there is no
        `nsw`, so an overflowing index is reported, never undefined."""
        dt = e.dtype
        if not (dt.is_int and dt.bits >= 32):    # int8/int16 sums that wrap are plausible: keep them
            return self.to_i64(self.expr(e), dt)
        if isinstance(e, Var):
            wide = self.wide.get(e)
            return wide if wide is not None else self.to_i64(self.expr(e), dt)
        if isinstance(e, IntImm):
            return ir.Constant(I64, e.value)
        if isinstance(e, Binary) and e.op in _INDEX_OPS:
            a, c = self.index(e.a), self.index(e.b)
            if e.op not in ("add", "sub", "mul") and dt.bits == 32:
                # //, %, min and max see the int32 value their operands wrapped to (as the
                # interpreter does): (i + 2**31 - 1) % 10 must not be taken of the exact sum
                a, c = self._wrapped_i32(e.a, a), self._wrapped_i32(e.b, c)
            if e.op in ("add", "sub", "mul"):
                folded = _fold_index(e.op, a, c)
                return folded if folded is not None else self._pure(e.op, a, c)
            return self._int_binary(e.op, a, c, dt, e.b)
        if isinstance(e, Ramp):
            base = self._splat(self.index(e.base), e.lanes)
            stride = self._splat(self.index(e.stride), e.lanes)
            steps = ir.Constant(ir.VectorType(I64, e.lanes), [ir.Constant(I64, i) for i in range(e.lanes)])
            return self.b.add(base, self.b.mul(stride, steps, flags=self.nsw), flags=self.nsw)
        if isinstance(e, Broadcast):
            return self._splat(self.index(e.value), e.lanes)
        if isinstance(e, Cast) and e.value.dtype.is_int and e.value.dtype.bits == 32 and dt.bits == 64:
            # int32 index arithmetic widened: exact in i64, wrapped to int32 where it may overflow
            return self._wrapped_i32(e.value, self.index(e.value))
        return self.to_i64(self.expr(e), dt)

    def _wrapped_i32(self, e: PrimExpr, v: ir.Value) -> ir.Value:
        """`v`, the exact i64 value of the int32 index expression `e`, wrapped to int32 unless
        `e` provably stays in int32 (a variable, a constant, or a sum/product of loop variables
        with constant ranges: `_i32_bounds`). //, %, min and max of wrapped operands cannot leave
        int32 (MIN // -1 divides by 1, see `_int_binary`)."""
        may_wrap = isinstance(e, (Ramp, Broadcast)) or isinstance(e, Binary) and e.op in ("add", "sub", "mul")
        if not may_wrap or self._i32_bounds(e) is not None:
            return v
        narrow = self.b.trunc(v, self._same_shape(v.type, I32))
        return self.b.sext(narrow, v.type)

    def _i32_bounds(self, e: PrimExpr) -> tuple[int, int] | None:
        """Bounds of the int32 expression `e` when it and every part of it provably lie in
        int32 (its i64 value then is its int32 value); None when not known."""
        if isinstance(e, IntImm):
            lo = hi = e.value
        elif isinstance(e, Var):
            return self.wide_range.get(e)
        elif isinstance(e, Broadcast):
            return self._i32_bounds(e.value)
        elif isinstance(e, Ramp) and isinstance(e.stride, IntImm):
            base = self._i32_bounds(e.base)
            if base is None:
                return None
            last = e.stride.value * (e.lanes - 1)
            lo, hi = base[0] + min(0, last), base[1] + max(0, last)
        elif isinstance(e, Binary) and e.op in _INDEX_OPS:
            a, c = self._i32_bounds(e.a), self._i32_bounds(e.b)
            if a is None or c is None:
                return None
            if e.op in ("add", "sub", "mul", "min", "max"):
                f = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
                     "min": min, "max": max}[e.op]
                corners = [f(x, y) for x in a for y in c]
                lo, hi = min(corners), max(corners)
            elif c[0] == c[1] and c[0] > 0:
                lo, hi = (a[0] // c[0], a[1] // c[0]) if e.op == "floordiv" else (0, c[0] - 1)
            else:
                return None
        else:
            return None
        return (lo, hi) if -2 ** 31 <= lo and hi < 2 ** 31 else None

    def to_i64(self, v: ir.Value, dt: DataType) -> ir.Value:
        ety = v.type.element if isinstance(v.type, ir.VectorType) else v.type
        if not isinstance(ety, ir.IntType):
            raise TargetError(f"an index must be an integer, not {dt}")
        target = self._same_shape(v.type, I64)
        if ety.width == 64:
            return v
        if dt.is_uint or dt.is_bool:
            return self.b.zext(v, target)
        return self.b.sext(v, target)

    def cast_int(self, v: ir.Value, dt: DataType) -> ir.Value:
        """An i64 to the integer type of `dt`."""
        ty = lltype(dt)
        if ty.width == 64:
            return v
        return self.b.trunc(v, ty)

    def bf16_bits(self, v: ir.Value) -> ir.Value:
        """float -> bfloat16 bits, rounding to nearest even, NaN kept quiet."""
        i32ty = self._same_shape(v.type, I32)
        bits = self.b.bitcast(v, i32ty)
        lsb = self.b.and_(self.b.lshr(bits, _const(i32ty, 16)), _const(i32ty, 1))
        rounded = self.b.add(self.b.add(bits, _const(i32ty, 0x7FFF)), lsb)
        isnan = self.b.fcmp_unordered("uno", v, v)
        quiet = self.b.or_(self.b.lshr(bits, _const(i32ty, 16)), _const(i32ty, 0x40))
        top = self.b.select(isnan, quiet, self.b.lshr(rounded, _const(i32ty, 16)))
        return self.b.trunc(top, self._same_shape(v.type, I16))

    def bf16_round(self, v: ir.Value) -> ir.Value:
        """A float rounded to the nearest bfloat16, still as a float."""
        bits = self.bf16_bits(v)
        i32ty = self._same_shape(v.type, I32)
        return self.b.bitcast(self.b.shl(self.b.zext(bits, i32ty), _const(i32ty, 16)), v.type)

    def _fix(self, v: ir.Value, dt: DataType) -> ir.Value:
        """Round the result of a float32 computation that stands for a bfloat16 value."""
        return self.bf16_round(v) if dt.code == "bfloat" else v

    # -- expressions -----------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> ir.Value:
        method = getattr(self, "e_" + type(e).__name__, None)
        if method is None:
            raise TargetError(f"the CPU code generator cannot compile a {type(e).__name__} expression")
        return method(e)

    def e_Var(self, e: Var) -> ir.Value:
        wide = self.wide.get(e)
        if wide is not None:
            return self.b.trunc(wide, lltype(e.dtype))
        if e not in self.env:
            raise TargetError(f"variable {e.name!r} is used outside its scope")
        return self.env[e]

    def e_IntImm(self, e: IntImm) -> ir.Value:
        return _const(lltype(e.dtype), e.value)

    def e_FloatImm(self, e: FloatImm) -> ir.Value:
        v = e.value
        if e.dtype.code == "bfloat":
            import ml_dtypes
            import numpy as np

            v = float(np.array(v, np.float64).astype(ml_dtypes.bfloat16).astype(np.float32))
        return _const(lltype(e.dtype), v)

    def e_StringImm(self, e: StringImm) -> ir.Value:
        raise TargetError(f"string argument {e.value!r} is not supported by the CPU code generator")

    def e_Ramp(self, e: Ramp) -> ir.Value:
        base = self._splat(self.expr(e.base), e.lanes)
        stride = self._splat(self.expr(e.stride), e.lanes)
        ety = lltype(e.base.dtype)
        steps = ir.Constant(ir.VectorType(ety, e.lanes), [_const(ety, i) for i in range(e.lanes)])
        return self.b.add(base, self.b.mul(stride, steps))

    def e_Broadcast(self, e: Broadcast) -> ir.Value:
        return self._splat(self.expr(e.value), e.lanes)

    def e_BufferLoad(self, e: BufferLoad) -> ir.Value:
        return self.load(e)

    def e_Not(self, e: Not) -> ir.Value:
        return self.b.not_(self.expr(e.a))

    def e_Select(self, e: Select) -> ir.Value:
        c, t, f = self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)
        if isinstance(t.type, ir.VectorType) and not isinstance(c.type, ir.VectorType):
            c = self._splat(c, t.type.count)
        return self.b.select(c, t, f)

    def e_Cast(self, e: Cast) -> ir.Value:
        return self.convert(self.expr(e.value), e.value.dtype, e.dtype)

    def convert(self, v: ir.Value, src: DataType, dst: DataType) -> ir.Value:
        if src.element == dst.element:
            return v
        dty = lltype(dst)
        b = self.b
        if dst.is_bool:
            if src.is_float:
                return b.fcmp_unordered("!=", v, _const(v.type, 0.0))
            return b.icmp_unsigned("!=", v, _const(v.type, 0))
        if src.is_bool:
            return b.uitofp(v, dty) if dst.is_float else b.zext(v, dty)
        if src.is_float and dst.is_float:
            sw, dw = v.type, dty
            sbits = 32 if src.code == "bfloat" else src.bits
            dbits = 32 if dst.code == "bfloat" else dst.bits
            if sbits == 64 and (dbits == 16 or dst.code == "bfloat"):
                # bfloat16 rounds from float32 (_fix): float32 rounded to odd keeps it single
                out = b.fptrunc(self._to_f32_round_to_odd(v), dw)
            elif sbits < dbits:
                out = b.fpext(v, dw)
            elif sbits > dbits:
                out = b.fptrunc(v, dw)
            else:
                out = v if sw == dw else b.bitcast(v, dw)
            return self._fix(out, dst)
        if src.is_float:
            out = b.fptoui(v, dty) if dst.is_uint else b.fptosi(v, dty)
            return out
        if dst.is_float:
            if dst.code == "bfloat" and src.bits > 24:
                # through float32 rounded to odd: one rounding, as ml_dtypes does
                return self._fix(self._int_to_f32_round_to_odd(v, src.is_uint), dst)
            out = b.uitofp(v, dty) if src.is_uint else b.sitofp(v, dty)
            return self._fix(out, dst)
        if src.bits > dst.bits:
            return b.trunc(v, dty)
        if src.bits < dst.bits:
            return b.zext(v, dty) if src.is_uint else b.sext(v, dty)
        return v

    def _int_to_f32_round_to_odd(self, v: ir.Value, unsigned: bool) -> ir.Value:
        """An integer (more than 24 bits) -> float rounded to odd, so that a further rounding
        to bfloat16 is exact: 32-bit values go through double exactly; 64-bit values keep
        their 24 leading bits, the last one or-ed with the dropped ones (sticky)."""
        b = self.b
        width = v.type.element.width if isinstance(v.type, ir.VectorType) else v.type.width
        if width <= 32:
            f64 = self._same_shape(v.type, F64)
            return self._to_f32_round_to_odd(b.uitofp(v, f64) if unsigned else b.sitofp(v, f64))
        ity, f32ty = v.type, self._same_shape(v.type, F32)
        zero = _const(ity, 0)
        neg = None if unsigned else b.icmp_signed("<", v, zero)
        mag = v if unsigned else b.select(neg, b.sub(zero, v), v)   # INT64_MIN: 2**63 unsigned
        ctlz = self.m.intrinsic("llvm.ctlz." + _suffix(ity), ity, [ity, ir.IntType(1)])
        lz = b.call(ctlz, [mag, ir.Constant(ir.IntType(1), 0)])
        over = b.sub(_const(ity, width - 24), lz)
        shift = b.select(b.icmp_signed(">", over, zero), over, zero)
        dropped = b.and_(mag, b.sub(b.shl(_const(ity, 1), shift), _const(ity, 1)))
        sticky = b.zext(b.icmp_unsigned("!=", dropped, zero), ity)
        kept = b.shl(b.or_(b.lshr(mag, shift), sticky), shift)
        out = b.uitofp(kept, f32ty)   # at most 24 significant bits: exact
        return out if unsigned else b.select(neg, b.fneg(out), out)

    def _to_f32_round_to_odd(self, v: ir.Value) -> ir.Value:
        """double -> float rounding to odd, so that a further rounding to half is exact.

        LLVM lowers double -> half to a libcall (__truncdfhf2) that the JIT cannot resolve
        here; double rounding through float is exact only with round-to-odd in the middle.
        """
        b = self.b
        f32ty, i32ty = self._same_shape(v.type, F32), self._same_shape(v.type, I32)
        t = b.fptrunc(v, f32ty)
        back = b.fpext(t, v.type)
        fabs = self.m.intrinsic("llvm.fabs." + _suffix(v.type), v.type, [v.type])
        too_big = b.fcmp_ordered(">", b.call(fabs, [back]), b.call(fabs, [v]))
        bits = b.bitcast(t, i32ty)
        bits = b.select(too_big, b.sub(bits, _const(i32ty, 1)), bits)       # toward zero
        inexact = b.fcmp_ordered("!=", back, v)
        finite = b.fcmp_ordered("<", b.call(fabs, [back]), _const(v.type, float("inf")))
        sticky = b.and_(inexact, finite)
        bits = b.select(sticky, b.or_(bits, _const(i32ty, 1)), bits)
        return b.bitcast(bits, f32ty)

    def e_Binary(self, e: Binary) -> ir.Value:
        dt = e.a.dtype
        if e.op in ("and", "or") and dt.lanes == 1 and _has_load(e.b):
            return self._short_circuit(e)
        a, c = self.expr(e.a), self.expr(e.b)
        b = self.b
        op = e.op
        if op in ("eq", "ne", "lt", "le", "gt", "ge"):
            sym = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
            if dt.is_float:
                return b.fcmp_unordered(sym, a, c) if op == "ne" else b.fcmp_ordered(sym, a, c)
            if dt.is_uint or dt.is_bool:
                return b.icmp_unsigned(sym, a, c)
            return b.icmp_signed(sym, a, c)
        if op == "and":
            return b.and_(a, c)
        if op == "or":
            return b.or_(a, c)
        if dt.is_float:
            return self._fix(self._float_binary(op, a, c), dt)
        if dt.is_bool:
            dt = DataType("uint", 1, dt.lanes)
        return self._int_binary(op, a, c, dt, e.b)

    def _short_circuit(self, e: Binary) -> ir.Value:
        lhs = self.expr(e.a)
        start = self.b.block
        rhs_block = self.fn.append_basic_block("sc_rhs")
        end = self.fn.append_basic_block("sc_end")
        if e.op == "and":
            self.b.cbranch(lhs, rhs_block, end)
        else:
            self.b.cbranch(lhs, end, rhs_block)
        self.b.position_at_end(rhs_block)
        rhs = self.expr(e.b)
        rhs_end = self.b.block
        self.b.branch(end)
        self.b.position_at_end(end)
        phi = self.b.phi(I1)
        phi.add_incoming(ir.Constant(I1, 0 if e.op == "and" else 1), start)
        phi.add_incoming(rhs, rhs_end)
        return phi

    def _float_binary(self, op: str, a: ir.Value, c: ir.Value) -> ir.Value:
        b = self.b
        if op == "add":
            return b.fadd(a, c)
        if op == "sub":
            return b.fsub(a, c)
        if op == "mul":
            return b.fmul(a, c)
        if op == "div":
            return b.fdiv(a, c)
        if op in ("min", "max"):
            # as the interpreter: NaN when either is NaN (as numpy's maximum/minimum), else the
            # winner, `a` on a tie. `c > a ? c : a` is exactly x86's maxps(c, a) (minps for <),
            # which returns `a` when either is NaN, so only a NaN `c` needs the blend: a max, a
            # compare and a blend, with only the max and the blend on `a`'s dependency chain (a
            # reduction's accumulator). The blend picks `pick` when `c` is ordered: the other
            # way round, LLVM merges the two selects into two compares, an or and a blend.
            pick = b.select(b.fcmp_ordered(">" if op == "max" else "<", c, a), c, a)
            return b.select(b.fcmp_ordered("ord", c, c), pick, c)
        if op == "floormod":
            return self._float_floormod(a, c)[0]
        if op == "floordiv":
            return self._float_floordiv(a, c)
        raise TargetError(f"unknown float operator {op}")

    def _float_floormod(self, a, c):
        """numpy's divmod: mod = fmod(a, b), moved into b's sign."""
        b = self.b
        ty = a.type
        zero = _const(ty, 0.0)
        mod = b.frem(a, c)
        nonzero = b.fcmp_unordered("!=", mod, zero)
        differ = b.xor(b.fcmp_ordered("<", c, zero), b.fcmp_ordered("<", mod, zero))
        fix = b.and_(nonzero, differ)
        mod2 = b.select(fix, b.fadd(mod, c), mod)
        copysign = self.m.intrinsic("llvm.copysign." + _suffix(ty), ty, [ty, ty])
        mod3 = b.select(nonzero, mod2, b.call(copysign, [zero, c]))
        return mod3, mod, fix

    def _float_floordiv(self, a, c):
        """numpy's floor_divide for floats (npy_divmod)."""
        b = self.b
        ty = a.type
        zero = _const(ty, 0.0)
        mod = b.frem(a, c)
        div = b.fdiv(b.fsub(a, mod), c)
        nonzero = b.fcmp_unordered("!=", mod, zero)
        differ = b.xor(b.fcmp_ordered("<", c, zero), b.fcmp_ordered("<", mod, zero))
        div = b.select(b.and_(nonzero, differ), b.fsub(div, _const(ty, 1.0)), div)
        floor = self.m.intrinsic("llvm.floor." + _suffix(ty), ty, [ty])
        fl = b.call(floor, [div])
        fl = b.select(b.fcmp_ordered(">", b.fsub(div, fl), _const(ty, 0.5)), b.fadd(fl, _const(ty, 1.0)), fl)
        copysign = self.m.intrinsic("llvm.copysign." + _suffix(ty), ty, [ty, ty])
        signed_zero = b.call(copysign, [zero, b.fdiv(a, c)])
        out = b.select(b.fcmp_unordered("!=", div, zero), fl, signed_zero)
        # b == 0: a / b (inf or nan), as numpy gives
        return b.select(b.fcmp_ordered("==", c, zero), b.fdiv(a, c), out)

    def _int_binary(self, op: str, a, c, dt: DataType, rhs: PrimExpr) -> ir.Value:
        b = self.b
        signed = dt.is_int
        if op == "add":
            return b.add(a, c)
        if op == "sub":
            return b.sub(a, c)
        if op == "mul":
            return b.mul(a, c)
        if op in ("min", "max"):
            cmp = (b.icmp_signed if signed else b.icmp_unsigned)("<" if op == "min" else ">", a, c)
            return b.select(cmp, a, c)
        if op in _BIT_BUILDERS:
            return getattr(b, _BIT_BUILDERS[op])(a, c)
        if op in ("shift_left", "shift_right"):
            return self._shift(op, a, c, dt, rhs)
        if op not in ("div", "floordiv", "floormod"):
            raise TargetError(f"unknown integer operator {op}")
        ty = a.type
        const_rhs = isinstance(rhs, IntImm) or (isinstance(rhs, Broadcast) and isinstance(rhs.value, IntImm))
        rv = rhs.value if isinstance(rhs, IntImm) else rhs.value.value if const_rhs else None
        safe = const_rhs and rv != 0 and not (signed and rv == -1)
        if safe:
            den = c
        else:
            # x // 0 is 0 (as numpy gives) and MIN // -1 wraps; neither may trap the process
            bad = b.icmp_signed("==", c, _const(ty, 0))
            if signed:
                bad = b.or_(bad, b.icmp_signed("==", c, _const(ty, -1)))
            den = b.select(bad, _const(ty, 1), c)
        if not signed:
            q = b.udiv(a, den) if op in ("div", "floordiv") else b.urem(a, den)
        elif op == "div":
            q = b.sdiv(a, den)
        else:
            q = b.sdiv(a, den)
            r = b.srem(a, den)
            adjust = b.and_(b.icmp_signed("!=", r, _const(ty, 0)),
                            b.xor(b.icmp_signed("<", r, _const(ty, 0)), b.icmp_signed("<", den, _const(ty, 0))))
            if op == "floordiv":
                q = b.sub(q, b.zext(adjust, ty))
            else:
                q = b.select(adjust, b.add(r, den), r)
        if safe:
            return q
        zero_div = b.icmp_signed("==", c, _const(ty, 0))
        result = q
        if signed:
            minus_one = b.icmp_signed("==", c, _const(ty, -1))
            by_minus_one = b.sub(_const(ty, 0), a) if op != "floormod" else _const(ty, 0)
            result = b.select(minus_one, by_minus_one, result)
        return b.select(zero_div, _const(ty, 0), result)

    def _shift(self, op: str, a, c, dt: DataType, rhs: PrimExpr) -> ir.Value:
        """<< and >> (arithmetic when signed); the amount is taken modulo the bit width, so
        LLVM's poison for an amount past it never arises (a constant in range needs no mask)."""
        b = self.b
        amount = rhs.value if isinstance(rhs, Broadcast) else rhs
        if not (isinstance(amount, IntImm) and shift_in_range(amount.value, dt)):
            c = b.and_(c, _const(c.type, dt.bits - 1))
        if op == "shift_left":
            return b.shl(a, c)
        return b.ashr(a, c) if dt.is_int else b.lshr(a, c)

    # -- calls -----------------------------------------------------------------------------
    def e_Call(self, e: Call) -> ir.Value:
        if e.op == "if_then_else":
            return self._if_then_else(e)
        if e.op in MATH_CALLS:
            return self._math(e)
        if e.op == "address_of":
            return self._address_of(e, check=True)
        if e.op == "tdsl.index_check":
            return self._index_check(e)
        return self._extern(e)

    def _index_check(self, e: Call) -> ir.Value:
        """`tdsl.index_check(index, extent, "buffer", axis)` (lower.index_checks): the index,
        after failing the kernel with a BoundsError code when it is outside [0, extent)."""
        index, extent, name, axis = e.args
        v = self.expr(index)
        wide = self.to_i64(v, index.dtype)
        ext = self.to_i64(self.expr(extent), extent.dtype)
        if isinstance(wide.type, ir.VectorType):
            ext = self._splat(ext, wide.type.count)
        zero = _const(wide.type, 0)
        bad = self.b.or_(self.b.icmp_signed("<", wide, zero), self.b.icmp_signed(">=", wide, ext))
        if isinstance(bad.type, ir.VectorType):
            red = self.m.intrinsic(f"llvm.vector.reduce.or.v{bad.type.count}i1", I1, [bad.type])
            bad = self.b.call(red, [bad])
        self.m.checks.append({"buffer": name.value, "param": None, "index": expr_text(index),
                              "extent": expr_text(extent), "axis": axis.value})
        self.fail_if(bad, len(self.m.checks))
        return v

    def _address_of(self, e: Call, check: bool) -> ir.Value:
        """`T.address_of(A[i])`: a pointer to the element (a GEP), bounds-checked like a load
        when `check` and bounds checks are on."""
        (load,) = e.args
        if not isinstance(load, BufferLoad) or load.dtype.lanes != 1:
            raise TargetError("T.address_of takes one scalar buffer element")
        ptr, _ = self.buffer_ptr(load.buffer)
        if check:
            _, where, _ = self.address(load.buffer, load.indices)
        else:
            where = self.index(self.flat_index(load.buffer, load.indices))
        return _gep(self.b, ptr, [where], memtype(load.buffer.dtype))

    def _if_then_else(self, e: Call) -> ir.Value:
        cond, t, f = e.args
        lanes = e.dtype.lanes
        if not (_has_load(t) or _has_load(f)):
            return self.e_Select(Select(cond, t, f))
        if lanes > 1 and cond.dtype.lanes > 1:
            # unsafe vector branches under a lane-wise condition: each lane decides on its own
            out = ir.Constant(lltype(e.dtype), None)
            for j in range(lanes):
                lane = Call(e.dtype.element, "if_then_else", (lane_expr(cond, j), lane_expr(t, j), lane_expr(f, j)))
                out = self.b.insert_element(out, self.expr(lane), ir.Constant(I32, j))
            return out
        c = self.expr(cond)
        then_b = self.fn.append_basic_block("ite_then")
        else_b = self.fn.append_basic_block("ite_else")
        end = self.fn.append_basic_block("ite_end")
        self.b.cbranch(c, then_b, else_b)
        self.b.position_at_end(then_b)
        tv = self.expr(t)
        t_end = self.b.block
        self.b.branch(end)
        self.b.position_at_end(else_b)
        fv = self.expr(f)
        f_end = self.b.block
        self.b.branch(end)
        self.b.position_at_end(end)
        phi = self.b.phi(tv.type)
        phi.add_incoming(tv, t_end)
        phi.add_incoming(fv, f_end)
        return phi

    def _bfloat_bits(self, a: PrimExpr) -> ir.Value:
        """A bfloat16 argument of an extern call as LLVM `bfloat` values (its bits; a load's bits
        as loaded), the type of intrinsics such as vdpbf16ps's."""
        bits = self.load_raw(a) if isinstance(a, BufferLoad) else self.bf16_bits(self.expr(a))
        return self.b.bitcast(bits, self._same_shape(bits.type, BF16))

    def _extern(self, e: Call) -> ir.Value:
        """An LLVM intrinsic or a C function, declared from the argument and result dtypes."""
        if e.op in WMMA_BUILTINS:
            raise TargetError(wmma_refusal(e.op, "the CPU backend cannot compile it"))
        if any(isinstance(a, StringImm) for a in e.args):
            raise TargetError(f"extern call {e.op!r} takes a string argument, which the CPU backend cannot pass")
        # a prefetch never faults, so its address may run past the buffer: no bounds check
        unchecked = e.op.startswith("llvm.prefetch")
        args = [self._address_of(a, check=False) if unchecked and isinstance(a, Call) and a.op == "address_of"
                else self._bfloat_bits(a) if a.dtype.code == "bfloat" else self.expr(a) for a in e.args]
        ret = ir.VoidType() if e.dtype == void else lltype(e.dtype)
        existing = self.m.module.globals.get(e.op)
        fn = existing if existing is not None else self.m.intrinsic(e.op, ret, [a.type for a in args])
        if list(fn.function_type.args) != [a.type for a in args]:
            raise TargetError(f"extern call {e.op!r} is used with different argument types")
        return self.b.call(fn, args)


def _periodic(index: PrimExpr) -> tuple[PrimExpr, int] | None:
    """(base, width) when the vector `index` is `base + lane % width` with width > 1 dividing the
    lanes (e.g. `Broadcast(b, 64) + Ramp(0, 1, 64) % Broadcast(4, 64)`: 4 bytes repeated), else None."""
    found: list[int] = []

    def walk(e: PrimExpr) -> PrimExpr | None:
        if isinstance(e, Broadcast):
            return e.value
        if isinstance(e, Binary) and e.op == "floormod" and isinstance(e.a, Ramp) and is_const(e.a.base, 0) \
                and is_const(e.a.stride, 1) and isinstance(e.b, Broadcast) and isinstance(e.b.value, IntImm):
            found.append(e.b.value.value)
            return const(0, e.a.base.dtype)
        if isinstance(e, Binary) and e.op == "add":
            a, b = walk(e.a), walk(e.b)
            return None if a is None or b is None else a + b
        if isinstance(e, Binary) and e.op == "mul" and isinstance(e.b, Broadcast) and is_const(e.b.value, 1):
            return walk(e.a)
        return None

    base = walk(index)
    lanes = index.dtype.lanes
    if base is None or len(found) != 1 or not 1 < found[0] < lanes or lanes % found[0]:
        return None
    return base, found[0]


def _int32_addressed(extent: PrimExpr) -> bool:
    """A flat extent computed in int64 from int32 dimensions (lower.flatten's
    checked_flat_extent): the buffer's indices are int32."""
    if not (isinstance(extent, Binary) and extent.op == "mul" and extent.dtype.bits == 64):
        return False
    stack: list[PrimExpr] = [extent]
    while stack:
        e = stack.pop()
        if isinstance(e, Binary) and e.op == "mul":
            stack += [e.a, e.b]
        elif not (isinstance(e, Cast) and e.value.dtype.bits == 32):
            return False
    return True



__all__ = ["ENTRY_ATTRIBUTES", "expr_text", "lane_expr", "lltype", "memtype"]
