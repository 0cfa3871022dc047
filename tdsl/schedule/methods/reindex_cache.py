"""Caches indexed by a block's iterators: reindex_cache_read, reindex_cache_write.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.primitives.reindex_cache`.
"""
from __future__ import annotations

from collections.abc import Callable

from ..base import ScheduleBase
from ..handles import BlockRV
from ..primitives import reindex_cache as _reindex_cache
from .block_layout import as_index_map


class ReindexCacheMethods(ScheduleBase):
    """reindex_cache_read, reindex_cache_write."""

    def reindex_cache_read(self, block: BlockRV, read_buffer_index: int | str, storage_scope: str,
                           index_map: Callable) -> BlockRV:
        """Read a buffer (its index among the block's reads, or its name) through a new
        `storage_scope` cache laid out by the block's iterators: the block reads
        ``cache[index_map(iterators)]``, filled by a copy block placed where `cache_read` places
        its copy, which repeats the iterators the access uses. The access must be one element per
        iteration, and the map must use exactly the iterators the access uses, one to one; a read
        under a `T.if_then_else` guard is refused (the copy would read it unguarded). Returns the
        copy block.

        Before::

            @T.prim_func
            def before(A: T.Buffer((8, 4), "float32"), C: T.Buffer((8, 4), "float32")):
                for i, j in T.grid(8, 4):
                    with T.block("C"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        C[vi, vj] = A[vi, vj] + T.float32(1)

        Call::

            sch = tdsl.Schedule(before)
            a_shared = sch.reindex_cache_read(sch.get_block("C"), 0, "shared", lambda i, j: (j, i))

        After::

            @T.prim_func
            def after(A: T.Buffer((8, 4), "float32"), C: T.Buffer((8, 4), "float32")):
                A_shared = T.alloc_buffer((4, 8), "float32", scope="shared")
                for i_1, j_1 in T.grid(8, 4):
                    with T.block("A_shared"):
                        vi_1, vj_1 = T.axis.remap("SS", [i_1, j_1])
                        T.reads(A[vi_1, vj_1])
                        T.writes(A_shared[vj_1, vi_1])
                        A_shared[vj_1, vi_1] = A[vi_1, vj_1]
                for i, j in T.grid(8, 4):
                    with T.block("C"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        T.reads(A_shared[vj, vi])
                        T.writes(C[vi, vj])
                        C[vi, vj] = A_shared[vj, vi] + T.float32(1.0)
        """
        self._expect("reindex_cache_read", block, (BlockRV,), "a block handle (from sch.get_block)")
        return self._apply("reindex_cache_read", _reindex_cache.reindex_cache_read, [block],
                           {"read_buffer_index": read_buffer_index, "storage_scope": storage_scope,
                            "index_map": as_index_map(index_map)})

    def reindex_cache_write(self, block: BlockRV, write_buffer_index: int | str, storage_scope: str,
                            index_map: Callable) -> BlockRV:
        """Write a buffer (its index among the block's writes, or its name) through a new
        `storage_scope` cache laid out by the block's iterators: the block writes
        ``cache[index_map(iterators)]`` and a copy block, placed where `cache_write` places its
        copy, stores it back. The same rules as reindex_cache_read. Returns the copy block.

        Before::

            @T.prim_func
            def before(A: T.Buffer((8, 4), "float32"), C: T.Buffer((8, 4), "float32")):
                for i, j in T.grid(8, 4):
                    with T.block("C"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        C[vi, vj] = A[vi, vj] + T.float32(1)

        Call::

            sch = tdsl.Schedule(before)
            c_local = sch.reindex_cache_write(sch.get_block("C"), 0, "local", lambda i, j: (j, i))

        After::

            @T.prim_func
            def after(A: T.Buffer((8, 4), "float32"), C: T.Buffer((8, 4), "float32")):
                C_local = T.alloc_buffer((4, 8), "float32", scope="local")
                for i, j in T.grid(8, 4):
                    with T.block("C"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        T.reads(A[vi, vj])
                        T.writes(C_local[vj, vi])
                        C_local[vj, vi] = A[vi, vj] + T.float32(1.0)
                for i_1, j_1 in T.grid(8, 4):
                    with T.block("C_local"):
                        vi_1, vj_1 = T.axis.remap("SS", [i_1, j_1])
                        T.reads(C_local[vj_1, vi_1])
                        T.writes(C[vi_1, vj_1])
                        C[vi_1, vj_1] = C_local[vj_1, vi_1]
        """
        self._expect("reindex_cache_write", block, (BlockRV,), "a block handle (from sch.get_block)")
        return self._apply("reindex_cache_write", _reindex_cache.reindex_cache_write, [block],
                           {"write_buffer_index": write_buffer_index, "storage_scope": storage_scope,
                            "index_map": as_index_map(index_map)})
