"""The tests' way to run hand-written CUDA C++ with the Hopper device functions of
tdsl.backends.cuda.sm90 in the emulator."""
from __future__ import annotations

from tdsl.backends.cuda import sm90
from tdsl.backends.cuda.emulator.raw import run_source

HEADER = '#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n'


def source(kernels: str, wgmma: tuple = ()) -> str:
    """The device functions and `kernels` as one CUDA source."""
    return HEADER + sm90.device_functions(wgmma) + kernels


def emulate(src: str, name: str, args: list, grid=(1, 1, 1), block=(128, 1, 1), order: int = 0, seed: int = 1):
    """Run kernel `name` of `src` once in the emulator on numpy arrays / ctypes scalars (arrays updated)."""
    run_source(src, name, args, grid, block, order, seed)
