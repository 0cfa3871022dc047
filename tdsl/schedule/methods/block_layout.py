"""A block's iterators re-laid out: transform_block_layout.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.primitives.block_layout`.
"""
from __future__ import annotations

from collections.abc import Callable

from ..base import ScheduleBase
from ..handles import BlockRV
from ..primitives import block_layout as _block_layout
from ..primitives import layout as _layout


def as_index_map(fn):
    """A Python function as an IndexMap (an IndexMap, or anything not callable, as it is: the
    primitive refuses what is not a map)."""
    return fn if isinstance(fn, _layout.IndexMap) or not callable(fn) else _layout.IndexMap(fn)


class BlockLayoutMethods(ScheduleBase):
    """transform_block_layout."""

    def transform_block_layout(self, block: BlockRV, index_map: Callable) -> None:
        """Give `block` new iterators ``index_map(iterators)`` (TVM's transform_block_layout): one
        per output of the map, over the box the map's image spans, bound one to one by new loops
        `ax0, ...`; the body reads the old iterators back through the inverse map. The block must be
        alone in its loop nest with loops from 0 bound trivially (iterator k = loop k), the map a
        bijection onto the new box (fusions ``i * 8 + j``, splits ``i // 4, i % 4``, permutations),
        and each new iterator made of iterators of one kind.

        Before::

            @T.prim_func
            def before(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
                for i, j in T.grid(4, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vi, vj] = A[vi, vj] * T.float32(2)

        Call::

            sch = tdsl.Schedule(before)
            sch.transform_block_layout(sch.get_block("B"), lambda i, j: (i * 8 + j,))

        After::

            @T.prim_func
            def after(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
                for ax0 in range(32):
                    with T.block("B"):
                        v0 = T.axis.remap("S", [ax0])
                        T.reads(A[v0 // 8, v0 % 8])
                        T.writes(B[v0 // 8, v0 % 8])
                        B[v0 // 8, v0 % 8] = A[v0 // 8, v0 % 8] * T.float32(2.0)
        """
        self._expect("transform_block_layout", block, (BlockRV,), "a block handle (from sch.get_block)")
        return self._apply("transform_block_layout", _block_layout.transform_block_layout, [block],
                           {"index_map": as_index_map(index_map)})
