"""The LLVM emitter's expressions and arithmetic: leaves, selects, integer and float binary
operations (floor division and modulo, shifts, short-circuit logic), and calls (index checks,
addresses, if_then_else, extern functions) (a part of `codegen._Emitter`)."""
from __future__ import annotations

from typing import cast

from llvmlite import ir

from ...dtypes import DataType, void
from ...errors import TargetError
from ...ir import (
    MATH_CALLS,
    Binary,
    Broadcast,
    BufferLoad,
    Call,
    FloatImm,
    IntImm,
    Not,
    PrimExpr,
    Ramp,
    Select,
    StringImm,
    Var,
)
from ...ir.expr import shift_in_range
from ...ir.opaque_calls import WMMA_BUILTINS, wmma_refusal
from ...script.printer import message_text as expr_text
from .emit_base import (
    _BIT_BUILDERS,
    EmitterBase,
    _has_load,
    lane_expr,
)
from .lltypes import BF16, I1, I32, _const, _gep, _suffix, lltype, memtype


class ArithmeticEmitter(EmitterBase):
    # -- expressions -----------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> ir.Value:
        method = getattr(self, "e_" + type(e).__name__, None)
        if method is None:
            raise TargetError(f"the CPU code generator cannot compile a {type(e).__name__} expression")
        return method(e)

    def e_Var(self, e: Var) -> ir.Value:
        wide = self.wide.get(e)
        if wide is not None:
            return self.b.trunc(wide, lltype(e.dtype))
        if e not in self.env:
            raise TargetError(f"variable {e.name!r} is used outside its scope")
        return self.env[e]

    def e_IntImm(self, e: IntImm) -> ir.Value:
        return _const(lltype(e.dtype), e.value)

    def e_FloatImm(self, e: FloatImm) -> ir.Value:
        v = e.value
        if e.dtype.code == "bfloat":
            import ml_dtypes
            import numpy as np

            v = float(np.array(v, np.float64).astype(ml_dtypes.bfloat16).astype(np.float32))
        return _const(lltype(e.dtype), v)

    def e_StringImm(self, e: StringImm) -> ir.Value:
        raise TargetError(f"string argument {e.value!r} is not supported by the CPU code generator")

    def e_Ramp(self, e: Ramp) -> ir.Value:
        base = self._splat(self.expr(e.base), e.lanes)
        stride = self._splat(self.expr(e.stride), e.lanes)
        ety = lltype(e.base.dtype)
        steps = ir.Constant(ir.VectorType(ety, e.lanes), [_const(ety, i) for i in range(e.lanes)])
        return self.b.add(base, self.b.mul(stride, steps))

    def e_Broadcast(self, e: Broadcast) -> ir.Value:
        return self._splat(self.expr(e.value), e.lanes)

    def e_BufferLoad(self, e: BufferLoad) -> ir.Value:
        return self.load(e)

    def e_Not(self, e: Not) -> ir.Value:
        return self.b.not_(self.expr(e.a))

    def e_Select(self, e: Select) -> ir.Value:
        c, t, f = self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)
        if isinstance(t.type, ir.VectorType) and not isinstance(c.type, ir.VectorType):
            c = self._splat(c, t.type.count)
        return self.b.select(c, t, f)

    def e_Binary(self, e: Binary) -> ir.Value:
        dt = e.a.dtype
        if e.op in ("and", "or") and dt.lanes == 1 and _has_load(e.b):
            return self._short_circuit(e)
        a, c = self.expr(e.a), self.expr(e.b)
        b = self.b
        op = e.op
        if op in ("eq", "ne", "lt", "le", "gt", "ge"):
            sym = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
            if dt.is_float:
                return b.fcmp_unordered(sym, a, c) if op == "ne" else b.fcmp_ordered(sym, a, c)
            if dt.is_uint or dt.is_bool:
                return b.icmp_unsigned(sym, a, c)
            return b.icmp_signed(sym, a, c)
        if op == "and":
            return b.and_(a, c)
        if op == "or":
            return b.or_(a, c)
        if dt.is_float:
            return self._fix(self._float_binary(op, a, c), dt)
        if dt.is_bool:
            dt = DataType("uint", 1, dt.lanes)
        return self._int_binary(op, a, c, dt, e.b)

    def _short_circuit(self, e: Binary) -> ir.Value:
        lhs = self.expr(e.a)
        start = self.b.block
        rhs_block = self.fn.append_basic_block("sc_rhs")
        end = self.fn.append_basic_block("sc_end")
        if e.op == "and":
            self.b.cbranch(lhs, rhs_block, end)
        else:
            self.b.cbranch(lhs, end, rhs_block)
        self.b.position_at_end(rhs_block)
        rhs = self.expr(e.b)
        rhs_end = self.b.block
        self.b.branch(end)
        self.b.position_at_end(end)
        phi = self.b.phi(I1)
        phi.add_incoming(ir.Constant(I1, 0 if e.op == "and" else 1), start)
        phi.add_incoming(rhs, rhs_end)
        return phi

    def _float_binary(self, op: str, a: ir.Value, c: ir.Value) -> ir.Value:
        b = self.b
        if op == "add":
            return b.fadd(a, c)
        if op == "sub":
            return b.fsub(a, c)
        if op == "mul":
            return b.fmul(a, c)
        if op == "div":
            return b.fdiv(a, c)
        if op in ("min", "max"):
            # as the interpreter: NaN when either is NaN (as numpy's maximum/minimum), else the
            # winner, `a` on a tie. `c > a ? c : a` is exactly x86's maxps(c, a) (minps for <),
            # which returns `a` when either is NaN, so only a NaN `c` needs the blend: a max, a
            # compare and a blend, with only the max and the blend on `a`'s dependency chain (a
            # reduction's accumulator). The blend picks `pick` when `c` is ordered: the other
            # way round, LLVM merges the two selects into two compares, an or and a blend.
            pick = b.select(b.fcmp_ordered(">" if op == "max" else "<", c, a), c, a)
            return b.select(b.fcmp_ordered("ord", c, c), pick, c)
        if op == "floormod":
            return self._float_floormod(a, c)[0]
        if op == "floordiv":
            return self._float_floordiv(a, c)
        raise TargetError(f"unknown float operator {op}")

    def _float_floormod(self, a, c):
        """numpy's divmod: mod = fmod(a, b), moved into b's sign."""
        b = self.b
        ty = a.type
        zero = _const(ty, 0.0)
        mod = b.frem(a, c)
        nonzero = b.fcmp_unordered("!=", mod, zero)
        differ = b.xor(b.fcmp_ordered("<", c, zero), b.fcmp_ordered("<", mod, zero))
        fix = b.and_(nonzero, differ)
        mod2 = b.select(fix, b.fadd(mod, c), mod)
        copysign = self.m.intrinsic("llvm.copysign." + _suffix(ty), ty, [ty, ty])
        mod3 = b.select(nonzero, mod2, b.call(copysign, [zero, c]))
        return mod3, mod, fix

    def _float_floordiv(self, a, c):
        """numpy's floor_divide for floats (npy_divmod)."""
        b = self.b
        ty = a.type
        zero = _const(ty, 0.0)
        mod = b.frem(a, c)
        div = b.fdiv(b.fsub(a, mod), c)
        nonzero = b.fcmp_unordered("!=", mod, zero)
        differ = b.xor(b.fcmp_ordered("<", c, zero), b.fcmp_ordered("<", mod, zero))
        div = b.select(b.and_(nonzero, differ), b.fsub(div, _const(ty, 1.0)), div)
        floor = self.m.intrinsic("llvm.floor." + _suffix(ty), ty, [ty])
        fl = b.call(floor, [div])
        fl = b.select(b.fcmp_ordered(">", b.fsub(div, fl), _const(ty, 0.5)), b.fadd(fl, _const(ty, 1.0)), fl)
        copysign = self.m.intrinsic("llvm.copysign." + _suffix(ty), ty, [ty, ty])
        signed_zero = b.call(copysign, [zero, b.fdiv(a, c)])
        out = b.select(b.fcmp_unordered("!=", div, zero), fl, signed_zero)
        # b == 0: a / b (inf or nan), as numpy gives
        return b.select(b.fcmp_ordered("==", c, zero), b.fdiv(a, c), out)

    def _int_binary(self, op: str, a, c, dt: DataType, rhs: PrimExpr) -> ir.Value:
        b = self.b
        signed = dt.is_int
        if op == "add":
            return b.add(a, c)
        if op == "sub":
            return b.sub(a, c)
        if op == "mul":
            return b.mul(a, c)
        if op in ("min", "max"):
            cmp = (b.icmp_signed if signed else b.icmp_unsigned)("<" if op == "min" else ">", a, c)
            return b.select(cmp, a, c)
        if op in _BIT_BUILDERS:
            return getattr(b, _BIT_BUILDERS[op])(a, c)
        if op in ("shift_left", "shift_right"):
            return self._shift(op, a, c, dt, rhs)
        if op not in ("div", "floordiv", "floormod"):
            raise TargetError(f"unknown integer operator {op}")
        ty = a.type
        const_rhs = isinstance(rhs, IntImm) or (isinstance(rhs, Broadcast) and isinstance(rhs.value, IntImm))
        rv = rhs.value if isinstance(rhs, IntImm) else cast(IntImm, cast(Broadcast, rhs).value).value if const_rhs else None
        safe = const_rhs and rv != 0 and not (signed and rv == -1)
        if safe:
            den = c
        else:
            # x // 0 is 0 (as numpy gives) and MIN // -1 wraps; neither may trap the process
            bad = b.icmp_signed("==", c, _const(ty, 0))
            if signed:
                bad = b.or_(bad, b.icmp_signed("==", c, _const(ty, -1)))
            den = b.select(bad, _const(ty, 1), c)
        if not signed:
            q = b.udiv(a, den) if op in ("div", "floordiv") else b.urem(a, den)
        elif op == "div":
            q = b.sdiv(a, den)
        else:
            q = b.sdiv(a, den)
            r = b.srem(a, den)
            adjust = b.and_(b.icmp_signed("!=", r, _const(ty, 0)),
                            b.xor(b.icmp_signed("<", r, _const(ty, 0)), b.icmp_signed("<", den, _const(ty, 0))))
            q = b.sub(q, b.zext(adjust, ty)) if op == "floordiv" else b.select(adjust, b.add(r, den), r)
        if safe:
            return q
        zero_div = b.icmp_signed("==", c, _const(ty, 0))
        result = q
        if signed:
            minus_one = b.icmp_signed("==", c, _const(ty, -1))
            by_minus_one = b.sub(_const(ty, 0), a) if op != "floormod" else _const(ty, 0)
            result = b.select(minus_one, by_minus_one, result)
        return b.select(zero_div, _const(ty, 0), result)

    def _shift(self, op: str, a, c, dt: DataType, rhs: PrimExpr) -> ir.Value:
        """<< and >> (arithmetic when signed); the amount is taken modulo the bit width, so
        LLVM's poison for an amount past it never arises (a constant in range needs no mask)."""
        b = self.b
        amount = rhs.value if isinstance(rhs, Broadcast) else rhs
        if not (isinstance(amount, IntImm) and shift_in_range(amount.value, dt)):
            c = b.and_(c, _const(c.type, dt.bits - 1))
        if op == "shift_left":
            return b.shl(a, c)
        return b.ashr(a, c) if dt.is_int else b.lshr(a, c)

    # -- calls -----------------------------------------------------------------------------
    def e_Call(self, e: Call) -> ir.Value:
        if e.op == "if_then_else":
            return self._if_then_else(e)
        if e.op in MATH_CALLS:
            return self._math(e)
        if e.op == "address_of":
            return self._address_of(e, check=True)
        if e.op == "tdsl.index_check":
            return self._index_check(e)
        return self._extern(e)

    def _index_check(self, e: Call) -> ir.Value:
        """`tdsl.index_check(index, extent, "buffer", axis)` (lower.index_checks): the index,
        after failing the kernel with a BoundsError code when it is outside [0, extent)."""
        index, extent, name, axis = e.args
        v = self.expr(index)
        wide = self.to_i64(v, index.dtype)
        ext = self.to_i64(self.expr(extent), extent.dtype)
        if isinstance(wide.type, ir.VectorType):
            ext = self._splat(ext, wide.type.count)
        zero = _const(wide.type, 0)
        bad = self.b.or_(self.b.icmp_signed("<", wide, zero), self.b.icmp_signed(">=", wide, ext))
        if isinstance(bad.type, ir.VectorType):
            red = self.m.intrinsic(f"llvm.vector.reduce.or.v{bad.type.count}i1", I1, [bad.type])
            bad = self.b.call(red, [bad])
        self.m.checks.append({"buffer": cast(StringImm, name).value, "param": None, "index": expr_text(index),
                              "extent": expr_text(extent), "axis": cast(IntImm, axis).value})
        self.fail_if(bad, len(self.m.checks))
        return v

    def _address_of(self, e: Call, check: bool) -> ir.Value:
        """`T.address_of(A[i])`: a pointer to the element (a GEP), bounds-checked like a load
        when `check` and bounds checks are on."""
        (load,) = e.args
        if not isinstance(load, BufferLoad) or load.dtype.lanes != 1:
            raise TargetError("T.address_of takes one scalar buffer element")
        ptr, _ = self.buffer_ptr(load.buffer)
        if check:
            _, where, _ = self.address(load.buffer, load.indices)
        else:
            where = self.index(self.flat_index(load.buffer, load.indices))
        return _gep(self.b, ptr, [where], memtype(load.buffer.dtype))

    def _if_then_else(self, e: Call) -> ir.Value:
        cond, t, f = e.args
        lanes = e.dtype.lanes
        if not (_has_load(t) or _has_load(f)):
            return self.e_Select(Select(cond, t, f))
        if lanes > 1 and cond.dtype.lanes > 1:
            # unsafe vector branches under a lane-wise condition: each lane decides on its own
            out = ir.Constant(lltype(e.dtype), None)
            for j in range(lanes):
                lane = Call(e.dtype.element, "if_then_else", (lane_expr(cond, j), lane_expr(t, j), lane_expr(f, j)))
                out = self.b.insert_element(out, self.expr(lane), ir.Constant(I32, j))
            return out
        c = self.expr(cond)
        then_b = self.fn.append_basic_block("ite_then")
        else_b = self.fn.append_basic_block("ite_else")
        end = self.fn.append_basic_block("ite_end")
        self.b.cbranch(c, then_b, else_b)
        self.b.position_at_end(then_b)
        tv = self.expr(t)
        t_end = self.b.block
        self.b.branch(end)
        self.b.position_at_end(else_b)
        fv = self.expr(f)
        f_end = self.b.block
        self.b.branch(end)
        self.b.position_at_end(end)
        phi = self.b.phi(tv.type)
        phi.add_incoming(tv, t_end)
        phi.add_incoming(fv, f_end)
        return phi

    def _bfloat_bits(self, a: PrimExpr) -> ir.Value:
        """A bfloat16 argument of an extern call as LLVM `bfloat` values (its bits; a load's bits
        as loaded), the type of intrinsics such as vdpbf16ps's."""
        bits = self.load_raw(a) if isinstance(a, BufferLoad) else self.bf16_bits(self.expr(a))
        return self.b.bitcast(bits, self._same_shape(bits.type, BF16))

    def _extern(self, e: Call) -> ir.Value:
        """An LLVM intrinsic or a C function, declared from the argument and result dtypes."""
        if e.op in WMMA_BUILTINS:
            raise TargetError(wmma_refusal(e.op, "the CPU backend cannot compile it"))
        if any(isinstance(a, StringImm) for a in e.args):
            raise TargetError(f"extern call {e.op!r} takes a string argument, which the CPU backend cannot pass")
        # a prefetch never faults, so its address may run past the buffer: no bounds check
        unchecked = e.op.startswith("llvm.prefetch")
        args = [self._address_of(a, check=False) if unchecked and isinstance(a, Call) and a.op == "address_of"
                else self._bfloat_bits(a) if a.dtype.code == "bfloat" else self.expr(a) for a in e.args]
        ret = ir.VoidType() if e.dtype == void else lltype(e.dtype)
        existing = self.m.module.globals.get(e.op)
        fn = existing if existing is not None else self.m.intrinsic(e.op, ret, [a.type for a in args])
        if list(fn.function_type.args) != [a.type for a in args]:
            raise TargetError(f"extern call {e.op!r} is used with different argument types")
        return self.b.call(fn, args)
