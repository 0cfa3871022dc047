"""The kernel ABI: what the generated entry points read of numpy's and CPython's objects, and
what they return.

The checked entry receives a tuple of the call's arguments and reads each ndarray's struct
directly (data pointer, ndim, dims, dtype, flags): the offsets below are numpy's PyArrayObject
and CPython's PyTupleObject on 64-bit builds (stable public ABI). `numpy_layout_ok()` checks
them against the running interpreter before the Kernel uses that entry.
"""
from __future__ import annotations

import ctypes

import numpy as np

# an exported library (export.py writes it, load.py reads it): its metadata's data symbol and format
FORMAT = 1                      # the metadata's format: export writes it, load reads only it
META_SYMBOL = "tdsl_export_meta"

# numpy's PyArrayObject layout (stable public ABI; checked at run time by numpy_layout_ok)
ND_DATA, ND_NDIM, ND_DIMS, ND_DESCR, ND_FLAGS, OB_TYPE = 16, 24, 32, 56, 64, 8
TUPLE_SIZE, TUPLE_ITEMS = 16, 24     # CPython's PyTupleObject: ob_size, ob_item[]
NPY_C_CONTIGUOUS, NPY_ALIGNED, NPY_WRITEABLE = 0x1, 0x100, 0x400

# what the checked entry returns besides 0 (ok) and k > 0 (bounds check k failed)
ERR_SLOW, ERR_NOMEM, ERR_TOO_MANY = -1, -2, -3   # ERR_TOO_MANY: past int32 indices
ERR_INTERRUPTED = -4                              # Ctrl-C stopped a parallel loop (runtime.py)


def numpy_layout_ok() -> bool:
    """True when numpy's array struct and CPython's tuple have the layout the fast entries read
    (checked here, not assumed)."""
    x = np.zeros((3, 5), np.float32)
    base = id(x)
    try:
        ok = (ctypes.c_void_p.from_address(base + OB_TYPE).value == id(np.ndarray)
              and ctypes.c_void_p.from_address(base + ND_DATA).value == x.__array_interface__["data"][0]
              and ctypes.c_int32.from_address(base + ND_NDIM).value == 2
              and ctypes.c_void_p.from_address(base + ND_DESCR).value == id(x.dtype)
              and ctypes.c_int32.from_address(base + ND_FLAGS).value & NPY_C_CONTIGUOUS == NPY_C_CONTIGUOUS)
        dims = ctypes.c_void_p.from_address(base + ND_DIMS).value
        ok = ok and tuple((ctypes.c_int64 * 2).from_address(dims)) == (3, 5)  # type: ignore[arg-type]
        t = (x, np.ones(1))
        items = (ctypes.c_void_p * 2).from_address(id(t) + TUPLE_ITEMS)
        return (ok and ctypes.c_ssize_t.from_address(id(t) + TUPLE_SIZE).value == 2
                and tuple(items) == (id(t[0]), id(t[1])))
    except (ValueError, OSError):
        return False
