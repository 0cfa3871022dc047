"""Moving a block under a loop: compute_at, reverse_compute_at.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.primitives.compute_at`.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ..base import ScheduleBase
from ..handles import BlockRV, LoopRV
from ..primitives import compute_at as _compute_at
from ..primitives import compute_inline as _compute_inline
from ..primitives import sampling as _sampling
from ..tree import find_block
from ..tvm_spelling import true_flags


def _stay(func, block, loop):
    """compute_at to the root handle of sample_compute_location: the block stays where it is."""
    find_block(func, block, "compute_at")
    return func, None


def _inline(func, block, loop):
    """compute_at to the inline handle of sample_compute_location: compute_inline."""
    return _compute_inline.compute_inline(func, block)


class ComputeAtMethods(ScheduleBase):
    """compute_at, reverse_compute_at."""

    def compute_at(self, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool = False, index: int = -1) -> None:
        """Move a producer block under `loop` of a later loop nest; at each iteration it computes
        just what the blocks under the loop read (new loops `ax0, ...`, one per iterator).
        `loop` may be the result of `sample_compute_location`, whose "root" leaves the block
        where it is and whose "inline" inlines it. As in TVM, `preserve_unit_loops=True` keeps
        a loop of extent 1 for an iterator over one value, and `index` picks the place among the
        loop's statements: -1 right before the first consumer, -2 right after the last producer,
        or a position between them.

        Before::

            @T.prim_func
            def before(A: T.Buffer((16, 8), "float32"), C: T.Buffer((16, 8), "float32")):
                B = T.alloc_buffer((16, 8), "float32")
                for i, j in T.grid(16, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vi, vj] = A[vi, vj] * T.float32(2)
                for i, j in T.grid(16, 8):
                    with T.block("C"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        C[vi, vj] = B[vi, vj] + T.float32(1)

        Call::

            sch = tdsl.Schedule(before)
            i, j = sch.get_loops(sch.get_block("C"))
            i_0, i_1 = sch.split(i, factors=[None, 4])
            sch.compute_at(sch.get_block("B"), i_0)

        After::

            @T.prim_func
            def after(A: T.Buffer((16, 8), "float32"), C: T.Buffer((16, 8), "float32")):
                B = T.alloc_buffer((16, 8), "float32")
                for i_1_0 in range(4):
                    for ax0, ax1 in T.grid(4, 8):
                        with T.block("B"):
                            vi = T.axis.spatial(16, i_1_0 * 4 + ax0)
                            vj = T.axis.spatial(8, ax1)
                            T.reads(A[vi, vj])
                            T.writes(B[vi, vj])
                            B[vi, vj] = A[vi, vj] * T.float32(2.0)
                    for i_1_1, j_1 in T.grid(4, 8):
                        with T.block("C"):
                            vi_1 = T.axis.spatial(16, i_1_0 * 4 + i_1_1)
                            vj_1 = T.axis.spatial(8, j_1)
                            T.reads(B[vi_1, vj_1])
                            T.writes(C[vi_1, vj_1])
                            C[vi_1, vj_1] = B[vi_1, vj_1] + T.float32(1.0)
        """
        self._expect("compute_at", block, (BlockRV,), "a block handle (from sch.get_block)")
        self._expect("compute_at", loop, (LoopRV,), "a loop handle (from sch.get_loops)")
        if loop.var is _sampling.ROOT:  # sample_compute_location chose "stay where it is"
            return self._apply("compute_at", _stay, [block, loop])
        if loop.var is _sampling.INLINE:  # ... or "inline"
            return self._apply("compute_at", _inline, [block, loop])
        return self._apply("compute_at", _compute_at.compute_at, [block, loop],
                           self._placement("compute_at", preserve_unit_loops, index))

    def reverse_compute_at(self, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool = False,
                           index: int = -1) -> None:
        """Move a consumer block under `loop` of an earlier loop nest; at each iteration it
        computes what the blocks under the loop have produced so far. A consumer that would read
        elements not yet produced is refused (TVM silently miscomputes it, apache/tvm#15911).
        `preserve_unit_loops` and `index` as in compute_at (-1: the last legal place, right
        before any block under the loop that reads what the consumer writes, else the end).

        Before::

            @T.prim_func
            def before(A: T.Buffer((16, 8), "float32"), C: T.Buffer((16, 8), "float32")):
                B = T.alloc_buffer((16, 8), "float32")
                for i, j in T.grid(16, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vi, vj] = A[vi, vj] * T.float32(2)
                for i, j in T.grid(16, 8):
                    with T.block("C"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        C[vi, vj] = B[vi, vj] + T.float32(1)

        Call::

            sch = tdsl.Schedule(before)
            i, j = sch.get_loops(sch.get_block("B"))
            sch.reverse_compute_at(sch.get_block("C"), i)

        After::

            @T.prim_func
            def after(A: T.Buffer((16, 8), "float32"), C: T.Buffer((16, 8), "float32")):
                B = T.alloc_buffer((16, 8), "float32")
                for i in range(16):
                    for j in range(8):
                        with T.block("B"):
                            vi, vj = T.axis.remap("SS", [i, j])
                            T.reads(A[vi, vj])
                            T.writes(B[vi, vj])
                            B[vi, vj] = A[vi, vj] * T.float32(2.0)
                    for ax1 in range(8):
                        with T.block("C"):
                            vi_1, vj_1 = T.axis.remap("SS", [i, ax1])
                            T.reads(B[vi_1, vj_1])
                            T.writes(C[vi_1, vj_1])
                            C[vi_1, vj_1] = B[vi_1, vj_1] + T.float32(1.0)
        """
        self._expect("reverse_compute_at", block, (BlockRV,), "a block handle (from sch.get_block)")
        self._expect("reverse_compute_at", loop, (LoopRV,), "a loop handle (from sch.get_loops)")
        return self._apply("reverse_compute_at", _compute_at.reverse_compute_at, [block, loop],
                           self._placement("reverse_compute_at", preserve_unit_loops, index))

    def _placement(self, primitive: str, preserve_unit_loops, index) -> dict:
        """TVM's placement options as trace attributes (left out at their defaults)."""
        attrs = true_flags(primitive, preserve_unit_loops=preserve_unit_loops)
        if not isinstance(index, int) or isinstance(index, bool) or index < -2:
            raise ScheduleError(f"{primitive}: index must be -1 (the last legal place), -2 (the first) or a "
                                f"position >= 0 among the loop's statements, not {index!r}")
        if index != -1:
            attrs["index"] = index
        return attrs
