"""Lowering: block IR -> the flat, loop-level IR the backends compile.

``tdsl.lower(func_or_schedule, target="cpu")`` runs an ordered list of named passes, each a
``PrimFunc -> PrimFunc``, and returns the lowered ``PrimFunc``::

    lowered = tdsl.lower(sch, target="cpu")
    lowered.show()                        # the lowered IR, as script
    tdsl.lower(sch, show=True)            # the same, plus the notes below
    tdsl.lower(sch, trace=True)           # print the IR after every pass
    tdsl.lower(sch, trace=lambda name, f: ...)   # or receive every stage
    for name, f in tdsl.lower.stages(sch): ...   # every stage, as a list
    tdsl.lower.passes_for("cpu")          # the pipeline itself: [Pass(name, fn), ...]

(``stages``, ``notes``, ``passes_for``, ``register_pass``, ``Pass`` and every pass function
can also be imported: ``from tdsl.lower import stages``.)

Notes. Things a user may want to know but that are not errors (a ``vectorized`` loop that
stayed scalar, and why) are collected in the lowered function's attrs under
``"tdsl.lower_notes"``; ``tdsl.lower.notes(lowered)`` returns them and ``show=True`` prints them.

The CPU pipeline, in order:

``thread_bindings_to_serial``
    (CPU only) GPU ``thread_binding`` loops become serial loops, so a GPU-scheduled function
    runs on the CPU with the same results; GPU scopes are handled by ``storage``.
``convert_blocks``
    Blocks become plain code. Block iterators are replaced by their bound values; the
    predicate (``T.where``) becomes an ``if`` around the block; ``T.init()`` becomes
    ``if <every reduce iterator == its domain min>: init`` before the body (TensorIR
    semantics; the condition folds away when the bindings are constants); a block's
    ``alloc_buffer``s become ``Allocate`` around its code (the root block's at the top).
``compact_buffers``
    (CPU) Each intermediate buffer (an ``Allocate``, never a parameter) shrinks to the box one
    iteration of a loop touches and is allocated inside that loop: the innermost loop around
    all its accesses (never a vectorized one or one inside it) through which no value can
    flow from one iteration to another: its iterations touch disjoint boxes (every loop
    between the old allocation and the new one moves the box by at least its extent, in a
    mixed-radix way for nested loops), or each iteration first writes a whole box (a store
    under loops only, no ``if``) that covers everything it then reads (a stencil's producer
    recomputed per row keeps its rows). Without such a loop the buffer shrinks in place to
    the box all its accesses touch. Indices are shifted by the box's corner; a dimension
    whose accessed range is unknown (a gathered index) stays whole; let-bound variables in
    indices and loop bounds are seen through. So a block computed at a row loop
    (``compute_at``) keeps one row: softmax's ``E[4096, 1024]`` becomes ``E[1024]`` on the
    stack of each thread, a row reduction's ``row_max[4096]`` one element and an ``rfactor``
    buffer one vector. Symbolic sizes are allowed when they use only the function's own
    dimensions (a row of a symbolic width ``m`` goes to the heap, once per parallel task).
    Stores indexed by digits of loop variables (``B_pack[j // 16, k, j % 16]``, what
    ``transform_layout`` makes) write a whole box when the loop range is aligned to the
    digits, so a pack computed at a loop under a parallel loop becomes private to each
    parallel iteration; a buffer written first by each parallel iteration moves into the
    parallel loop even when it does not shrink (threads never share a scratch buffer).
``index_checks``
    (CPU) A data-dependent index (a gather, ``B[i] = A[I[i]]``) gets a run-time check on its
    axis (``tdsl.index_check``: BoundsError instead of a wild access); with
    ``bounds_check=True`` every axis of every multi-dimensional access does.
``flatten_buffers``
    Every buffer becomes 1-d. ``A[i, j]`` -> ``A[i * stride_0 + j * stride_1 + elem_offset]``
    with the strides from ``buffer.strides`` or row-major from the shape (symbolic shapes
    included). Indices keep their integer type (int32 unless the program uses int64); widening
    address arithmetic to int64 is the codegen's job. Parameter buffers are replaced by new
    flat Buffers of the same name, dtype and scope.
``simplify``
    ``tdsl.arith.simplify`` on every integer and boolean expression, knowing the ranges of the
    enclosing loops. Float arithmetic is left as written.
``unroll``
    ``unrolled`` loops with a constant extent up to 64 become copies of their body (the
    variables defined inside get fresh copies); longer ones keep the kind for codegen.
    Unrolling first lets a vectorized loop around a small unrolled one become vector code.
``vectorize``
    A ``vectorized`` loop of constant extent becomes vector code: the loop variable becomes
    ``Ramp(min, 1, lanes)``, loads and stores contiguous in it become vector loads/stores,
    loop-invariant values are ``Broadcast``, math calls, casts and ``Select`` take vector
    operands. The body may hold stores, lets, ``if``s and serial loops (a loop inside runs once
    for all lanes, when no written place moves with it). An ``if`` whose condition differs
    between lanes is handled in two cases: a comparison affine in the loop variable (the tail
    guard of a non-dividing split) runs the vector body when every lane passes and the lanes
    one by one otherwise; ``if c: X[i] = a else: X[i] = b`` becomes ``X[i] = Select(c, a, b)``
    when a and b only load what c or the store already touch. Lanes are powers of two up to
    64 (on CUDA 4, or 16 bytes: 8 halves, 16 int8): an extent of 24 becomes a 16-lane and an 8-lane body, 256 a serial loop
    ``j_c`` over four 64-lane bodies. Accesses to a written buffer must not meet across lanes
    (places a constant distance d apart, with d <= 0 or d >= lanes for a later access).
    A loop that cannot be rewritten stays a ``serial`` loop and adds a note (``loop j in
    block C was not vectorized: the load from 'A' is not contiguous in j``); refused are: a
    non-constant extent, a reduction into a loop-invariant location, strided or gathered
    accesses, allocations or non-serial loops inside, other lane-dependent ``if``s, extern
    calls, lane-dependent ``T.if_then_else`` guarding a load.
``storage``
    (CPU) Intermediates of constant size up to 16 KiB get scope ``local`` (stack), the
    others ``global`` (heap); ``shared`` becomes one of those. Heap allocations move out of
    serial loops and branches up to the nearest enclosing ``parallel`` loop (each parallel
    iteration keeps its own copy) or the function top, unless their size depends on a
    variable bound on the way.
``simplify``, ``remove_no_op``
    Clean up: constant conditions, empty and zero-trip loops, one-trip loops (not thread
    bindings), unused lets and allocations, ``X[i] = X[i]``.

The CUDA pipeline (everything ``build(..., target="cuda")`` runs before kernel splitting and
barrier planning, which stay in ``tdsl.backends.cuda``)::

    lower_fused_kernels            a block annotated tdsl.fused_kernel (the attention chain) -> one
                                   call of tdsl's fused CUDA kernel, run as a host step (fused_kernels)
    verify_thread_bindings         every computing block under a threadIdx loop (gpu_bindings)
    check_thread_exchange          no data passed between threads via local/global (gpu_exchange)
    apply_tensor_intrinsics
    lower_cross_thread_reductions  reductions bound to threadIdx.x -> all-reduce (cross_thread)
    convert_blocks
    lower_warp_memory              TVM's "warp" tiles (lane, register) -> the lane's registers (gpu_warp_memory)
    compact_gpu_buffers            local/shared buffers -> one thread's / block's tile (gpu_compact)
    lane_fragments                 mma fragments -> the lane's registers, size / 32 (gpu_lane_fragments)
    swizzle_shared                 shared buffers annotated tdsl.swizzle: 16-byte chunks XOR rows (gpu_swizzle)
    inject_software_pipeline       loops annotated software_pipeline_stage (and _order, _async_stages):
                                   multi-buffered tiles, prologue, steady state, epilogue, cp.async
                                   commit/wait groups (software_pipeline)
    index_checks                   (only for the emulator's checked variant, attr tdsl.bounds_check)
                                   every axis of every access not proven in bounds
    flatten_buffers, simplify, unroll, vectorize (4 lanes, or 16 bytes of narrower elements)
    lower_async_copies             the async stages' global -> shared copies of 4/8/16 aligned bytes
                                   -> T.ptx_cp_async (software_pipeline)
    simplify, remove_no_op

Thread bindings and GPU scopes are kept. A backend adds its own passes with
``register_pass(target, Pass(name, fn), after="...")``.

What the lowered form adds to docs/internals.md:

(``func.attrs`` is a tuple of (key, value) pairs: ``dict(func.attrs)[key]`` reads one.)

* ``"tdsl.flat_params"``: the original (n-d) parameter Buffers, in the order of
  ``func.buffer_params``. Their shapes hold the symbolic dimension Vars that the flat body
  uses, so codegen and the interpreter bind those from the arguments' shapes, and check
  dtypes and shapes against them. The flat parameter buffer has shape ``(prod(shape),)``
  (for explicit strides: the last reachable element + 1; ``elem_offset`` added).
* ``"tdsl.lower_notes"``: a tuple of strings (see Notes).
* Scopes after ``storage`` on the CPU are only ``local`` (stack) and ``global`` (heap).
* Vector loads/stores have a ``Ramp`` index of stride 1; a lane-uniform
  ``T.if_then_else(cond, vec_a, vec_b)`` keeps a scalar condition; ``Select`` has all
  operands with the same lanes.
"""
from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import TargetError
from ..ir import Block, PrimFunc, as_prim_func
from ..ir.attrs import LOWER_NOTE, LOWER_NOTES, TENSOR_INTRIN, get_attr
from ..ir.tree import walk
from ..target import parse_target
from ..tracebacks import public_entry
from .blocks import convert_blocks, thread_bindings_to_serial
from .compact import compact_buffers
from .cross_thread import lower_cross_thread_reductions
from .flatten import flatten_buffers
from .fused_kernels import lower_fused_kernels
from .gpu_bindings import verify_thread_bindings
from .gpu_compact import compact_gpu_buffers
from .gpu_exchange import check_thread_exchange
from .gpu_lane_fragments import lane_fragments
from .gpu_swizzle import swizzle_shared
from .gpu_warp_memory import lower_warp_memory
from .index_checks import index_checks, unproven_index_checks
from .simplify import remove_no_op, simplify
from .software_pipeline import inject_software_pipeline, lower_async_copies
from .storage import storage
from .unroll import unroll
from .vectorize import make_vectorize, vectorize


