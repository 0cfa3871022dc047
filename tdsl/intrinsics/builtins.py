"""Registers the built-in intrinsics (x86, CUDA) on import; `TensorIntrin.get` imports it once."""
from __future__ import annotations

from . import cuda, x86

x86._register_builtins()
cuda._register_builtins()
