"""auto_tensorize(block, intrin): fit a tensor intrinsic onto an einsum block by itself.

1. Roles. The description's block is an einsum too: each of its iterators has a kind (S/R)
   and appears in some of its buffers (the output and the inputs). A block iterator can play a
   description iterator when it has the same kind and appears in the corresponding buffers
   (inputs matched in either order). Block iterators playing no role stay outer loops (a
   batch, a convolution's taps). Every way to assign the roles is a plan; plans that need fewer
   copies come first (an iterator that is a buffer's innermost index is preferred for the
   description's innermost one).
2. Layouts. An operand fits when the description's dimensions land on its dimensions in
   order, each index there being the playing iterator (plus terms of outer iterators), and a
   unit-stride description dimension on its last one. One that does not fit (a transposed
   operand, a convolution's NCHW output) is copied by `reindex`; a copy that still does not fit
   is stored packed by `transform_layout`: the outer iterators' dimensions, then each played
   iterator's tile number, then the tiles (GotoBLAS packing: the intrinsic then reads whole
   contiguous tiles).
3. Padding. An extent the tile does not divide is padded by `pad_einsum` (an operand indexed
   with a compound index along it, such as ``x + s``, is reindexed first).
4. Tiling. Each playing loop is split by its tile extent and the loops reordered: outer
   spatial loops, the reduction's outer loops, the first description iterator's outer loop,
   then the tile in the description's loop order; then `tensorize` checks the match. An init
   the description lacks becomes the T.init of the tensorized block (blockize moves it there
   when the reduction has outer loops: it runs once per tile, before the first update), so
   the loops outside stay a perfect nest the caller may still split, reorder and parallelize;
   when every outer reduction loop has extent 1 the init is decomposed before them instead.

The first plan that tensorizes wins; when none does, the ScheduleError lists why each failed.
The result is recorded as one step (auto_tensorize) whose replay repeats the search.

A composite: it only calls the public primitives (reindex, pad_einsum, compute_inline,
transform_layout, split, reorder, decompose_reduction, tensorize) on a scratch schedule of the
facade class (`ScheduleBase.facade`, registered by `Schedule`, which sits above this module).
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field

from ...errors import ScheduleError
from ...intrinsics.registry import TensorIntrin
from ...ir import (
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    For,
    IntImm,
    PrimExpr,
    PrimFunc,
    Var,
    collect,
    free_vars,
    is_const,
)
from ..base import ScheduleBase
from ..errors import block_name, schedule_error
from ..tree import find_block, find_loop

MAX_PLANS = 12


@dataclass
class _Einsum:
    iters: list                                   # IterVars in order
    output: Buffer
    inputs: list[Buffer]
    access: dict = field(default_factory=dict)    # buffer -> indices

    def uses(self, var: Var) -> frozenset:
        return frozenset(b for b, idx in self.access.items() if any(var in free_vars(i) for i in idx))


def _einsum(block: Block) -> _Einsum | str:
    """The einsum view of a block, or why it is not one."""
    if not isinstance(block.body, BufferStore):
        return "its body is not a single store"
    out = block.body.buffer
    access: dict[Buffer, tuple] = {out: block.body.indices}
    inputs: list[Buffer] = []
    for stmt in (block.init, block.body):
        if stmt is None:
            continue
        for ld in collect(stmt, BufferLoad):
            if ld.buffer is out:
                continue
            if ld.buffer in access and tuple(access[ld.buffer]) != tuple(ld.indices):
                return f"it reads {ld.buffer.name} with two index patterns"
            if ld.buffer not in access:
                access[ld.buffer] = ld.indices
                inputs.append(ld.buffer)
    return _Einsum(list(block.iter_vars), out, inputs, access)


def _desc(intrin: TensorIntrin) -> tuple[_Einsum, list[Var], dict[Var, int]]:
    """The description's einsum, its iterators in loop order, and their tile extents."""
    body = intrin.desc_body
    loops = []
    while isinstance(body, For):
        loops.append(body)
        body = body.body
    assert isinstance(body, BlockRealize)
    e = _einsum(body.block)
    if isinstance(e, str):
        raise ValueError(f"the description of {intrin.name!r} is not an einsum: {e}")  # noqa: TRY004
    by_loop = {v: iv.var for iv, v in zip(body.block.iter_vars, body.iter_values) if isinstance(v, Var)}
    order = [by_loop[f.loop_var] for f in loops if f.loop_var in by_loop]
    tiles = {iv.var: int(iv.dom.extent.value) if isinstance(iv.dom.extent, IntImm) else 0
             for iv in body.block.iter_vars}
    if not all(tiles.values()):
        raise ValueError(f"the description of {intrin.name!r} has a symbolic extent")
    return e, order, tiles


