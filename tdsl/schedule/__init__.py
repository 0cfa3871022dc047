"""Schedules: transform a PrimFunc step by step with TensorIR's primitives."""
from .handles import BlockRV, LoopRV
from .schedule import Schedule, ScriptDiff
from .trace import Instruction, Trace

__all__ = ["BlockRV", "Instruction", "LoopRV", "Schedule", "ScriptDiff", "Trace"]
