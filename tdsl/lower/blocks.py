"""Passes that remove the block structure: `convert_blocks` and, for CPU targets,
`thread_bindings_to_serial`."""
from __future__ import annotations

from ..dtypes import bool_
from ..ir import (
    TRUE,
    Allocate,
    Binary,
    Block,
    BlockRealize,
    For,
    IfThenElse,
    IntImm,
    PrimExpr,
    PrimFunc,
    Stmt,
    is_true,
    substitute,
)
from ..ir.attrs import (
    LOWER_NOTE,
    NONTEMPORAL,
    NONTEMPORAL_BUFFERS,
    SWIZZLE,
    SWIZZLED_BUFFERS,
    VECTORIZE_BLOCKS,
    note_texts,
    set_attr,
)
from ..ir.functor import replace_fields as replace
from ._util import StmtMutator, add_notes, cast_to, collect_stmts, seq

# The annotation keys read and set here (NONTEMPORAL, NONTEMPORAL_BUFFERS, VECTORIZE_BLOCKS) are
# described in tdsl.ir.attrs.


def _init_condition(block: Block, values: tuple[PrimExpr, ...]) -> PrimExpr | None:
    """`all reduce iterators == their domain minimum`, in terms of the bound values;
    None when it holds trivially, IntImm(False) when it never holds."""
    cond: PrimExpr | None = None
    for iv, value in zip(block.iter_vars, values):
        if iv.kind != "R":
            continue
        value = cast_to(iv.dom.min.dtype, value)
        lo = iv.dom.min
        if isinstance(value, IntImm) and isinstance(lo, IntImm):
            if value.value == lo.value:
                continue
            return IntImm(0, bool_)
        term = Binary("eq", value, lo)
        cond = term if cond is None else Binary("and", cond, term)
    return cond


class _BlockConverter(StmtMutator):
    def visit_BlockRealize(self, realize: BlockRealize) -> Stmt:
        block = realize.block
        if len(block.iter_vars) != len(realize.iter_values):
            raise ValueError(f"block {block.name!r} has {len(block.iter_vars)} iterators but "
                             f"{len(realize.iter_values)} bound values")
        body = self.visit(block.body)
        stmt = body
        if block.init is not None:
            init = self.visit(block.init)
            cond = _init_condition(block, realize.iter_values)
            stmt = seq(init, body) if cond is None else seq(IfThenElse(cond, init), body)
        for buf in reversed(block.alloc_buffers):
            stmt = Allocate(buf, stmt)
        vmap = {iv.var: cast_to(iv.var.dtype, v) for iv, v in zip(block.iter_vars, realize.iter_values)}
        # buffers=True: an allocation whose shape uses an iterator gets the bound value too
        stmt = substitute(stmt, vmap, buffers=True)
        if not is_true(realize.predicate):
            stmt = IfThenElse(realize.predicate, stmt)
        return stmt

    def visit_Block(self, block: Block) -> Stmt:
        # A block without a realize (never made by the parser): run it once, nothing bound.
        if block.iter_vars:
            raise ValueError(f"block {block.name!r} has iterators but no BlockRealize binding them")
        return self.visit_BlockRealize(BlockRealize((), TRUE, block))

    def visit_For(self, loop: For) -> Stmt:
        body = self.visit(loop.body)
        annotations = loop.annotations
        if loop.kind == "vectorized":
            names = _block_names(loop.body)
            if names:
                annotations = annotations + ((VECTORIZE_BLOCKS, ", ".join(names)),)
        if body is loop.body and annotations is loop.annotations:
            return loop
        return replace(loop, body=body, annotations=annotations)


def _block_names(stmt: Stmt) -> list[str]:
    return [b.name for b in collect_stmts(stmt, Block)]


def convert_blocks(func: PrimFunc) -> PrimFunc:
    """Blocks -> plain code: iterators substituted by their bindings, predicate -> `if`,
    init -> `if all reduce iterators are at their minimum: init` before the body,
    alloc_buffers -> Allocate around the block's code."""
    streamed = _nontemporal_buffers(func.body)
    swizzled = _nontemporal_buffers(func.body, SWIZZLE)
    notes = [n for b in collect_stmts(func.body, Block) for k, v in b.annotations if k == LOWER_NOTE
             for n in note_texts(v)]
    body = _BlockConverter().visit(func.body)
    func = add_notes(func.with_body(body), notes)   # a rule's note on a block (kernel.notes)
    func = set_attr(func, SWIZZLED_BUFFERS, swizzled) if swizzled else func
    return set_attr(func, NONTEMPORAL_BUFFERS, streamed) if streamed else func


def _nontemporal_buffers(stmt: Stmt, key: str = NONTEMPORAL) -> tuple[str, ...]:
    """Names of the buffers written by blocks annotated `key` (truthy; `tdsl.nontemporal`)."""
    names: list[str] = []
    for block in collect_stmts(stmt, Block):
        if dict(block.annotations).get(key):
            names.extend(r.buffer.name for r in block.writes if r.buffer.name not in names)
    return tuple(names)


class _Serializer(StmtMutator):
    def visit_For(self, loop: For) -> Stmt:
        body = self.visit(loop.body)
        if loop.kind == "thread_binding":
            return replace(loop, kind="serial", thread_tag=None, body=body)
        return loop if body is loop.body else replace(loop, body=body)


def thread_bindings_to_serial(func: PrimFunc) -> PrimFunc:
    """CPU targets: GPU thread_binding loops run as serial loops (the bound loops of one
    launch are separated by implicit barriers in TensorIR, so running them in order is exact)."""
    return func.with_body(_Serializer().visit(func.body))
