"""Software pipelining of annotated loops (TVM's InjectSoftwarePipeline), and cp.async copies.

A loop annotated with ``software_pipeline_stage`` (one stage per statement of its body, in
order) runs statement k of logical iteration j in pipeline iteration ``j + stage[k]``: the
loads of later iterations overlap the compute of earlier ones. ``software_pipeline_order``
gives the order of the statements inside one pipeline iteration (default: as written);
``software_pipeline_async_stages`` lists stages whose global -> shared copies become cp.async.
Before (stage [0, 0, 1], async_stages [0])::

    for ko in range(8):
        A_sh[tx] = A[ko * 64 + tx]
        B_sh[tx] = B[ko * 64 + tx]
        C_loc[0] = C_loc[0] + A_sh[tx] * B_sh[tx]

After ``inject_software_pipeline`` (each buffer written in one stage and read in a later one gets
one copy per stage in flight, indexed by the iteration modulo the copies; prologue, steady state,
epilogue; a commit after the async stage of every pipeline iteration, even an empty one, so that
the wait counts are the same everywhere)::

    A_sh = T.allocate((2, 64), "float32", "shared")            # was (64,)
    for _ in T.serial(1, annotations={"tdsl.async_copy": 1}):   # ko = 0
        A_sh[0, tx] = A[tx]
        B_sh[0, tx] = B[tx]
    T.ptx_commit_group()
    for ko in range(1, 8):
        for _ in T.serial(1, annotations={"tdsl.async_copy": 1}):
            A_sh[ko % 2, tx] = A[ko * 64 + tx]
            B_sh[ko % 2, tx] = B[ko * 64 + tx]
        T.ptx_commit_group()
        T.ptx_wait_group(1)                                     # all but the newest group landed
        C_loc[0] = C_loc[0] + A_sh[(ko - 1) % 2, tx] * B_sh[(ko - 1) % 2, tx]
    T.ptx_commit_group()
    T.ptx_wait_group(1)
    C_loc[0] = C_loc[0] + A_sh[1, tx] * B_sh[1, tx]

``lower_async_copies`` (after vectorize) turns each store of a marked copy that moves 4, 8 or 16
aligned bytes from global to shared memory into ``T.ptx_cp_async(dst, src, bytes)``; any other
store stays synchronous (a lowering note says why). The CUDA backend places the barriers: a
``ptx_wait_group`` counts as the write of the copies it completes.
"""
from __future__ import annotations

from dataclasses import replace

from ..dtypes import int32
from ..errors import TargetError
from ..ir import (
    Allocate,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Evaluate,
    For,
    IfThenElse,
    IntImm,
    IRMutator,
    LetStmt,
    PrimExpr,
    PrimFunc,
    Ramp,
    Stmt,
    Var,
    collect,
    substitute,
)
from ..ir.opaque_calls import ASYNC_CALLS, COMMIT_GROUP, CP_ASYNC, WAIT_GROUP  # noqa: F401 (ASYNC_CALLS: here too)
from ..ir.stmt import flat_seq
from ._util import add_notes, fresh_copy, seq

STAGE = "software_pipeline_stage"
ORDER = "software_pipeline_order"
ASYNC_STAGES = "software_pipeline_async_stages"
ASYNC_COPY = "tdsl.async_copy"          # marks the statements of an async stage until lower_async_copies
CP_ASYNC_BYTES = (4, 8, 16)


def commit_group() -> Stmt:
    """`T.ptx_commit_group()`: the cp.async copies issued since the last commit become one group."""
    return Evaluate(Call(int32, COMMIT_GROUP, ()))


def wait_group(n: int) -> Stmt:
    """`T.ptx_wait_group(n)`: wait until at most `n` of this thread's newest groups are pending."""
    return Evaluate(Call(int32, WAIT_GROUP, (IntImm(n, int32),)))


def cp_async(dst: BufferLoad, src: BufferLoad, nbytes: int) -> Stmt:
    """`T.ptx_cp_async(dst, src, nbytes)`: copy `nbytes` from the global element `src` on to the
    shared element `dst`, asynchronously (complete at a later ptx_wait_group)."""
    return Evaluate(Call(int32, CP_ASYNC, (dst, src, IntImm(nbytes, int32))))


# ----------------------------------------------------------------------------- the pass

