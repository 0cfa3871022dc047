"""Warpgroup roles as separate code paths: the CUDA form of a warp-specialized kernel.

A warp-specialized kernel (`sch.warp_specialize`) says at its top which warpgroups give up
registers and which take them: ``if ty == 0: T.ptx_setmaxnreg(False, 40) else:
T.ptx_setmaxnreg(True, 232)``. Its roles are branches on ``ty`` inside the K loop and around the
epilogue, which one thread runs one after another; compiled that way, every register the
consumers keep (the accumulators) is live in the producer's path too, so ptxas cannot give the
producer 40 registers: it ignores setmaxnreg ("C7507 ... 'setmaxnreg' ignored to maintain
minimum register requirements") and serializes wgmma in the divergent path (C7518).
`split_roles` therefore rewrites the statements after that branch into one copy per role, each
with the conditions on ``ty`` decided for that role (a thread runs exactly what it ran before), up to the
next ``__syncthreads()`` of the whole block (the statements after it stay common)::

    if ty == 0: dec<40> else: inc<232>          if ty == 0:
    for ko: if ty == 0: P else: C        ->         dec<40>; for ko: P
    if ty >= 1: E                                else:
                                                    inc<232>; for ko: C; E

and checks the register budget: a kernel with setmaxnreg gets from ptxas the most registers its
``__launch_bounds__(threads)`` allow, ``R = 65536 / threads`` rounded down to a multiple of 8 (at
most 255: 168 for 384 threads), and the CTA's pool is R x threads; a `dec` count must be at most
R, an `inc` count at least R, and the roles' counts x their threads must fit the pool.
"""
from __future__ import annotations

from dataclasses import replace

from ...errors import TargetError
from ...ir import Allocate, Binary, Call, Evaluate, IfThenElse, IntImm, IRMutator, LetStmt, Not, SeqStmt, Stmt, Var
from ...ir.opaque_calls import SETMAXNREG, launch_registers
from .plan import KernelSpec


def budget_problem(threads_by_count: list[tuple[bool, int, int]], threads: int) -> str | None:
    """Why the setmaxnreg counts [(inc, count, threads running it)] of a kernel of `threads`
    threads cannot all be granted (see the module docstring); None when they fit."""
    r = launch_registers(threads)
    for inc, count, _ in threads_by_count:
        if inc and count < r:
            return (f"setmaxnreg.inc to {count} registers is below the {r} per thread the kernel starts with "
                    f"(65536 registers per SM / {threads} threads, a multiple of 8): .inc must raise it")
        if not inc and count > r:
            return (f"setmaxnreg.dec to {count} registers is above the {r} per thread the kernel starts with "
                    f"(65536 registers per SM / {threads} threads, a multiple of 8): .dec must lower it")
    total = sum(count * n for _, count, n in threads_by_count)
    if total > r * threads:
        parts = " + ".join(f"{n} threads x {count}" for _, count, n in threads_by_count)
        return (f"the warpgroups' registers after setmaxnreg, {parts} = {total}, exceed the CTA's pool of "
                f"{threads} threads x {r} = {r * threads}")
    return None


def _setmaxnreg(stmt: Stmt | None) -> tuple[bool, int] | None:
    if isinstance(stmt, Evaluate) and isinstance(stmt.value, Call) and stmt.value.op == SETMAXNREG:
        inc, count = stmt.value.args
        return bool(inc.value), int(count.value)   # type: ignore[attr-defined]
    return None


def _role_branch(stmt: Stmt, ty: Var) -> bool:
    return (isinstance(stmt, IfThenElse) and _setmaxnreg(stmt.then_case) is not None
            and _setmaxnreg(stmt.else_case) is not None and _decide(stmt.condition, ty, 0, 0) is not None)


_COMPARE = {"eq": lambda x, c: x == c, "ne": lambda x, c: x != c, "lt": lambda x, c: x < c,
            "le": lambda x, c: x <= c, "gt": lambda x, c: x > c, "ge": lambda x, c: x >= c}
_FLIP = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def _decide(cond, ty: Var, lo: int, hi: int) -> bool | None:
    """The value of `cond` for every ty in [lo, hi], or None when it depends on more than that."""
    if isinstance(cond, IntImm):
        return bool(cond.value)
    if isinstance(cond, Not):
        v = _decide(cond.a, ty, lo, hi)
        return None if v is None else not v
    if not isinstance(cond, Binary):
        return None
    if cond.op in ("and", "or"):
        da, db = _decide(cond.a, ty, lo, hi), _decide(cond.b, ty, lo, hi)
        if cond.op == "and":
            return False if False in (da, db) else (True if da is True and db is True else None)
        return True if True in (da, db) else (False if da is False and db is False else None)
    op, x, c = cond.op, cond.a, cond.b
    if op not in _COMPARE:
        return None
    if c is ty and isinstance(x, IntImm):
        op, x, c = _FLIP[op], c, x
    if not (x is ty and isinstance(c, IntImm)):
        return None
    values = {_COMPARE[op](v, c.value) for v in range(lo, hi + 1)}
    return values.pop() if len(values) == 1 else None


