"""cuBLAS GEMM for target="cuda": ``sch.tensorize(block, "cublas.sgemm")`` (``"cublas.dgemm"``).

The block (``C[i, j] (=0) += A[i, k] * B[k, j]``, either operand stored transposed, loops above
i, j, k staying around the call) becomes a *host step* of the CUDA program: between the
kernel launches, the host calls ``cublasSgemm_v2`` / ``cublasDgemm_v2`` on the kernel's stream
(`tdsl.backends.cuda.host_steps`); the epilogue and every other block stay generated kernels.
As with `tdsl.intrinsics.blas`, the generic name is made concrete per block
(``cublas.sgemm_<ta><tb>_<M>x<N>x<K>[_init]``, a family) and the description is what the
interpreter and the CPU build compute.

The implementation is one ``T.call_extern("void", "tdsl_cublas_sgemm", ...)`` with row-major
arguments (transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc); it is never compiled:
the CUDA backend reads it into a `LibraryStep`, validates it, prints it in the source as the
call plan, and runs it through cuBLAS (row-major C = op(A) op(B) is the column-major
C^T = op(B)^T op(A)^T, so B goes first), or with ``emulate=True`` through numpy's BLAS.

The library is NVIDIA's wheel ``nvidia-cublas`` (``pip install tdsl[cublas]``), found at run
time (`find_library`); nothing is needed to schedule, lower or emulate.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import re

from ..errors import TargetError
from . import blas

ROUTINES = blas.ROUTINES
GENERIC = tuple(f"cublas.{r}" for r in ROUTINES)
FAMILY = r"cublas\.(sgemm|dgemm)_([nt])([nt])_(\d+)x(\d+)x(\d+)(_init)?(?:_o([ijk]{3})_([ijk]{3}))?"
CALL = {"sgemm": "tdsl_cublas_sgemm", "dgemm": "tdsl_cublas_dgemm"}
SYMBOLS = {"sgemm": "cublasSgemm_v2", "dgemm": "cublasDgemm_v2"}
HANDLE_SYMBOLS = ("cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2")
WHEEL_HINT = "pip install 'tdsl[cublas]' (NVIDIA's nvidia-cublas wheel)"


def is_concrete(name) -> bool:
    """Whether `name` is a concrete cuBLAS intrinsic made for one block."""
    return isinstance(name, str) and re.fullmatch(FAMILY, name) is not None


def concrete_name(routine: str, layout: str, m: int, n: int, k: int, init: bool, loops: str = "ijk",
                  iters: str = "ijk") -> str:
    return f"cublas.{routine}_{layout}_{m}x{n}x{k}" + ("_init" if init else "") + blas.order_suffix(loops, iters)


def impl_text(routine: str, layout: str, m: int, n: int, k: int, init: bool) -> str:
    dtype = ROUTINES[routine]
    a_shape, b_shape, _, _ = blas._shapes(layout, m, n, k)
    trans = ", ".join(f"T.int32({int(t == 't')})" for t in layout)
    return (f"@T.prim_func\ndef gemm_impl({blas._params(dtype, a_shape, b_shape, m, n)}):\n"
            f'    T.evaluate(T.call_extern("void", "{CALL[routine]}", {trans}, T.int64({m}), T.int64({n}), '
            f"T.int64({k}), T.{dtype}(1), T.address_of(A[0, 0]), T.int64(lda), T.address_of(B[0, 0]), "
            f"T.int64(ldb), T.{dtype}({0 if init else 1}), T.address_of(C[0, 0]), T.int64(ldc)))\n")


def register_concrete(match: re.Match) -> None:
    """The family factory: register the concrete intrinsic named by `match` (FAMILY)."""
    from ..script import parse
    from .registry import TensorIntrin

    routine, layout = match[1], match[2] + match[3]
    m, n, k, init = int(match[4]), int(match[5]), int(match[6]), bool(match[7])
    if min(m, n, k) < 1 or not blas._orders_ok(match):
        return
    desc = parse(blas.desc_text(routine, layout, m, n, k, init, match[8] or "ijk", match[9] or "ijk"))
    impl = parse(impl_text(routine, layout, m, n, k, init))
    TensorIntrin.register(match[0], desc, impl, target="cuda", doc=f"{SYMBOLS[routine]} (host step)",
                          override=True)


def _register_builtins() -> None:
    from .registry import TensorIntrin

    TensorIntrin.register_family(FAMILY, register_concrete)


# the library ----------------------------------------------------------------------------------

def _candidates() -> list[str]:
    """Where libcublas may be: the nvidia-cublas wheel (cu13 / cu12 layouts), then the loader."""
    import site

    roots = [p for p in site.getsitepackages() + [site.getusersitepackages()] if p]
    out: list[str] = []
    for root in roots:
        for pattern in ("nvidia/cu13/lib/libcublas.so*", "nvidia/cublas/lib/libcublas.so*"):
            out += sorted(glob.glob(os.path.join(root, pattern)), reverse=True)
    return [p for p in out if "Lt" not in os.path.basename(p)] + ["libcublas.so.13", "libcublas.so.12", "libcublas.so"]


@functools.cache
def find_library() -> tuple[str, ctypes.CDLL]:
    """(path, library) of cuBLAS with every symbol tdsl calls resolved (dlopen needs no GPU);
    a TargetError saying how to install it when it is missing."""
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            tried.append(f"{path}: {str(exc).splitlines()[0]}")
            continue
        missing = [s for s in (*SYMBOLS.values(), *HANDLE_SYMBOLS) if not hasattr(lib, s)]
        if missing:
            tried.append(f"{path}: lacks {', '.join(missing)}")
            continue
        return path, lib
    raise TargetError("cuBLAS (for the cublas.* intrinsics) is not installed: " + WHEEL_HINT
                      + ("\n  tried: " + "; ".join(tried[:4]) if tried else ""))


def available() -> bool:
    try:
        find_library()
    except TargetError:
        return False
    return True