@dataclass(frozen=True)
class Pass:
    """A named lowering step, PrimFunc -> PrimFunc."""

    name: str
    fn: Callable[[PrimFunc], PrimFunc]

    def __call__(self, func: PrimFunc) -> PrimFunc:
        return self.fn(func)


def _tensor_intrinsics(target: str) -> Callable[[PrimFunc], PrimFunc]:
    """Swap tensorized blocks' descriptions for their implementations (see
    tdsl.lower.tensorize); free for functions that use no tensor intrinsic."""

    def run(func: PrimFunc) -> PrimFunc:
        keys = _annotation_keys(func)
        if TENSOR_INTRIN not in keys and LOWER_NOTE not in keys:
            return func
        from .tensorize import apply_tensor_intrinsics

        return apply_tensor_intrinsics(func, target)

    return run


def _annotation_keys(func: PrimFunc) -> set:
    """The annotation keys of every block of `func` (blocks are statements: expressions, most of
    the tree, are not walked)."""
    return {k for s in walk(func.body) if isinstance(s, Block) for k, _ in s.annotations}


_PIPELINES: dict[str, list[Pass]] = {
    "cpu": [
        Pass("apply_tensor_intrinsics", _tensor_intrinsics("cpu")),
        Pass("thread_bindings_to_serial", thread_bindings_to_serial),
        Pass("convert_blocks", convert_blocks),
        Pass("compact_buffers", compact_buffers),
        Pass("index_checks", index_checks),
        Pass("flatten_buffers", flatten_buffers),
        Pass("simplify", simplify),
        Pass("unroll", unroll),
        Pass("vectorize", vectorize),
        Pass("storage", storage),
        Pass("simplify", simplify),
        Pass("remove_no_op", remove_no_op),
    ],
    "cuda": [
        Pass("lower_fused_kernels", lower_fused_kernels),
        Pass("verify_thread_bindings", verify_thread_bindings),
        Pass("check_thread_exchange", check_thread_exchange),
        Pass("apply_tensor_intrinsics", _tensor_intrinsics("cuda")),
        Pass("lower_cross_thread_reductions", lower_cross_thread_reductions),
        Pass("convert_blocks", convert_blocks),
        Pass("lower_warp_memory", lower_warp_memory),
        Pass("compact_gpu_buffers", compact_gpu_buffers),
        Pass("lane_fragments", lane_fragments),
        Pass("swizzle_shared", swizzle_shared),
        Pass("inject_software_pipeline", inject_software_pipeline),
        Pass("index_checks", unproven_index_checks),
        Pass("flatten_buffers", flatten_buffers),
        Pass("simplify", simplify),
        Pass("unroll", unroll),
        Pass("vectorize", make_vectorize(max_lanes=4, max_bytes=16)),
        Pass("lower_async_copies", lower_async_copies),
        Pass("simplify", simplify),
        Pass("remove_no_op", remove_no_op),
    ],
}


