"""When several GPU rules decline a block, each one's reason reaches kernel.notes: the sm_90a wgmma
rule's and then the sm_80 mma rule's for a fp16 / bf16 GEMM neither takes (a block holds a list of
notes; lowering collects them all)."""
import json

import pytest

import tdsl
from tdsl.ir.attrs import LOWER_NOTE, note_texts, with_note
from tdsl.lower import lower, notes
from tdsl.schedule.trace import Trace


def gemm(M, N, K, dtype):
    return tdsl.parse(f'''
@T.prim_func
def gemm(A: T.Buffer(({M}, {K}), "{dtype}"), B: T.Buffer(({K}, {N}), "{dtype}"), C: T.Buffer(({M}, {N}), "float32")):
    for i, j, k in T.grid({M}, {N}, {K}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")
''')


WGMMA = "block 'C': not on the sm_90a wgmma pipeline (m = 48 must be a multiple of 64"
MMA = "GEMM block 'C' is not on the tensor cores (mma.sync): the reduction extent 48 is not a multiple of the k step"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_both_rules_reasons_reach_the_notes(dtype):
    f = gemm(48, 48, 48, dtype)
    sch = tdsl.auto_schedule(f, target="cuda -arch=sm_90a")
    found = notes(lower(sch, target="cuda"))
    assert [n for n in found if n.startswith(WGMMA)] and [n for n in found if n.startswith(MMA)], found
    # the note list replays from the trace (and its JSON) like any annotation
    back = Trace.from_json(json.dumps(sch.trace.as_json())).apply(f)
    assert tdsl.structural_equal(back.func, sch.func)
    # on sm_80 only the mma rule speaks
    alone = notes(lower(tdsl.auto_schedule(f, target="cuda -arch=sm_80"), target="cuda"))
    assert [n for n in alone if n.startswith(MMA)] and not [n for n in alone if "wgmma" in n], alone


def test_the_kernels_notes_list_both():
    pytest.importorskip("cuda.bindings")
    sch = tdsl.auto_schedule(gemm(48, 48, 48, "float16"), target="cuda -arch=sm_90a")
    with pytest.warns(tdsl.PerformanceWarning):
        kernel = tdsl.build(sch, target="cuda", arch="sm_90a")
    assert [n for n in kernel.notes if n.startswith(WGMMA)] and [n for n in kernel.notes if n.startswith(MMA)]


def test_a_note_joins_those_already_on_the_block():
    assert with_note((), "a") == "a"
    assert with_note((("x", 1), (LOWER_NOTE, "a")), "b") == ["a", "b"]
    assert with_note(((LOWER_NOTE, ("a", "b")),), "c") == ["a", "b", "c"]
    assert with_note(((LOWER_NOTE, "a"),), "a") == "a"            # the same note once
    assert note_texts("a") == ["a"] and note_texts(("a", "b")) == ["a", "b"]
