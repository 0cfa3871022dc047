"""infer_block_regions, region_union, region_covers."""
import tdsl
from tdsl.arith import infer_block_regions, region_covers, region_union
from tdsl.dtypes import float32, int32
from tdsl.ir import (
    Allocate,
    Block,
    BlockRealize,
    Buffer,
    BufferRegion,
    BufferStore,
    FloatImm,
    For,
    IntImm,
    IterVar,
    LetStmt,
    Ramp,
    Range,
    SeqStmt,
    Var,
    collect,
    structural_equal,
)
from tdsl.script.printer import expr_str


def text(regions):
    """Regions as the script prints them: A[vi, 0:128]."""
    out = []
    for r in regions:
        dims = []
        for rng in r.region:
            lo = expr_str(rng.min)
            if isinstance(rng.extent, IntImm) and rng.extent.value == 1:
                dims.append(lo)
            else:
                dims.append(f"{lo}:{expr_str(tdsl_simplify(rng.min + rng.extent))}")
        out.append(f"{r.buffer.name}[{', '.join(dims)}]")
    return ", ".join(out)


def tdsl_simplify(e):
    from tdsl.arith import simplify
    return simplify(e)


def block(func, name):
    return next(b for b in collect(func.body, Block) if b.name == name)


def infer(func, name):
    reads, writes = infer_block_regions(block(func, name))
    return text(reads), text(writes)


MATMUL = '''
@T.prim_func
def matmul(A: T.Buffer((128, 128), "float32"), B: T.Buffer((128, 128), "float32"),
           C: T.Buffer((128, 128), "float32")):
    for i, j, k in T.grid(128, 128, 128):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''


def test_matmul_reads_and_writes():
    f = tdsl.parse(MATMUL)
    assert infer(f, "C") == ("C[vi, vj], A[vi, vk], B[vk, vj]", "C[vi, vj]")


def test_declared_regions_equal_the_inferred_ones():
    f = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((128, 128), "float32"), B: T.Buffer((128,), "float32")):
    for i0, i1, k0 in T.grid(4, 32, 4):
        with T.block("B"):
            vi = T.axis.spatial(128, i0 * 32 + i1)
            vk = T.axis.reduce(4, k0)
            T.reads(B[vi], A[vi, vk * 32:vk * 32 + 32])
            T.writes(B[vi])
            with T.init():
                B[vi] = T.float32(0)
            for k in range(32):
                B[vi] = B[vi] + A[vi, vk * 32 + k]
''')
    b = block(f, "B")
    reads, writes = infer_block_regions(b)
    assert structural_equal(reads, b.reads) and structural_equal(writes, b.writes)


def test_inner_loops_are_relaxed_and_accesses_unioned():
    f = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((128, 128), "float32"), B: T.Buffer((128,), "float32")):
    for i in range(127):
        with T.block("S"):
            vi = T.axis.spatial(127, i)
            for k in range(64):
                A[vi, k * 2] = B[vi] + B[vi + 1] + A[vi, k * 2 + 1]
''')
    assert infer(f, "S") == ("B[vi:vi + 2], A[vi, 1:128]", "A[vi, 0:127]")


def test_nested_block_contributes_its_regions_relaxed():
    f = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for i0 in range(4):
        with T.block("outer"):
            vo = T.axis.spatial(4, i0)
            for i1 in range(32):
                with T.block("inner"):
                    vi = T.axis.spatial(128, vo * 32 + i1)
                    B[vi] = A[vi] * T.float32(2)
''')
    assert infer(f, "inner") == ("A[vi]", "B[vi]")
    assert infer(f, "outer") == ("A[vo * 32:vo * 32 + 32]", "B[vo * 32:vo * 32 + 32]")


def test_alloc_buffers_are_excluded_and_init_reads_count():
    f = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i, k in T.grid(16, 4):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            T.reads(A[vi], B[vi])
            T.writes(B[vi])
            tmp = T.alloc_buffer((4,), "float32", scope="local")
            with T.init():
                B[vi] = A[vi]
            tmp[vk] = A[vi]
            B[vi] = B[vi] + tmp[vk]
''')
    assert infer(f, "B") == ("A[vi], B[vi]", "B[vi]")


def test_undecidable_union_covers_the_whole_dimension():
    f = tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), n: T.int32):
    for i in range(32):
        with T.block("B"):
            vi = T.axis.spatial(32, i)
            B[vi] = A[vi] + A[n]
''')
    assert infer(f, "B") == ("A[0:64]", "B[vi]")


