"""GPU-specific lowering: thread-binding checks, kernel extraction, `__syncthreads()` placement.

The steps, in the order `build_cuda` runs them:

``verify_thread_bindings`` (block IR, before `tdsl.lower`)
    Every block that computes something sits under a ``threadIdx`` loop; otherwise a
    `UnboundBlockError` names the block and the `bind` that is missing. Warp-wide blocks
    (TVM's rule): a block tensorized with a CUDA tensor intrinsic (annotation
    "tdsl.tensor_intrin" naming an intrinsic whose target is "cuda", e.g. the WMMA ones) runs
    on the 32 lanes of a warp, which are an implicit ``threadIdx.x`` of extent 32. Such a block
    must be under a ``blockIdx`` loop; warps are ``threadIdx.y``/``threadIdx.z`` loops (none:
    one warp per block); it needs no ``threadIdx.x`` loop, and one around it must have extent
    32 and not be used by the block (an explicit lane loop). In a kernel (outermost
    blockIdx/threadIdx nest) holding a warp-wide block, every other computing block must be
    under a ``threadIdx.x`` loop (else all 32 lanes would run it); such loops have extent <= 32.
``tdsl.lower``'s CUDA passes, with ``compact_gpu_buffers`` after ``convert_blocks``
    The common passes (blocks -> loops, flatten, simplify, 4-lane vectorize, unroll). The
    extra pass shrinks each ``local`` buffer to what one thread touches (``shared``: one block)
    and allocates it at the innermost loop whose iterations cannot pass values through it, so
    a schedule's ``cache_write(..., "local")`` accumulator becomes the thread's register tile.
    For a ``local`` buffer every blockIdx/threadIdx loop is the thread's own index, so sibling
    nests bound to the same tags (compute, then write back) agree on one per-thread tile; a
    fragment passed to a WMMA device function (`tdsl.intrinsics.cuda.FRAGMENT_ARGS`) touches
    the 16 x 16 tile at the element passed (per thread = per warp, the lanes being implicit).
    Buffers passed to other extern calls, or whose per-thread region is not a constant-size
    box at a common corner, keep their size.
``split_kernels`` (lowered IR -> `HostPlan`)
    Each outermost thread-bound loop nest becomes one kernel; sibling nests become launches in
    order. A kernel that calls a warp-wide intrinsic's device function (`warp_calls`) launches
    ``threadIdx.x = 32``. Inside a kernel every loop bound to one thread tag becomes that tag's index (one Var
    per tag), guarded by ``if (tag < extent)`` when the loop is shorter than the launch
    dimension. ``shared`` allocations are hoisted to the kernel top, ``local`` ones stay where
    they are; function-level ``shared``/``local`` buffers move into the kernels that use them;
    function-level ``global`` buffers become device workspaces the runtime allocates.
``insert_barriers`` (per kernel)
    A ``__syncthreads()`` goes before a statement whose shared-memory accesses conflict with
    accesses made since the last barrier by other threads (read after write, write after read,
    write after write), and at the end of a loop body whose tail conflicts with its head (the
    next iteration). Barriers go only where all threads of a block run the same control flow.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...dtypes import int32
from ...errors import ScheduleError, TargetError
from ...ir import (
    Allocate,
    Binary,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Evaluate,
    For,
    IfThenElse,
    IntImm,
    IRMutator,
    IRVisitor,
    LetStmt,
    PrimExpr,
    PrimFunc,
    Ramp,
    SeqStmt,
    Stmt,
    Var,
    collect,
    free_vars,
    substitute,
)
from ...script.printer import message_text as _expr_text

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = {"x": 1024, "y": 1024, "z": 64}
MAX_GRID_DIM = {"x": 2**31 - 1, "y": 65535, "z": 65535}
MAX_STATIC_SHARED_BYTES = 48 * 1024
SYNC = "__syncthreads"


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


WARP_SIZE = 32


def _warp_intrin(block: Block) -> str | None:
    """The CUDA tensor intrinsic a block is tensorized with (a warp-wide block), else None."""
    from ...intrinsics.registry import TensorIntrin
    from ...lower.tensorize import intrin_of

    name = intrin_of(block)
    if name is None:
        return None
    try:
        intrin = TensorIntrin.get(name)
    except ScheduleError:
        return None  # apply_tensor_intrinsics reports unknown intrinsics
    return name if intrin.target == "cuda" else None


def warp_calls(func: PrimFunc) -> frozenset[str]:
    """Names of the extern functions that the CUDA tensor intrinsics used in `func` call: a
    kernel calling one of them runs warp-wide (threadIdx.x = 32 lanes)."""
    from ...intrinsics.registry import TensorIntrin

    out: set[str] = set()
    for realize in collect(func.body, BlockRealize):
        name = _warp_intrin(realize.block)
        if name is not None:
            out |= {c.op for c in collect(TensorIntrin.get(name).impl.body, Call)}
    return frozenset(out)


def verify_thread_bindings(func: PrimFunc) -> None:
    """Raise `UnboundBlockError` for the first computing block without the bindings it needs
    (the rules are in the module docs)."""
    root = func.root_block

    def walk(stmt: Stmt, tags: tuple[str, ...], loops: tuple[For, ...], warp_nest: bool) -> None:
        if isinstance(stmt, For):
            tag = stmt.thread_tag if stmt.kind == "thread_binding" else None
            if tag is not None and not tag.startswith(("threadIdx", "blockIdx")):
                tag = None  # vthread loops become serial loops
            if tag is not None and not any(_per_thread_tag(f) for f in loops):
                warp_nest = _has_warp_block(stmt)   # a kernel root: does the kernel run warps?
            walk(stmt.body, tags + ((tag,) if tag else ()), loops + (stmt,), warp_nest)
            return
        if isinstance(stmt, BlockRealize):
            block = stmt.block
            if block is not root and (_warp_intrin(block) is not None or _computes(block)):
                _check_block(stmt, tags, loops, warp_nest)
            if _warp_intrin(block) is not None:
                return  # the tensorized body runs as one warp-wide call
            walk(block.body, tags, loops, warp_nest)
            if block.init is not None:
                walk(block.init, tags, loops, warp_nest)
            return
        for child in _children(stmt):
            walk(child, tags, loops, warp_nest)

    walk(func.body, (), (), False)


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


def _children(stmt: Stmt) -> list[Stmt]:
    if isinstance(stmt, SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, IfThenElse):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    if isinstance(stmt, (LetStmt, Allocate, For)):
        return [stmt.body]
    if isinstance(stmt, Block):
        return [stmt.body]
    return []


# ----------------------------------------------------------------------------- kernels

@dataclass
class KernelSpec:
    """One `__global__` function: its body with thread indices as free Vars, and its launch."""

    name: str
    body: Stmt
    tag_vars: dict[str, Var]            # "blockIdx.x" -> the Var standing for it in `body`
    launch: dict[str, PrimExpr]         # "blockIdx.x" -> extent (over symbolic dims / scalar params)
    shared: list[Buffer] = field(default_factory=list)
    params: list[Buffer | Var] = field(default_factory=list)

    def dims(self, kind: str) -> tuple[PrimExpr, PrimExpr, PrimExpr]:
        """(x, y, z) extents for kind "blockIdx" (grid) or "threadIdx" (block)."""
        one = IntImm(1, int32)
        return tuple(self.launch.get(f"{kind}.{a}", one) for a in "xyz")  # type: ignore[return-value]

    @property
    def shared_bytes(self) -> int:
        return sum(int(b.shape[0].value) * b.dtype.itemsize * b.dtype.lanes for b in self.shared)


@dataclass
class HostPlan:
    """What the host does: allocate the workspaces, launch the kernels in order."""

    func: PrimFunc                      # the lowered function (flat parameter buffers)
    kernels: list[KernelSpec]
    workspaces: list[Buffer]            # function-level global intermediates (device allocations)


def _is_nop(stmt: Stmt) -> bool:
    return isinstance(stmt, Evaluate) and isinstance(stmt.value, IntImm)


def split_kernels(func: PrimFunc, warp_fns: frozenset[str] = frozenset()) -> HostPlan:
    """Cut the lowered function into kernels (see the module docs); a kernel that calls one of
    `warp_fns` (see `warp_calls`) launches threadIdx.x = 32 lanes."""
    roots: list[tuple[For, list[Buffer]]] = []
    workspaces: list[Buffer] = []

    def host(stmt: Stmt, scoped: list[Buffer]) -> None:
        if isinstance(stmt, SeqStmt):
            for s in stmt.seq:
                host(s, scoped)
        elif isinstance(stmt, Allocate):
            if stmt.buffer.scope == "global":
                workspaces.append(stmt.buffer)
                host(stmt.body, scoped)
            else:
                host(stmt.body, scoped + [stmt.buffer])
        elif isinstance(stmt, For) and stmt.kind == "thread_binding" and not stmt.thread_tag.startswith("vthread"):
            roots.append((stmt, scoped))
        elif isinstance(stmt, LetStmt) and not collect(stmt.value, BufferLoad):
            # a function-level name for a launch-uniform value: every kernel gets the value itself
            host(substitute(stmt.body, {stmt.var: stmt.value}, buffers=True), scoped)
        elif _is_nop(stmt):
            pass
        elif any(f.kind == "thread_binding" for f in collect(stmt, For)):
            raise TargetError(f"function {func.name!r}: {_describe(stmt)} is outside every kernel but contains "
                              "thread-bound loops; a kernel starts at an outermost bound loop, so put it inside "
                              'one (e.g. a loop bound with sch.bind(loop, "blockIdx.x"), extent 1 for one block)')
        else:
            raise TargetError(f"function {func.name!r}: {_describe(stmt)} runs outside any thread-bound loop; "
                              f"on CUDA all computation runs in kernels: bind its loops with "
                              f'sch.bind(loop, "blockIdx.x") and sch.bind(loop, "threadIdx.x")')

    host(func.body, [])
    if not roots:
        raise TargetError(f"function {func.name!r} has no thread-bound loop, so no CUDA kernel: bind loops with "
                          f'sch.bind(loop, "blockIdx.x") and sch.bind(loop, "threadIdx.x")')
    param_vars = _param_vars(func)
    kernels = []
    for i, (root, scoped) in enumerate(roots):
        name = f"{func.name}_kernel" if len(roots) == 1 else f"{func.name}_kernel_{i}"
        warp = any(c.op in warp_fns for c in collect(root, Call))
        kernels.append(_make_kernel(name, root, scoped, func, param_vars, workspaces, warp))
    return HostPlan(func, kernels, workspaces)


def _describe(stmt: Stmt) -> str:
    if isinstance(stmt, For):
        return f"loop {stmt.loop_var.name}"
    if isinstance(stmt, BufferStore):
        return f"a store into {stmt.buffer.name!r}"
    return f"a {type(stmt).__name__} statement"


def _param_vars(func: PrimFunc) -> set[Var]:
    """Vars that are uniform over a whole launch: scalar params and symbolic dimensions."""
    out = {p for p in func.params if isinstance(p, Var)}
    from ...ir.attrs import FLAT_PARAMS as FLAT_PARAMS_ATTR
    from ...ir.attrs import get_attr

    for buf in get_attr(func, FLAT_PARAMS_ATTR, ()) or func.buffer_params:
        for e in tuple(buf.shape) + tuple(buf.strides) + ((buf.elem_offset,) if buf.elem_offset is not None else ()):
            out |= free_vars(e)
    return out


def _uses_buffer(stmt: Stmt, buf: Buffer) -> bool:
    return any(n.buffer is buf for n in collect(stmt, (BufferLoad, BufferStore)))


def _make_kernel(name: str, root: For, scoped: list[Buffer], func: PrimFunc, param_vars: set[Var],
                 workspaces: list[Buffer], warp: bool = False) -> KernelSpec:
    loops = [f for f in collect(root, For) if f.kind == "thread_binding" and not f.thread_tag.startswith("vthread")]
    launch: dict[str, PrimExpr] = {}
    for tag in sorted({f.thread_tag for f in loops}):
        launch[tag] = _launch_extent(tag, [f for f in loops if f.thread_tag == tag], param_vars, func.name)
    if warp:
        _warp_launch(name, launch)
    # the outermost loop of each tag names its Var (post-order collect: the last one is outermost)
    tag_vars = {}
    for f in reversed(loops):
        tag_vars.setdefault(f.thread_tag, Var(f.loop_var.name, f.loop_var.dtype))
    _check_static_limits(name, launch)
    body = _ThreadLoopRewriter(tag_vars, launch).visit(root)
    local = [b for b in scoped if _uses_buffer(body, b)]
    for buf in reversed(local):
        body = Allocate(buf, body)
    hoister = _SharedHoister(name)
    body = hoister.visit(body)
    spec = KernelSpec(name, body, tag_vars, launch, hoister.shared)
    spec.params = _kernel_params(spec, func, workspaces)
    if spec.shared_bytes > MAX_STATIC_SHARED_BYTES:
        raise TargetError(f"kernel {name!r} uses {spec.shared_bytes} bytes of shared memory "
                          f"({', '.join(b.name for b in spec.shared)}); at most {MAX_STATIC_SHARED_BYTES} bytes "
                          "of static shared memory per block are allowed: use smaller tiles")
    return spec


def _launch_extent(tag: str, loops: list[For], param_vars: set[Var], fname: str) -> PrimExpr:
    from ...lower._util import same_expr

    for f in loops:
        bad = free_vars(f.extent) - param_vars
        if bad or collect(f.extent, BufferLoad):
            what = ", ".join(sorted(v.name for v in bad)) or "buffer contents"
            raise TargetError(f"loop {f.loop_var.name} is bound to {tag} but its extent depends on {what}; "
                              "launch dimensions may depend only on symbolic dimensions and scalar parameters")
        start_bad = free_vars(f.min) - param_vars   # the rewriter adds the start to the thread index
        if start_bad:
            raise TargetError(f"loop {f.loop_var.name} is bound to {tag} but its start depends on "
                              f"{', '.join(sorted(v.name for v in start_bad))}")
    first = loops[0].extent
    if all(same_expr(f.extent, first) for f in loops):
        return first
    if all(isinstance(f.extent, IntImm) for f in loops):
        return IntImm(max(f.extent.value for f in loops), first.dtype)
    names = ", ".join(f"{f.loop_var.name} ({f.extent})" for f in loops)
    raise TargetError(f"{tag} is bound to loops of different, non-constant extents in one kernel of {fname!r}: "
                      f"{names}; give them the same extent")


def _warp_launch(name: str, launch: dict[str, PrimExpr]) -> None:
    """A warp-wide kernel runs threadIdx.x = 32 lanes (the implicit lane index of its tensorized
    blocks); explicit threadIdx.x loops must fit in them."""
    ext = launch.get("threadIdx.x")
    if ext is not None and not (isinstance(ext, IntImm) and ext.value <= WARP_SIZE):
        raise TargetError(f"kernel {name!r} calls warp-wide tensor-core functions, so threadIdx.x is the "
                          f"{WARP_SIZE} lanes of a warp, but a loop binds threadIdx.x with extent {_expr_text(ext)}: "
                          "bind at most "
                          f"{WARP_SIZE} to threadIdx.x and the warps to threadIdx.y/z")
    launch["threadIdx.x"] = IntImm(WARP_SIZE, int32)


def _check_static_limits(name: str, launch: dict[str, PrimExpr]) -> None:
    total = 1
    for tag, ext in launch.items():
        if not isinstance(ext, IntImm):
            continue
        kind, axis = tag.split(".")
        limit = (MAX_BLOCK_DIM if kind == "threadIdx" else MAX_GRID_DIM)[axis]
        if ext.value > limit:
            raise TargetError(f"kernel {name!r}: {tag} has extent {ext.value}, more than the CUDA limit {limit}")
        if kind == "threadIdx":
            total *= ext.value
    if total > MAX_THREADS_PER_BLOCK:
        dims = " x ".join(f"{t}={e.value}" for t, e in launch.items() if t.startswith("threadIdx")
                          and isinstance(e, IntImm))
        raise TargetError(f"kernel {name!r} has {total} threads per block ({dims}); CUDA allows at most "
                          f"{MAX_THREADS_PER_BLOCK}: split the bound loops further")


class _ThreadLoopRewriter(IRMutator):
    """thread_binding loops -> the tag's Var (+ min), guarded when shorter than the launch;
    vthread loops -> serial loops."""

    def __init__(self, tag_vars: dict[str, Var], launch: dict[str, PrimExpr]):
        self.tag_vars = tag_vars
        self.launch = launch

    def visit_For(self, loop: For) -> Stmt:
        from ...lower._util import same_expr

        body = self.visit(loop.body)
        if loop.kind != "thread_binding":
            return loop if body is loop.body else replace(loop, body=body)
        if loop.thread_tag.startswith("vthread"):
            return replace(loop, kind="serial", thread_tag=None, body=body)
        var = self.tag_vars[loop.thread_tag]
        value = var if isinstance(loop.min, IntImm) and loop.min.value == 0 else var + loop.min
        value = value if value.dtype == loop.loop_var.dtype else _cast(loop.loop_var.dtype, value)
        body = substitute(body, {loop.loop_var: value}, buffers=True)
        if same_expr(loop.extent, self.launch[loop.thread_tag]):
            return body
        return IfThenElse(var < _cast(var.dtype, loop.extent), body)


def _cast(dtype, e: PrimExpr) -> PrimExpr:
    from ...lower._util import cast_to

    return cast_to(dtype, e)


class _SharedHoister(IRMutator):
    def __init__(self, kernel: str):
        self.kernel = kernel
        self.shared: list[Buffer] = []

    def visit_Allocate(self, op: Allocate) -> Stmt:
        buf = op.buffer
        if buf.scope == "shared":
            self.shared.append(buf)
        body = self.visit(op.body)
        if buf.scope == "global":
            raise TargetError(f"buffer {buf.name!r} (scope global) is allocated inside kernel {self.kernel!r}; "
                              "a kernel cannot allocate global memory: allocate it at function level, or use "
                              'scope "shared" or "local"')
        if not all(isinstance(s, IntImm) for s in buf.shape):
            raise TargetError(f"buffer {buf.name!r} (scope {buf.scope}) in kernel {self.kernel!r} has a size that "
                              f"is not a constant ({', '.join(map(str, buf.shape))}); shared and local buffers "
                              "need constant sizes")
        if buf.scope == "shared":
            return body
        return op if body is op.body else replace(op, body=body)


def _kernel_params(spec: KernelSpec, func: PrimFunc, workspaces: list[Buffer]) -> list[Buffer | Var]:
    """The function parameters (and workspaces) the kernel uses, in parameter order."""
    used_bufs = {n.buffer for n in collect(spec.body, (BufferLoad, BufferStore))}
    used_vars = free_vars_stmt(spec.body)
    out: list[Buffer | Var] = []
    for p in func.params:
        if (isinstance(p, Buffer) and p in used_bufs) or (isinstance(p, Var) and p in used_vars):
            out.append(p)
    out += [w for w in workspaces if w in used_bufs]
    param_set = set(func.params)
    tag_set = set(spec.tag_vars.values())
    sym = sorted((v for v in used_vars if v not in param_set and v not in tag_set and v in _param_vars(func)),
                 key=lambda v: v.name)
    return out + sym


def free_vars_stmt(stmt) -> set[Var]:
    """Vars used but not defined under `stmt` (loop and let variables excluded)."""
    used: set[Var] = set()
    defined: set[Var] = set()

    class _V(IRVisitor):
        def visit_Var(self, v):
            used.add(v)

        def visit_For(self, op):
            defined.add(op.loop_var)
            self.generic_visit(op)

        def visit_LetStmt(self, op):
            defined.add(op.var)
            self.generic_visit(op)

    _V().visit(stmt)
    return used - defined


# ----------------------------------------------------------------------------- barriers

@dataclass(frozen=True)
class _Access:
    buffer: Buffer
    index: PrimExpr
    write: bool
    opaque: bool = False    # passed to an extern call: touches an unknown part of the buffer


def _extern_call_args(node) -> list[BufferLoad]:
    """Buffer elements passed to extern calls (by reference, e.g. the WMMA device functions)."""
    from ...ir import MATH_CALLS

    out = []
    for call in collect(node, Call):
        if call.op in MATH_CALLS or call.op in ("if_then_else", SYNC):
            continue
        out += [a for a in call.args if isinstance(a, BufferLoad)]
    return out


def _sync() -> Stmt:
    return Evaluate(Call(int32, SYNC, ()))


class _Planner:
    """Computes, for a statement, its shared accesses before its first barrier (head) and after
    its last one (tail), inserting barriers inside where needed."""

    def __init__(self, spec: KernelSpec, func_vars: set[Var]):
        self.kernel = spec.name
        self.threads = {v: spec.launch[t] for t, v in spec.tag_vars.items() if t.startswith("threadIdx")}
        self.uniform: set[Var] = set(func_vars) | {v for t, v in spec.tag_vars.items() if t.startswith("blockIdx")}
        self.count = 0

    # uniformity --------------------------------------------------------------------
    def is_uniform(self, e: PrimExpr) -> bool:
        return not collect(e, BufferLoad) and free_vars(e) <= self.uniform

    # accesses ----------------------------------------------------------------------
    @staticmethod
    def accesses(stmt: Stmt) -> list[_Access]:
        out = []
        opaque = {id(a) for a in _extern_call_args(stmt)}
        for n in collect(stmt, (BufferLoad, BufferStore)):
            if n.buffer.scope == "shared":
                # an element passed to an extern call (a tensor intrinsic) stands for a tile the
                # call may read or write: a write at an unknown place
                out.append(_Access(n.buffer, n.indices[0], isinstance(n, BufferStore) or id(n) in opaque,
                                   id(n) in opaque))
        return out

    def same_thread(self, a: _Access, b: _Access) -> bool:
        """Both accesses touch an element only the executing thread touches."""
        from ...lower._util import same_expr

        if a.opaque or b.opaque or not same_expr(a.index, b.index):
            return False
        index = a.index
        lanes = [(1, 1)]
        if isinstance(index, Ramp):
            if not isinstance(index.stride, IntImm):
                return False
            lanes = [(index.stride.value, index.lanes)]
            index = index.base
        if index.dtype.lanes != 1 or not free_vars(index) <= set(self.threads) | self.uniform:
            return False
        return self._injective(index, lanes)

    def _injective(self, index: PrimExpr, lanes: list[tuple[int, int]]) -> bool:
        from ...arith import linear_form

        varying = [v for v, ext in self.threads.items() if not (isinstance(ext, IntImm) and ext.value == 1)]
        if not all(isinstance(self.threads[v], IntImm) for v in varying):
            return False
        form = linear_form(index, varying)
        if form is None:
            return False
        coeffs, _ = form
        terms = sorted([(abs(coeffs[v]), self.threads[v].value) for v in varying] + lanes)
        span = 0
        for c, ext in terms:
            if ext == 1:
                continue
            if c <= span:
                return False
            span += c * (ext - 1)
        return True

    def conflict(self, pending: list[_Access], new: list[_Access]) -> bool:
        for a in pending:
            for b in new:
                if a.buffer is b.buffer and (a.write or b.write) and not self.same_thread(a, b):
                    return True
        return False

    # planning ----------------------------------------------------------------------
    def plan(self, stmt: Stmt) -> tuple[Stmt, list[_Access], list[_Access], bool]:
        """(new stmt, head, tail, surely_syncs)."""
        if isinstance(stmt, SeqStmt):
            return self._seq(list(stmt.seq))
        if isinstance(stmt, For) and self.is_uniform(stmt.min) and self.is_uniform(stmt.extent):
            return self._loop(stmt)
        if isinstance(stmt, IfThenElse) and self.is_uniform(stmt.condition):
            then, h1, t1, s1 = self.plan(stmt.then_case)
            if stmt.else_case is None:
                return replace(stmt, then_case=then), h1, t1, False
            other, h2, t2, s2 = self.plan(stmt.else_case)
            return replace(stmt, then_case=then, else_case=other), h1 + h2, t1 + t2, s1 and s2
        if isinstance(stmt, LetStmt):
            if self.is_uniform(stmt.value):
                self.uniform.add(stmt.var)
            body, h, t, s = self.plan(stmt.body)
            return replace(stmt, body=body), h, t, s
        if isinstance(stmt, Allocate):
            body, h, t, s = self.plan(stmt.body)
            return replace(stmt, body=body), h, t, s
        if isinstance(stmt, (For, IfThenElse)):
            self._check_divergent(stmt)
        acc = self.accesses(stmt)
        return stmt, acc, acc, False

    def _check_divergent(self, stmt: Stmt) -> None:
        """A branch or loop that threads run differently cannot hold a barrier; refuse code that
        would need one there rather than emit a race."""
        inner = _Planner.__new__(_Planner)
        inner.threads, inner.uniform, inner.count = dict(self.threads), set(self.uniform), 0
        inner.kernel = self.kernel
        cond = stmt.condition if isinstance(stmt, IfThenElse) else None
        if (isinstance(cond, Binary) and cond.op == "lt" and cond.a in inner.threads and isinstance(cond.b, IntImm)
                and isinstance(inner.threads[cond.a], IntImm)):
            # under `if (tx < c)` only c threads of that axis run: fewer threads can collide
            inner.threads[cond.a] = IntImm(min(cond.b.value, inner.threads[cond.a].value), cond.b.dtype)
        inner.uniform |= set(inner.threads)
        for child in _children(stmt):
            inner.plan(child)
            if isinstance(stmt, For):
                inner._loop(replace(stmt, kind="serial"))
        if inner.count:
            what = f"loop {stmt.loop_var.name}" if isinstance(stmt, For) else f"the branch `if {_expr_text(stmt.condition)}`"
            names = sorted({a.buffer.name for a in self.accesses(stmt)})
            raise TargetError(f"kernel {self.kernel!r}: threads exchange data through shared memory "
                              f"({', '.join(names)}) inside {what}, whose control flow differs between threads; "
                              "__syncthreads() cannot be placed there. Move the stages out of the thread-dependent "
                              "branch or loop (e.g. guard each stage separately)")

    def _seq(self, stmts: list[Stmt]) -> tuple[Stmt, list[_Access], list[_Access], bool]:
        out: list[Stmt] = []
        head: list[_Access] = []
        pending: list[_Access] = []
        synced = False
        for s in stmts:
            new, h, t, s_sync = self.plan(s)
            if self.conflict(pending, h):
                out.append(_sync())
                self.count += 1
                pending = []
                synced = True
            if not synced:
                head += h
            out.append(new)
            if s_sync:
                synced = True
                pending = list(t)
            else:
                pending += t
        return SeqStmt(tuple(out)) if len(out) > 1 else out[0], head, pending, synced

    def _loop(self, loop: For) -> tuple[Stmt, list[_Access], list[_Access], bool]:
        self.uniform.add(loop.loop_var)
        body, head, tail, synced = self.plan(loop.body)
        if self.conflict(tail, head):
            # the next iteration's head conflicts with this iteration's tail
            body = SeqStmt((*(body.seq if isinstance(body, SeqStmt) else (body,)), _sync()))
            self.count += 1
            tail, synced = [], True
        runs = isinstance(loop.extent, IntImm) and loop.extent.value > 0
        return replace(loop, body=body), head, tail, synced and runs


def insert_barriers(spec: KernelSpec, func: PrimFunc) -> int:
    """Insert `__syncthreads()` into `spec.body` where shared memory needs it; returns how many."""
    planner = _Planner(spec, _param_vars(func))
    spec.body, _, _, _ = planner.plan(spec.body)
    return planner.count


# ----------------------------------------------------------------------------- buffer compaction

@dataclass
class _Use:
    indices: tuple[PrimExpr, ...]
    loops: tuple[For, ...]
    tile: tuple[int, ...] = ()     # a fragment argument: the tile (last dims) it stands for


def _per_thread_tag(loop: For) -> str | None:
    """The tag of a loop whose variable is one value per thread (threadIdx/blockIdx), else None."""
    if loop.kind == "thread_binding" and loop.thread_tag.startswith(("threadIdx", "blockIdx")):
        return loop.thread_tag
    return None


class _UseCollector(IRVisitor):
    """Accesses of every local/shared buffer with their enclosing loops, where each is allocated,
    and the buffers passed to extern calls other than as WMMA fragments (`opaque`)."""

    def __init__(self):
        self.stack: list[For] = []
        self.uses: dict[Buffer, list[_Use]] = {}
        self.allocs: dict[Buffer, tuple[Allocate, tuple[For, ...]]] = {}
        self.opaque: set[Buffer] = set()

    def visit_For(self, op: For) -> None:
        self.visit(op.min)
        self.visit(op.extent)
        self.stack.append(op)
        self.visit(op.body)
        self.stack.pop()

    def visit_Allocate(self, op: Allocate) -> None:
        if op.buffer.scope in ("local", "shared"):
            self.allocs[op.buffer] = (op, tuple(self.stack))
        self.visit(op.body)

    def _use(self, buf: Buffer, indices, tile: tuple[int, ...] = ()) -> None:
        self.uses.setdefault(buf, []).append(_Use(tuple(indices), tuple(self.stack), tile))

    def visit_Call(self, op: Call) -> None:
        from ...intrinsics.cuda import FRAGMENT_ARGS, FRAGMENT_TILE
        from ...ir import MATH_CALLS

        if op.op not in MATH_CALLS and op.op not in ("if_then_else", SYNC):
            fragments = FRAGMENT_ARGS.get(op.op, ())
            for i, arg in enumerate(op.args):
                if not isinstance(arg, BufferLoad):
                    continue
                if i in fragments and arg.buffer.scope == "local" and len(arg.indices) >= len(FRAGMENT_TILE):
                    self._use(arg.buffer, arg.indices, FRAGMENT_TILE)
                else:
                    # an element standing for a tile of unknown size (and maybe a leading dimension)
                    self.opaque.add(arg.buffer)
        self.generic_visit(op)

    def visit_BufferLoad(self, op: BufferLoad) -> None:
        self._use(op.buffer, op.indices)
        self.generic_visit(op)

    def visit_BufferStore(self, op: BufferStore) -> None:
        self._use(op.buffer, op.indices)
        self.generic_visit(op)


def _thread_vars(buf: Buffer, use: _Use, kept: set[For], lanes: dict[str, Var]) -> dict[Var, PrimExpr] | None:
    """For a local buffer, the use's per-thread loops outside `kept` as the thread's own index
    (`lanes[tag]` + start), so that sibling nests bound to the same tags agree on one thread's
    region; None when a tag is bound twice on the way (no single index per thread)."""
    if buf.scope != "local":
        return {}
    kept_tags = {_per_thread_tag(f) for f in kept} - {None}
    out: dict[Var, PrimExpr] = {}
    seen: set[str] = set()
    for f in use.loops:
        tag = _per_thread_tag(f)
        if tag is None or f in kept:
            continue
        if tag in seen or tag in kept_tags:
            return None
        seen.add(tag)
        lane = lanes.setdefault(tag, Var(f"tdsl_{tag.replace('.', '_')}", int32))
        start = lane if lane.dtype == f.loop_var.dtype else _cast(f.loop_var.dtype, lane)
        out[f.loop_var] = start if isinstance(f.min, IntImm) and f.min.value == 0 else start + f.min
    return out


def _region(buf: Buffer, uses: list[_Use], keep: tuple[For, ...],
            lanes: dict[str, Var]) -> list[tuple[PrimExpr, int]] | None:
    """Per dimension (min, constant extent) of what `uses` touch with the loops in `keep` fixed
    (local buffers: every thread-bound loop is fixed, written with the `lanes` Vars; shared
    buffers: threadIdx loops always vary, a block's threads share them); None if unknown."""
    from ...arith import relax, simplify
    from ...ir import Range

    kept = set(keep)
    lows: list[list[PrimExpr]] = [[] for _ in buf.shape]
    highs: list[list[PrimExpr]] = [[] for _ in buf.shape]
    for use in uses:
        fixed = _thread_vars(buf, use, kept, lanes)
        if fixed is None:
            return None
        ranges = {}
        for f in use.loops:
            shared_thread = buf.scope == "shared" and f.kind == "thread_binding" and f.thread_tag.startswith("threadIdx")
            if (f not in kept and f.loop_var not in fixed) or shared_thread:
                ranges[f.loop_var] = Range(f.min, f.extent)
        tile = (1,) * (len(use.indices) - len(use.tile)) + use.tile
        for d, (idx, extra) in enumerate(zip(use.indices, tile)):
            if idx.dtype.lanes != 1:
                return None
            lo, hi = relax(substitute(idx, fixed), ranges)
            if lo is None or hi is None:
                return None
            lows[d].append(lo)
            highs[d].append(hi + (extra - 1) if extra > 1 else hi)
    out = []
    for lo_list, hi_list in zip(lows, highs):
        base = lo_list[0]
        offs = [simplify(x - base) for x in lo_list + hi_list]
        if not all(isinstance(o, IntImm) for o in offs):
            return None
        lo_off = min(o.value for o in offs[:len(lo_list)])
        hi_off = max(o.value for o in offs[len(lo_list):])
        out.append((simplify(base + lo_off) if lo_off else base, hi_off - lo_off + 1))
    return out


def _disjoint_iterations(region: list[tuple[PrimExpr, int]], loop: For) -> bool:
    """Different iterations of `loop` touch different elements (so no value flows between them)."""
    from ...arith import linear_form

    for lo, extent in region:
        form = linear_form(lo, [loop.loop_var])
        if form is not None and abs(form[0][loop.loop_var]) >= extent:
            return True
    return False


class _Compactor(IRMutator):
    """Moves the accesses of `old` to `new`, shifted by `mins`; a `lanes` Var in a min stands for
    the thread index of that tag, i.e. the enclosing loop bound to it (minus its start)."""

    def __init__(self, old: Allocate, new: Buffer, mins: list[PrimExpr], anchor: For | None,
                 lanes: dict[str, Var]):
        self.old, self.new, self.mins, self.anchor = old, new, mins, anchor
        self.lane_tags = {v: t for t, v in lanes.items()}
        self.stack: list[For] = []

    def _lane_values(self) -> dict[Var, PrimExpr]:
        out: dict[Var, PrimExpr] = {}
        for f in self.stack:
            for lane, tag in self.lane_tags.items():
                if _per_thread_tag(f) == tag:
                    value = f.loop_var if isinstance(f.min, IntImm) and f.min.value == 0 else f.loop_var - f.min
                    out[lane] = value if value.dtype == lane.dtype else _cast(lane.dtype, value)
        return out

    def _shift(self, indices) -> tuple[PrimExpr, ...]:
        from ...lower._util import arith

        lanes = self._lane_values() if self.lane_tags else {}
        return tuple(arith("sub", self.visit(i), substitute(m, lanes)) if not (isinstance(m, IntImm) and m.value == 0)
                     else self.visit(i) for i, m in zip(indices, self.mins))

    def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
        if op.buffer is self.old.buffer:
            return BufferLoad(self.new, self._shift(op.indices), span=op.span)
        return self.generic_visit(op)

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        if op.buffer is self.old.buffer:
            return BufferStore(self.new, self.visit(op.value), self._shift(op.indices), span=op.span)
        return self.generic_visit(op)

    def visit_Allocate(self, op: Allocate) -> Stmt:
        body = self.visit(op.body)
        if op is self.old:
            return body if self.anchor is not None else Allocate(self.new, body)
        return op if body is op.body else replace(op, body=body)

    def visit_For(self, op: For) -> Stmt:
        self.stack.append(op)
        try:
            new = self.generic_visit(op)
        finally:
            self.stack.pop()
        if op is self.anchor:
            new = replace(new, body=Allocate(self.new, new.body))
        return new


def compact_gpu_buffers(func: PrimFunc) -> PrimFunc:
    """Shrink each local/shared buffer to the region one thread (local) or one block (shared)
    touches, allocated at the innermost loop around all its uses whose iterations cannot pass
    values through it (thread-bound loops, loops touching disjoint parts); indices are shifted.

    A local buffer's region is taken per thread even across sibling loop nests: loops bound to
    the same thread tag are the same thread index in a kernel. A local buffer passed to the
    WMMA device functions as a fragment (`tdsl.intrinsics.cuda.FRAGMENT_ARGS`) touches the
    16 x 16 tile at the element passed; a warp's lanes are implicit, so the thread's region is
    the warp's. Buffers passed to other extern calls keep their size.

    So a `cache_write(..., "local")` accumulator of a 128x128 result becomes the thread's 4x4
    tile (registers) instead of a private copy of the whole 128x128 array."""
    from math import prod

    from ...lower._util import common_prefix

    done: set[str] = set()
    while True:
        collector = _UseCollector()
        collector.visit(func.body)
        for buf, (alloc, alloc_loops) in collector.allocs.items():
            uses = collector.uses.get(buf)
            if (buf.name in done or buf in collector.opaque or not uses
                    or not all(isinstance(s, IntImm) for s in buf.shape)):
                continue
            done.add(buf.name)
            lanes: dict[str, Var] = {}
            common = common_prefix([u.loops for u in uses])
            depth = len(common)
            region = _region(buf, uses, common[:depth], lanes)
            while depth > len(alloc_loops):
                loop = common[depth - 1]
                if region is not None and (loop.kind == "thread_binding" or _disjoint_iterations(region, loop)):
                    break
                depth -= 1
                region = _region(buf, uses, common[:depth], lanes)
            if region is None or prod(e for _, e in region) >= prod(s.value for s in buf.shape):
                continue
            new = Buffer(buf.name, tuple(IntImm(e, s.dtype) for (_, e), s in zip(region, buf.shape)), buf.dtype,
                         scope=buf.scope, span=buf.span)
            anchor = common[depth - 1] if depth > len(alloc_loops) else None
            func = func.with_body(_Compactor(alloc, new, [m for m, _ in region], anchor, lanes).visit(func.body))
            break
        else:
            return func


def cuda_passes():
    """tdsl.lower's CUDA pipeline with `compact_gpu_buffers` after `convert_blocks`."""
    import importlib

    lower_mod = importlib.import_module("tdsl.lower")
    passes = lower_mod.passes_for("cuda")
    names = [p.name for p in passes]
    if "compact_gpu_buffers" not in names:
        passes.insert(names.index("convert_blocks") + 1, lower_mod.Pass("compact_gpu_buffers", compact_gpu_buffers))
    return passes


def lower_for_cuda(func: PrimFunc) -> HostPlan:
    """Block IR -> kernels with barriers: the whole GPU lowering."""
    verify_thread_bindings(func)
    lowered = func
    for p in cuda_passes():
        try:
            lowered = p(lowered)
        except Exception as exc:
            exc.add_note(f"(in lowering pass {p.name!r} of function {func.name!r})")
            raise
    plan = split_kernels(lowered, warp_calls(func))
    for spec in plan.kernels:
        insert_barriers(spec, lowered)
    return plan