@dataclass
class _Plan:
    roles: dict                    # desc buffer -> code buffer
    mapping: dict                  # desc iter var -> code iter var
    cost: int = 0


def _fits(code_idx: tuple, desc_idx: tuple, desc_buf: Buffer, impl_buf: Buffer, mapping: dict,
          padded: set, code_buf: Buffer) -> bool:
    """Whether the code's access lands on the description's dimensions as tensorize needs."""
    mapped = set(mapping.values())
    dims: list[int] = []
    for d in desc_idx:
        if not isinstance(d, Var) or d not in mapping:
            return False
        c = mapping[d]
        hits = [k for k, e in enumerate(code_idx) if c in free_vars(e)]
        if len(hits) != 1:
            return False
        k = hits[0]
        e = code_idx[k]
        if (free_vars(e) & mapped) != {c} or (c in padded and e is not c):
            return False
        if e is not c and not _unit_offset(e, c):
            return False
        dims.append(k)
    if dims != sorted(dims) or len(set(dims)) != len(dims):
        return False
    for k, e in enumerate(code_idx):
        if k not in dims and free_vars(e) & mapped:
            return False
    n = len(code_idx)
    for decl in (desc_buf, impl_buf):
        st = decl.strides or ()
        for j, s in enumerate(st):
            if isinstance(s, IntImm):
                if j == len(st) - 1 and s.value == 1:
                    if dims[j] != n - 1 or (code_buf.strides and not is_const(code_buf.strides[-1], 1)):
                        return False
                else:
                    return False   # a constant row stride: only a packed copy has it
    return True


def _unit_offset(e: PrimExpr, c: Var) -> bool:
    from ...arith import linear_form

    form = linear_form(e, [c])
    return form is not None and form[0].get(c) == 1


def _plans(code: _Einsum, desc: _Einsum) -> tuple[list[_Plan], list[str]]:
    plans: list[_Plan] = []
    why: list[str] = []
    if len(code.inputs) != len(desc.inputs):
        why.append(f"the block reads {len(code.inputs)} buffer(s) ({', '.join(b.name for b in code.inputs)}) besides "
                   f"its output where the description reads {len(desc.inputs)}")
        return plans, why
    if code.output.dtype != desc.output.dtype:
        why.append(f"the output {code.output.name} is {code.output.dtype} where the description's is "
                   f"{desc.output.dtype}")
        return plans, why
    for perm in itertools.permutations(code.inputs):
        roles = {desc.output: code.output, **dict(zip(desc.inputs, perm))}
        bad = [(d, c) for d, c in roles.items() if d.dtype != c.dtype]
        if bad:
            d, c = bad[0]
            why.append(f"{c.name} is {c.dtype} where the description's {d.name} is {d.dtype}")
            continue
        cands = []
        for div in desc.iters:
            want = frozenset(roles[b] for b in desc.uses(div.var))
            found = [iv.var for iv in code.iters if iv.kind == div.kind and code.uses(iv.var) == want]
            if not found:
                kind = "reduction" if div.kind == "R" else "spatial"
                why.append(f"no {kind} iterator of the block appears in exactly "
                           f"{', '.join(sorted(b.name for b in want))} like the description's {div.var.name} "
                           f"(with {', '.join(f'{d.name}->{c.name}' for d, c in roles.items())})")
                break
            # prefer the iterator that is the innermost index of the buffers
            found.sort(key=lambda v: -sum(_position(code.access[b], v) for b in want))
            cands.append(found)
        else:
            pos = {iv.var: n for n, iv in enumerate(code.iters)}
            for combo in itertools.product(*cands):
                # tensorize pairs the block's iterators with the description's in order
                if len(set(combo)) == len(combo) and [pos[c] for c in combo] == sorted(pos[c] for c in combo):
                    plans.append(_Plan(roles, {div.var: c for div, c in zip(desc.iters, combo)}))
                elif len(set(combo)) == len(combo):
                    why.append(f"{', '.join(c.name for c in combo)} would play the description's "
                               f"{', '.join(d.var.name for d in desc.iters)} but come in another order among "
                               "the block's iterators (tensorize pairs iterators in order)")
    return plans, why


def _position(idx: tuple, v: Var) -> int:
    """How far inside `v` indexes (the last dimension scores highest), 0 when it does not."""
    for k in range(len(idx) - 1, -1, -1):
        if v in free_vars(idx[k]):
            return k + 1 - len(idx) + 100
    return 0


