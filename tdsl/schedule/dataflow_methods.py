"""The Schedule methods of the dataflow families (a mixin of `Schedule`): caching, compute
location, reduction and layout. See `tdsl.schedule.primitives.{cache, compute_at, compute_inline,
reduction, layout}` for the semantics and the legality rules.
"""
from __future__ import annotations

from collections.abc import Callable

from ..errors import ScheduleError
from . import sampling as _sampling
from .handles import BlockRV, LoopRV
from .primitives import cache as _cache
from .primitives import compute_at as _compute_at
from .primitives import compute_inline as _compute_inline
from .primitives import layout as _layout
from .primitives import reduction as _reduction
from .tvm_spelling import true_flags


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


def _stay(func, block, loop):
    """compute_at to the root handle of sample_compute_location: the block stays where it is."""
    from .tree import find_block

    find_block(func, block, "compute_at")
    return func, None


def _inline(func, block, loop):
    """compute_at to the inline handle of sample_compute_location: compute_inline."""
    return _compute_inline.compute_inline(func, block)


class DataflowMethods:
    """cache_read, cache_write, set_scope, compute_at, reverse_compute_at, compute_inline,
    reverse_compute_inline, decompose_reduction, rfactor, transform_layout, storage_align."""

    # caching ------------------------------------------------------------------------------
    def cache_read(self, block: BlockRV, buffer: int | str | None = None, scope: str | None = None,
                   consumer_blocks=None, *, read_buffer_index: int | str | None = None,
                   storage_scope: str | None = None) -> BlockRV:
        """Make `block` read `buffer` (its name, or its index among the block's reads) from a
        copy in `scope`; the copy block, named after the new buffer, runs right before the
        block's loop nest and copies the part the block reads. Returns the copy block.
        ``consumer_blocks=[b1, b2, ...]`` (TVM's): `block` names the buffer, and the listed blocks
        (of one scope) read one cache, copied once before the first of them (twice when the buffer's
        writer shares a loop with some of them: in the loop, and after it for the others).

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

    # compute location ---------------------------------------------------------------------
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

    # reduction ----------------------------------------------------------------------------
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
        return self._apply("rfactor", _reduction.rfactor, [loop], {"factor_axis": factor_axis})

    # layout -------------------------------------------------------------------------------
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
