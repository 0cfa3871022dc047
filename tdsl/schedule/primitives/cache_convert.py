"""cache_read with `dtype=`: a copy that widens the buffer's elements exactly, for readers that
only ever read them through a cast to that dtype.

Legal when the widening is exact (every value of the narrow type is a value of the wide one:
float16 / bfloat16 -> float32 / float64, float32 -> float64, a signed integer to a wider signed
one, an unsigned one to a wider integer of either sign, an integer to a float whose mantissa
holds it: int8 / int16 -> float32, int32 -> float64) and every read of the buffer in each
consumer block is the operand of `T.cast(..., dtype)`. The copy block stores `T.Cast(dtype, A[v])`; in the consumers
`T.cast(A[...], dtype)` becomes `A_global[...]`, so the program computes the same values.
"""
from __future__ import annotations

from ...dtypes import DataType, as_dtype
from ...ir import Buffer, BufferLoad, Cast, IRMutator, IRVisitor, PrimExpr, PrimFunc
from ...script.printer import expr_str
from ..errors import block_name, schedule_error


def exact_widening(src: DataType, dst: DataType) -> bool:
    """Every value of scalar type `src` is exactly a value of `dst` (another type)."""
    if src == dst or src.lanes != 1 or dst.lanes != 1:
        return False
    if src.is_float:   # bfloat16 has float32's exponent range, float16 fits in both
        return dst.code == "float" and dst.bits > src.bits
    if not src.is_integer:
        return False
    if dst.is_integer:
        return dst.bits > src.bits and (src.is_uint or dst.is_int)
    if dst.is_float:   # every integer of magnitude <= 2**mantissa is exact
        mantissa = {("float", 16): 11, ("bfloat", 16): 8, ("float", 32): 24, ("float", 64): 53}[(dst.code, dst.bits)]
        return (src.bits if src.is_uint else src.bits - 1) <= mantissa
    return False


def check_dtype(func: PrimFunc, buf: Buffer, dtype, block: str) -> DataType:
    """The cache's dtype, checked to widen `buf`'s elements exactly (or to be theirs: a plain copy)."""
    try:
        dt = as_dtype(dtype)
    except (ValueError, TypeError):
        raise schedule_error(func, "cache_read", f"dtype={dtype!r} is not a data type", blocks=(block,),
                             rule="dtype names a scalar type such as 'float32' or 'int32'") from None
    if dt != buf.dtype and not exact_widening(buf.dtype, dt):
        raise schedule_error(func, "cache_read", f"dtype={str(dt)!r}: the cache of {buf.name} ({buf.dtype}) "
                             f"in {block_name(block)} would not hold every {buf.dtype} value exactly",
                             blocks=(block,),
                             rule="cache_read(..., dtype=) widens exactly: float16/bfloat16 -> float32/float64, "
                                  "float32 -> float64, an integer to a wider integer (int8 -> int32, uint8 -> "
                                  "int16/uint16/...), 8/16-bit integers -> float32",
                             fix="leave dtype out for a plain copy")
    return dt


class _NotCast(IRVisitor):
    """The first read of `buf` that is not the operand of a cast to `dtype`."""

    def __init__(self, buf: Buffer, dtype: DataType):
        self.buf, self.dtype = buf, dtype
        self.found: BufferLoad | None = None

    def visit_Cast(self, node: Cast) -> None:
        if isinstance(node.value, BufferLoad) and node.value.buffer is self.buf and node.dtype == self.dtype:
            for i in node.value.indices:
                self.visit(i)
            return
        self.generic_visit(node)

    def visit_BufferLoad(self, node: BufferLoad) -> None:
        if node.buffer is self.buf and self.found is None:
            self.found = node
        self.generic_visit(node)


def check_reads_are_casts(func: PrimFunc, consumer, buf: Buffer, dtype: DataType) -> None:
    """Refuse (naming the block, the buffer and the read) when `consumer` (a Block) reads `buf`
    other than as `T.cast(buf[...], dtype)`."""
    finder = _NotCast(buf, dtype)
    for part in (consumer.body, consumer.init):
        if part is not None:
            finder.visit(part)
    if finder.found is not None:
        raise schedule_error(func, "cache_read", f"{block_name(consumer.name)} reads {buf.name} as "
                             f"{expr_str(finder.found)}, not through T.cast(..., {str(dtype)!r}), so a {dtype} "
                             "cache cannot replace it", blocks=(consumer.name,),
                             rule="cache_read(..., dtype=) needs every read of the buffer in the consumer to be "
                                  "T.cast(buffer[...], dtype): the cast moves into the copy",
                             fix="leave dtype out for a plain copy")


class ConvertingRedirect(IRMutator):
    """`T.cast(old[idx], new.dtype)` -> `new[idx]` (and, where the dtypes agree, old -> new)."""

    def __init__(self, old: Buffer, new: Buffer):
        self.old, self.new = old, new

    def visit_Cast(self, node: Cast):
        v = node.value
        if isinstance(v, BufferLoad) and v.buffer is self.old and node.dtype == self.new.dtype:
            return BufferLoad(self.new, tuple(self.visit(i) for i in v.indices))
        return self.generic_visit(node)

    def visit_BufferLoad(self, node: BufferLoad):
        node = self.generic_visit(node)
        if node.buffer is self.old:
            assert self.old.dtype == self.new.dtype, "checked by check_reads_are_casts"
            return BufferLoad(self.new, node.indices)
        return node


def converted(value: PrimExpr, dst: Buffer) -> PrimExpr:
    """What a copy into `dst` stores: the value, cast to dst's dtype where they differ."""
    return value if value.dtype == dst.dtype else Cast(dst.dtype, value)
