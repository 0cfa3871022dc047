"""`lower_cross_thread_reductions` (listed in `lower(f, "cuda")`, before ``convert_blocks``): reduction blocks driven by a threadIdx loop.

Before (block IR; `bind(ki, "threadIdx.x")` of a reduction loop, TVM's semantics)::

    for ko in range(8):
        for ki in T.thread_binding(32, thread="threadIdx.x"):
            with T.block("S"):
                vi = T.axis.spatial(n, i); vk = T.axis.reduce(256, ko * 32 + ki)
                with T.init(): S[vi] = 0
                S[vi] = S[vi] + A[vi, vk]

After (loop-level code for that nest; the other blocks are left to ``convert_blocks``)::

    for ki in T.thread_binding(32, thread="threadIdx.x"):
        S_red = T.allocate([1], "float32", "local")
        S_red[0] = 0                                   # the combiner's identity
        for ko in range(8):
            S_red[0] = S_red[0] + A[i, ko * 32 + ki]   # in-thread partial
        T.evaluate(tdsl_allreduce("add", S_red[0], ki, 32))   # every thread gets the total
        if ki == 0:
            S[i] = 0 + S_red[0]                        # the init value (or the old S[i]) and the total

The CUDA codegen prints ``tdsl_allreduce`` as a warp-shuffle butterfly (``__shfl_xor_sync``)
when the threads fit in a warp, then a shared-memory exchange between warps (two
``__syncthreads()``) for up to 1024 threads; a thread count that is neither a power of two up
to 32 nor a multiple of 32 goes through shared memory only. The bound loop must have the
launch's threadIdx.x extent (every thread of the block takes part) and all loops driving the
block's reduction iterators must be inside the nest (``split`` the reduction and bind its inner
part). A nest that does not fit is refused with a TargetError saying what to change.
"""
from __future__ import annotations

from dataclasses import replace

from ..dtypes import DataType
from ..errors import TargetError
from ..ir import (
    Allocate,
    Binary,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Evaluate,
    FloatImm,
    For,
    IfThenElse,
    IntImm,
    IRMutator,
    PrimFunc,
    SeqStmt,
    Stmt,
    StringImm,
    collect,
    free_vars,
    substitute,
)

ALLREDUCE = "tdsl_allreduce"


def _is_thread(loop: For) -> bool:
    return loop.kind == "thread_binding" and (loop.thread_tag or "").startswith("threadIdx")


def identity(op: str, dtype: DataType):
    """The combiner's identity in `dtype`."""
    if op == "add":
        return FloatImm(0.0, dtype) if dtype.is_float else IntImm(0, dtype)
    if op == "mul":
        return FloatImm(1.0, dtype) if dtype.is_float else IntImm(1, dtype)
    if dtype.is_float:
        return FloatImm(float("-inf") if op == "max" else float("inf"), dtype)
    from ..arith.analyzer import dtype_bound

    lo, hi = dtype_bound(dtype)
    value = lo if op == "max" else hi
    assert value is not None  # integer dtypes are bounded
    return IntImm(value, dtype)


def _conjuncts(pred) -> list:
    if isinstance(pred, Binary) and pred.op == "and":
        return _conjuncts(pred.a) + _conjuncts(pred.b)
    return [pred]


def _chain(loop: For) -> tuple[list[For], BlockRealize] | None:
    loops = [loop]
    node = loop.body
    while isinstance(node, For):
        loops.append(node)
        node = node.body
    if isinstance(node, BlockRealize) and not collect(node.block.body, BlockRealize):
        return loops, node
    return None


def _reduce_drivers(realize: BlockRealize) -> set:
    out: set = set()
    for iv, v in zip(realize.block.iter_vars, realize.iter_values):
        if iv.kind == "R":
            out |= free_vars(v)
    return out


def _spatial_drivers(realize: BlockRealize) -> set:
    out: set = set()
    for iv, v in zip(realize.block.iter_vars, realize.iter_values):
        if iv.kind == "S":
            out |= free_vars(v)
    return out


