"""Invert the indices a consumer reads its producer's buffer at (for reverse_compute_inline).

A consumer reading `B[f(v)]` can be folded into the producer of `B` when `f` is one-to-one: each
element `e` the producer writes then names at most one consumer instance `v = g(e)`. `f` is
accepted when each index is a digit of a mixed-radix number of the consumer's iterators, the
forms TensorIR's affine maps take after split / fuse / transform_layout:

- `vi` (the iterator itself), `vi * 16 + vj` with `vj` over 16 values (a fused index);
- `vi // 16`, `vi % 16` (the digits of a split iterator, each in its own dimension);
- `(((vi * 32 + vj) * 8 + vk) * 8 + vl) // 128` and `... % 128` (a fused number split again).

Every iterator appears in exactly one such number (an iterator over one value may be absent); a
constant index (`B[0, vi]`) pins its dimension.
`guards` says which elements `e` stand for a consumer instance: the rebuilt iterators lie in their
domains, and reading back `f(g(e))` gives `e` (automatic when each digit index stays below its
radix). reverse_compute_inline puts the guards that it cannot prove into the producer's predicate,
so that an over-computing producer only stores the consumer's elements (TVM's rule).
"""
from __future__ import annotations

import dataclasses
import itertools

from ...arith import linear_form, prove, simplify
from ...ir import Binary, Block, IntImm, PrimExpr, Range, Var, const, free_vars, substitute
from . import same_width


@dataclasses.dataclass(frozen=True)
class _Number:
    """A mixed-radix number `sum(coeff * iterator) + offset` and the dimensions holding its
    digits: (dimension, step, radix) with index = (number // step) % radix (radix None: none)."""
    coeffs: tuple[tuple[Var, int], ...]
    offset: int
    digits: tuple[tuple[int, int, int | None], ...]


def _peel(index: PrimExpr) -> tuple[PrimExpr, int, int | None] | None:
    """index == (inner // step) % radix with inner free of floor division: (inner, step, radix)."""
    if isinstance(index, Binary) and index.op in ("floordiv", "floormod") and isinstance(index.b, IntImm) \
            and index.b.value > 0:
        inner = _peel(index.a)
        if inner is None:
            return None
        e, step, radix = inner
        c = index.b.value
        if radix is not None and radix % c != 0:
            return None  # a digit straddling the period of the inner modulo
        if index.op == "floordiv":
            return e, step * c, None if radix is None else radix // c
        return e, step, c
    return index, 1, None


def _numbers(indices: list[PrimExpr], block: Block) -> list[_Number] | None:
    doms = {iv.var: iv.dom for iv in block.iter_vars}
    found: dict[tuple, list[tuple[int, int, int | None]]] = {}
    for d, index in enumerate(indices):
        peeled = _peel(index)
        if peeled is None:
            return None
        inner, step, radix = peeled
        form = linear_form(inner, list(doms))
        offset = None if form is None else simplify(form[1])
        if form is None or not isinstance(offset, IntImm):
            return None
        coeffs = tuple(sorted(((v, c) for v, c in form[0].items() if c != 0), key=lambda t: t[1]))
        if not coeffs:
            continue  # a constant index names no iterator (ReadInverse.guards pins it)
        key = (coeffs, offset.value)
        found.setdefault(key, []).append((d, step, radix))
    return [_Number(coeffs, offset, tuple(sorted(digits, key=lambda t: t[1])))
            for (coeffs, offset), digits in found.items()]


def _complete(number: _Number, doms) -> bool:
    """The digits spell the number out once (steps 1, r0, r0*r1, ..., no modulo on the last) and
    the terms are a mixed-radix number of iterators from 0 (coefficients 1, n0, n0*n1, ...)."""
    digits = number.digits
    if digits[0][1] != 1 or digits[-1][2] is not None:
        return False
    if not all(r is not None and s * r == nxt for (_, s, r), (_, nxt, _) in itertools.pairwise(digits)):
        return False
    expect = 1
    for n, (v, c) in enumerate(number.coeffs):
        dom = doms[v]
        top = n == len(number.coeffs) - 1
        if c != expect or not (isinstance(dom.min, IntImm) and dom.min.value == 0):
            return False
        if not top:
            if not isinstance(dom.extent, IntImm):
                return False
            expect = c * dom.extent.value
    return True