def auto_tensorize(func: PrimFunc, block: str, intrin_name: str) -> tuple[PrimFunc, str]:
    """See the module docstring."""
    primitive = "auto_tensorize"
    realize, _ = find_block(func, block, primitive)
    try:
        intrin = TensorIntrin.get(intrin_name) if isinstance(intrin_name, str) else None
    except ScheduleError as exc:
        raise schedule_error(func, primitive, str(exc), blocks=(block,)) from None
    if intrin is None:
        raise schedule_error(func, primitive, f"the intrinsic name must be a string, not {intrin_name!r}",
                             blocks=(block,))
    code = _einsum(realize.block)
    if isinstance(code, str) or collect(realize.block.body, BlockRealize):
        reason = code if isinstance(code, str) else "it holds other blocks"
        raise schedule_error(func, primitive, f"{block_name(block)} is not an einsum: {reason}", blocks=(block,),
                             rule="auto_tensorize fits an intrinsic onto one store Y[..] (+)= f(loads) "
                                  "(a GEMM, a batched GEMM, a convolution)")
    try:
        desc, order, tiles = _desc(intrin)
    except ValueError as exc:
        raise schedule_error(func, primitive, str(exc), blocks=(block,)) from None
    plans, why = _plans(code, desc)
    scored: list[tuple[int, int, _Plan]] = []
    for plan in plans:
        scored.append((_cost(code, desc, intrin, plan, tiles), len(scored), plan))
    scored.sort(key=lambda t: (t[0], t[1]))
    failures: list[str] = list(why)
    for _, _, plan in scored[:MAX_PLANS]:
        try:
            return _apply(func, block, intrin, code, desc, order, tiles, plan)
        except ScheduleError as exc:
            shown = ", ".join(f"{d.name}->{c.name}" for d, c in plan.mapping.items())
            first = str(exc).split("\n")[0]
            failures.append(f"with {shown}: {first}")
    text = "\n    ".join(failures[:6]) or "no plan"
    raise schedule_error(func, primitive, f"{intrin_name!r} does not fit {block_name(block)}:\n    {text}",
                         blocks=(block,), rule="the block's iterators must play the roles of the description's "
                                               "(same kind, same buffers), its dtypes and expression match it",
                         fix="choose an intrinsic for this computation, or rewrite the block as its description "
                             "computes (see TensorIntrin.get(name).desc)")


def _padded(code: _Einsum, plan: _Plan, tiles: dict) -> set:
    out = set()
    ext = {iv.var: iv.dom.extent for iv in code.iters}
    for d, c in plan.mapping.items():
        e = ext[c]
        if not isinstance(e, IntImm) or e.value % tiles[d]:
            out.add(c)
    return out


def _cost(code: _Einsum, desc: _Einsum, intrin: TensorIntrin, plan: _Plan, tiles: dict) -> int:
    padded = _padded(code, plan, tiles)
    cost = 2 * len(padded)
    for dbuf, cbuf in plan.roles.items():
        ibuf = _impl_param(intrin, dbuf)
        if not _fits(code.access[cbuf], desc.access[dbuf], dbuf, ibuf, plan.mapping, padded, cbuf):
            cost += 1
    return cost


