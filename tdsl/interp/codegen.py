"""PrimFunc -> Python source: one plain Python function per PrimFunc, run by the interpreter.

The generated code is the reference semantics, so it is kept literal: loops become
`for v in range(...)`, blocks become their bindings, predicate and init test, loads and stores
become numpy element accesses with explicit bounds checks. Checks are left out only where a
small interval analysis proves the index is inside the buffer.

Value representation (see runtime.py): every float, every bool/int that is not int32/int64 and
everything loaded from a buffer is a numpy scalar of its IR dtype, so numpy performs the exact
dtype arithmetic. int32/int64 values built from loop variables and constants are Python ints;
`Val.py` tracks that possibility and such arithmetic is wrapped to its dtype unless the interval
analysis proves it cannot overflow.
"""
from __future__ import annotations

import builtins
import keyword
import math
import re
from dataclasses import dataclass

import numpy as np

from ..dtypes import DataType, int32
from ..ir.buffer import Buffer
from ..ir.expr import (
    BIT_SYMBOLS,
    BITWISE_OPS,
    COMPARE_OPS,
    Binary,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Not,
    PrimExpr,
    Ramp,
    Select,
    StringImm,
    Var,
)
from ..ir.opaque_calls import ASYNC_CALLS, CP_ASYNC, HOPPER_CALLS, TMA_LOAD, TMA_STORE, WGMMA
from ..ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    PrimFunc,
    SeqStmt,
    Stmt,
)
from . import runtime
from .hopper import tma_load_as_copy, tma_store_as_copy, wgmma_as_loops
from .ranges import Rng, _corners, _dtype_range, _fits, _int_binary_range, _union
from .runtime import InterpretError

# CPython refuses more than 20 statically nested loops in one function; deeper nests are
# continued in a nested function.
_MAX_LOOP_DEPTH = 16

_PY_BINOPS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "floormod": "%", "eq": "==", "ne": "!=",
              "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "and": "&", "or": "|",
              **BIT_SYMBOLS}

# Math calls as numpy ufuncs (they keep the argument's dtype, vectors included).
_UFUNCS = {"exp": "np.exp", "log": "np.log", "sqrt": "np.sqrt", "tanh": "np.tanh", "floor": "np.floor",
           "ceil": "np.ceil", "pow": "np.power", "exp2": "np.exp2", "log2": "np.log2", "sin": "np.sin",
           "cos": "np.cos", "round": "np.rint", "trunc": "np.trunc"}

_RESERVED = set(dir(builtins)) | {"np", "math"}

_SIMPLE = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$|^-?\d+$|^\(-\d+\)$")


@dataclass(frozen=True)
class Val:
    """Generated code for an expression, whether it may be a Python int, and its known range."""

    code: str
    py: bool = False
    rng: Rng = None
    upper: str | None = None  # code of a bound known to hold, value < upper (e.g. `n` for a loop over range(n))
    chain: tuple[str, str] | None = None  # (precedence group, code without the outer parentheses)


@dataclass(frozen=True)
class BufInfo:
    """How generated code reaches a buffer: its storage name, shape codes, and (flat mode)
    stride codes and offset code. `strides is None` means the storage is the n-d array itself."""

    name: str
    buffer: Buffer
    shape: tuple[Val, ...]
    strides: tuple[str, ...] | None
    offset: str


def _python_name(name: str) -> str:
    """A Python identifier for a user name; never starts with '_' (reserved for helpers)."""
    text = re.sub(r"\W", "_", name).lstrip("_") or "v"
    if text[0].isdigit():
        text = "v" + text
    if keyword.iskeyword(text) or text in _RESERVED:
        text += "_"
    return text


