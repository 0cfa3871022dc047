"""How a huge kernel body is cut into several LLVM functions (issue 22: build time).

LLVM's O3 pipeline and its code emission take more than linear time in the size of one
function (a function of 1,000 small blocks: ~25 s of O3, 2,000: ~100 s, 10,000: more than
10 minutes). When a kernel body's estimated size is past HUGE_BODY, the code generator emits
each top-level statement sequence (one outside every loop: it runs once per call) as calls,
in order, to internal `noinline` functions of about PART_SIZE each (`_Emitter.outlined_call`:
buffers, extents and the variables in scope are passed as arguments, a non-zero return code
is passed on), and compile._compile takes O3 without LLVM's unroller for it (full unrolling
of the parts' small loops made straight-line code whose SLP vectorisation and dead-store
elimination cost 2-5x more than the unsplit function). This module only estimates sizes and
groups statements; it knows nothing of LLVM.
"""
from __future__ import annotations

from ...ir import (
    Allocate,
    Binary,
    Broadcast,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    Evaluate,
    For,
    IfThenElse,
    IntImm,
    LetStmt,
    Not,
    PrimExpr,
    Ramp,
    Select,
    SeqStmt,
    Stmt,
)

# a body estimated past this many IR nodes (~240 small blocks) is split into LLVM functions
HUGE_BODY = 5000
# ... of about this many nodes each (200 blocks, cold, O3 without unrolling: parts of 300 /
# 1,000 / 4,000 nodes 1.2 / 1.1 / 1.6 s of LLVM, one function 1.8 s with O3)
PART_SIZE = 1000
# a group of statements smaller than this between two big ones stays in the calling function
MIN_PART = PART_SIZE // 16
UNROLL_LIMIT = 64   # loops of constant extent up to this the code generator unrolls itself


def expr_size(e: PrimExpr) -> int:
    """The number of nodes of `e` (iteratively: a 3,000-term sum is a deep tree)."""
    count = 0
    stack = [e]
    while stack:
        node = stack.pop()
        count += 1
        if isinstance(node, Binary):
            stack += (node.a, node.b)
        elif isinstance(node, BufferLoad):
            stack += node.indices
        elif isinstance(node, (Cast, Broadcast)):
            stack.append(node.value)
        elif isinstance(node, Call):
            stack += node.args
        elif isinstance(node, Select):
            stack += (node.condition, node.true_value, node.false_value)
        elif isinstance(node, Ramp):
            stack += (node.base, node.stride)
        elif isinstance(node, Not):
            stack.append(node.a)
    return count


class Sizes:
    """Estimated size (IR nodes, about LLVM instructions) of each statement, memoized by
    identity so that asking for every level of a nest costs one walk of it."""

    def __init__(self):
        self._memo: dict[int, tuple[Stmt, int]] = {}

    def __call__(self, s: Stmt) -> int:
        hit = self._memo.get(id(s))
        if hit is not None:
            return hit[1]
        n = self._size(s)
        self._memo[id(s)] = (s, n)
        return n

    def _size(self, s: Stmt) -> int:
        if isinstance(s, SeqStmt):
            return sum(self(x) for x in s.seq)
        if isinstance(s, BufferStore):
            return 1 + expr_size(s.value) + sum(expr_size(i) for i in s.indices)
        if isinstance(s, For):
            body = self(s.body)
            if s.kind == "parallel":
                return 8   # outlined into a function of its own anyway
            if s.kind == "unrolled" and isinstance(s.extent, IntImm) and s.extent.value <= UNROLL_LIMIT:
                body *= max(s.extent.value, 0)
            return 4 + expr_size(s.min) + expr_size(s.extent) + body
        if isinstance(s, LetStmt):
            return 1 + expr_size(s.value) + self(s.body)
        if isinstance(s, IfThenElse):
            return (2 + expr_size(s.condition) + self(s.then_case)
                    + (self(s.else_case) if s.else_case is not None else 0))
        if isinstance(s, Allocate):
            return 4 + self(s.body)
        if isinstance(s, Evaluate):
            return expr_size(s.value)
        return 1


def groups(seq: tuple[Stmt, ...], sizes: Sizes, limit: int) -> list[tuple[bool, list[Stmt]]]:
    """Consecutive runs of `seq`, each (outline, statements): runs to outline hold at most
    `limit` (estimated), a statement bigger than that is a run of its own that stays in place
    (its own sequences are split in turn), as does a small run between two of those."""
    out: list[tuple[bool, list[Stmt]]] = []
    run: list[Stmt] = []
    total = 0

    def flush():
        nonlocal run, total
        if run:
            out.append((total >= MIN_PART, run))
        run, total = [], 0

    for s in seq:
        n = sizes(s)
        if n > limit:
            flush()
            out.append((False, [s]))
            continue
        if total + n > limit:
            flush()
        run.append(s)
        total += n
    flush()
    return out
