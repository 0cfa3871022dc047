"""Silent wrong results found in review (house3), each now refused: an `if` between a block and its
loops, and transform_block_layout of loops that do not run the whole domain or carry a binding."""
import pytest
from sched_check import expect_error

import tdsl

UNDER_IF = '''
@T.prim_func
def f(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = A[vi] * T.float32(2)
    for i in range(8):
        if i < 4:
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                C[vi] = B[vi] + T.float32(1)
'''


@pytest.mark.parametrize("step", ["cache_write", "reindex_cache_write", "reverse_compute_inline",
                                  "reverse_compute_at"])
def test_steps_that_regenerate_a_block_refuse_an_enclosing_if(step):
    # the copy back / the regenerated loops would run C where the `if` skips it (C[4:8] would be
    # overwritten from an unset cache, or computed where the original leaves it alone)
    text = UNDER_IF if step != "reverse_compute_inline" else UNDER_IF.replace(
        "C: T.Buffer((8,), \"float32\")):", "C: T.Buffer((8,), \"float32\")):\n    B = T.alloc_buffer((8,), \"float32\")"
    ).replace("B: T.Buffer((8,), \"float32\"), ", "")
    sch = tdsl.Schedule(tdsl.parse(text))
    loop = sch.get_loops("B")[0]
    run = {"cache_write": lambda: sch.cache_write("C", 0, "local"),
           "reindex_cache_write": lambda: sch.reindex_cache_write("C", 0, "local", lambda i: (i,)),
           "reverse_compute_inline": lambda: sch.reverse_compute_inline("C"),
           "reverse_compute_at": lambda: sch.reverse_compute_at("C", loop)}[step]
    expect_error(sch, run, 'block "C"', "runs under `if i_1 < 4`")  # the second i prints as i_1


def test_transform_block_layout_refuses_loops_that_do_not_run_the_domain():
    sch = tdsl.Schedule(tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((8, 8), "float32"), C: T.Buffer((8, 8), "float32")):
    for i, j in T.grid(4, 8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            vj = T.axis.spatial(8, j)
            C[vi, vj] = A[vi, vj] + T.float32(1)
'''))
    expect_error(sch, lambda: sch.transform_block_layout("C", lambda i, j: (i * 8 + j,)), "loop i", "[0, 8)")


def test_transform_block_layout_refuses_a_bound_loop():
    sch = tdsl.Schedule(tdsl.parse('''
@T.prim_func
def f(A: T.Buffer((8, 8), "float32"), C: T.Buffer((8, 8), "float32")):
    for i in T.parallel(8):
        for j in range(8):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = A[vi, vj] + T.float32(1)
'''))
    expect_error(sch, lambda: sch.transform_block_layout("C", lambda i, j: (i * 8 + j,)), "loop i", "parallel")