class PythonCodegen:
    """Builds the source of one Python function that runs a PrimFunc."""

    def __init__(self, func: PrimFunc):
        self.func = func
        self.lines: list[str] = []
        self.header: list[str] = []
        self.globals: dict[str, object] = {}
        self.const_names: dict[tuple[str, str], str] = {}
        self.used: set[str] = set()
        self.vars: dict[Var, Val] = {}
        self.buffers: dict[Buffer, BufInfo] = {}
        self.depth = 0
        self.loop_depth = 0
        self.n_tmp = 0
        self.n_nest = 0
        self.where = f"prim_func {func.name!r}"
        self.sig_vars: list[Var] = []
        self.sig_buffers: list[Buffer] = []

    # naming -------------------------------------------------------------------------------
    def fresh(self, name: str) -> str:
        base = _python_name(name)
        text, k = base, 0
        while text in self.used:
            k += 1
            text = f"{base}_{k}"
        self.used.add(text)
        return text

    def tmp(self) -> str:
        self.n_tmp += 1
        return f"_t{self.n_tmp}"

    def helper(self, name: str, value) -> str:
        self.globals.setdefault(name, value)
        return name

    def np_type(self, dt: DataType) -> str:
        """The name of the numpy scalar type of a dtype in generated code."""
        el = dt.element
        if el.code == "bfloat":
            return self.helper("_bfloat16", el.numpy.type)
        return f"np.{el.numpy.name}"

    def const(self, value, dt: DataType) -> str:
        """A module-level typed constant (so a constant never turns arithmetic into float64)."""
        text = repr(value) if not (isinstance(value, float) and not math.isfinite(value)) else f'float("{value}")'
        key = (str(dt), text)
        if key not in self.const_names:
            name = f"_c{len(self.const_names)}"
            self.const_names[key] = name
            self.header.append(f"{name} = {self.np_type(dt)}({text})")
        return self.const_names[key]

    def wrap(self, dt: DataType) -> str:
        name = f"_wrap_{dt.element}"
        return self.helper(name, runtime.make_wrap(dt.bits, dt.is_int))

    # output ---------------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def generate(self) -> str:
        """The module source: typed constants, then `def <name>(buffers..., vars...)`."""
        func = self.func
        params: list[str] = []
        body_start = len(self.lines)
        self.depth = 1
        for p in func.params:
            if isinstance(p, Var):
                params.append(self.bind_var(p, py=False, rng=None))
                self.sig_vars.append(p)
        for p in func.params:
            if isinstance(p, Buffer):
                for expr in (*p.shape, *p.strides, *([p.elem_offset] if p.elem_offset is not None else [])):
                    for v in _free_vars_in_order(expr):
                        if v not in self.vars:
                            params.append(self.bind_var(v, py=False, rng=None))
                            self.sig_vars.append(v)
        buffer_names = []
        for p in func.params:
            if isinstance(p, Buffer):
                name = self.fresh(p.name)
                buffer_names.append(name)
                self.sig_buffers.append(p)
                self.declare_buffer(p, name)
        self.stmt(func.body)
        if len(self.lines) == body_start:
            self.emit("pass")
        fname = self.fresh(func.name)
        self.entry_name = fname
        signature = ", ".join(buffer_names + params)
        head = [f"# tdsl.interpreter: prim_func {func.name!r}", *self.header, "", "",
                f"def {fname}({signature}):"]
        return "\n".join(head + self.lines) + "\n"

    # variables and buffers ---------------------------------------------------------------------
    def bind_var(self, var: Var, py: bool, rng: Rng) -> str:
        name = self.fresh(var.name)
        self.vars[var] = Val(name, py, rng)
        return name

    def dim_val(self, expr: PrimExpr, label: str) -> Val:
        """A shape/stride entry as code; non-constant ones are computed once into a local."""
        if isinstance(expr, IntImm):
            return Val(str(expr.value), True, (expr.value, expr.value))
        v = self.expr(expr)
        if _SIMPLE.match(v.code):
            return v
        name = self.fresh(label)
        self.emit(f"{name} = {v.code}")
        return Val(name, v.py, v.rng)

    def declare_buffer(self, buf: Buffer, name: str) -> BufInfo:
        if buf.dtype.lanes > 1:
            raise InterpretError(f"buffer {buf.name!r} has the vector element type {buf.dtype}; the interpreter "
                                 "runs buffers of scalar elements only")
        shape = tuple(self.dim_val(s, f"{name}_n{k}") for k, s in enumerate(buf.shape))
        strides: tuple[str, ...] | None = None
        offset = "0"
        has_offset = buf.elem_offset is not None and not (isinstance(buf.elem_offset, IntImm)
                                                         and buf.elem_offset.value == 0)
        if buf.strides or has_offset:
            if buf.strides:
                strides = tuple(self.dim_val(s, f"{name}_s{k}").code for k, s in enumerate(buf.strides))
            else:
                strides = _row_major(shape)
            if has_offset:
                offset = self.dim_val(buf.elem_offset, f"{name}_off").code  # type: ignore[arg-type]
        info = BufInfo(name, buf, shape, strides, offset)
        self.buffers[buf] = info
        return info

    def buffer(self, buf: Buffer) -> BufInfo:
        info = self.buffers.get(buf)
        if info is None:
            raise InterpretError(f"{self.where}: buffer {buf.name!r} is used but not defined here (neither a "
                                 "parameter nor allocated by an enclosing block or Allocate)")
        return info

    def allocate(self, buf: Buffer) -> None:
        name = self.fresh(buf.name)
        info = self.declare_buffer(buf, name)
        shape = ", ".join(v.code for v in info.shape) + ("," if len(info.shape) == 1 else "")
        extra = ""
        if info.strides is not None:
            strides = ", ".join(info.strides) + ("," if len(info.strides) == 1 else "")
            extra = f", ({strides}), {info.offset}"
        scope = f"  # scope {buf.scope}" if buf.scope != "global" else ""
        self.emit(f"{name} = _alloc({buf.name!r}, ({shape}), {str(buf.dtype)!r}{extra}){scope}")

    # statements ---------------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise InterpretError(f"{self.where}: the interpreter cannot run a {type(s).__name__} statement")
        method(s)

    def body(self, s: Stmt) -> None:
        """Emit an indented suite (with `pass` when it produced nothing)."""
        self.depth += 1
        start = len(self.lines)
        saved = dict(self.vars), dict(self.buffers)
        self.stmt(s)
        if len(self.lines) == start:
            self.emit("pass")
        self.vars, self.buffers = saved
        self.depth -= 1

    def stmt_SeqStmt(self, s: SeqStmt) -> None:
        for item in s.seq:
            self.stmt(item)

    def stmt_Evaluate(self, s: Evaluate) -> None:
        if isinstance(s.value, (IntImm, FloatImm)):
            return
        if isinstance(s.value, Call) and s.value.op in ASYNC_CALLS:
            self.async_copy(s.value)
            return
        if isinstance(s.value, Call) and s.value.op in HOPPER_CALLS:
            if s.value.op == TMA_LOAD:
                self.stmt(tma_load_as_copy(s.value))
            if s.value.op == TMA_STORE:
                self.stmt(tma_store_as_copy(s.value))
            if s.value.op == WGMMA:
                self.stmt(wgmma_as_loops(s.value))
            return   # (mbarrier and wgmma waits, fences: nothing to wait for when threads run one after another)
        self.emit(self.expr(s.value).code)

    def async_copy(self, call: Call) -> None:
        """T.ptx_cp_async copies at once (its bytes, as elements along the destination's and the
        source's last axes); the commit and the wait have nothing left to do."""
        if call.op != CP_ASYNC:
            return
        dst, src, nbytes = call.args
        assert isinstance(dst, BufferLoad) and isinstance(src, BufferLoad) and isinstance(nbytes, IntImm)
        count = nbytes.value // dst.buffer.dtype.itemsize
        for k in range(count):
            def at(load: BufferLoad, k: int = k) -> tuple:
                *outer, last = load.indices
                return (*outer, last + k if k else last)
            self.stmt_BufferStore(BufferStore(dst.buffer, BufferLoad(src.buffer, at(src)), at(dst)))

    def stmt_LetStmt(self, s: LetStmt) -> None:
        v = self.expr(s.value)
        name = self.bind_var(s.var, v.py, v.rng)
        self.emit(f"{name} = {v.code}")
        self.stmt(s.body)

    def stmt_IfThenElse(self, s: IfThenElse) -> None:
        self.emit(f"if {self.expr(s.condition).code}:")
        self.body(s.then_case)
        if s.else_case is not None:
            self.emit("else:")
            self.body(s.else_case)

    def stmt_Allocate(self, s: Allocate) -> None:
        saved = dict(self.buffers)
        self.allocate(s.buffer)
        self.stmt(s.body)
        self.buffers = saved

    def stmt_For(self, s: For) -> None:
        if self.loop_depth >= _MAX_LOOP_DEPTH:
            self.outline_loop(s)
            return
        lo, ext = self.expr(s.min), self.expr(s.extent)
        saved = dict(self.vars)
        rng: Rng = None
        if lo.rng is not None:
            hi = ext.rng[1] if ext.rng is not None else _dtype_range(s.loop_var.dtype)[1]
            rng = (lo.rng[0], lo.rng[1] + hi - 1) if ext.rng is not None else (lo.rng[0], hi)
        name = self.bind_var(s.loop_var, py=True, rng=rng)
        if lo.code == "0" and _SIMPLE.match(ext.code):
            self.vars[s.loop_var] = Val(name, True, rng, ext.code)
        bounds = ext.code if lo.code == "0" else f"{lo.code}, {lo.code} + {ext.code}"
        note = ""
        if s.kind != "serial":
            note = f"  # {s.thread_tag if s.kind == 'thread_binding' else s.kind}, run serially"
        self.emit(f"for {name} in range({bounds}):{note}")
        self.loop_depth += 1
        self.body(s.body)
        self.loop_depth -= 1
        self.vars = saved

    def outline_loop(self, s: For) -> None:
        """Continue a very deep loop nest in a nested function (closures see the outer names)."""
        self.n_nest += 1
        name = f"_nest{self.n_nest}"
        self.emit(f"def {name}():")
        saved_depth = self.loop_depth
        self.loop_depth = 0
        self.depth += 1
        self.stmt_For(s)
        self.depth -= 1
        self.loop_depth = saved_depth
        self.emit(f"{name}()")

    def stmt_BlockRealize(self, s: BlockRealize) -> None:
        blk = s.block
        if len(s.iter_values) != len(blk.iter_vars):
            raise InterpretError(f"block {blk.name!r} has {len(blk.iter_vars)} iterators but its realize binds "
                                 f"{len(s.iter_values)} values")
        saved_where = self.where
        self.emit(f"# block {blk.name!r}")
        guarded = not (isinstance(s.predicate, IntImm) and s.predicate.value == 1)
        if guarded:
            self.emit(f"if {self.expr(s.predicate).code}:  # T.where")
            self.depth += 1
        self.where = self.block_where(blk)
        self.block_contents(blk, s.iter_values)
        self.depth -= guarded
        self.where = saved_where

    def block_where(self, blk: Block) -> str:
        """How messages name a place inside a block."""
        return f"prim_func {self.func.name!r}, block {blk.name!r}"

    def stmt_Block(self, blk: Block) -> None:
        if blk.iter_vars:
            raise InterpretError(f"block {blk.name!r} has iterators but no BlockRealize binding them")
        saved_where, self.where = self.where, self.block_where(blk)
        self.emit(f"# block {blk.name!r}")
        self.block_contents(blk, ())
        self.where = saved_where

    def block_contents(self, blk: Block, values: tuple[PrimExpr, ...]) -> None:
        saved = dict(self.vars), dict(self.buffers)
        start = len(self.lines)
        for iv, value in zip(blk.iter_vars, values):
            self.bind_iter(blk, iv, value)
        for buf in blk.alloc_buffers:
            self.allocate(buf)
        if blk.init is not None:
            reduce_vars = [iv for iv in blk.iter_vars if iv.kind == "R"]
            if reduce_vars:
                cond = " and ".join(f"{self.vars[iv.var].code} == {self.expr(iv.dom.min).code}"
                                    for iv in reduce_vars)
                self.emit(f"if {cond}:  # T.init")
                self.body(blk.init)
            else:
                self.stmt(blk.init)
        self.stmt(blk.body)
        if len(self.lines) == start:
            self.emit("pass")
        self.vars, self.buffers = saved

    def bind_iter(self, blk: Block, iv, value: PrimExpr) -> None:
        v = self.expr(value)
        lo, ext = self.expr(iv.dom.min), self.expr(iv.dom.extent)
        name = self.fresh(iv.var.name)
        self.emit(f"{name} = {v.code}")
        dom: Rng = None
        if lo.rng is not None and ext.rng is not None:
            dom = (lo.rng[1], lo.rng[0] + ext.rng[0] - 1)
        proven = v.rng is not None and dom is not None and dom[0] <= v.rng[0] and v.rng[1] <= dom[1]
        symbolic = lo.code == "0" and v.rng is not None and v.rng[0] >= 0 and v.upper == ext.code
        proven = proven or symbolic
        if not proven:
            upper: str | None = ext.code if lo.code == "0" else f"{lo.code} + {ext.code}"
            self.emit(f"if not ({lo.code} <= {name} < {upper}):")
            self.emit(f"    _bad_binding({blk.name!r}, {iv.var.name!r}, {name}, {lo.code}, {ext.code})")
        rng = v.rng
        if dom is not None:
            rng = dom if rng is None else (max(rng[0], dom[0]), min(rng[1], dom[1]))
        upper = ext.code if lo.code == "0" and _SIMPLE.match(ext.code) else None
        self.vars[iv.var] = Val(name, v.py, rng, upper)

    def stmt_BufferStore(self, s: BufferStore) -> None:
        info = self.buffer(s.buffer)
        if len(s.indices) != len(info.shape):
            raise InterpretError(f"{self.where}: buffer {s.buffer.name!r} has {len(info.shape)} dimensions but "
                                 f"is stored to with {len(s.indices)} indices")
        value = self.expr(s.value).code
        idx = [self.expr(i) for i in s.indices]
        if any(i.dtype.lanes > 1 for i in s.indices):
            self.emit(f"_vstore({self.vector_args(info, idx)}, {value})")
            return
        codes, checks = [], []
        for v, dim in zip(idx, info.shape):
            if _in_bounds(v, dim):
                codes.append(v.code)
                continue
            code = v.code
            if not _SIMPLE.match(code):
                code = self.tmp()
                self.emit(f"{code} = {v.code}")
            codes.append(code)
            checks.append(f"0 <= {code} < {dim.code}")
        if checks:
            self.emit(f"if not ({' and '.join(checks)}):")
            self.emit(f"    {self.oob_call(info, codes)}")
        self.emit(f"{info.name}[{self.position(info, codes)}] = {value}")

    # expressions ---------------------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> Val:
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            raise InterpretError(f"{self.where}: the interpreter cannot evaluate a {type(e).__name__} expression")
        return method(e)

    def expr_IntImm(self, e: IntImm) -> Val:
        if e.dtype.is_bool:
            return Val("True" if e.value else "False", True, (int(bool(e.value)),) * 2)
        rng = (e.value, e.value)
        if e.dtype.lanes == 1 and e.dtype in (int32, DataType("int", 64)):
            return Val(str(e.value) if e.value >= 0 else f"({e.value})", True, rng)
        return Val(self.const(e.value, e.dtype), False, rng)

    def expr_FloatImm(self, e: FloatImm) -> Val:
        return Val(self.const(e.value, e.dtype))

    def expr_StringImm(self, e: StringImm) -> Val:
        raise InterpretError(f"{self.where}: a string argument ({e.value!r}) can only appear in an extern call")

    def expr_Var(self, e: Var) -> Val:
        v = self.vars.get(e)
        if v is None:
            raise InterpretError(f"{self.where}: variable {e.name!r} is used outside the statement that defines it")
        return v

    def expr_Binary(self, e: Binary) -> Val:
        a, b = self.expr(e.a), self.expr(e.b)
        dt = e.a.dtype
        vector = e.dtype.lanes > 1
        if e.op in COMPARE_OPS or e.op in ("and", "or"):
            return Val(f"({a.code} {_PY_BINOPS[e.op]} {b.code})", a.py and b.py, (0, 1))
        if e.op in BITWISE_OPS:
            return self.bitwise(e, a, b)
        if e.op in ("min", "max"):
            if vector:
                fn = f"np.{e.op}imum"
            elif dt.is_float:   # NaN on either side gives NaN, as in numpy and the backends
                fn = self.helper(f"_f{e.op}", runtime.fmax if e.op == "max" else runtime.fmin)
            else:
                fn = e.op
            rng = _int_binary_range(e.op, a.rng, b.rng) if dt.is_integer else None
            return Val(f"{fn}({a.code}, {b.code})", a.py or b.py, rng)
        chain = None
        if e.op == "div" and not dt.is_float:
            code = f"_truncdiv({a.code}, {b.code})"
            self.helper("_truncdiv", runtime.truncdiv)
        else:
            # Left-nested chains of one precedence level drop their inner parentheses
            # (`a + b + c`): CPython refuses expressions nested 200 parentheses deep.
            group = "add" if e.op in ("add", "sub") else "mul"
            left = a.chain[1] if a.chain is not None and a.chain[0] == group else a.code
            bare = f"{left} {'/' if e.op == 'div' else _PY_BINOPS[e.op]} {b.code}"
            code, chain = f"({bare})", (group, bare)
        if not dt.is_integer:
            return Val(code, chain=chain)
        py = a.py and b.py
        rng = _int_binary_range(e.op, a.rng, b.rng)
        if not _fits(rng, dt):
            if py:
                code, chain = f"{self.wrap(dt)}({code})", None
            rng = None
        return Val(code, py, rng, chain=chain)

    def bitwise(self, e: Binary, a: Val, b: Val) -> Val:
        """& | ^ << >> as Python's and numpy's operators: two's complement, `>>` arithmetic on
        signed and logical on unsigned values (numpy's), a Python int's `<<` wrapped back into
        its dtype, a shift amount taken modulo the bit width (as every backend). & | ^ of
        values in the dtype stay in it."""
        dt = e.a.dtype
        py = a.py and b.py
        amount, amount_rng = b.code, b.rng
        if e.op in ("shift_left", "shift_right") and not (b.rng is not None and 0 <= b.rng[0]
                                                          and b.rng[1] < dt.bits):
            amount, amount_rng = f"({b.code} & {dt.bits - 1})", (0, dt.bits - 1)
        code = f"({a.code} {_PY_BINOPS[e.op]} {amount})"
        if dt.is_bool:
            return Val(code, py, (0, 1))
        if e.op not in ("shift_left", "shift_right"):
            return Val(code, py, _dtype_range(dt) if dt.lanes == 1 else None)
        rng = None
        if a.rng is not None and dt.lanes == 1:
            rng = _corners((lambda x, y: x << y) if e.op == "shift_left" else (lambda x, y: x >> y), a.rng, amount_rng)
        if not _fits(rng, dt):
            if py:
                code = f"{self.wrap(dt)}({code})"
            rng = None
        return Val(code, py, rng)

    def expr_Not(self, e: Not) -> Val:
        a = self.expr(e.a)
        if e.dtype.lanes > 1:
            return Val(f"np.logical_not({a.code})")
        return Val(f"(not {a.code})", True, (0, 1))

    def expr_Select(self, e: Select) -> Val:
        c, t, f = self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)
        if e.dtype.lanes > 1:
            return Val(f"np.where({c.code}, {t.code}, {f.code})")
        self.helper("_select", runtime.select)
        return Val(f"_select({c.code}, {t.code}, {f.code})", t.py or f.py, _union(t.rng, f.rng))

    def expr_Cast(self, e: Cast) -> Val:
        x = self.expr(e.value)
        src, dst = e.value.dtype, e.dtype
        if dst.lanes > 1:
            return Val(f"{x.code}.astype({self.np_type(dst)})")
        if dst.is_bool:
            return Val(f"({x.code} != 0)", True)
        if dst.is_float:
            return Val(f"{self.np_type(dst)}({x.code})")
        # integer destination
        if src.is_integer or src.is_bool:
            if _fits(x.rng, dst):
                if x.py and dst.bits >= 32 and dst.is_int:
                    return Val(x.code, True, x.rng)
                return Val(f"{self.np_type(dst)}({x.code})", False, x.rng)
            if x.py:
                wrapped = f"{self.wrap(dst)}({x.code})"
                if dst.is_int and dst.bits >= 32:
                    return Val(wrapped, True, None)
                return Val(f"{self.np_type(dst)}({wrapped})")
            return Val(f"{self.np_type(dst)}({x.code})")
        return Val(f"{self.np_type(dst)}({x.code})")

    def expr_Call(self, e: Call) -> Val:
        if e.op == "if_then_else":
            c, t, f = (self.expr(a) for a in e.args)
            if e.args[0].dtype.lanes > 1:
                self.helper("_ite_vector", runtime.ite_vector)
                return Val(f"_ite_vector({c.code}, lambda: {t.code}, lambda: {f.code})")
            return Val(f"({t.code} if {c.code} else {f.code})", t.py or f.py, _union(t.rng, f.rng))
        from ..ir.expr import MATH_CALLS

        if e.op.startswith("llvm.prefetch"):
            return Val("None")  # a cache hint: nothing to do, and its address may lie past the buffer
        if e.op == "tdsl.index_check":
            self.helper("_index_check", runtime.index_check)
            index, extent = self.expr(e.args[0]), self.expr(e.args[1])
            name, axis = getattr(e.args[2], "value", "?"), getattr(e.args[3], "value", 0)
            return Val(f"_index_check({index.code}, {extent.code}, {name!r}, {axis}, "
                       f"{self.where!r})", index.py)
        if e.op == "address_of":
            raise InterpretError(f"{self.where}: the interpreter has no addresses: T.address_of can only be "
                                 "interpreted as the argument of an llvm.prefetch call (a no-op there)")
        if e.op not in MATH_CALLS:
            self.helper("_extern", runtime.extern)
            return Val(f"_extern({e.op!r}, {self.where!r})")
        if len(e.args) != MATH_CALLS[e.op]:
            raise InterpretError(f"{self.where}: {e.op} takes {MATH_CALLS[e.op]} arguments, got {len(e.args)}")
        args = [self.expr(a) for a in e.args]
        arg_dt = e.args[0].dtype
        codes = [a.code for a in args]
        result = self.math_call(e.op, codes, arg_dt, args)
        if arg_dt != e.dtype:
            kind = self.np_type(e.dtype)
            return Val(f"{result.code}.astype({kind})" if e.dtype.lanes > 1 else f"{kind}({result.code})")
        return result

    def math_call(self, op: str, codes: list[str], dt: DataType, args: list[Val]) -> Val:
        x = codes[0]
        if op == "abs":
            rng = None
            if args[0].rng is not None:
                lo, hi = args[0].rng
                rng = (0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), max(abs(lo), abs(hi)))
            code = f"abs({x})"
            if dt.is_integer and args[0].py and not _fits(rng, dt):
                return Val(f"{self.wrap(dt)}({code})", True, None)
            return Val(code, args[0].py, rng if _fits(rng, dt) else None)
        if dt.is_integer and op in ("floor", "ceil", "round", "trunc"):
            return args[0]
        if not dt.is_float:
            raise InterpretError(f"{self.where}: {op} needs a float argument, got {dt}")
        if op in _UFUNCS:
            return Val(f"{_UFUNCS[op]}({', '.join(codes)})")
        one = self.const(1.0, dt.element)
        if op == "rsqrt":
            return Val(f"({one} / np.sqrt({x}))")
        if op == "sigmoid":
            return Val(f"({one} / ({one} + np.exp(-{x})))")
        nptype = dt.element.numpy.type
        if op == "erf":
            return Val(f"{self.helper(f'_erf_{dt.element}', runtime.make_erf(nptype))}({x})")
        if op == "fma":
            return Val(f"{self.helper(f'_fma_{dt.element}', runtime.make_fma(nptype))}({', '.join(codes)})")
        raise InterpretError(f"{self.where}: no interpreter rule for math call {op!r}")

    def expr_BufferLoad(self, e: BufferLoad) -> Val:
        info = self.buffer(e.buffer)
        if len(e.indices) != len(info.shape):
            raise InterpretError(f"{self.where}: buffer {e.buffer.name!r} has {len(info.shape)} dimensions but "
                                 f"is loaded with {len(e.indices)} indices")
        idx = [self.expr(i) for i in e.indices]
        if any(i.dtype.lanes > 1 for i in e.indices):
            return Val(f"_vload({self.vector_args(info, idx)})")
        codes, checks = [], []
        for v, dim in zip(idx, info.shape):
            if _in_bounds(v, dim):
                codes.append(v.code)
            elif _SIMPLE.match(v.code):
                codes.append(v.code)
                checks.append(f"0 <= {v.code} < {dim.code}")
            else:
                t = self.tmp()
                codes.append(t)
                checks.append(f"0 <= ({t} := {v.code}) < {dim.code}")
        access = f"{info.name}[{self.position(info, codes)}]"
        rng = _dtype_range(e.buffer.dtype) if e.buffer.dtype.is_integer else None
        if not checks:
            return Val(access, False, rng)
        failing = self.oob_call(info, [v.code for v in idx])
        return Val(f"({access} if {' and '.join(checks)} else {failing})", False, rng)

    def expr_Ramp(self, e: Ramp) -> Val:
        base, stride = self.expr(e.base), self.expr(e.stride)
        self.helper("_ramp", runtime.ramp)
        return Val(f"_ramp({base.code}, {stride.code}, {e.lanes}, {self.np_type(e.dtype)})")

    def expr_Broadcast(self, e: Broadcast) -> Val:
        v = self.expr(e.value)
        self.helper("_broadcast", runtime.broadcast)
        return Val(f"_broadcast({v.code}, {e.lanes}, {self.np_type(e.dtype)})")

    # access helpers -----------------------------------------------------------------------------
    def position(self, info: BufInfo, codes: list[str]) -> str:
        """The subscript: the index tuple (n-d storage) or the flat position (strided storage)."""
        if info.strides is None:
            return ", ".join(codes) if codes else "()"
        terms = [] if info.offset == "0" else [info.offset]
        for code, stride in zip(codes, info.strides):
            terms.append(code if stride == "1" else f"{code} * {stride}")
        return " + ".join(terms) or "0"

    def oob_call(self, info: BufInfo, codes: list[str]) -> str:
        shape = ", ".join(v.code for v in info.shape) + ("," if len(info.shape) == 1 else "")
        index = ", ".join(codes) + ("," if len(codes) == 1 else "")
        return f"_oob({info.buffer.name!r}, ({index}), ({shape}), {self.where!r})"

    def vector_args(self, info: BufInfo, idx: list[Val]) -> str:
        shape = ", ".join(v.code for v in info.shape) + ("," if len(info.shape) == 1 else "")
        index = ", ".join(v.code for v in idx) + ("," if len(idx) == 1 else "")
        args = f"{info.name}, {info.buffer.name!r}, ({index}), ({shape}), {self.where!r}"
        if info.strides is not None:
            strides = ", ".join(info.strides) + ("," if len(info.strides) == 1 else "")
            args += f", strides=({strides}), offset={info.offset}"
        return args


