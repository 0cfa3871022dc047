"""The LLVM emitter's addressing: buffer extents and pointers, flat indices, bounds checks,
loads and stores (streaming ones too), and index arithmetic in i32/i64 with per-block CSE
(a part of `codegen._Emitter`)."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

from llvmlite import ir

from ...dtypes import DataType, int64
from ...errors import TargetError
from ...ir import (
    Binary,
    Broadcast,
    Buffer,
    BufferLoad,
    Cast,
    IntImm,
    PrimExpr,
    Ramp,
    Var,
    const,
    is_const,
)
from ...script.printer import message_text as expr_text
from .emit_base import (
    _I32_ZERO,
    _INDEX_OPS,
    EmitterBase,
    _fold_index,
    _null,
    _operand_key,
)
from .lltypes import F32, I1, I8, I32, I64, _const, _gep, _size_of, memtype


class AddressEmitter(EmitterBase):
    # -- buffers ---------------------------------------------------------------------------
    def extent_of(self, buf: Buffer) -> ir.Value:
        """The number of elements of a buffer, as i64 (a constant when the shape is)."""
        if all(isinstance(s, IntImm) for s in buf.shape):
            return ir.Constant(I64, math.prod(cast(IntImm, s).value for s in buf.shape))
        total = None
        for s in buf.shape:
            v = self.to_i64(self.expr(s), s.dtype)
            total = v if total is None else self.b.mul(total, v)
        if total is None:
            return ir.Constant(I64, 1)
        if isinstance(total, ir.Constant):
            return total
        return total

    def checked_count(self, buf: Buffer) -> tuple[ir.Value, ir.Value | None]:
        """The element count of a buffer of symbolic shape, multiplied factor by factor with an
        overflow flag (None when nothing can overflow): n * n * n * n with n = 65536 is 2**64,
        which int64 arithmetic would wrap to 0 and allocate nothing."""
        factors: list[PrimExpr] = []
        for dim in buf.shape:
            stack = [dim]
            while stack:
                e = stack.pop()
                if isinstance(e, Binary) and e.op == "mul" and e.dtype.bits == 64 and e.dtype.lanes == 1:
                    stack += [e.b, e.a]
                else:
                    factors.append(e)
        smul = self.m.intrinsic("llvm.smul.with.overflow.i64", ir.LiteralStructType([I64, ir.IntType(1)]),
                                [I64, I64])
        total: ir.Value = ir.Constant(I64, 1)
        wrapped: ir.Value | None = None
        for i, f in enumerate(factors):
            v = self.to_i64(self.expr(f), f.dtype)
            if i == 0:
                total = v
                continue
            both = self.b.call(smul, [total, v])
            total, flag = self.b.extract_value(both, 0), self.b.extract_value(both, 1)
            wrapped = flag if wrapped is None else self.b.or_(wrapped, flag)
        return total, wrapped

    def flat_index(self, buf: Buffer, indices) -> PrimExpr:
        """The one flat index of an access (lowered IR has one already)."""
        if len(indices) == 1 and not buf.strides and buf.elem_offset is None:
            return indices[0]
        if len(indices) != len(buf.shape):
            raise TargetError(f"buffer {buf.name!r} has {len(buf.shape)} dimensions but is indexed with "
                              f"{len(indices)} indices")
        strides = list(buf.strides)
        if not strides:
            acc = None
            for s in reversed(buf.shape):
                strides.insert(0, acc if acc is not None else IntImm(1, s.dtype))
                acc = s if acc is None else acc * s
        idx: Any = None
        for i, st in zip(indices, strides):
            st = st if st.dtype == i.dtype.element else Cast(i.dtype.element, st)
            if i.dtype.lanes > 1:
                st = Broadcast(st, i.dtype.lanes)
            term = i * st
            idx = term if idx is None else idx + term
        if buf.elem_offset is not None:
            off = buf.elem_offset if buf.elem_offset.dtype == idx.dtype.element else Cast(idx.dtype.element,
                                                                                             buf.elem_offset)
            idx = idx + (Broadcast(off, idx.dtype.lanes) if idx.dtype.lanes > 1 else off)
        return idx

    def buffer_ptr(self, buf: Buffer) -> tuple[ir.Value, ir.Value]:
        if buf not in self.bufs:
            raise TargetError(f"buffer {buf.name!r} is used outside its allocation (or is not a parameter)")
        return self.bufs[buf]

    def check_bounds(self, buf: Buffer, index: PrimExpr, lo: ir.Value, hi: ir.Value, extent: ir.Value) -> None:
        """Fail with the check's code unless lo >= 0 and hi < extent (i64 values)."""
        code = self.m.add_check(buf, index, Var("n") if not isinstance(extent, ir.Constant) else
                                IntImm(int(extent.constant), int64))
        if not isinstance(extent, ir.Constant):
            self.m.checks[-1]["extent"] = " * ".join(expr_text(s) for s in buf.shape) or "1"
        bad = self.b.or_(self.b.icmp_signed("<", lo, ir.Constant(I64, 0)), self.b.icmp_signed(">=", hi, extent))
        self.fail_if(bad, code)

    def address(self, buf: Buffer, indices) -> tuple[str, ir.Value, int]:
        """Classify an access: ("scalar", i64 index), ("contig", i64 base), ("lanes", <n x i64>)."""
        _, extent = self.buffer_ptr(buf)
        index = self.flat_index(buf, indices)
        lanes = index.dtype.lanes
        if lanes == 1:
            i = self.index(index)
            if self.m.bounds_check:
                self.check_bounds(buf, index, i, i, extent)
            return "scalar", i, 1
        if isinstance(index, Ramp) and isinstance(index.stride, IntImm) and index.stride.value == 1:
            base = self.index(index.base)
            if self.m.bounds_check:
                last = self.b.add(base, ir.Constant(I64, lanes - 1))
                self.check_bounds(buf, index, base, last, extent)
            return "contig", base, lanes
        if isinstance(index, Broadcast):
            i = self.index(index.value)
            if self.m.bounds_check:
                self.check_bounds(buf, index, i, i, extent)
            return "bcast", i, lanes
        periodic = _periodic(index)
        if periodic is not None:
            base, width = periodic
            b = self.index(base)
            if self.m.bounds_check:
                self.check_bounds(buf, index, b, self.b.add(b, ir.Constant(I64, width - 1)), extent)
            return f"periodic{width}", b, lanes
        vec64 = self.index(index)
        if self.m.bounds_check:
            vty = vec64.type
            neg = self.b.icmp_signed("<", vec64, _const(vty, 0))
            over = self.b.icmp_signed(">=", vec64, self._splat(extent, lanes))
            anybad = self.b.or_(neg, over)
            red = self.m.intrinsic(f"llvm.vector.reduce.or.v{lanes}i1", I1, [anybad.type])
            code = self.m.add_check(buf, index, IntImm(0, int64))
            self.m.checks[-1]["extent"] = " * ".join(expr_text(s) for s in buf.shape) or "1"
            self.fail_if(self.b.call(red, [anybad]), code)
        return "lanes", vec64, lanes

    def load(self, e: BufferLoad) -> ir.Value:
        return self.from_memory(self.load_raw(e), e.dtype)

    def load_raw(self, e: BufferLoad) -> ir.Value:
        """The loaded value in its memory type (bfloat16 as i16 bits, bool as i8)."""
        buf = e.buffer
        ptr, _ = self.buffer_ptr(buf)
        kind, where, lanes = self.address(buf, e.indices)
        elem = memtype(buf.dtype)
        align = buf.dtype.itemsize
        if kind == "scalar":
            raw = self.b.load(self._pure("gep", ptr, where, elem), typ=elem, align=align)
        elif kind == "contig":
            vty = ir.VectorType(elem, lanes)
            raw = self.b.load(self._pure("gep", ptr, where, elem), typ=vty, align=align)
        elif kind == "bcast":
            one = self.b.load(self._pure("gep", ptr, where, elem), typ=elem, align=align)
            raw = self._splat(one, lanes)
        elif kind.startswith("periodic"):
            # `width` contiguous elements repeated over the lanes: one load and a shuffle (on x86
            # a broadcast of 4 bytes is one vpbroadcastd)
            width = int(kind[len("periodic"):])
            part = self.b.load(self._pure("gep", ptr, where, elem), typ=ir.VectorType(elem, width), align=align)
            mask = ir.Constant(ir.VectorType(I32, lanes), [j % width for j in range(lanes)])
            raw = self.b.shuffle_vector(part, _null(part.type), mask)
        else:
            raw = ir.Constant(ir.VectorType(elem, lanes), None)
            for j in range(lanes):
                ij = self.b.extract_element(where, ir.Constant(I32, j))
                v = self.b.load(_gep(self.b, ptr, [ij], elem), typ=elem, align=align)
                raw = self.b.insert_element(raw, v, ir.Constant(I32, j))
        return raw

    def store(self, buf: Buffer, indices, value: ir.Value, vdt: DataType) -> None:
        ptr, _ = self.buffer_ptr(buf)
        kind, where, lanes = self.address(buf, indices)
        elem = memtype(buf.dtype)
        align = buf.dtype.itemsize
        raw = self.to_memory(value, vdt)
        if kind.startswith("periodic"):
            kind, where = "lanes", self.index(self.flat_index(buf, indices))
        if kind == "scalar" or kind == "contig":
            if kind == "contig" and not isinstance(raw.type, ir.VectorType):
                raw = self._splat(raw, lanes)
            addr = self._pure("gep", ptr, where, elem)
            if buf.name in self.m.nontemporal and buf.scope == "global":
                self.streaming_store(raw, addr, align)
            else:
                self.b.store(raw, addr, align=align)
            return
        for j in range(lanes):
            ij = where if kind == "bcast" else self.b.extract_element(where, ir.Constant(I32, j))
            v = self.b.extract_element(raw, ir.Constant(I32, j)) if isinstance(raw.type, ir.VectorType) else raw
            self.b.store(v, _gep(self.b, ptr, [ij], elem), align=align)

    def streaming_store(self, raw: ir.Value, addr: ir.Value, align: int) -> None:
        """A non-temporal store (no read of the line first, no cache pollution). x86's vector
        streaming stores need an address aligned to 16 bytes (LLVM splits a wider one into
        16-byte halves) and numpy only promises the element's alignment, so the address is
        tested: aligned -> `vmovntps`, else a plain store."""
        nt_align = 16 if isinstance(raw.type, ir.VectorType) and _size_of(raw.type) >= 16 else align
        md = self.m.module.add_metadata([ir.Constant(I32, 1)])
        if nt_align == align:
            self.b.store(raw, addr, align=align).set_metadata("nontemporal", md)
            return
        low = self.b.and_(self.b.ptrtoint(addr, I64), ir.Constant(I64, nt_align - 1))
        with self.b.if_else(self.b.icmp_unsigned("==", low, ir.Constant(I64, 0)), likely=True) as (aligned, other):
            with aligned:
                self.b.store(raw, addr, align=nt_align).set_metadata("nontemporal", md)
            with other:
                self.b.store(raw, addr, align=align)

    def from_memory(self, raw: ir.Value, dt: DataType) -> ir.Value:
        if dt.code == "bool":
            return self.b.icmp_unsigned("!=", raw, _const(raw.type, 0))
        if dt.code == "bfloat":
            wide = self.b.shl(self.b.zext(raw, self._same_shape(raw.type, I32)), _const(self._same_shape(raw.type, I32), 16))
            return self.b.bitcast(wide, self._same_shape(raw.type, F32))
        return raw

    def to_memory(self, v: ir.Value, dt: DataType) -> ir.Value:
        if dt.code == "bool":
            return self.b.zext(v, self._same_shape(v.type, I8))
        if dt.code == "bfloat":
            return self.bf16_bits(v)
        return v

    # -- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _same_shape(ty: ir.Type, elem: ir.Type) -> ir.Type:
        return ir.VectorType(elem, ty.count) if isinstance(ty, ir.VectorType) else elem

    def _splat(self, v: ir.Value, lanes: int) -> ir.Value:
        """`v` in every lane, made once per basic block (see `_pure`)."""
        key = (self.b.block, "splat", _operand_key(v), lanes)
        hit = self.cse.get(key)
        if hit is None:
            vty = ir.VectorType(v.type, lanes)
            one = self.b.insert_element(_null(vty), v, _I32_ZERO)
            hit = self.cse[key] = (self.b.shuffle_vector(one, _null(vty), _null(ir.VectorType(I32, lanes))), v)
        return hit[0]

    def _pure(self, op: str, a: ir.Value, c: ir.Value, elem: ir.Type | None = None) -> ir.Value:
        """`a op c` for op add/sub/mul (i64 index arithmetic, `nsw` flags) or gep (the address
        of element c of the elem array at a), made once per basic block: the flattened indices
        of an unrolled micro-kernel repeat the same sums in every statement. An earlier value
        of the same block dominates the insertion point, and these operations have no side
        effects, so reusing it changes nothing (LLVM's CSE merged them before)."""
        key = (self.b.block, op, _operand_key(a), _operand_key(c), elem)
        hit = self.cse.get(key)
        if hit is None:
            value = _gep(self.b, a, [c], elem) if op == "gep" else getattr(self.b, op)(a, c, flags=self.nsw)
            hit = self.cse[key] = (value, a, c)   # the operands kept alive: their ids are in the key
        return hit[0]

    @property
    def nsw(self) -> tuple[str, ...]:
        """Flags of index arithmetic: no signed wrap, except under bounds checks, which must see
        (and report) whatever value an overflowing index takes."""
        return () if self.m.bounds_check else ("nsw",)

    def index(self, e: PrimExpr) -> ir.Value:
        """An index (address, loop bound) as i64 or <n x i64>, computed in 64 bits.

        Signed int32/int64 index arithmetic (+, -, *, //, %, min, max and int32 -> int64 casts
        over loop variables and constants) is done in i64 with `nsw`: an in-bounds index does not
        overflow, and 64-bit arithmetic keeps the sign extensions out of inner loops. Where an
        int32 sum or product that may have wrapped meets //, %, min, max or a cast to int64, it
        is wrapped to int32 first (`_wrapped_i32`), as the interpreter computes it. Anything
        else (loads, calls, other casts, values bound by `let`, int8/int16 arithmetic) is computed
        in its own type, with its own wrap-around, and extended. Under bounds checks there is no
        `nsw`, so an overflowing index is reported, never undefined."""
        dt = e.dtype
        if not (dt.is_int and dt.bits >= 32):    # int8/int16 sums that wrap are plausible: keep them
            return self.to_i64(self.expr(e), dt)
        if isinstance(e, Var):
            wide = self.wide.get(e)
            return wide if wide is not None else self.to_i64(self.expr(e), dt)
        if isinstance(e, IntImm):
            return ir.Constant(I64, e.value)
        if isinstance(e, Binary) and e.op in _INDEX_OPS:
            a, c = self.index(e.a), self.index(e.b)
            if e.op not in ("add", "sub", "mul") and dt.bits == 32:
                # //, %, min and max see the int32 value their operands wrapped to (as the
                # interpreter does): (i + 2**31 - 1) % 10 must not be taken of the exact sum
                a, c = self._wrapped_i32(e.a, a), self._wrapped_i32(e.b, c)
            if e.op in ("add", "sub", "mul"):
                folded = _fold_index(e.op, a, c)
                return folded if folded is not None else self._pure(e.op, a, c)
            return self._int_binary(e.op, a, c, dt, e.b)
        if isinstance(e, Ramp):
            base = self._splat(self.index(e.base), e.lanes)
            stride = self._splat(self.index(e.stride), e.lanes)
            steps = ir.Constant(ir.VectorType(I64, e.lanes), [ir.Constant(I64, i) for i in range(e.lanes)])
            return self.b.add(base, self.b.mul(stride, steps, flags=self.nsw), flags=self.nsw)
        if isinstance(e, Broadcast):
            return self._splat(self.index(e.value), e.lanes)
        if isinstance(e, Cast) and e.value.dtype.is_int and e.value.dtype.bits == 32 and dt.bits == 64:
            # int32 index arithmetic widened: exact in i64, wrapped to int32 where it may overflow
            return self._wrapped_i32(e.value, self.index(e.value))
        return self.to_i64(self.expr(e), dt)

    def _wrapped_i32(self, e: PrimExpr, v: ir.Value) -> ir.Value:
        """`v`, the exact i64 value of the int32 index expression `e`, wrapped to int32 unless
        `e` provably stays in int32 (a variable, a constant, or a sum/product of loop variables
        with constant ranges: `_i32_bounds`). //, %, min and max of wrapped operands cannot leave
        int32 (MIN // -1 divides by 1, see `_int_binary`)."""
        may_wrap = isinstance(e, (Ramp, Broadcast)) or isinstance(e, Binary) and e.op in ("add", "sub", "mul")
        if not may_wrap or self._i32_bounds(e) is not None:
            return v
        narrow = self.b.trunc(v, self._same_shape(v.type, I32))
        return self.b.sext(narrow, v.type)

    def _i32_bounds(self, e: PrimExpr) -> tuple[int, int] | None:
        """Bounds of the int32 expression `e` when it and every part of it provably lie in
        int32 (its i64 value then is its int32 value); None when not known."""
        if isinstance(e, IntImm):
            lo = hi = e.value
        elif isinstance(e, Var):
            return self.wide_range.get(e)
        elif isinstance(e, Broadcast):
            return self._i32_bounds(e.value)
        elif isinstance(e, Ramp) and isinstance(e.stride, IntImm):
            base = self._i32_bounds(e.base)
            if base is None:
                return None
            last = e.stride.value * (e.lanes - 1)
            lo, hi = base[0] + min(0, last), base[1] + max(0, last)
        elif isinstance(e, Binary) and e.op in _INDEX_OPS:
            a, c = self._i32_bounds(e.a), self._i32_bounds(e.b)
            if a is None or c is None:
                return None
            if e.op in ("add", "sub", "mul", "min", "max"):
                ops: dict[str, Callable[[int, int], int]] = {
                    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
                    "min": min, "max": max}
                f = ops[e.op]
                corners = [f(x, y) for x in a for y in c]
                lo, hi = min(corners), max(corners)
            elif c[0] == c[1] and c[0] > 0:
                lo, hi = (a[0] // c[0], a[1] // c[0]) if e.op == "floordiv" else (0, c[0] - 1)
            else:
                return None
        else:
            return None
        return (lo, hi) if -2 ** 31 <= lo and hi < 2 ** 31 else None


def _periodic(index: PrimExpr) -> tuple[PrimExpr, int] | None:
    """(base, width) when the vector `index` is `base + lane % width` with width > 1 dividing the
    lanes (e.g. `Broadcast(b, 64) + Ramp(0, 1, 64) % Broadcast(4, 64)`: 4 bytes repeated), else None."""
    found: list[int] = []

    def walk(e: PrimExpr) -> PrimExpr | None:
        if isinstance(e, Broadcast):
            return e.value
        if isinstance(e, Binary) and e.op == "floormod" and isinstance(e.a, Ramp) and is_const(e.a.base, 0) \
                and is_const(e.a.stride, 1) and isinstance(e.b, Broadcast) and isinstance(e.b.value, IntImm):
            found.append(e.b.value.value)
            return const(0, e.a.base.dtype)
        if isinstance(e, Binary) and e.op == "add":
            a, b = walk(e.a), walk(e.b)
            return None if a is None or b is None else a + b
        if isinstance(e, Binary) and e.op == "mul" and isinstance(e.b, Broadcast) and is_const(e.b.value, 1):
            return walk(e.a)
        return None

    base = walk(index)
    lanes = index.dtype.lanes
    if base is None or len(found) != 1 or not 1 < found[0] < lanes or lanes % found[0]:
        return None
    return base, found[0]
