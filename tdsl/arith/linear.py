"""Linear forms of the analyzer: `Lin` (a constant plus coefficient * `Term`, a term being
`(x // lower) % upper` of a source expression) and the structural keys (`_KEYERS`) that make
equal expressions one term."""
from __future__ import annotations

from ..dtypes import DataType
from ..ir.expr import (
    Binary,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Not,
    PrimExpr,
    Ramp,
    Select,
    StringImm,
    Var,
)
from .bounds import wrap


class Term:
    """`(src // lower) % upper`; upper None means no modulo. `skey` is src's structural key."""

    __slots__ = ("key", "lower", "skey", "src", "upper")

    def __init__(self, src: PrimExpr, skey, lower: int = 1, upper: int | None = None):
        self.src, self.skey, self.lower, self.upper = src, skey, lower, upper
        self.key = skey if lower == 1 and upper is None else ("split", skey, lower, upper)

    @property
    def plain(self) -> bool:
        return self.lower == 1 and self.upper is None

    def expr(self) -> PrimExpr:
        dt = self.src.dtype
        if self.plain:
            return self.src
        if self.upper is None:
            return Binary("floordiv", self.src, IntImm(self.lower, dt))
        mod = Binary("floormod", self.src, IntImm(wrap(self.lower * self.upper, dt), dt))
        return mod if self.lower == 1 else Binary("floordiv", mod, IntImm(self.lower, dt))


class Lin:
    """const + sum(coeff * term); `terms` maps term key -> (Term, coeff), in first-seen order."""

    __slots__ = ("const", "dtype", "terms")

    def __init__(self, terms: dict, const: int, dtype: DataType):
        self.terms, self.const, self.dtype = terms, const, dtype

    @property
    def is_const(self) -> bool:
        return not self.terms

    def single(self) -> Term | None:
        """The term when this is exactly 1 * term."""
        if self.const == 0 and len(self.terms) == 1:
            (term, coeff), = self.terms.values()
            if coeff == 1:
                return term
        return None


def _lin_const(value: int, dt: DataType) -> Lin:
    return Lin({}, value, dt)


def _lin_term(term: Term, dt: DataType, coeff: int = 1) -> Lin:
    return Lin({term.key: (term, coeff)}, 0, dt)


def _scale_lin(a: Lin, c: int) -> Lin:
    if c == 0:
        return Lin({}, 0, a.dtype)
    if c == 1:
        return a
    return Lin({k: (t, v * c) for k, (t, v) in a.terms.items()}, a.const * c, a.dtype)


# structural keys: equal keys <=> structurally identical expressions (Vars and buffers by identity);
# node class -> its key from its children's keys (other nodes: by identity, ("obj", id)). A dtype
# enters as (code, bits, lanes): a DataType's own hash is Python code, run at every lookup.

def _dt(dt: DataType) -> tuple:
    return dt.code, dt.bits, dt.lanes


_KEYERS = {
    Binary: lambda e, key: (e.op, key(e.a), key(e.b)),
    Var: lambda e, key: ("v", id(e)),
    IntImm: lambda e, key: ("i", e.value, _dt(e.dtype)),
    FloatImm: lambda e, key: ("f", repr(e.value), _dt(e.dtype)),
    BufferLoad: lambda e, key: ("ld", id(e.buffer)) + tuple(key(i) for i in e.indices),
    Cast: lambda e, key: ("cast", _dt(e.dtype), key(e.value)),
    Call: lambda e, key: ("call", e.op, _dt(e.dtype)) + tuple(key(a) for a in e.args),
    Select: lambda e, key: ("sel", key(e.condition), key(e.true_value), key(e.false_value)),
    Not: lambda e, key: ("not", key(e.a)),
    Ramp: lambda e, key: ("ramp", key(e.base), key(e.stride), e.lanes),
    Broadcast: lambda e, key: ("bcast", key(e.value), e.lanes),
    StringImm: lambda e, key: ("s", e.value),
}


def _maybe_same(a: PrimExpr, b: PrimExpr) -> bool:
    """False when `a` and `b` surely differ in structure (a different class or operator), which
    saves comparing their structural keys (each a walk of the whole expression)."""
    if type(a) is not type(b):
        return False
    return type(a) is not Binary or a.op == b.op  # type: ignore[attr-defined]


def _int_scalar(e: PrimExpr) -> bool:
    dt = e.dtype
    return dt.lanes == 1 and (dt.is_integer or dt.is_bool)
