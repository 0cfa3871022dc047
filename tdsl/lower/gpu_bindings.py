"""GPU lowering passes on the block IR: `verify_thread_bindings` (listed in `lower(f, "cuda")`).

Every block that computes something sits under a ``threadIdx`` loop; otherwise an
`UnboundBlockError` names the block and the `bind` that is missing. Warp-wide blocks
(TVM's rule): a block tensorized with a CUDA tensor intrinsic (annotation
"tdsl.tensor_intrin" naming an intrinsic whose target is "cuda", e.g. the WMMA ones) runs
on the 32 lanes of a warp, which are an implicit ``threadIdx.x`` of extent 32. Such a block
must be under a ``blockIdx`` loop; warps are ``threadIdx.y``/``threadIdx.z`` loops (none:
one warp per block); it needs no ``threadIdx.x`` loop, and one around it must have extent
32 and not be used by the block (an explicit lane loop). In a kernel (outermost
blockIdx/threadIdx nest) holding a warp-wide block, every other computing block must be
under a ``threadIdx.x`` loop (else all 32 lanes would run it); such loops have extent <= 32.
"""
from __future__ import annotations

from ..errors import ScheduleError, TargetError
from ..ir import (
    Allocate,
    Block,
    BlockRealize,
    Call,
    For,
    IfThenElse,
    IntImm,
    IRVisitor,
    LetStmt,
    PrimFunc,
    SeqStmt,
    Stmt,
    collect,
    free_vars,
)
from ..script.printer import message_text as _expr_text

WARP_SIZE = 32


class UnboundBlockError(ScheduleError, TargetError):
    """A block that is not under the thread bindings a CUDA kernel needs (both a ScheduleError
    and a TargetError, so either `except` catches it)."""


# ----------------------------------------------------------------------------- block-level check

def _computes(block: Block) -> bool:
    """True when the block itself (not a nested block) stores something."""
    found: list[bool] = []

    class _Finder(IRVisitor):
        def visit_BlockRealize(self, op):
            pass  # nested blocks are checked on their own

        def visit_BufferStore(self, op):
            found.append(True)

    finder = _Finder()
    finder.visit(block.body)
    if block.init is not None:
        finder.visit(block.init)
    return bool(found)




def host_library_call(block: Block) -> str | None:
    """The cuBLAS intrinsic a block is tensorized with (the host calls it between kernels), else None."""
    from ..intrinsics import cublas
    from .tensorize import intrin_of

    name = intrin_of(block)
    return name if cublas.is_concrete(name) else None


def _check_host_call(block: Block, tags: tuple[str, ...]) -> None:
    if tags:
        raise UnboundBlockError(
            f'block "{block.name}" is a cuBLAS call ({host_library_call(block)!r}), which the host makes between '
            f"kernel launches, but it is inside a loop bound to {', '.join(tags)}: leave the loops around it "
            "unbound (a batch loop stays a host loop), or compute the block with generated code")


def _warp_intrin(block: Block) -> str | None:
    """The CUDA tensor intrinsic a block is tensorized with (a warp-wide block), else None."""
    from ..intrinsics.registry import TensorIntrin
    from .tensorize import intrin_of

    name = intrin_of(block)
    if name is None or host_library_call(block) is not None:
        return None
    try:
        intrin = TensorIntrin.get(name)
    except ScheduleError:
        return None  # apply_tensor_intrinsics reports unknown intrinsics
    return name if intrin.target == "cuda" else None


def warp_calls(func: PrimFunc) -> frozenset[str]:
    """Names of the extern functions that the CUDA tensor intrinsics used in `func` call: a
    kernel calling one of them runs warp-wide (threadIdx.x = 32 lanes)."""
    from ..intrinsics.registry import TensorIntrin

    out: set[str] = set()
    for realize in collect(func.body, BlockRealize):
        name = _warp_intrin(realize.block)
        if name is not None:
            out |= {c.op for c in collect(TensorIntrin.get(name).impl.body, Call)}
    return frozenset(out)


