"""What opaque calls do to memory: TVM's WMMA builtins and pointer arguments.

A call that takes a buffer's address (`T.address_of(A[i])`, `A.data`, `A.access_ptr(...)`) may
touch any element of that buffer, so region inference gives it the whole buffer. TVM's warp
matrix builtins (`T.tvm_fill_fragment`, `T.tvm_load_matrix_sync`, `T.tvm_mma_sync`,
`T.tvm_store_matrix_sync`, `T.tvm_bmma_sync`) say which pointer argument they read and which
they write; any other call with an address is taken to read and write it. `llvm.prefetch`
touches nothing (a hint). No backend runs the WMMA builtins as written (the interpreter, the CPU
and the CUDA backends refuse them by name, `wmma_refusal`): tdsl's CUDA tensor-core path is the
`cuda.wmma.*` intrinsics of tdsl.intrinsics.cuda.
"""
from __future__ import annotations

# name -> (number of arguments, {argument index: "r" | "w"}) for the pointer arguments
WMMA_BUILTINS: dict[str, tuple[int, dict[int, str]]] = {
    "tvm_fill_fragment": (6, {0: "w"}),                      # (frag, m, n, k, index, value)
    "tvm_load_matrix_sync": (8, {0: "w", 5: "r"}),           # (frag, m, n, k, index, ptr, stride, layout)
    "tvm_store_matrix_sync": (8, {0: "r", 5: "w"}),          # (frag, m, n, k, index, ptr, stride, layout)
    "tvm_mma_sync": (8, {0: "w", 2: "r", 4: "r", 6: "r"}),   # (d, di, a, ai, b, bi, c, ci)
    "tvm_bmma_sync": (8, {0: "w", 2: "r", 4: "r", 6: "r"}),
}


def pointer_effect(op: str, index: int) -> str:
    """"r", "w" or "rw": what call `op` does through the address it gets as argument `index`."""
    known = WMMA_BUILTINS.get(op)
    if known is not None:
        return known[1].get(index, "rw")
    return "rw"


def touches_memory(op: str) -> bool:
    """False for calls whose addresses are hints only (prefetch)."""
    return not op.startswith("llvm.prefetch")


def wmma_refusal(op: str, where: str) -> str:
    """The message for a WMMA builtin met by a backend (none of tdsl's runs them as written)."""
    return (f"{where}: T.{op} is a TVM warp-matrix (WMMA) builtin, which tdsl parses and schedules as an "
            "opaque call but no tdsl backend runs; on CUDA, tensorize with tdsl's WMMA intrinsics "
            '(sch.tensorize(loop, "cuda.wmma.mma_16x16x16_f16f32"), cuda.wmma.load_a_16x16_f16_shared, '
            "cuda.wmma.fill_16x16_f32, cuda.wmma.store_16x16_f32_global: tdsl.intrinsics.cuda); "
            "elsewhere compute the block with plain code")


# TVM's asynchronous-copy builtins (tdsl.lower.software_pipeline makes them; the CUDA backend
# emits cp.async): T.ptx_cp_async(dst_element, src_element, bytes) copies `bytes` (4, 8 or 16)
# from the global element on to the shared one, complete at a later T.ptx_wait_group(n) (at most
# n of the thread's newest groups of copies, made by T.ptx_commit_group(), still pending).
CP_ASYNC = "ptx_cp_async"
COMMIT_GROUP = "ptx_commit_group"
WAIT_GROUP = "ptx_wait_group"
ASYNC_CALLS = (CP_ASYNC, COMMIT_GROUP, WAIT_GROUP)

