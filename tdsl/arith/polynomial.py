"""Index expressions as polynomials over variables (`_polynomial`: +, -, * of variables and
integers as {monomial: coefficient}) and their exact bounds over a box when affine in the box's
variables with size-product coefficients (`_polynomial_bounds`): what the layout primitive
uses to bound a map's outputs over symbolic shapes.
"""
from __future__ import annotations

from ..ir import Binary, IntImm, PrimExpr, Range, Var, const, is_const
from .simplify import simplify


def _polynomial(e: PrimExpr) -> dict[tuple, int] | None:
    """`e` (+, -, * of variables and integers) as {monomial: coefficient}, a monomial being a
    sorted tuple of variables; None for anything else."""
    if isinstance(e, IntImm):
        return {(): e.value} if e.value else {}
    if isinstance(e, Var):
        return {(e,): 1}
    if not (isinstance(e, Binary) and e.op in ("add", "sub", "mul")):
        return None
    a, b = _polynomial(e.a), _polynomial(e.b)
    if a is None or b is None:
        return None
    out: dict[tuple, int] = dict(a)
    if e.op == "mul":
        out = {}
        for ma, ca in a.items():
            for mb, cb in b.items():
                m = tuple(sorted(ma + mb, key=id))
                out[m] = out.get(m, 0) + ca * cb
    else:
        sign = 1 if e.op == "add" else -1
        for m, c in b.items():
            out[m] = out.get(m, 0) + sign * c
    return {m: c for m, c in out.items() if c}


def _polynomial_bounds(e: PrimExpr, ranges: dict[Var, Range], sizes: set) -> tuple[PrimExpr, PrimExpr] | None:
    """(min, max) of `e` over the box `ranges` when `e` is affine in the box's variables with
    coefficients that are sums of products of sizes (`x * 32 * n + y * n + w`: 0 and 32n - 1
    for x < 1, y < 32, w < n); None otherwise (relax then bounds it)."""
    poly = _polynomial(e)
    if poly is None or len(poly) < 2:
        return None
    dt = e.dtype
    lo: PrimExpr = const(0, dt)
    hi: PrimExpr = const(0, dt)
    for mono, c in poly.items():
        box = [v for v in mono if v in ranges]
        if any(v not in ranges and v not in sizes for v in mono) or len(box) > 1:
            return None
        term: PrimExpr = const(c, dt)
        for v in mono:
            if v not in ranges:
                term = term * v
        if not box:
            lo, hi = lo + term, hi + term
            continue
        if c < 0 or not is_const(ranges[box[0]].min, 0):
            return None
        hi = hi + term * (ranges[box[0]].extent - 1)
    return simplify(lo), simplify(hi)


polynomial = _polynomial
polynomial_bounds = _polynomial_bounds
