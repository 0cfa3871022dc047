"""verify(): well-formedness checks name the user's blocks, loops and buffers."""
import pytest

import tdsl
from tdsl.dtypes import float32, float64, int64
from tdsl.ir import (
    TRUE,
    Allocate,
    Block,
    BlockRealize,
    Buffer,
    BufferStore,
    Cast,
    FloatImm,
    For,
    IntImm,
    IterVar,
    LetStmt,
    PrimFunc,
    Range,
    SeqStmt,
    Var,
)
from tdsl.ir.verify import WellFormedError, verify

MATMUL = '''
@T.prim_func
def matmul(A: T.Buffer(("n", 64), "float32"), B: T.Buffer((64, 64), "float32"),
           C: T.Buffer(("n", 64), "float32")):
    for i, j, k in T.grid(n, 64, 64):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''


def test_parsed_and_lowered_functions_are_well_formed():
    f = tdsl.parse(MATMUL)
    verify(f)
    verify(tdsl.lower(f))


def _func(body, params):
    return PrimFunc("f", tuple(params), body)


A = Buffer("A", (IntImm(16),), float32)


def _loop(var, extent, body, **kw):
    return For(var, IntImm(0), IntImm(extent), kw.pop("kind", "serial"), body, **kw)


def _realize(name, values, iters, body, **kw):
    blk = Block(name, tuple(IterVar(v, Range.from_extent(16), "S") for v in iters), (), (), body, **kw)
    return BlockRealize(tuple(values), TRUE, blk)


def check_fails(func, *words):
    with pytest.raises(WellFormedError) as info:
        verify(func)
    for w in words:
        assert w in str(info.value), str(info.value)


def test_undefined_and_out_of_scope_vars():
    i, j = Var("i"), Var("j")
    check_fails(_func(_loop(i, 16, BufferStore(A, FloatImm(0.0), (j,))), [A]), "'j'", "loop 'i'")
    body = SeqStmt((_loop(i, 16, BufferStore(A, FloatImm(0.0), (i,))), BufferStore(A, FloatImm(0.0), (i,))))
    check_fails(_func(body, [A]), "'i'")


def test_vars_defined_twice():
    i = Var("i")
    body = _loop(i, 4, _loop(i, 4, BufferStore(A, FloatImm(0.0), (i,))))
    check_fails(_func(body, [A]), "'i'", "more than once")
    t = Var("t")
    body = _loop(i, 4, LetStmt(t, i, LetStmt(t, i, BufferStore(A, FloatImm(0.0), (t,)))))
    check_fails(_func(body, [A]), "'t'", "more than once")


def test_symbolic_dims_and_scalar_params_are_defined():
    n, m = Var("n"), Var("m")
    X = Buffer("X", (n,), float32)
    Y = Buffer("Y", (n,), float32)
    i = Var("i")
    verify(_func(For(i, IntImm(0), n + m, "serial", BufferStore(X, Y[i], (i,))), [X, Y, m]))


def test_block_checks():
    i, vi, vj = Var("i"), Var("vi"), Var("vj")
    store = BufferStore(A, FloatImm(0.0), (vi,))
    check_fails(_func(_loop(i, 16, _realize("B", [i, i], [vi], store)), [A]), "block 'B'", "1 iterators", "2 values")
    check_fails(_func(_loop(i, 16, _realize("B", [Cast(int64, i)], [vi], store)), [A]), "block 'B'", "int64")
    two = SeqStmt((_loop(i, 16, _realize("B", [i], [vi], store)),
                   _loop(Var("i2"), 16, _realize("B", [IntImm(0)], [vj], BufferStore(A, FloatImm(0.0), (vj,))))))
    verify(_func(two, [A]))  # a block name may repeat, as in TVM (a schedule refuses to look it up)
    # a binding may not use the block's own iterator
    check_fails(_func(_realize("B", [vi], [vi], store), [A]), "'vi'")


def test_buffer_checks():
    i = Var("i")
    M = Buffer("M", (IntImm(4), IntImm(4)), float32)
    check_fails(_func(_loop(i, 4, BufferStore(M, FloatImm(0.0), (i,))), [M]), "'M'", "1 indices", "2 dimensions")
    check_fails(_func(_loop(i, 4, BufferStore(A, FloatImm(0.0, float64), (i,))), [A]), "float64", "'A'")
    check_fails(_func(_loop(i, 4, BufferStore(A, FloatImm(0.0), (FloatImm(1.0),))), [A]), "'A'", "index")
    T_ = Buffer("T", (IntImm(4),), float32)
    check_fails(_func(_loop(i, 4, BufferStore(T_, A[i], (i,))), [A]), "buffer 'T'")
    verify(_func(Allocate(T_, _loop(i, 4, BufferStore(T_, A[i], (i,)))), [A]))
    vi = Var("vi")
    inner = _realize("inner", [i], [vi], BufferStore(T_, A[vi], (vi,)))
    root = _realize("root", [], [], _loop(i, 16, inner), alloc_buffers=(T_,))
    verify(_func(root, [A]))


def test_loop_checks():
    i = Var("i")
    store = BufferStore(A, FloatImm(0.0), (i,))
    check_fails(_func(For(i, IntImm(0), IntImm(16), "thread_binding", store, thread_tag="threadIdx.w"), [A]),
                "threadIdx.w", "loop 'i'")
    verify(_func(For(i, IntImm(0), IntImm(16), "thread_binding", store, thread_tag="threadIdx.x"), [A]))
    check_fails(_func(For(i, IntImm(0), FloatImm(16.0), "serial", store), [A]), "extent", "loop 'i'")


def test_inner_bindings_may_use_outer_block_iterators_and_lets():
    i, j, vo, vi, t = Var("i"), Var("j"), Var("vo"), Var("vi"), Var("t")
    inner = _realize("inner", [vo * 4 + t], [vi], BufferStore(A, FloatImm(0.0), (vi,)))
    outer = _realize("outer", [i], [vo], _loop(j, 4, LetStmt(t, j, inner)))
    verify(_func(_loop(i, 4, outer), [A]))
    # the inner block's iterator is not visible in the outer block
    leak = _realize("outer", [i], [vo], SeqStmt((_loop(j, 4, LetStmt(t, j, inner)),
                                                  BufferStore(A, FloatImm(0.0), (vi,)))))
    check_fails(_func(_loop(i, 4, leak), [A]), "'vi'", "block 'outer'")


def test_corpus_is_well_formed_before_and_after_lowering():
    from corpus import CORPUS

    for case in CORPUS:
        verify(case.func)
        verify(tdsl.lower(case.func, target="cpu"))
