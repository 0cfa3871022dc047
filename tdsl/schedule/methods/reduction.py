"""Reductions: decompose_reduction, rfactor.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.primitives.reduction` and `.rfactor`.
"""
from __future__ import annotations

from ..base import ScheduleBase
from ..handles import BlockRV, LoopRV
from ..primitives import reduction as _reduction
from ..primitives import rfactor as _rfactor


class ReductionMethods(ScheduleBase):
    """decompose_reduction, rfactor."""

    def decompose_reduction(self, block: BlockRV, loop: LoopRV) -> BlockRV:
        """Move the T.init of a reduction into a block `<name>_init` placed right before `loop`
        (under copies of the spatial loops below it); the reduction keeps its name, without init.
        Returns the init block.

        Before::

            @T.prim_func
            def before(A: T.Buffer((8, 8), "float32"), C: T.Buffer((8,), "float32")):
                for i, k in T.grid(8, 8):
                    with T.block("C"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        with T.init():
                            C[vi] = T.float32(0)
                        C[vi] = C[vi] + A[vi, vk]

        Call::

            sch = tdsl.Schedule(before)
            i, k = sch.get_loops(sch.get_block("C"))
            c_init = sch.decompose_reduction(sch.get_block("C"), k)

        After::

            @T.prim_func
            def after(A: T.Buffer((8, 8), "float32"), C: T.Buffer((8,), "float32")):
                for i in range(8):
                    with T.block("C_init"):
                        vi_1 = T.axis.remap("S", [i])
                        T.reads()
                        T.writes(C[vi_1])
                        C[vi_1] = T.float32(0.0)
                    for k in range(8):
                        with T.block("C"):
                            vi, vk = T.axis.remap("SR", [i, k])
                            T.reads(C[vi], A[vi, vk])
                            T.writes(C[vi])
                            C[vi] = C[vi] + A[vi, vk]
        """
        self._expect("decompose_reduction", block, (BlockRV,), "a block handle (from sch.get_block)")
        self._expect("decompose_reduction", loop, (LoopRV,), "a loop handle (from sch.get_loops)")
        return self._apply("decompose_reduction", _reduction.decompose_reduction, [block, loop])

    def rfactor(self, loop: LoopRV, factor_axis: int) -> BlockRV:
        """Factor the reduction over `loop`: a block `<name>_rf` computes one partial result per
        iteration of the loop into a new buffer (the loop's slot at position `factor_axis`), and
        the original block combines them. Sums, products, min and max are recognised, whatever
        their init value. Returns the rfactor block. As in TVM, the factored iterator comes first
        in both blocks.

        Before::

            @T.prim_func
            def before(A: T.Buffer((4, 16), "float32"), C: T.Buffer((4,), "float32")):
                for i, k in T.grid(4, 16):
                    with T.block("C"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        with T.init():
                            C[vi] = T.float32(-3.4e38)
                        C[vi] = T.max(C[vi], A[vi, vk])

        Call::

            sch = tdsl.Schedule(before)
            i, k = sch.get_loops(sch.get_block("C"))
            k_0, k_1 = sch.split(k, factors=[None, 4])
            c_rf = sch.rfactor(k_1, 0)

        After::

            @T.prim_func
            def after(A: T.Buffer((4, 16), "float32"), C: T.Buffer((4,), "float32")):
                C_rf = T.alloc_buffer((4, 4), "float32")
                for i, k_0, k_1 in T.grid(4, 4, 4):
                    with T.block("C_rf"):
                        vk_1, vi, vk_0 = T.axis.remap("SSR", [k_1, i, k_0])
                        T.reads(C_rf[vk_1, vi], A[vi, vk_0 * 4 + vk_1])
                        T.writes(C_rf[vk_1, vi])
                        with T.init():
                            C_rf[vk_1, vi] = T.float32(-3.4e+38)
                        C_rf[vk_1, vi] = T.max(C_rf[vk_1, vi], A[vi, vk_0 * 4 + vk_1])
                for i_1, k_1_1 in T.grid(4, 4):
                    with T.block("C"):
                        vk_1_1, vi_1 = T.axis.remap("RS", [k_1_1, i_1])
                        T.reads(C[vi_1], C_rf[vk_1_1, vi_1])
                        T.writes(C[vi_1])
                        with T.init():
                            C[vi_1] = T.float32(-3.4e+38)
                        C[vi_1] = T.max(C[vi_1], C_rf[vk_1_1, vi_1])
        """
        self._expect("rfactor", loop, (LoopRV,), "a loop handle (from sch.get_loops)")
        return self._apply("rfactor", _rfactor.rfactor, [loop], {"factor_axis": factor_axis})
