"""Lowering hook for tensorized blocks: `apply_tensor_intrinsics(func, target) -> func`.

A tensorized block keeps its description's code and names its intrinsic in the block
annotation "tdsl.tensor_intrin" (see tdsl.schedule.primitives.blockize). This pass, the first
of a lowering pipeline (before `convert_blocks`), decides per block:

* the intrinsic's target is the one being built for ("cpu" intrinsics on "cpu", "cuda" ones on
  "cuda") -> the block's body is matched again (tensorize's own match is reused when the block
  and the loops around it are still the nodes it matched) and replaced by the implementation,
  its buffers bound to the matched regions (an init the description does not cover stays as it
  is);
* a "cuda" intrinsic built for "cpu" -> the description stays (so a GPU-scheduled function
  builds and runs on the CPU with the same results);
* a "cpu" intrinsic needing CPU features the target lacks (`tdsl.target.cpu_features`: the
  host's, or those of "llvm -mcpu=x86-64-v3" ...), or a "cpu" intrinsic built for "cuda"
  -> TargetError naming the block, the intrinsic and what is missing.

The "cpu" and "cuda" pipelines of tdsl.lower run it first ("apply_tensor_intrinsics"); it costs
nothing for functions without tensorized blocks.
"""
from __future__ import annotations

import dataclasses

from ..errors import ScheduleError, TargetError
from ..intrinsics.cuda import FRAGMENT_SCOPES  # per-thread arrays on CUDA, filled by the device functions
from ..intrinsics.cuda_mma import FRAGMENT_SCOPES as MMA_FRAGMENT_SCOPES  # per-lane registers (gpu_lane_fragments)
from ..intrinsics.match import Mismatch, instantiate_impl, match
from ..intrinsics.registry import TensorIntrin
from ..ir import Block, BlockRealize, Buffer, PrimFunc, Stmt, collect, replace_buffers
from ..ir.attrs import CUDA_PRELUDE, LOWER_NOTE, TENSOR_INTRIN, note_texts
from ..ir.tree import find_path, replace_at, walk
from ..target import cpu_features, cpu_name, parse_target
from ._util import add_notes

PASS_NAME = "apply_tensor_intrinsics"


def missing_features(intrin: TensorIntrin, target="cpu") -> list[str]:
    """The CPU features `intrin` needs that the CPU of `target` (default: the host's) lacks."""
    if not intrin.features:
        return []
    have = cpu_features(target)
    return [f for f in intrin.features if f not in have]


def intrin_of(block: Block) -> str | None:
    for k, v in block.annotations:
        if k == TENSOR_INTRIN:
            return v
    return None


def apply_tensor_intrinsics(func: PrimFunc, target="cpu") -> PrimFunc:
    """Swap in the implementation of every tensorized block the target can run (module docs)."""
    tgt = parse_target(target)
    kind = tgt.kind
    preludes: list[str] = []
    notes: list[str] = []
    # notes left on blocks that stay generated code (an auto rule saying why a block is not on
    # the tensor cores)
    for realize in collect(func.body, BlockRealize):
        if intrin_of(realize.block) is None:
            notes += [n for k, v in realize.block.annotations if k == LOWER_NOTE for n in note_texts(v)]
    # found by identity, not by name (a name may repeat); a swap rebuilds only the ancestors
    for target in _tensorized(func.body):
        found = find_path(func.body, lambda s, r=target: s is r)
        assert found is not None
        realize, path = target, found[1]
        block = realize.block
        name = block.name
        intrin_name = intrin_of(block)
        try:
            intrin = TensorIntrin.get(intrin_name)
        except ScheduleError as exc:
            raise TargetError(f'block "{name}" is tensorized with {intrin_name!r}, which is not registered in this '
                              f"process:\n{exc}") from None
        if intrin.target != kind:
            if intrin.target == "cuda":
                continue  # the description computes the same on the CPU
            raise TargetError(f'block "{name}" is tensorized with the CPU intrinsic {intrin.name!r}, which cannot '
                              f"run on {kind!r}; tensorize it with a {kind} intrinsic for this target")
        if kind == "cpu":
            missing = missing_features(intrin, tgt)
            if missing:
                raise TargetError(
                    f'block "{name}" is tensorized with {intrin.name!r}, which needs the CPU features '
                    f"{', '.join(missing)} that the target's CPU ({cpu_name(tgt)}) lacks; use a variant it has "
                    "(see tdsl.intrinsics.x86.available(target)) or leave the block untensorized")
        try:
            bindings = match(intrin, block, path + (realize, block))
        except Mismatch as m:
            raise TargetError(f'block "{name}" no longer computes the description of {intrin.name!r} '
                              f"(a later schedule step changed it): {m.message}") from None
        # its own note and those of the blocks it replaces (a rule's note on the computation)
        notes += [n for b in (block, *walk_blocks(block.body)) for k, v in b.annotations if k == LOWER_NOTE
                  for n in note_texts(v)]
        body, allocs = instantiate_impl(intrin, bindings)
        new_block = dataclasses.replace(block, body=body, alloc_buffers=block.alloc_buffers + allocs)
        func = replace_at(func, path, realize, dataclasses.replace(realize, block=new_block))
        if intrin.prelude and intrin.prelude not in preludes:
            preludes.append(intrin.prelude)
    func = add_notes(func, notes)
    if kind == "cuda" and preludes:
        func = _fragments_to_local(func)
        attrs = tuple((k, v) for k, v in func.attrs if k != CUDA_PRELUDE) + ((CUDA_PRELUDE, "\n".join(preludes)),)
        func = dataclasses.replace(func, attrs=attrs)
    return func


def _fragments_to_local(func: PrimFunc) -> PrimFunc:
    """Fragment buffers become per-thread `local` arrays (the device functions fill them)."""
    bmap: dict[Buffer, Buffer] = {}
    for realize in collect(func.body, BlockRealize):
        for buf in realize.block.alloc_buffers:
            if buf.scope in FRAGMENT_SCOPES or buf.scope in MMA_FRAGMENT_SCOPES:
                bmap[buf] = buf.with_(scope="local")
    return func.with_body(replace_buffers(func.body, bmap)) if bmap else func


def _tensorized(stmt: Stmt) -> list[BlockRealize]:
    """The tensorized blocks' realizes, in program order (nothing inside a tensorized block is
    tensorized on its own)."""
    def untensorized(s: Stmt) -> bool:
        return not (isinstance(s, BlockRealize) and intrin_of(s.block) is not None)

    return [s for s in walk(stmt, untensorized) if isinstance(s, BlockRealize) and not untensorized(s)]


def walk_blocks(stmt) -> list:
    """The blocks under `stmt` (its own nested blocks, in pre-order)."""
    from ..ir import Block
    from ..ir.tree import walk

    return [s for s in walk(stmt) if isinstance(s, Block)]
