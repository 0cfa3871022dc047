"""GPU lowering in the CUDA backend: kernel extraction and `__syncthreads()` placement.

`lower_for_cuda` runs ``tdsl.lower(func, "cuda")`` (whose listed passes include the GPU ones:
``verify_thread_bindings``, ``check_thread_exchange``, ``lower_cross_thread_reductions``,
``compact_gpu_buffers``; see tdsl.lower), then the two steps that stay here:

``split_kernels`` (lowered IR -> `HostPlan`)
    Each outermost thread-bound loop nest becomes one kernel; sibling nests become launches in
    order. A kernel that calls a warp-wide intrinsic's device function (`warp_calls`) launches
    ``threadIdx.x = 32``. Inside a kernel every loop bound to one thread tag becomes that tag's index (one Var
    per tag), guarded by ``if (tag < extent)`` when the loop is shorter than the launch
    dimension. ``shared`` allocations are hoisted to the kernel top, ``local`` ones stay where
    they are; function-level ``shared``/``local`` buffers move into the kernels that use them;
    function-level ``global`` buffers become device workspaces the runtime allocates.
``split_roles`` (per kernel, after the barriers)
    A warp-specialized kernel (a setmaxnreg branch on ``ty``) gets one code path per role
    (tdsl.backends.cuda.roles), so that ptxas can honour the register budgets.
``insert_barriers`` (per kernel)
    A ``__syncthreads()`` goes before a statement whose shared-memory accesses conflict with
    accesses made since the last barrier by other threads (read after write, write after read,
    write after write), and at the end of a loop body whose tail conflicts with its head (the
    next iteration). Barriers go only where all threads of a block run the same control flow.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...dtypes import int32
from ...errors import TargetError
from ...ir import (
    Allocate,
    Binary,
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
from ...ir.opaque_calls import HOPPER_CALLS, MBARRIER_CALLS, MBARRIER_INIT, MBARRIER_WAIT, TMA_LOAD, TMA_STORE, WGMMA
from ...lower.gpu_bindings import (  # noqa: F401 (UnboundBlockError, verify_thread_bindings: public here too)
    WARP_SIZE,
    UnboundBlockError,
    stmt_children,
    verify_thread_bindings,
    warp_calls,
)
from ...lower.gpu_compact import compact_gpu_buffers  # noqa: F401
from ...lower.software_pipeline import CP_ASYNC, WAIT_GROUP
from ...script.printer import message_text as _expr_text
from .plan import HostPlan, KernelSpec  # noqa: F401 (public here too)
from .roles import split_roles
from .shared_memory import check_limit

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = {"x": 1024, "y": 1024, "z": 64}
MAX_GRID_DIM = {"x": 2**31 - 1, "y": 65535, "z": 65535}
MAX_LOCAL_BYTES = 512 * 1024     # local memory per thread (every CUDA architecture since sm_20)
SYNC = "__syncthreads"


# ----------------------------------------------------------------------------- kernels

def _is_nop(stmt: Stmt) -> bool:
    return isinstance(stmt, Evaluate) and isinstance(stmt.value, IntImm)


def split_kernels(func: PrimFunc, warp_fns: frozenset[str] = frozenset()) -> HostPlan:
    """Cut the lowered function into kernels (see the module docs); a kernel that calls one of
    `warp_fns` (see `warp_calls`) launches threadIdx.x = 32 lanes."""
    from . import attention_step, host_steps

    roots: list[tuple[For, list[Buffer]]] = []
    workspaces: list[Buffer] = []
    steps: list = []

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
        elif host_steps.is_library_call(stmt):   # a cuBLAS call between the launches
            steps.append((len(roots), host_steps.read_step(stmt, func.name)))
        elif attention_step.is_call(stmt):      # tdsl's fused attention kernel, launched by the host
            steps.append((len(roots), attention_step.read_step(stmt, func.name)))
        elif any(f.kind == "thread_binding" for f in collect(stmt, For)):
            raise TargetError(f"function {func.name!r}: {_describe(stmt)} is outside every kernel but contains "
                              "thread-bound loops; a kernel starts at an outermost bound loop, so put it inside "
                              'one (e.g. a loop bound with sch.bind(loop, "blockIdx.x"), extent 1 for one block)')
        else:
            raise TargetError(f"function {func.name!r}: {_describe(stmt)} runs outside any thread-bound loop; "
                              f"on CUDA all computation runs in kernels: bind its loops with "
                              f'sch.bind(loop, "blockIdx.x") and sch.bind(loop, "threadIdx.x")')

    host(func.body, [])
    if not roots and not steps:
        raise TargetError(f"function {func.name!r} has no thread-bound loop, so no CUDA kernel: bind loops with "
                          f'sch.bind(loop, "blockIdx.x") and sch.bind(loop, "threadIdx.x")')
    param_vars = _param_vars(func)
    kernels = []
    for i, (root, scoped) in enumerate(roots):
        name = f"{func.name}_kernel" if len(roots) == 1 else f"{func.name}_kernel_{i}"
        warp = any(c.op in warp_fns for c in collect(root, Call))
        kernels.append(_make_kernel(name, root, scoped, func, param_vars, workspaces, warp))
    return HostPlan(func, kernels, workspaces, steps)


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
    check_limit(name, spec.shared_bytes, None, spec.shared)   # (the target's own limit: at build, per arch)
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
            size = " * ".join(_expr_text(s) for s in buf.shape)
            raise TargetError(f"buffer {buf.name!r} (scope {buf.scope}) in kernel {self.kernel!r} has size {size}, "
                              "which is not a constant, and what one "
                              f"{'thread' if buf.scope == 'local' else 'thread block'} touches of it is not a "
                              "constant-size tile either; shared and local buffers need constant sizes: compute it at "
                              "a loop whose iterations touch a constant-size part (compute_at / reverse_compute_at "
                              "under the blockIdx loop, a constant split factor), or keep it global")
        if buf.scope == "shared":
            return body
        elements = 1
        for extent in buf.shape:
            elements *= extent.value
        if elements * buf.dtype.itemsize * buf.dtype.lanes > MAX_LOCAL_BYTES:
            raise TargetError(f"buffer {buf.name!r} (scope local) in kernel {self.kernel!r} holds {elements} elements "
                              f"({elements * buf.dtype.itemsize * buf.dtype.lanes} bytes) per thread; CUDA allows at "
                              f"most {MAX_LOCAL_BYTES} bytes of local memory per thread: compute it at an inner "
                              "loop (a smaller tile per thread) or use scope \"shared\" or \"global\"")
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
    async_op: str = ""      # "issue": a cp.async's destination; "complete": what a ptx_wait_group lands;
    #                         "mbarrier": an mbarrier operation or an access to a buffer only TMA writes


def _extern_call_args(node, read_only: bool = False) -> list[BufferLoad]:
    """Buffer elements passed to extern calls (by reference, e.g. the WMMA device functions);
    `read_only`: only those the call is known to only read."""
    from ...intrinsics.cuda_mma import READ_ONLY_ARGS
    from ...ir import MATH_CALLS

    out = []
    for call in collect(node, Call):
        if call.op in MATH_CALLS or call.op in ("if_then_else", SYNC):
            continue
        keep = READ_ONLY_ARGS.get(call.op, ()) if read_only else range(len(call.args))
        out += [a for i, a in enumerate(call.args) if isinstance(a, BufferLoad) and i in keep]
    return out


def _split_thread_digits(index: PrimExpr, extents: dict[Var, int]) -> tuple[PrimExpr, dict[Var, int]]:
    """`index` with each thread index t that appears as t // d or t % d (constants d dividing
    its extent and each other) written in mixed-radix digits: for divisors d1 < d2 < ..., digit
    j is (t // b_j) % (b_j+1 / b_j) with b = 1, d1, d2, ..., extent; t // d_i and t % d_i become
    sums of digits. t -> digits is a bijection, so the index is injective in t iff it is in the
    digits, and a mapping like (t // 4) * 40 + (t % 4) * 8 is linear in them."""
    divisors: dict[Var, set[int]] = {}
    for node in collect(index, Binary):
        if node.op in ("floordiv", "floormod") and isinstance(node.a, Var) and node.a in extents \
                and isinstance(node.b, IntImm) and node.b.value > 0 and extents[node.a] % node.b.value == 0:
            divisors.setdefault(node.a, set()).add(node.b.value)
        nested = _nested_digits(node, extents)   # (t % a) // b, (t // b) % c: digits b .. a, b .. b c
        if nested is not None:
            divisors.setdefault(nested[0], set()).update(nested[1:])
    digits: dict[Var, tuple[list[int], list[Var]]] = {}
    out = {v: e for v, e in extents.items()}
    for v, ds in divisors.items():
        bounds = [1] + sorted(d for d in ds if 1 < d < extents[v]) + [extents[v]]
        if any(b % a for a, b in zip(bounds, bounds[1:])):
            continue
        names = [Var(f"{v.name}_d{j}", v.dtype) for j in range(len(bounds) - 1)]
        digits[v] = (bounds, names)
        del out[v]
        for j, name in enumerate(names):
            out[name] = bounds[j + 1] // bounds[j]
    if not digits:
        return _xor_digits(index, extents)

    def number(v: Var, lo: int, hi: int) -> PrimExpr:
        """sum of digits lo..hi-1 of v, scaled to digit lo's weight."""
        bounds, names = digits[v]
        expr: PrimExpr = IntImm(0, v.dtype)
        for j in range(lo, hi):
            expr = expr + names[j] * IntImm(bounds[j] // bounds[lo], v.dtype)
        return expr

    class Digits(IRMutator):
        def visit_Binary(self, op: Binary) -> PrimExpr:
            nested = _nested_digits(op, extents)
            if nested is not None and nested[0] in digits and {nested[1], nested[2]} <= set(digits[nested[0]][0]):
                t, lo, hi = nested
                bounds = digits[t][0]
                return number(t, bounds.index(lo), bounds.index(hi))
            if op.op in ("floordiv", "floormod") and isinstance(op.a, Var) and op.a in digits \
                    and isinstance(op.b, IntImm) and op.b.value in digits[op.a][0]:
                bounds, names = digits[op.a]
                i = bounds.index(op.b.value)
                return number(op.a, i, len(names)) if op.op == "floordiv" else number(op.a, 0, i)
            return self.generic_visit(op)

        def visit_Var(self, op: Var) -> PrimExpr:
            return number(op, 0, len(digits[op][1])) if op in digits else op

    from ...arith import simplify

    return _xor_digits(simplify(Digits().visit(index)), out)


class _Unchecked(IRMutator):
    def visit_Call(self, op: Call) -> PrimExpr:
        from ...lower.index_checks import INDEX_CHECK

        return self.visit(op.args[0]) if op.op == INDEX_CHECK else self.generic_visit(op)


def _unchecked(index: PrimExpr) -> PrimExpr:
    """`index` without the emulator's run-time checks (`tdsl.index_check(i, ...)` is i)."""
    return _Unchecked().visit(index) if collect(index, Call) else index


def _nested_digits(node: Binary, extents: dict[Var, int]) -> tuple[Var, int, int] | None:
    """(t, lo, hi) when `node` is (t % hi) // lo or (t // lo) % (hi / lo), a thread index's digits
    lo .. hi (lo dividing hi, hi the extent's divisor); else None."""
    inner = node.a
    if not (isinstance(inner, Binary) and isinstance(inner.a, Var) and inner.a in extents
            and isinstance(inner.b, IntImm) and isinstance(node.b, IntImm) and inner.b.value > 0 and node.b.value > 0):
        return None
    t, ext = inner.a, extents[inner.a]
    if node.op == "floordiv" and inner.op == "floormod":
        lo, hi = node.b.value, inner.b.value
    elif node.op == "floormod" and inner.op == "floordiv":
        lo, hi = inner.b.value, inner.b.value * node.b.value
    else:
        return None
    return (t, lo, hi) if hi % lo == 0 and ext % hi == 0 else None


def _xor_digits(index: PrimExpr, extents: dict[Var, int]) -> tuple[PrimExpr, dict[Var, int]]:
    """`index` with each XOR swizzle ``L ^ h`` of thread digits replaced by one new digit: L a
    mixed-radix number of digits (a, b*ea + a, ...) spanning [0, E), E a power of two, h =
    x % n with n <= E a power of two and no digit of L in x, L's digits used nowhere else. For
    fixed h, w = L ^ h is a bijection of [0, E) (the map t -> index is injective iff it is in w)."""
    from ...arith import linear_form, simplify

    out = dict(extents)
    for node in collect(index, Binary):
        if node.op != "bitwise_xor":
            continue
        for lhs, h in ((node.a, node.b), (node.b, node.a)):
            n = _digit_bound(h, out)   # h < n
            if n is None:
                continue
            used = [v for v in free_vars(lhs) if v in out]
            form = linear_form(lhs, used) if used and free_vars(lhs) <= set(used) else None
            if form is None or free_vars(h) & set(used):
                continue
            coeffs, const = form
            if not (isinstance(const, IntImm) and const.value == 0):
                continue
            span = 1
            for v in sorted(used, key=lambda v: coeffs[v]):
                if coeffs[v] != span:
                    break
                span *= out[v]
            else:
                if span & (span - 1) or n > span:   # L, h < span = 2^k: L ^ h < span
                    continue
                w = Var("tdsl_xor_digit", node.dtype)
                rest = _replace_node(index, node, w)
                if free_vars(rest) & set(used):
                    continue
                for v in used:
                    del out[v]
                out[w] = span
                return _xor_digits(simplify(rest), out)
    return index, out


def _digit_bound(h: PrimExpr, digits: dict[Var, int]) -> int | None:
    """An n with 0 <= h < n: h = x % c (n = c), or a non-negative combination of digits."""
    from ...arith import linear_form

    if isinstance(h, Binary) and h.op == "floormod" and isinstance(h.b, IntImm) and h.b.value > 0:
        return h.b.value
    used = [v for v in free_vars(h) if v in digits]
    if not used or free_vars(h) - set(used):
        return None
    form = linear_form(h, used)
    if form is None or not isinstance(form[1], IntImm) or form[1].value < 0:
        return None
    coeffs, const = form
    if any(not isinstance(coeffs[v], int) or coeffs[v] < 0 for v in used):
        return None
    return const.value + sum(coeffs[v] * (digits[v] - 1) for v in used) + 1


def _replace_node(e: PrimExpr, target: PrimExpr, by: PrimExpr) -> PrimExpr:
    class R(IRMutator):
        def visit_Binary(self, op: Binary) -> PrimExpr:
            return by if op is target else self.generic_visit(op)

    return R().visit(e)


def _conjuncts(cond: PrimExpr | None) -> list[PrimExpr]:
    """The terms of `a and b and ...` (none for None)."""
    if cond is None:
        return []
    if isinstance(cond, Binary) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _mbarrier_guarded(body: Stmt) -> set[Buffer]:
    """Shared buffers that only T.ptx_tma_load writes, in a kernel that waits on mbarriers: their
    exchanges are ordered by the mbarriers (a consumer reads a stage after T.ptx_wait_barrier on the
    barrier its TMA loads complete on; the producer reloads it after the consumers' arrivals), not
    by __syncthreads(). The barrier protocol itself is the program's: the emulator runs it."""
    calls = collect(body, Call)
    if not any(c.op == MBARRIER_WAIT for c in calls):
        return set()
    tma = {c.args[0].buffer for c in calls if c.op == TMA_LOAD}
    stored = {s.buffer for s in collect(body, BufferStore)}
    others = {a.buffer for c in calls if c.op not in HOPPER_CALLS for a in c.args if isinstance(a, BufferLoad)}
    return tma - stored - others


def _sync() -> Stmt:
    return Evaluate(Call(int32, SYNC, ()))


class _Planner:
    """Computes, for a statement, its shared accesses before its first barrier (head) and after
    its last one (tail), inserting barriers inside where needed."""

    def __init__(self, spec: KernelSpec, func_vars: set[Var]):
        self.kernel = spec.name
        # a cp.async writes its destination when the issuing thread's wait_group completes it
        self.async_dst = [c.args[0].buffer for c in collect(spec.body, Call) if c.op == CP_ASYNC]
        self.tma_dst = _mbarrier_guarded(spec.body)
        self.threads = {v: spec.launch[t] for t, v in spec.tag_vars.items() if t.startswith("threadIdx")}
        self.uniform: set[Var] = set(func_vars) | {v for t, v in spec.tag_vars.items() if t.startswith("blockIdx")}
        self.count = 0

    # uniformity --------------------------------------------------------------------
    def is_uniform(self, e: PrimExpr) -> bool:
        return not collect(e, BufferLoad) and free_vars(e) <= self.uniform

    # accesses ----------------------------------------------------------------------
    def accesses(self, stmt: Stmt) -> list[_Access]:
        out = []
        for call in collect(stmt, Call):
            if call.op == WAIT_GROUP:
                out += [_Access(b, IntImm(0, int32), True, True, "complete") for b in dict.fromkeys(self.async_dst)]
            elif call.op == CP_ASYNC:   # the elements it writes, as a store of them would
                dst, nbytes = call.args[0], call.args[2].value
                lanes = max(1, nbytes // (dst.buffer.dtype.itemsize * dst.buffer.dtype.lanes))
                index = dst.indices[0] if lanes == 1 else Ramp(dst.indices[0], IntImm(1, dst.indices[0].dtype), lanes)
                out.append(_Access(dst.buffer, index, True, False, "issue"))
        for call in collect(stmt, Call):
            if call.op == TMA_LOAD:   # writes the box at dst, completing on its mbarrier
                dst = call.args[0].buffer
                out.append(_Access(dst, call.args[0].indices[0], True, True, "mbarrier" if dst in self.tma_dst else ""))
            if call.op == TMA_STORE:   # reads the box at src (the threads' writes of it need a barrier first)
                src = call.args[1]
                out.append(_Access(src.buffer, src.indices[0], False, True, ""))
            if call.op == WGMMA:   # reads its A and B tiles (the accumulators are the thread's registers)
                out += [_Access(t.buffer, t.indices[0], False, True, "mbarrier" if t.buffer in self.tma_dst else "")
                        for t in call.args[1:3] if t.buffer.scope == "shared"]
            if call.op in MBARRIER_CALLS:   # init writes; the rest are atomic
                bar = call.args[0]
                out.append(_Access(bar.buffer, bar.indices[0], call.op == MBARRIER_INIT, False,
                                   "" if call.op == MBARRIER_INIT else "mbarrier"))
            if call.op == TMA_LOAD:
                bar = call.args[3]
                out.append(_Access(bar.buffer, bar.indices[0], False, False, "mbarrier"))
        hopper_args = {id(a) for c in collect(stmt, Call) if c.op in HOPPER_CALLS for a in c.args}
        opaque = {id(a) for a in _extern_call_args(stmt)} - hopper_args
        async_args = {id(c.args[0]) for c in collect(stmt, Call) if c.op == CP_ASYNC} | hopper_args
        read_only = {id(a) for a in _extern_call_args(stmt, read_only=True)}
        for n in collect(stmt, (BufferLoad, BufferStore)):
            if n.buffer.scope == "shared" and id(n) not in async_args:
                # an element passed to an extern call (a tensor intrinsic) stands for a tile the
                # call may read or write: a write at an unknown place (a read where the call
                # only reads it: tdsl.intrinsics.cuda_mma.READ_ONLY_ARGS)
                written = isinstance(n, BufferStore) or (id(n) in opaque and id(n) not in read_only)
                guarded = "mbarrier" if n.buffer in self.tma_dst else ""
                out.append(_Access(n.buffer, n.indices[0], written, id(n) in opaque, guarded))
        return out

    def same_thread(self, a: _Access, b: _Access) -> bool:
        """Both accesses touch an element only the executing thread touches."""
        from ...lower._util import same_expr

        if a.opaque or b.opaque:
            return False
        a, b = replace(a, index=_unchecked(a.index)), replace(b, index=_unchecked(b.index))
        lanes = [(1, 1)]
        if not same_expr(a.index, b.index):
            # X and X + c: a thread's two elements; no other thread's if t -> X + c * w
            # (w in {0, 1}) is injective
            from ...arith import simplify

            gap = simplify(b.index - a.index) if a.index.dtype == b.index.dtype else None
            if not isinstance(gap, IntImm) or gap.value == 0 or a.index.dtype.lanes != 1:
                return False
            lanes = [(abs(gap.value), 2)]
        index = a.index
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
        extents = {v: self.threads[v].value for v in varying}
        index, extents = _split_thread_digits(index, extents)
        varying = list(extents)
        form = linear_form(index, varying)
        if form is None:
            return False
        coeffs, _ = form
        terms = sorted([(abs(coeffs[v]), extents[v]) for v in varying] + lanes)
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
                    if {a.async_op, b.async_op} == {"issue", "complete"}:
                        continue   # the same copy: issued, then landed by its own thread's wait
                    if a.async_op == b.async_op == "mbarrier":
                        continue   # ordered by the mbarriers (see _mbarrier_guarded)
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
        from ...lower.cross_thread import ALLREDUCE

        if any(c.op == ALLREDUCE for c in collect(stmt, Call)):
            what = f"loop {stmt.loop_var.name}" if isinstance(stmt, For) else f"the branch `if {_expr_text(stmt.condition)}`"
            raise TargetError(f"kernel {self.kernel!r}: a cross-thread reduction sits inside {what}, whose control flow "
                              "differs between threads, but every thread of the block must take part in it: give the "
                              "thread loops around it the launch's extents, or move it out of the branch")
        inner = _Planner.__new__(_Planner)
        inner.threads, inner.uniform, inner.count = dict(self.threads), set(self.uniform), 0
        inner.kernel, inner.async_dst, inner.tma_dst = self.kernel, self.async_dst, self.tma_dst
        cond = stmt.condition if isinstance(stmt, IfThenElse) else None
        for c in _conjuncts(cond):
            if (isinstance(c, Binary) and c.op in ("lt", "eq") and c.a in inner.threads and isinstance(c.b, IntImm)
                    and isinstance(inner.threads[c.a], IntImm)):
                # under `if (tx < c)` only c threads of that axis run, under `if (tx == c)` one:
                # fewer threads can collide
                runs = c.b.value if c.op == "lt" else 1
                inner.threads[c.a] = IntImm(min(runs, inner.threads[c.a].value), c.b.dtype)
        inner.uniform |= set(inner.threads)
        for child in stmt_children(stmt):
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


def lower_for_cuda(func: PrimFunc, checked: bool = False) -> HostPlan:
    """Block IR -> kernels with barriers: `tdsl.lower(func, "cuda")` (every GPU pass listed
    there), then kernel splitting and barrier planning.

    An access provably outside its buffer is a BoundsError here, per axis (checked on the
    compacted n-d buffers, as the CPU build does) and on the flat buffers. `checked=True` is the
    emulator's variant: every access not proven in bounds gets a per-axis `tdsl.index_check`
    (its CUDA C++ calls `tdsl_emu_check`, which only the emulator's header defines)."""
    from ...ir.attrs import set_attr
    from ...lower import lower
    from ...lower.index_checks import BOUNDS_CHECK_ATTR
    from ..llvm.bounds import check_static_bounds

    def per_axis_static_check(name: str, stage: PrimFunc) -> None:
        if name == "compact_gpu_buffers":   # buffers still have their axes (and compacted shapes)
            check_static_bounds(stage, scalar_only=True)

    lowered = lower(set_attr(func, BOUNDS_CHECK_ATTR, True) if checked else func, "cuda",
                    trace=per_axis_static_check)
    check_static_bounds(lowered)
    plan = split_kernels(lowered, warp_calls(func))
    for spec in plan.kernels:
        insert_barriers(spec, lowered)
        split_roles(spec)   # (after the barriers: each thread runs the same statements as before)
    return plan
