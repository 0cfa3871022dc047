"""structural_equal / structural_diff / structural_hash / same_expr: meaning up to renaming, the
first difference's path, and no recursion limit (a 3,000-term sum is a 3,000-deep tree)."""
from __future__ import annotations

import tdsl
from tdsl.ir.structural import same_expr


def _program(op: str = "+", dim: int = 4, last: str = "A[1]") -> str:
    return f'''
@T.prim_func
def f(A: T.Buffer(({dim},), "float32"), B: T.Buffer((1,), "float32")):
    for i in range(2):
        with T.block("B"):
            vi = T.axis.spatial(2, i)
            B[0] = A[vi] {op} {last}
'''


def test_renamed_programs_are_equal_and_hash_alike():
    a = tdsl.parse(_program())
    b = tdsl.parse(_program().replace("A", "X").replace("vi", "w"))
    assert tdsl.structural_equal(a, b) and tdsl.structural_diff(a, b) is None
    assert tdsl.structural_hash(a) == tdsl.structural_hash(b)


def test_the_diff_names_the_path_of_the_first_difference():
    a, b = tdsl.parse(_program()), tdsl.parse(_program(op="*"))
    diff = tdsl.structural_diff(a, b)
    assert diff.startswith("first difference at PrimFunc.body/BlockRealize.block/Block.body/For.body/"
                           "BlockRealize.block/Block.body/BufferStore.value/Binary.op: 'add' vs 'mul'")
    assert not tdsl.structural_equal(a, b) and tdsl.structural_hash(a) != tdsl.structural_hash(b)
    shape = tdsl.structural_diff(tdsl.parse(_program()), tdsl.parse(_program(dim=8)))
    assert "PrimFunc.params/[0]/buffer A.shape/[0]/IntImm.value: 4 vs 8" in shape


def test_two_names_for_one_definition_differ():
    text = '''
@T.prim_func
def g(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    B[0] = A[0] + {}[0]
'''
    diff = tdsl.structural_diff(tdsl.parse(text.format("B")), tdsl.parse(text.format("A")))
    assert diff.startswith("first difference at PrimFunc.body/BufferStore.value/Binary.b/BufferLoad.buffer: "
                           "a variable or buffer refers to different definitions")


def _deep_sum(n: int, last: int = 0) -> tdsl.PrimFunc:
    terms = " + ".join(f"A[{k % 4}]" for k in range(n - 1)) + f" + A[{last}]"
    return tdsl.parse(f'''
@T.prim_func
def f(A: T.Buffer((4,), "float32"), B: T.Buffer((1,), "float32")):
    B[0] = {terms}
''')


def test_a_3000_term_sum_compares_and_hashes():
    a, b, c = _deep_sum(3000), _deep_sum(3000), _deep_sum(3000, last=1)
    assert tdsl.structural_equal(a, b)
    assert tdsl.structural_hash(a) == tdsl.structural_hash(b) != tdsl.structural_hash(c)
    diff = tdsl.structural_diff(a, c)
    assert diff is not None and "IntImm.value: 0 vs 1" in diff
    assert same_expr(a.body.value, a.body.value) and not same_expr(a.body.value, b.body.value)
