"""warp_specialize: a pipelined K loop's producer and consumers on their own warpgroups.

`warp_specialize(func, loop)` splits the thread loop inside a pipelined K loop (the one
`wgmma_pipeline` returns) into a producer warpgroup (``threadIdx.y == 0``: the leading statements
that issue TMA loads, under ``if tx == 0:``) and consumer warpgroups (``threadIdx.y >= 1``: the
rest, seeing the old thread index as ``(ty - 1) * 128 + tx``); the kernel's other thread loops run
on the consumers. Before the K loop the warpgroups set their register budgets,
``if ty == 0: T.ptx_setmaxnreg(False, 40) else: T.ptx_setmaxnreg(True, 232)`` (two consumer
warpgroups; none for one, which has the 248 registers a 256-thread kernel starts with already).
It keeps the function's meaning: one statement after another, the statements run in the same
order as before (only thread 0 produced, before any consumer used the stage) and setmaxnreg does
nothing.
"""
from __future__ import annotations

from ...dtypes import DataType, int32
from ...ir import Binary, Call, Evaluate, For, IfThenElse, IntImm, PrimFunc, SeqStmt, Stmt, Var, binary, collect
from ...ir.opaque_calls import SETMAXNREG, TMA_LOAD, launch_registers, setmaxnreg_problem
from ...ir.tree import replace_at
from ..errors import loop_name, schedule_error
from ..tree import find_loop

WARPGROUP = 128
PRODUCER_REGISTERS = 40     # CUTLASS's producer (load) warpgroup budget on sm_90a
def default_registers(groups: int) -> tuple[int, int] | None:
    """(producer, consumer) setmaxnreg counts for 1 + `groups` warpgroups: the producer keeps 40,
    the consumers share the rest (232 for two); None for one consumer (nothing to gain)."""
    if groups < 2:
        return None
    threads = (1 + groups) * WARPGROUP
    consumer = (launch_registers(threads) * (1 + groups) - PRODUCER_REGISTERS) // groups // 8 * 8
    return PRODUCER_REGISTERS, min(256, consumer)


def registers_problem(producer: int, consumer: int, groups: int) -> str | None:
    """Why setmaxnreg counts (producer .dec, consumers .inc) cannot all be granted to a kernel of
    1 + `groups` warpgroups; None when they fit."""
    for what, count in (("producer_regs", producer), ("consumer_regs", consumer)):
        why = setmaxnreg_problem(count)
        if why is not None:
            return f"{what}: {why}"
    threads = (1 + groups) * WARPGROUP
    r = launch_registers(threads)
    if producer > r:
        return (f"producer_regs = {producer}: setmaxnreg.dec lowers the {r} registers per thread a {threads}-thread "
                f"kernel starts with (65536 / {threads}, a multiple of 8); it must be at most {r}")
    if consumer < r:
        return (f"consumer_regs = {consumer}: setmaxnreg.inc raises the {r} registers per thread a {threads}-thread "
                f"kernel starts with (65536 / {threads}, a multiple of 8); it must be at least {r}")
    total = WARPGROUP * (producer + groups * consumer)
    if total > r * threads:
        return (f"128 x {producer} + {groups} x 128 x {consumer} = {total} registers exceed the CTA's pool of "
                f"{threads} x {r} = {r * threads}")
    return None


def _is_tx0(cond, tx: Var) -> bool:
    return (isinstance(cond, Binary) and cond.op == "eq" and cond.a is tx and isinstance(cond.b, IntImm)
            and cond.b.value == 0)


def _issues_tma(stmt: Stmt) -> bool:
    return any(c.op == TMA_LOAD for c in collect(stmt, Call))