def verify_thread_bindings(func: PrimFunc) -> PrimFunc:
    """Raise `UnboundBlockError` for the first computing block without the bindings it needs
    (the rules are in the module docs); returns `func` unchanged."""
    root = func.root_block

    def walk(stmt: Stmt, tags: tuple[str, ...], loops: tuple[For, ...], warp_nest: bool) -> None:
        if isinstance(stmt, For):
            tag = stmt.thread_tag if stmt.kind == "thread_binding" else None
            if tag is not None and not tag.startswith(("threadIdx", "blockIdx")):
                tag = None  # vthread loops become serial loops
            if tag is not None and not any(per_thread_tag(f) for f in loops):
                warp_nest = _has_warp_block(stmt)   # a kernel root: does the kernel run warps?
            walk(stmt.body, tags + ((tag,) if tag else ()), loops + (stmt,), warp_nest)
            return
        if isinstance(stmt, BlockRealize):
            block = stmt.block
            if host_library_call(block) is not None:
                _check_host_call(block, tags)
                return  # a library call the host makes between kernels (tdsl.intrinsics.cublas)
            if block is not root and (_warp_intrin(block) is not None or _computes(block)):
                _check_block(stmt, tags, loops, warp_nest)
            if _warp_intrin(block) is not None:
                return  # the tensorized body runs as one warp-wide call
            walk(block.body, tags, loops, warp_nest)
            if block.init is not None:
                walk(block.init, tags, loops, warp_nest)
            return
        for child in stmt_children(stmt):
            walk(child, tags, loops, warp_nest)

    walk(func.body, (), (), False)
    return func


def _has_warp_block(stmt: Stmt) -> bool:
    return any(_warp_intrin(r.block) is not None for r in collect(stmt, BlockRealize))


def _check_block(realize: BlockRealize, tags: tuple[str, ...], loops: tuple[For, ...], warp_nest: bool) -> None:
    block = realize.block
    names = tuple(f.loop_var.name for f in loops)
    intrin = _warp_intrin(block)
    if intrin is None:
        if not any(t.startswith("threadIdx") for t in tags):
            raise UnboundBlockError(_unbound_message(block.name, tags, names))
        if warp_nest and "threadIdx.x" not in tags:
            raise UnboundBlockError(
                f'block "{block.name}" is in a kernel with warp-wide (tensor-core) blocks, which launches '
                f"threadIdx.x = {WARP_SIZE} lanes, but is not under a threadIdx.x loop, so every lane would run it: "
                f'bind one of its loops with sch.bind(loop, "threadIdx.x") (extent <= {WARP_SIZE})')
        return
    if not any(t.startswith("blockIdx") for t in tags):
        raise UnboundBlockError(
            f'block "{block.name}" (tensorized with {intrin!r}, which runs on a whole warp) is not under a '
            f'blockIdx loop: bind an outer loop with sch.bind(loop, "blockIdx.x")')
    used = set()
    for v in realize.iter_values + (realize.predicate,):
        used |= free_vars(v)
    for f in loops:
        if f.kind != "thread_binding" or f.thread_tag != "threadIdx.x":
            continue
        if not (isinstance(f.extent, IntImm) and f.extent.value == WARP_SIZE) or f.loop_var in used:
            depends = " and the block depends on it" if f.loop_var in used else ""
            raise UnboundBlockError(
                f'block "{block.name}" (tensorized with {intrin!r}) runs on the {WARP_SIZE} lanes of a warp, '
                f"which are threadIdx.x, but loop {f.loop_var.name} binds threadIdx.x with extent "
                f"{_expr_text(f.extent)}{depends}: bind warps to threadIdx.y/z "
                f"and leave threadIdx.x to the lanes (or bind a loop of {WARP_SIZE} lanes the block does not use)")


def _unbound_message(name: str, tags: tuple[str, ...], loops: tuple[str, ...]) -> str:
    where = f"inside loops {', '.join(loops)}" if loops else "not inside any loop"
    missing = 'sch.bind(loop, "threadIdx.x")'
    if not any(t.startswith("blockIdx") for t in tags):
        missing += ' (and usually an outer one with sch.bind(loop, "blockIdx.x"))'
    return (f'block "{name}" is not under any threadIdx loop ({where}): a CUDA kernel runs every block on '
            f"GPU threads; bind a loop with {missing}")


def stmt_children(stmt: Stmt) -> list[Stmt]:
    """The statements directly inside `stmt` (a sequence's items, both cases of an if, a body)."""
    if isinstance(stmt, SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, IfThenElse):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    if isinstance(stmt, (LetStmt, Allocate, For)):
        return [stmt.body]
    if isinstance(stmt, Block):
        return [stmt.body]
    return []


def per_thread_tag(loop: For) -> str | None:
    """The tag of a loop whose variable is one value per thread (threadIdx/blockIdx), else None."""
    if loop.kind == "thread_binding" and (loop.thread_tag or "").startswith(("threadIdx", "blockIdx")):
        return loop.thread_tag
    return None
