"""tdsl.ir.tree: the one way to walk, find and replace statements by path."""
import tdsl
from tdsl.ir import BlockRealize, For, SeqStmt
from tdsl.ir.tree import all_realizes, child_realizes, children, find_path, find_realize, replace_at, walk

SRC = '''
@T.prim_func
def two(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32"), C: T.Buffer((4, 4), "float32")):
    for i in range(4):
        for j in range(4):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] + T.float32(1)
        for j in range(4):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = B[vi, vj] * T.float32(2)
'''


def test_walk_is_program_order_and_descend_prunes():
    f = tdsl.parse(SRC)
    names = [s.block.name for s in walk(f.body) if isinstance(s, BlockRealize)]
    assert names == ["root", "B", "C"]
    assert [r.block.name for r in all_realizes(f.body)] == names
    loops = [s.loop_var.name for s in walk(f.body) if isinstance(s, For)]
    assert loops == ["i", "j", "j"]
    outer_only = [s for s in walk(f.body, lambda s: not isinstance(s, For)) if isinstance(s, For)]
    assert [s.loop_var.name for s in outer_only] == ["i"]
    assert [r.block.name for r in child_realizes(f.body)] == ["B", "C"]


def test_find_and_replace_rebuild_only_the_path():
    f = tdsl.parse(SRC)
    realize, path = find_realize(f.body, "C")
    assert isinstance(path[-1], For) and find_realize(f.body, "nope") is None
    seq = next(s for s in walk(f.body) if isinstance(s, SeqStmt))
    assert list(children(seq)) == list(seq.seq)
    g = replace_at(f, path, realize, find_realize(f.body, "B")[0])
    assert [r.block.name for r in all_realizes(g.body)] == ["root", "B", "B"]
    assert find_path(f.body, lambda s: s is realize) == (realize, path)  # f itself is unchanged
