"""Layout primitives: transform_layout (re-index a buffer through a Python lambda) and
storage_align (pad a dimension's stride).

`transform_layout(block, buffer, lambda i, j: (i // 16, j, i % 16))` calls the lambda with
tdsl Vars, so the map is an ordinary IR expression. The new shape is the bounding box of the
map's image; elements of that box outside the image are padding that no one reads. A map that
sends two elements to the same place is refused. For constant shapes the map is proven one-to-one
when it is built from digits of the indices (i, i // c, i % c, (i // c) % d: every output a
mixed-radix number of digits, so the outputs give the indices back), whatever the buffer's size;
other maps are checked element by element up to _CHECK_LIMIT elements. Symbolic shapes take
permutations of the dimensions only.
"""
from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
from collections.abc import Callable

from ...arith import eval_array, eval_int, prove, relax, simplify
from ...arith.polynomial import polynomial_bounds
from ...ir import (
    Binary,
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
from ...ir.tree import all_realizes, replace_at
from ..analysis import expr_text
from ..errors import schedule_error
from ..tree import alloc_site, find_block, refresh_touching
from .cache import resolve_buffer
from .layout_padding import add_padding_block, has_padding, pad_value_expr

_CHECK_LIMIT = 1 << 20  # elements checked one by one for a one-to-one map


class IndexMap:
    """Wraps `lambda i, j: (i // 16, j, i % 16)`; calling it calls the lambda, `repr` prints it back
    as a lambda over its IR result, so a printed trace replays."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, *indices):
        return self.fn(*indices)

    def bind_dims(self, dims: dict) -> IndexMap:
        """The map with the symbolic dimensions it uses (by name) replaced by those in `dims`
        (name -> Var), for replaying a trace on another function."""
        import functools

        from ...ir import substitute

        fn = self.fn

        @functools.wraps(fn)
        def bound(*indices):
            result = fn(*indices)
            outs = list(result) if isinstance(result, (tuple, list)) else [result]
            return tuple(substitute(o, {v: dims[v.name] for v in free_vars(o) if v.name in dims and v is not
                                        dims[v.name] and v not in indices}) if isinstance(o, PrimExpr) else o
                         for o in outs)

        return IndexMap(bound)

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
        self.ranges: dict[Var, Range] = {}   # the enclosing blocks' iterators: new indices are simplified in them

    def _map(self, indices) -> tuple[PrimExpr, ...]:
        from ...ir import substitute

        vmap = dict(zip(self.params, indices))
        return tuple(simplify(substitute(o, vmap), self.ranges) for o in self.outputs)

    def visit_Block(self, node: Block):
        saved = dict(self.ranges)
        self.ranges.update((iv.var, iv.dom) for iv in node.iter_vars)
        try:
            return self.generic_visit(node)
        finally:
            self.ranges = saved

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


def _param_names(fn: Callable, ndim: int) -> tuple[list[str], int]:
    """The lambda's parameter names, and how many of them are keyword-only: a `*indices`
    parameter takes the dimensions the others leave (`lambda *indices, k:` names the last one)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return [f"i{d}" for d in range(ndim)], 0
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keywords = [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    if star is not None:
        names += [f"{star}{d}" for d in range(max(ndim - len(names) - len(keywords), 0))]
    return names + keywords, len(keywords)


def _call_map(func: PrimFunc, block: str, buf: Buffer, index_map: Callable) -> tuple[list[Var], list[PrimExpr]]:
    return call_index_map(func, "transform_layout", block, index_map, [s.dtype for s in buf.shape],
                          f"{buf.name} has {buf.ndim} dimensions", "one index per dimension of the buffer",
                          shape_vars(func))


def shape_vars(func: PrimFunc) -> frozenset:
    """The variables of the function's buffer shapes (its symbolic dimensions, such as `n`)."""
    out: set = set()
    for p in func.params:
        if isinstance(p, Buffer):
            for dim in p.shape:
                out |= free_vars(dim)
    return frozenset(out)


def call_index_map(func: PrimFunc, primitive: str, block: str, index_map: Callable, dtypes: list,
                   has: str, takes: str, dims: frozenset = frozenset()) -> tuple[list[Var], list[PrimExpr]]:
    """Call the user's index map with one tdsl Var per entry of `dtypes`: (the Vars, its integer
    results). `has` / `takes` word the arity error ("B has 2 dimensions", "one index per ...");
    the results may also use the variables `dims` (the function's symbolic dimensions)."""
    index_map = index_map.fn if isinstance(index_map, IndexMap) else index_map
    if not callable(index_map):
        raise schedule_error(func, primitive, f"index_map must be a function such as "
                             f"`lambda i, j: (i // 16, j, i % 16)`, not {type(index_map).__name__}", blocks=(block,))
    names, keywords = _param_names(index_map, len(dtypes))
    if len(names) != len(dtypes):
        raise schedule_error(func, primitive, f"the index map takes {len(names)} indices but {has}",
                             blocks=(block,), rule=f"the index map takes {takes}")
    params = [Var(n, dt) for n, dt in zip(names, dtypes)]
    try:
        positional = len(params) - keywords
        result = index_map(*params[:positional], **{p.name: p for p in params[positional:]})
    except Exception as exc:  # noqa: BLE001 - the user's lambda: report what it did, in their terms
        raise schedule_error(func, primitive, f"the index map failed on symbolic indices: {exc}",
                             blocks=(block,), rule="the index map is called with tdsl variables; use + - * // % "
                             "and T.min / T.max, not Python control flow") from None
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    try:
        outputs = [as_expr(o, params[0].dtype if params else None) for o in outputs]
    except TypeError as exc:
        raise schedule_error(func, primitive, f"the index map returned {result!r}: {exc}",
                             blocks=(block,)) from None
    scalars = {p for p in func.params if isinstance(p, Var)} - dims
    for o in outputs:
        used = sorted(v.name for v in free_vars(o) & scalars)
        if o.dtype.is_integer and used and not free_vars(o) - set(params) - dims - scalars:
            raise schedule_error(func, primitive, f"the index map result {expr_text(o)} uses the scalar parameter "
                                 f"{used[0]}, whose value tdsl does not know", blocks=(block,),
                                 rule="a layout is proved one-to-one (and its shape bounded) from the indices and "
                                      "the buffers' dimensions; a map like i // n, i % n is one-to-one only for "
                                      "n >= 1, which tdsl, having no assumptions, cannot know of a scalar",
                                 fix=f"use a constant, or a symbolic dimension of a buffer instead of {used[0]}")
        if not o.dtype.is_integer or free_vars(o) - set(params) - dims:
            raise schedule_error(func, primitive, f"the index map result {expr_text(o)} is not an integer "
                                 "expression of the indices", blocks=(block,))
    return params, outputs


def new_layout_shape(func: PrimFunc, block: str, buf: Buffer, params, outputs,
               primitive: str = "transform_layout") -> tuple[PrimExpr, ...]:
    ranges = {p: Range(const(0, s.dtype), s) for p, s in zip(params, buf.shape)}
    # symbolic dimensions are sizes: known >= 0 when proving, kept symbolic in the shape
    sizes = {v: Range(const(0, v.dtype), const(2**31 - 1, v.dtype))
             for v in set().union(*(free_vars(o) for o in outputs)) - set(params)}
    shape = []
    for o in outputs:
        lo, hi = polynomial_bounds(o, ranges, set(sizes)) or relax(o, ranges)
        if not prove(lo >= 0, sizes):
            raise schedule_error(func, primitive, f"the new index {expr_text(o)} can be negative",
                                 blocks=(block,), rule="the index map must send every element to indices >= 0")
        shape.append(simplify(hi + 1))
    return tuple(shape)


def check_one_to_one(func: PrimFunc, block: str, buf: Buffer, params, outputs, shape,
                      primitive: str = "transform_layout", assume_injective: bool = False) -> None:
    """Refuse a map that sends two elements of `buf` to one place: proved analytically for
    permutations and mixed-radix maps, else checked element by element up to _CHECK_LIMIT.
    (`buf` may be a stand-in whose shape is a block's iterator box, named for the messages.)
    Over a symbolic shape tdsl proves permutations only; `assume_injective` (TVM's
    assume_injective_transform) takes the user's word for other maps, after checking them
    element by element with each symbolic dimension at 1, 2, 3 and 5."""
    extents = [s.value if isinstance(s, IntImm) else None for s in buf.shape]
    if None in extents or not all(isinstance(s, IntImm) for s in shape):
        if is_permutation(params, outputs):
            return
        if not assume_injective:
            raise schedule_error(func, primitive, f"{buf.name} has a symbolic shape; tdsl can only prove "
                                 "that a permutation of its dimensions is one-to-one", blocks=(block,),
                                 rule="a layout transformation must be one-to-one",
                                 fix="use a permutation such as lambda i, j: (j, i), or a constant shape, or "
                                     "pass assume_injective_transform=True if the map is one-to-one for every "
                                     "size (tdsl then checks it at small sizes)")
        _check_small_sizes(func, primitive, block, buf, params, outputs)
        return
    if is_permutation(params, outputs) or _mixed_radix(params, outputs, extents):
        return
    size = math.prod(extents)
    new_shape = tuple(s.value for s in shape)
    pair = _collision(params, outputs, _probe_points(params, outputs, extents), new_shape)
    if pair is None and size <= _CHECK_LIMIT:
        pair = _collision(params, outputs, _all_points(extents), new_shape)
    if pair is not None:
        (a, b), dest = pair
        raise schedule_error(func, primitive, f"the index map sends {_element(buf, a)} and "
                             f"{_element(buf, b)} to the same place, [{', '.join(map(str, dest))}] of the "
                             "new layout", blocks=(block,), rule="a layout transformation must be one-to-one")
    if size > _CHECK_LIMIT:
        raise schedule_error(
            func, primitive, f"could not prove that the index map ({_outputs_text(outputs)}) is "
            f"one-to-one on {buf.name} ({size} elements): tdsl proves maps whose outputs are sums of i, "
            "i // c, i % c and (i // c) % d with constants c, d (those used on one index dividing one another), "
            f"and checks other maps element by element up to {_CHECK_LIMIT} elements only",
            blocks=(block,), rule="a layout transformation must be one-to-one",
            fix="write the map as sums of i // c and i % c terms (e.g. lambda k, j: (j // 16, k, j % 16)), "
                f"or declare {buf.name} in the new layout in the function definition")


def _check_small_sizes(func: PrimFunc, primitive: str, block: str, buf: Buffer, params, outputs) -> None:
    """Refuse a map over a symbolic shape that sends two elements to one place when each of its
    symbolic dimensions is 1, 2, 3 or 5 (every combination, up to 4 variables)."""
    dims = sorted(set().union(*(free_vars(s) for s in buf.shape), *(free_vars(o) for o in outputs)) - set(params),
                  key=lambda v: v.name)[:4]
    for values in itertools.product((1, 2, 3, 5), repeat=len(dims)):
        env = dict(zip(dims, values))
        extents = [eval_int(s, env) for s in buf.shape]
        if math.prod(extents) == 0:
            continue
        pair = _collision(params, outputs, _all_points(extents), sizes=env)
        if pair is not None:
            (a, b), _ = pair
            sizes = ", ".join(f"{v.name} = {x}" for v, x in env.items())
            raise schedule_error(func, primitive, f"the index map ({_outputs_text(outputs)}) sends two elements of "
                                 f"{buf.name} to one place when {sizes} ({_element(buf, a)} and {_element(buf, b)}), "
                                 "although assume_injective_transform=True says it is one-to-one", blocks=(block,),
                                 rule="a layout transformation must be one-to-one for every size")


def is_permutation(params: list[Var], outputs: list[PrimExpr]) -> bool:
    return (len(outputs) == len(params) and all(isinstance(o, Var) for o in outputs)
            and {id(o) for o in outputs} == {id(p) for p in params})


def _outputs_text(outputs: list[PrimExpr]) -> str:
    return ", ".join(expr_text(o) for o in outputs) + ("," if len(outputs) == 1 else "")


def _element(buf: Buffer, point) -> str:
    return f"{buf.name}[{', '.join(str(int(x)) for x in point)}]"


# proof: each index is cut into digits, (i // c_l) % (c_{l+1} // c_l), and every output is a
# mixed-radix number of digits, so the outputs give back every digit and so every index ------------

_Slice = tuple[int, int, int | None]  # (dimension d, lo, hi): (i_d // lo) % (hi // lo); hi None: i_d // lo
_Form = tuple[dict[_Slice, int], int]  # sum(coeff * slice) + constant


def _mixed_radix(params: list[Var], outputs: list[PrimExpr], extents: list[int]) -> bool:
    """True when the map is proven one-to-one on the box `extents`; False when undecided."""
    forms = [slice_form(o, params, extents) for o in outputs]
    if any(f is None for f in forms):
        return False
    digits = slice_digits(forms, extents)
    if digits is None:
        return False
    rows = [digit_row(f, digits) for f in forms]
    if not decomposition_holds(params, outputs, forms, digits, rows, extents):
        return False
    return _digits_recoverable(rows, {key: r for ds in digits for key, r in ds})


def slice_form(e: PrimExpr, params: list[Var], extents: list[int]) -> _Form | None:
    """The output as slices of the indices; the simplifier may first have to distribute a
    division, as in (i * 8 + j) // 4 -> i * 2 + j // 4 when j < 8."""
    pos = {id(p): d for d, p in enumerate(params)}
    form = _parse_slices(e, pos)
    if form is None:
        form = _parse_slices(simplify(e, _box(params, extents)), pos)
    if form is None:
        return None
    terms: dict[_Slice, int] = {}
    for (d, lo, hi), c in form[0].items():
        if lo >= extents[d]:  # i // lo == 0 for every i in range
            continue
        key = (d, lo, None if hi is not None and hi >= extents[d] else hi)
        terms[key] = terms.get(key, 0) + c
    return {k: c for k, c in terms.items() if c}, form[1]


def _box(params: list[Var], extents: list[int]) -> dict[Var, Range]:
    return {p: Range(const(0, p.dtype), const(n, p.dtype)) for p, n in zip(params, extents)}


def _parse_slices(e: PrimExpr, pos: dict[int, int]) -> _Form | None:
    """`e` as a sum of slices of the indices, or None when it is not one."""
    if isinstance(e, IntImm):
        return {}, e.value
    if isinstance(e, Var):
        return None if id(e) not in pos else ({(pos[id(e)], 1, None): 1}, 0)
    if not isinstance(e, Binary):
        return None
    if e.op in ("add", "sub", "mul"):
        a, b = _parse_slices(e.a, pos), _parse_slices(e.b, pos)
        if a is None or b is None:
            return None
        if e.op == "mul":
            if a[0] and b[0]:
                return None
            (form, c), k = (a, b[1]) if not b[0] else (b, a[1])
            return {s: v * k for s, v in form.items()}, c * k
        sign = 1 if e.op == "add" else -1
        terms = dict(a[0])
        for s, v in b[0].items():
            terms[s] = terms.get(s, 0) + sign * v
        return terms, a[1] + sign * b[1]
    if e.op in ("floordiv", "floormod") and isinstance(e.b, IntImm) and e.b.value > 0:
        a = _parse_slices(e.a, pos)
        if a is None:
            return None
        c = e.b.value
        if not a[0]:
            return {}, (a[1] // c if e.op == "floordiv" else a[1] % c)
        if a[1] != 0 or len(a[0]) != 1 or next(iter(a[0].values())) != 1:
            return None  # e.g. (i + j) // 4: no digit of one index
        return _cut(next(iter(a[0])), e.op, c)
    return None


def _cut(s: _Slice, op: str, c: int) -> _Form | None:
    """slice // c or slice % c, None when it is no slice (e.g. (i % 6) // 4)."""
    d, lo, hi = s
    m = None if hi is None else hi // lo  # the slice is below m
    zero: _Form = ({}, 0)
    if op == "floordiv":
        if m is None or m % c == 0:
            return {(d, lo * c, hi): 1}, 0
        return zero if c >= m else None
    if c == 1:
        return zero
    if m is None or m % c == 0:
        return {(d, lo, lo * c): 1}, 0
    return ({s: 1}, 0) if c >= m else None


def slice_digits(forms: list[_Form], extents: list[int]) -> list[list[tuple[tuple[int, int], int]]] | None:
    """Per dimension d, its digits ((d, c_l), range): the cut points c_l of the slices, which must
    divide one another; None when they do not."""
    out = []
    for d, n in enumerate(extents):
        cuts = {1} | {x for f in forms for (dd, lo, hi) in f[0] for x in (lo, hi) if dd == d and x is not None}
        cuts = sorted(x for x in cuts if x < n)
        if any(b % a for a, b in itertools.pairwise(cuts)):
            return None
        ends = cuts[1:] + [None]
        out.append([((d, a), (b // a if b is not None else -(-n // a))) for a, b in zip(cuts, ends)])
    return out


def digit_row(form: _Form, digits) -> dict[tuple[int, int], int]:
    """The output as {digit: weight}: slice (d, lo, hi) is the digits c_l in [lo, hi), weighted c_l // lo."""
    row: dict[tuple[int, int], int] = {}
    for (d, lo, hi), coeff in form[0].items():
        for (key, r) in digits[d]:
            c = key[1]
            if c >= lo and (hi is None or c * r <= hi):
                row[key] = row.get(key, 0) + coeff * (c // lo)
    return {k: w for k, w in row.items() if w}


def decomposition_holds(params, outputs, forms, digits, rows, extents) -> bool:
    """Prove with tdsl.arith that each output equals its digit row (guards the slice parser)."""
    if any(p.dtype != o.dtype for p in params for o in outputs):
        return False  # mixed index dtypes: left to enumeration
    ranges = _box(params, extents)
    exprs = {}
    for ds in digits:
        for i, ((d, c), r) in enumerate(ds):
            e = params[d] // c if c > 1 else params[d]
            exprs[(d, c)] = e % r if i + 1 < len(ds) else e
    for o, form, row in zip(outputs, forms, rows):
        total: PrimExpr = const(form[1], o.dtype)
        for key, w in row.items():
            total = total + exprs[key] * w
        diff = simplify(o - total, ranges)
        if not (isinstance(diff, IntImm) and diff.value == 0):
            return False
    return True


def _digits_recoverable(rows: list[dict], ranges: dict[tuple[int, int], int]) -> bool:
    """Whether the outputs determine every digit: repeatedly take an output whose unknown digits
    form a mixed-radix number (each weight beyond what the smaller ones can sum to), so that
    its value gives them back; the known digits of other outputs are then constants."""
    known: set = set()
    progress = True
    while progress:
        progress = False
        for row in rows:
            unknown = sorted((abs(w), k) for k, w in row.items() if k not in known)
            if not unknown:
                continue
            reach = 0
            for w, k in unknown:
                if w <= reach:
                    break
                reach += w * (ranges[k] - 1)
            else:
                known.update(k for _, k in unknown)
                progress = True
    return known >= set(ranges)


# refutation: two elements with the same image -------------------------------------------------

def _all_points(extents: list[int]):
    import numpy as np

    grids = np.meshgrid(*[np.arange(n) for n in extents], indexing="ij")
    return [g.ravel() for g in grids]


def _probe_points(params: list[Var], outputs: list[PrimExpr], extents: list[int]):
    """Points likely to collide under a map that is not one-to-one: a corner of the box and, in
    each dimension, the values around products of the map's divisors (i and i + c when i % c
    is all that is kept)."""
    import numpy as np

    divisors = sorted({e.b.value for o in outputs for e in _nodes(o) if isinstance(e, Binary) and
                       e.op in ("floordiv", "floormod") and isinstance(e.b, IntImm) and e.b.value > 1})
    cuts = {1}
    for c in divisors[:8]:
        cuts |= {x * c for x in cuts}
    per_dim = [[0, 1][:n] for n in extents]  # the last resort: 2^ndim points
    for corner, near_cuts in ((16, True), (8, True), (4, True), (2, True), (4, False)):
        values = [sorted(set(range(min(n, corner))) | {n - 1} |
                         ({y for c in cuts for y in (c - 1, c, c + 1) if 0 <= y < n} if near_cuts else set()))
                  for n in extents]
        if math.prod(len(v) for v in values) <= 1 << 16:
            per_dim = values
            break
    grids = np.meshgrid(*[np.asarray(v) for v in per_dim], indexing="ij")
    return [g.ravel() for g in grids]


def _nodes(e: PrimExpr):
    yield e
    if isinstance(e, Binary):
        yield from _nodes(e.a)
        yield from _nodes(e.b)


def _collision(params, outputs, points, new_shape=None, sizes=None) -> tuple[tuple, tuple] | None:
    """((point a, point b), destination) for two of `points` with one image, or None. `sizes`
    binds symbolic dimensions; without `new_shape` the images' bounding box is used."""
    import numpy as np

    sizes = sizes or {}
    env = {**sizes, **{p: x for p, x in zip(params, points)}}
    count = points[0].size if points else 1
    try:
        cols = [np.broadcast_to(np.asarray(eval_array(o, env), dtype=np.int64), (count,)) for o in outputs]
    except ValueError:  # an expression numpy cannot evaluate: one point at a time
        cols = [np.array([eval_int(o, {**sizes, **{p: int(x[t]) for p, x in zip(params, points)}})
                          for t in range(count)], dtype=np.int64) for o in outputs]
    if new_shape is None:
        new_shape = tuple(int(c.max()) + 1 for c in cols)
    flat = np.ravel_multi_index(cols, new_shape) if cols else np.zeros(count, np.int64)
    order = np.argsort(flat, kind="stable")
    same = np.flatnonzero(flat[order][1:] == flat[order][:-1])
    if same.size == 0:
        return None
    a, b = order[same[0]], order[same[0] + 1]
    return (tuple(int(x[a]) for x in points), tuple(int(x[b]) for x in points)), tuple(int(c[a]) for c in cols)


def transform_layout(func: PrimFunc, block: str, buffer, index_map: Callable,
                     pad_value=None, assume_injective_transform: bool = False) -> tuple[PrimFunc, None]:
    """Store a buffer in a new layout: element idx moves to index_map(*idx) (a parameter's new
    layout is the function's new signature). With
    `pad_value`, the elements of the new shape no element maps to are set to it (see
    layout_padding)."""
    realize, _ = find_block(func, block, "transform_layout")
    buf = resolve_buffer(func, realize.block, buffer, "transform_layout")
    is_param = alloc_site(func, buf) is None
    params, outputs = _call_map(func, block, buf, index_map)
    shape = new_layout_shape(func, block, buf, params, outputs)
    check_one_to_one(func, block, buf, params, outputs, shape, assume_injective=assume_injective_transform)
    new = Buffer(buf.name, shape, buf.dtype, scope=buf.scope)
    padded = pad_value is not None and has_padding(buf.shape, shape)
    if is_param:
        _check_param_layout(func, block, buf, padded)
    if padded:  # refuse a bad value before changing anything
        pad_value_expr(func, block, buf, pad_value, [Var(f"i{d}", s.dtype) for d, s in enumerate(shape)])
    body = _Reindex(buf, new, params, outputs).visit(func.body)
    body = _Realloc(buf, new).visit(body)
    out = func.with_body(refresh_touching(body, {new}, keep_order=True))
    if is_param:
        out = dataclasses.replace(out, params=tuple(new if p is buf else p for p in out.params))
    if padded:
        out = add_padding_block(out, block, buf, new, params, outputs, pad_value)
    return out, None


def _check_param_layout(func: PrimFunc, block: str, buf: Buffer, padded: bool) -> None:
    """A parameter may change layout (the kernel then takes it in the new layout, as in TVM; a
    symbolic shape is only permuted, so it stays a signature), but only an output's padding can be
    filled."""
    if padded and not any(w.buffer is buf for r in all_realizes(func.body) for w in r.block.writes):
        raise schedule_error(func, "transform_layout", f"{buf.name} is an input parameter of {func.name}: "
                             "pad_value would have to assume what the caller's array holds there",
                             blocks=(block,), rule="pad_value applies to buffers the function writes",
                             fix=f"drop pad_value (the padding of an input is never read), or copy it "
                                 f"first with sch.cache_read(block, {buf.name!r}, \"global\") and pad the copy")


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
    buf = resolve_buffer(func, realize.block, buffer, "storage_align", "write", names_in="any")
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
