"""Library or generated, per block: the candidate schedules of a block, and the fastest of them.

``candidates(sch, block, target)`` is the hook for the auto-scheduler's rules and the tuner:
for one block it returns copies of `sch` in which the block is computed

* by a library call (``sch.tensorize(block, "blas.sgemm")``, "library"), where the block is a
  matmul and this process has a BLAS;
* by a micro-kernel that `auto_tensorize` fitted (the host's fp32 register tile for several
  KC, the int8 dot product: VNNI, else AVX2 vpmaddwd), "tensorized";

each with a label and the reason the others were skipped. They are ordinary schedules: their
traces replay, more steps may follow (parallel, packing), and the rest of the function (an
epilogue) stays generated code. ``fastest(sch, block, args)`` builds and times the candidates
and `sch` itself (the generated code) on the given arguments and returns them ranked, checking
that every candidate computes what `sch` computes.

    >>> ranked = tdsl.intrinsics.candidates.fastest(sch, "C", (a, b))
    >>> ranked[0].label, ranked[0].seconds              # e.g. ('library:blas.sgemm', 0.0151)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def intrinsics_for(dtype: str | None, target: str = "cpu") -> list[tuple[str, str]]:
    """(kind, intrinsic name) worth trying for a block whose output has `dtype` on `target`."""
    from . import blas, x86

    out: list[tuple[str, str]] = []
    if target != "cpu":
        return out   # cuBLAS and WMMA candidates: not offered (see docs/internals.md)
    if dtype in ("float32", "float64") and blas.available():
        out.append(("library", "blas.sgemm" if dtype == "float32" else "blas.dgemm"))
    if dtype == "float32":
        for kc in FP32_KC:
            try:
                out.append(("tensorized", x86.fp32_microkernel(kc)))
            except TargetError:
                break
    if dtype == "int32":
        try:
            out.append(("tensorized", x86.int8_dot_any()))
        except TargetError:
            pass
    return out


def candidates(sch, block, target: str = "cpu") -> tuple[list[Candidate], list[str]]:
    """The library and auto-tensorized schedules of `block` (a BlockRV or a name), each a copy of
    `sch`; and why the other intrinsics were skipped."""
    name = _block_name(block)
    out: list[Candidate] = []
    skipped: list[str] = []
    for kind, intrin in intrinsics_for(_dtype_of(sch, name), target):
        trial = sch.copy()
        try:
            handle = trial.get_block(name)
            if kind == "library":
                trial.tensorize(handle, intrin)
            else:
                trial.auto_tensorize(handle, intrin)
        except (ScheduleError, TargetError) as exc:
            skipped.append(f"{intrin}: {str(exc).splitlines()[0]}")
            continue
        out.append(Candidate(f"{kind}:{intrin}", kind, trial))
    return out, skipped


def fastest(sch, block, args, target: str = "cpu", rtol: float = 1e-3) -> list[Candidate]:
    """`sch` ("generated") and its candidates for `block`, built, checked against `sch`'s results
    on `args` and timed; fastest first. A candidate that computes something else is dropped."""
    import tdsl

    found, _ = candidates(sch, block, target)
    ranked = [Candidate("generated", "generated", sch)] + found
    reference = None
    for cand in ranked:
        kernel = tdsl.build(cand.schedule, target=target)
        copies = [np.copy(a) if isinstance(a, np.ndarray) else a for a in args]
        result = kernel(*copies)
        if result is None:   # every buffer passed: compare what the kernel wrote
            result = tuple(c for c in copies if isinstance(c, np.ndarray))
        result = result if isinstance(result, tuple) else (result,)
        if reference is None:
            reference = result
        elif not all(np.allclose(r, q, rtol=rtol, atol=rtol) for r, q in zip(result, reference)):
            cand.seconds = None
            continue
        cand.seconds = kernel.time(*args)
    return sorted((c for c in ranked if c.seconds is not None), key=lambda c: c.seconds)


def _apply_one(sch, block: str, kind: str, intrin: str):
    """One candidate step on `sch` (a copy); False when this process cannot provide it."""
    try:
        handle = sch.get_block(block)
        if kind == "library":
            sch.tensorize(handle, intrin)
        else:
            sch.auto_tensorize(handle, intrin)
    except TargetError:
        return False
    return None


def schedule_rule(hw, defaults: bool = True):
    """A rule for tdsl.auto's design space (`tdsl.auto.rules.base.Rule`, branch autosched): for a
    block the library call and the auto-tensorized micro-kernels are alternatives (library first);
    a block they do not fit is left as it is. Register it ahead of the tiling rules, e.g.
    ``passes = default_passes(hw); passes[1].insert(0, candidates.schedule_rule(hw, defaults))``."""
    from ..auto.rules.base import Rule

    class LibraryOrTensorized(Rule):
        name = "library-or-tensorized"

        def alternatives(self, sch, block: str) -> list:
            target = "cuda" if self.hw.is_gpu else "cpu"
            return [lambda s, k=kind, n=intrin: _apply_one(s, block, k, n)
                    for kind, intrin in intrinsics_for(_dtype_of(sch, block), target)]

    return LibraryOrTensorized(hw, defaults)