def _roles(tx_loop: For, refuse) -> tuple[list[Stmt], list[Stmt]]:
    """The producer's statements (the leading ones issuing TMA loads, each under ``if tx == 0:``)
    and the consumers' (the rest) of a pipelined K loop's thread loop."""
    stmts = list(tx_loop.body.seq) if isinstance(tx_loop.body, SeqStmt) else [tx_loop.body]
    tx = tx_loop.loop_var
    producer: list[Stmt] = []
    for s in stmts:
        if not _issues_tma(s):
            break
        if not (isinstance(s, IfThenElse) and s.else_case is None and _is_tx0(s.condition, tx)):
            raise refuse("a statement issuing TMA loads is not under `if tx == 0:` (one thread issues them)")
        producer.append(s)
    consumer = stmts[len(producer):]
    if not producer:
        raise refuse("its thread loop does not begin with statements issuing TMA loads (T.ptx_tma_load)")
    if not consumer or any(_issues_tma(s) for s in consumer):
        raise refuse("after the producer's statements there must be consumer statements without TMA loads")
    return producer, consumer


def warp_specialize(func: PrimFunc, loop: Var, producer_regs: int | None = None,
                    consumer_regs: int | None = None) -> tuple[PrimFunc, None]:
    """Split the thread loop of pipelined K loop `loop` into a producer warpgroup and consumers
    (see the module docstring); `producer_regs` / `consumer_regs` the setmaxnreg budgets (None:
    the default, 0 and 0: no setmaxnreg)."""
    ko, path = find_loop(func, loop, "warp_specialize")

    def refuse(why: str, fix: str | None = None):
        return schedule_error(func, "warp_specialize", f"{loop_name(loop)}: {why}", loops=(loop,),
                              rule="the loop is a serial K loop whose body is one threadIdx.x loop of whole "
                                   "warpgroups (128 threads each) beginning with the statements one thread (tx == 0) runs to issue "
                                   "the TMA loads, in a kernel without threadIdx.y / threadIdx.z", fix=fix)

    if ko.kind != "serial":
        raise refuse(f"it is a {ko.kind} loop, not a serial one")
    tx_loop = ko.body
    if not (isinstance(tx_loop, For) and tx_loop.thread_tag == "threadIdx.x"):
        raise refuse("its body is not one threadIdx.x loop")
    if not (isinstance(tx_loop.extent, IntImm) and tx_loop.extent.value % WARPGROUP == 0):
        raise refuse(f"its threadIdx.x loop has {tx_loop.extent} threads, not whole warpgroups ({WARPGROUP} each)")
    producer, consumer = _roles(tx_loop, refuse)
    kernel = next((p for p in path if isinstance(p, For) and p.thread_tag and p.thread_tag.startswith("blockIdx")),
                  None)
    if kernel is None:
        raise refuse("it is not inside a blockIdx loop (a kernel)")
    tags = {f.thread_tag for f in collect(kernel, For) if f.thread_tag}
    if tags & {"threadIdx.y", "threadIdx.z"}:
        raise refuse("the kernel already binds threadIdx.y / threadIdx.z")
    groups = tx_loop.extent.value // WARPGROUP
    if any(f.thread_tag == "threadIdx.x" and not (isinstance(f.extent, IntImm) and f.extent.value == groups * WARPGROUP)
           for f in collect(kernel, For)):
        raise refuse(f"the kernel's threadIdx.x loops do not all have {groups * WARPGROUP} threads")
    regs = _registers(producer_regs, consumer_regs, groups, refuse)
    return replace_at(func, path[:path.index(kernel)], kernel, _specialized(kernel, ko, tx_loop, producer, consumer,
                                                                          groups, regs)), None


def _registers(producer, consumer, groups: int, refuse) -> tuple[int, int] | None:
    """The (producer, consumer) setmaxnreg counts asked for, checked; None for none."""
    if producer is None and consumer is None:
        return default_registers(groups)
    if producer == 0 and consumer == 0:
        return None
    if producer is None or consumer is None:
        raise refuse("producer_regs and consumer_regs go together (or neither: the default budget)",
                      "e.g. producer_regs=40, consumer_regs=232")
    why = registers_problem(producer, consumer, groups)
    if why is not None:
        r = launch_registers((1 + groups) * WARPGROUP)
        raise refuse(why, f"e.g. producer_regs={PRODUCER_REGISTERS}, consumer_regs="
                          f"{(default_registers(max(groups, 2)) or (0, 0))[1] if groups >= 2 else max(r + 8, 24)}, "
                          "or producer_regs=0, consumer_regs=0 for no setmaxnreg")
    return producer, consumer


