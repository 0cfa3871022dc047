"""Layout primitives: transform_layout (re-index a buffer through a Python lambda) and
storage_align (pad a dimension's stride).

`transform_layout(block, buffer, lambda i, j: (i // 16, j, i % 16))` calls the lambda with
tdsl Vars, so the map is an ordinary IR expression. The new shape is the bounding box of the
map's image; elements of that box outside the image are padding that no one reads. A map that
sends two elements to the same place is refused (checked exhaustively for constant shapes,
symbolic shapes take permutations of the dimensions only).
"""
from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
from collections.abc import Callable

from ...arith import prove, relax, simplify
from ...ir import (
    Block,
    Buffer,
    BufferLoad,
    BufferStore,
    IntImm,
    IRMutator,
    PrimExpr,
    PrimFunc,
    Range,
    Stmt,
    Var,
    as_expr,
    const,
    free_vars,
    replace_buffers,
)
from ..analysis import expr_text
from ..errors import schedule_error
from ..state import find_block, replace_at
from .cache import alloc_site, refresh_touching, resolve_buffer
from .compute_location import eval_int, eval_np

_CHECK_LIMIT = 1 << 20  # elements checked one by one for a one-to-one map


class IndexMap:
    """Wraps `lambda i, j: (i // 16, j, i % 16)`; calling it calls the lambda, `repr` prints it back
    as a lambda over its IR result, so a printed trace replays."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, *indices):
        return self.fn(*indices)

    def __repr__(self) -> str:
        try:
            params = inspect.signature(self.fn).parameters.values()
            if any(p.kind != p.POSITIONAL_OR_KEYWORD for p in params):
                return repr(self.fn)  # the arity is only known against a buffer
            names = [p.name for p in params]
            result = self.fn(*[Var(n) for n in names])
            outs = list(result) if isinstance(result, (tuple, list)) else [result]
            body = ", ".join(expr_text(o) if not isinstance(o, int) else str(o) for o in outs)
            return f"lambda {', '.join(names)}: ({body}{',' if len(outs) == 1 else ''})"
        except Exception:  # noqa: BLE001 - a map that fails symbolically is reported by the primitive
            return repr(self.fn)


class _Reindex(IRMutator):
    """Loads and stores of `old` become accesses of `new` at map(indices)."""

    def __init__(self, old: Buffer, new: Buffer, params: list[Var], outputs: list[PrimExpr]):
        self.old, self.new, self.params, self.outputs = old, new, params, outputs

    def _map(self, indices) -> tuple[PrimExpr, ...]:
        from ...ir import substitute

        vmap = dict(zip(self.params, indices))
        return tuple(simplify(substitute(o, vmap)) for o in self.outputs)

    def visit_BufferLoad(self, node: BufferLoad):
        hit = node.buffer is self.old
        node = self.generic_visit(node)
        return BufferLoad(self.new, self._map(node.indices)) if hit else node

    def visit_BufferStore(self, node: BufferStore):
        hit = node.buffer is self.old
        node = self.generic_visit(node)
        return BufferStore(self.new, node.value, self._map(node.indices)) if hit else node

    def visit_buffer(self, buffer: Buffer) -> Buffer:
        return self.new if buffer is self.old else buffer


def _param_names(fn: Callable, ndim: int) -> list[str]:
    """The lambda's parameter names; a `*indices` parameter takes the remaining dimensions."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return [f"i{d}" for d in range(ndim)]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    if star is not None:
        names += [f"{star}{d}" for d in range(max(ndim - len(names), 0))]
    return names