class _Specialize(IRMutator):
    """The statements one role runs: conditions decided by ty in [lo, hi] folded away."""

    def __init__(self, ty: Var, lo: int, hi: int):
        self.ty, self.lo, self.hi = ty, lo, hi

    def visit_IfThenElse(self, s: IfThenElse) -> Stmt:
        v = _decide(s.condition, self.ty, self.lo, self.hi)
        if v is None:
            cond = self._fold(s.condition)
            then = self.visit(s.then_case)
            other = self.visit(s.else_case) if s.else_case is not None else None
            return replace(s, condition=cond, then_case=then, else_case=other)
        branch = s.then_case if v else s.else_case
        return self.visit(branch) if branch is not None else Evaluate(IntImm(0, self.ty.dtype))

    def _fold(self, cond):
        """`a and b` with a decided conjunct: the other one."""
        if isinstance(cond, Binary) and cond.op == "and":
            a, b = (_decide(x, self.ty, self.lo, self.hi) for x in (cond.a, cond.b))
            if a is True:
                return self._fold(cond.b)
            if b is True:
                return self._fold(cond.a)
        return cond


def _is_sync(stmt: Stmt) -> bool:
    return isinstance(stmt, Evaluate) and isinstance(stmt.value, Call) and stmt.value.op == "__syncthreads"


def _seq(stmts: list[Stmt]) -> Stmt:
    flat: list[Stmt] = []
    for s in stmts:
        flat.extend(s.seq if isinstance(s, SeqStmt) else (s,))
    flat = [s for s in flat if not (isinstance(s, Evaluate) and isinstance(s.value, IntImm))] or flat[:1]
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))


def split_roles(spec: KernelSpec) -> bool:
    """Rewrite `spec.body` into one code path per role after its setmaxnreg branch (module
    docstring); TargetError when the register counts cannot be granted. False (nothing done)
    for a kernel without such a branch."""
    ty = spec.tag_vars.get("threadIdx.y")
    ny, nx = spec.launch.get("threadIdx.y"), spec.launch.get("threadIdx.x")
    if ty is None or not isinstance(ny, IntImm) or not isinstance(nx, IntImm):
        return False
    nz = spec.launch.get("threadIdx.z")
    if nz is not None and not (isinstance(nz, IntImm) and nz.value == 1):
        return False

    def walk(stmt: Stmt) -> Stmt | None:
        if isinstance(stmt, (Allocate, LetStmt)):
            inner = walk(stmt.body)
            return None if inner is None else replace(stmt, body=inner)
        items = list(stmt.seq) if isinstance(stmt, SeqStmt) else [stmt]
        at = next((i for i, s in enumerate(items) if _role_branch(s, ty)), None)
        if at is None:
            return None
        branch = items[at]
        assert isinstance(branch, IfThenElse) and branch.else_case is not None
        while at + 1 < len(items) and _is_sync(items[at + 1]):   # (setmaxnreg touches no memory: the
            items[at], items[at + 1] = items[at + 1], items[at]   # block's barriers stay outside the roles)
            at += 1
        # the roles' paths run to the next barrier of the whole block (the epilogue's before a TMA
        # store of the output): the statements after it stay common, with their conditions
        end = next((i for i in range(at + 1, len(items)) if _is_sync(items[i])), len(items))
        rest = _seq(items[at + 1:end]) if at + 1 < end else None
        takes = [y for y in range(ny.value) if _decide(branch.condition, ty, y, y)]
        others = [y for y in range(ny.value) if y not in takes]
        _check_budget(spec, branch, len(takes) * nx.value, len(others) * nx.value, nx.value * ny.value)
        paths = []
        for case, ys in ((branch.then_case, takes), (branch.else_case, others)):
            body = [case]
            if rest is not None and ys:
                body.append(_Specialize(ty, min(ys), max(ys)).visit(rest) if ys == list(range(min(ys), max(ys) + 1))
                            else rest)
            paths.append(_seq(body))
        return _seq([*items[:at], replace(branch, then_case=paths[0], else_case=paths[1]), *items[end:]])

    new = walk(spec.body)
    if new is None:
        return False
    spec.body = new
    return True


def _check_budget(spec: KernelSpec, branch: IfThenElse, n_then: int, n_else: int, threads: int) -> None:
    (inc_t, count_t), (inc_e, count_e) = _setmaxnreg(branch.then_case), _setmaxnreg(branch.else_case)  # type: ignore[misc]
    why = budget_problem([(inc_t, count_t, n_then), (inc_e, count_e, n_else)], threads)
    if why is not None:
        raise TargetError(f"kernel {spec.name!r}: {why}; pick counts that fit (e.g. 40 for a producer warpgroup and "
                          f"232 for two consumer warpgroups of a 384-thread kernel, as CUTLASS does)")
