"""print -> parse is the identity (up to renaming) for every function the parser accepts."""
import pytest

import tdsl
from tdsl import T


def roundtrip(func):
    text = func.script()
    again = tdsl.parse(text)
    tdsl.assert_structural_equal(func, again)
    assert again.script() == text, "printing is stable"
    assert tdsl.structural_hash(func) == tdsl.structural_hash(again)
    return again


SOURCES = {
    "loop_kinds": '''
@T.prim_func
def f(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32")):
    for i in T.parallel(64):
        for j0 in T.serial(0, 8, annotations={"pragma_unroll": 4}):
            for j1 in T.vectorized(8):
                with T.block("B"):
                    vi = T.axis.spatial(64, i)
                    vj = T.axis.spatial(64, j0 * 8 + j1)
                    B[vi, vj] = A[vi, vj] * T.float32(2)
''',
    "threads": '''
@T.prim_func
def f(A: T.Buffer((256,), "float16"), B: T.Buffer((256,), "float16")):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            with T.block("B"):
                v = T.axis.spatial(256, bx * 64 + tx)
                B[v] = A[v] + T.float16(1)
''',
    "let_and_if": '''
@T.prim_func
def f(A: T.Buffer((16,), "int32"), B: T.Buffer((16,), "int32")):
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            x = A[vi] * 3
            if x % 2 == 0:
                B[vi] = x // 2
            elif x < 0:
                B[vi] = -x
            else:
                B[vi] = T.max(x, 7) - T.min(x, 3)
''',
    "nonzero_min_and_where": '''
@T.prim_func
def f(A: T.Buffer((10,), "float32")):
    for i in range(2, 7):
        for j in range(4):
            with T.block("A"):
                v = T.axis.spatial((2, 10), i + j)
                T.where(i + j < 10)
                A[v] = T.float32(1)
''',
    "int64_and_casts": '''
@T.prim_func
def f(A: T.Buffer((8,), "int8"), B: T.Buffer((8,), "float64"), C: T.Buffer((8,), "int64")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = T.cast(A[vi], "float64") * T.float64(0.5) + T.float64("inf") * T.float64(0)
            C[vi] = T.int64(1) << 0 if False else T.cast(A[vi], "int64") + T.int64(3000000000)
''',
    "lowered_style": '''
@T.prim_func
def f(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    with T.allocate((16,), "float32", "local") as tmp:
        for i in range(4):
            tmp[T.Ramp(i * 4, 1, 4)] = A[T.Ramp(i * 4, 1, 4)] + T.Broadcast(T.float32(1), 4)
        for i in range(16):
            B[i] = tmp[i]
    x = T.call_extern("float32", "my_extern", A[0], 3)
    T.evaluate(T.call_extern("int32", "side_effect", x))
    B[0] = x
''',
    "nested_blocks_and_alloc": '''
@T.prim_func
def f(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
    S = T.alloc_buffer((4,), "float32", scope="local")
    for i in range(4):
        with T.block("outer"):
            vi = T.axis.spatial(4, i)
            T.block_attr({"meta": 1})
            for k in range(8):
                with T.block("inner"):
                    vk = T.axis.reduce(8, k)
                    with T.init():
                        S[vi] = T.float32(0)
                    S[vi] = S[vi] + T.exp(A[vi, vk]) * T.sigmoid(A[vi, vk])
            B[vi] = T.if_then_else(S[vi] > T.float32(1), T.sqrt(S[vi]), T.Select(vi > 1, S[vi], T.float32(0)))
''',
    "symbolic": '''
@T.prim_func
def f(A: T.Buffer(("n", "m"), "float32"), B: T.Buffer(("n",), "float32"), alpha: T.float32):
    for i, j in T.grid(n, m):
        with T.block("B"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] += A[vi, vj] * alpha
''',
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_roundtrip_sources(name):
    src = SOURCES[name].replace("T.int64(1) << 0 if False else ", "")
    f = tdsl.parse(src)
    roundtrip(f)


def test_decorated_roundtrip_and_sugar():
    @T.prim_func
    def sugar(A: T.Buffer((8, 8), "float32"), C: T.Buffer((8,), "float32")):
        for i, k in T.grid(8, 8):
            with T.block("C"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    C[vi] = T.float32(0)
                C[vi] += A[vi, vk]

    @T.prim_func
    def explicit(X: T.Buffer((8, 8), "float32"), Y: T.Buffer((8,), "float32")):
        for a in range(8):
            for b in range(8):
                with T.block("C"):
                    va = T.axis.spatial(8, a)
                    vb = T.axis.reduce(8, b)
                    T.reads(Y[va], X[va, vb])
                    T.writes(Y[va])
                    with T.init():
                        Y[va] = T.float32(0)
                    Y[va] = Y[va] + X[va, vb]

    roundtrip(sugar)
    tdsl.assert_structural_equal(sugar, explicit)


def test_structural_equal_reports_difference():
    a = tdsl.parse(SOURCES["symbolic"])
    b = tdsl.parse(SOURCES["symbolic"].replace("alpha", "T.float32(2)").replace(", T.float32(2): T.float32", ""))
    assert not tdsl.structural_equal(a, b)
    diff = tdsl.structural_diff(a, b)
    assert "first difference" in diff


def test_renaming_is_equal_block_name_is_not():
    a = tdsl.parse(SOURCES["let_and_if"])
    import re

    renamed = re.sub(r"\bvi\b", "q", re.sub(r"\bx\b", "y", SOURCES["let_and_if"])).replace("def f", "def g")
    b = tdsl.parse(renamed)
    assert tdsl.structural_equal(a, b)
    c = tdsl.parse(SOURCES["let_and_if"].replace('T.block("B")', 'T.block("B2")'))
    assert not tdsl.structural_equal(a, c)
    assert "B2" in tdsl.structural_diff(a, c)


def test_names_are_uniquified_when_printing():
    f = tdsl.parse(SOURCES["loop_kinds"])
    text = f.script()
    assert text.count("for i in") == 1


def test_html_and_show(capsys):
    f = tdsl.parse(SOURCES["symbolic"])
    html = f._repr_html_()
    assert "<" in html and "prim_func" in html
    f.show()
    out = capsys.readouterr().out
    assert "def f" in out
