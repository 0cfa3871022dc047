"""`tdsl.auto_schedule(func, target)`: a good schedule with no measurement at all.

The design space's rules (`space.default_passes`) with every sampled choice at its
hardware-aware default and every rule's preferred alternative: one sketch, built in
well under a second. Its trace is readable Python with the decisions written out, so it can be
edited (`trace.with_decisions`) and replayed, and it is where a tuning search starts.
"""
from __future__ import annotations

from collections.abc import Callable

from ..ir import PrimFunc
from ..schedule import Schedule
from .space import Pass, sketches


def auto_schedule(func: PrimFunc, target="cpu", *, arch: str | None = None, passes: list[Pass] | None = None,
                  space: Callable[[Schedule], None] | None = None, seed: int = 0) -> Schedule:
    """A Schedule of `func` for `target` ("cpu" or "cuda") chosen by the rules, no measurement.

    >>> sch = tdsl.auto_schedule(matmul, "cpu")
    >>> print(sch.trace)                      # the steps, as Python
    >>> kernel = tdsl.build(sch)

    `arch` ("sm_80", "sm_90a", ...) picks the rules of that CUDA architecture, as
    ``target="cuda -arch=sm_90a"`` does: on sm_90a fp16/bf16 GEMMs get the TMA + wgmma pipeline.
    `passes` replaces the default rules (see `tdsl.auto.space`); `space(sch)` replaces the whole
    design space with your function (its sampling steps then take the seeded random decisions).
    """
    if isinstance(func, Schedule):
        func = func.func
    if not isinstance(func, PrimFunc):
        raise TypeError(f"tdsl.auto_schedule takes a PrimFunc (a @T.prim_func), not {type(func).__name__}")
    if arch is not None:
        from ..target import parse_target

        tgt = parse_target(target)
        if tgt.kind != "cuda" or tgt.get("arch", arch) != arch:
            raise TypeError(f"tdsl.auto_schedule: arch={arch!r} is for a CUDA target, not {str(tgt)!r}")
        target = f"{tgt} -arch={arch}" if tgt.get("arch") is None else str(tgt)
    return sketches(func, target, passes=passes, space=space, defaults=True, seed=seed, limit=1)[0]
