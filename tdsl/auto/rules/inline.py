"""AutoInline: elementwise producers disappear into their consumers, elementwise consumers into
their producers.

* A spatial block that writes an intermediate buffer (not a parameter) with one store is inlined
  into its readers (`compute_inline`): chains of elementwise steps and padding become one loop
  nest. Not inlined (left to the compute-location rules): a block whose body calls a
  transcendental function (exp, ...) and has several readers (it would be computed once per
  reader), and padding whose reader is a multiply-accumulate that a micro-kernel can take (the
  micro-kernel wants a plain operand; the padded copy is its packed operand) -- in the design
  space that one is the second alternative. On CUDA, a producer read by a GEMM or a
  convolution that `GPUMmaTiling` / `GPUMmaConv` put on the tensor cores is not inlined either
  (the operand tiles then come in by plain 16-byte cp.async copies: a padding stays a padded
  copy, attention's softmax its own kernel writing P).
* A spatial block that writes a parameter and reads one intermediate buffer of a spatial
  producer is inlined into that producer (`reverse_compute_inline`) when `compute_inline` of the
  producer did not already do it.
"""
from __future__ import annotations

from ...schedule import Schedule
from ..analysis import block_info, consumers, matmul_roles, producers
from .base import Rule
from .gpu_mma_conv import feeds_mma


def _feeds_matmul(sch: Schedule, block: str) -> bool:
    for consumer in consumers(sch.func, block):
        roles = matmul_roles(block_info(sch.func, consumer), ("float32", "int32"))  # fp32, bf16, int8
        if roles is not None:
            return True
    return False


class AutoInline(Rule):
    """Inline elementwise producers into consumers; see the module docstring."""

    name = "auto-inline"

    def alternatives(self, sch: Schedule, block: str) -> list:
        info = block_info(sch.func, block)
        if not info.is_spatial or info.store is None or not info.top_level:
            return []
        if not info.writes_output:
            readers = consumers(sch.func, block)
            if not readers or (info.expensive and len(readers) > 1):
                return []

            def inline(s: Schedule) -> None:
                s.compute_inline(s.get_block(block))

            if _feeds_matmul(sch, block) and self.hw.kind == "cpu" and self.hw.isa:
                return [lambda s: None, inline]
            if self.hw.is_gpu and feeds_mma(sch, block):
                return [lambda s: None, inline]
            return [inline]
        writers = producers(sch.func, block)
        if len(writers) != 1:
            return []
        producer = block_info(sch.func, writers[0])
        if not producer.is_spatial or producer.writes_output or producer.expensive:
            return []

        def reverse(s: Schedule) -> None:
            s.reverse_compute_inline(s.get_block(block))

        return [reverse]
