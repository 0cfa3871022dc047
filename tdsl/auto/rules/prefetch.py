"""RowPrefetch: in a row-fused loop nest, one vector step of an elementwise block also prefetches
the next row of its input, through a tensor intrinsic generated from the block itself.

A row kernel (softmax, layernorm) fused by `ComputeLocation` reads each row of its input A
several times; the first pass waits for memory at every row, as the hardware prefetcher starts
over at every 4 KiB page. bench/schedules.py's hand softmax cures this with an intrinsic that
computes one vector step of `exp` and prefetches the same columns of the next row of A
(4.1 -> 2.5 ms on one core). This rule builds that intrinsic for any elementwise block of such a
nest that reads A[row, col] after an earlier block of the nest did: its description is the block
on a 1 x L tile (L a sampled multiple of the vector width), its implementation the same code as
a vectorized loop preceded by one `llvm.prefetch` per 64-byte line of A's next row. The step
is then `tensorize`d (the intrinsic is registered under a name derived from the block's code, so
a replayed trace in another process finds it again once this rule has run there; a trace replay
alone raises a ScheduleError naming the missing intrinsic). The second sketch is the plain
vector loop.
"""
from __future__ import annotations

import hashlib

from ...ir import Buffer as IRBuffer
from ...ir import BufferLoad, BufferStore, IntImm, IRMutator, Var, collect, substitute
from ...schedule import Schedule
from ..analysis import block_info, blocks_in_nest, loop_node
from .base import Rule
from .cpu_loops import _is_tuned

LINE_FLOATS = 16


class _Tile(IRMutator):
    """Loads and stores of the block's buffers become accesses of the tile's parameters."""

    def __init__(self, mapping):
        self.mapping = mapping  # buffer -> (param buffer, index function)

    def visit_BufferLoad(self, node: BufferLoad):
        node = self.generic_visit(node)
        new, fn = self.mapping[node.buffer]
        return BufferLoad(new, fn(node.indices))

    def visit_BufferStore(self, node: BufferStore):
        node = self.generic_visit(node)
        new, fn = self.mapping[node.buffer]
        return BufferStore(new, node.value, fn(node.indices))


def _tile_params(info, row: Var, col: Var, lanes: int):
    """(param declarations, buffer mapping, prefetched param names), or None when an access is
    not A[row, col] (2-D), v[row] or v[col] (1-D)."""
    from ...script.printer import message_text

    mapping, decls, prefetched = {}, [], []
    buffers = []
    for node in collect(info.block.body, BufferLoad) + collect(info.block.body, BufferStore):
        if node.buffer not in buffers:
            buffers.append(node.buffer)
    accesses = {}
    for node in collect(info.block.body, BufferLoad) + collect(info.block.body, BufferStore):
        kinds = accesses.setdefault(node.buffer, set())
        idx = node.indices
        if len(idx) == 2 and idx[0] is row and idx[1] is col:
            kinds.add("row-col")
        elif len(idx) == 1 and idx[0] is row:
            kinds.add("row")
        elif len(idx) == 1 and idx[0] is col:
            kinds.add("col")
        else:
            return None
    for k, buf in enumerate(buffers):
        if len(accesses[buf]) != 1:
            return None
        kind = next(iter(accesses[buf]))
        name = f"P{k}"
        dtype = str(buf.dtype)
        if kind == "row-col":
            shape, strides = (1, lanes), f', strides=("{name.lower()}_s", 1)'
            fn = lambda idx, lanes=lanes: (IntImm(0, idx[0].dtype), idx[1])
            if buf in info.params and buf is not info.store.buffer:
                prefetched.append(name)
        elif kind == "row":
            shape, strides = (1,), ""
            fn = lambda idx: (IntImm(0, idx[0].dtype),)
        else:
            shape, strides = (lanes,), ""
            fn = lambda idx: (idx[0],)
        new = IRBuffer(name, tuple(IntImm(s) for s in shape), buf.dtype)
        mapping[buf] = (new, fn)
        decls.append(f'{name}: T.Buffer({shape}, "{dtype}"{strides})')
    del message_text
    return decls, mapping, prefetched


