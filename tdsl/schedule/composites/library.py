"""Library or generated code, per block: generic library intrinsics made concrete for a block.

A library routine takes any shape, so ``"blas.sgemm"`` names no fixed description: `tensorize`
here finds the block's GEMM loops (the innermost three around it, i j k), reads their extents,
and tries the concrete intrinsics of `tdsl.intrinsics.blas` for each storage layout of A and B
(``nn``, ``nt``, ``tn``, ``tt``; with and without the block's init), keeping the first that
matches. Loops outside the three (a batch) stay as generated loops around the call.

``Schedule.tensorize(block_or_loop, "blas.sgemm")`` calls this (the trace records the generic
name, so it replays on other shapes); ``"cublas.sgemm"`` / ``"cublas.dgemm"`` are the same for
target="cuda" (`tdsl.intrinsics.cublas`: a host step between the kernels).
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...intrinsics import blas, cublas
from ...ir import BlockRealize, BufferStore, For, IntImm, PrimFunc, Var
from ...ir.tree import loops_in_scope
from ..analysis import expr_text
from ..errors import block_name, loop_name, schedule_error
from ..primitives import blockize as _tensorize
from ..tree import find_block, find_loop

GENERIC = blas.GENERIC + cublas.GENERIC


def is_generic(name) -> bool:
    """Whether `name` is a library intrinsic made concrete per block ("blas.sgemm", "cublas.dgemm", ...)."""
    return isinstance(name, str) and name in GENERIC


def _library(generic: str):
    return cublas if generic.startswith("cublas.") else blas


def gemm_loops(func: PrimFunc, target: str | Var, primitive: str = "tensorize") -> tuple[list[For], BlockRealize]:
    """The three loops (i, j, k) the library GEMM replaces and the block under them."""
    if isinstance(target, Var):
        loop, _ = find_loop(func, target, primitive)
        chain = [loop]
        while isinstance(chain[-1].body, For):
            chain.append(chain[-1].body)
        node = chain[-1].body
        if not isinstance(node, BlockRealize):
            raise schedule_error(func, primitive, f"the body of {loop_name(target)} is not a perfect loop nest "
                                 "around one block", loops=(target,),
                                 fix="tensorize the block itself, or a loop right above its i, j, k loops")
        loops, realize = chain, node
        where: dict = {"loops": (target,)}
    else:
        realize, path = find_block(func, target, primitive)
        loops = loops_in_scope(path + (realize,))
        where = {"blocks": (target,)}
        loops = loops[-3:]   # the loops above them (a batch) stay around the call
    if len(loops) != 3:
        raise schedule_error(func, primitive, f"a library GEMM replaces three loops (i, j, k) around a block; "
                             f"{_where(target)} has {len(loops)}", **where,
                             fix="tensorize a matmul-shaped block, C[i, j] += A[i, k] * B[k, j] under loops i, j, k "
                                 "(loops above them, e.g. a batch, stay around the call)")
    if not all(loops[n].body is loops[n + 1] for n in range(2)) or loops[2].body is not realize:
        raise schedule_error(func, primitive, f"the loops around {block_name(realize.block.name)} are not a "
                             "perfect nest", **where, fix="move other statements out of the i, j, k loops")
    for f in loops:
        if not (isinstance(f.extent, IntImm) and isinstance(f.min, IntImm) and f.min.value == 0):
            raise schedule_error(func, primitive, f"{loop_name(f.loop_var)} has extent {expr_text(f.extent)} starting at "
                                 f"{expr_text(f.min)}; the library intrinsics are made for constant extents from 0",
                                 loops=(f.loop_var,), fix="give the function constant shapes")
    return loops, realize


def _where(target) -> str:
    return loop_name(target) if isinstance(target, Var) else block_name(target)


def candidates(func: PrimFunc, target: str | Var, generic: str) -> tuple[Var, list[str]]:
    """The loop to tensorize and the concrete intrinsic names to try, in order."""
    loops, realize = gemm_loops(func, target)
    loop_order, iter_order = _orders(loops, realize)
    extent = {r: int(f.extent.value) for r, f in zip(loop_order, loops) if isinstance(f.extent, IntImm)}
    m, n, k = extent["i"], extent["j"], extent["k"]
    routine = generic.split(".", 1)[1]
    inits = (True, False) if realize.block.init is not None else (False,)
    names = [_library(generic).concrete_name(routine, layout, m, n, k, init, loop_order, iter_order)
             for layout in blas.LAYOUTS for init in inits]
    return loops[0].loop_var, names


def gemm_extents(func: PrimFunc, block: str) -> tuple[int, int, int] | None:
    """(M, N, K) of a block the library intrinsics may take (three constant loops around it, in
    any order), else None; whether it matches a layout is tensorize's to say."""
    try:
        loops, realize = gemm_loops(func, block)
    except ScheduleError:
        return None
    loop_order, _ = _orders(loops, realize)
    kinds = {iv.kind for iv in realize.block.iter_vars}
    if kinds != {"S", "R"}:
        return None
    extent = {r: int(f.extent.value) for r, f in zip(loop_order, loops) if isinstance(f.extent, IntImm)}
    return extent["i"], extent["j"], extent["k"]


def _orders(loops: list[For], realize: BlockRealize) -> tuple[str, str]:
    """The roles (i: C's row, j: C's column, k: the reduction) of the three loops, outer to inner,
    and of the block's iterators, in their order: "ijk", "ijk" unless the code reorders them (the
    concrete intrinsic's description is then written in the same order). Anything else: "ijk"
    (the matcher explains what differs)."""
    block = realize.block
    store = block.body
    if not (isinstance(store, BufferStore) and len(store.indices) == 2 and len(block.iter_vars) == 3):
        return "ijk", "ijk"
    row, col = store.indices
    role: dict = {}
    for iv, value in zip(block.iter_vars, realize.iter_values):
        r = "i" if iv.var is row else "j" if iv.var is col else "k" if iv.kind == "R" else None
        if r is None or not isinstance(value, Var):
            return "ijk", "ijk"
        role[iv.var] = role[value] = r
    loop_order = "".join(role.get(f.loop_var, "?") for f in loops)
    iter_order = "".join(role[iv.var] for iv in block.iter_vars)
    if sorted(loop_order) != ["i", "j", "k"] or sorted(iter_order) != ["i", "j", "k"]:
        return "ijk", "ijk"
    return loop_order, iter_order


def tensorize(func: PrimFunc, target: str | Var, intrin_name: str,
              preserve_unit_iters: bool = False) -> tuple[PrimFunc, None]:
    """The pure primitive behind ``sch.tensorize(x, "blas.sgemm")`` (module docs)."""
    loop, names = candidates(func, target, intrin_name)
    if _library(intrin_name) is blas:
        blas.find()   # a TargetError when this process has no BLAS (cuBLAS is needed only to run)
    first: ScheduleError | None = None
    for name in names:
        try:
            return _tensorize.tensorize(func, loop, name, preserve_unit_iters)
        except ScheduleError as exc:
            first = first or exc
    assert first is not None
    text = str(first).replace(repr(names[0]), repr(intrin_name), 1)
    raise ScheduleError(text + f"\n  (tried the layouts {', '.join(blas.LAYOUTS)} of A and B: none matches; "
                        "C must be row-major with unit inner stride)") from None
