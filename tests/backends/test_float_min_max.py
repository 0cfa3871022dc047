"""Float T.max / T.min in the CPU backend: NaN on either side gives NaN (as numpy and the
interpreter), in scalar code, in vector code and in a vectorized reduction (the accumulator
form softmax's max pass uses), and the vector form is one max, one compare and one blend."""
import platform
import re

import numpy as np
import pytest

import tdsl

SPECIALS = np.array([np.nan, 0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 3.5, np.nan, -np.inf, 2.0, np.nan,
                     np.inf, -2.0, 0.5, 7.0], np.float32)


def _elementwise(lanes: int):
    func = tdsl.parse('''
@T.prim_func
def mm(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32"), C: T.Buffer((256,), "float32"),
       D: T.Buffer((256,), "float32")):
    for i in range(256):
        with T.block("c"):
            vi = T.axis.spatial(256, i)
            C[vi] = T.max(A[vi], B[vi])
            D[vi] = T.min(A[vi], B[vi])
''')
    if lanes == 1:
        return func, tdsl.build(func)
    sch = tdsl.Schedule(func)
    _, vec = sch.split(sch.get_loops(sch.get_block("c"))[0], factors=[None, lanes])
    sch.vectorize(vec)
    return func, tdsl.build(sch)


@pytest.mark.parametrize("lanes", [1, 8, 32])
def test_every_pair_of_special_values_matches_numpy_and_the_interpreter(lanes):
    a = np.repeat(SPECIALS, 16)      # every special value against every other one
    b = np.tile(SPECIALS, 16)
    func, kernel = _elementwise(lanes)
    got = kernel(a, b)
    want = tdsl.interpret(func, a, b)
    for g, w, ref in zip(got, want, (np.maximum(a, b), np.minimum(a, b))):
        np.testing.assert_array_equal(g, ref)   # NaN where numpy has NaN; tied zeros compare equal
        np.testing.assert_array_equal(g, w)


def _reduction(op: str, n: int, lanes: int) -> tdsl.Schedule:
    """`out[r] = op over A[r, :]`, reduced `lanes` at a time into a vector of partial results."""
    init = "T.min_value" if op == "max" else "T.max_value"
    func = tdsl.parse(f'''
@T.prim_func
def red(A: T.Buffer((4, {n}), "float32"), O: T.Buffer((4,), "float32")):
    for r, j in T.grid(4, {n}):
        with T.block("r"):
            vr, vj = T.axis.remap("SR", [r, j])
            with T.init():
                O[vr] = {init}("float32")
            O[vr] = T.{op}(O[vr], A[vr, vj])
''')
    sch = tdsl.Schedule(func)
    block = sch.get_block("r")
    _, inner = sch.split(sch.get_loops(block)[-1], factors=[None, lanes])
    rf = sch.rfactor(inner, 1)
    init = sch.decompose_reduction(rf, sch.get_loops(rf)[-2])
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sch.get_loops(rf)[-1])
    return sch


@pytest.mark.parametrize("op", ["max", "min"])
def test_vector_reduction_propagates_nan_from_any_position(op):
    n, lanes = 256, 32
    a = np.random.default_rng(3).standard_normal((4, n)).astype(np.float32)
    a[0, 0] = np.nan              # the first element: the accumulator is NaN from the start
    a[1, n - 1] = np.nan          # the last: the accumulator turns NaN at the end
    a[2, 37] = np.nan             # a middle step, another lane
    a[2, 38] = np.inf if op == "max" else -np.inf
    a[3, 5] = np.inf if op == "max" else -np.inf   # no NaN: the infinity wins
    got = tdsl.build(_reduction(op, n, lanes))(a)
    want = (np.max if op == "max" else np.min)(a, axis=1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, tdsl.interpret(_reduction(op, n, lanes).func, a))


AVX2, AVX512 = "llvm -mcpu=x86-64-v3", "llvm -mcpu=x86-64-v4"


def _loop_of(op: str, target: str) -> str:
    """The assembly of the vectorized reduction's hot loop built for `target`."""
    asm = tdsl.build(_reduction(op, 256, 32), target=target).asm
    return max(re.findall(r"\n\.LBB\d+_\d+:\n(.*?)\n\s+j\w+\s+\.LBB", asm, re.S),
               key=lambda body: body.count(f"v{op}ps"))


def _skip_without(target: str) -> None:
    from tdsl.target import cpu_features, host_features

    missing = sorted(cpu_features(target) - host_features())
    if missing:
        pytest.skip(f"this CPU cannot run code for {target!r} (lacks {', '.join(missing[:4])})")


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")
@pytest.mark.parametrize("op", ["max", "min"])
def test_vector_reduction_is_one_max_one_compare_one_blend_per_vector_avx2(op):
    """x86's maxps(c, a) is exactly `c > a ? c : a` and returns `a` when either is NaN, so only a
    NaN `c` needs fixing: a compare and a blend (no second compare and or). Built for an
    AVX2-only CPU (any AVX2 or AVX-512 host runs it)."""
    _skip_without(AVX2)
    loop = _loop_of(op, AVX2)
    vectors = loop.count(f"v{op}ps")
    assert vectors >= 1 and "zmm" not in loop
    assert loop.count("vcmp") == vectors and loop.count("vblendv") == vectors
    assert "vorps" not in loop


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")
@pytest.mark.parametrize("op", ["max", "min"])
def test_vector_reduction_is_one_compare_one_masked_max_per_vector_avx512(op):
    """With AVX-512 the compare writes a mask register and the max itself is masked (keeps the
    NaN accumulator's lanes): one compare and one masked max per vector, no blend, no or."""
    _skip_without(AVX512)
    loop = _loop_of(op, AVX512)
    vectors = loop.count(f"v{op}ps")
    assert vectors >= 1 and "zmm" in loop
    assert loop.count("vcmp") == vectors
    assert len(re.findall(rf"v{op}ps[^\n]*\{{%k\d\}}", loop)) == vectors
    assert "vblendv" not in loop and "vorps" not in loop