def inject_software_pipeline(func: PrimFunc) -> PrimFunc:
    """Pipeline every loop annotated with software_pipeline_stage (see the module docs)."""
    if not any(_ann(s, key) is not None for s in collect(func.body, For) for key in (STAGE, ORDER, ASYNC_STAGES)):
        return func
    injector = _Injector(func)
    body = injector.visit(func.body)
    if injector.versions:
        body = _Reallocate(injector.versions).visit(body)
    from .simplify import simplify  # fold the constant iterations of the prologue and epilogue

    return simplify(func.with_body(body))


def _ann(loop: For, key: str):
    return dict(loop.annotations).get(key)


def _int_list(loop: For, key: str, value) -> list[int]:
    items = value if isinstance(value, tuple) else (value,)
    out = []
    for v in items:
        v = v.value if isinstance(v, IntImm) else v
        if isinstance(v, bool) or not isinstance(v, int):
            raise TargetError(f"loop {loop.loop_var.name}: the annotation {key} is a list of integers, got "
                              f"{list(items)!r}")
        out.append(v)
    return out


class _Stmt:
    """One statement of the pipelined body: what it reads and writes."""

    def __init__(self, index: int, stmt: Stmt, stage: int, pos: int):
        self.index, self.stmt, self.stage, self.pos = index, stmt, stage, pos
        self.reads: set[Buffer] = set()
        self.writes: set[Buffer] = set()
        opaque = {id(a) for c in collect(stmt, Call) for a in c.args if isinstance(a, BufferLoad)}
        for n in collect(stmt, (BufferLoad, BufferStore)):
            if isinstance(n, BufferStore) or id(n) in opaque:
                self.writes.add(n.buffer)
            if isinstance(n, BufferLoad):
                self.reads.add(n.buffer)

    def describe(self) -> str:
        stores = sorted({n.buffer.name for n in collect(self.stmt, BufferStore)})
        what = f"writing {', '.join(map(repr, stores))}" if stores else "writing nothing"
        return f"statement {self.index} ({what})"


