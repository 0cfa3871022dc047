"""Bitwise operators and shifts (& | ^ ~ << >>, TVM's T.bitwise_* / T.shift_*): IR nodes, print ->
parse, constant folding, and the interpreter against numpy, with shift amounts taken modulo
the bit width (docs/script.md)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tdsl
from tdsl.arith import const_bound, simplify
from tdsl.ir import Binary, IntImm, Var, bitwise_not, const, is_bitwise_not
from tdsl.ir.expr import binary

OPS = ("&", "|", "^", "<<", ">>")
NP = {"&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor, "<<": np.left_shift, ">>": np.right_shift}
DTYPES = ("int8", "uint8", "int32", "int64")


def roundtrip(func):
    text = func.script()
    again = tdsl.parse(text)
    tdsl.assert_structural_equal(func, again)
    assert again.script() == text, "printing is stable"
    assert tdsl.structural_hash(func) == tdsl.structural_hash(again)
    return text


def reference(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """tdsl's meaning in numpy: a shift amount is taken modulo the bit width."""
    if op in ("<<", ">>"):
        b = b & (a.dtype.itemsize * 8 - 1)
    return NP[op](a, b)


def elementwise(op: str, dtype: str):
    return tdsl.parse(f'''
@T.prim_func
def f(A: T.Buffer((64,), "{dtype}"), S: T.Buffer((64,), "{dtype}"), B: T.Buffer((64,), "{dtype}")):
    for i in range(64):
        with T.block("B"):
            vi = T.axis.spatial(64, i)
            B[vi] = A[vi] {op} S[vi]
''')


def values(dtype: str, rng) -> np.ndarray:
    info = np.iinfo(dtype)
    edges = np.array([info.min, info.max, 0, 1, -1 if info.min < 0 else 2, 15, 16, info.min + 1], dtype=dtype)
    return np.concatenate([edges, rng.integers(info.min, info.max, 56, endpoint=True, dtype=dtype)])


def amounts(dtype: str, rng) -> np.ndarray:
    """Every amount in [0, bits), and some outside (negative, bits, past it) where the type has them."""
    bits = np.dtype(dtype).itemsize * 8
    inside = np.arange(64) % bits
    info = np.iinfo(dtype)
    outside = [v for v in (bits, bits + 3, -1, -bits, info.max) if info.min <= v <= info.max]
    inside[:len(outside)] = outside
    return inside.astype(dtype)


# IR -----------------------------------------------------------------------------------------

def test_python_operators_build_the_nodes():
    x = Var("x")
    assert (x & 3).op == "bitwise_and" and (3 | x).op == "bitwise_or" and (x ^ x).op == "bitwise_xor"
    assert (x << 2).op == "shift_left" and (1 >> x).op == "shift_right"
    inv = ~x
    assert is_bitwise_not(inv) and inv.op == "bitwise_xor" and inv.b.value == -1
    u = Var("u", tdsl.dtypes.DataType.parse("uint8"))
    assert bitwise_not(u).b.value == 255


def test_operand_types_are_checked():
    f = Var("f", tdsl.dtypes.float32)
    with pytest.raises(TypeError, match="bitwise_and needs integer operands"):
        _ = f & f
    b = Var("b", tdsl.dtypes.bool_)
    assert (b ^ b).dtype == tdsl.dtypes.bool_
    with pytest.raises(TypeError, match="shift_left needs integer operands, not bool"):
        Binary("shift_left", b, b)
    with pytest.raises(ValueError, match="shifts by 0 to 31"):
        binary("shift_right", Var("x"), 32)


@pytest.mark.parametrize("dtype", DTYPES + ("uint32", "int16"))
@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_constant_folding_matches_numpy(dtype, data):
    info = np.iinfo(dtype)
    x = data.draw(st.integers(int(info.min), int(info.max)))
    y = data.draw(st.integers(int(info.min), int(info.max)))
    op = data.draw(st.sampled_from(OPS))
    name = {"&": "bitwise_and", "|": "bitwise_or", "^": "bitwise_xor", "<<": "shift_left", ">>": "shift_right"}[op]
    folded = simplify(Binary(name, const(x, dtype), const(y, dtype)))
    assert isinstance(folded, IntImm)
    want = reference(op, np.array([x], dtype), np.array([y], dtype))[0]
    assert folded.value == int(want), (x, op, y)
    inv = simplify(bitwise_not(const(x, dtype)))
    assert inv.value == int(~np.array(x, dtype))


def test_bounds_and_safe_identities():
    x = Var("x")
    assert const_bound(x & 15) == (0, 15)
    assert const_bound((x & 255) >> 4) == (0, 15)
    assert const_bound((x & 7) << 2) == (0, 28)
    assert simplify(x | 0) is x and simplify(x >> 0) is x and simplify(x ^ 0) is x
    assert simplify(x & 0).value == 0


# print -> parse -------------------------------------------------------------------------------

ALL_FORMS = '''
@T.prim_func
def f(A: T.Buffer((16,), "int32"), U: T.Buffer((16,), "uint8"), B: T.Buffer((16,), "int32"),
      V: T.Buffer((16,), "uint8"), C: T.Buffer((16,), "bool")):
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            B[vi] = ((A[vi] & 15) | A[vi] << 2 ^ ~A[vi]) >> vi % 8 + (A[vi] >> 3) + ~(A[vi] - 1)
            V[vi] = U[vi] >> T.uint8(3) & T.uint8(7) | ~U[vi] ^ (U[vi] << T.uint8(1))
            C[vi] = (A[vi] > 0) & (U[vi] < T.uint8(4)) | (A[vi] == 3) ^ (A[vi] & 1 == 0)
'''


