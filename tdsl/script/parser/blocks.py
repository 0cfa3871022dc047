"""`with T.block(...)`: iterators (T.axis), T.where, T.reads / T.writes (checked against the
inferred regions), T.block_attr, T.init, and views (`T.match_buffer` of a region)."""
from __future__ import annotations

import ast

from ... import dtypes as _dt
from ...dtypes import int32 as _int32
from ...ir.buffer import Buffer, BufferRegion
from ...ir.expr import Cast, IntImm, PrimExpr, Range, Var, const
from ...ir.stmt import Block, BlockRealize, IterVar, Stmt
from .common import _simplify, _text
from .core import ParserCore
from .frames import _BlockFrame, _PendingOffset, _View


def _extern_addressed(block: Block) -> set[int]:
    """ids of the buffers whose address `block` passes to a call of unknown effect (not one of
    TVM's warp-matrix builtins, not a prefetch)."""
    from ...ir import Call, collect
    from ...ir.opaque_calls import WMMA_BUILTINS, touches_memory

    out: set[int] = set()
    for call in collect(block.body, Call):
        if call.op in WMMA_BUILTINS or not touches_memory(call.op):
            continue
        for arg in call.args:
            if isinstance(arg, Call) and arg.op == "address_of" and arg.args:
                out.add(id(arg.args[0].buffer))  # type: ignore[attr-defined]
    return out


