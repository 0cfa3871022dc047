"""Attention forward as one fused CUDA kernel: the whole chain Q K^T -> softmax -> P V in one launch.

On target "cuda", at the first block of a chain that is exactly the attention pattern
(`tdsl.intrinsics.cuda_attention`: float16/bfloat16 Q, K, V, float32 scores and softmax, head dim
64 or 128, sequence a multiple of 64, optional causal mask), `FusedAttentionGPU` offers

* **fused** (first, `tdsl.auto_schedule`'s choice): ``outer = sch.blockize([qk, max, exp, ...])``
  and ``sch.annotate(outer, "tdsl.fused_kernel", "cuda.flash_attention_fwd")``. The blocks stay
  inside (the interpreter still runs them); the CUDA lowering replaces the block by one call of
  tdsl's FlashAttention-2 kernel (`tdsl.backends.cuda.flash_attention`), which never stores the
  score matrix. With the target's arch ``sm_90a`` the annotation is
  ``"cuda.flash_attention_fwd_sm90a"``: the same computation by the Hopper kernel (wgmma + TMA,
  warp-specialized: `tdsl.backends.cuda.flash_attention_sm90`);
* **generated**: the blocks unchanged, for the other rules (the mma GEMM tiles, the row
  reductions): a search measures both.

It runs before the inline rule (which would otherwise fold the elementwise blocks into their
neighbours and hide the pattern); anything that is not exactly the pattern is left to the others.
"""
from __future__ import annotations

from ...schedule import Schedule
from .base import Rule


def _has_mma_sync(arch: str) -> bool:
    """mma.sync m16n8k16 and cp.async: sm_80 and later (an unnamed architecture is taken as such)."""
    digits = "".join(c for c in arch.removeprefix("sm_") if c.isdigit())
    return not digits or int(digits) >= 80


class FusedAttentionGPU(Rule):
    """The attention chain as tdsl's fused kernel, beside the generated alternative."""

    name = "fused-attention-gpu"

    def alternatives(self, sch: Schedule, block: str) -> list:
        from ...intrinsics.cuda_attention import FUSED_KERNEL, KERNEL_NAME, KERNEL_NAME_SM90A, find_attention

        arch = getattr(self.hw, "arch", "") or ""
        if not self.hw.is_gpu or not _has_mma_sync(arch):
            return []
        kernel = KERNEL_NAME_SM90A if arch == "sm_90a" else KERNEL_NAME
        found = find_attention(sch.func, block)
        if found is None or found.blocks[0] != block:
            return []

        def fused(s: Schedule) -> None:
            outer = s.blockize([s.get_block(n) for n in found.blocks])
            s.annotate(outer, FUSED_KERNEL, kernel)

        def generated(s: Schedule) -> None:
            return None

        return [fused, generated]
