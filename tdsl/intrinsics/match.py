"""The tensor-intrinsic matcher and binder: does a block compute an intrinsic's description,
and where does each description buffer land (`match`); the implementation with its buffers
bound to those regions (`instantiate_impl`).

`tdsl.schedule.primitives.blockize.tensorize` matches at schedule time and records the
intrinsic in the block annotation `tdsl.ir.attrs.TENSOR_INTRIN`; `tdsl.lower.tensorize` matches again at
lowering and swaps in the implementation. The matching rules are those of the tensorize
primitive (see its module docstring): equal up to renaming, the order of the operands of `+`
and `*`, and a base offset per buffer dimension.
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

from ..arith import simplify
from ..errors import block_name, loop_name
from ..ir import (
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
    IterVar,
    LetStmt,
    Not,
    PrimExpr,
    Ramp,
    Range,
    Select,
    SeqStmt,
    Stmt,
    StringImm,
    Var,
    collect,
    const,
    free_vars,
    is_const,
    is_true,
    substitute,
)
from ..ir.tree import Path, path_ranges
from ..script.printer import message_text as expr_text
from .registry import TensorIntrin

COMMUTATIVE = ("add", "mul")  # operations whose operands match in either order


# matching ----------------------------------------------------------------------------------

class Mismatch(Exception):
    """Why a subtree does not match a description: message, fix, and the culprits to mark."""

    def __init__(self, message: str, fix: str | None = None, loops: tuple[Var, ...] = (),
                 blocks: tuple[str, ...] = ()):
        super().__init__(message)
        self.message, self.fix, self.loops, self.blocks = message, fix, loops, blocks


@dataclass
class Binding:
    """Where a description parameter landed: the real buffer, the base index per real
    dimension, and the real dimension each description dimension maps to (`dims[j]`)."""

    param: Buffer
    buffer: Buffer
    base: list[PrimExpr] = field(default_factory=list)
    dims: list[int] | None = None  # None until the first access is matched

    def copy(self) -> Binding:
        return Binding(self.param, self.buffer, list(self.base), None if self.dims is None else list(self.dims))

    def own_strides(self) -> list[PrimExpr]:
        """The real buffer's strides in the dimensions the description's dimensions map to."""
        strides = real_strides(self.buffer)
        return [strides[k] for k in self.dims]


class Matcher:
    """Compares a block's body with an intrinsic's description (see the module docstring)."""

    def __init__(self, intrin: TensorIntrin, block: Block, ranges: dict[Var, Range]):
        self.intrin = intrin
        self.block = block
        self.ranges = dict(ranges)  # outside the block, its own iterators, then the matched inner ones
        self.vmap: dict[Var, Var] = {}
        self.inner: set[Var] = set()
        self.bindings: dict[Buffer, Binding] = {}
        self.real_loops: list[For] = []
        self.desc_loops: list[For] = []

    # entry --------------------------------------------------------------------------------
    def run(self) -> list[Binding]:
        desc = self.intrin.desc_body
        self._check_buffer_count(desc)
        self._nest(desc, self.block.body)
        params = [p for p in self.intrin.desc.params if isinstance(p, Buffer)]
        out = []
        for p in params:
            if p not in self.bindings:
                raise Mismatch(f"the description's buffer {p.name} is never accessed by the code",
                               fix="check that the intrinsic's description uses all its parameters")
            out.append(self.bindings[p])
        self._check_layouts(out)
        return out

    def _check_buffer_count(self, desc: Stmt) -> None:
        desc_bufs = _buffers_of(desc)
        real_bufs = [b for b in _buffers_of(self.block.body) if b not in self.block.alloc_buffers]
        if len(desc_bufs) != len(real_bufs):
            raise Mismatch(
                f"the code uses {len(real_bufs)} buffers ({', '.join(b.name for b in real_bufs)}) where the "
                f"description of {self.intrin.name!r} uses {len(desc_bufs)} "
                f"({', '.join(b.name for b in desc_bufs)})",
                fix="tensorize a loop whose block computes exactly what the intrinsic does (an epilogue or a "
                    "fused operation belongs in another block: compute it separately)",
                blocks=(self.block.name,))

    # loop nests ---------------------------------------------------------------------------
    def _nest(self, desc: Stmt, real: Stmt) -> None:
        dl, dnode = _chain(desc)
        rl, rnode = _chain(real)
        self.desc_loops, self.real_loops = dl, rl
        if not isinstance(rnode, BlockRealize):
            raise Mismatch(f"the code under {block_name(self.block.name)} is not a loop nest around one block "
                           f"(found a {type(rnode).__name__})",
                           fix="tensorize a loop whose body is a perfect nest around a single block",
                           blocks=(self.block.name,))
        assert isinstance(dnode, BlockRealize)
        real_names = ", ".join(f"{f.loop_var.name} ({expr_text(f.extent)})" for f in rl) or "none"
        desc_ext = ", ".join(expr_text(f.extent) for f in dl) or "none"
        if len(dl) != len(rl):
            more = "split one of them" if len(rl) < len(dl) else "fuse some of them"
            raise Mismatch(f"the code has {len(rl)} loops [{real_names}] where the description of "
                           f"{self.intrin.name!r} has {len(dl)} with extents [{desc_ext}]",
                           fix=f"reshape the loop nest to the intrinsic's ({more}, e.g. with sch.split/sch.fuse) "
                               "and tensorize the outermost loop of the tile",
                           loops=tuple(f.loop_var for f in rl))
        self._check_order(dl, dnode, rl, rnode)
        for d, r in zip(dl, rl):
            de, re_ = simplify(d.extent), simplify(r.extent)
            if not _same_const(de, re_):
                if isinstance(re_, IntImm) and isinstance(de, IntImm) and re_.value > de.value \
                        and re_.value % de.value == 0:
                    fix = (f"sch.split({r.loop_var.name}, factors=[None, {de.value}]) and tensorize the inner "
                           "loops (the tile must match the intrinsic)")
                else:
                    fix = f"split the loops so that this one has extent {expr_text(de)}"
                raise Mismatch(f"{loop_name(r.loop_var)} has extent {expr_text(re_)} where the description's "
                               f"loop {d.loop_var.name} has {expr_text(de)}", fix=fix, loops=(r.loop_var,))
            if not is_const(simplify(r.min), 0) or not is_const(simplify(d.min), 0):
                raise Mismatch(f"{loop_name(r.loop_var)} starts at {expr_text(r.min)} where the description's "
                               f"starts at {expr_text(d.min)}", loops=(r.loop_var,),
                               fix="blockize/tensorize a loop nest that starts at 0")
            self.vmap[d.loop_var] = r.loop_var
            self.inner.add(r.loop_var)
            self.ranges[r.loop_var] = Range(r.min, r.extent)
        self._realize(dnode, rnode)

    def _check_order(self, dl: list[For], dnode: BlockRealize, rl: list[For], rnode: BlockRealize) -> None:
        """When both nests bind each iterator to one loop, a different order means: reorder."""
        d_pos = _loop_of_iter(dl, dnode)
        r_pos = _loop_of_iter(rl, rnode)
        if d_pos is None or r_pos is None or len(d_pos) != len(r_pos) or d_pos == r_pos:
            return
        if sorted(x for x in d_pos if x is not None) != sorted(x for x in r_pos if x is not None):
            return
        wanted = []
        for loop_index in range(len(dl)):
            it = d_pos.index(loop_index) if loop_index in d_pos else None
            if it is None or r_pos[it] is None:
                return
            wanted.append(rl[r_pos[it]].loop_var)
        names = ", ".join(v.name for v in wanted)
        have = ", ".join(f.loop_var.name for f in rl)
        raise Mismatch(f"the loops are ordered ({have}) but the description of {self.intrin.name!r} nests the "
                       f"corresponding loops as ({names})", fix=f"sch.reorder({names})",
                       loops=tuple(f.loop_var for f in rl))

    def _realize(self, d: BlockRealize, r: BlockRealize) -> None:
        db, rb = d.block, r.block
        culprit = {"blocks": (rb.name,)}
        if not is_true(r.predicate):
            raise Mismatch(f"{block_name(rb.name)} has the predicate T.where({expr_text(r.predicate)}) (a split "
                           "that does not divide the extent), so its tile is partial",
                           fix="split by factors that divide the loop extents (the intrinsic computes whole tiles)",
                           **culprit)
        pairs = _align_iterators(d, rb)
        if pairs is None:
            raise Mismatch(f"{block_name(rb.name)} has {len(rb.iter_vars)} iterators where the description's block "
                           f"has {len(db.iter_vars)}", fix="tensorize a block of the same shape", **culprit)
        bound = []
        for div, riv, dv in pairs:
            if riv is None:
                # a unit iterator the code has no counterpart for: blockize moved it to the outer
                # block (its only value is the domain's start), so the description's accesses
                # meet the code's there as a base offset
                self.vmap[div.var] = div.dom.min
                continue
            bound.append((div, riv, dv))
            if div.kind != riv.kind:
                kinds = {"S": "spatial", "R": "a reduction"}
                raise Mismatch(f"iterator {riv.var.name} of {block_name(rb.name)} is {kinds[riv.kind]} where the "
                               f"description's {div.var.name} is {kinds[div.kind]}",
                               fix="order the block's iterators as the description does", **culprit)
            if not _same_const(simplify(div.dom.extent), simplify(riv.dom.extent)):
                raise Mismatch(f"iterator {riv.var.name} of {block_name(rb.name)} ranges over "
                               f"{expr_text(riv.dom.extent)} values where the description's {div.var.name} ranges "
                               f"over {expr_text(div.dom.extent)}",
                               fix="split the loops to the intrinsic's tile before tensorize", **culprit)
            self.vmap[div.var] = riv.var
            self.inner.add(riv.var)
            self.ranges[riv.var] = riv.dom  # lets the simplifier see (vo * 16 + vi) % 16 == vi
        for (div, _, dv), rv in zip(bound, r.iter_values):
            want = substitute(dv, self.vmap)
            if not _equal(want, rv, self.ranges):
                raise Mismatch(f"iterator {self.vmap[div.var].name} of {block_name(rb.name)} is bound to "
                               f"{expr_text(rv)} where the description binds it to {expr_text(want)}",
                               fix="reorder the loops to the description's order (sch.reorder)", **culprit)
        if (db.init is None) != (rb.init is None):
            if rb.init is None:
                raise Mismatch(f"{block_name(rb.name)} has no T.init() but the description of {self.intrin.name!r} "
                               "initialises its output", fix="tensorize the loop above the whole reduction tile "
                               "(so that the init is part of it), or use an intrinsic without init", **culprit)
            raise Mismatch(f"{block_name(rb.name)} has a T.init() the description of {self.intrin.name!r} lacks",
                           fix="sch.decompose_reduction(block, loop) to move the init into its own block, then "
                               "tensorize the update (or split the reduction loop so that part of it stays outside "
                               "the tile: the init then moves to the outer block)", **culprit)
        if db.init is not None:
            self._stmt(db.init, rb.init)
        self._stmt(db.body, rb.body)

    # statements and expressions -----------------------------------------------------------
    def _stmt(self, d: Stmt, r: Stmt) -> None:
        if type(d) is not type(r):
            raise Mismatch(f"the code has a {_what(r)} where the description has a {_what(d)}",
                           blocks=(self.block.name,))
        if isinstance(d, BufferStore):
            self._access(d.buffer, d.indices, r.buffer, r.indices, "stores into")
            self._expr(d.value, r.value)
        elif isinstance(d, SeqStmt):
            if len(d.seq) != len(r.seq):
                raise Mismatch(f"the code has {len(r.seq)} statements where the description has {len(d.seq)}",
                               blocks=(self.block.name,))
            for a, b in zip(d.seq, r.seq):
                self._stmt(a, b)
        elif isinstance(d, LetStmt):
            self._expr(d.value, r.value)
            self.vmap[d.var] = r.var
            self.inner.add(r.var)
            self._stmt(d.body, r.body)
        elif isinstance(d, IfThenElse):
            self._expr(d.condition, r.condition)
            self._stmt(d.then_case, r.then_case)
            if (d.else_case is None) != (r.else_case is None):
                raise Mismatch("an if has an else branch in only one of the code and the description",
                               blocks=(self.block.name,))
            if d.else_case is not None:
                self._stmt(d.else_case, r.else_case)
        elif isinstance(d, Evaluate):
            self._expr(d.value, r.value)
        else:
            raise Mismatch(f"the description contains a {_what(d)}, which tensorize cannot match",
                           blocks=(self.block.name,))

    def _expr(self, d: PrimExpr, r: PrimExpr) -> None:
        if isinstance(d, BufferLoad) and isinstance(r, BufferLoad):
            self._access(d.buffer, d.indices, r.buffer, r.indices, "reads")
            return
        if type(d) is not type(r) or d.dtype != r.dtype:
            self._differ(d, r)
        if isinstance(d, Var):
            if self.vmap.get(d) is not r:
                self._differ(d, r)
        elif isinstance(d, (IntImm, FloatImm, StringImm)):
            if d.value != r.value:
                self._differ(d, r)
        elif isinstance(d, Binary):
            if d.op != r.op:
                self._differ(d, r)
            if d.op in COMMUTATIVE:
                self._either_order(d, r)
            else:
                self._expr(d.a, r.a)
                self._expr(d.b, r.b)
        elif isinstance(d, (Cast, Not)):
            self._expr(d.value if isinstance(d, Cast) else d.a, r.value if isinstance(r, Cast) else r.a)
        elif isinstance(d, Call):
            if d.op != r.op or len(d.args) != len(r.args):
                self._differ(d, r)
            for a, b in zip(d.args, r.args):
                self._expr(a, b)
        elif isinstance(d, Select):
            for name in ("condition", "true_value", "false_value"):
                self._expr(getattr(d, name), getattr(r, name))
        else:
            self._differ(d, r)

    def _either_order(self, d: Binary, r: Binary) -> None:
        """Match the operands of a commutative operation in order, else swapped. When both fail,
        the error of the order whose first operand matched (the one that got further), the
        in-order one when that does not decide."""
        saved = {k: b.copy() for k, b in self.bindings.items()}
        errors = []
        for ra, rb in ((r.a, r.b), (r.b, r.a)):
            first_matched = False
            try:
                self._expr(d.a, ra)
                first_matched = True
                self._expr(d.b, rb)
                return
            except Mismatch as m:
                errors.append((first_matched, m))
                self.bindings = {k: b.copy() for k, b in saved.items()}
        (in_order_first, in_order), (swapped_first, swapped) = errors
        raise swapped if swapped_first and not in_order_first else in_order

    def _differ(self, d: PrimExpr, r: PrimExpr) -> None:
        what = "dtype" if type(d) is type(r) and d.dtype != r.dtype else "expression"
        extra = f" ({r.dtype} vs {d.dtype})" if what == "dtype" else ""
        raise Mismatch(f"the code computes {expr_text(r)} where the description of {self.intrin.name!r} computes "
                       f"{expr_text(substitute(d, self.vmap))}{extra}",
                       fix="tensorize only code that computes exactly the intrinsic's operation (same operands, "
                           "same dtypes; only the operands of + and * may come in either order)",
                       blocks=(self.block.name,))

    def _access(self, dbuf: Buffer, didx: tuple, rbuf: Buffer, ridx: tuple, verb: str) -> None:
        culprit = {"blocks": (self.block.name,)}
        if dbuf.dtype != rbuf.dtype:
            raise Mismatch(f"buffer {rbuf.name} has dtype {rbuf.dtype} where the description's {dbuf.name} is "
                           f"{dbuf.dtype}", fix=f"choose an intrinsic for {rbuf.dtype}, or cast {rbuf.name} into "
                           f"a {dbuf.dtype} buffer in a block of its own first", **culprit)
        if len(ridx) < len(didx):
            raise Mismatch(f"buffer {rbuf.name} has {len(ridx)} dimensions where the description's {dbuf.name} "
                           f"has {len(didx)}", fix="transform_layout the buffer to the intrinsic's layout",
                           **culprit)
        binding = self.bindings.get(dbuf)
        if binding is None:
            for other in self.bindings.values():
                if other.buffer is rbuf:
                    raise Mismatch(f"buffer {rbuf.name} plays the roles of both {other.param.name} and {dbuf.name} "
                                   f"of the description of {self.intrin.name!r}",
                                   fix="give each operand its own buffer (cache_read makes a copy)", **culprit)
            binding = self.bindings[dbuf] = Binding(dbuf, rbuf)
        elif binding.buffer is not rbuf:
            raise Mismatch(f"the code {verb} {rbuf.name} where the description {verb} {dbuf.name}, which the code "
                           f"elsewhere accesses as {binding.buffer.name}", **culprit)
        dims = binding.dims if binding.dims is not None else self._place(dbuf, didx, rbuf, ridx)
        bases = self._bases(didx, ridx, dims)
        if isinstance(bases, tuple):
            k, b = bases
            shown_real = ", ".join(expr_text(i) for i in ridx)
            shown_desc = ", ".join(expr_text(substitute(i, self.vmap)) for i in didx)
            raise Mismatch(f"the code {verb} {rbuf.name}[{shown_real}] where the description {verb} "
                           f"{dbuf.name}[{shown_desc}] (plus a fixed offset): dimension {k} differs by "
                           f"{expr_text(b)}, which varies inside the tile",
                           fix=f"make the access pattern of {rbuf.name} match the intrinsic: reorder the loops, "
                               "or transform_layout / cache_read the buffer into the intrinsic's layout",
                           **culprit)
        if binding.dims is None:
            binding.base, binding.dims = bases, dims
            return
        for k, (old, new) in enumerate(zip(binding.base, bases)):
            if not _equal(old, new, self.ranges):
                raise Mismatch(f"buffer {rbuf.name} is accessed at two different offsets in dimension {k} "
                               f"({expr_text(old)} and {expr_text(new)}) where the description uses one tile",
                               **culprit)

    def _base(self, d: PrimExpr | None, r: PrimExpr) -> PrimExpr:
        """The offset of real index r from description index d (r itself when no description
        dimension maps there); it must not vary inside the tile."""
        return simplify(r if d is None else r - substitute(d, self.vmap), self.ranges)

    def _bases(self, didx: tuple, ridx: tuple, dims: list[int]) -> list[PrimExpr] | tuple[int, PrimExpr]:
        """The base of each real dimension when description dimension j is real dimension
        dims[j] (the others are fixed offsets), or (k, difference) for the first real dimension
        k whose difference varies inside the tile."""
        desc_of = {k: j for j, k in enumerate(dims)}
        out: list[PrimExpr] = []
        for k, r in enumerate(ridx):
            b = self._base(didx[desc_of[k]] if k in desc_of else None, r)
            if free_vars(b) & self.inner:
                return k, b
            out.append(b)
        return out

    def _place(self, dbuf: Buffer, didx: tuple, rbuf: Buffer, ridx: tuple) -> list[int]:
        """The real dimension of each description dimension (see the module docstring), in this
        order of preference: the innermost ones in order when the indices fit there (a wrong
        stride there is then reported as one); any other choice in order, then any permutation,
        that the indices fit and the intrinsic's constant strides allow (e.g. C = Y[b, k0:k0+MR,
        y, x0:x0+NR]); one in order that only the indices fit (the layout check names the
        stride); else the choice in order that fits the most real dimensions, whose first
        misfit the error names."""
        nd, nr = len(didx), len(ridx)
        fixed = self._constant_strides(dbuf)
        strides = real_strides(rbuf)
        ok: dict[tuple[int | None, int], bool] = {}

        def fits(j: int | None, k: int) -> bool:
            if (j, k) not in ok:
                ok[j, k] = not free_vars(self._base(None if j is None else didx[j], ridx[k])) & self.inner
            return ok[j, k]

        def score(dims: tuple[int, ...]) -> int:
            desc_of = {k: j for j, k in enumerate(dims)}
            return sum(fits(desc_of.get(k), k) for k in range(nr))

        def strided(dims: tuple[int, ...]) -> bool:
            return all(fixed[j] is None or _equal(fixed[j], strides[k], self.ranges) for j, k in enumerate(dims))

        in_order = sorted(itertools.combinations(range(nr), nd), reverse=True)  # innermost first
        if score(in_order[0]) == nr:
            return list(in_order[0])
        permuted = (p for p in itertools.permutations(range(nr), nd) if list(p) != sorted(p))
        for dims in itertools.chain(in_order, permuted):
            if score(dims) == nr and strided(dims):
                return list(dims)
        return list(max(in_order, key=score))  # ties: the innermost

    def _constant_strides(self, dbuf: Buffer) -> list[PrimExpr | None]:
        """Per description dimension, the constant stride the description or the implementation
        declares for this operand (None: any)."""
        desc_params = list(self.intrin.desc.params)
        decls = [dbuf]
        if any(p is dbuf for p in desc_params):  # desc and impl parameters pair up (checked at registration)
            decls.append(self.intrin.impl.params[desc_params.index(dbuf)])
        out: list[PrimExpr | None] = [None] * len(dbuf.shape)
        for decl in decls:
            for j, st in enumerate(decl.strides[:len(out)]):
                if isinstance(st, IntImm):
                    out[j] = st
        return out

    # layouts ------------------------------------------------------------------------------
    def _check_layouts(self, bindings: list[Binding]) -> None:
        impl_params = [p for p in self.intrin.impl.params if isinstance(p, Buffer)]
        for b, ip in zip(bindings, impl_params):
            p, real = b.param, b.buffer
            if p.scope != real.scope:
                raise Mismatch(f"buffer {real.name} is in scope {real.scope!r} where the intrinsic "
                               f"{self.intrin.name!r} needs its operand {p.name} in {p.scope!r}",
                               fix=f"copy it with sch.cache_read/cache_write(block, {real.name!r}, {p.scope!r}) or "
                                   f"sch.set_scope(block, {real.name!r}, {p.scope!r})", blocks=(self.block.name,))
            strides = b.own_strides()
            for decl in (p, ip):
                for k, (want, have) in enumerate(zip(decl.strides, strides)):
                    if isinstance(want, IntImm) and not _equal(want, have, self.ranges):
                        raise Mismatch(f"buffer {real.name} has stride {expr_text(have)} in dimension "
                                       f"{b.dims[k]} where the intrinsic "
                                       f"{self.intrin.name!r} needs {expr_text(want)} for its operand {p.name}",
                                       fix=f"transform_layout/cache_read {real.name} into a compact tile layout",
                                       blocks=(self.block.name,))


def _align_iterators(d: BlockRealize, r: Block) -> list[tuple[IterVar, IterVar | None, PrimExpr]] | None:
    """Pairs (description iterator, code iterator or None, description binding), in order.

    The code may lack some of the description's unit-extent iterators (blockize gives an
    iterator whose inner part is a loop of extent 1 to the outer block only); those pair with
    None. A unit iterator the code does have is paired. None when the counts cannot agree."""
    dvs = list(d.block.iter_vars)
    rvs = list(r.iter_vars)
    spare = len(dvs) - len(rvs)
    if spare < 0:
        return None
    out: list[tuple[IterVar, IterVar | None, PrimExpr]] = []
    j = 0
    for div, value in zip(dvs, d.iter_values):
        code_unit = j < len(rvs) and _same_const(simplify(rvs[j].dom.extent), const(1)) and rvs[j].kind == div.kind
        if spare and _same_const(simplify(div.dom.extent), const(1)) and not code_unit:
            out.append((div, None, value))
            spare -= 1
            continue
        if j >= len(rvs):
            return None
        out.append((div, rvs[j], value))
        j += 1
    return out if spare == 0 and j == len(rvs) else None


def real_strides(buf: Buffer) -> tuple[PrimExpr, ...]:
    """The element strides of a buffer: its own, or row-major from its shape."""
    if buf.strides:
        return buf.strides
    out: list[PrimExpr] = []
    acc: PrimExpr = const(1, buf.shape[-1].dtype if buf.shape else "int32")
    for extent in reversed(buf.shape):
        out.append(acc)
        acc = simplify(acc * extent)
    return tuple(reversed(out))


def _chain(stmt: Stmt) -> tuple[list[For], Stmt]:
    loops = []
    while isinstance(stmt, For):
        loops.append(stmt)
        stmt = stmt.body
    return loops, stmt


def _loop_of_iter(loops: list[For], realize: BlockRealize) -> list[int | None] | None:
    """For each block iterator, the index of the loop it is bound to (None for a constant)."""
    index = {f.loop_var: k for k, f in enumerate(loops)}
    out: list[int | None] = []
    for v in realize.iter_values:
        if isinstance(v, Var) and v in index:
            out.append(index[v])
        elif not (free_vars(v) & set(index)):
            out.append(None)
        else:
            return None
    return out


def _buffers_of(stmt: Stmt) -> list[Buffer]:
    seen: dict[int, Buffer] = {}
    for node in collect(stmt, (BufferLoad, BufferStore)):
        seen.setdefault(id(node.buffer), node.buffer)
    return list(seen.values())


def _what(s) -> str:
    names = {"BufferStore": "store", "SeqStmt": "sequence of statements", "LetStmt": "local name (let)",
             "IfThenElse": "if", "Evaluate": "call statement", "For": "loop", "BlockRealize": "block"}
    return names.get(type(s).__name__, type(s).__name__)


def _same_const(a: PrimExpr, b: PrimExpr) -> bool:
    return isinstance(a, IntImm) and isinstance(b, IntImm) and a.value == b.value


def _equal(a: PrimExpr, b: PrimExpr, ranges: dict) -> bool:
    if a.dtype != b.dtype:
        return False
    if a.dtype.is_integer and a.dtype.lanes == 1:
        return is_const(simplify(a - b, ranges), 0)
    from ..ir import structural_equal

    return structural_equal(a, b)


def block_ranges(path: Path, block: Block) -> dict[Var, Range]:
    """The ranges of everything outside `block` and of its own iterators."""
    ranges = path_ranges(path)
    for iv in block.iter_vars:
        ranges[iv.var] = iv.dom
    return ranges


# Successful matches, keyed by the very nodes a match reads (IR is immutable, so the same nodes
# match the same way): tensorize() matches at schedule time and apply_tensor_intrinsics again at
# lowering, on the same block body under the same loops. The key holds the nodes, so their ids
# are not reused while an entry lives; the oldest entry goes first past the bound.
_MATCHES: dict[tuple, list[Binding]] = {}
_MATCHES_MAX = 64


def match(intrin: TensorIntrin, block: Block, path: Path) -> list[Binding]:
    """Match `block`'s body against `intrin`'s description; raises Mismatch."""
    key = _match_key(intrin, block, path)
    found = _MATCHES.get(key)
    if found is None:
        found = Matcher(intrin, block, block_ranges(path, block)).run()
        if len(_MATCHES) >= _MATCHES_MAX:
            _MATCHES.pop(next(iter(_MATCHES), None), None)   # another thread may have taken it
        _MATCHES[key] = found
    return [b.copy() for b in found]  # Bindings are mutable: callers get their own


def _match_key(intrin: TensorIntrin, block: Block, path: Path) -> tuple:
    """What `Matcher` reads: the description, the block's name, body, allocations and iterators,
    and the loops and block iterators around it (the block itself may end `path` or not)."""
    outer: list[object] = []
    for node in path:
        if isinstance(node, For):
            outer.append((node.loop_var, node.min, node.extent))
        elif isinstance(node, Block) and node is not block:
            outer.append(node.iter_vars)
    return intrin, block.name, block.body, block.alloc_buffers, block.iter_vars, tuple(outer)


# binding an implementation -----------------------------------------------------------------

def instantiate_impl(intrin: TensorIntrin, bindings: list[Binding]) -> tuple[Stmt, tuple[Buffer, ...]]:
    """The implementation's body with its parameters bound to the matched regions (fresh loop
    variables and allocations, so that one intrinsic can be used in many places)."""
    params = [p for p in intrin.impl.params if isinstance(p, Buffer)]
    vmap: dict[Var, PrimExpr] = {}
    bmap: dict[Buffer, Binding] = {}
    for p, b in zip(params, bindings):
        bmap[p] = b
        strides = real_strides(b.buffer)
        for s, real in zip(p.strides, b.own_strides()):
            if isinstance(s, Var):
                vmap[s] = real
        if isinstance(p.elem_offset, Var):
            offset: PrimExpr = b.buffer.elem_offset if b.buffer.elem_offset is not None else const(0)
            for base, stride in zip(b.base, strides):
                offset = offset + base * stride
            vmap[p.elem_offset] = simplify(offset)
    allocs = {a: a.with_(name=a.name) for a in intrin.impl_allocs}
    body = _Binder(vmap, bmap, allocs).visit(intrin.impl_body)
    return body, tuple(allocs.values())


class _Binder:
    """Rewrites impl accesses P[idx] into Real[base + idx] and renews loop/let variables."""

    def __init__(self, vmap: dict[Var, PrimExpr], bmap: dict[Buffer, Binding], allocs: dict[Buffer, Buffer]):
        from ..ir import IRMutator

        outer = self

        class _M(IRMutator):
            def visit_Var(self, v):
                return outer.vmap.get(v, v)

            def visit_buffer(self, b):
                return outer.allocs.get(b, b)

            def visit_BufferLoad(self, e):
                idx = tuple(self.visit(i) for i in e.indices)
                buf, idx = outer.rebase(e.buffer, idx)
                return BufferLoad(buf, idx)

            def visit_BufferStore(self, s):
                idx = tuple(self.visit(i) for i in s.indices)
                buf, idx = outer.rebase(s.buffer, idx)
                return BufferStore(buf, self.visit(s.value), idx)

            def visit_For(self, s):
                new = Var(s.loop_var.name, s.loop_var.dtype)
                outer.vmap[s.loop_var] = new
                return dataclasses.replace(s, loop_var=new, min=self.visit(s.min), extent=self.visit(s.extent),
                                           body=self.visit(s.body))

            def visit_LetStmt(self, s):
                value = self.visit(s.value)
                new = Var(s.var.name, s.var.dtype)
                outer.vmap[s.var] = new
                return LetStmt(new, value, self.visit(s.body))

        self.vmap, self.bmap, self.allocs = vmap, bmap, allocs
        self.mutator = _M()

    def visit(self, stmt: Stmt) -> Stmt:
        return self.mutator.visit(stmt)

    def rebase(self, buf: Buffer, idx: tuple) -> tuple[Buffer, tuple]:
        b = self.bmap.get(buf)
        if b is None:
            return self.allocs.get(buf, buf), idx
        out = list(b.base)
        for k, i in zip(b.dims, idx):
            out[k] = _offset(b.base[k], i)
        return b.buffer, tuple(out)


def _offset(base: PrimExpr, index: PrimExpr) -> PrimExpr:
    """base + index, keeping vector indices in Ramp/Broadcast form."""
    if is_const(base, 0):
        return index
    if isinstance(index, Ramp):
        return Ramp(simplify(base + index.base), index.stride, index.lanes)
    if isinstance(index, Broadcast):
        return Broadcast(simplify(base + index.value), index.lanes)
    if index.dtype.lanes > 1:
        return Binary("add", Broadcast(base, index.dtype.lanes), index)
    return simplify(base + index)


