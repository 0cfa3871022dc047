"""simplify / const_bound / prove: the public face of the analyzer."""
from __future__ import annotations

from ..ir.expr import PrimExpr, as_expr
from .analyzer import Analyzer, Bound

_SHARED_LIMIT = 200_000
_shared: Analyzer | None = None


def analyzer(ranges: dict | None = None) -> Analyzer:
    """An analyzer for `ranges`; without ranges one shared, memoizing instance (reset when large)."""
    global _shared
    if ranges:
        return Analyzer(ranges)
    if _shared is None or len(_shared._keys) + len(_shared._lins) > _SHARED_LIMIT:
        _shared = Analyzer()
    return _shared


def simplify(expr: PrimExpr, ranges: dict | None = None) -> PrimExpr:
    """An expression equal to `expr` for every assignment of the Vars within `ranges`
    (Var -> Range), in canonical form: constants folded, like terms collected, floor
    division/modulo by constants resolved where bounds allow, decided comparisons folded.

    Constant folding wraps around per dtype; reasoning with bounds assumes that index
    arithmetic does not overflow (as TVM does)."""
    return analyzer(ranges).simplify(as_expr(expr))


def const_bound(expr: PrimExpr, ranges: dict | None = None) -> Bound:
    """Inclusive integer bounds (lo, hi) of `expr`; None where unbounded."""
    return analyzer(ranges).bound(as_expr(expr))


def prove(cond: PrimExpr, ranges: dict | None = None) -> bool:
    """True only when `cond` holds for every assignment of the Vars within `ranges`."""
    return analyzer(ranges).prove(as_expr(cond))
