"""Library or generated, per block: the candidate schedules of a block.

``candidates(sch, block, target)`` is the hook for the auto-scheduler's rules and the tuner:
for one block it returns copies of `sch` in which the block is computed

* by a library call (``sch.tensorize(block, "blas.sgemm")``, "library"), where the block is a
  matmul and this process has a BLAS;
* by a micro-kernel that `auto_tensorize` fitted (the host's fp32 register tile for several
  KC, the int8 dot product: VNNI, else AVX2 vpmaddwd), "tensorized";

each with a label, and the reasons the others were skipped. They are ordinary schedules: their
traces replay, more steps may follow (parallel, packing), and the rest of the function (an
epilogue) stays generated code. `tdsl.backends.choose.fastest(sch, block, args)` builds, checks
and times them beside `sch` itself; `schedule_rule(hw, defaults)` is the same hook as a rule of
tdsl.auto's design space (``tdsl.auto.register_rule(schedule_rule, stage="tiling")`` adds the
auto-tensorized micro-kernels to it; the library call is already there, tdsl.auto.LibraryCall).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ..errors import ScheduleError, TargetError

FP32_KC = (64, 256)


@dataclass
class Candidate:
    """One way to compute the block: `kind` is "library", "tensorized" or "generated"."""

    label: str
    kind: str
    schedule: object            # tdsl.Schedule
    seconds: float | None = None


def _block_name(block) -> str:
    return block if isinstance(block, str) else block.name


def _dtype_of(sch, name: str) -> str | None:
    from ..schedule.tree import find_block

    realize, _ = find_block(sch.func, name, "candidates")
    store = realize.block.body
    return str(store.buffer.dtype) if hasattr(store, "buffer") else None


def intrinsics_for(dtype: str | None, target="cpu") -> list[tuple[str, str]]:
    """(kind, intrinsic name) worth trying for a block whose output has `dtype` on `target`
    (the micro-kernels its CPU runs: "llvm -mcpu=x86-64-v3" gets the AVX2 ones)."""
    from ..intrinsics import blas, x86
    from ..target import parse_target

    out: list[tuple[str, str]] = []
    if parse_target(target).kind != "cpu":
        return out   # cuBLAS and WMMA candidates: not offered (see docs/internals.md)
    if dtype in ("float32", "float64") and blas.available():
        out.append(("library", "blas.sgemm" if dtype == "float32" else "blas.dgemm"))
    if dtype == "float32":
        for kc in FP32_KC:
            try:
                out.append(("tensorized", x86.fp32_microkernel(kc, target=target)))
            except TargetError:
                break
    if dtype == "int32":
        with contextlib.suppress(TargetError):
            out.append(("tensorized", x86.int8_dot_any(target)))
    return out


def _apply_one(sch, block: str, kind: str, intrin: str) -> None:
    """One candidate step on `sch` (a copy)."""
    handle = sch.get_block(block)
    if kind == "library":
        sch.tensorize(handle, intrin)
    else:
        sch.auto_tensorize(handle, intrin)


def candidates(sch, block, target="cpu") -> tuple[list[Candidate], list[str]]:
    """The library and auto-tensorized schedules of `block` (a BlockRV or a name), each a copy of
    `sch`; and why the other intrinsics were skipped."""
    name = _block_name(block)
    out: list[Candidate] = []
    skipped: list[str] = []
    for kind, intrin in intrinsics_for(_dtype_of(sch, name), target):
        trial = sch.copy()
        try:
            _apply_one(trial, name, kind, intrin)
        except (ScheduleError, TargetError) as exc:
            skipped.append(f"{intrin}: {str(exc).splitlines()[0]}")
            continue
        out.append(Candidate(f"{kind}:{intrin}", kind, trial))
    return out, skipped


class LibraryOrTensorized:
    """A rule of tdsl.auto's design space (the `rule(sch, block) -> list[Schedule]` contract of
    tdsl.auto.rules.base): the block's library call and auto-tensorized micro-kernels as
    alternatives, library first; `[sch]` when none fits. Never changes `sch`."""

    name = "library-or-tensorized"

    def __init__(self, hw, defaults: bool = True):
        self.hw = hw
        self.defaults = defaults

    def __call__(self, sch, block: str) -> list:
        from ..ir.tree import block_names

        if block not in block_names(sch.func):
            return [sch]
        target = "cuda" if getattr(self.hw, "is_gpu", False) else getattr(self.hw, "target", "cpu")
        found, _ = candidates(sch, block, target)
        return [c.schedule for c in found] or [sch]

    def __repr__(self) -> str:
        return "LibraryOrTensorized()"


def schedule_rule(hw, defaults: bool = True) -> LibraryOrTensorized:
    """The rule factory for tdsl.auto (``register_rule(schedule_rule, stage="tiling")``)."""
    return LibraryOrTensorized(hw, defaults)
