"""TMA tensor maps a function makes for itself: which buffer, which box, which swizzle.

A function attribute ``"tdsl.tensor_map:<map>" = "<buffer> (<box>) <swizzle>"`` says that the
function-level ``uint8`` buffer ``<map>`` (128 bytes) holds a tiled tensor map over buffer
``<buffer>`` (a parameter or a function-level global buffer), with that box (in the buffer's
axis order) and swizzle ("none", "32B", "64B", "128B"). The caller does not pass it: the CUDA
backend's call path encodes it before the launches (the driver's cuTensorMapEncodeTiled on a
GPU, tdsl's own encoding in the emulator). The interpreter needs none: ``T.ptx_tma_load`` names
the tensor it copies from.

    T.func_attr({"tdsl.tensor_map:A_tmap": "A (64, 64) 128B"})
    A_tmap = T.alloc_buffer((128,), "uint8")
"""
from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "tdsl.tensor_map:"
_VALUE = re.compile(r"^(\w+) \(([\d, ]+)\) (none|32B|64B|128B)$")


@dataclass(frozen=True)
class TensorMapSpec:
    """One tensor map a function encodes for itself."""

    map: str                 # the uint8[128] buffer holding it
    tensor: str              # the buffer it describes
    box: tuple[int, ...]     # box sides, outermost first
    swizzle: str

    @property
    def attr(self) -> tuple[str, str]:
        """The function attribute (key, value) recording it."""
        return PREFIX + self.map, f"{self.tensor} ({', '.join(map(str, self.box))}) {self.swizzle}"


def tensor_maps(func) -> list[TensorMapSpec]:
    """The tensor maps `func`'s attributes record, in attribute order."""
    out = []
    for key, value in func.attrs:
        if isinstance(key, str) and key.startswith(PREFIX):
            m = _VALUE.match(str(value))
            if m is None:
                raise ValueError(f"function attribute {key!r} = {value!r}: expected \"<buffer> (<box>) <swizzle>\", "
                                 "e.g. \"A (64, 64) 128B\"")
            box = tuple(int(s) for s in m.group(2).replace(" ", "").split(",") if s)
            out.append(TensorMapSpec(key[len(PREFIX):], m.group(1), box, m.group(3)))
    return out
