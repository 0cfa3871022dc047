"""Buffer layouts: transform_layout, storage_align.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.primitives.layout`.
"""
from __future__ import annotations

from collections.abc import Callable

from ..base import ScheduleBase
from ..handles import BlockRV
from ..primitives import layout as _layout
from ..tvm_spelling import true_flags


class LayoutMethods(ScheduleBase):
    """transform_layout, storage_align."""

    def transform_layout(self, block: BlockRV, buffer: int | str, index_map: Callable, pad_value=None,
                         assume_injective_transform: bool = False) -> None:
        """Store a buffer in a new layout: element `(i, j, ...)` moves to `index_map(i, j, ...)`,
        a Python lambda such as ``lambda i, j: (i // 16, j, i % 16)``; a parameter's new layout
        becomes the function's signature (the caller passes that array re-laid out). The
        new shape is the bounding box of the map; the map must be one-to-one. Elements of the
        new shape that no element maps to (padding) are never read, unless `pad_value` (a
        constant of the buffer's dtype, or a function of the new indices) is given: a block
        `buffer_<name>_padding` after the buffer's last writer then stores it there.

        Before::

            @T.prim_func
            def before(A: T.Buffer((8, 4), "float32"), C: T.Buffer((8, 4), "float32")):
                B = T.alloc_buffer((8, 4), "float32")
                for i, j in T.grid(8, 4):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vi, vj] = A[vi, vj] + T.float32(1)
                for i, j in T.grid(8, 4):
                    with T.block("C"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        C[vi, vj] = B[vi, vj] * T.float32(2)

        Call::

            sch = tdsl.Schedule(before)
            sch.transform_layout(sch.get_block("B"), "B", lambda i, j: (i // 4, j, i % 4))

        After::

            @T.prim_func
            def after(A: T.Buffer((8, 4), "float32"), C: T.Buffer((8, 4), "float32")):
                B = T.alloc_buffer((2, 4, 4), "float32")
                for i, j in T.grid(8, 4):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        T.reads(A[vi, vj])
                        T.writes(B[vi // 4, vj, vi % 4])
                        B[vi // 4, vj, vi % 4] = A[vi, vj] + T.float32(1.0)
                for i_1, j_1 in T.grid(8, 4):
                    with T.block("C"):
                        vi_1, vj_1 = T.axis.remap("SS", [i_1, j_1])
                        T.reads(B[vi_1 // 4, vj_1, vi_1 % 4])
                        T.writes(C[vi_1, vj_1])
                        C[vi_1, vj_1] = B[vi_1 // 4, vj_1, vi_1 % 4] * T.float32(2.0)
        """
        self._expect("transform_layout", block, (BlockRV,), "a block handle (from sch.get_block)")
        fn = index_map if isinstance(index_map, _layout.IndexMap) or not callable(index_map) \
            else _layout.IndexMap(index_map)
        attrs = {"buffer": buffer, "index_map": fn}
        if pad_value is not None:
            attrs["pad_value"] = pad_value if not callable(pad_value) else _layout.IndexMap(pad_value)
        attrs.update(true_flags("transform_layout", assume_injective_transform=assume_injective_transform))
        return self._apply("transform_layout", _layout.transform_layout, [block], attrs)

    def storage_align(self, block: BlockRV, buffer: int | str, axis: int, factor: int, offset: int) -> None:
        """Pad the stride of dimension `axis` of a buffer the function allocates so that
        ``stride % factor == offset`` (the classic cure for shared-memory bank conflicts); the
        padding is recorded as the buffer's strides, and the request in the block annotation
        ``storage_align.<buffer>`` so that aligning another axis later keeps this one. An integer
        `buffer` counts the block's writes (TVM's `buffer_index`); a name may be any buffer the
        block accesses.

        Before::

            @T.prim_func
            def before(A: T.Buffer((8, 8), "float32"), C: T.Buffer((8, 8), "float32")):
                B = T.alloc_buffer((8, 8), "float32", scope="shared")
                for i, j in T.grid(8, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vi, vj] = A[vi, vj]
                for i, j in T.grid(8, 8):
                    with T.block("C"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        C[vi, vj] = B[vj, vi]

        Call::

            sch = tdsl.Schedule(before)
            sch.storage_align(sch.get_block("B"), "B", axis=0, factor=32, offset=1)

        After::

            @T.prim_func
            def after(A: T.Buffer((8, 8), "float32"), C: T.Buffer((8, 8), "float32")):
                B = T.alloc_buffer((8, 8), "float32", strides=(33, 1), scope="shared")
                for i, j in T.grid(8, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        T.reads(A[vi, vj])
                        T.writes(B[vi, vj])
                        T.block_attr({'storage_align.B': '0:32:1'})
                        B[vi, vj] = A[vi, vj]
                for i_1, j_1 in T.grid(8, 8):
                    with T.block("C"):
                        vi_1, vj_1 = T.axis.remap("SS", [i_1, j_1])
                        T.reads(B[vj_1, vi_1])
                        T.writes(C[vi_1, vj_1])
                        C[vi_1, vj_1] = B[vj_1, vi_1]
        """
        self._expect("storage_align", block, (BlockRV,), "a block handle (from sch.get_block)")
        return self._apply("storage_align", _layout.storage_align, [block],
                           {"buffer": buffer, "axis": axis, "factor": factor, "offset": offset})
