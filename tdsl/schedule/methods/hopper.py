"""Hopper (sm_90a) pipelines: wgmma_pipeline, warp_specialize.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.primitives.hopper` and `.warp_specialize`.
"""
from __future__ import annotations

from ..base import ScheduleBase
from ..handles import BlockRV, LoopRV
from ..primitives import hopper as _hopper
from ..primitives import warp_specialize as _warp_specialize


class HopperMethods(ScheduleBase):
    """wgmma_pipeline, warp_specialize."""

    def wgmma_pipeline(self, block: BlockRV, tile_n: int = 64, tile_k: int = 64, stages: int = 2,
                       tile_m: int = 64, store: str = "direct") -> LoopRV:
        """Rewrite a function whose one block is a (batched) fp16/bf16 -> fp32 GEMM into an sm_90a
        kernel: per `tile_m` x `tile_n` tile of C one warpgroup per 64 rows (`tile_m` 64 or 128);
        thread 0 issues TMA loads of the A and B
        tiles of each K step (`tile_k` wide, rows of 2 `tile_k` bytes: the 128B swizzle for 64)
        into a ring of `stages` shared tiles guarded by "full" / "empty" mbarriers; every thread
        waits for its stage, issues the wgmma m64n`tile_n`k16 of it (fence, commit), waits for
        the previous step's wgmma (`wgmma_wait_group(1)`: this step's stay in flight) and
        releases the previous step's stage; the accumulators go to C. A GEMM into an
        intermediate C (``T.alloc_buffer``, with ``T.init()``) may be followed by one elementwise
        epilogue block ``D[b?, i, j] = f(C[b?, i, j], bias[j], ...)`` (C read at exactly the index
        written, other parameters' elements indexed by the iterators, any D dtype): the kernel
        stores f of the accumulators to D (``D[row, col] = T.max(C_acc[tx, i] + bias[col], 0)``)
        and C is never written; an epilogue reading C elsewhere, a reduction, C a parameter or
        a second block after the GEMM are refused. ``store="tma"``: the accumulators (after the
        epilogue's expression) go to a shared tile of the output's dtype instead, each thread
        makes its writes visible to TMA (``T.ptx_fence_proxy_async()``), and after a barrier one
        thread stores the tile by TMA (``T.ptx_tma_store(C[by * 128, bx * 128], C_shared[0, 0],
        C_tmap[0])``; float32, float16 or bfloat16 outputs). The tensor maps are buffers the call path fills
        (`A_tmap`, `B_tmap`, recorded as function attributes): the kernel is called with the
        arrays only. A B indexed [k, j] is loaded in TMA boxes of [tile_k, 64] (128B swizzle)
        and read N-major (``T.ptx_wgmma(..., b_major="mn")``), with no copy (only a tile_n with no
        such boxes, e.g. 8, copies it to a K-major `B_t[j, k]` first). Returns the
        K loop (for `warp_specialize`). Needs m a multiple of 64, n of `tile_n`, k of `tile_k`,
        at most 227 KiB of shared tiles (sm_90's limit; above 48 KiB they are dynamic shared memory).

        Before::

            @T.prim_func
            def before(A: T.Buffer((64, 128), "float16"), B: T.Buffer((64, 128), "float16"),
                       C: T.Buffer((64, 64), "float32")):
                for i, j, k in T.grid(64, 64, 128):
                    with T.block("C"):
                        vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                        with T.init():
                            C[vi, vj] = T.float32(0)
                        C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vj, vk], "float32")

        Call::

            sch = tdsl.Schedule(before)
            ko = sch.wgmma_pipeline(sch.get_block("C"), tile_n=64, tile_k=64, stages=2)

        After::

            # the K loop (the barriers' init and the epilogue are thread loops before and after it)
            for ko in range(2):
                for tx in T.thread_binding(128, thread="threadIdx.x"):
                    if tx == 0:
                        T.evaluate(T.ptx_arrive_barrier_expect_tx(bar_full[ko % 2], 16384))
                        T.evaluate(T.ptx_tma_load(A_shared[ko % 2, 0, 0], A[by * 64, ko * 64], A_tmap[0], bar_full[ko % 2]))
                        T.evaluate(T.ptx_tma_load(B_shared[ko % 2, 0, 0], B[bx * 64, ko * 64], B_tmap[0], bar_full[ko % 2]))
                    T.evaluate(T.ptx_wait_barrier(bar_full[ko % 2], ko // 2 % 2))
                    T.evaluate(T.ptx_wgmma_fence())
                    for kk in T.unroll(4):
                        T.evaluate(T.ptx_wgmma(C_acc[tx, 0], A_shared[ko % 2, 0, 16 * kk], B_shared[ko % 2, 0, 16 * kk], 64, tx))
                    T.evaluate(T.ptx_wgmma_commit_group())
                    T.evaluate(T.ptx_wgmma_wait_group(1))
                    if ko >= 1:
                        T.evaluate(T.ptx_arrive_barrier(bar_empty[(ko + 1) % 2]))
        """
        self._expect("wgmma_pipeline", block, (BlockRV,), "a block handle (from sch.get_block)")
        attrs: dict[str, object] = {"tile_n": tile_n, "tile_k": tile_k, "stages": stages, "tile_m": tile_m}
        if not (isinstance(store, str) and store == "direct"):
            attrs["store"] = store
        return self._apply("wgmma_pipeline", _hopper.wgmma_pipeline, [block], attrs)

    def warp_specialize(self, loop: LoopRV, producer_regs: int | None = None,
                        consumer_regs: int | None = None) -> None:
        """Give a pipelined K loop's producer and consumers their own warpgroups: the loop's
        thread loop (128 threads, or c x 128) becomes ``threadIdx.y`` (1 + c) x ``threadIdx.x``
        (128), its leading statements that issue TMA loads (under ``if tx == 0:``) run on
        ``ty == 0`` and the rest on the consumers ``ty == 1`` (1 .. c, the old thread index
        being ``(ty - 1) * 128 + tx``); the kernel's other thread loops (barrier init, epilogue)
        run on the consumers. On the GPU the producer then runs ahead of the consumers by up to the ring's
        stages (the mbarriers order them); one statement after another nothing changes, since
        only thread 0 produced and it did so before the consumers used the stage.

        Before the K loop the roles set their register budgets with setmaxnreg (sm_90a):
        ``if ty == 0: T.ptx_setmaxnreg(False, producer_regs) else: T.ptx_setmaxnreg(True,
        consumer_regs)``. By default 40 and 232 with two consumer warpgroups (a 384-thread kernel
        starts with 65536 / 384 = 168 registers per thread, rounded down to a multiple of 8:
        128 x 40 + 256 x 232 = 3 x 128 x 168), none with one; ``producer_regs=0,
        consumer_regs=0`` leaves them out. Counts are multiples of 8 in [24, 256], the producer's
        at most the starting count, the consumers' at least, and all must fit the CTA's pool;
        others are refused.

        Before::

            for ko in range(4):
                for tx in T.thread_binding(256, thread="threadIdx.x"):
                    if tx == 0:
                        if ko >= 2:
                            T.evaluate(T.ptx_wait_barrier(bar_empty[ko % 2], (ko // 2 + 1) % 2))
                        T.evaluate(T.ptx_arrive_barrier_expect_tx(bar_full[ko % 2], 24576))
                        T.evaluate(T.ptx_tma_load(A_shared[ko % 2, 0, 0], A[by * 128, ko * 64], A_tmap[0], bar_full[ko % 2]))
                        ...
                    T.evaluate(T.ptx_wait_barrier(bar_full[ko % 2], ko // 2 % 2))
                    ...  # wgmma, release the stage

        Call::

            sch.warp_specialize(ko)      # ko = sch.wgmma_pipeline(..., tile_m=128): two consumers

        After::

            for ty in T.thread_binding(3, thread="threadIdx.y"):
                for tx in T.thread_binding(128, thread="threadIdx.x"):
                    if ty == 0:
                        T.evaluate(T.ptx_setmaxnreg(False, 40))
                    else:
                        T.evaluate(T.ptx_setmaxnreg(True, 232))
            for ko in range(4):
                for ty in T.thread_binding(3, thread="threadIdx.y"):
                    for tx in T.thread_binding(128, thread="threadIdx.x"):
                        if ty == 0:
                            if tx == 0:
                                if ko >= 2:
                                    T.evaluate(T.ptx_wait_barrier(bar_empty[ko % 2], (ko // 2 + 1) % 2))
                                ...  # the TMA loads
                        else:
                            T.evaluate(T.ptx_wait_barrier(bar_full[ko % 2], ko // 2 % 2))
                            ...  # wgmma, release the stage
        """
        self._expect("warp_specialize", loop, (LoopRV,), "a loop handle (the K loop of wgmma_pipeline)")
        regs = {k: v for k, v in (("producer_regs", producer_regs), ("consumer_regs", consumer_regs)) if v is not None}
        return self._apply("warp_specialize", _warp_specialize.warp_specialize, [loop], regs)
