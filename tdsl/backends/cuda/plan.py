"""The CUDA host plan: what GPU lowering (lower_gpu.py) hands to codegen, the kernels and the
emulator: the kernels with their launches, the device workspaces and the host's library steps.

Its own module so that the modules using it (lower_gpu, host_steps, kernel, codegen) do not
import each other for its types.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from ...arith.evaluate import EvalError, eval_int
from ...dtypes import int32
from ...errors import ArgumentError
from ...ir import Buffer, IntImm, PrimExpr, PrimFunc, Stmt, Var


@dataclass
class KernelSpec:
    """One `__global__` function: its body with thread indices as free Vars, and its launch."""

    name: str
    body: Stmt
    tag_vars: dict[str, Var]            # "blockIdx.x" -> the Var standing for it in `body`
    launch: dict[str, PrimExpr]         # "blockIdx.x" -> extent (over symbolic dims / scalar params)
    shared: list[Buffer] = field(default_factory=list)
    params: list[Buffer | Var] = field(default_factory=list)
    dynamic_shared_bytes: int = 0       # set by codegen: the launch's dynamic shared memory (0: static arrays)

    def dims(self, kind: str) -> tuple[PrimExpr, PrimExpr, PrimExpr]:
        """(x, y, z) extents for kind "blockIdx" (grid) or "threadIdx" (block)."""
        one = IntImm(1, int32)
        return tuple(self.launch.get(f"{kind}.{a}", one) for a in "xyz")  # type: ignore[return-value]

    @property
    def shared_bytes(self) -> int:
        """The shared buffers' bytes (without the padding a dynamic layout adds between them)."""
        return sum(int(cast(IntImm, b.shape[0]).value) * b.dtype.itemsize * b.dtype.lanes for b in self.shared)


@dataclass
class HostPlan:
    """What the host does: allocate the workspaces, launch the kernels in order."""

    func: PrimFunc                      # the lowered function (flat parameter buffers)
    kernels: list[KernelSpec]
    workspaces: list[Buffer]            # function-level global intermediates (device allocations)
    steps: list = field(default_factory=list)   # (launch index, host_steps.LibraryStep): runs before that launch


def evaluate(e: PrimExpr, values: dict[Var, int]) -> int:
    """The value of an integer expression over bound symbolic dimensions / scalars."""
    try:
        return eval_int(e, values)
    except KeyError as exc:
        raise ArgumentError(f"symbolic dimension or scalar {exc.args[0].name!r} is not bound by the arguments") from None
    except EvalError as exc:
        raise ArgumentError(f"cannot evaluate the launch expression {exc.node}") from None