def _apply(func: PrimFunc, block: str, intrin: TensorIntrin, code: _Einsum, desc: _Einsum, order: list[Var],
           tiles: dict, plan: _Plan) -> tuple[PrimFunc, str]:
    sch = ScheduleBase.facade(func)
    blk = sch.get_block(block)
    padded = _padded(code, plan, tiles)
    inv = {c: d for d, c in plan.mapping.items()}
    impl_of = {d: _impl_param(intrin, d) for d in plan.roles}
    # 1. copies of the operands that do not fit, or that padding needs plain
    reindexed = []
    for dbuf, cbuf in plan.roles.items():
        idx = code.access[cbuf]
        fits = _fits(idx, desc.access[dbuf], dbuf, impl_of[dbuf], plan.mapping, padded, cbuf)
        plain = all(isinstance(i, Var) or not (free_vars(i) & padded) for i in idx)
        if not fits or not plain:
            copy = sch.reindex(blk, cbuf.name)
            if dbuf is not desc.output:
                reindexed.append(copy)
    # 2. padding
    if padded:
        factors = [tiles[inv[iv.var]] if iv.var in padded else 1 for iv in code.iters]
        sch.pad_einsum(blk, factors)
        for copy in reindexed:   # read the operand straight into its padded copy: one copy, not two
            with contextlib.suppress(ScheduleError):
                sch.compute_inline(copy)
    # 3. pack the copies that still do not fit
    cur = _current(sch, block)
    for dbuf in plan.roles:
        buf, idx = _buffer_in(cur, dbuf, dbuf is desc.output, plan, code)
        if buf is None or _fits(idx, desc.access[dbuf], dbuf, impl_of[dbuf], plan.mapping, padded, buf):
            continue
        if _allocated(sch.func, buf):
            _pack(sch, blk, buf, idx, desc.access[dbuf], plan, tiles)
    # 4. tiling
    cur = _current(sch, block)
    loop_of = {iv.var: sch_loop for iv, sch_loop in zip(cur.block.iter_vars, _loops_of(sch, blk, cur))}
    outer_s, outer_r, first_outer = [], [], None
    inner: dict = {}
    for iv in cur.block.iter_vars:
        loop = loop_of[iv.var]
        if iv.var in inv:
            d = inv[iv.var]
            o, i = sch.split(loop, factors=[None, tiles[d]])
            inner[d] = i
            if d is order[0] and iv.kind == "S":
                first_outer = o
            elif iv.kind == "R":
                outer_r.append(o)
            else:
                outer_s.append(o)
        else:
            (outer_r if iv.kind == "R" else outer_s).append(loop)
    tile = [inner[d] for d in order]
    nest = outer_s + outer_r + ([first_outer] if first_outer is not None else []) + tile
    sch.reorder(*nest)
    cur = _current(sch, block)
    desc_init = _desc_block(intrin).init is not None
    if cur.block.init is not None and not desc_init and not any(_extent(sch, lp) > 1 for lp in outer_r):
        # with outer reduction loops, blockize moves the init to the tensorized block's own
        # T.init (the outer loops then stay free to reorder); without, it must leave the tile
        sch.decompose_reduction(blk, (outer_r + ([first_outer] if first_outer is not None else []) + tile)[0])
    sch.tensorize(tile[0], intrin.name)
    _, path = find_block(sch.func, block, "auto_tensorize")
    outer = next(p for p in reversed(path) if isinstance(p, Block))
    return sch.func, outer.name


def _extent(sch, loop) -> int:
    f, _ = find_loop(sch.func, loop.var, "auto_tensorize")
    return f.extent.value if isinstance(f.extent, IntImm) else 2


def _impl_param(intrin: TensorIntrin, desc_buf: Buffer) -> Buffer:
    """The implementation's buffer parameter paired with the description's `desc_buf`."""
    param = intrin.impl.params[list(intrin.desc.params).index(desc_buf)]
    assert isinstance(param, Buffer)   # TensorIntrin.register checks that they pair up
    return param


def _desc_block(intrin: TensorIntrin) -> Block:
    return collect(intrin.desc_body, BlockRealize)[0].block


def _current(sch, block: str) -> BlockRealize:
    return find_block(sch.func, block, "auto_tensorize")[0]


def _loops_of(sch, blk, cur: BlockRealize) -> list:
    """The loop handle binding each iterator (pad_einsum and reindex keep T.axis.remap bindings)."""
    loops = sch.get_loops(blk)
    by_var = {lp.var: lp for lp in loops}
    out = []
    for value in cur.iter_values:
        if not isinstance(value, Var) or value not in by_var:
            raise ScheduleError(f"auto_tensorize: iterator bound to {value}, not to a loop of its own")
        out.append(by_var[value])
    return out


def _buffer_in(cur: BlockRealize, dbuf: Buffer, is_output: bool, plan: _Plan, code: _Einsum):
    """The buffer now playing `dbuf` in the block, and its indices."""
    view = _einsum(cur.block)
    if isinstance(view, str):
        return None, None
    if is_output:
        return view.output, view.access[view.output]
    pos = code.inputs.index(plan.roles[dbuf])
    if pos >= len(view.inputs):
        return None, None
    b = view.inputs[pos]
    return b, view.access[b]


def _allocated(func: PrimFunc, buf: Buffer) -> bool:
    return not any(p is buf for p in func.params)


def _pack(sch, blk, buf: Buffer, idx: tuple, desc_idx: tuple, plan: _Plan, tiles: dict) -> None:
    """transform_layout `buf` into (outer dims..., tile numbers..., tiles...) in the description's
    dimension order (module docstring, step 2)."""
    dims = {}
    for d in desc_idx:
        c = plan.mapping[d]
        k = next(k for k, e in enumerate(idx) if e is c)
        dims[k] = tiles[d]
    names = [f"d{k}" for k in range(len(idx))]
    order = [k for k in range(len(idx)) if k not in dims]
    tile_dims = [next(k for k, e in enumerate(idx) if e is plan.mapping[d]) for d in desc_idx]
    outs = [names[k] for k in order] + [f"{names[k]} // {dims[k]}" for k in tile_dims] + \
           [f"{names[k]} % {dims[k]}" for k in tile_dims]
    fn = eval(f"lambda {', '.join(names)}: ({', '.join(outs)},)")
    sch.transform_layout(blk, buf.name, fn)
