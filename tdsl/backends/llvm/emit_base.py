"""What every part of the LLVM emitter shares: the module context (`_Module`), the emitter's
state and exits (`EmitterBase`), and the small helpers on IR and LLVM values."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llvmlite import ir

from ...errors import TargetError
from ...ir import (
    MATH_CALLS,
    Binary,
    Broadcast,
    Buffer,
    BufferLoad,
    Call,
    Cast,
    Not,
    PrimExpr,
    Ramp,
    Select,
    Var,
)
from ...ir.functor import IRVisitor
from ...script.printer import message_text as expr_text
from .lltypes import I32, I64, PTR
from .split import Sizes

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


class EmitterBase:
    """The emitter's state and exits; the parts (statements, addressing, conversions,
    arithmetic, math) are mixins over it, joined in `codegen._Emitter`."""

    if TYPE_CHECKING:  # the methods of the other parts, joined in codegen._Emitter
        def __getattr__(self, name: str) -> Any: ...

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