class _Injector(IRMutator):
    def __init__(self, func: PrimFunc):
        self.func = func
        self.versions: dict[Buffer, Buffer] = {}   # old buffer -> buffer with a leading version axis

    def visit_For(self, loop: For) -> Stmt:
        stages = _ann(loop, STAGE)
        inner = [f.loop_var.name for f in collect(loop.body, For) if _ann(f, STAGE) is not None]
        if stages is not None and inner:
            raise TargetError(f"loop {inner[0]} is pipelined (software_pipeline_stage) inside the pipelined loop "
                              f"{loop.loop_var.name}; nested software pipelines are not supported: annotate one "
                              "of the two")
        body = self.visit(loop.body)
        loop = loop if body is loop.body else replace(loop, body=body)
        if stages is None:
            for key in (ORDER, ASYNC_STAGES):
                if _ann(loop, key) is not None:
                    raise TargetError(f"loop {loop.loop_var.name} has the annotation {key} but no "
                                      f"{STAGE}; give every statement of its body a stage")
            return loop
        return self.pipeline(loop)

    # ------------------------------------------------------------------ checks
    def pipeline(self, loop: For) -> Stmt:
        name = loop.loop_var.name
        if loop.kind not in ("serial", "unrolled"):
            raise TargetError(f"loop {name} is {loop.kind} but has {STAGE}: only a serial loop can be pipelined")
        body, allocs = loop.body, []
        while isinstance(body, (Allocate, LetStmt)):
            if isinstance(body, Allocate):
                allocs.append(body.buffer)
            else:
                body = substitute(body.body, {body.var: body.value}, buffers=True)
                continue
            body = body.body
        stmts = flat_seq([body])
        n = len(stmts)
        stage = _int_list(loop, STAGE, _ann(loop, STAGE))
        order = _int_list(loop, ORDER, _ann(loop, ORDER)) if _ann(loop, ORDER) is not None else list(range(n))
        asyncs = _int_list(loop, ASYNC_STAGES, _ann(loop, ASYNC_STAGES) or ())
        for key, values in ((STAGE, stage), (ORDER, order)):
            if len(values) != n:
                raise TargetError(f"loop {name}: {key} has {len(values)} entries but the loop body has {n} "
                                  f"statement{'s' if n != 1 else ''} (one entry per statement, in order)")
        if any(s < 0 for s in stage):
            raise TargetError(f"loop {name}: {STAGE} {stage} has a negative stage; stages count from 0")
        if sorted(order) != list(range(n)):
            raise TargetError(f"loop {name}: {ORDER} {order} must be a permutation of 0..{n - 1} (the position of "
                              "each statement within one pipeline iteration)")
        bad = sorted(set(asyncs) - set(stage))
        if bad:
            raise TargetError(f"loop {name}: {ASYNC_STAGES} {asyncs} names stage{'s' if len(bad) > 1 else ''} "
                              f"{bad} that no statement has (stages: {sorted(set(stage))})")
        if collect(loop.extent, BufferLoad) or collect(loop.min, BufferLoad):
            raise TargetError(f"loop {name}: a pipelined loop's bounds cannot depend on buffer contents")
        info = [_Stmt(k, s, stage[k], order[k]) for k, s in enumerate(stmts)]
        versions = self.check_dependences(loop, info, set(asyncs))
        return self.emit(loop, body, info, versions, sorted(set(asyncs)), allocs)

    def check_dependences(self, loop: For, info: list[_Stmt], asyncs: set[int]) -> dict[Buffer, int]:
        """Stages must follow the dependences; returns the buffers that need several versions."""
        _check_order(loop.loop_var.name, info, asyncs)
        versions = self.versions_needed(loop, info)
        _check_carried(loop.loop_var.name, info, versions)
        return versions

    def versions_needed(self, loop: For, info: list[_Stmt]) -> dict[Buffer, int]:
        """Buffers written in one stage and read in a later one: how many copies each needs."""
        name = loop.loop_var.name
        versions: dict[Buffer, int] = {}
        for a in info:
            for buf in a.writes:
                later = [b.stage for b in info if buf in b.reads and b.stage > a.stage]
                if later:
                    versions[buf] = max(versions.get(buf, 1), max(later) - a.stage + 1)
        for buf in list(versions):
            if buf.scope == "global" or buf in self.func.buffer_params:
                raise TargetError(f"loop {name}: buffer {buf.name!r} (scope {buf.scope}) is written in one stage and "
                                  "read in a later one, so each stage needs its own copy, but only a shared, local "
                                  "or fragment intermediate can be multi-buffered; read it in the same stage")
            if _used_outside(self.func.body, loop, buf):
                raise TargetError(f"loop {name}: buffer {buf.name!r} is multi-buffered for the pipeline (one copy per "
                                  "stage in flight) but is also used outside the loop; give the pipelined loop its "
                                  "own tile (cache_read / compute_at at the loop)")
        return versions

    # ------------------------------------------------------------------ emission
    def emit(self, loop: For, body: Stmt, info: list[_Stmt], versions: dict[Buffer, int], asyncs: list[int],
             allocs: list[Buffer]) -> Stmt:
        var, lo, extent = loop.loop_var, loop.min, loop.extent
        for buf, copies in versions.items():
            self.versions[buf] = _with_versions(buf, copies)
        vmap = {buf: self.versions[buf] for buf in versions}
        depth = max(s.stage for s in info)
        commits = {a: max(s.pos for s in info if s.stage == a) for a in asyncs}
        iteration = _Iteration(loop, info, [_Version(vmap, var, lo).visit(s.stmt) for s in info], commits,
                               self.wait_counts(info, commits))

        const = extent.value if isinstance(extent, IntImm) else None
        parts: list[Stmt] = []
        for p in range(depth):   # prologue: statement k from pipeline iteration stage[k] on
            parts.append(iteration(IntImm(p, var.dtype),
                                   lambda st, p=p: 0 <= p - st and (const is None or p - st < const)))
        if const is None or const > depth:   # steady state: every statement
            body_var = Var(var.name, var.dtype)
            count: PrimExpr = extent - depth if const is None else IntImm(const - depth, extent.dtype)
            parts.append(For(body_var, IntImm(depth, var.dtype), count, loop.kind,
                             iteration(body_var, lambda st: True), loop.thread_tag, _kept_annotations(loop)))
        if const is None:    # epilogue: statement k until logical iteration extent - 1
            for e in range(depth):
                parts.append(iteration(extent + e if e else extent, lambda st, e=e: st > e))
        else:
            for p in range(max(depth, const), const + depth):
                parts.append(iteration(IntImm(p, var.dtype), lambda st, p=p: 0 <= p - st < const))
        if asyncs:   # nothing stays in flight after the loop (only empty groups are left by now)
            parts.append(wait_group(0))
        out = seq(*parts)
        if const is None and depth:
            # a symbolic extent shorter than the pipeline depth runs the loop as written
            plain = replace(loop, body=_Version(vmap, var, lo, fixed=0).visit(body), annotations=_kept_annotations(loop))
            out = IfThenElse(extent >= IntImm(depth, extent.dtype), out, plain)
        for buf in reversed(allocs):
            out = Allocate(self.versions.get(buf, buf), out)
        return out

    @staticmethod
    def wait_counts(info: list[_Stmt], commits: dict[int, int]) -> dict[int, int]:
        """statement -> N of the ptx_wait_group(N) it needs first (only consumers of async stages).
        Every pipeline iteration commits one group per async stage, so N is how many groups are
        committed after the producer's group and before the consumer."""
        out: dict[int, int] = {}
        per_iter = len(commits)
        for c in info:
            for p in info:
                if p.stage not in commits or not (p.writes & c.reads) or c.stage <= p.stage:
                    continue
                d = c.stage - p.stage
                after = sum(1 for pos in commits.values() if pos > commits[p.stage])
                before = sum(1 for pos in commits.values() if pos < c.pos)
                n = after + (d - 1) * per_iter + before
                out[c.index] = min(out.get(c.index, n), n)
        return out


