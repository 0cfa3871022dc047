"""The attention pattern that tdsl's fused CUDA kernel computes, and the strict matcher for it.

The blocks, in this order, each alone in its loop nest (loops = the block's iterators, any order;
the leading batch axes ``b..`` any number, the same everywhere)::

    qk     S[b.., i, j] = 0;  S[b.., i, j] += f32(Q[b.., i, k]) * f32(K[b.., j, k])
    (any of, once each, in either order)
    scale  X[b.., i, j] = S[b.., i, j] * c
    mask   X[b.., i, j] = T.if_then_else(j <= i, S[b.., i, j], NEG)     (also i >= j; or j > i / i < j
                                                                         with the operands swapped)
    max    M[b.., i] = NEG;  M[b.., i] = T.max(M[b.., i], X[b.., i, j])
    exp    E[b.., i, j] = T.exp((X[b.., i, j] - M[b.., i]) * c)       (or without "* c")
    sum    L[b.., i] = 0;  L[b.., i] += E[b.., i, j]
    norm   P[b.., i, j] = E[b.., i, j] / L[b.., i]                     (or T.cast(..., Q's type))
    pv     O[b.., i, d] = 0;  O[b.., i, d] += P[b.., i, j] * f32(V[b.., j, d])   (f32(P) when cast)
    (optional) out  Y[b.., i, d] = T.cast(O[b.., i, d], Q's type)

with Q, K, V float16 or bfloat16 parameters of one shape ``(b.., seq, dim)``, every intermediate
float32 (P may be Q's type) and allocated by the function and read nowhere else, NEG minus infinity
or ``T.min_value("float32")``, the scale factors constants whose product is positive, dim 64 or 128,
seq a multiple of 64. That is ``softmax(scale * Q K^T [causal]) V``: softmax does not depend on the
value subtracted before ``exp``, so a maximum taken before the scale is the same function.
Anything else is not this pattern (`match_attention` says what differed), and the blocks stay with
the other rules.

`FUSED_KERNEL` is the block annotation that asks the CUDA lowering to replace a block wrapping
exactly these blocks (`sch.blockize([...])`) by one call of the kernel (`KERNELS`: `CALL` for the
mma.sync kernel, `CALL_SM90A` for the Hopper one); the lowering matches again and refuses anything else.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import (
    Binary,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    FloatImm,
    For,
    IntImm,
    PrimExpr,
    Select,
    SeqStmt,
    Stmt,
    Var,
    is_true,
)

FUSED_KERNEL = "tdsl.fused_kernel"
KERNEL_NAME = "cuda.flash_attention_fwd"
CALL = "tdsl_flash_attention_fwd"
# the same computation by the Hopper kernel (wgmma + TMA, warp-specialized; needs sm_90a)
KERNEL_NAME_SM90A = "cuda.flash_attention_fwd_sm90a"
CALL_SM90A = "tdsl_flash_attention_fwd_sm90a"
KERNELS = {KERNEL_NAME: CALL, KERNEL_NAME_SM90A: CALL_SM90A}   # annotation value -> the lowered call
DTYPES = ("float16", "bfloat16")
DIMS = (64, 128)
SEQ_TILE = 64
F32_MIN = -3.4028234663852886e38


class NoMatch(Exception):
    """Why the blocks are not the attention pattern (names the block)."""


@dataclass(frozen=True)
class AttentionMatch:
    """The matched blocks (in order), the operands and what the kernel needs."""

    blocks: tuple[str, ...]
    q: Buffer
    k: Buffer
    v: Buffer
    out: Buffer
    intermediates: tuple[Buffer, ...]
    batch: int          # the product of the batch axes (batch x heads)
    seq: int
    dim: int
    dtype: str
    out_dtype: str
    causal: bool
    scale: float


@dataclass
class _Nest:
    block: Block
    loops: list[For]
    store: BufferStore
    init: BufferStore | None
    axes: list[Var]          # the store's index vars


def _nest(stmt: Stmt) -> _Nest:
    loops = []
    while isinstance(stmt, For):
        if stmt.kind != "serial" or stmt.annotations or not (isinstance(stmt.min, IntImm) and stmt.min.value == 0) \
                or not isinstance(stmt.extent, IntImm):
            raise NoMatch(f"loop {stmt.loop_var.name} is not a plain loop from 0 with a constant extent")
        loops.append(stmt)
        stmt = stmt.body
    if not isinstance(stmt, BlockRealize):
        raise NoMatch("a statement is not one block in its loops")
    block = stmt.block
    name = block.name
    if not is_true(stmt.predicate) or block.alloc_buffers or block.annotations:
        raise NoMatch(f"block {name!r} has a predicate, allocations or annotations")
    loop_vars = [f.loop_var for f in loops]
    if len(loops) != len(block.iter_vars) or len(stmt.iter_values) != len(loops):
        raise NoMatch(f"block {name!r}: its loops are not exactly its iterators")
    for iv, value in zip(block.iter_vars, stmt.iter_values):
        loop = next((f for f in loops if f.loop_var is value), None)
        if loop is None or not isinstance(iv.dom.extent, IntImm) or not isinstance(loop.extent, IntImm) \
                or iv.dom.extent.value != loop.extent.value \
                or not (isinstance(iv.dom.min, IntImm) and iv.dom.min.value == 0):
            raise NoMatch(f"block {name!r}: iterator {iv.var.name} is not bound to one whole loop")
    if len({id(v) for v in stmt.iter_values}) != len(loop_vars):
        raise NoMatch(f"block {name!r}: two iterators share a loop")
    if not isinstance(block.body, BufferStore) or (block.init is not None and not isinstance(block.init, BufferStore)):
        raise NoMatch(f"block {name!r} is not one store (with an optional init)")
    store = block.body
    axes = list(store.indices)
    if not all(isinstance(a, Var) for a in axes) or len({id(a) for a in axes}) != len(axes):
        raise NoMatch(f"block {name!r} does not store at its plain iterators")
    kinds = {iv.var: iv.kind for iv in block.iter_vars}
    if any(kinds.get(a) != "S" for a in axes):   # type: ignore[call-overload]
        raise NoMatch(f"block {name!r}: an index of its store is not a spatial iterator")
    return _Nest(block, loops, store, block.init, axes)  # type: ignore[arg-type]


def _extents(n: _Nest) -> dict:
    return {iv.var: iv.dom.extent.value for iv in n.block.iter_vars}  # type: ignore[attr-defined]


def _reduction(n: _Nest) -> Var:
    red = [iv.var for iv in n.block.iter_vars if iv.kind == "R"]
    if len(red) != 1 or len(n.block.iter_vars) != len(n.axes) + 1:
        raise NoMatch(f"block {n.block.name!r} is not a reduction over one axis")
    return red[0]


def _load(e: PrimExpr, buf: Buffer | None, idx: list, what: str, name: str) -> Buffer:
    if not (isinstance(e, BufferLoad) and (buf is None or e.buffer is buf) and len(e.indices) == len(idx)
            and all(a is b for a, b in zip(e.indices, idx))):
        raise NoMatch(f"block {name!r}: expected a load of {what} at {', '.join(v.name for v in idx)}")
    return e.buffer


def _const(e: PrimExpr) -> float | None:
    return float(e.value) if isinstance(e, FloatImm) else None


def _is_neg(e: PrimExpr) -> bool:
    v = _const(e)
    return v is not None and (v == float("-inf") or v <= F32_MIN)


def _binary(e: PrimExpr, op: str) -> tuple[PrimExpr, PrimExpr] | None:
    return (e.a, e.b) if isinstance(e, Binary) and e.op == op else None


def _dims(buf: Buffer) -> list:
    return [int(x.value) if isinstance(x, IntImm) else None for x in buf.shape]


def _f32(buf: Buffer) -> bool:
    return str(buf.dtype) == "float32"


def _cast_load(e: PrimExpr, idx: list, name: str, what: str) -> Buffer:
    if not (isinstance(e, Cast) and str(e.dtype) == "float32"):
        raise NoMatch(f"block {name!r}: {what} is not read through T.cast(..., 'float32')")
    return _load(e.value, None, idx, what, name)


def _added_product(n: _Nest, out: Buffer, name: str):
    """The two factors of `out[axes] = out[axes] + x * y` (either order of each operation)."""
    parts = _binary(n.store.value, "add")
    if parts is None:
        raise NoMatch(f"block {name!r} is not an accumulation")
    acc, prod = parts if isinstance(parts[0], BufferLoad) and parts[0].buffer is out else parts[::-1]
    _load(acc, out, n.axes, out.name, name)
    factors = _binary(prod, "mul")
    if factors is None:
        raise NoMatch(f"block {name!r} does not add a product")
    return factors


def _qk(n: _Nest):
    name = n.block.name
    k = _reduction(n)
    if len(n.axes) < 3:
        raise NoMatch(f"block {name!r}: Q K^T needs batch axes, rows and columns")
    *batch, i, j = n.axes
    s = n.store.buffer
    if not _f32(s) or n.init is None or _const(n.init.value) != 0.0 or n.init.buffer is not s \
            or list(n.init.indices) != n.axes:
        raise NoMatch(f"block {name!r} is not a float32 sum starting at 0")
    factors = _added_product(n, s, name)
    for a, b in (factors, factors[::-1]):
        try:
            q = _cast_load(a, [*batch, i, k], name, "Q")
            kk = _cast_load(b, [*batch, j, k], name, "K")
            return s, q, kk, batch, i, j, k
        except NoMatch:
            continue
    raise NoMatch(f"block {name!r} is not f32(Q[b.., i, k]) * f32(K[b.., j, k])")


def _elementwise(n: _Nest, src: Buffer) -> tuple[str, float | bool]:
    """('scale', c) or ('mask', True) for one block over [b.., i, j] reading `src`."""
    name = n.block.name
    if n.init is not None or len(n.block.iter_vars) != len(n.axes) or not _f32(n.store.buffer):
        raise NoMatch(f"block {name!r} is not an elementwise float32 block")
    *_, i, j = n.axes
    v = n.store.value
    mul = _binary(v, "mul")
    if mul is not None:
        for a, c in (mul, mul[::-1]):
            if _const(c) is not None and isinstance(a, BufferLoad):
                _load(a, src, n.axes, src.name, name)
                return "scale", _const(c)   # type: ignore[return-value]
    if isinstance(v, Call) and v.op == "if_then_else" and len(v.args) == 3:
        cond, yes, no = v.args
    elif isinstance(v, Select):
        cond, yes, no = v.condition, v.true_value, v.false_value
    else:
        raise NoMatch(f"block {name!r} is neither a scale nor a causal mask")
    keep = {("le", j, i), ("ge", i, j)}
    drop = {("gt", j, i), ("lt", i, j)}
    form = (cond.op, cond.a, cond.b) if isinstance(cond, Binary) else None
    if form is not None and any(form[0] == f[0] and form[1] is f[1] and form[2] is f[2] for f in keep):
        value, other = yes, no
    elif form is not None and any(form[0] == f[0] and form[1] is f[1] and form[2] is f[2] for f in drop):
        value, other = no, yes
    else:
        raise NoMatch(f"block {name!r}: the mask's condition is not j <= i (causal)")
    if not _is_neg(other):
        raise NoMatch(f"block {name!r}: the masked value is not -inf (or T.min_value('float32'))")
    _load(value, src, n.axes, src.name, name)
    return "mask", True


def _row_reduce(n: _Nest, op: str, src: Buffer, rows: int) -> Buffer:
    name = n.block.name
    j = _reduction(n)
    out = n.store.buffer
    if not _f32(out) or len(n.axes) != rows or n.init is None or list(n.init.indices) != n.axes:
        raise NoMatch(f"block {name!r} is not a float32 row reduction")
    start = n.init.value
    if not (_is_neg(start) if op == "max" else _const(start) == 0.0):
        raise NoMatch(f"block {name!r} does not start at {'-inf' if op == 'max' else '0'}")
    parts = _binary(n.store.value, op)
    if parts is None:
        raise NoMatch(f"block {name!r} is not a {op} reduction")
    acc, x = parts if isinstance(parts[0], BufferLoad) and parts[0].buffer is out else parts[::-1]
    _load(acc, out, n.axes, out.name, name)
    _load(x, src, [*n.axes, j], src.name, name)
    return out


def _exp(n: _Nest, cur: Buffer, m: Buffer) -> tuple[Buffer, float]:
    """E = T.exp((X - M) [* c]): (E, c)."""
    name = n.block.name
    if n.init is not None or not _f32(n.store.buffer) or len(n.block.iter_vars) != len(n.axes):
        raise NoMatch(f"block {name!r} is not the exponential")
    ex = n.store.value
    if not (isinstance(ex, Call) and ex.op == "exp" and len(ex.args) == 1):
        raise NoMatch(f"block {name!r} is not T.exp(...)")
    arg, scale = ex.args[0], 1.0
    mul = _binary(arg, "mul")
    if mul is not None:
        diff, c = mul if _const(mul[1]) is not None else mul[::-1]
        factor = _const(c)
        if factor is None:
            raise NoMatch(f"block {name!r}: the exponent's factor is not a constant")
        arg, scale = diff, factor
    sub = _binary(arg, "sub")
    if sub is None:
        raise NoMatch(f"block {name!r}: the exponent is not (x - max) [* scale]")
    _load(sub[0], cur, n.axes, cur.name, name)
    _load(sub[1], m, n.axes[:-1], m.name, name)
    return n.store.buffer, scale


def _norm(n: _Nest, e: Buffer, l_buf: Buffer, dtype: str) -> Buffer:
    """P = E / L, or T.cast(E / L, dtype): P."""
    name = n.block.name
    if n.init is not None or len(n.block.iter_vars) != len(n.axes):
        raise NoMatch(f"block {name!r} is not the normalisation")
    p = n.store.buffer
    val = n.store.value
    if str(p.dtype) == dtype and isinstance(val, Cast) and str(val.dtype) == dtype:
        val = val.value
    elif not _f32(p):
        raise NoMatch(f"block {name!r}: P is {p.dtype}, not float32 or {dtype}")
    div = _binary(val, "div")
    if div is None:
        raise NoMatch(f"block {name!r} is not E / L")
    _load(div[0], e, n.axes, e.name, name)
    _load(div[1], l_buf, n.axes[:-1], l_buf.name, name)
    return p


def _pv(n: _Nest, p: Buffer, nbatch: int) -> tuple[Buffer, Buffer, Var, Var]:
    """O = 0; O += P[b.., i, j] * f32(V[b.., j, d]): (O, V, j, d)."""
    name = n.block.name
    red = _reduction(n)
    o = n.store.buffer
    if len(n.axes) != nbatch + 2 or not _f32(o) or n.init is None or _const(n.init.value) != 0.0 \
            or list(n.init.indices) != n.axes:
        raise NoMatch(f"block {name!r} is not a float32 sum starting at 0")
    *ob, oi, od = n.axes
    factors = _added_product(n, o, name)
    for a, b in (factors, factors[::-1]):
        try:
            if _f32(p):
                _load(a, p, [*ob, oi, red], "P", name)
            elif _cast_load(a, [*ob, oi, red], name, "P") is not p:
                continue
            return o, _cast_load(b, [*ob, red, od], name, "V"), red, od
        except NoMatch:
            continue
    raise NoMatch(f"block {name!r} is not P[b.., i, j] * f32(V[b.., j, d])")


def _out_cast(n: _Nest, o: Buffer, dtype: str) -> Buffer:
    """Y = T.cast(O, dtype): Y."""
    name = n.block.name
    if n.init is not None or len(n.block.iter_vars) != len(n.axes) or not (
            isinstance(n.store.value, Cast) and str(n.store.value.dtype) == dtype
            and str(n.store.buffer.dtype) == dtype):
        raise NoMatch(f"block {name!r} after P V is not a cast of O to {dtype}")
    _load(n.store.value.value, o, n.axes, o.name, name)
    return n.store.buffer


class _Chain:
    """The nests in order, read one at a time (NoMatch when they end too early)."""

    def __init__(self, nests: list[_Nest]):
        self.nests = nests
        self.at = 0

    def next(self) -> _Nest:
        if self.at >= len(self.nests):
            raise NoMatch("the blocks end before P V")
        self.at += 1
        return self.nests[self.at - 1]

    def peek(self) -> _Nest | None:
        return self.nests[self.at] if self.at < len(self.nests) else None


def _softmax_input(chain: _Chain, s: Buffer) -> tuple[Buffer, float, bool]:
    """The scale and mask blocks between Q K^T and the max: (their result, scale, causal)."""
    scale, causal, cur, seen = 1.0, False, s, set()
    while (n := chain.peek()) is not None and n.init is None and len(n.block.iter_vars) == len(n.axes):
        kind, value = _elementwise(chain.next(), cur)
        if kind in seen:
            raise NoMatch(f"block {n.block.name!r}: a second {kind}")
        seen.add(kind)
        scale, causal = (scale * float(value), causal) if kind == "scale" else (scale, True)
        cur = n.store.buffer
    return cur, scale, causal


def _check_buffers(m: AttentionMatch, nests: list[_Nest], s: Buffer, o: Buffer, params: list, allocs: list,
                   others: list) -> None:
    """Whole buffers of the right shapes; operands are parameters, intermediates the function's own
    and read by no other statement."""
    from ..ir import collect

    shape = _dims(m.q)
    for nest in nests:
        exts = _extents(nest)
        if [exts[a] for a in nest.axes] != _dims(nest.store.buffer):
            raise NoMatch(f"block {nest.block.name!r} does not cover the whole of {nest.store.buffer.name!r}")
    for b in m.intermediates:
        want = shape if b is o else _dims(s) if len(b.shape) == len(s.shape) else _dims(s)[:-1]
        if _dims(b) != want:
            raise NoMatch(f"intermediate {b.name!r} is not shaped as the scores (or their rows)")
    for b, what in ((m.k, "K"), (m.v, "V"), (m.out, "the output")):
        if _dims(b) != shape:
            raise NoMatch(f"{what} ({b.name!r}) is not shaped as Q")
    if str(m.v.dtype) != m.dtype:
        raise NoMatch(f"V ({m.v.name!r}) is {m.v.dtype}, not {m.dtype} as Q")
    for b in (m.q, m.k, m.v, m.out):
        if b not in params:
            raise NoMatch(f"{b.name!r} is not a parameter of the function")
    if len({id(b) for b in (m.q, m.k, m.v, m.out)}) != 4:
        raise NoMatch("Q, K, V and the output are not four different buffers")
    for b in m.intermediates:
        if b not in allocs:
            raise NoMatch(f"intermediate {b.name!r} is not allocated by the function (it would stay unwritten)")
    for stmt in others:
        used = {ld.buffer for ld in collect(stmt, BufferLoad)} | {st.buffer for st in collect(stmt, BufferStore)}
        hit = [b.name for b in m.intermediates if b in used]
        if hit:
            raise NoMatch(f"intermediate {hit[0]!r} is used outside the attention blocks")


def match_nests(stmts: list[Stmt], params: list, allocs: list[Buffer], others: list[Stmt] | None = None) -> AttentionMatch:
    """The attention pattern in `stmts` (consecutive loop nests), all of them; NoMatch otherwise.
    `params` are the function's buffer parameters, `allocs` its allocated buffers, `others` the
    statements outside the pattern (which must not read the intermediates)."""
    nests = [_nest(x) for x in stmts]
    if len(nests) < 6:
        raise NoMatch("fewer than six blocks")
    chain = _Chain(nests)
    first = chain.next()
    s, q, kb, batch, i, j, _ = _qk(first)
    dtype, shape, ext = str(q.dtype), _dims(q), _extents(first)
    if dtype not in DTYPES or None in shape or str(kb.dtype) != dtype:
        raise NoMatch(f"Q and K are not float16/bfloat16 buffers of one constant shape ({q.name}: {dtype})")
    seq, dim = ext[i], shape[-1]
    if ext[j] != seq or shape[-2] != seq or [ext[b] for b in batch] != shape[:-2]:
        raise NoMatch("Q K^T does not cover Q, or the key sequence is not as long as the query sequence")
    cur, scale, causal = _softmax_input(chain, s)
    m = _row_reduce(chain.next(), "max", cur, len(batch) + 1)
    e, exp_scale = _exp(chain.next(), cur, m)
    l_buf = _row_reduce(chain.next(), "add", e, len(batch) + 1)
    p = _norm(chain.next(), e, l_buf, dtype)
    pv = chain.next()
    o, v_buf, red, od = _pv(pv, p, len(batch))
    if _extents(pv)[red] != seq or _extents(pv)[od] != dim:
        raise NoMatch(f"block {pv.block.name!r} does not sum over the whole key sequence")
    out, out_dtype, inter = o, "float32", [s, m, e, l_buf, p]
    rest = chain.peek()
    if rest is not None:
        out, out_dtype = _out_cast(chain.next(), o, dtype), dtype
        inter.append(o)
        if chain.peek() is not None:
            raise NoMatch(f"block {chain.next().block.name!r} follows the output")
    inter += [n.store.buffer for n in nests if n.store.buffer not in inter and n.store.buffer is not out]
    scale *= exp_scale
    batch_n = 1
    for x in shape[:-2]:
        batch_n *= x
    found = AttentionMatch(tuple(n.block.name for n in nests), q, kb, v_buf, out, tuple(inter), batch_n, seq, dim,
                           dtype, out_dtype, causal, scale)
    _check_buffers(found, nests, s, o, params, allocs, list(others or []))
    if not scale > 0:
        raise NoMatch(f"the softmax scale {scale:g} is not positive")
    if dim not in DIMS or seq % SEQ_TILE:
        raise NoMatch(f"head dim {dim} (the kernel takes {DIMS}) or sequence {seq} (a multiple of {SEQ_TILE})")
    return found


def root_parts(func) -> tuple[list[Stmt], list[Buffer]]:
    """The function's top-level statements and its allocated buffers (root block)."""
    root = func.root_block
    body = root.body if root is not None else func.body
    allocs = list(root.alloc_buffers) if root is not None else []
    stmts = list(body.seq) if isinstance(body, SeqStmt) else [body]
    return stmts, allocs


def find_attention(func, first_block: str) -> AttentionMatch | None:
    """The attention pattern starting at the top-level nest of block `first_block`, or None."""
    from ..ir import collect

    stmts, allocs = root_parts(func)
    params = [p for p in func.params if isinstance(p, Buffer)]
    start = next((k for k, s in enumerate(stmts)
                  if any(r.block.name == first_block for r in collect(s, BlockRealize))), None)
    if start is None:
        return None
    for count in (9, 8, 7, 6):
        chunk = stmts[start:start + count]
        if len(chunk) != count:
            continue
        try:
            return match_nests(chunk, params, allocs, stmts[:start] + stmts[start + count:])
        except (NoMatch, StopIteration):
            continue
    return None