def _target_name(target) -> str:
    """The pipeline for `target`: anything `tdsl.target.parse_target` takes ("cpu", "llvm",
    "llvm -mcpu=znver3", "cuda -arch=sm_90", a Target)."""
    name = parse_target(target).kind
    if name not in _PIPELINES:
        raise TargetError(f"unknown target {target!r}; expected one of {', '.join(map(repr, _PIPELINES))}")
    return name


def passes_for(target="cpu") -> list[Pass]:
    """The ordered passes `lower` runs for `target` (a copy: editing it changes nothing); the
    tensor intrinsics are checked against that very target ("llvm -mcpu=x86-64-v3" has no AVX-512)."""
    return [Pass(p.name, _tensor_intrinsics(target)) if p.name == "apply_tensor_intrinsics" else p
            for p in _PIPELINES[_target_name(target)]]


def register_pass(target: str, new: Pass, *, after: str | None = None, before: str | None = None) -> None:
    """Add a pass to `target`'s pipeline: after the (first) pass named `after`, before the one
    named `before`, or at the end. Registering a name that is already there replaces that pass
    in place (so re-importing a backend does not add it twice)."""
    pipeline = _PIPELINES[_target_name(target)]
    names = [p.name for p in pipeline]
    if new.name in names:
        pipeline[names.index(new.name)] = new
        return
    anchor = after if after is not None else before
    if anchor is None:
        pipeline.append(new)
        return
    if anchor not in names:
        raise ValueError(f"no pass named {anchor!r} in the {target!r} pipeline; passes: {', '.join(names)}")
    index = names.index(anchor) + (1 if after is not None else 0)
    pipeline.insert(index, new)