def _in_bounds(v: Val, dim: Val) -> bool:
    if v.rng is None or v.rng[0] < 0:
        return False
    return (dim.rng is not None and v.rng[1] < dim.rng[0]) or (v.upper is not None and v.upper == dim.code)


def _row_major(shape: tuple[Val, ...]) -> tuple[str, ...]:
    strides: list[str] = []
    acc = "1"
    for dim in reversed(shape):
        strides.append(acc)
        if acc == "1":
            acc = dim.code
        elif dim.rng is not None and dim.rng[0] == dim.rng[1] and acc.isdigit():
            acc = str(int(acc) * dim.rng[0])
        else:
            acc = f"{acc} * {dim.code}"
    return tuple(reversed(strides))


def _free_vars_in_order(expr: PrimExpr) -> list[Var]:
    from ..ir.functor import post_order_visit

    out: list[Var] = []
    post_order_visit(expr, lambda n: out.append(n) if isinstance(n, Var) and n not in out else None)
    return out


BASE_GLOBALS = {
    "__name__": "tdsl.interp.generated",  # tdsl.tracebacks hides these frames from users
    "np": np,
    "math": math,
    "_alloc": runtime.alloc,
    "_oob": runtime.out_of_bounds,
    "_bad_binding": runtime.bad_binding,
    "_vload": runtime.vload,
    "_vstore": runtime.vstore,
}