def _block(name, iters, body, allocs=()):
    return Block(name, tuple(IterVar(v, Range.from_extent(e), "S") for v, e in iters), (), (), body,
                 alloc_buffers=tuple(allocs))


def test_lets_allocates_and_vector_indices():
    A = Buffer("A", (IntImm(64),), float32)
    B = Buffer("B", (IntImm(64),), float32)
    T_ = Buffer("T", (IntImm(4),), float32, scope="local")
    vi, k, t = Var("vi"), Var("k"), Var("t")
    body = Allocate(T_, For(k, IntImm(0), IntImm(4), "serial", LetStmt(
        t, vi * 4 + k, SeqStmt((BufferStore(T_, A[t], (k,)), BufferStore(B, T_[k], (t,)))))))
    reads, writes = infer_block_regions(_block("L", [(vi, 16)], body))
    assert (text(reads), text(writes)) == ("A[vi * 4:vi * 4 + 4]", "B[vi * 4:vi * 4 + 4]")
    vec = BufferStore(B, A[Ramp(vi * 4, IntImm(1), 4)], (Ramp(vi * 4 + 3, IntImm(-1), 4),))
    reads, writes = infer_block_regions(_block("V", [(vi, 16)], vec))
    assert (text(reads), text(writes)) == ("A[vi * 4:vi * 4 + 4]", "B[vi * 4:vi * 4 + 4]")
    odd = BufferStore(B, A[Ramp(vi, vi, 4)], (vi,))
    reads, _ = infer_block_regions(_block("W", [(vi, 16)], odd))
    assert text(reads) == "A[0:64]"


def test_nested_realize_without_declared_regions_is_inferred():
    A = Buffer("A", (IntImm(64),), float32)
    vo, vi, i1 = Var("vo"), Var("vi"), Var("i1")
    inner = _block("inner", [(vi, 64)], BufferStore(A, FloatImm(1.0), (vi,)))
    realize = BlockRealize((vo * 8 + i1,), IntImm(1, tdsl.ir.TRUE.dtype), inner)
    outer = _block("outer", [(vo, 8)], For(i1, IntImm(0), IntImm(8), "serial", realize))
    reads, writes = infer_block_regions(outer)
    assert reads == () and text(writes) == "A[vo * 8:vo * 8 + 8]"


def test_region_union_and_covers():
    A = Buffer("A", (IntImm(128), IntImm(64)), float32)
    i = Var("i")
    r1 = BufferRegion(A, (Range(i * 4, IntImm(4)), Range(IntImm(0), IntImm(8))))
    r2 = BufferRegion(A, (Range(i * 4 + 2, IntImm(4)), Range(IntImm(8), IntImm(8))))
    u = region_union([r1, r2])
    assert text([u]) == "A[i * 4:i * 4 + 6, 0:16]"
    assert region_covers(u, r1) and region_covers(u, r2)
    assert not region_covers(r1, u)
    n = Var("n")
    r3 = BufferRegion(A, (Range(n, IntImm(1)), Range(IntImm(0), IntImm(8))))
    assert text([region_union([r1, r3])]) == "A[0:128, 0:8]"
    j = Var("j")
    inner = BufferRegion(A, (Range(i * 4 + j, IntImm(1)), Range(IntImm(0), IntImm(8))))
    assert region_covers(r1, inner, {j: Range.from_extent(4)})
    assert not region_covers(r1, inner, {j: Range.from_extent(5)})
    assert not region_covers(r1, inner)
    B = Buffer("B", (IntImm(128),), int32)
    try:
        region_union([r1, BufferRegion(B, (Range(i, IntImm(1)),))])
    except ValueError as e:
        assert "'A'" in str(e) and "'B'" in str(e)
    else:
        raise AssertionError("region_union of two buffers must fail")


def test_mixed_index_dtypes_fall_back_to_the_whole_dimension():
    from tdsl.dtypes import int64
    from tdsl.ir import Cast
    A = Buffer("A", (IntImm(64),), float32)
    B = Buffer("B", (IntImm(64),), float32)
    vi = Var("vi")
    body = BufferStore(B, A[vi] + A[Cast(int64, vi) + IntImm(1, int64)], (vi,))
    reads, writes = infer_block_regions(_block("M", [(vi, 63)], body))
    assert (text(reads), text(writes)) == ("A[0:64]", "B[vi]")
