"""Lowered PrimFunc -> LLVM IR (llvmlite.ir): the emitter of kernel bodies and outlined
parallel loops (`_Emitter`), joined from its parts by concern: emit_base (state, exits, module
context, helpers), emit_stmt (statements), emit_address (buffers, loads, stores, index
arithmetic), emit_convert (conversions), emit_arith (expressions and arithmetic), mathlib (math
functions). The entry points around a body and `codegen()` are in `entry`, LLVM types in
`lltypes`.

Return codes: 0 ok, -1 "check slowly", -2 out of memory, k > 0 run-time bounds check k failed.

Process-specific addresses (the thread pool's launch function, numpy's ndarray type and dtype
descriptors) are never baked into the code, so the object code can be cached on disk: they
sit in the global `<sym>_ctx`, filled by the Kernel after loading.

Value representation in registers: bool is i1 (i8 in memory); bfloat16 is a float rounded to
bfloat16 after every operation (i16 in memory), which is what ml_dtypes computes.
"""
from __future__ import annotations

from ...script.printer import message_text as expr_text
from .emit_address import AddressEmitter
from .emit_arith import ArithmeticEmitter
from .emit_base import ENTRY_ATTRIBUTES, EmitterBase, _Module, _used_vars_and_buffers, lane_expr  # noqa: F401 (entry.py)
from .emit_convert import ConversionEmitter
from .emit_stmt import StatementEmitter
from .lltypes import I32, lltype, memtype  # noqa: F401 (public here too)
from .mathlib import MathEmitter


class _Emitter(StatementEmitter, AddressEmitter, ConversionEmitter, ArithmeticEmitter, EmitterBase, MathEmitter):
    """Emits one LLVM function: a kernel body or an outlined parallel loop body."""


__all__ = ["ENTRY_ATTRIBUTES", "expr_text", "lane_expr", "lltype", "memtype"]
