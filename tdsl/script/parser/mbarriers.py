"""TVM's mbarrier builtins and tdsl's TMA load (Hopper, sm_90a).

``T.ptx_init_barrier_thread_count(bars[i], count)``, ``T.ptx_arrive_barrier(bars[i])``,
``T.ptx_arrive_barrier_expect_tx(bars[i], bytes)``, ``T.ptx_wait_barrier(bars[i], parity)``
(TVM names its barriers by an id into one ``barrier_array``; tdsl by an element of a shared
"uint64" buffer), ``T.ptx_fence_proxy_async()`` and
``T.ptx_tma_load(A_sh[s, 0, 0], A[y, x], tensor_map[0], bars[s])``: the box of A at (y, x), as big
as A_sh's last two axes, into A_sh[s] by TMA, completing on bars[s]."""
from __future__ import annotations

import ast

from ... import dtypes as _dt
from ...ir.buffer import Buffer
from ...ir.expr import BufferLoad, Call, IntImm, PrimExpr
from ...ir.opaque_calls import (
    FENCE_PROXY_ASYNC,
    MBARRIER_ARRIVE,
    MBARRIER_ARRIVE_EXPECT_TX,
    MBARRIER_INIT,
    MBARRIER_WAIT,
    TMA_LOAD,
)
from .expressions import ExpressionParser
from .frames import _describe


class MbarrierCallParser(ExpressionParser):
    def _barrier(self, node: ast.Call, arg: ast.expr, what: str) -> BufferLoad:
        bar = self.eval_expr(arg)
        if not (isinstance(bar, BufferLoad) and isinstance(bar.buffer, Buffer) and bar.buffer.scope == "shared"
                and bar.buffer.dtype == _dt.DataType.parse("uint64")):
            raise self.error(arg, f"the barrier of T.{what} is an element of a shared uint64 buffer, got "
                                  f"{_describe(bar)}",
                             'e.g. bars = T.alloc_buffer((2,), "uint64", scope="shared"); then bars[0]')
        return bar

    def _args(self, node: ast.Call, what: str, names: tuple[str, ...]) -> list[ast.expr]:
        if node.keywords or len(node.args) != len(names):
            raise self.error(node, f"T.{what} takes ({', '.join(names)})")
        return list(node.args)

    def call_ptx_init_barrier_thread_count(self, node: ast.Call) -> PrimExpr:
        """T.ptx_init_barrier_thread_count(bars[i], count): mbarrier.init, `count` arrivals a phase."""
        bar_node, count = self._args(node, MBARRIER_INIT, ("bars[i]", "thread_count"))
        bar = self._barrier(node, bar_node, MBARRIER_INIT)
        return Call(_dt.int32, MBARRIER_INIT, (bar, self.to_index(self.eval_expr(count), count)), span=self.span(node))

    def call_ptx_arrive_barrier(self, node: ast.Call) -> PrimExpr:
        """T.ptx_arrive_barrier(bars[i]): mbarrier.arrive."""
        (bar_node,) = self._args(node, MBARRIER_ARRIVE, ("bars[i]",))
        return Call(_dt.int32, MBARRIER_ARRIVE, (self._barrier(node, bar_node, MBARRIER_ARRIVE),), span=self.span(node))

    def call_ptx_arrive_barrier_expect_tx(self, node: ast.Call) -> PrimExpr:
        """T.ptx_arrive_barrier_expect_tx(bars[i], bytes): mbarrier.arrive.expect_tx."""
        bar_node, nbytes = self._args(node, MBARRIER_ARRIVE_EXPECT_TX, ("bars[i]", "byte_count"))
        bar = self._barrier(node, bar_node, MBARRIER_ARRIVE_EXPECT_TX)
        return Call(_dt.int32, MBARRIER_ARRIVE_EXPECT_TX, (bar, self.to_index(self.eval_expr(nbytes), nbytes)),
                    span=self.span(node))

    def call_ptx_wait_barrier(self, node: ast.Call) -> PrimExpr:
        """T.ptx_wait_barrier(bars[i], parity=0): wait until the barrier's phase of that parity completes
        (mbarrier.try_wait.parity; TVM's form has no parity and waits on phase 0)."""
        if node.keywords or len(node.args) not in (1, 2):
            raise self.error(node, "T.ptx_wait_barrier takes (bars[i]) or (bars[i], parity)")
        bar = self._barrier(node, node.args[0], MBARRIER_WAIT)
        parity = self.to_index(self.eval_expr(node.args[1]), node.args[1]) if len(node.args) == 2 else IntImm(0, _dt.int32)
        return Call(_dt.int32, MBARRIER_WAIT, (bar, parity), span=self.span(node))

    def call_ptx_fence_proxy_async(self, node: ast.Call) -> PrimExpr:
        """T.ptx_fence_proxy_async(): fence.proxy.async (generic-proxy writes visible to TMA / wgmma)."""
        self._args(node, FENCE_PROXY_ASYNC, ())
        return Call(_dt.int32, FENCE_PROXY_ASYNC, (), span=self.span(node))

    def call_ptx_tma_load(self, node: ast.Call) -> PrimExpr:
        """T.ptx_tma_load(dst, src, tensor_map, bars[i][, *coords]): TMA of src's box (coords: src's indices)."""
        if node.keywords or len(node.args) < 4:
            raise self.error(node, "T.ptx_tma_load takes (A_shared[s, 0, 0], A[y, x], tensor_map[0], bars[s])")
        dst, src, tmap = (self.eval_expr(a) for a in node.args[:3])
        bar = self._barrier(node, node.args[3], TMA_LOAD)
        for what, value, arg, scope in (("destination", dst, node.args[0], "shared"),
                                        ("source", src, node.args[1], "global")):
            if not isinstance(value, BufferLoad) or value.dtype.lanes != 1 or value.buffer.scope != scope:
                raise self.error(arg, f"the {what} of T.ptx_tma_load is one element of a {scope} buffer, got "
                                      f"{_describe(value)}", "e.g. T.ptx_tma_load(A_sh[s, 0, 0], A[y, x], tmap[0], bars[s])")
        if not isinstance(tmap, BufferLoad) or tmap.buffer.dtype != _dt.DataType.parse("uint8"):
            raise self.error(node.args[2], f"the tensor map of T.ptx_tma_load is element 0 of a uint8 buffer of 128 "
                                           f"bytes, got {_describe(tmap)}")
        rank = len(src.buffer.shape)
        if not 1 <= rank <= 5 or len(dst.buffer.shape) < rank:
            raise self.error(node, f"T.ptx_tma_load copies a box of 1 to 5 axes into the last axes of the destination; "
                                   f"{src.buffer.name} has {rank}, {dst.buffer.name} {len(dst.buffer.shape)}")
        if dst.buffer.dtype != src.buffer.dtype:
            raise self.error(node, f"T.ptx_tma_load copies between buffers of one dtype; {dst.buffer.name} is "
                                   f"{dst.buffer.dtype}, {src.buffer.name} is {src.buffer.dtype}")
        coords = [self.to_index(self.eval_expr(a), a) for a in node.args[4:]] or list(src.indices)
        if len(coords) != rank:
            raise self.error(node, f"T.ptx_tma_load takes {rank} coordinates of {src.buffer.name}, got {len(coords)}")
        return Call(_dt.int32, TMA_LOAD, (dst, src, tmap, bar, *coords), span=self.span(node))
