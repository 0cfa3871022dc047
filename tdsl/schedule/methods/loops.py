"""Loop transformations: split, add_unit_loop, fuse, reorder, parallel, vectorize, unroll, bind.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.primitives.loops`.
"""
from __future__ import annotations

from collections.abc import Sequence

from ...errors import ScheduleError
from ...ir import PrimExpr
from ..base import ScheduleBase
from ..handles import BlockRV, LoopRV
from ..primitives import loops as _loops
from ..tvm_spelling import true_flags


class LoopMethods(ScheduleBase):
    """split, add_unit_loop, fuse, reorder, parallel, vectorize, unroll, bind."""

    def split(self, loop: LoopRV, factors: Sequence[int | PrimExpr | None], *,
              preserve_unit_iters: bool = False, disable_predication: bool = False) -> list[LoopRV]:
        """Split a loop into one loop per factor, outer to inner; one factor may be None (inferred).
        A factor product above the extent (a None on a non-dividing extent) adds a T.where predicate;
        `disable_predication=True` (TVM) is refused then, and changes nothing otherwise.
        `preserve_unit_iters=True` keeps a new loop of extent 1 in the block bindings (TVM's
        default form `vi = i_0 * 16 + i_1`); tdsl's default folds it (`vi = i_1`).

        Before::

            @T.prim_func
            def before(A: T.Buffer((100,), "float32"), B: T.Buffer((100,), "float32")):
                for i in range(100):
                    with T.block("B"):
                        vi = T.axis.spatial(100, i)
                        B[vi] = A[vi] * T.float32(2)

        Call::

            sch = tdsl.Schedule(before)
            (i,) = sch.get_loops(sch.get_block("B"))
            i_0, i_1 = sch.split(i, factors=[None, 32])

        After::

            @T.prim_func
            def after(A: T.Buffer((100,), "float32"), B: T.Buffer((100,), "float32")):
                for i_0, i_1 in T.grid(4, 32):
                    with T.block("B"):
                        vi = T.axis.spatial(100, i_0 * 32 + i_1)
                        T.where(i_0 * 32 + i_1 < 100)
                        B[vi] = A[vi] * T.float32(2)
        """
        self._expect("split", loop, (LoopRV,), "a loop handle (from sch.get_loops)")
        if not isinstance(factors, (list, tuple)):
            raise ScheduleError(f"split: factors must be a list such as [None, 32], not {type(factors).__name__}")
        attrs = {"factors": list(factors), **true_flags("split", disable_predication=disable_predication,
                                                         preserve_unit_iters=preserve_unit_iters)}
        return self._apply("split", _loops.split, [loop], attrs)

    def add_unit_loop(self, block_or_loop: BlockRV | LoopRV) -> LoopRV:
        """Put a loop of extent 1 directly above a block or a loop (TVM's add_unit_loop); returns it.

        Before::

            @T.prim_func
            def before(A: T.Buffer((), "int32"), C: T.Buffer((), "int32")):
                with T.block("C"):
                    C[()] = A[()] + 1

        Call::

            sch = tdsl.Schedule(before)
            u = sch.add_unit_loop(sch.get_block("C"))

        After::

            @T.prim_func
            def after(A: T.Buffer((), "int32"), C: T.Buffer((), "int32")):
                for u in range(1):
                    with T.block("C"):
                        C[()] = A[()] + 1
        """
        self._expect("add_unit_loop", block_or_loop, (BlockRV, LoopRV), "a block or loop handle")
        return self._apply("add_unit_loop", _loops.add_unit_loop, [block_or_loop])

    def fuse(self, *loops: LoopRV, preserve_unit_iters: bool = True) -> LoopRV:
        """Fuse adjacent, perfectly nested loops (outer to inner) into one. TVM's
        `preserve_unit_iters` changes nothing here: either way a fused loop of extent 1 leaves
        its iterator's binding at 0 (`vj = T.axis.spatial(1, 0)`), as TVM's fuse does.

        Before::

            @T.prim_func
            def before(A: T.Buffer((16, 8), "float32"), B: T.Buffer((16, 8), "float32")):
                for i, j in T.grid(16, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vi, vj] = A[vi, vj] + T.float32(1)

        Call::

            sch = tdsl.Schedule(before)
            i, j = sch.get_loops(sch.get_block("B"))
            i_j_fused = sch.fuse(i, j)

        After::

            @T.prim_func
            def after(A: T.Buffer((16, 8), "float32"), B: T.Buffer((16, 8), "float32")):
                for i_j_fused in range(128):
                    with T.block("B"):
                        vi = T.axis.spatial(16, i_j_fused // 8)
                        vj = T.axis.spatial(8, i_j_fused % 8)
                        B[vi, vj] = A[vi, vj] + T.float32(1)
        """
        for x in loops:
            self._expect("fuse", x, (LoopRV,), "loop handles")
        true_flags("fuse", preserve_unit_iters=preserve_unit_iters)   # checked; the same result either way
        return self._apply("fuse", _loops.fuse, list(loops))

    def reorder(self, *loops: LoopRV) -> None:
        """Reorder loops of one perfect nest; the named loops take each other's places, the loops
        between them that are not named stay where they are.

        Before::

            @T.prim_func
            def before(A: T.Buffer((16, 8), "float32"), B: T.Buffer((8, 16), "float32")):
                for i, j in T.grid(16, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vj, vi] = A[vi, vj]

        Call::

            sch = tdsl.Schedule(before)
            i, j = sch.get_loops(sch.get_block("B"))
            sch.reorder(j, i)

        After::

            @T.prim_func
            def after(A: T.Buffer((16, 8), "float32"), B: T.Buffer((8, 16), "float32")):
                for j, i in T.grid(8, 16):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vj, vi] = A[vi, vj]
        """
        for x in loops:
            self._expect("reorder", x, (LoopRV,), "loop handles")
        return self._apply("reorder", _loops.reorder, list(loops))

    def parallel(self, loop: LoopRV) -> None:
        """Run a loop's iterations on all CPU cores; its blocks must not carry a dependence over it.

        Before::

            @T.prim_func
            def before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
                for i in range(64):
                    with T.block("B"):
                        vi = T.axis.spatial(64, i)
                        B[vi] = A[vi] + T.float32(1)

        Call::

            sch = tdsl.Schedule(before)
            (i,) = sch.get_loops(sch.get_block("B"))
            sch.parallel(i)

        After::

            @T.prim_func
            def after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
                for i in T.parallel(64):
                    with T.block("B"):
                        vi = T.axis.spatial(64, i)
                        B[vi] = A[vi] + T.float32(1)
        """
        self._expect("parallel", loop, (LoopRV,), "a loop handle")
        return self._apply("parallel", _loops.parallel, [loop])

    def vectorize(self, loop: LoopRV) -> None:
        """Run a loop's iterations as SIMD lanes; same legality as parallel.

        Before::

            @T.prim_func
            def before(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4, 16), "float32")):
                for i, j in T.grid(4, 16):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vi, vj] = A[vi, vj] * T.float32(3)

        Call::

            sch = tdsl.Schedule(before)
            i, j = sch.get_loops(sch.get_block("B"))
            sch.vectorize(j)

        After::

            @T.prim_func
            def after(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4, 16), "float32")):
                for i in range(4):
                    for j in T.vectorized(16):
                        with T.block("B"):
                            vi, vj = T.axis.remap("SS", [i, j])
                            B[vi, vj] = A[vi, vj] * T.float32(3)
        """
        self._expect("vectorize", loop, (LoopRV,), "a loop handle")
        return self._apply("vectorize", _loops.vectorize, [loop])

    def unroll(self, loop: LoopRV) -> None:
        """Unroll a loop (always legal).

        Before::

            @T.prim_func
            def before(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
                for i in range(4):
                    with T.block("B"):
                        vi = T.axis.spatial(4, i)
                        B[vi] = A[vi] - T.float32(1)

        Call::

            sch = tdsl.Schedule(before)
            (i,) = sch.get_loops(sch.get_block("B"))
            sch.unroll(i)

        After::

            @T.prim_func
            def after(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
                for i in T.unroll(4):
                    with T.block("B"):
                        vi = T.axis.spatial(4, i)
                        B[vi] = A[vi] - T.float32(1)
        """
        self._expect("unroll", loop, (LoopRV,), "a loop handle")
        return self._apply("unroll", _loops.unroll, [loop])

    def bind(self, loop: LoopRV, thread_axis: str) -> None:
        """Bind a loop to a GPU thread axis: blockIdx.x/y/z, threadIdx.x/y/z or vthread.x/y/z.

        Before::

            @T.prim_func
            def before(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
                for i in range(256):
                    with T.block("B"):
                        vi = T.axis.spatial(256, i)
                        B[vi] = A[vi] * A[vi]

        Call::

            sch = tdsl.Schedule(before)
            (i,) = sch.get_loops(sch.get_block("B"))
            bx, tx = sch.split(i, factors=[None, 64])
            sch.bind(bx, "blockIdx.x")
            sch.bind(tx, "threadIdx.x")

        After::

            @T.prim_func
            def after(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
                for i_0 in T.thread_binding(4, thread="blockIdx.x"):
                    for i_1 in T.thread_binding(64, thread="threadIdx.x"):
                        with T.block("B"):
                            vi = T.axis.spatial(256, i_0 * 64 + i_1)
                            B[vi] = A[vi] * A[vi]
        """
        self._expect("bind", loop, (LoopRV,), "a loop handle")
        return self._apply("bind", _loops.bind, [loop], {"thread_axis": thread_axis})