@dataclasses.dataclass
class ReadInverse:
    """g: the consumer's iterators from a buffer element, and the guards on that element."""
    block: Block
    indices: list[PrimExpr]
    numbers: list[_Number]

    def iterators(self, element: list[PrimExpr]) -> dict[Var, PrimExpr]:
        """{iterator: its value} for the consumer instance that reads `element`."""
        out: dict[Var, PrimExpr] = {}
        for num in self.numbers:
            dt = element[num.digits[0][0]].dtype
            total: PrimExpr = const(0, dt)
            for d, step, _ in num.digits:
                total = total + (element[d] if step == 1 else element[d] * const(step, dt))
            if num.offset:
                total = total - const(num.offset, dt)
            for n, (v, c) in enumerate(num.coeffs):
                x = total if c == 1 else total // const(c, dt)
                if n < len(num.coeffs) - 1:
                    x = x % const(self.extent(v), dt)
                out[v] = simplify(x)
        for iv in self.block.iter_vars:
            out.setdefault(iv.var, iv.dom.min)  # an iterator over one value
        return out

    def extent(self, v: Var) -> int:
        dom = next(iv.dom for iv in self.block.iter_vars if iv.var is v)
        assert isinstance(dom.extent, IntImm)
        return dom.extent.value

    def guards(self, element: list[PrimExpr], ranges: dict[Var, Range]) -> list[PrimExpr]:
        """The conditions, not provable within `ranges`, under which `element` is what the
        consumer instance `iterators(element)` reads."""
        vmap = self.iterators(element)
        out: list[PrimExpr] = []
        for iv in self.block.iter_vars:
            x, lo = same_width(vmap[iv.var], iv.dom.min)
            _, end = same_width(x, simplify(iv.dom.min + iv.dom.extent))
            for cond in (x >= lo, x < end):
                if not prove(cond, ranges):
                    out.append(simplify(cond, ranges))
        for d, index in enumerate(self.indices):
            if not free_vars(index) and not prove(element[d].eq(index), ranges):
                out.append(simplify(element[d].eq(index), ranges))
        for num in self.numbers:
            in_radix = all(prove(element[d] >= 0, ranges) and (r is None or prove(element[d] < r, ranges))
                           for d, _, r in num.digits)
            if in_radix:
                continue  # the digits rebuild the number exactly, and the number its digits
            for d, _, _ in num.digits:
                back = substitute(self.indices[d], vmap)
                if not prove(back.eq(element[d]), ranges):
                    out.append(simplify(back.eq(element[d]), ranges))
        return out


def instance_spans(inverse: ReadInverse, box: list[tuple[PrimExpr, PrimExpr]],
                   ranges: dict[Var, Range]) -> dict[Var, tuple[PrimExpr, PrimExpr]]:
    """Per iterator, an inclusive (lo, hi) holding every instance that reads an element of `box`
    (one (lo, hi) per buffer dimension). Digits are taken from the most significant down while
    the box pins them; the first one with a range gives whole periods below it, and the same for
    the iterators of the number (a superset when the box is not aligned: the caller checks)."""
    out: dict[Var, tuple[PrimExpr, PrimExpr]] = {}
    for num in inverse.numbers:
        dt = box[num.digits[0][0]][0].dtype
        lo: PrimExpr = const(-num.offset, dt)
        hi: PrimExpr = const(-num.offset, dt)
        for d, step, _ in sorted(num.digits, key=lambda t: -t[1]):
            dlo, dhi = box[d]
            lo, hi = lo + dlo * step, hi + dhi * step
            if not prove(dlo.eq(dhi), ranges):
                hi = hi + (step - 1)
                break
        lo, hi = simplify(lo, ranges), simplify(hi, ranges)
        pinned = True  # every iterator above is one value: this one's range does not wrap
        for v, c in sorted(num.coeffs, key=lambda t: -t[1]):
            top = v is num.coeffs[-1][0]
            if not pinned:
                out[v] = (const(0, dt), const(inverse.extent(v) - 1, dt))
                continue
            vlo, vhi = (lo, hi) if c == 1 else (lo // c, hi // c)
            if not top:
                vlo, vhi = vlo % inverse.extent(v), vhi % inverse.extent(v)
            out[v] = (simplify(vlo, ranges), simplify(vhi, ranges))
            pinned = prove(out[v][0].eq(out[v][1]), ranges)
    return out


def read_inverse(indices: list[PrimExpr], block: Block) -> ReadInverse | None:
    """The inverse of the read `B[indices]` in `block` over its iterators, or None when the
    indices are not digits of mixed-radix numbers of them, each iterator in one number."""
    doms = {iv.var: iv.dom for iv in block.iter_vars}
    numbers = _numbers(indices, block)
    if numbers is None or not all(_complete(n, doms) for n in numbers):
        return None
    seen = [v for n in numbers for v, _ in n.coeffs]
    if len(seen) != len(set(seen)):
        return None
    for iv in block.iter_vars:
        if iv.var not in seen and not (isinstance(iv.dom.extent, IntImm) and iv.dom.extent.value == 1):
            return None
    return ReadInverse(block, list(indices), numbers)
