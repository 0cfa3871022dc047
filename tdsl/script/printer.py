"""IR -> tdsl script text. `tdsl.parse(script(f))` is structurally equal to `f`.

Every Var and Buffer prints under a name unique in the function, so the text means exactly
the IR even when a schedule has made two loops called `i`.
"""
from __future__ import annotations

import keyword
import math
import re

from ..ir.buffer import Buffer, BufferRegion
from ..ir.expr import (
    BIT_SYMBOLS,
    MATH_CALLS,
    Binary,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Node,
    Not,
    PrimExpr,
    Ramp,
    Range,
    Select,
    StringImm,
    Var,
    is_bitwise_not,
)
from ..ir.functor import free_vars
from ..ir.opaque_calls import ASYNC_CALLS, HOPPER_CALLS, TMA_LOAD, TMA_STORE, WGMMA, WMMA_BUILTINS
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
    flat_seq,
)

INDENT = "    "
_RESERVED = set(keyword.kwlist) | {"T", "range", "min", "max", "abs", "True", "False", "None"}

_BINARY_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%",
                  "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "and": "and", "or": "or",
                  **BIT_SYMBOLS}
# Python's precedence, loosest first (a bool & | ^ prints as the operator, as TVM's parser reads it)
_PREC = {"or": 1, "and": 2, "not": 3, "eq": 4, "ne": 4, "lt": 4, "le": 4, "gt": 4, "ge": 4,
         "bitwise_or": 5, "bitwise_xor": 6, "bitwise_and": 7, "shift_left": 8, "shift_right": 8,
         "add": 9, "sub": 9, "mul": 10, "div": 10, "floordiv": 10, "floormod": 10, "neg": 11, "invert": 11}
_ATOM = 13
_FOR_FUNCS = {"serial": "T.serial", "parallel": "T.parallel", "vectorized": "T.vectorized",
              "unrolled": "T.unroll", "thread_binding": "T.thread_binding"}


def _sanitize(name: str) -> str:
    name = re.sub(r"\W", "_", name) or "v"
    if name[0].isdigit():
        name = "v_" + name
    return name


class _Namer:
    """Gives each Var/Buffer a unique printable name, first come first served."""

    def __init__(self):
        self.names: dict[int, str] = {}
        self.used: set[str] = set(_RESERVED)
        self.keep: list = []
        # base name -> the next suffix to try: every smaller one is taken (names are never
        # released), so 2,000 loops called `i` take linear, not quadratic, time
        self.next_suffix: dict[str, int] = {}

    def name(self, obj) -> str:
        key = id(obj)
        if key not in self.names:
            base = _sanitize(obj.name)
            name, k = base, self.next_suffix.get(base, 1)
            if name in self.used:
                name = f"{base}_{k}"
                while name in self.used:
                    k += 1
                    name = f"{base}_{k}"
                self.next_suffix[base] = k + 1
            self.used.add(name)
            self.names[key] = name
            self.keep.append(obj)
        return self.names[key]


def _float_literal(value: float) -> str:
    if math.isnan(value):
        return '"nan"'
    if math.isinf(value):
        return '"inf"' if value > 0 else '"-inf"'
    return repr(float(value))