def prefetch_intrinsic(info, row: Var, col: Var, lanes: int) -> str | None:
    """Register (once) the prefetching intrinsic of `info`'s block; its name, or None."""
    from ...intrinsics.registry import TensorIntrin
    from ...script import parse
    from ...script.printer import message_text

    params = _tile_params(info, row, col, lanes)
    if params is None:
        return None
    decls, mapping, prefetched = params
    if not prefetched:
        return None
    vj = Var("vj", col.dtype)
    body = _Tile(mapping).visit(substitute(info.block.body, {col: vj}))
    text = message_text(body)
    if "Buffer(" in text or "Var(" in text:
        return None
    head = ", ".join(decls)
    body_lines = "\n".join("            " + line for line in text.splitlines())
    desc = (f"@T.prim_func\ndef desc({head}):\n    for j in range({lanes}):\n"
            f'        with T.block("{info.name}"):\n            vj = T.axis.spatial({lanes}, j)\n{body_lines}\n')
    fetches = "".join(f'    T.evaluate(T.call_extern("void", "llvm.prefetch.p0", T.address_of({p}[1, {c}]), '
                      f"0, 3, 1))\n" for p in prefetched for c in range(0, lanes, LINE_FLOATS))
    impl_lines = "\n".join("        " + line for line in text.splitlines())
    impl = f"@T.prim_func\ndef impl({head}):\n{fetches}    for vj in T.vectorized({lanes}):\n{impl_lines}\n"
    digest = hashlib.sha1((desc + impl).encode()).hexdigest()[:10]
    name = f"auto.row_prefetch_{info.name}_{lanes}_{digest}"
    if not TensorIntrin.exists(name):
        try:
            TensorIntrin.register(name, parse(desc), parse(impl), target="cpu",
                                  doc=f"one {lanes}-wide step of block {info.name!r}, prefetching the next row")
        except Exception:  # noqa: BLE001 - a body the generated script cannot express: no intrinsic
            return None
    return name


class RowPrefetch(Rule):
    """Tensorize a row-fused elementwise step with a generated prefetching intrinsic."""

    name = "row-prefetch"

    def alternatives(self, sch: Schedule, block: str) -> list:
        if self.hw.kind != "cpu":
            return []
        info = block_info(sch.func, block)
        if not info.top_level or not info.loops or len(info.loops) != 2 or info.store is None \
                or not info.is_spatial or _is_tuned(info) or not info.loop_extents[1]:
            return []
        root = loop_node(sch.func, info.loops[0])
        if root.kind != "serial":
            return []
        nest = blocks_in_nest(sch.func, block)
        if len(nest) < 2 or nest.index(block) == 0:
            return []
        row_it = next((it for it in info.iters if it.loop is info.loops[0]), None)
        col_it = next((it for it in info.iters if it.loop is info.loops[1]), None)
        if row_it is None or col_it is None or row_it.kind != "S" or col_it.kind != "S":
            return []
        earlier = nest[:nest.index(block)]
        reads = {r.buffer for r in info.block.reads if r.buffer in info.params}
        if not any(reads & {r.buffer for r in block_info(sch.func, b).block.reads} for b in earlier):
            return []
        extent = info.loop_extents[1]
        lanes = next((v for v in (self.hw.lanes * 4, self.hw.lanes * 2) if extent % v == 0 and extent > v), None)
        if lanes is None:
            return []
        name = prefetch_intrinsic(info, row_it.var, col_it.var, lanes)
        if name is None:
            return []

        def make(s: Schedule) -> None:
            b = s.get_block(block)
            _, col = s.get_loops(b)
            _, step = s.split(col, [None, lanes])
            s.tensorize(step, name)

        return [make, lambda s: None]