class _Iteration:
    """Builds one pipeline iteration p: statement k runs logical iteration p - stage[k] where
    runs(stage[k]), in the order of software_pipeline_order, with the waits before consumers of
    async stages and a commit after each async stage."""

    def __init__(self, loop: For, info: list[_Stmt], versioned: list[Stmt], commits: dict[int, int],
                 waits: dict[int, int]):
        self.var, self.lo = loop.loop_var, loop.min
        self.by_pos = sorted(info, key=lambda s: s.pos)
        self.versioned, self.commits, self.waits = versioned, commits, waits

    def __call__(self, p: PrimExpr, runs) -> Stmt:
        out: list[Stmt] = []
        waited: int | None = None
        for s in self.by_pos:
            if runs(s.stage):
                need = self.waits.get(s.index)
                if need is not None and (waited is None or need < waited):
                    out.append(wait_group(need))
                    waited = need
                out.append(self.statement(s, p))
            if s.pos in self.commits.values():
                out.append(commit_group())
                if waited is not None:   # the wait's count now leaves one more group pending
                    waited += 1
        return seq(*out)

    def statement(self, s: _Stmt, p: PrimExpr) -> Stmt:
        j = p - s.stage if s.stage else p
        code = fresh_copy(self.versioned[s.index], {self.var: j + self.lo if not _is_zero(self.lo) else j})
        if s.stage in self.commits:   # an async stage: lower_async_copies makes its copies cp.async
            code = For(Var("async", int32), IntImm(0, int32), IntImm(1, int32), "serial", code,
                       annotations=((ASYNC_COPY, 1),))
        return code


def _with_versions(buf: Buffer, copies: int) -> Buffer:
    """`buf` with a leading axis of `copies` versions; explicit strides (padded rows from
    storage_align) keep their padding, one version after another."""
    if not buf.strides:
        return buf.with_(shape=(IntImm(copies, int32), *buf.shape))
    from ..arith import simplify

    spans = [simplify(s * e) for s, e in zip(buf.strides, buf.shape)]
    consts = [x for x in spans if isinstance(x, IntImm)]
    if len(consts) != len(spans):
        raise TargetError(f"buffer {buf.name!r} is multi-buffered for a software pipeline, so its strides must be "
                          "constants")
    span = max(consts, key=lambda x: x.value)
    return buf.with_(shape=(IntImm(copies, int32), *buf.shape), strides=(span, *buf.strides))