class BlockParser(ParserCore):
    def parse_block(self, node: ast.With, ctx: ast.Call) -> Stmt:
        if len(ctx.args) != 1 or not isinstance(ctx.args[0], ast.Constant) or not isinstance(ctx.args[0].value, str):
            raise self.error(ctx, "T.block needs a name", 'write with T.block("C"):')
        name = ctx.args[0].value
        if name == "root":
            raise self.error(ctx.args[0], 'the block name "root" is reserved', "name the block otherwise")
        # a name may repeat, as in TVM (docs/script.md, differences); a schedule refuses to look up
        # a repeated name (schedule.tree.find_block)
        self.has_block = True
        frame = _BlockFrame(name)
        self.blocks.append(frame)
        self.push()
        stmts = list(node.body)
        body_nodes: list[ast.stmt] = []
        declaring = True
        for st in stmts:
            if declaring and self.parse_block_decl(st, frame):
                continue
            if declaring and isinstance(st, ast.Assign) and self._is_call_to_expr(st.value, "meta_var"):
                self.bind_meta_var(st)   # TVM's intrinsics name index-map values between T.reads and T.writes
                continue
            if self._is_with_init(st):
                if frame.init is not None:
                    raise self.error(st, f'block "{name}" has two T.init() sections')
                frame.init = self._scoped_stmts(st.body)
                continue
            if self._is_block_decl(st):
                raise self.error(st, f"{self._decl_word(st)} must come before the statements of block \"{name}\"",
                                 "declare iterators, T.where, T.reads, T.writes, T.block_attr and "
                                 "T.alloc_buffer at the top of the block")
            declaring = False
            body_nodes.append(st)
        for offset_name, st in frame.pending_offsets.items():
            raise self.error(st, f"{offset_name} = T.int32() is never bound in block \"{name}\"",
                             f"pass it to a view: X = T.match_buffer(A[...], shape, elem_offset={offset_name})")
        body = self.parse_stmts(body_nodes)
        self.pop()
        self.blocks.pop()
        block = Block(name, tuple(frame.iter_vars), (), (), body, frame.init, tuple(frame.alloc_buffers),
                      frame.annotations, span=self.span(ctx))
        reads, writes = self.block_regions(block, frame, node)
        block = Block(name, block.iter_vars, reads, writes, body, frame.init, block.alloc_buffers,
                      frame.annotations, span=block.span)
        self._check_bindings_in_domain(frame, node)
        return BlockRealize(tuple(frame.iter_values), frame.predicate, block, span=self.span(node))

    def _check_bindings_in_domain(self, frame: _BlockFrame, node) -> None:
        """An iterator bound outside its constant domain over the enclosing constant loops (no
        T.where, no enclosing if) is refused: `T.axis.spatial(10, i)` under `range(16)`."""
        from ...arith import const_bound
        from ...ir import Range, free_vars

        if getattr(self, "if_depth", 0) or not (isinstance(frame.predicate, IntImm) and frame.predicate.value):
            return
        for iv, value in zip(frame.iter_vars, frame.iter_values):
            dom = iv.dom
            if not (isinstance(dom.min, IntImm) and isinstance(dom.extent, IntImm)):
                continue
            ranges = {}
            for v in free_vars(value):
                lo_ext = self.loop_ranges.get(id(v))
                if lo_ext is None or not all(isinstance(x, IntImm) for x in lo_ext):
                    break
                ranges[v] = Range(*lo_ext)
            else:
                lo, hi = const_bound(value, ranges)
                end = dom.min.value + dom.extent.value
                if lo is not None and hi is not None and (lo < dom.min.value or hi >= end):
                    from ..printer import message_text

                    raise self.error(node, f'block "{frame.name}": iterator {iv.var.name} is bound to '
                                     f'{message_text(value)}, which ranges over [{lo}, {hi}], outside its domain '
                                     f'[{dom.min.value}, {end})',
                                     "bind it within its domain, or guard the block with T.where(...)")

    def block_regions(self, block: Block, frame: _BlockFrame, node) -> tuple:
        from ...arith import infer_block_regions

        if frame.reads is not None and frame.writes is not None:
            inferred_reads, inferred_writes = infer_block_regions(block)
            # TVM's scripts leave a reduction's own output out of T.reads (C[vi, vj] = C[vi, vj] + ...
            # with T.reads(A[...], B[...])): the read of a buffer the block declares it writes is
            # added after the declared reads, so that read indices keep TVM's meaning
            written = {id(r.buffer) for r in frame.writes}
            listed = {id(r.buffer) for r in frame.reads}
            own = tuple(r for r in inferred_reads if id(r.buffer) in written and id(r.buffer) not in listed)
            if own:
                frame.reads = frame.reads + own
            # an address passed to an extern call is inferred as read and written (a guess): the
            # declaration says which, when it lists the buffer in one of the two (TVM trusts it)
            guessed = _extern_addressed(block)
            declared = {id(r.buffer) for r in (*frame.reads, *frame.writes)}
            trusted = {b for b in guessed if b in declared}
            self._check_declared(frame.reads, inferred_reads, "reads", frame, node, trusted)
            self._check_declared(frame.writes, inferred_writes, "writes", frame, node, trusted)
            return frame.reads, frame.writes
        reads, writes = infer_block_regions(block)
        return (frame.reads if frame.reads is not None else reads,
                frame.writes if frame.writes is not None else writes)

    def _check_declared(self, declared, inferred, what: str, frame: _BlockFrame, node, trusted=frozenset()) -> None:
        names = {id(r.buffer) for r in declared}
        for r in inferred:
            if id(r.buffer) not in names and id(r.buffer) not in trusted:
                raise self.error(node, f'block "{frame.name}" {what[:-1]}s {r.buffer.name}, but T.{what} '
                                       "does not list it",
                                 f"add it to T.{what}(...) or leave T.reads/T.writes out to have them inferred")

    def _is_with_init(self, st) -> bool:
        return isinstance(st, ast.With) and len(st.items) == 1 and isinstance(st.items[0].context_expr, ast.Call) \
            and self._t_name(st.items[0].context_expr.func) == "init"

    def _is_block_decl(self, st) -> bool:
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            return self._t_name(st.value.func) in ("reads", "writes", "where", "block_attr")
        if isinstance(st, ast.Assign):
            return self._is_axis_call(st.value) or self._is_call_to_expr(st.value, "alloc_buffer") \
                or self._is_call_to_expr(st.value, "match_buffer")
        return False

    def _decl_word(self, st) -> str:
        if isinstance(st, ast.Expr):
            return f"T.{self._t_name(st.value.func)}"
        if self._is_axis_call(st.value):
            return "T.axis"
        return "T.match_buffer" if self._is_call_to_expr(st.value, "match_buffer") else "T.alloc_buffer"

    def parse_block_decl(self, st, frame: _BlockFrame) -> bool:
        if isinstance(st, ast.Assign) and self._is_axis_call(st.value):
            self.parse_axis(st, frame)
            return True
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and self._is_call_to_expr(st.value, "alloc_buffer"):
            self.parse_alloc_buffer(st, st.targets[0].id)
            return True
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and self._is_call_to_expr(st.value, "match_buffer"):
            self.define(st.targets[0].id, self.parse_view(st, st.targets[0].id))
            return True
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and isinstance(st.value, ast.Call) and self._t_name(st.value.func) in ("int32", "int64") \
                and not st.value.args and not st.value.keywords:
            # TVM's `off = T.int32()` before `T.match_buffer(..., elem_offset=off)`: the view binds it
            self.define(st.targets[0].id, _PendingOffset(st.targets[0].id, self._t_name(st.value.func)))
            frame.pending_offsets[st.targets[0].id] = st
            return True
        if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)):
            return False
        call = st.value
        what = self._t_name(call.func)
        if what in ("reads", "writes"):
            if getattr(frame, what) is not None:
                raise self.error(st, f"T.{what} appears twice in block \"{frame.name}\"")
            setattr(frame, what, self.parse_regions(call))
            return True
        if what == "where":
            if len(call.args) != 1:
                raise self.error(call, "T.where takes one condition")
            cond = self.eval_expr(call.args[0])
            cond = self.python_to_expr(cond, call.args[0]) if not isinstance(cond, PrimExpr) else cond
            if not cond.dtype.is_bool:
                raise self.error(call.args[0], f"T.where needs a bool condition, not {cond.dtype}")
            self._refuse_own_iterators(cond, frame, call.args[0], "T.where")
            frame.predicate = cond
            return True
        if what == "block_attr":
            frame.annotations = self.parse_dict(call.args[0], call) if call.args else ()
            return True
        return False

    def parse_axis(self, st: ast.Assign, frame: _BlockFrame) -> None:
        if len(st.targets) != 1:
            raise self.error(st, "one target list per T.axis statement")
        target = st.targets[0]
        call = st.value
        kind_name = call.func.attr
        if kind_name == "remap":
            if len(call.args) != 2 or not isinstance(call.args[0], ast.Constant) \
                    or not isinstance(call.args[0].value, str) or not isinstance(call.args[1], (ast.List, ast.Tuple)):
                raise self.error(call, 'T.axis.remap takes a kind string and a list of loop variables',
                                 'e.g. vi, vj, vk = T.axis.remap("SSR", [i, j, k])')
            kinds = call.args[0].value
            values = call.args[1].elts
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            if not (len(kinds) == len(values) == len(names)):
                raise self.error(call, f"T.axis.remap has {len(kinds)} kinds, {len(values)} loop variables and "
                                       f"{len(names)} names", "give one kind letter (S or R) per loop variable")
            for name, kind, vnode in zip(names, kinds, values):
                if kind not in "SR":
                    raise self.error(call.args[0], f"unknown iterator kind '{kind}'",
                                     "use S for spatial (data-parallel) and R for reduction")
                value = self.eval_expr(vnode)
                if not isinstance(value, Var) or id(value) not in self.loop_ranges:
                    raise self.error(vnode, "T.axis.remap binds iterators to loop variables",
                                     "for any other binding use T.axis.spatial(extent, value)")
                lo, ext = self.loop_ranges[id(value)]
                self._add_iter(frame, name, kind, Range(lo, ext), value)
            return
        kind = {"spatial": "S", "S": "S", "reduce": "R", "R": "R"}.get(kind_name)
        if kind_name in ("scan", "opaque"):
            raise self.error(call.func, f"T.axis.{kind_name} (TVM's {kind_name} iterator) is not part of tdsl: a tdsl "
                             "block's iterators are spatial or reduction",
                             "write T.axis.spatial(n, i) or T.axis.reduce(n, k); a scan is a loop inside one block, "
                             "or a chain of blocks")
        if kind is None:
            raise self.error(call.func, f"unknown T.axis.{kind_name}", "use T.axis.spatial, T.axis.reduce or "
                                                                       "T.axis.remap")
        if not isinstance(target, ast.Name):
            raise self.error(target, f"T.axis.{kind_name} declares one iterator", "write vi = T.axis.spatial(n, i)")
        if len(call.args) != 2:
            raise self.error(call, f"T.axis.{kind_name} takes (domain, value)",
                             f"e.g. vi = T.axis.{kind_name}(128, i * 4 + j)")
        value = self.to_index(self.eval_expr(call.args[1]), call.args[1])
        dom_node = call.args[0]
        if isinstance(dom_node, ast.Tuple):
            if len(dom_node.elts) != 2:
                raise self.error(dom_node, "a domain tuple is (start, stop)")
            lo = self.to_index(self.eval_expr(dom_node.elts[0]), dom_node, value.dtype)
            hi = self.to_index(self.eval_expr(dom_node.elts[1]), dom_node, value.dtype)
            dom = Range(lo, _simplify(hi - lo))
        else:
            ext = self.to_index(self.eval_expr(dom_node), dom_node, value.dtype)
            dom = Range(const(0, ext.dtype), ext)
        if dom.extent.dtype != value.dtype:
            raise self.error(call, f"the domain is {dom.extent.dtype} but the value is {value.dtype}",
                             "cast one of them so that they agree")
        self._add_iter(frame, target, kind, dom, value)

    def _refuse_own_iterators(self, expr: PrimExpr, frame: _BlockFrame, node, what: str) -> None:
        """A block's predicate and iterator bindings are evaluated outside the block, over the
        loop variables: its own iterators are not defined there."""
        from ...ir.functor import free_vars

        own = {id(iv.var): iv.var.name for iv in frame.iter_vars}
        used = sorted(own[id(v)] for v in free_vars(expr) if id(v) in own)
        if used:
            raise self.error(node, f'{what} of block "{frame.name}" uses its own iterator {used[0]}',
                             "write it over the loop variables (e.g. T.where(i * 16 + j < 50))")

    def _add_iter(self, frame: _BlockFrame, name_node: ast.Name, kind: str, dom: Range, value: PrimExpr) -> None:
        if not isinstance(name_node, ast.Name):
            raise self.error(name_node, "block iterators must be plain names")
        self._refuse_own_iterators(value, frame, name_node, f"the binding of {name_node.id}")
        var = Var(name_node.id, value.dtype, span=self.span(name_node))
        frame.iter_vars.append(IterVar(var, dom, kind, span=self.span(name_node)))
        frame.iter_values.append(value)
        self.define(name_node.id, var)

    def parse_regions(self, call: ast.Call) -> tuple[BufferRegion, ...]:
        nodes = list(call.args)
        if len(nodes) == 1 and isinstance(nodes[0], (ast.List, ast.Tuple)):
            nodes = list(nodes[0].elts)
        out = []
        for n in nodes:
            if isinstance(n, ast.Subscript):
                buf = self.eval_expr(n.value)
                view = buf if isinstance(buf, _View) else None
                if view is not None:
                    buf = view
                elif not isinstance(buf, Buffer):
                    raise self.error(n.value, "T.reads / T.writes list buffer regions", "e.g. T.reads(A[vi, 0:128])")
                elts = self._subscript_elts(n)
                if len(elts) != buf.ndim:
                    raise self.error(n, f"{buf.name} has {buf.ndim} dimensions but the region gives {len(elts)}")
                ranges = []
                for dim, e in enumerate(elts):
                    if isinstance(e, ast.Slice):
                        if e.step is not None:
                            raise self.error(e, "a region slice is start:stop (no step)", "e.g. A[vi, 0:128]")
                        # as in TVM, a left-out start is 0 and a left-out stop the dimension's extent
                        extent = buf.shape[dim]
                        lo = self.to_index(self.eval_expr(e.lower), e.lower) if e.lower is not None \
                            else const(0, extent.dtype if isinstance(extent, PrimExpr) else _int32)
                        hi = self.to_index(self.eval_expr(e.upper), e.upper) if e.upper is not None \
                            else self.to_index(extent, e)
                        lo, hi = self.unify_ints(lo, hi, e)
                        ranges.append(Range(lo, _simplify(hi - lo)))
                    else:
                        idx = self.to_index(self.eval_expr(e), e)
                        ranges.append(Range(idx, const(1, idx.dtype)))
                if view is not None:
                    out.append(self._view_region(view, ranges, n))
                else:
                    out.append(BufferRegion(buf, tuple(ranges), span=self.span(n)))
            else:
                value = self.eval_expr(n)
                if isinstance(value, Buffer):
                    out.append(value.full_region())
                elif isinstance(value, _View):
                    out.append(self._view_region(value, [Range(const(0, e.dtype), e) for e in value.shape], n))
                else:
                    raise self.error(n, "T.reads / T.writes list buffer regions", "e.g. T.reads(A[vi, 0:128], B)")
        return tuple(out)

    def parse_view(self, node: ast.Assign, name: str) -> _View:
        """`X = T.match_buffer(A[vi * 4:vi * 4 + 4, 0:16], (4, 16))` inside a block."""
        call = node.value
        kw = {k.arg: k.value for k in call.keywords}
        src = call.args[0] if call.args else None
        if not isinstance(src, ast.Subscript):
            raise self.error(call, "inside a block, T.match_buffer takes a buffer region",
                             "e.g. A0 = T.match_buffer(A[vi, 0:16], (16,))")
        regions = self.parse_regions(ast.Call(func=call.func, args=[src], keywords=[]))
        region = regions[0]
        parent = region.buffer
        rest = list(call.args[1:])
        shape_node = rest.pop(0) if rest else kw.pop("shape", None)
        dtype_node = rest.pop(0) if rest else kw.pop("dtype", None)
        if shape_node is None:
            raise self.error(call, "T.match_buffer needs a shape", "e.g. T.match_buffer(A[vi, 0:16], (16,))")
        shape = self.parse_shape(shape_node, None)
        if dtype_node is not None and self.parse_dtype(dtype_node) != parent.dtype:
            raise self.error(dtype_node, f"{parent.name} is {parent.dtype}; a view of it has that dtype")
        offset_node = kw.get("elem_offset")
        pending = self.eval_expr(offset_node) if isinstance(offset_node, ast.Name) else None
        for hint in ("align", "offset_factor", "elem_offset", "strides", "scope", "buffer_type"):
            kw.pop(hint, None)  # layout facts of the parent; a view in tdsl has the parent's layout
        if kw or rest:
            bad = next(iter(kw)) if kw else None
            raise self.error(kw[bad] if bad else rest[0], f"unknown T.match_buffer argument '{bad or rest[0]}'")
        extents = [r.extent for r in region.region]
        dims = list(range(len(extents)))
        lead = len(extents) - len(shape)
        if 0 < lead and all(isinstance(e, IntImm) and e.value == 1 for e in extents[:lead]) and all(
                self._same_extent(e, x) for e, x in zip(extents[lead:], shape)):
            dims = list(range(lead, len(extents)))  # TVM's rule: the shape matches the region's last dimensions
        elif len(shape) < len(extents):  # dimensions of extent 1 may be left out of the view's shape
            dims = [d for d, e in enumerate(extents) if not (isinstance(e, IntImm) and e.value == 1)]
            while len(dims) < len(shape):
                dims = sorted(set(dims) | {next(d for d in range(len(extents)) if d not in dims)})
        if len(dims) != len(shape) or not all(self._same_extent(extents[d], e) for d, e in zip(dims, shape)):
            raise self.error(call, f"the view's shape ({', '.join(_text(e) for e in shape)}) does not match the "
                                   f"region of {parent.name} ({', '.join(_text(e) for e in extents)})",
                             "give the view the region's extents (dimensions of extent 1 may be left out)")
        view = _View(name, parent, tuple(r.min for r in region.region), tuple(dims), tuple(shape))
        if isinstance(pending, _PendingOffset):
            offset = self.layout_attr(view, "elem_offset")
            if str(offset.dtype) != pending.dtype:
                offset = Cast(_dt.DataType.parse(pending.dtype), offset)
            self.define(pending.name, offset)
            self.blocks[-1].pending_offsets.pop(pending.name, None)
        return view

    def _same_extent(self, a: PrimExpr, b: PrimExpr) -> bool:
        from ...ir.structural import same_expr

        return same_expr(_simplify(a), _simplify(b)) or (
            isinstance(a, IntImm) and isinstance(b, IntImm) and a.value == b.value)

    def _view_region(self, view: _View, ranges, node) -> BufferRegion:
        out = [Range(start, const(1, start.dtype)) for start in view.starts]
        for d, r in zip(view.dims, ranges):
            out[d] = Range(_simplify(view.starts[d] + r.min), r.extent)
        return BufferRegion(view.parent, tuple(out), span=self.span(node))
