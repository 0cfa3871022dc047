"""transform_layout's `pad_value=`: fill the padding a layout adds with a known value.

A map such as `lambda i: (i // 4, i % 4)` on a 14-element buffer gives a (4, 4) buffer whose two
last elements hold nothing. With `pad_value`, a block `buffer_<name>_padding` placed after the
last writer of the buffer stores the value there, so that later steps (a vectorized loop over the
padded axis, a tensorized tile) may read it. This is TVM's fallback form of padding; TVM often
rewrites the producer's loops instead (`T.if_then_else` in the store) — the results are equal.

The padding elements are found by inverting the map: its outputs must be indices (`i`, `i + c`),
pairs `(i + c) // d`, `(i + c) % d`, from which `i` is rebuilt, or constants; an element is
padding when a rebuilt index falls outside the old shape or a constant output's index differs
from the constant (`lambda i: (0, (i + 1) // 8, (i + 1) % 8)` on 16 elements: a (1, 3, 8) buffer
whose first element and last seven are padding).
"""
from __future__ import annotations

import dataclasses

from ...arith import simplify
from ...ir import (
    Binary,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    For,
    IntImm,
    IterVar,
    PrimExpr,
    PrimFunc,
    Range,
    SeqStmt,
    Stmt,
    Var,
    as_expr,
    binary,
    collect,
    const,
    free_vars,
    logical_or,
)
from ...ir.tree import all_realizes, block_names, find_path, fresh_name, replace_at, var_names
from ..analysis import expr_text
from ..errors import schedule_error
from ..tree import alloc_site, buffer_names, refresh_block, seq_insert


def has_padding(old_shape, new_shape) -> bool:
    """True when the new shape has more elements than the old one (constant shapes)."""
    if not all(isinstance(s, IntImm) for s in (*old_shape, *new_shape)):
        return False
    old = new = 1
    for s in old_shape:
        old *= s.value
    for s in new_shape:
        new *= s.value
    return new > old


def _offset(e: PrimExpr, params: list[Var]) -> tuple[Var, int] | None:
    """(i, c) when `e` is `i`, `i + c` or `i - c` for an old index i and an integer c."""
    if isinstance(e, Var) and e in params:
        return e, 0
    if isinstance(e, Binary) and e.op in ("add", "sub") and isinstance(e.a, Var) and e.a in params \
            and isinstance(e.b, IntImm):
        return e.a, e.b.value if e.op == "add" else -e.b.value
    return None


def _inverse(params: list[Var], outputs: list[PrimExpr],
             new_vars: list[Var]) -> tuple[dict[Var, PrimExpr], list[PrimExpr]] | None:
    """Each old index as an expression of the new indices, and the conditions on new indices
    that constant outputs pin (`j == 0` for an output 0); None when the map is not made of
    `i + c`, `(i + c) // d` and `(i + c) % d` outputs (c an integer, maybe 0) and constants."""
    whole: dict[Var, tuple[int, PrimExpr]] = {}
    quot: dict[Var, tuple[int, int, PrimExpr]] = {}
    rem: dict[Var, tuple[int, int, PrimExpr]] = {}
    pinned: list[PrimExpr] = []
    for o, n in zip(outputs, new_vars):
        if isinstance(o, IntImm):
            pinned.append(binary("ne", n, const(o.value, n.dtype)))
            continue
        whole_form = _offset(o, params)
        if whole_form is not None:
            whole[whole_form[0]] = (whole_form[1], n)
            continue
        if not (isinstance(o, Binary) and o.op in ("floordiv", "floormod") and isinstance(o.b, IntImm)
                and o.b.value > 0):
            return None
        base = _offset(o.a, params)
        if base is None:
            return None
        (quot if o.op == "floordiv" else rem)[base[0]] = (o.b.value, base[1], n)
    out: dict[Var, PrimExpr] = {}
    for p in params:
        if p in whole:
            c, index = whole[p]
            out[p] = index - const(c, p.dtype) if c else index
        elif p in quot and p in rem and quot[p][:2] == rem[p][:2]:
            d, c, q = quot[p]
            out[p] = q * const(d, p.dtype) + rem[p][2] - const(c, p.dtype)
        else:
            return None
    return out, pinned