def _check_order(name: str, info: list[_Stmt], asyncs: set[int]) -> None:
    """A statement that depends on an earlier one (in the body as written) must still run after it."""
    for a in info:
        for b in info[a.index + 1:]:
            shared = (a.writes & (b.reads | b.writes)) | (a.reads & b.writes)
            if not shared:
                continue
            buf = sorted(shared, key=lambda x: x.name)[0].name
            if a.stage > b.stage or (a.stage == b.stage and a.pos > b.pos):
                raise TargetError(
                    f"loop {name}: {b.describe()} depends on {a.describe()} through {buf!r}, so it must run "
                    f"after it, but its stage {b.stage} / order {b.pos} put it before (stage {a.stage} / order "
                    f"{a.pos}); give a consumer a stage >= its producer's (and a later order in the same stage)")
            if a.stage in asyncs and (a.writes & b.reads) and b.stage == a.stage:
                raise TargetError(
                    f"loop {name}: {b.describe()} reads {buf!r}, which {a.describe()} writes asynchronously "
                    f"in the same stage {a.stage}; read the results of an async stage in a later stage")


def _check_carried(name: str, info: list[_Stmt], versions: dict[Buffer, int]) -> None:
    """A dependence from one iteration to the next through a single-copy buffer keeps its order."""
    for a in info:
        for b in info[a.index + 1:]:
            shared = ((b.writes & (a.reads | a.writes)) | (b.reads & a.writes)) - set(versions)
            if shared and (b.stage - a.stage > 1 or (b.stage - a.stage == 1 and b.pos > a.pos)):
                buf = sorted(shared, key=lambda x: x.name)[0].name
                raise TargetError(
                    f"loop {name}: {a.describe()} of the next iteration depends on {b.describe()} through "
                    f"{buf!r}, which the stages {a.stage} and {b.stage} would reorder across iterations")


