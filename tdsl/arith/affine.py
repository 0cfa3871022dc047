"""Exact bounds of affine indices over loop variables whose ranges may be expressions of
symbolic sizes (`_affine`), and which expressions are over sizes only (`_over`): the analysis
behind the LLVM build's static bounds check (backends/llvm/bounds.py).

A bound is exact for every value of the sizes: a constant plus (coefficient, size expression)
terms; a Ramp's lanes enter as a variable of range [0, lanes - 1].
"""
from __future__ import annotations

from ..ir import Binary, Broadcast, Cast, IntImm, Ramp, Var
from ..ir.functor import IRVisitor, free_vars

# A bound is (constant, ((coefficient, expression over sizes), ...)): exact for every size.
Bound = tuple[int, tuple]


def _affine(e, ranges: dict, sizes: frozenset = frozenset()) -> tuple[Bound, Bound] | None:
    """The exact [lo, hi] of an index affine in loop variables (whose bounds may be expressions
    of the symbolic `sizes`), or None when it is not affine in variables of known range."""
    ranges = dict(ranges)
    terms = _linear(e, ranges, sizes)
    if terms is None:
        return None
    const, coeffs = terms
    lo: list = []
    hi: list = []
    lo_c = hi_c = const
    for var, c in coeffs.items():
        if var in ranges:
            vlo, vhi = ranges[var]
            small, big = (vlo, vhi) if c > 0 else (vhi, vlo)
        elif not isinstance(var, Var) or var in sizes:
            small = big = var
        else:
            return None
        for side, value in ((lo, small), (hi, big)):
            if isinstance(value, int):
                if side is lo:
                    lo_c += c * value
                else:
                    hi_c += c * value
            else:
                side.append((c, value))
    return (lo_c, tuple(lo)), (hi_c, tuple(hi))


def _linear(e, ranges: dict, sizes: frozenset = frozenset()) -> tuple[int, dict] | None:
    """(constant, {var or size expression: coefficient}); a Ramp adds a lane variable to `ranges`."""
    if isinstance(e, IntImm):
        return e.value, {}
    if isinstance(e, Var):
        return 0, {e: 1}
    if isinstance(e, Cast) and e.dtype.is_integer and e.value.dtype.is_integer:
        return _linear(e.value, ranges, sizes)
    if isinstance(e, Ramp) and isinstance(e.stride, IntImm):
        base = _linear(e.base, ranges, sizes)
        if base is None:
            return None
        lane = Var("lane")
        c, co = base
        co = dict(co)
        co[lane] = e.stride.value
        ranges[lane] = (0, e.lanes - 1)
        return c, co
    if isinstance(e, Broadcast):
        return _linear(e.value, ranges, sizes)
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul"):
        a, b = _linear(e.a, ranges, sizes), _linear(e.b, ranges, sizes)
        if a is not None and b is not None:
            if e.op == "mul":
                if a[1] and b[1]:
                    return _size_term(e, sizes)
                k, (c, co) = (a[0], b) if not a[1] else (b[0], a)
                return k * c, {v: k * x for v, x in co.items()}
            sign = 1 if e.op == "add" else -1
            co = dict(a[1])
            for v, x in b[1].items():
                co[v] = co.get(v, 0) + sign * x
            return a[0] + sign * b[0], co
    return _size_term(e, sizes)


def _size_term(e, sizes: frozenset) -> tuple[int, dict] | None:
    """An integer expression of sizes only (`n * m`, `(n + 3) // 4`) as one term of its own."""
    if sizes and e.dtype.is_integer and e.dtype.lanes == 1 and _over(e, sizes):
        return 0, {e: 1}
    return None


def _over(e, sizes: frozenset) -> bool:
    try:
        used = free_vars(e)
    except Exception:   # noqa: BLE001 - a node the finder does not know: not a size expression
        return False
    return bool(used) and used <= sizes and not _has_load(e)


def _has_load(e) -> bool:
    found = []

    class _Loads(IRVisitor):
        def visit_BufferLoad(self, node):
            found.append(node)

        def visit_Call(self, node):
            found.append(node)

    _Loads().visit(e)
    return bool(found)


# sizes tried for each symbolic dimension, smallest first: the first failing one is reported


affine_bounds = _affine
over_sizes = _over
