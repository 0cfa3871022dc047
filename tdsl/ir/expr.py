"""Expression nodes. Frozen, slotted, compared by identity; `structural_equal` compares meaning.

Python operators build nodes (`i * 32 + j`), converting Python numbers to immediates of the
other operand's dtype. `==` keeps Python identity semantics (nodes are dict keys); use
`.eq()` / `.ne()` to build comparisons.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..dtypes import DataType, bool_, float32, int32

if TYPE_CHECKING:
    from ..errors import Span
    from .buffer import Buffer

ARITH_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max")
COMPARE_OPS = ("eq", "ne", "lt", "le", "gt", "ge")
LOGIC_OPS = ("and", "or")
# integer bit operations (TVM's names); &, |, ^ also take bools. `~a` is `a ^ all_ones(dtype)`
# (see `bitwise_not`), so every layer handles five binary ops and no unary one.
BITWISE_OPS = ("bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right")
SHIFT_OPS = ("shift_left", "shift_right")
BIT_SYMBOLS = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "shift_left": "<<", "shift_right": ">>"}
BINARY_OPS = ARITH_OPS + COMPARE_OPS + LOGIC_OPS + BITWISE_OPS

# Pure math calls: name -> number of arguments. Result dtype = first argument's dtype.
MATH_CALLS = {
    "exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1, "sigmoid": 1, "erf": 1, "abs": 1,
    "floor": 1, "ceil": 1, "pow": 2, "exp2": 1, "log2": 1, "sin": 1, "cos": 1, "round": 1,
    "trunc": 1, "fma": 3,
}


class Node:
    """Base of every IR node; `span` (the user's source place) never takes part in equality."""

    __slots__ = ()

    def same_as(self, other) -> bool:
        """TVM's identity test: the same node object (tdsl.structural_equal compares meaning)."""
        return self is other


class PrimExpr(Node):
    """A typed scalar or vector expression."""

    __slots__ = ()
    dtype: DataType

    # arithmetic sugar -------------------------------------------------------
    def __add__(self, o):
        return binary("add", self, o)

    def __radd__(self, o):
        return binary("add", o, self)

    def __sub__(self, o):
        return binary("sub", self, o)

    def __rsub__(self, o):
        return binary("sub", o, self)

    def __mul__(self, o):
        return binary("mul", self, o)

    def __rmul__(self, o):
        return binary("mul", o, self)

    def __truediv__(self, o):
        return binary("div", self, o)

    def __rtruediv__(self, o):
        return binary("div", o, self)

    def __floordiv__(self, o):
        return binary("floordiv", self, o)

    def __rfloordiv__(self, o):
        return binary("floordiv", o, self)

    def __mod__(self, o):
        return binary("floormod", self, o)

    def __rmod__(self, o):
        return binary("floormod", o, self)

    def __neg__(self):
        return binary("sub", const(0, self.dtype), self)

    def __and__(self, o):
        return binary("bitwise_and", self, o)

    def __rand__(self, o):
        return binary("bitwise_and", o, self)

    def __or__(self, o):
        return binary("bitwise_or", self, o)

    def __ror__(self, o):
        return binary("bitwise_or", o, self)

    def __xor__(self, o):
        return binary("bitwise_xor", self, o)

    def __rxor__(self, o):
        return binary("bitwise_xor", o, self)

    def __lshift__(self, o):
        return binary("shift_left", self, o)

    def __rlshift__(self, o):
        return binary("shift_left", o, self)

    def __rshift__(self, o):
        return binary("shift_right", self, o)

    def __rrshift__(self, o):
        return binary("shift_right", o, self)

    def __invert__(self):
        return bitwise_not(self)

    def __lt__(self, o):
        return binary("lt", self, o)

    def __le__(self, o):
        return binary("le", self, o)

    def __gt__(self, o):
        return binary("gt", self, o)

    def __ge__(self, o):
        return binary("ge", self, o)

    def eq(self, o):
        return binary("eq", self, o)

    def ne(self, o):
        return binary("ne", self, o)

    def __bool__(self):
        raise TypeError("an IR expression has no truth value; use tdsl.arith to prove facts about it")

    __hash__ = object.__hash__


def _span_field():
    return field(default=None, kw_only=True, compare=False, repr=False)


@dataclass(frozen=True, slots=True, eq=False)
class Var(PrimExpr):
    """A variable: loop variable, block iterator, symbolic dimension, scalar parameter, let name."""

    name: str
    dtype: DataType = int32
    span: Span | None = _span_field()

    def __repr__(self) -> str:
        return f"Var({self.name!r}, {self.dtype})"

    @property
    def ty(self) -> Var:
        """TVM's type of the variable (`i.ty.dtype`): a tdsl Var carries its dtype itself."""
        return self


@dataclass(frozen=True, slots=True, eq=False)
class IntImm(PrimExpr):
    """An integer or boolean constant."""

    value: int
    dtype: DataType = int32
    span: Span | None = _span_field()


@dataclass(frozen=True, slots=True, eq=False)
class FloatImm(PrimExpr):
    """A floating-point constant (inf and nan allowed)."""

    value: float
    dtype: DataType = float32
    span: Span | None = _span_field()


@dataclass(frozen=True, slots=True, eq=False)
class StringImm(PrimExpr):
    """A string argument of an extern call (e.g. a CUDA layout name)."""

    value: str
    dtype: DataType = DataType("handle", 64)
    span: Span | None = _span_field()


class _DtypeSlot(PrimExpr):
    """A slot for a dtype computed once at construction (not a dataclass field: equality,
    hashing, printing and rebuilding see only the fields)."""

    __slots__ = ("_dtype",)
    _dtype: DataType


@dataclass(frozen=True, slots=True, eq=False)
class Binary(_DtypeSlot):
    """`a op b` for op in BINARY_OPS; comparisons give bool, the rest the operands' dtype."""

    op: str
    a: PrimExpr
    b: PrimExpr
    span: Span | None = _span_field()

    def __post_init__(self):
        if self.op not in BINARY_OPS:
            raise ValueError(f"unknown binary op {self.op!r}")
        dtype = self.a.dtype
        if dtype != self.b.dtype:
            raise TypeError(f"operands of {self.op} differ in dtype: {dtype} and {self.b.dtype}")
        if self.op in BITWISE_OPS and not (dtype.is_integer or (dtype.is_bool and self.op not in SHIFT_OPS)):
            raise TypeError(f"{self.op} needs integer operands{'' if self.op in SHIFT_OPS else ' (or bool)'}, "
                            f"not {dtype}")
        # computed once: asking the operand chain each time made a 3,000-term sum quadratic
        object.__setattr__(self, "_dtype", bool_.with_lanes(dtype.lanes) if self.op in COMPARE_OPS else dtype)

    @property
    def dtype(self) -> DataType:
        try:
            return self._dtype
        except AttributeError:   # unpickled or copied: the state holds the fields only
            self.__post_init__()
            return self._dtype


@dataclass(frozen=True, slots=True, eq=False)
class Not(PrimExpr):
    a: PrimExpr
    span: Span | None = _span_field()

    @property
    def dtype(self) -> DataType:
        return self.a.dtype


@dataclass(frozen=True, slots=True, eq=False)
class Select(PrimExpr):
    """Both branches evaluated, one chosen (T.Select). See Call("if_then_else") for the lazy form."""

    condition: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr
    span: Span | None = _span_field()

    @property
    def dtype(self) -> DataType:
        return self.true_value.dtype


@dataclass(frozen=True, slots=True, eq=False)
class Cast(PrimExpr):
    dtype: DataType
    value: PrimExpr
    span: Span | None = _span_field()


@dataclass(frozen=True, slots=True, eq=False)
class Call(PrimExpr):
    """A call: math functions (MATH_CALLS), "if_then_else" (lazy select), or an extern/intrinsic
    name used by tensor intrinsic implementations (e.g. "llvm.x86.avx512.vpdpbusd.512")."""

    dtype: DataType
    op: str
    args: tuple[PrimExpr, ...]
    span: Span | None = _span_field()


@dataclass(frozen=True, slots=True, eq=False)
class BufferLoad(PrimExpr):
    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    span: Span | None = _span_field()

    @property
    def dtype(self) -> DataType:
        lanes = 1
        for idx in self.indices:
            lanes = max(lanes, idx.dtype.lanes)
        return self.buffer.dtype.with_lanes(lanes * self.buffer.dtype.lanes) if lanes > 1 else self.buffer.dtype


@dataclass(frozen=True, slots=True, eq=False)
class Ramp(PrimExpr):
    """The vector [base, base + stride, ..., base + (lanes-1)*stride]."""

    base: PrimExpr
    stride: PrimExpr
    lanes: int
    span: Span | None = _span_field()

    @property
    def dtype(self) -> DataType:
        return self.base.dtype.with_lanes(self.lanes)


@dataclass(frozen=True, slots=True, eq=False)
class Broadcast(PrimExpr):
    """A scalar repeated in every lane."""

    value: PrimExpr
    lanes: int
    span: Span | None = _span_field()

    @property
    def dtype(self) -> DataType:
        return self.value.dtype.with_lanes(self.lanes)


@dataclass(frozen=True, slots=True, eq=False)
class Range(Node):
    """The half-open interval [min, min + extent)."""

    min: PrimExpr
    extent: PrimExpr
    span: Span | None = _span_field()

    @staticmethod
    def from_extent(extent, dtype: DataType = int32) -> Range:
        return Range(const(0, dtype), as_expr(extent, dtype))


# constructors -------------------------------------------------------------------

def const(value, dtype: DataType | str = int32) -> PrimExpr:
    """An immediate of `dtype` (a bool for bool, a float for float types)."""
    from ..dtypes import as_dtype

    dt = as_dtype(dtype)
    if dt.is_float:
        return FloatImm(float(value), dt)
    if dt.is_bool:
        return IntImm(int(bool(value)), dt)
    return IntImm(int(value), dt)


def as_expr(value, dtype: DataType | None = None) -> PrimExpr:
    """Python numbers become immediates (of `dtype` when given); expressions pass through."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, bool):
        return const(value, dtype or bool_)
    if isinstance(value, int):
        return const(value, dtype or int32)
    if isinstance(value, float):
        return const(value, dtype if dtype is not None and dtype.is_float else float32)
    raise TypeError(f"cannot convert {type(value).__name__} {value!r} to an IR expression")


def binary(op: str, a, b) -> Binary:
    """Build `a op b`; a Python number takes the dtype of the other operand."""
    if not isinstance(a, PrimExpr):
        a = as_expr(a, b.dtype if isinstance(b, PrimExpr) else None)
    if not isinstance(b, PrimExpr):
        b = as_expr(b, a.dtype)
    if op in SHIFT_OPS and isinstance(b, IntImm) and not shift_in_range(b.value, b.dtype):
        raise ValueError(f"{op} by {b.value}: a {b.dtype} shifts by 0 to {b.dtype.bits - 1}")
    return Binary(op, a, b)


def shift_in_range(amount: int, dtype: DataType) -> bool:
    """Whether a shift of a `dtype` value by `amount` moves by `amount`: 0 <= amount < bits.
    C and LLVM leave other amounts undefined; tdsl takes every amount modulo the bit width
    (`shift_amount`), in every backend, and refuses a constant one outside the range."""
    return 0 <= amount < dtype.bits


def shift_amount(amount: int, dtype: DataType) -> int:
    """The distance a shift of a `dtype` value by `amount` moves: `amount & (bits - 1)`."""
    return amount & (dtype.bits - 1)


def is_const(e, value=None) -> bool:
    """True when `e` is an immediate (equal to `value` when given)."""
    if not isinstance(e, (IntImm, FloatImm)):
        return False
    return value is None or e.value == value


def is_true(e) -> bool:
    """True for the boolean constant True (a predicate that always holds)."""
    return isinstance(e, IntImm) and e.dtype.is_bool and e.value == 1


def is_false(e) -> bool:
    """True for the boolean constant False."""
    return isinstance(e, IntImm) and e.dtype.is_bool and e.value == 0


def call(op: str, *args, dtype: DataType | None = None) -> Call:
    args = tuple(as_expr(a) for a in args)
    return Call(dtype if dtype is not None else args[0].dtype, op, args)


def if_then_else(cond, t, f) -> Call:
    t = as_expr(t, f.dtype if isinstance(f, PrimExpr) else None)
    f = as_expr(f, t.dtype)
    return Call(t.dtype, "if_then_else", (as_expr(cond), t, f))


def logical_and(a, b) -> PrimExpr:
    return binary("and", a, b)


def logical_or(a, b) -> PrimExpr:
    return binary("or", a, b)


def all_ones(dtype: DataType) -> IntImm:
    """The integer of `dtype` with every bit set: -1 signed, 2**bits - 1 unsigned."""
    return IntImm(2 ** dtype.bits - 1 if dtype.is_uint else -1, dtype.element)


def bitwise_not(a) -> PrimExpr:
    """`~a` of an integer: `a ^ all_ones` (TVM's T.bitwise_not; the printer writes it `~a`)."""
    a = as_expr(a)
    if not a.dtype.is_integer:
        raise TypeError(f"bitwise_not needs an integer operand, not {a.dtype}")
    ones = all_ones(a.dtype)
    return Binary("bitwise_xor", a, ones if not a.dtype.is_vector else Broadcast(ones, a.dtype.lanes))


def is_bitwise_not(e) -> bool:
    """True for `a ^ all_ones`, which prints as `~a`."""
    if not (isinstance(e, Binary) and e.op == "bitwise_xor" and e.dtype.is_integer):
        return False
    b = e.b.value if isinstance(e.b, Broadcast) else e.b
    return isinstance(b, IntImm) and b.value == all_ones(e.dtype).value


def min_(a, b) -> PrimExpr:
    return binary("min", a, b)


def max_(a, b) -> PrimExpr:
    return binary("max", a, b)
