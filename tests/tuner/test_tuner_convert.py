"""tdsl.tune with cache_read(..., dtype=): the converting step is recorded in the tuning
database's traces and replays from it (build(database=)), with the numbers of the unscheduled
float16 GEMM."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import tdsl
from tdsl import T


@T.prim_func
def hgemm(A: T.Buffer((32, 48), "float16"), B: T.Buffer((48, 64), "float16"), C: T.Buffer((32, 64), "float32")):
    for i, j, k in T.grid(32, 64, 48):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")


def space(sch):
    """Both operands converted in packing copies, then a sampled tile of the fp32 GEMM."""
    c = sch.get_block("C")
    sch.cache_read(c, "B", "global", dtype="float32")
    sch.cache_read(c, "A", "global", dtype="float32")
    _i, j, _k = sch.get_loops(c)
    lanes = sch.sample_categorical([4, 8, 16], [1 / 3] * 3)
    _j0, j1 = sch.split(j, factors=[None, lanes])
    sch.vectorize(j1)


def test_tuned_converting_schedule_is_stored_and_rebuilt(tmp_path):
    db = str(tmp_path / "t.db")
    with ThreadPoolExecutor(2) as pool:
        result = tdsl.tune(hgemm, trials=3, space=space, batch=3, executor=pool, verbose=0, database=db)
    assert all('["dtype", "\\"float32\\""]' in r.trace for r in result.records)   # the stored JSON
    kernel = tdsl.build(hgemm, database=db)
    assert tdsl.structural_equal(kernel.func, result.best.schedule.func)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((32, 48)).astype(np.float16)
    b = rng.standard_normal((48, 64)).astype(np.float16)
    got, want = np.zeros((32, 64), np.float32), np.zeros((32, 64), np.float32)
    kernel(a, b, got)
    tdsl.interpret(hgemm, a, b, want)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
