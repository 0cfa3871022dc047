"""Auto-scheduling: schedule rules, design spaces and zero-measurement default schedules.

    sch = tdsl.auto_schedule(func, "cpu")     # the rules' default schedule
    print(tdsl.space(func, "cpu"))            # the design space's sketches

Imports point down: auto -> schedule -> ir.
"""
from .auto_schedule import auto_schedule
from .hardware import Hardware, hardware
from .rules import (
    AutoInline,
    ComputeLocation,
    GPUBind,
    GPUCrossThreadReduction,
    GPUMatmulTiling,
    GPUMmaTiling,
    GPUWgmmaPipeline,
    GPUWmmaTiling,
    LibraryCall,
    MatmulTensorizeCPU,
    MultiLevelTilingCPU,
    ParallelVectorizeUnroll,
    RowPrefetch,
    Rule,
    TensorizeMatching,
    VectorReduction,
)
from .space import Pass, Space, default_passes, register_rule, sketches, space, unregister_rule

__all__ = ["AutoInline", "ComputeLocation", "GPUBind", "GPUCrossThreadReduction", "GPUMatmulTiling", "GPUMmaTiling", "GPUWgmmaPipeline", "GPUWmmaTiling", "Hardware", "LibraryCall", "MatmulTensorizeCPU",
           "MultiLevelTilingCPU", "ParallelVectorizeUnroll", "Pass", "RowPrefetch", "Rule", "Space",
           "TensorizeMatching", "VectorReduction", "auto_schedule", "default_passes", "hardware", "register_rule", "sketches", "space",
           "unregister_rule"]
