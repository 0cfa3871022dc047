"""Library tensor intrinsics: GEMM through the BLAS that numpy already loads.

``sch.tensorize(block_or_loop, "blas.sgemm")`` (``"blas.dgemm"`` for float64) turns a
matmul-shaped block, ``C[i, j] (=0 with T.init) += A[i, k] * B[k, j]``, into one call of the
library's GEMM; loops outside the GEMM's three (a batch loop, a loop over heads) stay generated
code around the call, and so does every other block (an epilogue). The generic name is made
concrete for the block: ``blas.sgemm_<ta><tb>_<M>x<N>x<K>[_init]`` where ``ta``/``tb`` are
``n`` (A stored M x K, B stored K x N) or ``t`` (stored transposed), ``_init`` a description
with the block's ``T.init()`` (the call then passes beta = 0: no separate zeroing pass). Those
concrete names form a family (TensorIntrin.register_family), so a trace or a disk-cached kernel
finds them in any process.

Each concrete intrinsic is an ordinary pair: the description (what the interpreter and any
backend that cannot call the library compute) and an implementation that is one
``T.call_extern`` of the library routine with the operands' addresses (``T.address_of``), the
shape and the row strides bound by the matcher (``strides=("lda", 1)``: the inner stride must
be 1, the row stride may be anything).

Which library (found at run time, no new dependency; `find()`):

1. numpy's own OpenBLAS (``numpy.libs/libscipy_openblas64_*.so`` on Linux wheels), found among
   the libraries the process has loaded; its CBLAS entry points (``scipy_cblas_sgemm64_``:
   row-major, 64-bit integers; ``scipy_cblas_sgemm`` / ``cblas_sgemm``: 32-bit unless the
   library's configuration says ``USE64BITINT``);
2. else ``scipy.linalg.cython_blas`` when SciPy is installed: the Fortran ``sgemm``/``dgemm``
   (column-major, every argument by reference; the row-major product is computed as
   ``C^T = B^T A^T``).

The routine's address is given to LLVM under a tdsl name (``tdsl_blas_sgemm``); without a BLAS,
tensorize says so with a TargetError.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import re
from dataclasses import dataclass

from ..errors import TargetError

ROUTINES = {"sgemm": "float32", "dgemm": "float64"}
GENERIC = tuple(f"blas.{r}" for r in ROUTINES)
FAMILY = r"blas\.(sgemm|dgemm)_([nt])([nt])_(\d+)x(\d+)x(\d+)(_init)?(?:_o([ijk]{3})_([ijk]{3}))?"
ORDERS = ("ijk", "ikj", "jik", "jki", "kij", "kji")
"""Orders of the description's loops and of its block iterators (``_o<loops>_<iterators>`` in the
name, left out for ijk/ijk): a block whose loops or iterators are reordered matches as written."""
LAYOUTS = ("nn", "nt", "tn", "tt")


@dataclass(frozen=True)
class Blas:
    """A BLAS found in this process: `kind` "cblas" (row-major C interface, `int_dtype` ints by
    value) or "fortran" (column-major, arguments by reference); `where` says where it came from."""

    kind: str
    int_dtype: str
    where: str
    addresses: tuple[tuple[str, int], ...]   # (routine, address)

    def symbol(self, routine: str) -> str:
        """The name the generated code calls `routine` by (given to LLVM by `register_symbols`)."""
        return f"tdsl_blas_{self.kind}{self.int_dtype[3:]}_{routine}"


def _loaded_libraries() -> list[str]:
    """Shared libraries of this process whose name mentions BLAS (after importing numpy)."""
    import numpy  # loads numpy's BLAS

    paths: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                if "blas" in os.path.basename(path).lower() and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    here = os.path.dirname(os.path.dirname(numpy.__file__))
    for path in sorted(glob.glob(os.path.join(here, "numpy.libs", "*blas*"))
                       + glob.glob(os.path.join(here, "numpy", ".dylibs", "*blas*"))):
        if path not in paths:
            paths.append(path)
    return paths


def _int64_library(lib) -> bool:
    config = getattr(lib, "openblas_get_config", None) or getattr(lib, "scipy_openblas_get_config64_", None)
    if config is None:
        return False
    config.restype = ctypes.c_char_p
    return b"USE64BITINT" in (config() or b"")


def _from_numpy() -> Blas | None:
    for path in _loaded_libraries():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for pattern, ints in (("scipy_cblas_{r}64_", "int64"), ("cblas_{r}64_", "int64"),
                              ("scipy_cblas_{r}", None), ("cblas_{r}", None)):
            try:
                funcs = {r: getattr(lib, pattern.format(r=r)) for r in ROUTINES}
            except AttributeError:
                continue
            int_dtype = ints or ("int64" if _int64_library(lib) else "int32")
            addrs = tuple((r, int(ctypes.cast(f, ctypes.c_void_p).value or 0)) for r, f in funcs.items())
            return Blas("cblas", int_dtype, f"{os.path.basename(path)} ({pattern.format(r='sgemm')})", addrs)
    return None


def _from_scipy() -> Blas | None:
    try:
        from scipy.linalg import cython_blas
    except ImportError:
        return None
    capi = getattr(cython_blas, "__pyx_capi__", {})
    if not all(r in capi for r in ROUTINES):
        return None
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    addrs = tuple((r, get_pointer(capi[r], get_name(capi[r]))) for r in ROUTINES)
    return Blas("fortran", "int32", "scipy.linalg.cython_blas", addrs)


# Which sources `find` tries, in order; tests may restrict it (TDSL_BLAS=numpy|scipy|none).
SOURCES = {"numpy": _from_numpy, "scipy": _from_scipy}


@functools.cache
def _find(choice: str) -> Blas | None:
    names = list(SOURCES) if choice in ("", "auto") else [c for c in choice.split(",") if c in SOURCES]
    for name in names:
        found = SOURCES[name]()
        if found is not None:
            register_symbols(found)
            return found
    return None


def find() -> Blas:
    """The BLAS this process can call (see the module docs), its routines known to LLVM; a
    TargetError when there is none. TDSL_BLAS=numpy / scipy / none chooses the source."""
    choice = os.environ.get("TDSL_BLAS", "auto").strip().lower()
    found = _find(choice)
    if found is None:
        raise TargetError("no BLAS found for the blas.* intrinsics: numpy's bundled OpenBLAS exports no CBLAS "
                          "sgemm/dgemm here and scipy.linalg.cython_blas is not importable"
                          + (f" (TDSL_BLAS={choice!r})" if choice not in ("", "auto") else "")
                          + "; install scipy, or compute the block with generated code (tensorize it with an "
                          "x86.* micro-kernel or leave it untensorized)")
    return found


def available() -> bool:
    try:
        find()
    except TargetError:
        return False
    return True


def register_symbols(blas: Blas) -> None:
    """Tell LLVM where the routines are, under the names the generated code calls."""
    from llvmlite import binding as llvm

    for routine, addr in blas.addresses:
        llvm.add_symbol(blas.symbol(routine), addr)


# descriptions and implementations -----------------------------------------------------------

def is_concrete(name: str) -> bool:
    """Whether `name` is a concrete library intrinsic made for one block ("blas.sgemm_nn_64x64x64")."""
    return re.fullmatch(FAMILY, name) is not None


def order_suffix(loops: str = "ijk", iters: str = "ijk") -> str:
    return "" if loops == iters == "ijk" else f"_o{loops}_{iters}"


def concrete_name(routine: str, layout: str, m: int, n: int, k: int, init: bool, loops: str = "ijk",
                  iters: str = "ijk") -> str:
    return f"blas.{routine}_{layout}_{m}x{n}x{k}" + ("_init" if init else "") + order_suffix(loops, iters)


def _shapes(layout: str, m: int, n: int, k: int) -> tuple[tuple[int, int], tuple[int, int], str, str]:
    ta, tb = layout[0], layout[1]
    a_shape = (m, k) if ta == "n" else (k, m)
    b_shape = (k, n) if tb == "n" else (n, k)
    a_idx = "vi, vk" if ta == "n" else "vk, vi"
    b_idx = "vk, vj" if tb == "n" else "vj, vk"
    return a_shape, b_shape, a_idx, b_idx


def _params(dtype: str, a_shape, b_shape, m: int, n: int) -> str:
    return (f'A: T.Buffer({a_shape}, "{dtype}", strides=("lda", 1)), '
            f'B: T.Buffer({b_shape}, "{dtype}", strides=("ldb", 1)), '
            f'C: T.Buffer(({m}, {n}), "{dtype}", strides=("ldc", 1))')


def desc_text(routine: str, layout: str, m: int, n: int, k: int, init: bool, loops: str = "ijk",
              iters: str = "ijk") -> str:
    dtype = ROUTINES[routine]
    a_shape, b_shape, a_idx, b_idx = _shapes(layout, m, n, k)
    zero = f"            with T.init():\n                C[vi, vj] = T.{dtype}(0)\n" if init else ""
    extent = {"i": m, "j": n, "k": k}
    kinds = "".join("R" if r == "k" else "S" for r in iters)
    return (f"@T.prim_func\ndef gemm_desc({_params(dtype, a_shape, b_shape, m, n)}):\n"
            f"    for {', '.join(loops)} in T.grid({', '.join(str(extent[r]) for r in loops)}):\n"
            f'        with T.block("gemm"):\n'
            f"            {', '.join('v' + r for r in iters)} = T.axis.remap(\"{kinds}\", [{', '.join(iters)}])\n"
            f"{zero}"
            f"            C[vi, vj] = C[vi, vj] + A[{a_idx}] * B[{b_idx}]\n")


CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS = 101, 111, 112


def impl_text(blas: Blas, routine: str, layout: str, m: int, n: int, k: int, init: bool) -> str:
    dtype = ROUTINES[routine]
    a_shape, b_shape, _, _ = _shapes(layout, m, n, k)
    beta = 0 if init else 1
    sym = blas.symbol(routine)
    head = f"@T.prim_func\ndef gemm_impl({_params(dtype, a_shape, b_shape, m, n)}):\n"
    if blas.kind == "cblas":
        it = blas.int_dtype
        trans = [CBLAS_NO_TRANS if t == "n" else CBLAS_TRANS for t in layout]
        args = (f"T.int32({CBLAS_ROW_MAJOR}), T.int32({trans[0]}), T.int32({trans[1]}), "
                f"T.{it}({m}), T.{it}({n}), T.{it}({k}), T.{dtype}(1), "
                f'T.address_of(A[0, 0]), T.cast(lda, "{it}"), T.address_of(B[0, 0]), T.cast(ldb, "{it}"), '
                f'T.{dtype}({beta}), T.address_of(C[0, 0]), T.cast(ldc, "{it}")')
        return head + f'    T.evaluate(T.call_extern("void", "{sym}", {args}))\n'
    # Fortran, column-major: the row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T,
    # so B comes first, with m and n swapped; every argument is passed by reference.
    ch = {"n": 78, "t": 84}   # 'N', 'T'
    return (head
            + '    flags = T.alloc_buffer((2,), "int8", scope="local")\n'
            + '    ints = T.alloc_buffer((6,), "int32", scope="local")\n'
            + f'    scal = T.alloc_buffer((2,), "{dtype}", scope="local")\n'
            + f"    flags[0] = T.int8({ch[layout[1]]})\n    flags[1] = T.int8({ch[layout[0]]})\n"
            + f"    ints[0] = {n}\n    ints[1] = {m}\n    ints[2] = {k}\n"
            + "    ints[3] = ldb\n    ints[4] = lda\n    ints[5] = ldc\n"
            + f"    scal[0] = T.{dtype}(1)\n    scal[1] = T.{dtype}({beta})\n"
            + f'    T.evaluate(T.call_extern("void", "{sym}", T.address_of(flags[0]), T.address_of(flags[1]), '
            + "T.address_of(ints[0]), T.address_of(ints[1]), T.address_of(ints[2]), T.address_of(scal[0]), "
            + "T.address_of(B[0, 0]), T.address_of(ints[3]), T.address_of(A[0, 0]), T.address_of(ints[4]), "
            + "T.address_of(scal[1]), T.address_of(C[0, 0]), T.address_of(ints[5])))\n")


def _orders_ok(match: re.Match) -> bool:
    return all(o is None or o in ORDERS for o in (match[8], match[9]))


def register_concrete(match: re.Match) -> None:
    """The family factory: register the concrete intrinsic named by `match` (FAMILY)."""
    from ..script import parse
    from .registry import TensorIntrin

    routine, ta, tb = match[1], match[2], match[3]
    m, n, k, init = int(match[4]), int(match[5]), int(match[6]), bool(match[7])
    if min(m, n, k) < 1 or not _orders_ok(match):
        return
    layout = ta + tb
    blas = find()
    desc = parse(desc_text(routine, layout, m, n, k, init, match[8] or "ijk", match[9] or "ijk"))
    impl = parse(impl_text(blas, routine, layout, m, n, k, init))
    TensorIntrin.register(match[0], desc, impl, doc=f"{routine} from {blas.where}", override=True)


def _register_builtins() -> None:
    from .registry import TensorIntrin

    TensorIntrin.register_family(FAMILY, register_concrete)