def _run(func: PrimFunc, p: Pass) -> PrimFunc:
    try:
        return p(func)
    except Exception as exc:
        if hasattr(exc, "add_note"):
            exc.add_note(f"(in lowering pass {p.name!r} of function {func.name!r})")
        raise


def _print_stage(name: str, func: PrimFunc) -> None:
    print(f"# ---- after {name} ----")
    print(func.script())


@public_entry
def stages(func_or_schedule, target="cpu") -> list[tuple[str, PrimFunc]]:
    """[("input", func), (pass name, func after that pass), ...] for every pass of `target`."""
    func = as_prim_func(func_or_schedule, "lower()")
    out = [("input", func)]
    for p in passes_for(target):
        func = _run(func, p)
        out.append((p.name, func))
    return out


@public_entry
def lower(func_or_schedule, target="cpu", *, show: bool = False,
          trace: bool | Callable[[str, PrimFunc], None] = False) -> PrimFunc:
    """Lower a PrimFunc or Schedule for `target` ("cpu", "cuda", or a TVM target string such as
    "llvm -mcpu=znver3"; see `tdsl.target.parse_target`); see the module docs.

    show: print the lowered IR and the notes. trace: True prints the IR after every pass; a
    callable is called as trace(pass_name, func) after every pass."""
    from ..deep import run_deep

    func = as_prim_func(func_or_schedule, "lower()")
    report = _print_stage if trace is True else (trace or None)
    for p in passes_for(target):
        func = run_deep(lambda: _run(func, p))   # noqa: B023 - called at once; deep programs on a big stack
        if report is not None:
            report(p.name, func)
    if show:
        _show(func)
    return func


def _show(func: PrimFunc) -> None:
    """lower(show=True): the IR and its notes, once (a notebook cell that ends with the call
    would render the returned function again: that rendering becomes one line)."""
    from ..script.highlight import display_html
    from ..script.html import Shown, mark_shown

    if display_html(Shown(func, notes(func))):
        mark_shown(func)
        return
    func.show()
    for note in notes(func):
        print(f"note: {note}")


def notes(func: PrimFunc) -> list[str]:
    """The notes lowering left on `func` (e.g. loops that stayed scalar, and why)."""
    return list(get_attr(func, LOWER_NOTES, ()))


# `tdsl.lower` is both this package and (via tdsl's lazy attributes) the `lower` function; which
# one a user gets depends on import order. Make both callable and both carry the helpers.
lower.stages = stages  # type: ignore[attr-defined]
lower.notes = notes  # type: ignore[attr-defined]
lower.passes_for = passes_for  # type: ignore[attr-defined]


class _CallableModule(types.ModuleType):
    @public_entry   # the outermost tdsl frame when `tdsl.lower` is this module: it trims too
    def __call__(self, *args, **kwargs) -> PrimFunc:
        return lower(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = [
    "Pass",
    "compact_buffers",
    "convert_blocks",
    "flatten_buffers",
    "lower",
    "make_vectorize",
    "notes",
    "passes_for",
    "register_pass",
    "remove_no_op",
    "simplify",
    "stages",
    "storage",
    "thread_bindings_to_serial",
    "unroll",
    "vectorize",
]
