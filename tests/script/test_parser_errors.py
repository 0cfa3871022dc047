"""Bad programs: each raises ScriptError naming the right line, with a caret and a useful message."""
import os
import textwrap

import pytest

import tdsl

HEADER = '''
@T.prim_func
def f(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8,), "float32"), I: T.Buffer((8,), "int32"), n: T.int32):
'''

# (name, body lines (indented 4 spaces in the function), 1-based line within the body, fragment of the message)
BAD_BODIES = [
    ("undefined name", "for i in range(8):\n    B[i] = C[i]", 2, "undefined name 'C'"),
    ("too few indices", "for i in range(8):\n    A[i] = 1.0", 2, "A has 2 dimensions but is indexed with 1"),
    ("too many indices", "for i in range(8):\n    B[i, i] = 1.0", 2, "B has 1 dimension but is indexed with 2"),
    ("float into int", "for i in range(8):\n    I[i] = B[i]", 2, "cannot store a float32 value into I"),
    ("float literal into int", "for i in range(8):\n    I[i] = 0.5", 2, "is the float 0.5"),
    ("buffer in arithmetic", "for i in range(8):\n    B[i] = A + 1.0", 2, "A is a buffer"),
    ("int plus float var", "for i in range(8):\n    B[i] = B[i] + I[i]", 2, "different dtypes: float32 and int32"),
    ("int division", "for i in range(8):\n    I[i] = I[i] / 2", 2, "'/' on int32"),
    ("float floordiv", "for i in range(8):\n    B[i] = B[i] // 2.0", 2, "needs integer operands"),
    ("float index", "for i in range(8):\n    B[i] = A[B[i], 0]", 2, "expected an integer"),
    ("while loop", "while True:\n    pass", 1, "while loops"),
    ("return", "return 1", 1, "cannot return"),
    ("import in body", "import math", 1, "'import' statements"),
    ("nested def", "def g():\n    pass", 1, "'def' statements"),
    ("for else", "for i in range(8):\n    B[i] = 1.0\nelse:\n    pass", 4, "for ... else"),
    ("iterate over list", "for i in [1, 2]:\n    pass", 1, "iterates over range"),
    ("range step", "for i in range(0, 8, 2):\n    B[i] = 1.0", 1, "step"),
    ("grid arity", "for i, j in T.grid(8):\n    pass", 1, "2 loop variables for 1 loops"),
    ("unknown thread", 'for i in T.thread_binding(8, thread="warpIdx.x"):\n    B[i] = 1.0', 1, "unknown thread axis"),
    ("thread without tag", "for i in T.thread_binding(8):\n    B[i] = 1.0", 1, "needs thread="),
    ("block without name", "with T.block():\n    pass", 1, "T.block needs a name"),
    ("root name", 'for i in range(8):\n    with T.block("root"):\n        pass', 2, "reserved"),
    ("init outside block", "with T.init():\n    pass", 1, "directly inside a T.block"),
    ("axis outside block", "for i in range(8):\n    vi = T.axis.spatial(8, i)", 2, "must be in a T.block"),
    ("remap count", 'for i, j in T.grid(8, 8):\n    with T.block("b"):\n        vi, vj = T.axis.remap("S", [i, j])',
     3, "1 kinds, 2 loop variables"),
    ("remap kind", 'for i in range(8):\n    with T.block("b"):\n        vi = T.axis.remap("X", [i])', 3,
     "unknown iterator kind"),
    ("remap non loop", 'with T.block("b"):\n    vi = T.axis.remap("S", [n])', 2, "binds iterators to loop variables"),
    ("axis unknown", 'for i in range(8):\n    with T.block("b"):\n        vi = T.axis.sideways(8, i)', 3,
     "unknown T.axis.sideways"),
    ("axis arity", 'for i in range(8):\n    with T.block("b"):\n        vi = T.axis.spatial(8)', 3, "takes (domain, value)"),
    ("two inits", 'for i in range(8):\n    with T.block("b"):\n        vi = T.axis.reduce(8, i)\n'
     '        with T.init():\n            B[0] = 0.0\n        with T.init():\n            B[0] = 0.0\n'
     '        B[0] = B[0] + 1.0', 6, "two T.init()"),
    ("decl after stmt", 'for i in range(8):\n    with T.block("b"):\n        vi = T.axis.spatial(8, i)\n'
     '        B[vi] = 1.0\n        T.where(vi < 4)', 5, "must come before the statements"),
    ("where not bool", 'for i in range(8):\n    with T.block("b"):\n        vi = T.axis.spatial(8, i)\n'
     '        T.where(vi)\n        B[vi] = 1.0', 4, "needs a bool condition"),
    ("reads missing buffer", 'for i in range(8):\n    with T.block("b"):\n        vi = T.axis.spatial(8, i)\n'
     '        T.reads(B[vi])\n        T.writes(B[vi])\n        B[vi] = B[vi] + A[vi, 0]', 2, "reads A, but T.reads"),
    ("if not bool", "for i in range(8):\n    if I[i]:\n        B[i] = 1.0", 2, "must be a bool"),
    ("and on ints", "for i in range(8):\n    if I[i] and I[i]:\n        B[i] = 1.0", 2, "needs bool operands"),
    ("math on int", "for i in range(8):\n    I[i] = T.exp(I[i])", 2, "T.exp needs a float argument"),
    ("math arity", "for i in range(8):\n    B[i] = T.exp(B[i], B[i])", 2, "T.exp takes 1 argument"),
    ("unknown T function", "for i in range(8):\n    B[i] = T.frobnicate(B[i])", 2, "T.frobnicate is not"),
    ("bad dtype", 'for i in range(8):\n    B[i] = T.cast(B[i], "float128")', 2, "unknown dtype"),
    ("cast arity", "for i in range(8):\n    B[i] = T.cast(B[i])", 2, "T.cast takes"),
    ("slice in load", "for i in range(8):\n    B[i] = A[i, 0:4]", 2, "slices are only allowed"),
    ("aug assign name", "x = 1\nx += 1", 2, "augmented assignment needs a buffer element"),
    ("bitwise op on float", "for i in range(8):\n    B[i] = B[i] & B[i]", 2, "'&' needs integer operands, not float32"),
    ("shift of float", "for i in range(8):\n    B[i] = T.shift_left(B[i], 1.0)", 2, "has no T.reinterpret"),
    ("invert float", "for i in range(8):\n    B[i] = ~B[i]", 2, "'~' needs an integer operand"),
    ("invert bool", "for i in range(8):\n    if ~(I[i] > 0):\n        B[i] = 1.0", 2, "write `not a`"),
    ("shift of bool", "for i in range(8):\n    if (I[i] > 0) << True:\n        B[i] = 1.0", 2, "'<<' on bool"),
    ("shift too far", "for i in range(8):\n    I[i] = I[i] >> 32", 2, "a shift of int32 by 32 is undefined"),
    ("negative shift", "for i in range(8):\n    I[i] = I[i] << -1", 2, "shift by 0 to 31"),
    ("matmul operator", "for i in range(8):\n    I[i] = I[i] @ I[i]", 2, "not supported in tdsl"),
    ("lambda", "for i in range(8):\n    B[i] = (lambda: 1.0)()", 2, "lambda"),
    ("list comprehension", "for i in range(8):\n    B[i] = [x for x in range(3)]", 2, "list comprehension"),
    ("tuple target", "a, b = 1, 2", 1, "cannot assign to this target"),
    ("alloc in loop", 'for i in range(8):\n    X = T.alloc_buffer((8,), "float32")', 2, "T.alloc_buffer must be"),
    ("int overflow", "for i in range(8):\n    I[i] = 3000000000", 2, "does not fit in int32"),
    ("bare expression", "for i in range(8):\n    B[i] + 1.0", 2, "does nothing as a statement"),
    ("reads outside block", "T.reads(A[0, 0])", 1, "must come first in a T.block"),
    ("store to non buffer", "x = 1\nx[0] = 2", 2, "only buffer elements can be stored to"),
    ("not on int", "for i in range(8):\n    if not I[i]:\n        B[i] = 1.0", 2, "'not' needs a bool operand"),
    ("bool arithmetic", "for i in range(8):\n    I[i] = (I[i] > 0) + 1", 2, "bool"),
    ("select dtype mismatch", "for i in range(8):\n    B[i] = T.Select(i > 2, B[i], I[i])", 2, "different dtypes"),
]


