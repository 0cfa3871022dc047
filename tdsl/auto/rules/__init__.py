"""The schedule rules of the design space; each is `rule(sch, block) -> list[Schedule]` (see `base`)."""
from .amx_cpu import MatmulAmxCPU
from .base import Rule
from .cpu_loops import ComputeLocation, ParallelVectorizeUnroll, VectorReduction
from .gpu import GPUBind, GPUCrossThreadReduction, GPUMatmulTiling, GPUWmmaTiling
from .gpu_mma import GPUMmaTiling
from .gpu_mma_conv import GPUMmaConv
from .gpu_wgmma import GPUWgmmaPipeline
from .inline import AutoInline
from .library import LibraryCall
from .lowp_cpu import MatmulLowpCPU
from .matmul_cpu import MatmulTensorizeCPU
from .prefetch import RowPrefetch
from .tiling_cpu import MultiLevelTilingCPU, TensorizeMatching

__all__ = ["AutoInline", "ComputeLocation", "GPUBind", "GPUCrossThreadReduction", "GPUMatmulTiling", "GPUMmaConv", "GPUMmaTiling", "GPUWgmmaPipeline", "GPUWmmaTiling", "LibraryCall", "MatmulAmxCPU", "MatmulLowpCPU",
           "MatmulTensorizeCPU",
           "MultiLevelTilingCPU", "ParallelVectorizeUnroll", "RowPrefetch", "Rule", "TensorizeMatching", "VectorReduction"]
