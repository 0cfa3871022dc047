"""Runs hand-written CUDA C++ (the Hopper device functions of tdsl.backends.cuda.sm90) in the
emulator and compiles it with NVRTC: the tests' one way in below tdsl.build."""
from __future__ import annotations

import ctypes

import numpy as np

from tdsl.backends.cuda import sm90
from tdsl.backends.cuda.emulator.compiler import load
from tdsl.backends.cuda.emulator.kernel import _launcher
from tdsl.backends.cuda.emulator.translate import translate
from tdsl.errors import TargetError

HEADER = '#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n'


def source(kernels: str, wgmma: tuple = ()) -> str:
    """The device functions and `kernels` as one CUDA source."""
    return HEADER + sm90.device_functions(wgmma) + kernels


def emulate(src: str, name: str, args: list, grid=(1, 1, 1), block=(128, 1, 1), order: int = 0, seed: int = 1):
    """Run kernel `name` of `src` once in the emulator on numpy arrays / ctypes scalars (arrays updated)."""
    unit, kernels = translate(src)
    lib = load(unit)
    emu = {k.name: k for k in kernels}[name]
    ptrs, sizes, keep = [], [], []
    for p, a in zip(emu.params, args):
        if p.pointer:
            assert isinstance(a, np.ndarray) and a.flags.c_contiguous
            ptrs.append(a.ctypes.data)
            sizes.append(a.size if a.dtype.itemsize > 1 else a.size)
        else:
            keep.append(a)
            ptrs.append(ctypes.addressof(a))
            sizes.append(1)
    arr_p = (ctypes.c_void_p * len(ptrs))(*ptrs)
    arr_s = (ctypes.c_longlong * len(sizes))(*sizes)
    dims = (ctypes.c_longlong * 6)(*grid, *block)
    fn = _launcher(lib, name)
    if fn(arr_p, arr_s, dims, order, seed, -1):
        lib.tdsl_emu_error.restype = ctypes.c_char_p
        raise TargetError(lib.tdsl_emu_error().decode(errors="replace"))