class ScriptPrinter:
    def __init__(self, namer: _Namer | None = None):
        self.namer = namer or _Namer()
        self.loops: dict[int, For] = {}
        self.lines: list[str] = []

    # expressions ------------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> str:
        return self._expr(e)[0]

    def _expr(self, e) -> tuple[str, int]:
        """(text, precedence of its top operator)."""
        if isinstance(e, Var):
            return self.namer.name(e), _ATOM
        if isinstance(e, IntImm):
            if e.dtype.is_bool:
                return ("True" if e.value else "False"), _ATOM
            if str(e.dtype) == "int32":
                return str(e.value), (_PREC["neg"] if e.value < 0 else _ATOM)
            return f"T.{e.dtype}({e.value})", _ATOM
        if isinstance(e, FloatImm):
            return f"T.{e.dtype}({_float_literal(e.value)})", _ATOM
        if isinstance(e, StringImm):
            return repr(e.value), _ATOM
        if isinstance(e, Binary):
            # two bare literals would be folded by Python when parsed: spell the first one out
            a, pa = (_explicit(e.a), _ATOM) if _bare(e.a) and _bare(e.b) else self._expr(e.a)
            if e.op in ("min", "max"):
                return f"T.{e.op}({a}, {self.expr(e.b)})", _ATOM
            if is_bitwise_not(e):
                a, pa = (_explicit(e.a), _ATOM) if _bare(e.a) else self._expr(e.a)
                return (f"~({a})" if pa < _PREC["invert"] else f"~{a}"), _PREC["invert"]
            p = _PREC[e.op]
            b, pb = self._expr(e.b)
            if p == 4:  # comparisons chain in Python: parenthesise any comparison operand
                if pa <= p:
                    a = f"({a})"
                if pb <= p:
                    b = f"({b})"
            else:
                if pa < p:
                    a = f"({a})"
                if pb <= p:
                    b = f"({b})"
            return f"{a} {_BINARY_SYMBOL[e.op]} {b}", p
        if isinstance(e, Not):
            a, pa = (_explicit(e.a), _ATOM) if _bare(e.a) else self._expr(e.a)
            if pa < _PREC["not"]:
                a = f"({a})"
            return f"not {a}", _PREC["not"]
        if isinstance(e, Select):
            return (f"T.Select({self.expr(e.condition)}, {self.expr(e.true_value)}, "
                    f"{self.expr(e.false_value)})"), _ATOM
        if isinstance(e, Cast):
            value = _explicit(e.value) if _bare(e.value) else self.expr(e.value)
            return f'T.cast({value}, "{e.dtype}")', _ATOM
        if isinstance(e, Call):
            args = ", ".join(self.expr(a) for a in _implied_args_dropped(e))
            if e.op == "address_of":
                return f"T.address_of({args})", _ATOM
            if e.op == WGMMA and len(e.args) == 8:
                return f'T.{e.op}({args}, b_major="mn")', _ATOM
            if e.op == "if_then_else" or (e.op in MATH_CALLS and e.dtype == e.args[0].dtype) \
                    or e.op in WMMA_BUILTINS or e.op in ASYNC_CALLS or e.op in HOPPER_CALLS:
                return f"T.{e.op}({args})", _ATOM
            sep = ", " if args else ""
            return f'T.call_extern("{e.dtype}", "{e.op}"{sep}{args})', _ATOM
        if isinstance(e, BufferLoad):
            return self.buffer_access(e.buffer, e.indices), _ATOM
        if isinstance(e, Ramp):
            return f"T.Ramp({self.expr(e.base)}, {self.expr(e.stride)}, {e.lanes})", _ATOM
        if isinstance(e, Broadcast):
            return f"T.Broadcast({self.expr(e.value)}, {e.lanes})", _ATOM
        raise TypeError(f"cannot print {type(e).__name__}")

    def buffer_access(self, buffer: Buffer, indices) -> str:
        name = self.namer.name(buffer)
        if not indices:
            return f"{name}[()]"
        return f"{name}[{', '.join(self.expr(i) for i in indices)}]"

    def region(self, r: BufferRegion) -> str:
        parts = []
        for rng in r.region:
            if isinstance(rng.extent, IntImm) and rng.extent.value == 1:
                parts.append(self.expr(rng.min))
            else:
                parts.append(f"{self.expr(rng.min)}:{self.expr(_end(rng))}")
        name = self.namer.name(r.buffer)
        return f"{name}[{', '.join(parts)}]" if parts else f"{name}[()]"

    def shape_entry(self, e: PrimExpr, in_signature: bool) -> str:
        text = self.expr(e)
        if in_signature and not isinstance(e, IntImm):
            return f'"{text}"'
        return text

    def shape(self, shape, in_signature: bool = False) -> str:
        items = [self.shape_entry(s, in_signature) for s in shape]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"

    def buffer_decl_args(self, b: Buffer, in_signature: bool, with_scope_kw: bool = True) -> str:
        args = [self.shape(b.shape, in_signature), f'"{b.dtype}"']
        if b.strides:
            args.append(f"strides={self.shape(b.strides, in_signature)}")
        if b.elem_offset is not None:
            args.append(f"offset={self.shape_entry(b.elem_offset, in_signature)}")
        if b.scope != "global" and with_scope_kw:
            args.append(f'scope="{b.scope}"')
        return ", ".join(args)

    # statements ----------------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def stmt(self, s: Stmt, depth: int) -> None:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise TypeError(f"cannot print {type(s).__name__}")
        method(s, depth)

    def body(self, s: Stmt | None, depth: int) -> None:
        start = len(self.lines)
        if s is not None:
            self.stmt(s, depth)
        if len(self.lines) == start:
            self.emit(depth, "pass")

    def stmt_SeqStmt(self, s: SeqStmt, depth: int) -> None:
        items = flat_seq(s.seq)
        for k, item in enumerate(items):
            last = k == len(items) - 1
            if isinstance(item, LetStmt) and not last:
                self.emit(depth, f"with T.LetStmt({self.expr(item.value)}) as {self.namer.name(item.var)}:")
                self.body(item.body, depth + 1)
            elif isinstance(item, Allocate) and not last:
                b = item.buffer
                self.emit(depth, f'with T.allocate({self.shape(b.shape)}, "{b.dtype}", "{b.scope}") as '
                                 f"{self.namer.name(b)}:")
                self.body(item.body, depth + 1)
            else:
                self.stmt(item, depth)

    def stmt_BufferStore(self, s: BufferStore, depth: int) -> None:
        self.emit(depth, f"{self.buffer_access(s.buffer, s.indices)} = {self.expr(s.value)}")

    def stmt_Evaluate(self, s: Evaluate, depth: int) -> None:
        self.emit(depth, f"T.evaluate({self.expr(s.value)})")

    def stmt_LetStmt(self, s: LetStmt, depth: int) -> None:
        self.emit(depth, f"{self.namer.name(s.var)} = {self.expr(s.value)}")
        self.stmt(s.body, depth)

    def stmt_Allocate(self, s: Allocate, depth: int) -> None:
        b = s.buffer
        self.emit(depth, f'{self.namer.name(b)} = T.allocate({self.shape(b.shape)}, "{b.dtype}", "{b.scope}")')
        self.stmt(s.body, depth)

    def stmt_IfThenElse(self, s: IfThenElse, depth: int, keyword_: str = "if") -> None:
        self.emit(depth, f"{keyword_} {self.expr(s.condition)}:")
        self.body(s.then_case, depth + 1)
        if s.else_case is None:
            return
        if isinstance(s.else_case, IfThenElse):
            self.stmt_IfThenElse(s.else_case, depth, "elif")
        else:
            self.emit(depth, "else:")
            self.body(s.else_case, depth + 1)

    def _is_plain_serial(self, s) -> bool:
        return (isinstance(s, For) and s.kind == "serial" and not s.annotations
                and isinstance(s.min, IntImm) and s.min.value == 0)

    def stmt_For(self, s: For, depth: int) -> None:
        self.loops[id(s.loop_var)] = s
        if self._is_plain_serial(s):
            chain = [s]
            while self._is_plain_serial(chain[-1].body) and not (
                    free_vars(chain[-1].body.extent) & {f.loop_var for f in chain}):
                # an extent that uses an outer loop's variable cannot be one of T.grid's extents
                chain.append(chain[-1].body)
                self.loops[id(chain[-1].loop_var)] = chain[-1]
            if len(chain) > 1:
                names = ", ".join(self.namer.name(f.loop_var) for f in chain)
                extents = ", ".join(self.expr(f.extent) for f in chain)
                self.emit(depth, f"for {names} in T.grid({extents}):")
                self.body(chain[-1].body, depth + 1)
                return
            self.emit(depth, f"for {self.namer.name(s.loop_var)} in range({self.expr(s.extent)}):")
            self.body(s.body, depth + 1)
            return
        starts_at_zero = isinstance(s.min, IntImm) and s.min.value == 0
        if s.kind == "serial" and not s.annotations:
            rng = f"range({self.expr(s.min)}, {self.expr(_end(s))})"
        else:
            args = [self.expr(s.extent)] if starts_at_zero else [self.expr(s.min), self.expr(_end(s))]
            if s.thread_tag is not None:
                args.append(f'thread="{s.thread_tag}"')
            if s.annotations:
                args.append(f"annotations={_dict_literal(s.annotations)}")
            rng = f"{_FOR_FUNCS[s.kind]}({', '.join(args)})"
        self.emit(depth, f"for {self.namer.name(s.loop_var)} in {rng}:")
        self.body(s.body, depth + 1)

    def stmt_BlockRealize(self, s: BlockRealize, depth: int) -> None:
        block = s.block
        self.emit(depth, f'with T.block("{block.name}"):')
        d = depth + 1
        self.iter_vars(s, d)
        if not (isinstance(s.predicate, IntImm) and s.predicate.value == 1):
            self.emit(d, f"T.where({self.expr(s.predicate)})")
        self.emit(d, f"T.reads({', '.join(self.region(r) for r in block.reads)})")
        self.emit(d, f"T.writes({', '.join(self.region(r) for r in block.writes)})")
        if block.annotations:
            self.emit(d, f"T.block_attr({_dict_literal(block.annotations)})")
        for b in block.alloc_buffers:
            self.emit(d, f"{self.namer.name(b)} = T.alloc_buffer({self.buffer_decl_args(b, False)})")
        if block.init is not None:
            self.emit(d, "with T.init():")
            self.body(block.init, d + 1)
        self.body(block.body, d)

    def stmt_Block(self, s: Block, depth: int) -> None:
        raise TypeError(f'block "{s.name}" appears without its BlockRealize')

    def iter_vars(self, s: BlockRealize, depth: int) -> None:
        ivs = s.block.iter_vars
        if ivs and self._remappable(s):
            names = ", ".join(self.namer.name(iv.var) for iv in ivs)
            kinds = "".join(iv.kind for iv in ivs)
            values = ", ".join(self.expr(v) for v in s.iter_values)
            self.emit(depth, f'{names} = T.axis.remap("{kinds}", [{values}])')
            return
        for iv, value in zip(ivs, s.iter_values):
            kind = "spatial" if iv.kind == "S" else "reduce"
            dom = iv.dom
            if isinstance(dom.min, IntImm) and dom.min.value == 0 and dom.min.dtype == iv.var.dtype:
                dom_text = self.expr(dom.extent)
            else:
                dom_text = f"({self.expr(dom.min)}, {self.expr(_end(dom))})"
            self.emit(depth, f"{self.namer.name(iv.var)} = T.axis.{kind}({dom_text}, {self.expr(value)})")

    def _remappable(self, s: BlockRealize) -> bool:
        seen = set()
        for iv, value in zip(s.block.iter_vars, s.iter_values):
            if not isinstance(value, Var) or id(value) in seen or id(value) not in self.loops:
                return False
            seen.add(id(value))
            loop = self.loops[id(value)]
            if iv.var.dtype != value.dtype or not (_same_const(iv.dom.min, loop.min)
                                                   and _same_const(iv.dom.extent, loop.extent)):
                from ..ir.structural import same_expr

                if iv.var.dtype != value.dtype or not (same_expr(iv.dom.min, loop.min)
                                                       and same_expr(iv.dom.extent, loop.extent)):
                    return False
        return True

    # functions -------------------------------------------------------------------------------
    def function(self, f: PrimFunc) -> str:
        params = []
        for p in f.params:
            if isinstance(p, Buffer):
                for dim in (*p.shape, *p.strides, *(() if p.elem_offset is None else (p.elem_offset,))):
                    for v in _vars_in(dim):
                        self.namer.name(v)
        scalars = {id(p) for p in f.params if isinstance(p, Var)}
        symbolic = [v for p in f.params if isinstance(p, Buffer)
                    for dim in (*p.shape, *p.strides, *(() if p.elem_offset is None else (p.elem_offset,)))
                    for v in _vars_in(dim) if id(v) not in scalars]
        # A symbolic dimension that is not int32 cannot be a string in T.Buffer: print the
        # parameters as TVM does, T.handle + `n = T.int64()` + T.match_buffer.
        as_handles = any(str(v.dtype) != "int32" for v in symbolic)
        prelude = []
        if as_handles:
            seen = set()
            for v in symbolic:
                if id(v) not in seen:
                    seen.add(id(v))
                    prelude.append(f"{self.namer.name(v)} = T.{v.dtype}()")
        for p in f.params:
            if isinstance(p, Buffer) and as_handles:
                handle = self.namer.name(Var(f"{p.name.lower()}_handle"))
                params.append(f"{handle}: T.handle")
                prelude.append(f"{self.namer.name(p)} = T.match_buffer({handle}, {self.buffer_decl_args(p, False)})")
            elif isinstance(p, Buffer):
                params.append(f"{self.namer.name(p)}: T.Buffer({self.buffer_decl_args(p, True)})")
            else:
                params.append(f"{self.namer.name(p)}: T.{p.dtype}")
        name = _sanitize(f.name)
        header = f"def {name}({', '.join(params)}):"
        if len(header) > 100 and params:
            self.lines.append(f"def {name}(")
            for p in params:
                self.emit(1, p + ",")
            self.lines.append("):")
        else:
            self.lines.append(header)
        self.lines.insert(0, "@T.prim_func")
        for line in prelude:
            self.emit(1, line)
        literal = tuple((k, v) for k, v in f.attrs if isinstance(v, (bool, int, float, str)))
        if literal:
            self.emit(1, f"T.func_attr({_dict_literal(literal)})")
        for key, value in f.attrs:
            if isinstance(value, tuple) and value and all(isinstance(v, str) for v in value):
                for line in value:
                    self.emit(1, f"# {key}: {line}")
            elif not isinstance(value, (bool, int, float, str)):
                self.emit(1, f"# {key}: {_describe_attr(value)}")
        body = f.body
        if _is_root(body):
            for b in body.block.alloc_buffers:
                self.emit(1, f"{self.namer.name(b)} = T.alloc_buffer({self.buffer_decl_args(b, False)})")
            body = body.block.body
        self.body(body, 1)
        return "\n".join(self.lines) + "\n"


