"""Blocks of blocks and tensor intrinsics: blockize, tensorize.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.primitives.blockize`.
"""
from __future__ import annotations

from ..base import ScheduleBase
from ..handles import BlockRV, LoopRV
from ..primitives import blockize as _tensorize
from ..tvm_spelling import true_flags


class BlockizeMethods(ScheduleBase):
    """blockize, tensorize."""

    def blockize(self, loop: LoopRV | list[BlockRV], preserve_unit_iters: bool = False) -> BlockRV:
        """Make the subtree under `loop` an inner block of a new outer block `<name>_o`, whose
        iterators are the outer parts of the bindings (v = vo * E + vi). Given a list of sibling
        blocks instead (TVM), wrap them, with their loops, in one block `outer_<names>_` without
        iterators. `preserve_unit_iters=True` binds an outer iterator to its loop where the loop
        runs once (`vi_o = i0`, TVM's default form); tdsl's default binds the value (`vi_o = 0`).

        Before::

            @T.prim_func
            def before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
                for i_0, i_1 in T.grid(4, 16):
                    with T.block("B"):
                        vi = T.axis.spatial(64, i_0 * 16 + i_1)
                        B[vi] = A[vi] * T.float32(2)

        Call::

            sch = tdsl.Schedule(before)
            i_0, i_1 = sch.get_loops(sch.get_block("B"))
            b_o = sch.blockize(i_1)

        After::

            @T.prim_func
            def after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
                for i_0 in range(4):
                    with T.block("B_o"):
                        vi_o = T.axis.spatial(4, i_0)
                        T.reads(A[vi_o * 16:vi_o * 16 + 16])
                        T.writes(B[vi_o * 16:vi_o * 16 + 16])
                        for i_1 in range(16):
                            with T.block("B"):
                                vi_i = T.axis.spatial(16, i_1)
                                T.reads(A[vi_o * 16 + vi_i])
                                T.writes(B[vi_o * 16 + vi_i])
                                B[vi_o * 16 + vi_i] = A[vi_o * 16 + vi_i] * T.float32(2)
        """
        if isinstance(loop, (list, tuple)):  # TVM's blockize of sibling blocks
            for b in loop:
                self._expect("blockize", b, (BlockRV,), "a loop handle, or a list of block handles")
            return self._apply("blockize", _tensorize.blockize_blocks, [list(loop)])
        self._expect("blockize", loop, (LoopRV,), "a loop handle (from sch.get_loops), or a list of block handles")
        return self._apply("blockize", _tensorize.blockize, [loop], true_flags("blockize", preserve_unit_iters=preserve_unit_iters))

    def tensorize(self, block_or_loop: BlockRV | LoopRV, intrin_name: str, preserve_unit_iters: bool = False) -> None:
        """Compute a block (or the block `blockize(loop)` makes) with the tensor intrinsic
        `intrin_name`, after checking that the code computes exactly its description. The block
        keeps the description's code and is annotated ``"tdsl.tensor_intrin"``; lowering swaps in
        the implementation where the target can run it. A library intrinsic (``"blas.sgemm"``,
        ``"blas.dgemm"``) takes a block or the loop above its i, j, k loops of any constant
        shape and storage layout (`tdsl.schedule.library`); outer loops stay around the call.

        Before::

            @T.prim_func
            def before(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4, 16), "float32")):
                for i, j in T.grid(4, 16):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vi, vj] = A[vi, vj] * T.float32(2)

        Call::

            tdsl.TensorIntrin.register("double16", double16_desc, double16_impl)
            sch = tdsl.Schedule(before)
            i, j = sch.get_loops(sch.get_block("B"))
            sch.tensorize(j, "double16")

        After::

            @T.prim_func
            def after(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4, 16), "float32")):
                for i in range(4):
                    with T.block("B_o"):
                        vi_o = T.axis.spatial(4, i)
                        T.reads(A[vi_o, 0:16])
                        T.writes(B[vi_o, 0:16])
                        T.block_attr({"tdsl.tensor_intrin": "double16"})
                        for j in range(16):
                            with T.block("B"):
                                vj = T.axis.spatial(16, j)
                                T.reads(A[vi_o, vj])
                                T.writes(B[vi_o, vj])
                                B[vi_o, vj] = A[vi_o, vj] * T.float32(2)
        """
        self._expect("tensorize", block_or_loop, (BlockRV, LoopRV), "a block or loop handle")
        from ..composites import library  # generic library intrinsics ("blas.sgemm") take any constant shape

        fn = library.tensorize if library.is_generic(intrin_name) else _tensorize.tensorize
        return self._apply("tensorize", fn, [block_or_loop],
                           {"intrin_name": intrin_name, **true_flags("tensorize", preserve_unit_iters=preserve_unit_iters)})
