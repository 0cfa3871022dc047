"""Schedules: transform a PrimFunc step by step with TensorIR's primitives."""
from .schedule import Schedule, ScriptDiff
from .state import BlockRV, LoopRV
from .trace import Instruction, Trace

__all__ = ["BlockRV", "Instruction", "LoopRV", "Schedule", "ScriptDiff", "Trace"]
