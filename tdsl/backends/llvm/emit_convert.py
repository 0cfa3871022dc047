"""The LLVM emitter's conversions: integer widths, bfloat16 bits and rounding, and casts between
every pair of dtypes (round-to-odd where a double rounding would differ) (a part of
`codegen._Emitter`)."""
from __future__ import annotations

from llvmlite import ir

from ...dtypes import DataType
from ...errors import TargetError
from ...ir import (
    Cast,
)
from .emit_base import (
    EmitterBase,
)
from .lltypes import F32, F64, I16, I32, I64, _const, _suffix, lltype


class ConversionEmitter(EmitterBase):
    def to_i64(self, v: ir.Value, dt: DataType) -> ir.Value:
        ety = v.type.element if isinstance(v.type, ir.VectorType) else v.type
        if not isinstance(ety, ir.IntType):
            raise TargetError(f"an index must be an integer, not {dt}")
        target = self._same_shape(v.type, I64)
        if ety.width == 64:
            return v
        if dt.is_uint or dt.is_bool:
            return self.b.zext(v, target)
        return self.b.sext(v, target)

    def cast_int(self, v: ir.Value, dt: DataType) -> ir.Value:
        """An i64 to the integer type of `dt`."""
        ty = lltype(dt)
        if ty.width == 64:
            return v
        return self.b.trunc(v, ty)

    def bf16_bits(self, v: ir.Value) -> ir.Value:
        """float -> bfloat16 bits, rounding to nearest even, NaN kept quiet."""
        i32ty = self._same_shape(v.type, I32)
        bits = self.b.bitcast(v, i32ty)
        lsb = self.b.and_(self.b.lshr(bits, _const(i32ty, 16)), _const(i32ty, 1))
        rounded = self.b.add(self.b.add(bits, _const(i32ty, 0x7FFF)), lsb)
        isnan = self.b.fcmp_unordered("uno", v, v)
        quiet = self.b.or_(self.b.lshr(bits, _const(i32ty, 16)), _const(i32ty, 0x40))
        top = self.b.select(isnan, quiet, self.b.lshr(rounded, _const(i32ty, 16)))
        return self.b.trunc(top, self._same_shape(v.type, I16))

    def bf16_round(self, v: ir.Value) -> ir.Value:
        """A float rounded to the nearest bfloat16, still as a float."""
        bits = self.bf16_bits(v)
        i32ty = self._same_shape(v.type, I32)
        return self.b.bitcast(self.b.shl(self.b.zext(bits, i32ty), _const(i32ty, 16)), v.type)

    def _fix(self, v: ir.Value, dt: DataType) -> ir.Value:
        """Round the result of a float32 computation that stands for a bfloat16 value."""
        return self.bf16_round(v) if dt.code == "bfloat" else v

    def e_Cast(self, e: Cast) -> ir.Value:
        return self.convert(self.expr(e.value), e.value.dtype, e.dtype)

    def convert(self, v: ir.Value, src: DataType, dst: DataType) -> ir.Value:
        if src.element == dst.element:
            return v
        dty = lltype(dst)
        b = self.b
        if dst.is_bool:
            if src.is_float:
                return b.fcmp_unordered("!=", v, _const(v.type, 0.0))
            return b.icmp_unsigned("!=", v, _const(v.type, 0))
        if src.is_bool:
            return b.uitofp(v, dty) if dst.is_float else b.zext(v, dty)
        if src.is_float and dst.is_float:
            sw, dw = v.type, dty
            sbits = 32 if src.code == "bfloat" else src.bits
            dbits = 32 if dst.code == "bfloat" else dst.bits
            if sbits == 64 and (dbits == 16 or dst.code == "bfloat"):
                # bfloat16 rounds from float32 (_fix): float32 rounded to odd keeps it single
                out = b.fptrunc(self._to_f32_round_to_odd(v), dw)
            elif sbits < dbits:
                out = b.fpext(v, dw)
            elif sbits > dbits:
                out = b.fptrunc(v, dw)
            else:
                out = v if sw == dw else b.bitcast(v, dw)
            return self._fix(out, dst)
        if src.is_float:
            out = b.fptoui(v, dty) if dst.is_uint else b.fptosi(v, dty)
            return out
        if dst.is_float:
            if dst.code == "bfloat" and src.bits > 24:
                # through float32 rounded to odd: one rounding, as ml_dtypes does
                return self._fix(self._int_to_f32_round_to_odd(v, src.is_uint), dst)
            out = b.uitofp(v, dty) if src.is_uint else b.sitofp(v, dty)
            return self._fix(out, dst)
        if src.bits > dst.bits:
            return b.trunc(v, dty)
        if src.bits < dst.bits:
            return b.zext(v, dty) if src.is_uint else b.sext(v, dty)
        return v

    def _int_to_f32_round_to_odd(self, v: ir.Value, unsigned: bool) -> ir.Value:
        """An integer (more than 24 bits) -> float rounded to odd, so that a further rounding
        to bfloat16 is exact: 32-bit values go through double exactly; 64-bit values keep
        their 24 leading bits, the last one or-ed with the dropped ones (sticky)."""
        b = self.b
        width = v.type.element.width if isinstance(v.type, ir.VectorType) else v.type.width
        if width <= 32:
            f64 = self._same_shape(v.type, F64)
            return self._to_f32_round_to_odd(b.uitofp(v, f64) if unsigned else b.sitofp(v, f64))
        ity, f32ty = v.type, self._same_shape(v.type, F32)
        zero = _const(ity, 0)
        neg = None if unsigned else b.icmp_signed("<", v, zero)
        mag = v if unsigned else b.select(neg, b.sub(zero, v), v)   # INT64_MIN: 2**63 unsigned
        ctlz = self.m.intrinsic("llvm.ctlz." + _suffix(ity), ity, [ity, ir.IntType(1)])
        lz = b.call(ctlz, [mag, ir.Constant(ir.IntType(1), 0)])
        over = b.sub(_const(ity, width - 24), lz)
        shift = b.select(b.icmp_signed(">", over, zero), over, zero)
        dropped = b.and_(mag, b.sub(b.shl(_const(ity, 1), shift), _const(ity, 1)))
        sticky = b.zext(b.icmp_unsigned("!=", dropped, zero), ity)
        kept = b.shl(b.or_(b.lshr(mag, shift), sticky), shift)
        out = b.uitofp(kept, f32ty)   # at most 24 significant bits: exact
        return out if unsigned else b.select(neg, b.fneg(out), out)

    def _to_f32_round_to_odd(self, v: ir.Value) -> ir.Value:
        """double -> float rounding to odd, so that a further rounding to half is exact.

        LLVM lowers double -> half to a libcall (__truncdfhf2) that the JIT cannot resolve
        here; double rounding through float is exact only with round-to-odd in the middle.
        """
        b = self.b
        f32ty, i32ty = self._same_shape(v.type, F32), self._same_shape(v.type, I32)
        t = b.fptrunc(v, f32ty)
        back = b.fpext(t, v.type)
        fabs = self.m.intrinsic("llvm.fabs." + _suffix(v.type), v.type, [v.type])
        too_big = b.fcmp_ordered(">", b.call(fabs, [back]), b.call(fabs, [v]))
        bits = b.bitcast(t, i32ty)
        bits = b.select(too_big, b.sub(bits, _const(i32ty, 1)), bits)       # toward zero
        inexact = b.fcmp_ordered("!=", back, v)
        finite = b.fcmp_ordered("<", b.call(fabs, [back]), _const(v.type, float("inf")))
        sticky = b.and_(inexact, finite)
        bits = b.select(sticky, b.or_(bits, _const(i32ty, 1)), bits)
        return b.bitcast(bits, f32ty)
