"""Run hand-written CUDA C++ in the emulator: `run_source(source, "kernel", args, grid, block)`.

The source follows the generated code's conventions the emulator reads: one line per kernel
signature (`extern "C" __global__ void name(float* __restrict__ A, int n) {`), shared arrays
declared `__shared__ __align__(16) T name[N];` (16 to 1024) or as views into the dynamic array
(`extern __shared__ __align__(1024) unsigned char tdsl_smem[];` then `T (&name)[N] =
*reinterpret_cast<T (*)[N]>(tdsl_smem + OFFSET);`, sized by `dynamic_shared`), local arrays
`__align__(16) T name[N];`. Arrays are numpy arrays, updated in place; scalars are ctypes values:

    run_source(src, "scale", [a, ctypes.c_float(2.0)], grid=(4, 1, 1), block=(128, 1, 1))
"""
from __future__ import annotations

import ctypes

import numpy as np

from ....errors import TargetError
from .compiler import find_compiler, load
from .compiler import launcher as _launcher
from .translate import translate


def run_source(source: str, kernel: str, args: list, grid=(1, 1, 1), block=(128, 1, 1), order: int = 0,
               seed: int = 1, dynamic_shared: int = 0) -> str:
    """Run `kernel` of `source` once (thread order 0 ascending, 1 descending, 2 shuffled by `seed`;
    `dynamic_shared`: the launch's bytes of dynamic shared memory, for views into `tdsl_smem`);
    TargetError with the emulator's report (race, deadlock, out-of-bounds access) on failure.
    Returns the run's ldmatrix bank report (`stats.parse_bank_report` reads it)."""
    find_compiler()
    unit, kernels = translate(source)
    found = {k.name: k for k in kernels}
    if kernel not in found:
        raise TargetError(f"no kernel {kernel!r} in the source; it has {', '.join(found) or 'none'}")
    emu = found[kernel]
    if len(args) != len(emu.params):
        raise TargetError(f"kernel {kernel!r} takes {len(emu.params)} arguments "
                          f"({', '.join(p.name for p in emu.params)}), got {len(args)}")
    ptrs, sizes, keep = [], [], []
    for p, a in zip(emu.params, args):
        if p.pointer:
            if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
                raise TargetError(f"argument {p.name!r} of {kernel!r} is a pointer: pass a C-contiguous numpy array")
            ptrs.append(a.ctypes.data)
            sizes.append(a.nbytes // max(1, _ctype_size(p.ctype)))
        else:
            if not isinstance(a, ctypes._SimpleCData):
                raise TargetError(f"argument {p.name!r} of {kernel!r} is a {p.ctype}: pass a ctypes value "
                                  f"(e.g. ctypes.c_int(3))")
            keep.append(a)
            ptrs.append(ctypes.addressof(a))
            sizes.append(1)
    lib = load(unit)
    fn = _launcher(lib, kernel)
    lib.tdsl_emu_bank_clear()
    lib.tdsl_emu_set_dynamic_shared(ctypes.c_longlong(dynamic_shared))
    if fn((ctypes.c_void_p * len(ptrs))(*ptrs), (ctypes.c_longlong * len(sizes))(*sizes),
          (ctypes.c_longlong * 6)(*grid, *block), order, seed, -1):
        lib.tdsl_emu_error.restype = ctypes.c_char_p
        raise TargetError(f"kernel {kernel!r} (emulated): {lib.tdsl_emu_error().decode(errors='replace')}")
    lib.tdsl_emu_bank_report.restype = ctypes.c_char_p
    return lib.tdsl_emu_bank_report().decode()


_SIZES = {"half": 2, "nv_bfloat16": 2, "float": 4, "double": 8, "int": 4, "unsigned int": 4, "char": 1,
          "signed char": 1, "unsigned char": 1, "short": 2, "unsigned short": 2, "long long": 8,
          "unsigned long long": 8, "bool": 1}


def _ctype_size(ctype: str) -> int:
    return _SIZES.get(ctype.strip(), 1)
