"""DataType: a scalar or vector element type, and its numpy / DLPack mapping.

>>> DataType.parse("float32x16")
DataType('float32x16')
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_CODES = ("int", "uint", "float", "bfloat", "bool", "handle")
_PATTERN = re.compile(r"^(int|uint|float|bfloat|bool|handle)(\d*)(?:x(\d+))?$")


@dataclass(frozen=True, slots=True)
class DataType:
    """An element type: `code` in int/uint/float/bfloat/bool/handle, `bits`, vector `lanes`."""

    code: str
    bits: int
    lanes: int = 1

    @staticmethod
    @functools.cache
    def parse(text: str) -> DataType:
        """Parse "float32", "int8", "bool", "float32x16", "bfloat16" ("void": an extern call's no result)."""
        if text == "void":
            return DataType("handle", 0)
        m = _PATTERN.match(text)
        if m is None:
            raise ValueError(f"unknown dtype {text!r}; expected one of {', '.join(SCALAR_NAMES)} "
                             "or a vector type such as 'float32x16'")
        code, bits, lanes = m.group(1), m.group(2), m.group(3)
        if code == "bool":
            if bits not in ("", "1", "8"):
                raise ValueError(f"unknown dtype {text!r}")
            nbits = 1
        elif code == "handle":
            nbits = 64
        else:
            if not bits:
                raise ValueError(f"dtype {text!r} needs a bit width, e.g. '{code}32'")
            nbits = int(bits)
            valid = {"int": (8, 16, 32, 64), "uint": (8, 16, 32, 64), "float": (16, 32, 64), "bfloat": (16,)}
            if nbits not in valid[code]:
                raise ValueError(f"unknown dtype {text!r}")
        return DataType(code, nbits, int(lanes) if lanes else 1)

    def __str__(self) -> str:
        if self.code == "handle" and self.bits == 0:
            return "void"
        base = "bool" if self.code == "bool" else "handle" if self.code == "handle" else f"{self.code}{self.bits}"
        return base if self.lanes == 1 else f"{base}x{self.lanes}"

    def __repr__(self) -> str:
        return f"DataType('{self}')"

    # predicates -----------------------------------------------------------
    @property
    def is_float(self) -> bool:
        return self.code in ("float", "bfloat")

    @property
    def is_int(self) -> bool:
        return self.code == "int"

    @property
    def is_uint(self) -> bool:
        return self.code == "uint"

    @property
    def is_integer(self) -> bool:
        """int or uint (not bool)."""
        return self.code in ("int", "uint")

    @property
    def is_bool(self) -> bool:
        return self.code == "bool"

    @property
    def is_handle(self) -> bool:
        return self.code == "handle"

    @property
    def is_vector(self) -> bool:
        return self.lanes > 1

    @property
    def element(self) -> DataType:
        """The scalar type of one lane."""
        return self if self.lanes == 1 else DataType(self.code, self.bits, 1)

    def with_lanes(self, lanes: int) -> DataType:
        return DataType(self.code, self.bits, lanes)

    @property
    def itemsize(self) -> int:
        """Bytes per lane in memory (bool takes one byte)."""
        return 1 if self.code == "bool" else self.bits // 8

    @property
    def numpy(self):
        """The numpy dtype of one lane (bfloat16 needs ml_dtypes)."""
        return numpy_dtype(self)


SCALAR_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "bfloat16", "float32", "float64")

bool_ = DataType("bool", 1)
int8 = DataType("int", 8)
int16 = DataType("int", 16)
int32 = DataType("int", 32)
int64 = DataType("int", 64)
uint8 = DataType("uint", 8)
uint16 = DataType("uint", 16)
uint32 = DataType("uint", 32)
uint64 = DataType("uint", 64)
float16 = DataType("float", 16)
bfloat16 = DataType("bfloat", 16)
float32 = DataType("float", 32)
float64 = DataType("float", 64)
handle = DataType("handle", 64)
void = DataType("handle", 0)  # the result type of an extern call that returns nothing (TVM's spelling)


def as_dtype(value) -> DataType:
    """Accept a DataType, a name such as "float32", or a numpy dtype / scalar type."""
    if isinstance(value, DataType):
        return value
    if isinstance(value, str):
        return DataType.parse(value)
    return from_numpy(value)


def numpy_dtype(dt: DataType):
    import numpy as np

    if dt.code == "bfloat":
        try:
            import ml_dtypes
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise TypeError("bfloat16 arrays need the ml_dtypes package (pip install ml_dtypes)") from exc
        return np.dtype(ml_dtypes.bfloat16)
    if dt.code == "bool":
        return np.dtype(np.bool_)
    if dt.code == "handle":
        return np.dtype(np.uint64)
    return np.dtype(f"{dt.code}{dt.bits}")


def from_numpy(value) -> DataType:
    """The DataType of a numpy dtype (or anything np.dtype() accepts)."""
    import numpy as np

    nd = np.dtype(value)
    if nd.name == "bfloat16":
        return bfloat16
    if nd == np.bool_:
        return bool_
    if nd.kind in "iuf":
        return DataType({"i": "int", "u": "uint", "f": "float"}[nd.kind], nd.itemsize * 8)
    raise TypeError(f"numpy dtype {nd} has no tdsl equivalent")


# DLPack type codes: kDLInt=0, kDLUInt=1, kDLFloat=2, kDLBfloat=4, kDLBool=6
_DLPACK_CODES = {"int": 0, "uint": 1, "float": 2, "bfloat": 4, "bool": 6}


def to_dlpack(dt: DataType) -> tuple[int, int, int]:
    """(code, bits, lanes) as DLPack's DLDataType has it."""
    bits = 8 if dt.code == "bool" else dt.bits
    return _DLPACK_CODES[dt.code], bits, dt.lanes


def from_dlpack(code: int, bits: int, lanes: int = 1) -> DataType:
    names = {v: k for k, v in _DLPACK_CODES.items()}
    if code not in names:
        raise TypeError(f"DLPack type code {code} has no tdsl equivalent")
    name = names[code]
    if name == "bool":
        return bool_.with_lanes(lanes)
    return DataType(name, bits, lanes)