def _specialized(kernel: For, ko: For, tx_loop: For, producer: list[Stmt], consumer: list[Stmt], groups: int,
                 regs: tuple[int, int] | None) -> For:
    """The kernel with the roles: threadIdx.y 0 the producer, 1 .. `groups` the consumers; a
    consumer's thread index in the old loop is (ty - 1) * 128 + tx (tx for one warpgroup); with
    `regs`, a thread loop setting the roles' register budgets goes before K loop `ko`."""
    from ...ir.functor import IRMutator, substitute

    def thread_loops(body_of, old: For) -> For:
        ty = Var("ty", int32)
        tx = Var(old.loop_var.name, old.loop_var.dtype)
        index = tx if groups == 1 else binary("add", binary("mul", binary("sub", ty, 1), WARPGROUP), tx)
        body = body_of(ty, lambda stmt: substitute(stmt, {old.loop_var: index}), tx)
        inner = For(tx, IntImm(0, int32), IntImm(WARPGROUP, int32), "thread_binding", body, "threadIdx.x",
                    old.annotations)
        return For(ty, IntImm(0, int32), IntImm(1 + groups, int32), "thread_binding", inner, "threadIdx.y")

    def pipeline(ty, as_consumer, tx):
        produce = substitute(_seq(producer), {tx_loop.loop_var: tx})
        return IfThenElse(binary("eq", ty, 0), produce, as_consumer(_seq(consumer)))

    def budgets(ty, as_consumer, tx):
        assert regs is not None
        return IfThenElse(binary("eq", ty, 0), _setmaxnreg(False, regs[0]), _setmaxnreg(True, regs[1]))

    class Roles(IRMutator):
        def visit_SeqStmt(self, op: SeqStmt) -> Stmt:
            out: list[Stmt] = []
            for s in op.seq:
                new = self.visit(s)
                out.extend(new.seq if isinstance(new, SeqStmt) else (new,))
            return SeqStmt(tuple(out))

        def visit_For(self, op: For) -> Stmt:
            if op is ko and regs is not None:
                return SeqStmt((thread_loops(budgets, tx_loop), self.generic_visit(op)))
            if op is tx_loop:
                return thread_loops(pipeline, op)
            if op.thread_tag == "threadIdx.x":   # the kernel's other thread loops run on the consumers
                return thread_loops(lambda ty, as_consumer, tx: _on(ty, tx, op, as_consumer, groups), op)
            return self.generic_visit(op)

    return Roles().visit(kernel)


def _setmaxnreg(inc: bool, count: int) -> Stmt:
    return Evaluate(Call(int32, SETMAXNREG, (IntImm(int(inc), DataType.parse("bool")), IntImm(count, int32))))


def _seq(stmts: list[Stmt]) -> Stmt:
    return stmts[0] if len(stmts) == 1 else SeqStmt(tuple(stmts))


def _on(ty: Var, tx: Var, old: For, as_consumer, groups: int) -> Stmt:
    """The body of thread loop `old` run by the consumers (ty == 1, or ty >= 1 for several), each
    statement guarded on its own (the barrier planner places a __syncthreads() between
    statements, never inside a thread-dependent branch): ``if c:`` becomes ``if ty == 1 and c:``,
    and a one-thread ``if tx == 0:`` stays the first consumer thread's."""
    out: list[Stmt] = []
    consumers = binary("eq", ty, 1) if groups == 1 else binary("ge", ty, 1)
    body = old.body
    for s in (body.seq if isinstance(body, SeqStmt) else (body,)):
        if isinstance(s, IfThenElse) and s.else_case is None and _is_tx0(s.condition, old.loop_var):
            first = binary("and", binary("eq", ty, 1), binary("eq", tx, 0))
            out.append(IfThenElse(first, as_consumer(s.then_case)))
        elif isinstance(s, IfThenElse) and s.else_case is None:
            out.append(IfThenElse(binary("and", consumers, as_consumer(s.condition)), as_consumer(s.then_case)))
        else:
            out.append(IfThenElse(consumers, as_consumer(s)))
    return out[0] if len(out) == 1 else SeqStmt(tuple(out))
