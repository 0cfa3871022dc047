# mypy: disable-error-code="type-var"
"""CPU multi-level tiling of reductions that no micro-kernel takes, and tensorize-by-matching.

`MultiLevelTilingCPU`, for a reduction block whose output's last index is a spatial iterator
`j` that also indexes some operand contiguously (depthwise conv, pooling, a GEMM whose n is not
a multiple of the vector width, int8 or symbolic GEMMs):

* `j` splits into (j0, j1) with j1 a sampled multiple of the vector width; the loops become
  spatial outer loops, j0, the reduction loops, j1 (S-R-S): each output vector is finished in
  registers before the next;
* the results accumulate in a `cache_write(..., "local")` register tile of j1 elements
  (`reverse_compute_at` j0), the init is split off (`decompose_reduction`), and the j1 loops of
  the init, the update and the copy back are vectorized.

`TensorizeMatching`: for a block not yet scheduled, every registered tensor intrinsic of the
target whose description's loop extents equal the extents of the block's innermost loops is
tried with `tensorize` at that loop; each match is an alternative (the first is the default).
Intrinsics registered by the user (`tdsl.TensorIntrin.register`) take part, so a library or a
hand-written micro-kernel joins the design space by registering itself.
"""
from __future__ import annotations

from ...intrinsics import blas
from ...intrinsics.registry import TensorIntrin
from ...ir import BufferLoad, Call, collect, free_vars
from ...ir.attrs import AUTO_SCHEDULED
from ...schedule import Schedule
from ..analysis import block_info
from .base import Rule
from .cpu_loops import _is_tuned


class MultiLevelTilingCPU(Rule):
    """S-R-S register tiling with a vector inner tile; see the module docstring."""

    name = "multi-level-tiling-cpu"

    def alternatives(self, sch: Schedule, block: str) -> list:
        if self.hw.kind != "cpu":
            return []
        info = block_info(sch.func, block)
        if info.is_spatial or info.store is None or not info.simple_bindings or not info.top_level \
                or _is_tuned(info):
            return []
        idx = info.store.indices
        j = next((it for it in info.spatial if idx and idx[-1] is it.var), None)
        if j is None:
            return []
        contiguous = any(ld.indices and j.var in free_vars(ld.indices[-1]) and ld.buffer is not info.store.buffer
                         for ld in collect(info.store.value, BufferLoad))
        if not contiguous or (j.extent is not None and j.extent < self.hw.lanes):
            return []
        if any(c.op == "if_then_else" for c in collect(info.block.body, Call)):
            return []  # a guarded (padded) load: lowering cannot vectorize it, so no vector tile
        return [lambda s: self._tile(s, block, j)]

    def _tile(self, s: Schedule, block: str, j) -> None:
        c = s.get_block(block)
        info = block_info(s.func, block)
        handles = s.get_loops(c)
        kinds = {id(it.loop): it.kind for it in info.iters}
        lj = next(h for h in handles if h.var is j.loop)
        lanes = self.hw.lanes
        choices = [v for v in (lanes * 2, lanes, lanes * 4) if j.extent is None or j.extent % v == 0] or [lanes]
        width = self.choose(s, choices, 0)
        j0, j1 = s.split(lj, [None, width])
        spatial = [h for h in handles if kinds[id(h.var)] == "S" and h is not lj]
        reduce_ = [h for h in handles if kinds[id(h.var)] == "R"]
        s.reorder(*spatial, j0, *reduce_, j1)
        local = s.cache_write(c, 0, "local")
        s.reverse_compute_at(local, j0)
        init = s.decompose_reduction(c, reduce_[0])
        s.vectorize(s.get_loops(init)[-1])
        s.vectorize(s.get_loops(c)[-1])
        s.vectorize(s.get_loops(local)[-1])
        s.annotate(c, AUTO_SCHEDULED, True)


def _desc_extents(intrin: TensorIntrin) -> list[int] | None:
    from ...ir import For, IntImm

    loops = collect(intrin.desc.body, For)
    out = []
    for f in loops:
        if not isinstance(f.extent, IntImm):
            return None
        out.append(int(f.extent.value))
    return sorted(out)


class TensorizeMatching(Rule):
    """Tensorize with every registered intrinsic whose tile matches; see the module docstring."""

    name = "tensorize-matching"

    def alternatives(self, sch: Schedule, block: str) -> list:
        from ...target import host_features

        host = host_features()
        info = block_info(sch.func, block)
        if info.store is None or not info.top_level or _is_tuned(info) or not info.constant_extents:
            return []
        out = []
        handles_ext = list(info.loop_extents)
        for name in TensorIntrin.list():
            intrin = TensorIntrin.get(name)
            missing = self.hw.kind == "cpu" and any(f not in host for f in intrin.features)
            if intrin.target != self.hw.kind or missing or blas.is_concrete(name):
                continue   # library GEMMs are LibraryCall's, by the generic name (it replays on any shape)
            want = _desc_extents(intrin)
            if not want or len(want) > len(handles_ext):
                continue
            depth = len(want)
            if sorted(handles_ext[-depth:]) != want:
                continue
            out.append(lambda s, name=name, depth=depth: s.tensorize(s.get_loops(s.get_block(block))[-depth],
                                                                     name))
        return out


__all__ = ["MultiLevelTilingCPU", "TensorizeMatching"]
