"""Issue 22: parameter shapes written as expressions ("n - 1", "n * 2", "n // 2") build and are
checked at the call in script terms (no IR reprs); a misaligned C-contiguous output is told it
is misaligned."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tdsl

TEXT = '''
@T.prim_func
def h(A: T.Buffer(("{shape}",), "float32"), B: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = T.float32(1)
'''
SIZES = {"n - 1": lambda n: n - 1, "n * 2": lambda n: n * 2, "n // 2": lambda n: n // 2}


@pytest.mark.parametrize("shape", sorted(SIZES))
def test_expression_shape_builds_and_checks_calls(shape):
    func = tdsl.parse(TEXT.format(shape=shape))
    kernel = tdsl.build(func)
    n = 6
    a = np.ones(SIZES[shape](n), "float32")
    for call in (lambda b: kernel(a, b), lambda b: kernel(A=a, B=b),
                 lambda b: kernel(np.ones(2 * len(a), "float32")[::2], b)):
        b = np.zeros(n, "float32")
        call(b)
        np.testing.assert_array_equal(b, np.ones(n, "float32"))
    with pytest.raises(tdsl.ArgumentError, match=f"expected shape [(]{shape.replace('*', '[*]')},[)]") as info:
        kernel(np.ones(SIZES[shape](n) + 1, "float32"), np.zeros(n, "float32"))
    assert "Binary(" not in str(info.value)
    assert "Binary(" not in repr(kernel)


@pytest.mark.parametrize("shape", ["n - 1", "n * 2"])
def test_left_out_output_solves_the_dimension(shape):
    func = tdsl.parse(TEXT.format(shape=shape))
    a = np.ones(SIZES[shape](6), "float32")
    np.testing.assert_array_equal(tdsl.build(func)(a), np.ones(6, "float32"))
    if shape == "n * 2":   # the interpreter solves n * c too (not n - c)
        np.testing.assert_array_equal(tdsl.interpret(func, a), np.ones(6, "float32"))


def test_negative_left_out_output_is_an_argument_error():
    func = tdsl.parse('''
@T.prim_func
def h(B: T.Buffer(("n",), "float32"), A: T.Buffer(("n - 1",), "float32")):
    for i in range(n - 1):
        with T.block("A"):
            vi = T.axis.remap("S", [i])
            A[vi] = B[vi]
''')
    with pytest.raises(tdsl.ArgumentError, match=r"cannot allocate output 'A' of shape \(n - 1,\): it would be "
                                                 r"\(-1,\) with n = 0"):
        tdsl.build(func)(np.zeros(0, "float32"))


def test_misaligned_contiguous_output_is_told_it_is_misaligned():
    func = tdsl.parse(TEXT.format(shape="n"))
    out = np.zeros(4 * 4 + 1, "uint8")[1:].view("float32")
    assert out.flags.c_contiguous and not out.flags.aligned
    with pytest.raises(tdsl.ArgumentError, match="must be aligned to its dtype"):
        tdsl.build(func)(np.ones(4, "float32"), out)


SCALE = '''
@T.prim_func
def scale(A: T.Buffer(("n",), "float32"), B: T.Buffer(("n",), "float32")):
    for i in range(n):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi] * T.float32(3)
'''


def _do_the_suggested_fix(message: str, kernel, a, view) -> None:
    """Run the recipe the message gives ("tmp = ...(B...), call with tmp, then B[...] = tmp")."""
    recipe = re.search(r"copy the result back: (tmp = .*?\)), call with tmp, then (B\[\.\.\.\] = tmp)", message)
    assert recipe, message
    scope = {"np": np, "B": view}
    exec(recipe.group(1), scope)   # noqa: S102 - the message's own suggestion, run as a user would
    kernel(a, scope["tmp"])
    exec(recipe.group(2), scope)   # noqa: S102


@pytest.mark.parametrize("view", ["misaligned", "strided"])
def test_the_fix_an_output_view_message_suggests_works(view):
    """Issue 28: the message for a misaligned (or non-contiguous) output view suggests a fix;
    the fix, done as written, gives the right result in the user's view."""
    kernel = tdsl.build(tdsl.parse(SCALE))
    a = np.arange(6, dtype="float32")
    if view == "misaligned":
        out = np.zeros(4 * 6 + 1, "uint8")[1:].view("float32")
        assert out.flags.c_contiguous and not out.flags.aligned
    else:
        out = np.zeros(12, "float32")[::2]
    with pytest.raises(tdsl.ArgumentError) as info:
        kernel(a, out)
    assert "'B'" in str(info.value)
    _do_the_suggested_fix(str(info.value), kernel, a, out)
    np.testing.assert_array_equal(out, a * 3)
