"""Library or generated: a matmul-shaped block computed by the BLAS numpy loads, or by tdsl's code.

For a top-level block `C[b.., i, j] (=0) += A[b.., i, k] * B[b.., k, j]` in float32 / float64
(either operand may be stored transposed, the three innermost loops in any order; loops above
them, a batch, stay around the call),
`LibraryCall` offers two alternatives:

* **library**: ``sch.tensorize(block, "blas.sgemm")`` (``"blas.dgemm"``), one call of the
  library's GEMM; the rest of the function (an epilogue) stays generated code that the later
  rules schedule (inline, parallel, vectorize);
* **generated**: the block unchanged, for the tiling rules after this one (the fp32
  micro-kernel, register tiles).

Both are sketches of the design space, so `tdsl.tune` measures both and keeps the faster (the
library sketch has no decisions of its own: it is measured once). `tdsl.auto_schedule`
measures nothing and takes the first alternative, which this rule orders by a heuristic
(`prefer_library`): the library when no micro-kernel tile fits the block (no vector width
divides its columns: the generated code would be a register tile, measured 4-7x slower than
OpenBLAS at 100^3 and 200^3; or the column operand is stored transposed, `K[b, j, k]` as in
attention's Q K^T, which no generated tile vectorizes: the block was left to a per-element
vector dot product, 1.4 ms against 0.5-0.6 ms for the whole B=8, S=128, D=64 attention with the
library) and the GEMM does at least `LIBRARY_MIN_FLOP` flops (its fixed cost
per call, OpenBLAS's thread hand-off, is then small); the library also for a batch of small
GEMMs (a loop around the block, at most `LIBRARY_BATCHED_MAX_FLOP` flops per GEMM: the generated
code packs each operand per GEMM, which such small products do not repay; measured at 8 x 64^3
2.4x and at attention's 8 x 128x64x128 P V 1.1x slower than the library, while at 8 x 128^3 the
generated code was 1.4x faster, Sapphire Rapids, 2 cores); otherwise the generated micro-kernel code,
whose trace keeps the decisions a search (or a user) can change, and which is within 0.9-1.3x
of OpenBLAS on the shapes it tiles. `tdsl.backends.choose.fastest` measures the two for one
block when that matters.
"""
from __future__ import annotations

from ...ir import Var
from ...schedule import Schedule
from ...schedule.library import gemm_extents
from ..analysis import block_info, vector_obstacle
from .base import Rule
from .cpu_loops import _is_tuned

LIBRARY_MIN_FLOP = 2 * 32 ** 3
"""From this many flops (2 M N K) an untileable GEMM goes to the library in `auto_schedule`
(below it the call's fixed cost is not repaid; docs/internals.md)."""

LIBRARY_BATCHED_MAX_FLOP = 2 * 128 * 64 * 128
"""Up to this many flops per GEMM a batched GEMM goes to the library in `auto_schedule` (see the module)."""

LIBRARY_ROUTINE = {"float32": "blas.sgemm", "float64": "blas.dgemm"}


def prefer_library(m: int, n: int, k: int, lanes: int, columns_contiguous: bool = True,
                   batched: bool = False) -> bool:
    """`auto_schedule`'s choice (module docstring): the library for GEMMs whose columns no vector
    width divides or no operand holds contiguously (no generated tile vectorizes them), and for
    batches of small GEMMs, from `LIBRARY_MIN_FLOP` flops."""
    flops = 2 * m * n * k
    small_batch = batched and flops <= LIBRARY_BATCHED_MAX_FLOP
    return (n % lanes != 0 or not columns_contiguous or small_batch) and flops >= LIBRARY_MIN_FLOP


class LibraryCall(Rule):
    """A matmul block as one BLAS call, beside the generated alternative; see the module docstring."""

    name = "library-call"

    def alternatives(self, sch: Schedule, block: str) -> list:
        from ...intrinsics import blas

        if self.hw.kind != "cpu":
            return []
        info = block_info(sch.func, block)
        store = info.store
        if store is None or not info.top_level or _is_tuned(info) or not info.simple_bindings:
            return []
        routine = LIBRARY_ROUTINE.get(str(store.buffer.dtype))
        size = gemm_extents(sch.func, block) if routine is not None else None
        if routine is None or size is None or not blas.available():
            return []

        def library(s: Schedule) -> None:
            s.tensorize(s.get_block(block), routine)

        def generated(s: Schedule) -> None:
            return None

        column = store.indices[-1] if store.indices else None
        contiguous = not isinstance(column, Var) or vector_obstacle(info.block, column) is None
        batched = len(info.loops) > 3
        first_library = prefer_library(*size, self.hw.lanes, contiguous, batched) if self.defaults else True
        return [library, generated] if first_library else [generated, library]