def _bare(e) -> bool:
    """An immediate printed as a plain Python literal (`5`, `True`), which the parser folds."""
    return isinstance(e, IntImm) and (e.dtype.is_bool or str(e.dtype) == "int32")


def _explicit(e: IntImm) -> str:
    """The literal spelled as a typed constant (`T.int32(5)`, `T.bool(True)`): it parses back to
    an immediate, so an operation on it stays an operation."""
    return f"T.bool({bool(e.value)})" if e.dtype.is_bool else f"T.{e.dtype}({e.value})"


def _is_root(body) -> bool:
    return (isinstance(body, BlockRealize) and body.block.name == "root" and not body.block.iter_vars
            and body.block.init is None and not body.block.annotations)


def _same_const(a, b) -> bool:
    return isinstance(a, IntImm) and isinstance(b, IntImm) and a.value == b.value and a.dtype == b.dtype


def _end(r) -> PrimExpr:
    """min + extent, folded when both are constants or min is 0."""
    lo, ext = r.min, r.extent
    if isinstance(lo, IntImm) and lo.value == 0:
        return ext
    if isinstance(lo, IntImm) and isinstance(ext, IntImm):
        return IntImm(lo.value + ext.value, lo.dtype)
    try:
        from ..arith import simplify

        return simplify(lo + ext)
    except ImportError:  # arith not available: print the plain sum
        return lo + ext