def test_roundtrip_of_every_form():
    text = roundtrip(tdsl.parse(ALL_FORMS))
    assert "~(A[vi] - 1)" in text and "A[vi] & 1 == 0" in text


def test_tvm_calls_are_the_same_nodes_as_the_operators():
    calls = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = T.bitwise_or(T.bitwise_and(T.shift_right(A[vi], 4), 15), T.bitwise_xor(
                T.shift_left(A[vi], vi % 4), T.bitwise_not(A[vi])))
''')
    ops = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = A[vi] >> 4 & 15 | A[vi] << vi % 4 ^ ~A[vi]
''')
    tdsl.assert_structural_equal(calls, ops)
    roundtrip(calls)


def _tree(depth: int):
    leaf = st.sampled_from(["x", "y", "z", "3", "-5", "T.int32(7)", "1"])
    if depth == 0:
        return leaf
    sub = _tree(depth - 1)
    binop = st.tuples(sub, st.sampled_from(OPS + ("+", "-", "*")), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
    unary = sub.map(lambda s: f"(~{s})")
    return st.one_of(leaf, binop, unary)


class _I32(int):
    """An int32 value with tdsl's semantics: results wrap, shift amounts are taken modulo 32.
    Plain Python ints stay Python ints, as the parser folds them."""

    def __new__(cls, v):
        return super().__new__(cls, (int(v) + 2**31) % 2**32 - 2**31)

    def _op(f, shift=False):
        def method(self, other):
            return _I32(f(int(self), int(other) & 31 if shift else int(other)))

        def reflected(self, other):
            return _I32(f(int(other), int(self) & 31 if shift else int(self)))
        return method, reflected

    __add__, __radd__ = _op(lambda a, b: a + b)
    __sub__, __rsub__ = _op(lambda a, b: a - b)
    __mul__, __rmul__ = _op(lambda a, b: a * b)
    __and__, __rand__ = _op(lambda a, b: a & b)
    __or__, __ror__ = _op(lambda a, b: a | b)
    __xor__, __rxor__ = _op(lambda a, b: a ^ b)
    __lshift__, _ = _op(lambda a, b: a << b, shift=True)
    __rshift__, _ = _op(lambda a, b: a >> b, shift=True)

    def __rlshift__(self, other):
        return _I32(int(other) << (int(self) & 31))

    def __rrshift__(self, other):
        return _I32(int(other) >> (int(self) & 31))

    def __invert__(self):
        return _I32(~int(self))

    def __neg__(self):
        return _I32(-int(self))


@given(expr=_tree(3))
@settings(max_examples=120, deadline=None)
def test_printed_precedence_parses_back_and_computes_as_written(expr):
    src = f'''
@T.prim_func
def f(B: T.Buffer((1,), "int32"), x: T.int32, y: T.int32, z: T.int32):
    with T.block("B"):
        B[0] = {expr}
'''
    try:
        func = tdsl.parse(src)
    except tdsl.ScriptError as err:   # a constant shift out of range, or a folded literal past int32
        assert any(word in str(err) for word in ("shift", "does not fit", "cannot compute")), str(err)
        return
    roundtrip(func)
    env = {"x": -7, "y": 5, "z": 1 << 20}
    want = eval(expr.replace("T.int32", "_I32"), {"_I32": _I32}, {k: _I32(v) for k, v in env.items()})  # noqa: S307
    got = tdsl.interpret(func, **env)
    assert int(got[0]) == int(_I32(want)), expr


# the interpreter ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_interpreter_matches_numpy(op, dtype, rng):
    a = values(dtype, rng)
    s = amounts(dtype, rng) if op in ("<<", ">>") else values(dtype, rng)[::-1].copy()
    got = tdsl.interpret(elementwise(op, dtype), a, s)
    np.testing.assert_array_equal(got, reference(op, a, s))


def test_right_shift_is_arithmetic_on_signed_and_logical_on_unsigned():
    signed = tdsl.interpret(elementwise(">>", "int8"), np.full(64, -128, "int8"), np.full(64, 7, "int8"))
    assert (signed == -1).all()
    unsigned = tdsl.interpret(elementwise(">>", "uint8"), np.full(64, 128, "uint8"), np.full(64, 7, "uint8"))
    assert (unsigned == 1).all()


def test_a_shift_by_the_bit_width_or_more_wraps_the_amount():
    got = tdsl.interpret(elementwise("<<", "int32"), np.ones(64, "int32"), np.full(64, 33, "int32"))
    assert (got == 2).all()
    got = tdsl.interpret(elementwise(">>", "int32"), np.full(64, -64, "int32"), np.full(64, -1, "int32"))
    assert (got == -1).all()     # -1 & 31 == 31


def test_float_operand_is_refused_naming_the_line():
    with pytest.raises(tdsl.ScriptError) as info:
        tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = T.shift_right(A[vi], 1)
''')
    text = str(info.value)
    assert info.value.span.line == 7
    assert "'>>' needs integer operands, not float32" in text and "T.reinterpret" in text