def _is_zero(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 0


def _kept_annotations(loop: For):
    return tuple((k, v) for k, v in loop.annotations if k not in (STAGE, ORDER, ASYNC_STAGES))


def _used_outside(root: Stmt, loop: For, buf: Buffer) -> bool:
    inside = {id(n) for n in collect(loop, (BufferLoad, BufferStore))}
    return any(n.buffer is buf and id(n) not in inside for n in collect(root, (BufferLoad, BufferStore)))


class _Version(IRMutator):
    """Accesses to a multi-buffered buffer get the version axis: (iteration - min) % versions."""

    def __init__(self, vmap: dict[Buffer, Buffer], var: Var, lo: PrimExpr, fixed: int | None = None):
        self.vmap, self.var, self.lo, self.fixed = vmap, var, lo, fixed

    def _version(self, new: Buffer) -> PrimExpr:
        if self.fixed is not None:
            return IntImm(self.fixed, int32)
        it = self.var - self.lo if not _is_zero(self.lo) else self.var
        count = new.shape[0]
        return it % count if isinstance(count, IntImm) and count.value > 1 else IntImm(0, self.var.dtype)

    def visit_BufferLoad(self, e: BufferLoad) -> PrimExpr:
        idx = tuple(self.visit(i) for i in e.indices)
        new = self.vmap.get(e.buffer)
        if new is None:
            return e if all(a is b for a, b in zip(idx, e.indices)) else replace(e, indices=idx)
        return replace(e, buffer=new, indices=(self._version(new), *idx))

    def visit_BufferStore(self, s: BufferStore) -> Stmt:
        idx = tuple(self.visit(i) for i in s.indices)
        value = self.visit(s.value)
        new = self.vmap.get(s.buffer)
        if new is None:
            return replace(s, value=value, indices=idx)
        return replace(s, buffer=new, value=value, indices=(self._version(new), *idx))


class _Reallocate(IRMutator):
    """Allocations of multi-buffered buffers get their version axis."""

    def __init__(self, vmap: dict[Buffer, Buffer]):
        self.vmap = vmap

    def visit_Allocate(self, op: Allocate) -> Stmt:
        body = self.visit(op.body)
        new = self.vmap.get(op.buffer)
        if new is None:
            return op if body is op.body else replace(op, body=body)
        return replace(op, buffer=new, body=body)


# ----------------------------------------------------------------------------- cp.async

def lower_async_copies(func: PrimFunc) -> PrimFunc:
    """The stores marked by inject_software_pipeline as async become ptx_cp_async where they move
    4, 8 or 16 aligned bytes from global to shared memory (see the module docs)."""
    if not any(_ann(f, ASYNC_COPY) for f in collect(func.body, For)):
        return func
    lowering = _AsyncCopies()
    body = lowering.visit(func.body)
    return add_notes(func.with_body(body), lowering.notes)


class _AsyncCopies(IRMutator):
    def __init__(self):
        self.notes: list[str] = []
        self.ranges: dict[Var, object] = {}

    def visit_For(self, loop: For) -> Stmt:
        from ..ir import Range

        self.ranges[loop.loop_var] = Range(loop.min, loop.extent)
        body = self.visit(loop.body)
        del self.ranges[loop.loop_var]
        if _ann(loop, ASYNC_COPY):
            return _AsyncStores(self).visit(body)
        return loop if body is loop.body else replace(loop, body=body)


class _AsyncStores(IRMutator):
    def __init__(self, outer: _AsyncCopies):
        self.outer = outer
        self.ranges = dict(outer.ranges)

    def visit_For(self, loop: For) -> Stmt:
        from ..ir import Range

        self.ranges[loop.loop_var] = Range(loop.min, loop.extent)
        body = self.visit(loop.body)
        merged = self.merged(loop, body)
        del self.ranges[loop.loop_var]
        if merged is not None:
            return merged
        return loop if body is loop.body else replace(loop, body=body)

    def merged(self, loop: For, body: Stmt) -> Stmt | None:
        """A loop of `e` cp.async of n bytes each, moving on by n bytes per iteration (a
        vectorized copy inside a serial loop: fp16 x 8 as two 8-byte pieces): one
        cp.async of e * n bytes when that is at most 16 and aligned."""
        from ..arith import linear_form, prove, simplify

        if not (isinstance(body, Evaluate) and isinstance(body.value, Call) and body.value.op == CP_ASYNC
                and isinstance(loop.extent, IntImm) and isinstance(loop.min, IntImm) and loop.kind != "thread_binding"):
            return None
        dst, src, nbytes = body.value.args
        assert isinstance(dst, BufferLoad) and isinstance(src, BufferLoad) and isinstance(nbytes, IntImm)
        total = loop.extent.value * nbytes.value
        if total not in CP_ASYNC_BYTES:
            return None
        elems = nbytes.value // dst.buffer.dtype.itemsize
        starts = []
        for load in (dst, src):
            form = linear_form(load.indices[0], [loop.loop_var])
            if form is None or form[0][loop.loop_var] != elems:
                return None
            start = simplify(substitute(load.indices[0], {loop.loop_var: loop.min}))
            if not prove((start % (total // load.buffer.dtype.itemsize)).eq(0), self.ranges or None):
                return None
            starts.append(BufferLoad(load.buffer, (start,)))
        return cp_async(starts[0], starts[1], total)

    def visit_BufferStore(self, s: BufferStore) -> Stmt:
        why = self.refusal(s)
        if why is not None:
            self.outer.notes.append(f"the copy into {s.buffer.name!r} stayed synchronous (no cp.async): {why}")
            return s
        src = s.value
        assert isinstance(src, BufferLoad)
        (dst_index,), (src_index,) = s.indices, src.indices
        elem = s.buffer.dtype.element
        base = (lambda i: i.base if isinstance(i, Ramp) else i)
        nbytes = elem.itemsize * s.value.dtype.lanes
        return cp_async(BufferLoad(s.buffer, (base(dst_index),)), BufferLoad(src.buffer, (base(src_index),)), nbytes)

    def refusal(self, s: BufferStore) -> str | None:
        from ..arith import prove

        src = s.value
        if s.buffer.scope != "shared":
            return f"it stores into scope {s.buffer.scope}, cp.async writes shared memory"
        if not isinstance(src, BufferLoad) or src.buffer.scope != "global":
            return "the value is not a plain load from a global buffer"
        if src.dtype != s.buffer.dtype.with_lanes(src.dtype.lanes) or src.buffer.dtype != s.buffer.dtype:
            return "source and destination have different dtypes"
        lanes = src.dtype.lanes
        nbytes = s.buffer.dtype.itemsize * lanes
        if nbytes not in CP_ASYNC_BYTES:
            return f"it moves {nbytes} bytes per store, cp.async moves 4, 8 or 16 (vectorize the copy loop)"
        for index in (s.indices[0], src.indices[0]):
            if lanes > 1 and not (isinstance(index, Ramp) and isinstance(index.stride, IntImm)
                                  and index.stride.value == 1):
                return "the vector access is not contiguous"
            base = index.base if isinstance(index, Ramp) else index
            if lanes > 1 and not prove((base % lanes).eq(0), self.ranges or None):
                return f"the {nbytes}-byte access is not provably aligned"
        return None