@pytest.mark.parametrize("name,body,line,fragment", BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_bad_program(name, body, line, fragment):
    src = HEADER + textwrap.indent(body, "    ") + "\n"
    with pytest.raises(tdsl.ScriptError) as info:
        tdsl.parse(src)
    err = info.value
    header_lines = HEADER.count("\n")
    assert err.span is not None, name
    assert err.span.line == header_lines + line, (name, str(err))
    text = str(err)
    assert fragment in text, (name, text)
    assert "^" in text, text
    caret_line = text.splitlines()[[k for k, ln in enumerate(text.splitlines()) if ln.strip().startswith("^")][0]]
    assert caret_line.strip().startswith("^")


def test_at_least_forty_bad_programs():
    assert len(BAD_BODIES) >= 40


BAD_SIGNATURES = [
    ("missing annotation", "def f(A):\n    pass", "needs an annotation"),
    ("default value", 'def f(A: T.Buffer((8,), "float32") = None):\n    pass', "plain annotated names"),
    ("unknown annotation", "def f(A: int):\n    pass", "unsupported annotation"),
    ("bad buffer kwarg", 'def f(A: T.Buffer((8,), "float32", layout="x")):\n    pass', "unknown T.Buffer argument"),
    ("float dim symbol", 'def f(n: T.float32, A: T.Buffer(("n",), "float32")):\n    pass', "must be an integer"),
]


@pytest.mark.parametrize("name,src,fragment", BAD_SIGNATURES, ids=[b[0] for b in BAD_SIGNATURES])
def test_bad_signature(name, src, fragment):
    with pytest.raises(tdsl.ScriptError) as info:
        tdsl.parse("@T.prim_func\n" + src)
    assert fragment in str(info.value)
    assert info.value.span.line == 2


def test_invalid_python_is_script_error():
    with pytest.raises(tdsl.ScriptError) as info:
        tdsl.parse("@T.prim_func\ndef f(:\n    pass\n")
    assert info.value.span.line == 2


def test_script_error_is_syntax_error_and_names_file(tmp_path):
    assert issubclass(tdsl.ScriptError, SyntaxError)
    path = tmp_path / "kern.py"
    path.write_text(textwrap.dedent('''
        import tdsl
        from tdsl import T

        @T.prim_func
        def g(A: T.Buffer((8, 8), "float32")):
            for i in range(8):
                A[i] = 1.0
    '''))
    import runpy

    with pytest.raises(tdsl.ScriptError) as info:
        runpy.run_path(str(path))
    err = info.value
    assert err.filename == str(path)
    assert err.lineno == 8
    assert str(path) in str(err)
    # the traceback ends at the user's decorator line, not deep inside the parser
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    parser_dir = os.path.join("tdsl", "script", "parser") + os.sep  # the parser's modules (a package)
    assert not any(parser_dir in f.filename for f in frames)


def test_closure_values_are_captured():
    N = 12
    scale = 2.5

    @tdsl.T.prim_func
    def f(A: tdsl.T.Buffer((N,), "float32")):
        for i in range(N // 2):
            A[i] = A[i] * scale

    assert f.params[0].shape[0].value == 12
    assert f.body.block.body.extent.value == 6 if hasattr(f.body, "block") else f.body.extent.value == 6


def test_names_used_only_in_annotations_are_captured():
    rows, cols = 3, 5

    @tdsl.T.prim_func
    def f(A: tdsl.T.Buffer((rows, cols), "float32")):
        for i in range(3):
            A[i, 0] = tdsl.T.float32(1)

    assert [int(d.value) for d in f.params[0].shape] == [3, 5]


@pytest.mark.parametrize("call, fn, hint", [
    ("math.exp(B[i])", "math.exp", "use T.exp(...)"),
    ("math.sqrt(B[i])", "math.sqrt", "use T.sqrt(...)"),
    ("math.fabs(B[i])", "math.fabs", "use T.abs(...)"),
    ("np.exp(B[i])", "numpy.exp", "use T.exp(...)"),
    ("np.maximum(B[i], 0.0)", "numpy.maximum", "use T.max(...)"),
    ("float(I[i])", "float", 'use T.cast(x, "float32")'),
])
def test_python_math_on_tdsl_values_suggests_the_t_function(call, fn, hint):
    """Issue 28: `math.exp` in a script suggested T.cast/T.min/T.max; it names T.exp now."""
    import math

    import numpy as np

    src = HEADER + f"    for i in range(8):\n        B[i] = {call}\n"
    with pytest.raises(tdsl.ScriptError) as info:
        tdsl.parse(src, extra_vars={"math": math, "np": np})
    text = str(info.value)
    assert f"{fn} cannot take tdsl values" in text and hint in text, text
