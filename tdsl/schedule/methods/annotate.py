"""Annotations of blocks and loops: annotate, unannotate.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.primitives.annotate`.
"""
from __future__ import annotations

from ..base import ScheduleBase
from ..handles import BlockRV, LoopRV
from ..primitives import annotate as _annotate


class AnnotateMethods(ScheduleBase):
    """annotate, unannotate."""

    def annotate(self, block_or_loop: BlockRV | LoopRV, key: str, value: float | str | bool) -> None:
        """Attach `key = value` to a block (T.block_attr) or a loop (annotations=).

        Before::

            @T.prim_func
            def before(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
                for i in range(8):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        B[vi] = A[vi]

        Call::

            sch = tdsl.Schedule(before)
            b = sch.get_block("B")
            (i,) = sch.get_loops(b)
            sch.annotate(b, "note", "copy")
            sch.annotate(i, "pragma_unroll", 2)

        After::

            @T.prim_func
            def after(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
                for i in T.serial(8, annotations={"pragma_unroll": 2}):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        T.block_attr({"note": "copy"})
                        B[vi] = A[vi]
        """
        self._expect("annotate", block_or_loop, (BlockRV, LoopRV), "a block or loop handle")
        return self._apply("annotate", _annotate.annotate, [block_or_loop], {"key": key, "value": value})

    def unannotate(self, block_or_loop: BlockRV | LoopRV, key: str) -> None:
        """Remove annotation `key` from a block or a loop.

        Before::

            @T.prim_func
            def before(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
                for i in T.serial(8, annotations={"pragma_unroll": 2}):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        B[vi] = A[vi]

        Call::

            sch = tdsl.Schedule(before)
            (i,) = sch.get_loops(sch.get_block("B"))
            sch.unannotate(i, "pragma_unroll")

        After::

            @T.prim_func
            def after(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
                for i in range(8):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        B[vi] = A[vi]
        """
        self._expect("unannotate", block_or_loop, (BlockRV, LoopRV), "a block or loop handle")
        return self._apply("unannotate", _annotate.unannotate, [block_or_loop], {"key": key})
