"""One schedule step as data: `Instruction(kind, inputs, attrs, outputs, shape, serial, decision)`.

The Schedule appends one per step (`ScheduleBase._apply`); a `Trace` (trace.py) holds them in
order, prints them as Python, replays them and stores them as JSON (trace_json.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# steps whose result is one handle (the others give a list, or nothing)
_ONE_OUTPUT = frozenset({"get_block", "get_sblock", "fuse", "blockize", "cache_read", "cache_write",
                         "reindex_cache_read", "reindex_cache_write", "rfactor", "decompose_reduction",
                         "add_unit_loop", "reindex"})

@dataclass(frozen=True, eq=False)
class Instruction:
    """One step: `outputs = sch.<kind>(*inputs, **attrs)`; `shape` is "none", "one" or "list";
    `decision` is a sampling step's decision (None for the other steps).

    Made by hand (TVM's `Instruction(kind, inputs, attrs, outputs)`): `attrs` is a dict or (key,
    value) pairs of keyword arguments, outputs are handles made with `BlockRV(name, 0)` /
    `LoopRV(Var(name), 0)` / `IntRV`, and `shape` follows from `kind` and the outputs.
    """

    kind: str
    inputs: tuple
    attrs: tuple[tuple[str, Any], ...] = ()
    outputs: tuple = ()
    shape: str = ""
    serial: int = 0
    decision: Any = None

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        attrs = self.attrs.items() if isinstance(self.attrs, dict) else self.attrs
        object.__setattr__(self, "attrs", tuple((k, v) for k, v in attrs))
        if not self.shape:
            shape = "none" if not self.outputs else "one" if (
                self.kind in _ONE_OUTPUT or self.is_sampling) and len(self.outputs) == 1 else "list"
            object.__setattr__(self, "shape", shape)

    @property
    def is_sampling(self) -> bool:
        return self.kind.startswith("sample_")

    def same_as(self, other) -> bool:
        return self is other
