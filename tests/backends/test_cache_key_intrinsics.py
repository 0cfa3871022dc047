"""The kernel cache key covers the tensor intrinsics a function uses.

A tensorized block only names its intrinsic; lowering swaps in the implementation registered
at build time. Re-registering the name (`override=True`) with another implementation must
rebuild, from the memory cache and from the disk cache, and registering the first one again
must find its code again.
"""
import os
import subprocess
import sys

import numpy as np

import tdsl
from tdsl.backends.llvm.compile import _tensor_intrin_names

DESC = '''
@T.prim_func
def scale8_desc(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    for j in range(8):
        with T.block("B"):
            vj = T.axis.spatial(8, j)
            B[vj] = A[vj] * T.float32(2)
'''

# Two "implementations" of the same description that give different results, so that stale
# code shows in the output. (Real implementations compute the description; nothing here
# relies on which one is right.)
IMPL = '''
@T.prim_func
def scale8_impl(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    B[T.Ramp(0, 1, 8)] = A[T.Ramp(0, 1, 8)] * T.Broadcast(T.float32({factor}), 8)
'''

FUNC = '''
@T.prim_func
def scale(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i in range(64):
        with T.block("B"):
            vi = T.axis.spatial(64, i)
            B[vi] = A[vi] * T.float32(2)
'''

NAME = "test.cache_key.scale8"


def register(factor: float, name: str = NAME) -> None:
    tdsl.TensorIntrin.register(name, tdsl.parse(DESC), tdsl.parse(IMPL.format(factor=factor)), override=True)


def tensorized(name: str = NAME) -> tdsl.PrimFunc:
    sch = tdsl.Schedule(tdsl.parse(FUNC))
    (i,) = sch.get_loops(sch.get_block("B"))
    _, inner = sch.split(i, factors=[None, 8])
    sch.tensorize(inner, name)
    return sch.func


def test_override_rebuilds_from_the_memory_cache():
    name = NAME + ".memory"
    a = np.arange(64, dtype=np.float32)
    register(2.0, name)
    func = tensorized(name)
    first = tdsl.build(func)
    np.testing.assert_array_equal(first(a), a * 2)
    register(3.0, name)
    second = tdsl.build(func)
    assert second._compiled is not first._compiled
    np.testing.assert_array_equal(second(a), a * 3)
    register(2.0, name)                       # the first implementation again: its code again
    assert tdsl.build(func)._compiled is first._compiled


def test_untensorized_functions_keep_their_key():
    assert _tensor_intrin_names(tdsl.parse(FUNC).body) == []
    register(2.0)
    assert _tensor_intrin_names(tensorized().body) == [NAME]


RUN = '''
import sys, numpy as np, tdsl
sys.path.insert(0, sys.argv[1])
from test_cache_key_intrinsics import register, tensorized
register(float(sys.argv[2]))
k = tdsl.build(tensorized())
a = np.arange(64, dtype=np.float32)
print("disk" if k.from_cache else "built", float(k(a)[1]))
'''


def _run(cache_dir, factor: float) -> list[str]:
    env = {**os.environ, "TDSL_CACHE_DIR": str(cache_dir)}
    env.pop("TDSL_DISABLE_DISK_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", RUN, os.path.dirname(__file__), str(factor)], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()


def test_override_rebuilds_from_the_disk_cache(tmp_path):
    assert _run(tmp_path, 2.0) == ["built", "2.0"]
    assert _run(tmp_path, 3.0) == ["built", "3.0"]    # was ["disk", "2.0"]: the old implementation's code
    assert _run(tmp_path, 2.0) == ["disk", "2.0"]
    assert _run(tmp_path, 3.0) == ["disk", "3.0"]
