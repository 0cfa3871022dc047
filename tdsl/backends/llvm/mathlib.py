"""The CPU backend's math library: exp, tanh, erf and sigmoid written in LLVM IR (so that loops
of them vectorise), with the polynomials they evaluate; other functions map onto LLVM's
intrinsics. `MathEmitter` is a mixin of the emitter (`codegen._Emitter`): it uses the
emitter's builder `self.b`, module `self.m` and `self.expr` / `self._fix`.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from llvmlite import ir

from ...dtypes import DataType
from ...errors import TargetError
from ...ir import Call
from .lltypes import F32, I32, _const, _suffix


def _tanh_coeffs(n: int) -> list[float]:
    """Taylor coefficients of tanh: x, x^3, ... (2^2k (2^2k - 1) B_2k / (2k)!)."""
    bern: list[Fraction] = [Fraction(1)]
    for m in range(1, 2 * n + 2):
        bern.append(-sum((math.comb(m + 1, k) * bern[k] for k in range(m)), Fraction(0)) / (m + 1))
    return [float(4 ** k * (4 ** k - 1) * bern[2 * k] / math.factorial(2 * k)) for k in range(1, n + 1)]


_TANH_TAYLOR = _tanh_coeffs(10)
_ERF_TAYLOR = [2 / math.sqrt(math.pi) * (-1) ** k / (math.factorial(k) * (2 * k + 1)) for k in range(13)]
# e**r on [-ln2/2, ln2/2]: minimax for relative error (Remez exchange, error 1.9e-9 before the
# coefficients are rounded to float32; the first two round to exactly 1).
_EXP_MINIMAX = (1.0, 1.0, 0.49999991059303284, 0.16666419804096222, 0.04166822507977486,
                0.008374815806746483, 0.0013836845755577087)
# Numerical Recipes' erfc Chebyshev fit: fractional error below 1.2e-7 everywhere.
_ERFC_NR = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
            -0.82215223, 0.17087277)


class MathEmitter:
    """T.exp, T.tanh, T.erf, T.sigmoid, ... of the emitter (see the module docstring)."""

    if TYPE_CHECKING:  # provided by the emitter's other parts (codegen._Emitter)
        b: ir.IRBuilder
        m: Any

        def expr(self, e) -> Any: ...

        def _fix(self, v: Any, dt: DataType) -> Any: ...

        @staticmethod
        def _same_shape(ty: ir.Type, elem: ir.Type) -> ir.Type: ...

    def _unary_intrinsic(self, name: str, x: ir.Value) -> ir.Value:
        fn = self.m.intrinsic(f"llvm.{name}.{_suffix(x.type)}", x.type, [x.type])
        return self.b.call(fn, [x])

    def _math(self, e: Call) -> ir.Value:
        dt = e.dtype
        args = [self.expr(a) for a in e.args]
        op = e.op
        if not dt.is_float:
            return self._int_math(op, args, dt)
        x = args[0]
        b = self.b
        if dt.code == "float" and dt.bits == 16 and op in ("tanh", "erf", "sigmoid"):
            wide = b.fpext(x, self._same_shape(x.type, F32))
            return b.fptrunc(self._special(op, wide), x.type)
        direct = {"log": "log", "sqrt": "sqrt", "abs": "fabs", "floor": "floor", "ceil": "ceil",
                  "exp2": "exp2", "log2": "log2", "sin": "sin", "cos": "cos", "round": "roundeven", "trunc": "trunc"}
        if op == "exp":
            out = self._exp(x)
        elif op in direct:
            out = self._unary_intrinsic(direct[op], x)
        elif op == "rsqrt":
            out = b.fdiv(_const(x.type, 1.0), self._unary_intrinsic("sqrt", x))
        elif op == "pow":
            fn = self.m.intrinsic(f"llvm.pow.{_suffix(x.type)}", x.type, [x.type, x.type])
            out = b.call(fn, args)
        elif op == "fma":
            fn = self.m.intrinsic(f"llvm.fma.{_suffix(x.type)}", x.type, [x.type] * 3)
            out = b.call(fn, args)
        else:
            out = self._special(op, x)
        return self._fix(out, dt)

    def _int_math(self, op: str, args, dt: DataType) -> ir.Value:
        x = args[0]
        b = self.b
        if op in ("floor", "ceil", "round", "trunc"):
            return x
        if op == "abs":
            if not dt.is_int:
                return x
            return b.select(b.icmp_signed("<", x, _const(x.type, 0)), b.sub(_const(x.type, 0), x), x)
        if op == "fma":
            return b.add(b.mul(args[0], args[1]), args[2])
        raise TargetError(f"T.{op} needs a floating-point argument, not {dt}")

    def _exp(self, x: ir.Value) -> ir.Value:
        """e**x. float32 (scalar or vector) in IR so that it vectorises (LLVM would call expf once
        per lane); other widths through llvm.exp.

        Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2 (two FMAs), a degree-6 minimax
        polynomial for e**r (`_EXP_MINIMAX`, relative error 2e-9) and the scaling by 2**n split in
        two factors so that subnormal results and overflow come out right: within 1.1 ulp of the
        correctly rounded result. The clamp to [-104, 89] is a compare and select that keeps NaN
        (any comparison with NaN is false; x86 does each in one min/max), so NaN flows through
        to the result with no final select. Against the previous degree-7 Taylor version (no
        FMA in the reduction, a final NaN select) a vector loop of exps runs ~30% faster. On Zen
        3 such a loop now costs about half a cycle per vector operation (19 per vector of 8):
        fewer operations pay, a shorter chain with more of them (Estrin's scheme) does not.
        """
        ety = x.type.element if isinstance(x.type, ir.VectorType) else x.type
        if not isinstance(ety, ir.FloatType):
            return self._unary_intrinsic("exp", x)
        b = self.b
        ty = x.type
        ity = self._same_shape(ty, I32)
        fmuladd = self.m.intrinsic("llvm.fmuladd." + _suffix(ty), ty, [ty] * 3)
        hi, lo = _const(ty, 89.0), _const(ty, -104.0)
        xc = b.select(b.fcmp_ordered(">", x, hi), hi, x)      # NaN > 89 is false: NaN kept
        xc = b.select(b.fcmp_ordered("<", xc, lo), lo, xc)
        # n = round(x / ln2) by adding 1.5 * 2**23 + 254: the sum's ulp is 1, so its low bits
        # are n + 254 (in [104, 382]), with no fptosi (poison for NaN) and no round
        magic = _const(ty, 12583166.0)
        t = b.call(fmuladd, [xc, _const(ty, 1.4426950408889634), magic])
        n = b.fsub(t, magic)
        # n * 0.693359375 is exact (9 + 8 significant bits), so the first step loses nothing
        r = b.call(fmuladd, [n, _const(ty, -0.693359375), xc])
        r = b.call(fmuladd, [n, _const(ty, 2.12194440e-4), r])
        p = self._poly(r, _EXP_MINIMAX)
        # 2**n = 2**n1 * 2**n2, n1 = floor(n / 2), n2 = n - n1, exponent fields shifted straight
        # out of t's bits (the bits above them fall off): e1 = (n + 254) >> 1 = n1 + 127, and
        # (n + 254) - e1 = n2 + 127. Four integer operations instead of seven: ~9% off a vector
        # exp loop on Zen 3, same results. NaN: any scale, p is NaN.
        bits = b.bitcast(t, ity)
        e1 = b.shl(b.lshr(bits, _const(ity, 1)), _const(ity, 23))
        e2 = b.sub(b.shl(bits, _const(ity, 23)), e1)
        return b.fmul(b.fmul(p, b.bitcast(e1, ty)), b.bitcast(e2, ty))

    def _poly(self, x: ir.Value, coeffs) -> ir.Value:
        """Horner evaluation of sum(coeffs[k] * x**k). Each step is `llvm.fmuladd`: one FMA
        where the CPU has it (LLVM never contracts a separate fmul + fadd without fast-math
        flags), which halves the latency of the chain; a multiply and an add elsewhere."""
        fmuladd = self.m.intrinsic("llvm.fmuladd." + _suffix(x.type), x.type, [x.type] * 3)
        acc = _const(x.type, coeffs[-1])
        for cf in reversed(coeffs[:-1]):
            acc = self.b.call(fmuladd, [acc, x, _const(x.type, cf)])
        return acc

    def _special(self, op: str, x: ir.Value) -> ir.Value:
        """tanh, sigmoid and erf written in IR on top of llvm.exp, so they vectorise."""
        b = self.b
        ty = x.type
        one = _const(ty, 1.0)
        if op == "sigmoid":
            return b.fdiv(one, b.fadd(one, self._exp(b.fneg(x))))
        ax = self._unary_intrinsic("fabs", x)
        copysign = self.m.intrinsic("llvm.copysign." + _suffix(ty), ty, [ty, ty])
        x2 = b.fmul(x, x)
        if op == "tanh":
            # small |x|: odd Taylor series (no cancellation); else (1 - e^-2|x|) / (1 + e^-2|x|)
            small = b.fmul(x, self._poly(x2, _TANH_TAYLOR))
            t = self._exp(b.fmul(ax, _const(ty, -2.0)))
            big = b.call(copysign, [b.fdiv(b.fsub(one, t), b.fadd(one, t)), x])
            return b.select(b.fcmp_ordered("<", ax, _const(ty, 0.625)), small, big)
        if op == "erf":
            small = b.fmul(x, self._poly(x2, _ERF_TAYLOR))
            t = b.fdiv(one, b.fadd(one, b.fmul(_const(ty, 0.5), ax)))
            inner = b.fsub(self._poly(t, _ERFC_NR), x2)
            erfc = b.fmul(t, self._exp(inner))
            big = b.call(copysign, [b.fsub(one, erfc), x])
            return b.select(b.fcmp_ordered("<", ax, one), small, big)
        raise TargetError(f"unknown math function T.{op}")