def _call_map(func: PrimFunc, block: str, buf: Buffer, index_map: Callable) -> tuple[list[Var], list[PrimExpr]]:
    index_map = index_map.fn if isinstance(index_map, IndexMap) else index_map
    if not callable(index_map):
        raise schedule_error(func, "transform_layout", f"index_map must be a function such as "
                             f"`lambda i, j: (i // 16, j, i % 16)`, not {type(index_map).__name__}", blocks=(block,))
    names = _param_names(index_map, buf.ndim)
    if len(names) != buf.ndim:
        raise schedule_error(func, "transform_layout", f"the index map takes {len(names)} indices but "
                             f"{buf.name} has {buf.ndim} dimensions", blocks=(block,),
                             rule="the index map takes one index per dimension of the buffer")
    params = [Var(n, s.dtype) for n, s in zip(names, buf.shape)]
    try:
        result = index_map(*params)
    except Exception as exc:  # noqa: BLE001 - the user's lambda: report what it did, in their terms
        raise schedule_error(func, "transform_layout", f"the index map failed on symbolic indices: {exc}",
                             blocks=(block,), rule="the index map is called with tdsl variables; use + - * // % "
                             "and T.min / T.max, not Python control flow") from None
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    try:
        outputs = [as_expr(o, params[0].dtype if params else None) for o in outputs]
    except TypeError as exc:
        raise schedule_error(func, "transform_layout", f"the index map returned {result!r}: {exc}",
                             blocks=(block,)) from None
    for o in outputs:
        if not o.dtype.is_integer or free_vars(o) - set(params):
            raise schedule_error(func, "transform_layout", f"the index map result {expr_text(o)} is not an integer "
                                 "expression of the indices", blocks=(block,))
    return params, outputs


def _new_shape(func: PrimFunc, block: str, buf: Buffer, params, outputs) -> tuple[PrimExpr, ...]:
    ranges = {p: Range(const(0, s.dtype), s) for p, s in zip(params, buf.shape)}
    shape = []
    for o in outputs:
        lo, hi = relax(o, ranges)
        if not prove(lo >= 0):
            raise schedule_error(func, "transform_layout", f"the new index {expr_text(o)} can be negative",
                                 blocks=(block,), rule="the index map must send every element to indices >= 0")
        shape.append(simplify(hi + 1))
    return tuple(shape)


def _check_one_to_one(func: PrimFunc, block: str, buf: Buffer, params, outputs, shape) -> None:
    fail = schedule_error(func, "transform_layout", f"the index map sends two elements of {buf.name} to the "
                          "same place", blocks=(block,),
                          rule="a layout transformation must be one-to-one")
    if all(isinstance(s, IntImm) for s in buf.shape + shape) and math.prod(s.value for s in buf.shape) <= _CHECK_LIMIT:
        import numpy as np

        grids = np.meshgrid(*[np.arange(s.value) for s in buf.shape], indexing="ij")
        env = {p: g.ravel() for p, g in zip(params, grids)}
        try:
            cols = [np.broadcast_to(np.asarray(eval_np(o, env)), grids[0].ravel().shape) for o in outputs]
        except ValueError:
            cols = None
        if cols is not None:
            flat = np.ravel_multi_index(cols, tuple(s.value for s in shape)) if cols else np.zeros(1, int)
            if len(np.unique(flat)) != flat.size:
                raise fail
            return
        points = itertools.product(*[range(s.value) for s in buf.shape])
        seen = set()
        for pt in points:
            key = tuple(eval_int(o, dict(zip(params, pt))) for o in outputs)
            if key in seen:
                raise fail
            seen.add(key)
        return
    if not (len(outputs) == len(params) and all(isinstance(o, Var) for o in outputs) and
            set(outputs) == set(params)):
        raise schedule_error(func, "transform_layout", f"{buf.name} has a symbolic shape; tdsl can only check "
                             "that a permutation of its dimensions is one-to-one", blocks=(block,),
                             rule="a layout transformation must be one-to-one",
                             fix="use a permutation such as lambda i, j: (j, i), or a constant shape")


def transform_layout(func: PrimFunc, block: str, buffer, index_map: Callable) -> tuple[PrimFunc, None]:
    """Store an intermediate buffer in a new layout: element idx moves to index_map(*idx)."""
    realize, _ = find_block(func, block, "transform_layout")
    buf = resolve_buffer(func, realize.block, buffer, "transform_layout")
    if alloc_site(func, buf) is None:
        raise schedule_error(func, "transform_layout", f"{buf.name} is a parameter of {func.name}: the caller "
                             "passes it in its own layout", blocks=(block,),
                             rule="transform_layout re-lays out buffers the function allocates",
                             fix=f"copy it first with sch.cache_read(block, {buf.name!r}, \"global\") and "
                                 "transform the copy")
    params, outputs = _call_map(func, block, buf, index_map)
    shape = _new_shape(func, block, buf, params, outputs)
    _check_one_to_one(func, block, buf, params, outputs, shape)
    new = Buffer(buf.name, shape, buf.dtype, scope=buf.scope)
    body = _Reindex(buf, new, params, outputs).visit(func.body)
    body = _Realloc(buf, new).visit(body)
    return func.with_body(refresh_touching(body, {new})), None