def pad_value_expr(func: PrimFunc, block: str, buf: Buffer, pad_value, new_vars: list[Var]) -> PrimExpr:
    """The value stored into the padding at `new_vars`: a constant of the buffer's dtype, or a
    function of the new indices that reads no buffer."""
    value = pad_value
    if callable(pad_value):
        try:
            value = pad_value(*new_vars)
        except Exception as exc:  # noqa: BLE001 - the user's function: report what it did
            raise schedule_error(func, "transform_layout", f"pad_value failed on the new indices: {exc}",
                                 blocks=(block,)) from None
        if isinstance(value, (tuple, list)) and len(value) == 1:
            value = value[0]  # a traced IndexMap gives a 1-tuple
    if isinstance(value, bool) or (isinstance(value, int) and not buf.dtype.is_integer) or \
            (isinstance(value, float) and not buf.dtype.is_float):
        raise schedule_error(func, "transform_layout", f"pad_value {value!r} is a {type(value).__name__}, but "
                             f"{buf.name} holds {buf.dtype}", blocks=(block,),
                             rule="the padding value has the buffer's dtype",
                             fix=f"pass a {buf.dtype} value, e.g. T.{buf.dtype}(0) or {'0' if buf.dtype.is_integer else '0.0'}")
    try:
        value = as_expr(value, buf.dtype)
    except TypeError as exc:
        raise schedule_error(func, "transform_layout", f"pad_value {value!r}: {exc}", blocks=(block,)) from None
    if value.dtype != buf.dtype:
        raise schedule_error(func, "transform_layout", f"pad_value {expr_text(value)} is {value.dtype}, but "
                             f"{buf.name} holds {buf.dtype}", blocks=(block,),
                             rule="the padding value has the buffer's dtype")
    if collect(value, BufferLoad) or free_vars(value) - set(new_vars):
        raise schedule_error(func, "transform_layout", f"pad_value {expr_text(value)} reads a buffer or an outside "
                             "variable", blocks=(block,),
                             rule="the padding value is a constant or a function of the new indices only")
    return value


def add_padding_block(func: PrimFunc, block: str, old: Buffer, new: Buffer, params: list[Var],
                      outputs: list[PrimExpr], pad_value) -> PrimFunc:
    """`func` (already re-laid out to `new`) with a block that stores `pad_value` into every
    element of `new` no element of `old` maps to, right after the last writer of the buffer."""
    taken = var_names(func)
    loop_vars = [Var(fresh_name(f"ax{d}", taken), s.dtype) for d, s in enumerate(new.shape)]
    inverse = _inverse(params, outputs, loop_vars)
    if inverse is None:
        raise schedule_error(func, "transform_layout", f"tdsl cannot tell which elements of the new layout of "
                             f"{old.name} are padding for the map ({', '.join(expr_text(o) for o in outputs)})",
                             blocks=(block,),
                             rule="pad_value needs a map whose outputs are indices i + c, pairs (i + c) // d, "
                                  "(i + c) % d, or constants",
                             fix="leave pad_value out (the padding is then never read), or write the map that way")
    rebuilt, pinned = inverse
    conds: list[PrimExpr] = [binary("ge", simplify(rebuilt[p]), s) for p, s in zip(params, old.shape)]
    conds += [binary("lt", simplify(rebuilt[p]), const(0, p.dtype)) for p in params
              if not (isinstance(rebuilt[p], Var))]
    conds += pinned
    outside: PrimExpr = conds[0]  # a buffer with padding has a dimension
    for cond in conds[1:]:
        outside = logical_or(outside, cond)
    ivs = [IterVar(Var(fresh_name(f"v{d}", taken), s.dtype), Range(const(0, s.dtype), s), "S")
           for d, s in enumerate(new.shape)]
    ivars = [iv.var for iv in ivs]
    value = pad_value_expr(func, block, old, pad_value, ivars)
    names = set(block_names(func)) | buffer_names(func)
    name = fresh_name(f"buffer_{old.name}_padding", names)
    body = refresh_block(Block(name, tuple(ivs), (), (), BufferStore(new, value, tuple(ivars))))
    stmt: Stmt = BlockRealize(tuple(loop_vars), outside, body)
    for v, s in reversed(list(zip(loop_vars, new.shape))):
        stmt = For(v, const(0, s.dtype), s, "serial", stmt)
    site = alloc_site(func, new) or func.body  # a parameter's padding: in the root block
    assert isinstance(site, BlockRealize)  # alloc_site and a function's body are block realizes
    scope = site.block
    items = list(scope.body.seq) if isinstance(scope.body, SeqStmt) else [scope.body]
    last = max((k for k, item in enumerate(items)
                if any(any(w.buffer is new for w in r.block.writes) for r in all_realizes(item))), default=-1)
    new_scope = dataclasses.replace(scope, body=seq_insert(scope.body, last + 1, stmt))
    if scope.name != "root" or scope.iter_vars:
        new_scope = refresh_block(new_scope)
    found = find_path(func.body, lambda x: x is site)
    if found is None:  # the site is the root block or the block allocating the buffer
        raise schedule_error(func, "transform_layout", f"cannot place the padding of {old.name} in {func.name}",
                             blocks=(block,), rule="pad_value pads a buffer inside the function's blocks")
    return replace_at(func, found[1], site, dataclasses.replace(site, block=new_scope))

