"""Folding a block into its consumers / its producer: compute_inline, reverse_compute_inline.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.primitives.compute_inline`.
"""
from __future__ import annotations

from ..base import ScheduleBase
from ..handles import BlockRV
from ..primitives import compute_inline as _compute_inline


class ComputeInlineMethods(ScheduleBase):
    """compute_inline, reverse_compute_inline."""

    def compute_inline(self, block: BlockRV) -> None:
        """Inline a block that stores one element per instance (`B[vi, vj] = expr`) into every
        reader of its buffer; the block and its buffer disappear.

        Before::

            @T.prim_func
            def before(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
                B = T.alloc_buffer((8,), "float32")
                for i in range(8):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        B[vi] = A[vi] + T.float32(1)
                for i in range(8):
                    with T.block("C"):
                        vi = T.axis.spatial(8, i)
                        C[vi] = B[vi] * T.float32(2)

        Call::

            sch = tdsl.Schedule(before)
            sch.compute_inline(sch.get_block("B"))

        After::

            @T.prim_func
            def after(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
                for i_1 in range(8):
                    with T.block("C"):
                        vi_1 = T.axis.remap("S", [i_1])
                        T.reads(A[vi_1])
                        T.writes(C[vi_1])
                        C[vi_1] = (A[vi_1] + T.float32(1.0)) * T.float32(2.0)
        """
        self._expect("compute_inline", block, (BlockRV,), "a block handle (from sch.get_block)")
        return self._apply("compute_inline", _compute_inline.compute_inline, [block])

    def reverse_compute_inline(self, block: BlockRV) -> None:
        """Fold a consumer that reads its producer's buffer at its own iterators into the producer,
        which then stores the consumer's result directly.

        Before::

            @T.prim_func
            def before(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
                B = T.alloc_buffer((8,), "float32")
                for i in range(8):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        B[vi] = A[vi] + T.float32(1)
                for i in range(8):
                    with T.block("C"):
                        vi = T.axis.spatial(8, i)
                        C[vi] = B[vi] * T.float32(2)

        Call::

            sch = tdsl.Schedule(before)
            sch.reverse_compute_inline(sch.get_block("C"))

        After::

            @T.prim_func
            def after(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
                for i in range(8):
                    with T.block("B"):
                        vi = T.axis.remap("S", [i])
                        T.reads(A[vi])
                        T.writes(C[vi])
                        C[vi] = (A[vi] + T.float32(1.0)) * T.float32(2.0)
        """
        self._expect("reverse_compute_inline", block, (BlockRV,), "a block handle (from sch.get_block)")
        return self._apply("reverse_compute_inline", _compute_inline.reverse_compute_inline, [block])