def _vars_in(e) -> list:
    from ..ir.functor import post_order_visit

    found = []
    post_order_visit(e, lambda n: found.append(n) if isinstance(n, Var) else None)
    return found


def _describe_attr(value) -> str:
    """Compiler metadata (e.g. the n-d parameters of a lowered function) as a one-line comment."""
    if isinstance(value, tuple):
        return ", ".join(_describe_attr(v) for v in value)
    if isinstance(value, Buffer):
        dims = ", ".join(expr_str(d) for d in value.shape)
        return f"{value.name}[{dims}] {value.dtype}"
    return type(value).__name__


def _dict_literal(pairs) -> str:
    from ..ir.stmt import annotation_text

    return "{" + ", ".join(f"{k!r}: {annotation_text(v)}" for k, v in pairs) + "}"


def script(func: PrimFunc) -> str:
    """The function as tdsl script text (a deep program, e.g. a 3,000-term sum, is printed on a
    big-stack thread: tdsl.deep)."""
    from ..deep import run_deep

    return run_deep(lambda: ScriptPrinter().function(func))


def expr_str(node: Node) -> str:
    """One expression, statement or region as text (names are those the node itself carries)."""
    printer = ScriptPrinter()
    if isinstance(node, PrimExpr):
        return printer.expr(node)
    if isinstance(node, BufferRegion):
        return printer.region(node)
    if isinstance(node, Range):
        return f"{printer.expr(node.min)}:{printer.expr(_end(node))}"
    if isinstance(node, Buffer):
        return printer.namer.name(node)
    if isinstance(node, Stmt):
        printer.stmt(node, 0)
        return "\n".join(printer.lines)
    return repr(node)


