"""LLVM types and small IR-building helpers shared by the CPU backend's emitter
(`codegen`), its entry points (`entry`) and its math library (`mathlib`).

Names starting with `_` are the llvm package's own (not tdsl API).
"""
from __future__ import annotations

from llvmlite import ir

from ...dtypes import DataType
from ...errors import TargetError

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F32, F64, PTR = ir.FloatType(), ir.DoubleType(), ir.PointerType()


class BFloatType(ir.Type):
    """LLVM's `bfloat` (llvmlite has no class for it): the operand type of intrinsics such as
    `llvm.x86.avx512bf16.dpbf16ps.512`, which take bfloat16 bits (bitcast from i16)."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other) -> bool:
        return isinstance(other, BFloatType)

    def __hash__(self) -> int:
        return hash("bfloat")


BF16 = BFloatType()


def lltype(dt: DataType) -> ir.Type:
    """The register type of a dtype."""
    if dt.code == "bool":
        base = I1
    elif dt.code == "bfloat":
        base = F32
    elif dt.code == "float":
        base = {16: ir.HalfType(), 32: F32, 64: F64}[dt.bits]
    elif dt.code == "handle":
        base = PTR
    else:
        base = ir.IntType(dt.bits)
    return ir.VectorType(base, dt.lanes) if dt.lanes > 1 else base


def memtype(dt: DataType) -> ir.Type:
    """The in-memory type of a dtype (bool takes a byte, bfloat16 is raw i16)."""
    if dt.code == "bool":
        base = I8
    elif dt.code == "bfloat":
        base = I16
    else:
        return lltype(dt)
    return ir.VectorType(base, dt.lanes) if dt.lanes > 1 else base


def _suffix(ty: ir.Type) -> str:
    """The overload suffix of an intrinsic name: f32, v16f32, i64..."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_suffix(ty.element)}"
    if isinstance(ty, ir.HalfType):
        return "f16"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    raise TargetError(f"internal error: no intrinsic suffix for {ty}")


def _const(ty: ir.Type, value) -> ir.Constant:
    """A scalar or splatted vector constant of `ty`."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [_const(ty.element, value) for _ in range(ty.count)])
    if isinstance(ty, ir.IntType):
        v = int(value) & ((1 << ty.width) - 1)
        if ty.width > 1 and v >= 1 << (ty.width - 1):
            v -= 1 << ty.width
        return ir.Constant(ty, v)
    if isinstance(ty, ir.HalfType):
        import numpy as np

        return ir.Constant(ty, float(np.float16(value)))
    return ir.Constant(ty, float(value))


def _gep(b: ir.IRBuilder, ptr: ir.Value, indices: list, etype: ir.Type) -> ir.Value:
    """getelementptr with an opaque result, so that loads and stores of any type accept it."""
    g = b.gep(ptr, indices, source_etype=etype)
    g.type = PTR
    return g


class _Callee(ir.instructions.CastInstr):
    """`inttoptr` of a function address that llvmlite can call (it needs the function type)."""

    def __init__(self, parent, address: ir.Value, fnty: ir.FunctionType):
        super().__init__(parent, "inttoptr", address, PTR)
        self._fnty = fnty

    @property
    def function_type(self) -> ir.FunctionType:
        return self._fnty


def _size_of(ty: ir.Type) -> int:
    """Bytes a register value takes in memory (an upper bound is enough: closure slots)."""
    if isinstance(ty, ir.VectorType):
        return ty.count * _size_of(ty.element)
    if isinstance(ty, ir.IntType):
        return max(ty.width // 8, 1)
    return {ir.HalfType: 2, ir.FloatType: 4, ir.DoubleType: 8}.get(type(ty), 8)
