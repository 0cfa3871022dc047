"""A composite step: auto_tensorize.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.composites.auto_tensorize`.
"""
from __future__ import annotations

from ..base import ScheduleBase
from ..composites import auto_tensorize as _auto
from ..handles import BlockRV


class AutoTensorizeMethods(ScheduleBase):
    """auto_tensorize."""

    def auto_tensorize(self, block: BlockRV, intrin_name: str) -> BlockRV:
        """Compute an einsum block (GEMM, batched GEMM, convolution) with tensor intrinsic
        `intrin_name` by itself: map the block's iterators onto the description's, reindex
        operands whose layout does not fit, pad extents the tile does not divide, split and
        reorder to the tile and tensorize. Returns the tensorized block; a ScheduleError says
        why the intrinsic cannot fit (the schedule is then unchanged).

        Before::

            @T.prim_func
            def before(A: T.Buffer((10, 7), "float32"), B: T.Buffer((7, 21), "float32"),
                       C: T.Buffer((10, 21), "float32")):
                for i, j, k in T.grid(10, 21, 7):
                    with T.block("C"):
                        vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                        with T.init():
                            C[vi, vj] = T.float32(0)
                        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

        Call::

            sch = tdsl.Schedule(before)
            c_o = sch.auto_tensorize(sch.get_block("C"), "x86.avx2.fp32_4x16x16")

        After (abridged: T.reads/T.writes left out)::

            @T.prim_func
            def after(A: T.Buffer((10, 7), "float32"), B: T.Buffer((7, 21), "float32"),
                      C: T.Buffer((10, 21), "float32")):
                C_pad = T.alloc_buffer((12, 32), "float32")
                A_pad = T.alloc_buffer((12, 16), "float32")
                B_pad = T.alloc_buffer((16, 32), "float32")
                for ax0, ax1 in T.grid(12, 16):
                    with T.block("A_pad"):
                        v0, v1 = T.axis.remap("SS", [ax0, ax1])
                        A_pad[v0, v1] = T.if_then_else(v0 < 10 and v1 < 7, A[v0, v1], T.float32(0))
                for ax0, ax1 in T.grid(16, 32):
                    with T.block("B_pad"):
                        v0, v1 = T.axis.remap("SS", [ax0, ax1])
                        B_pad[v0, v1] = T.if_then_else(v0 < 7 and v1 < 21, B[v0, v1], T.float32(0))
                for j_0 in range(2):
                    for i_0, i_1, j_1 in T.grid(3, 4, 16):
                        with T.block("C_init"):
                            vi = T.axis.spatial(12, i_0 * 4 + i_1)
                            vj = T.axis.spatial(32, j_0 * 16 + j_1)
                            C_pad[vi, vj] = T.float32(0)
                    for k_0, i_0 in T.grid(1, 3):
                        with T.block("C_o"):
                            vi_o, vj_o = T.axis.remap("SS", [i_0, j_0])
                            T.block_attr({"tdsl.tensor_intrin": "x86.avx2.fp32_4x16x16"})
                            for i_1, j_1, k_1 in T.grid(4, 16, 16):
                                with T.block("C"):
                                    vi_i, vj_i, vk = T.axis.remap("SSR", [i_1, j_1, k_1])
                                    C_pad[vi_o * 4 + vi_i, vj_o * 16 + vj_i] = (
                                        C_pad[vi_o * 4 + vi_i, vj_o * 16 + vj_i]
                                        + A_pad[vi_o * 4 + vi_i, vk] * B_pad[vk, vj_o * 16 + vj_i])
                for ax0, ax1 in T.grid(10, 21):
                    with T.block("C_pad"):
                        v0, v1 = T.axis.remap("SS", [ax0, ax1])
                        C[v0, v1] = C_pad[v0, v1]
        """
        self._expect("auto_tensorize", block, (BlockRV,), "a block handle (from sch.get_block)")
        return self._apply("auto_tensorize", _auto.auto_tensorize, [block], {"intrin_name": intrin_name})