def message_text(node) -> str:
    """`expr_str` for error messages: never raises (an unprintable fragment shows its repr)."""
    try:
        return expr_str(node)
    except Exception:  # noqa: BLE001 - a message must not fail because of a printer gap
        return repr(node)


def stmt_str(stmt: Stmt) -> str:
    return expr_str(stmt)


def summary(func: PrimFunc) -> str:
    """One line about `func`: name, signature and block count, as `repr(func)` shows it:
    ``matmul(A: float32[128, 128], B: float32[128, 128], C: float32[128, 128]), 1 block``."""
    from ..ir.tree import walk

    printer = ScriptPrinter()
    params = []
    for p in func.params:
        if isinstance(p, Buffer):
            dims = ", ".join(message_text(d) for d in p.shape)
            params.append(f"{printer.namer.name(p)}: {p.dtype}[{dims}]")
        else:
            params.append(f"{printer.namer.name(p)}: {p.dtype}")
    root = func.root_block
    blocks = sum(1 for s in walk(func.body) if isinstance(s, Block) and s is not root)
    what = f"{blocks} block{'s' if blocks != 1 else ''}"
    if any(k == "tdsl.flat_params" for k, _ in func.attrs):
        what += ", lowered"
    return f"{func.name}({', '.join(params)}), {what}"