class _Rewriter(IRMutator):
    def __init__(self):
        self.count = 0

    def visit_BlockRealize(self, op: BlockRealize) -> Stmt:
        return self.generic_visit(op)

    def visit_For(self, loop: For) -> Stmt:
        chain = _chain(loop)
        if chain is not None:
            loops, realize = chain
            reduce_vars, spatial_vars = _reduce_drivers(realize), _spatial_drivers(realize)
            threads = [f for f in loops if _is_thread(f) and f.loop_var in reduce_vars]
            if threads and all(f.loop_var not in spatial_vars for f in loops):
                return self.rewrite(loops, realize, threads)
        return self.generic_visit(loop)

    def rewrite(self, loops: list[For], realize: BlockRealize, threads: list[For]) -> Stmt:
        from ..ir.reduction_form import simple_reduction

        block = realize.block
        red = simple_reduction(block)
        if red is None:
            raise TargetError(f'block "{block.name}" is a reduction driven by the threadIdx loop '
                              f"{threads[0].loop_var.name} but is not of the form B[i] = B[i] + value (or *, max, min); "
                              "a cross-thread reduction needs that form")
        if len(threads) > 1 or threads[0].thread_tag != "threadIdx.x":
            names = ", ".join(f"{f.loop_var.name} ({f.thread_tag})" for f in threads)
            raise TargetError(f'block "{block.name}": its reduction is bound to {names}; a cross-thread reduction runs '
                              'over one loop bound to threadIdx.x: fuse the reduction loops first and bind the fused '
                              'loop with sch.bind(loop, "threadIdx.x")')
        ct = threads[0]
        if not isinstance(ct.extent, IntImm):
            raise TargetError(f'block "{block.name}": the cross-thread reduction loop {ct.loop_var.name} needs a '
                              "constant extent (the number of threads that reduce together)")
        outside = _reduce_drivers(realize) - {f.loop_var for f in loops}
        if outside:
            raise TargetError(f'block "{block.name}": loop(s) {", ".join(sorted(v.name for v in outside))} outside '
                              f"the threadIdx loop {ct.loop_var.name} also drive its reduction; a cross-thread reduction "
                              "reduces over the loops inside it: reorder them inside (or rfactor)")
        self.count += 1
        binding = {iv.var: v for iv, v in zip(block.iter_vars, realize.iter_values)}
        store = red.store
        dtype = store.buffer.dtype
        indices = tuple(substitute(i, binding) for i in store.indices)
        value = substitute(red.value, binding)
        partial = Buffer(f"{store.buffer.name}_red", (IntImm(1, ct.loop_var.dtype),), dtype, scope="local")
        zero = (IntImm(0, ct.loop_var.dtype),)
        acc = BufferLoad(partial, zero)
        update: Stmt = BufferStore(partial, Binary(red.op, acc, value), zero)
        pred = realize.predicate
        if not (isinstance(pred, IntImm) and pred.value == 1):
            update = IfThenElse(pred, update)
        for f in reversed([f for f in loops if f is not ct]):
            update = replace(f, body=update)
        base = substitute(red.init, binding) if red.init is not None else BufferLoad(store.buffer, indices)
        reduce_call = Evaluate(Call(dtype, ALLREDUCE, (StringImm(red.op), acc, ct.loop_var, ct.extent)))
        write = IfThenElse(ct.loop_var.eq(ct.min), BufferStore(store.buffer, Binary(red.op, base, acc), indices))
        # the part of the predicate that does not depend on the nest's loops (a spatial tail
        # guard, e.g. rows split by a non-dividing factor) guards the store as well
        chain_vars = {f.loop_var for f in loops}
        outer = [c for c in _conjuncts(pred) if not free_vars(c) & chain_vars
                 and not (isinstance(c, IntImm) and c.value == 1)]
        if outer:
            cond = outer[0]
            for c in outer[1:]:
                cond = Binary("and", cond, c)
            write = IfThenElse(cond, write)
        body = SeqStmt((BufferStore(partial, identity(red.op, dtype), zero), update, reduce_call, write))
        return replace(ct, body=Allocate(partial, body))


def lower_cross_thread_reductions(func: PrimFunc) -> PrimFunc:
    """Rewrite every reduction block driven by a threadIdx loop (see the module docs)."""
    rewriter = _Rewriter()
    body = rewriter.visit(func.body)
    if not rewriter.count:
        return func
    return func.with_body(body)