# TVM's mbarrier builtins and tdsl's TMA load (Hopper; the CUDA backend emits the device functions of
# tdsl.backends.cuda.sm90). Barriers are elements of a shared "uint64" buffer (TVM's barrier_array):
# T.ptx_init_barrier_thread_count(bars[i], count), T.ptx_arrive_barrier(bars[i]),
# T.ptx_arrive_barrier_expect_tx(bars[i], bytes), T.ptx_wait_barrier(bars[i], parity),
# T.ptx_fence_proxy_async(), T.ptx_tma_load(dst, src, tensor_map, bars[i], *coords): the box of
# `src`'s tensor at `coords` (outermost first; as big as dst's last len(coords) axes) into dst,
# completing on the barrier's transaction count. Run one after another (the interpreter), the
# barrier calls do nothing and a TMA load is a copy (zero outside the tensor).
MBARRIER_INIT = "ptx_init_barrier_thread_count"
MBARRIER_ARRIVE = "ptx_arrive_barrier"
MBARRIER_ARRIVE_EXPECT_TX = "ptx_arrive_barrier_expect_tx"
MBARRIER_WAIT = "ptx_wait_barrier"
FENCE_PROXY_ASYNC = "ptx_fence_proxy_async"
TMA_LOAD = "ptx_tma_load"
# T.ptx_tma_store(C[y, x], C_sh[0, 0], tensor_map[0]): the box of C at (y, x), as big as C_sh's last
# axes, from shared memory by TMA (cp.async.bulk.tensor ... bulk_group), committed and waited for
# (bulk wait_group 0) before the statement ends; elements outside C are not written. The writes
# of C_sh must be made visible to TMA first (T.ptx_fence_proxy_async, then a barrier).
TMA_STORE = "ptx_tma_store"
# T.ptx_wgmma(D[t, 0], A_sh[s, 0, k], B_sh[s, 0, k], n, lane): wgmma.mma_async m64nNk16, f32 += f16/bf16,
# A (64 x 16) and B (n x 16) both K-major from shared tiles whose rows are the swizzle span (32, 64 or
# 128 bytes); thread `lane` of the warpgroup holds D's n / 2 elements from D[t, 0] on (the PTX ISA's
# accumulator layout). Run one after another, each thread adds its own elements of A B^T; the
# fence, commit_group and wait_group calls do nothing.
WGMMA = "ptx_wgmma"
# With b_major="mn", T.ptx_wgmma(D[t, 0], A_sh[s, 0, k], B_sh[s, 0, k, 0], n, lane, b_major="mn") reads B
# N-major (wgmma's imm-trans-b): B_sh's last axes are K rows of `span` columns each (span: 16, 32 or
# 64 halves, the swizzle span), element (col, k) of the operand at B_sh[.., k0 + k, c0 + col % span],
# col // span stepping along the nearest earlier axis longer than 1 (the TMA boxes of `span`
# columns side by side); the call then carries B's row bytes and that axis's byte stride as its
# 7th and 8th arguments (the parser computes them from the shapes, the printer leaves them out).
WGMMA_FENCE = "ptx_wgmma_fence"
WGMMA_COMMIT_GROUP = "ptx_wgmma_commit_group"
WGMMA_WAIT_GROUP = "ptx_wgmma_wait_group"
# T.ptx_setmaxnreg(inc, count): setmaxnreg.inc / .dec (sm_90a): the executing warpgroup's per-thread
# register budget raised (inc) or lowered to `count` (a multiple of 8 in [24, 256]); nothing sequentially.
SETMAXNREG = "ptx_setmaxnreg"
SETMAXNREG_RANGE = (24, 256)
MBARRIER_CALLS = (MBARRIER_INIT, MBARRIER_ARRIVE, MBARRIER_ARRIVE_EXPECT_TX, MBARRIER_WAIT)
HOPPER_CALLS = (*MBARRIER_CALLS, FENCE_PROXY_ASYNC, TMA_LOAD, TMA_STORE, WGMMA, WGMMA_FENCE, WGMMA_COMMIT_GROUP, WGMMA_WAIT_GROUP,
                SETMAXNREG)


def launch_registers(threads: int) -> int:
    """The registers per thread a kernel of `threads` threads that uses setmaxnreg starts with:
    ptxas gives it the most its __launch_bounds__ allow, 65536 / threads rounded down to a
    multiple of 8, at most 255 (168 for 384 threads); the CTA's pool is that x threads."""
    return min(255, 65536 // threads) // 8 * 8


def setmaxnreg_problem(count) -> str | None:
    """Why `count` is not a register count setmaxnreg takes (PTX ISA: a multiple of 8 in
    [24, 256]); None when it is one."""
    lo, hi = SETMAXNREG_RANGE
    if isinstance(count, bool) or not isinstance(count, int) or count % 8 or not lo <= count <= hi:
        return f"setmaxnreg takes a register count that is a multiple of 8 in [{lo}, {hi}], got {count!r}"
    return None


def wgmma_b_mn(call) -> tuple[int, int] | None:
    """(B's row bytes, the byte stride between its boxes of columns) of a T.ptx_wgmma reading B
    N-major; None for a K-major B."""
    if len(call.args) < 8:
        return None
    return int(call.args[6].value), int(call.args[7].value)


def wgmma_box_axis(shape: tuple) -> int | None:
    """The axis an N-major B operand's column boxes step along: the nearest one before its K axis
    (the second-last) longer than 1; None when there is none."""
    for ax in range(len(shape) - 3, -1, -1):
        ext = shape[ax]
        if getattr(ext, "value", ext) != 1:
            return ax
    return None


def wgmma_layout(lane, i):
    """(row, column) of accumulator element `i` of warpgroup thread `lane` in wgmma's m64nNk16
    D fragment (PTX ISA "Register Fragments and Shared Memory Matrix Layouts" for wgmma .m64nNk16):
    rows 16 * warp + lane-in-warp // 4 (+ 8 for the second pair of each four), columns 8 * (i // 4)
    + 2 * (lane % 4) + i % 2. Works on ints and PrimExprs."""
    row = 16 * (lane // 32) + (lane % 32) // 4 + 8 * ((i // 2) % 2)
    col = 8 * (i // 4) + 2 * (lane % 4) + i % 2
    return row, col
