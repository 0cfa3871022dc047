"""The floating-point operations of a function, counted on its unscheduled form.

Each arithmetic operation on floats in a block's body (not its init) counts one (a GEMM's
`C + A * B` is two per iteration: 2 m n k in all), each math call (exp, sqrt, ...) one, times
the iterations of the loops around the block. None when a loop extent is symbolic or there is
no float arithmetic (then GFLOP/s is not reported).
"""
from __future__ import annotations

from ..ir import ARITH_OPS, Binary, BlockRealize, BufferLoad, Call, Cast, For, IntImm, PrimFunc, Select
from ..ir.tree import walk as statements


def _ops(expr) -> int:
    count, stack = 0, [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Binary):
            if node.op in ARITH_OPS and node.a.dtype.is_float:
                count += node.dtype.lanes
            stack += (node.a, node.b)
        elif isinstance(node, Call):
            count += 1 if node.dtype.is_float else 0
            stack += node.args
        elif isinstance(node, Cast):
            stack.append(node.value)
        elif isinstance(node, Select):
            stack += (node.condition, node.true_value, node.false_value)
        elif isinstance(node, BufferLoad):
            stack += node.indices
    return count


def _body_ops(stmt) -> int:
    from ..ir import BufferStore, Evaluate

    total = 0
    for node in statements(stmt, descend=lambda s: not isinstance(s, BlockRealize)):
        if isinstance(node, (BufferStore, Evaluate)):
            total += _ops(node.value)
    return total


def flop_count(func: PrimFunc) -> int | None:
    """Float operations of one call of `func` (see the module docstring), or None."""
    total = 0

    def walk(stmt, trips: int) -> bool:
        nonlocal total
        if isinstance(stmt, For):
            if not isinstance(stmt.extent, IntImm):
                return False
            return walk(stmt.body, trips * stmt.extent.value)
        if isinstance(stmt, BlockRealize):
            block = stmt.block
            if block.name != "root":
                total += trips * _body_ops(block.body)
            return walk(block.body, trips)
        for name in ("seq", "body", "then_case", "else_case"):
            child = getattr(stmt, name, None)
            for c in child if isinstance(child, tuple) else (child,):
                if c is not None and not walk(c, trips):
                    return False
        return True

    if not walk(func.body, 1):
        return None
    return total or None