def _implied_args_dropped(e: Call) -> tuple:
    """A call's arguments as written: T.ptx_tma_load without its coordinates where they are the
    source element's indices, T.ptx_wgmma without its row bytes where the A tile's rows say them
    (the parser fills both in)."""
    from ..ir.expr import BufferLoad as _Load
    from ..ir.structural import same_expr

    if e.op == TMA_LOAD and isinstance(e.args[1], _Load):
        coords, src = e.args[4:], e.args[1]
        if len(coords) == len(src.indices) and all(same_expr(c, i) for c, i in zip(coords, src.indices)):
            return e.args[:4]
    if e.op == TMA_STORE and isinstance(e.args[0], _Load):   # (dst, src, tmap, *coords: dst's indices)
        coords, dst = e.args[3:], e.args[0]
        if len(coords) == len(dst.indices) and all(same_expr(c, i) for c, i in zip(coords, dst.indices)):
            return e.args[:3]
    if e.op == WGMMA and isinstance(e.args[1], _Load):
        row = e.args[1].buffer.shape[-1]
        if len(e.args[1].buffer.shape) >= 2 and isinstance(row, IntImm) and row.value * 2 == e.args[5].value:
            return e.args[:5]   # (an N-major B's two arguments are implied by its tile too: b_major="mn")
        if len(e.args) == 8:
            return e.args[:6]
    return e.args
