"""Schedules: transform a PrimFunc step by step with TensorIR's primitives."""
from .diffs import Checkpoint, ScriptDiff
from .handles import BlockRV, LoopRV
from .schedule import Schedule
from .trace import Instruction, Trace

__all__ = ["BlockRV", "Checkpoint", "Instruction", "LoopRV", "Schedule", "ScriptDiff", "Trace"]