class _Realloc(IRMutator):
    def __init__(self, old: Buffer, new: Buffer):
        self.old, self.new = old, new

    def visit_Block(self, node: Block):
        node = self.generic_visit(node)
        if any(b is self.old for b in node.alloc_buffers):
            return dataclasses.replace(node, alloc_buffers=tuple(self.new if b is self.old else b
                                                                 for b in node.alloc_buffers))
        return node

    def generic_visit(self, node):
        return super().generic_visit(node) if isinstance(node, Stmt) else node


# storage_align --------------------------------------------------------------------------------

def storage_align(func: PrimFunc, block: str, buffer, axis: int, factor: int, offset: int) -> tuple[PrimFunc, None]:
    """Pad the stride of dimension `axis` of an intermediate buffer so that stride % factor == offset
    (e.g. to avoid shared-memory bank conflicts); recorded as the buffer's strides."""
    realize, path = find_block(func, block, "storage_align")
    buf = resolve_buffer(func, realize.block, buffer, "storage_align")
    if alloc_site(func, buf) is None:
        raise schedule_error(func, "storage_align", f"{buf.name} is a parameter of {func.name}: its strides "
                             "are the caller's", blocks=(block,),
                             rule="storage_align pads buffers the function allocates",
                             fix="cache_read / cache_write it into a buffer and align that")
    ndim = buf.ndim
    if isinstance(axis, bool) or not isinstance(axis, int) or not -ndim <= axis < ndim:
        raise schedule_error(func, "storage_align", f"axis {axis!r} is out of range for the {ndim}-d buffer "
                             f"{buf.name}", blocks=(block,), rule=f"axis is -{ndim} .. {ndim - 1}")
    axis %= ndim
    for what, v, low in (("factor", factor, 1), ("offset", offset, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise schedule_error(func, "storage_align", f"{what} {v!r} must be an int >= {low}", blocks=(block,),
                                 rule="storage_align makes stride % factor == offset")
    if offset >= factor:
        raise schedule_error(func, "storage_align", f"offset {offset} is not below factor {factor}",
                             blocks=(block,), rule="storage_align makes stride % factor == offset, so "
                             "0 <= offset < factor")
    if axis == ndim - 1:
        raise schedule_error(func, "storage_align", f"axis {axis} is the innermost dimension of {buf.name}, "
                             "whose stride is 1", blocks=(block,),
                             rule="storage_align pads the stride of an outer dimension")
    key = f"storage_align.{buf.name}"
    aligns = _parse_aligns(dict(realize.block.annotations).get(key, ""))
    aligns[axis] = (factor, offset)
    strides: list[PrimExpr] = [const(1, buf.shape[-1].dtype)] * ndim
    for d in range(ndim - 2, -1, -1):
        base = simplify(strides[d + 1] * buf.shape[d + 1])
        if d in aligns:
            f, o = aligns[d]
            base = simplify(base + (f + o - base % f) % f)
        strides[d] = base
    new = buf.with_(strides=tuple(strides))
    # every alignment asked through this block is remembered, so that aligning a second axis
    # recomputes the strides with both
    text = ";".join(f"{a}:{f}:{o}" for a, (f, o) in sorted(aligns.items()))
    block = realize.block
    notes = tuple((k, v) for k, v in block.annotations if k != key) + ((key, text),)
    func = replace_at(func, path, realize, dataclasses.replace(realize, block=dataclasses.replace(
        block, annotations=notes)))
    return func.with_body(replace_buffers(func.body, {buf: new})), None


def _parse_aligns(text: str) -> dict[int, tuple[int, int]]:
    out = {}
    for item in filter(None, str(text).split(";")):
        a, f, o = (int(x) for x in item.split(":"))
        out[a] = (f, o)
    return out
