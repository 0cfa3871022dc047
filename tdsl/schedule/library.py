"""The library-call names other rooms import from here (kept as they were); the composite that
makes a generic library intrinsic concrete per block lives in `composites/library.py`."""
from .composites.library import GENERIC, candidates, gemm_extents, gemm_loops, is_generic, tensorize

__all__ = ["GENERIC", "candidates", "gemm_extents", "gemm_loops", "is_generic", "tensorize"]
