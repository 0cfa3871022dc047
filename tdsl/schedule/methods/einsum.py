"""Einsum-shaped blocks: reindex, pad_einsum.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.primitives.einsum`.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..base import ScheduleBase
from ..handles import BlockRV
from ..primitives import einsum as _einsum


class EinsumMethods(ScheduleBase):
    """reindex, pad_einsum."""

    def reindex(self, block: BlockRV, buffer: tuple[str, int] | str) -> BlockRV:
        """Access `buffer` (``("read", i)``, ``("write", i)`` or its name) through a new buffer
        indexed by the block's own iterators, with a copy block ``<buf>_reindex`` before (read)
        or after (write) the block's nest; returns the copy block.

        Before::

            @T.prim_func
            def before(A: T.Buffer((8, 4), "float32"), B: T.Buffer((4, 8), "float32")):
                for i, j in T.grid(4, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vi, vj] = A[vj, vi] * T.float32(2)

        Call::

            sch = tdsl.Schedule(before)
            sch.reindex(sch.get_block("B"), "A")

        After::

            @T.prim_func
            def after(A: T.Buffer((8, 4), "float32"), B: T.Buffer((4, 8), "float32")):
                A_reindex = T.alloc_buffer((4, 8), "float32")
                for ax0, ax1 in T.grid(4, 8):
                    with T.block("A_reindex"):
                        v0, v1 = T.axis.remap("SS", [ax0, ax1])
                        A_reindex[v0, v1] = A[v1, v0]
                for i, j in T.grid(4, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vi, vj] = A_reindex[vi, vj] * T.float32(2)
        """
        self._expect("reindex", block, (BlockRV,), "a block handle (from sch.get_block)")
        return self._apply("reindex", _einsum.reindex, [block], {"buffer": buffer})

    def pad_einsum(self, block: BlockRV, padding: Sequence[int]) -> None:
        """Pad each iterator of an einsum block up to a multiple of ``padding[i]``: inputs are
        read through zero-padded copies ``<buf>_pad``, the output is computed into ``<out>_pad``
        and copied back (TensorIR's pad_einsum).

        Before::

            @T.prim_func
            def before(A: T.Buffer((10, 7), "float32"), B: T.Buffer((7, 5), "float32"),
                       C: T.Buffer((10, 5), "float32")):
                for i, j, k in T.grid(10, 5, 7):
                    with T.block("C"):
                        vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                        with T.init():
                            C[vi, vj] = T.float32(0)
                        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

        Call::

            sch = tdsl.Schedule(before)
            sch.pad_einsum(sch.get_block("C"), [1, 8, 4])

        After::

            @T.prim_func
            def after(A: T.Buffer((10, 7), "float32"), B: T.Buffer((7, 5), "float32"),
                      C: T.Buffer((10, 5), "float32")):
                C_pad = T.alloc_buffer((10, 8), "float32")
                A_pad = T.alloc_buffer((10, 8), "float32")
                B_pad = T.alloc_buffer((8, 8), "float32")
                for ax0, ax1 in T.grid(10, 8):
                    with T.block("A_pad"):
                        v0, v1 = T.axis.remap("SS", [ax0, ax1])
                        A_pad[v0, v1] = T.if_then_else(v1 < 7, A[v0, v1], T.float32(0))
                for ax0, ax1 in T.grid(8, 8):
                    with T.block("B_pad"):
                        v0, v1 = T.axis.remap("SS", [ax0, ax1])
                        B_pad[v0, v1] = T.if_then_else(v0 < 7 and v1 < 5, B[v0, v1], T.float32(0))
                for i, j, k in T.grid(10, 8, 8):
                    with T.block("C"):
                        vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                        with T.init():
                            C_pad[vi, vj] = T.float32(0)
                        C_pad[vi, vj] = C_pad[vi, vj] + A_pad[vi, vk] * B_pad[vk, vj]
                for ax0, ax1 in T.grid(10, 5):
                    with T.block("C_pad"):
                        v0, v1 = T.axis.remap("SS", [ax0, ax1])
                        C[v0, v1] = C_pad[v0, v1]
        """
        self._expect("pad_einsum", block, (BlockRV,), "a block handle (from sch.get_block)")
        padding = list(padding) if isinstance(padding, (list, tuple)) else padding
        return self._apply("pad_einsum", _einsum.pad_einsum, [block], {"padding": padding})
