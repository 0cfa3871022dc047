"""CPU lowering in the LLVM backend: ``tdsl.lower(func, target)`` with the LLVM build's static
bounds check hooked in where buffers still have their axes.

`lower_for_llvm` is the twin of the CUDA backend's `lower_for_cuda`: `build_llvm` and
`Kernel.export` lower through it. After ``compact_buffers`` the per-axis check runs on scalar
accesses (the one place where an access outside a buffer's own axis can still be named);
compile.py checks the fully lowered function again before code generation.
"""
from __future__ import annotations

from ...ir import PrimFunc
from ...target import Target, parse_target


def lower_for_llvm(func: PrimFunc, target: str | Target = "cpu", bounds_check: bool = False) -> PrimFunc:
    """The lowered function the LLVM backend compiles (a non-CPU target: plain tdsl.lower)."""
    from ...lower import lower

    if parse_target(target).kind != "cpu":
        return lower(func, target=target)
    from ...lower._util import set_attr
    from ...lower.index_checks import BOUNDS_CHECK_ATTR
    from .bounds import check_static_bounds

    def per_axis_static_check(name: str, stage) -> None:
        if name == "compact_buffers":   # buffers still have their axes (and compacted shapes)
            check_static_bounds(stage, scalar_only=True)

    if bounds_check:
        func = set_attr(func, BOUNDS_CHECK_ATTR, True)
    return lower(func, target=target, trace=per_axis_static_check)
