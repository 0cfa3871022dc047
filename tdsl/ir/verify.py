"""verify(func): well-formedness of a PrimFunc (block IR or lowered IR).

Checks: every Var is defined before use and defined once (parameters, symbolic dimensions,
loop variables, block iterators, let names); a BlockRealize binds
each iterator with a value of its dtype; loads and stores index every dimension with
integers; a store's value has the buffer's element type; every buffer used is a parameter or
allocated by an enclosing block or Allocate; thread tags are known; loop bounds are integers.
"""
from __future__ import annotations

from .attrs import FLAT_PARAMS
from .buffer import Buffer, BufferRegion
from .expr import BufferLoad, PrimExpr, Range, Var
from .functor import IRVisitor, free_vars
from .stmt import THREAD_TAGS, Allocate, Block, BlockRealize, BufferStore, For, LetStmt, PrimFunc


class WellFormedError(ValueError):
    """The function breaks an IR invariant; the message names the block, loop or buffer."""


class _Verifier(IRVisitor):
    def __init__(self, func: PrimFunc):
        self.func = func
        self.scope: list[set[Var]] = [set()]
        self.ever: set[Var] = set()
        self.buffers: list[set[Buffer]] = [set()]
        self.where: list[str] = []

    # reporting ------------------------------------------------------------------------
    def fail(self, message: str) -> None:
        place = f" (in {self.where[-1]})" if self.where else ""
        raise WellFormedError(f"prim_func {self.func.name!r} is not well formed{place}: {message}")

    # definitions -------------------------------------------------------------------------
    def define(self, var: Var, what: str) -> None:
        if not isinstance(var, Var):
            self.fail(f"{what} must be a variable, not {type(var).__name__}")
        if var in self.ever:
            self.fail(f"variable {var.name!r} ({what}) is defined more than once")
        self.ever.add(var)
        self.scope[-1].add(var)

    def defined(self, var: Var) -> bool:
        return any(var in s for s in self.scope)

    def push(self, where: str | None = None) -> None:
        self.scope.append(set())
        self.buffers.append(set())
        if where is not None:
            self.where.append(where)

    def pop(self, where: str | None = None) -> None:
        self.scope.pop()
        self.buffers.pop()
        if where is not None:
            self.where.pop()

    def allocate(self, buffer: Buffer) -> None:
        self.check_exprs(buffer.shape + buffer.strides, f"the shape of buffer {buffer.name!r}")
        if buffer.elem_offset is not None:
            self.check_exprs((buffer.elem_offset,), f"the offset of buffer {buffer.name!r}")
        self.buffers[-1].add(buffer)

    def check_exprs(self, exprs, what: str) -> None:
        for e in exprs:
            self.visit(e)
            if not (e.dtype.lanes == 1 and e.dtype.is_integer):
                self.fail(f"{what} must be an integer, not {e.dtype}")

    def use_buffer(self, buffer: Buffer, how: str) -> None:
        if not any(buffer in s for s in self.buffers):
            self.fail(f"buffer {buffer.name!r} is {how} but is neither a parameter nor allocated by an "
                      "enclosing block or Allocate")

    # the function ------------------------------------------------------------------------
    def run(self) -> None:
        func = self.func
        shape_vars: list[Var] = []
        extra = [b for k, v in func.attrs if k == FLAT_PARAMS for b in (v if isinstance(v, tuple) else ())
                 if isinstance(b, Buffer)]
        for p in func.params:
            if isinstance(p, Var):
                self.define(p, "a scalar parameter")
            elif isinstance(p, Buffer):
                self.buffers[0].add(p)
            else:
                self.fail(f"parameter {p!r} is neither a Buffer nor a Var")
        for buf in list(func.buffer_params) + extra:
            for e in buf.shape + buf.strides + (() if buf.elem_offset is None else (buf.elem_offset,)):
                for v in sorted(free_vars(e), key=lambda v: v.name):
                    if v not in self.ever and v not in shape_vars:
                        shape_vars.append(v)
        for v in shape_vars:
            self.define(v, "a symbolic dimension")
        for buf in func.buffer_params:
            for e in buf.shape:
                if not (e.dtype.lanes == 1 and e.dtype.is_integer):
                    self.fail(f"the shape of parameter {buf.name!r} must be integers, not {e.dtype}")
        self.visit(func.body)

    # statements ----------------------------------------------------------------------------
    def visit_For(self, loop: For) -> None:
        name = loop.loop_var.name
        for what, e in (("start", loop.min), ("extent", loop.extent)):
            self.visit(e)
            if not (e.dtype.lanes == 1 and e.dtype.is_integer):
                self.fail(f"the {what} of loop {name!r} must be an integer, not {e.dtype}")
        if loop.kind == "thread_binding" and loop.thread_tag not in THREAD_TAGS:
            self.fail(f"loop {name!r} is bound to unknown thread axis {loop.thread_tag!r}; "
                      f"known: {', '.join(THREAD_TAGS)}")
        self.push(f"loop {name!r}")
        self.define(loop.loop_var, f"the variable of loop {name!r}")
        if loop.loop_var.dtype != loop.extent.dtype:
            self.fail(f"loop {name!r}: variable dtype {loop.loop_var.dtype} differs from extent dtype "
                      f"{loop.extent.dtype}")
        self.visit(loop.body)
        self.pop(f"loop {name!r}")

    def visit_LetStmt(self, let: LetStmt) -> None:
        self.visit(let.value)
        if let.var.dtype != let.value.dtype:
            self.fail(f"let {let.var.name!r} has dtype {let.var.dtype} but its value is {let.value.dtype}")
        self.push()
        self.define(let.var, f"the let name {let.var.name!r}")
        self.visit(let.body)
        self.pop()

    def visit_Allocate(self, node: Allocate) -> None:
        self.push()
        self.allocate(node.buffer)
        self.visit(node.body)
        self.pop()

    def visit_BufferStore(self, store: BufferStore) -> None:
        buf = store.buffer
        self.use_buffer(buf, "stored to")
        self.check_indices(buf, store.indices, "store to")
        self.visit(store.value)
        vt, bt = store.value.dtype, buf.dtype
        if (vt.code, vt.bits) != (bt.code, bt.bits):
            self.fail(f"store of a {vt} value into buffer {buf.name!r} of dtype {bt}")

    def visit_BufferLoad(self, load: BufferLoad) -> None:
        self.use_buffer(load.buffer, "loaded from")
        self.check_indices(load.buffer, load.indices, "load from")

    def check_indices(self, buf: Buffer, indices: tuple[PrimExpr, ...], what: str) -> None:
        if len(indices) != len(buf.shape):
            self.fail(f"{what} buffer {buf.name!r} has {len(indices)} indices, but the buffer has "
                      f"{len(buf.shape)} dimensions")
        for i in indices:
            self.visit(i)
            if not i.dtype.is_integer:
                self.fail(f"{what} buffer {buf.name!r}: index of dtype {i.dtype}, expected an integer")

    def visit_BlockRealize(self, realize: BlockRealize) -> None:
        block = realize.block
        label = f"block {block.name!r}"
        if len(realize.iter_values) != len(block.iter_vars):
            self.fail(f"{label} has {len(block.iter_vars)} iterators but is bound to "
                      f"{len(realize.iter_values)} values")
        self.where.append(f"the bindings of {label}")
        for iv, value in zip(block.iter_vars, realize.iter_values):
            self.visit(value)
            if value.dtype != iv.var.dtype:
                self.fail(f"iterator {iv.var.name!r} is {iv.var.dtype} but is bound to a {value.dtype} value")
        self.visit(realize.predicate)
        if not realize.predicate.dtype.is_bool:
            self.fail(f"the predicate must be bool, not {realize.predicate.dtype}")
        self.where.pop()
        self.visit_Block(block)

    def visit_Block(self, block: Block) -> None:
        label = f"block {block.name!r}"
        for iv in block.iter_vars:
            self.check_range(iv.dom, f"the domain of iterator {iv.var.name!r} of {label}")
        self.push(label)
        for iv in block.iter_vars:
            self.define(iv.var, f"an iterator of {label}")
        for buf in block.alloc_buffers:
            self.allocate(buf)
        for what, regions in (("read", block.reads), ("written", block.writes)):
            for region in regions:
                self.check_region(region, what)
        if block.init is not None:
            self.visit(block.init)
        self.visit(block.body)
        self.pop(label)

    def check_range(self, r: Range, what: str) -> None:
        self.check_exprs((r.min, r.extent), what)

    def check_region(self, region: BufferRegion, what: str) -> None:
        buf = region.buffer
        self.use_buffer(buf, f"declared {what}")
        if len(region.region) != len(buf.shape):
            self.fail(f"the region of buffer {buf.name!r} has {len(region.region)} dimensions, but the "
                      f"buffer has {len(buf.shape)}")
        for r in region.region:
            self.check_range(r, f"the region of buffer {buf.name!r}")

    # expressions ---------------------------------------------------------------------------
    def visit_Var(self, var: Var) -> None:
        if not self.defined(var):
            self.fail(f"variable {var.name!r} is used outside the scope that defines it (or never defined)")


def verify(func: PrimFunc) -> None:
    """Raise WellFormedError when `func` breaks an IR invariant; return None otherwise."""
    if not isinstance(func, PrimFunc):
        raise TypeError(f"verify expects a PrimFunc, not {type(func).__name__}")
    _Verifier(func).run()


__all__ = ["WellFormedError", "verify"]
