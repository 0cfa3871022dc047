"""Caching: cache_read, cache_write, set_scope.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.primitives.cache`.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ..base import ScheduleBase
from ..handles import BlockRV
from ..primitives import cache as _cache


def _tvm_cache_args(kind: str, block, buffer, scope, consumer_blocks, index, storage_scope):
    """TVM's keyword names (read_buffer_index / write_buffer_index, storage_scope) and
    `consumer_blocks` (blocks or names; recorded only when given, so that older traces replay)."""
    buffer = index if buffer is None else buffer
    scope = storage_scope if scope is None else scope
    if buffer is None or scope is None:
        raise ScheduleError(f"{kind}: give the buffer (its name or index) and the storage scope")
    attrs = {"buffer": buffer, "scope": scope}
    if consumer_blocks is not None:
        if not isinstance(consumer_blocks, (list, tuple)):
            raise ScheduleError(f"{kind}: consumer_blocks is a list of blocks, not {consumer_blocks!r}")
        attrs["consumer_blocks"] = list(consumer_blocks)
    return attrs


class CacheMethods(ScheduleBase):
    """cache_read, cache_write, set_scope."""

    def cache_read(self, block: BlockRV, buffer: int | str | None = None, scope: str | None = None,
                   consumer_blocks=None, *, read_buffer_index: int | str | None = None,
                   storage_scope: str | None = None, dtype: str | None = None) -> BlockRV:
        """Make `block` read `buffer` (its name, or its index among the block's reads) from a
        copy in `scope`; the copy block, named after the new buffer, runs right before the
        block's loop nest and copies the part the block reads. Returns the copy block.
        ``consumer_blocks=[b1, b2, ...]`` (TVM's): `block` names the buffer, and the listed blocks
        (of one scope) read one cache, copied once before the first of them (twice when the buffer's
        writer shares a loop with some of them: in the loop, and after it for the others).
        ``dtype="float32"`` (tdsl's; TVM's cache_read has none): the copy converts, for a block that
        reads the buffer only as ``T.cast(A[...], "float32")``: the cache holds the cast values
        and the block's casts go (a float16 GEMM becomes a float32 GEMM on converted copies).
        Only an exact widening is legal (float16/bfloat16 -> float32, int8 -> int32, ...; see
        `tdsl.schedule.primitives.cache_convert`).

        Before::

            @T.prim_func
            def before(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8, 8), "float32")):
                for i, j in T.grid(8, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vi, vj] = A[vi, vj] * T.float32(2)

        Call::

            sch = tdsl.Schedule(before)
            a_shared = sch.cache_read(sch.get_block("B"), "A", "shared")

        After::

            @T.prim_func
            def after(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8, 8), "float32")):
                A_shared = T.alloc_buffer((8, 8), "float32", scope="shared")
                for ax0, ax1 in T.grid(8, 8):
                    with T.block("A_shared"):
                        v0, v1 = T.axis.remap("SS", [ax0, ax1])
                        T.reads(A[v0, v1])
                        T.writes(A_shared[v0, v1])
                        A_shared[v0, v1] = A[v0, v1]
                for i, j in T.grid(8, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        T.reads(A_shared[vi, vj])
                        T.writes(B[vi, vj])
                        B[vi, vj] = A_shared[vi, vj] * T.float32(2.0)
        """
        self._expect("cache_read", block, (BlockRV,), "a block handle (from sch.get_block)")
        attrs = _tvm_cache_args("cache_read", block, buffer, scope, consumer_blocks, read_buffer_index, storage_scope)
        if dtype is not None:   # recorded only when given, so that older traces replay
            attrs["dtype"] = str(dtype)
        return self._apply("cache_read", _cache.cache_read, [block], attrs)

    def cache_write(self, block: BlockRV, buffer: int | str | None = None, scope: str | None = None,
                   consumer_blocks=None, *, write_buffer_index: int | str | None = None,
                   storage_scope: str | None = None) -> BlockRV:
        """Make `block` write `buffer` (its name, or its index among the block's writes) into a
        new buffer in `scope`, copied back by a block (named after the new buffer) right after the
        block's loop nest. Returns the copy block. ``consumer_blocks=[...]`` (TVM's): the listed
        readers read the new buffer instead, so the copy back moves out past them.

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
            c_local = sch.cache_write(sch.get_block("C"), 0, "local")

        After::

            @T.prim_func
            def after(A: T.Buffer((8, 8), "float32"), C: T.Buffer((8,), "float32")):
                C_local = T.alloc_buffer((8,), "float32", scope="local")
                for i, k in T.grid(8, 8):
                    with T.block("C"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        T.reads(C_local[vi], A[vi, vk])
                        T.writes(C_local[vi])
                        with T.init():
                            C_local[vi] = T.float32(0.0)
                        C_local[vi] = C_local[vi] + A[vi, vk]
                for ax0 in range(8):
                    with T.block("C_local"):
                        v0 = T.axis.remap("S", [ax0])
                        T.reads(C_local[v0])
                        T.writes(C[v0])
                        C[v0] = C_local[v0]
        """
        self._expect("cache_write", block, (BlockRV,), "a block handle (from sch.get_block)")
        attrs = _tvm_cache_args("cache_write", block, buffer, scope, consumer_blocks, write_buffer_index,
                                storage_scope)
        return self._apply("cache_write", _cache.cache_write, [block], attrs)

    def set_scope(self, block: BlockRV, buffer: int | str, scope: str) -> None:
        """Change the storage scope of a buffer the function allocates (named, or by its index
        among the block's writes, as in TVM: `set_scope(block, 0, "shared")` is the block's
        first written buffer).

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
            sch.set_scope(sch.get_block("B"), "B", "shared")

        After::

            @T.prim_func
            def after(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
                B = T.alloc_buffer((8,), "float32", scope="shared")
                for i in range(8):
                    with T.block("B"):
                        vi = T.axis.remap("S", [i])
                        T.reads(A[vi])
                        T.writes(B[vi])
                        B[vi] = A[vi] + T.float32(1.0)
                for i_1 in range(8):
                    with T.block("C"):
                        vi_1 = T.axis.remap("S", [i_1])
                        T.reads(B[vi_1])
                        T.writes(C[vi_1])
                        C[vi_1] = B[vi_1] * T.float32(2.0)
        """
        self._expect("set_scope", block, (BlockRV,), "a block handle (from sch.get_block)")
        return self._apply("set_scope", _cache.set_scope, [block], {"buffer": buffer, "scope": scope})
