"""TVM's mbarrier builtins and tdsl's TMA load (Hopper, sm_90a).

``T.ptx_init_barrier_thread_count(bars[i], count)``, ``T.ptx_arrive_barrier(bars[i])``,
``T.ptx_arrive_barrier_expect_tx(bars[i], bytes)``, ``T.ptx_wait_barrier(bars[i], parity)``
(TVM names its barriers by an id into one ``barrier_array``; tdsl by an element of a shared
"uint64" buffer), ``T.ptx_fence_proxy_async()`` and
``T.ptx_tma_load(A_sh[s, 0, 0], A[y, x], tensor_map[0], bars[s])``: the box of A at (y, x), as big
as A_sh's last two axes, into A_sh[s] by TMA, completing on bars[s];
``T.ptx_wgmma(acc[tx, 0], A_sh[s, 0, 16 * j], B_sh[s, 0, 16 * j], 32, tx)`` with
``T.ptx_wgmma_fence()``, ``T.ptx_wgmma_commit_group()``, ``T.ptx_wgmma_wait_group(0)``;
``T.ptx_setmaxnreg(False, 40)`` / ``T.ptx_setmaxnreg(True, 232)``;
``T.ptx_tma_store(C[y, x], C_sh[0, 0], tensor_map[0])``: the box at C_sh into C at (y, x) by TMA."""
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
    SETMAXNREG,
    TMA_LOAD,
    TMA_STORE,
    WGMMA,
    WGMMA_COMMIT_GROUP,
    WGMMA_FENCE,
    WGMMA_WAIT_GROUP,
    setmaxnreg_problem,
    wgmma_box_axis,
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

    def _tma_operands(self, node: ast.Call, name: str, store: bool, example: str, first_coord: int):
        """The destination, source, tensor map and box coordinates of T.ptx_tma_load / _store
        (`store`: the tensor is the destination, the shared tile the source), checked alike."""
        dst, src, tmap = (self.eval_expr(a) for a in node.args[:3])
        scopes = ("global", "shared") if store else ("shared", "global")
        for what, value, arg, scope in (("destination", dst, node.args[0], scopes[0]),
                                        ("source", src, node.args[1], scopes[1])):
            if not isinstance(value, BufferLoad) or value.dtype.lanes != 1 or value.buffer.scope != scope:
                raise self.error(arg, f"the {what} of {name} is one element of a {scope} buffer, got "
                                      f"{_describe(value)}", f"e.g. {example}")
        if not isinstance(tmap, BufferLoad) or tmap.buffer.dtype != _dt.DataType.parse("uint8"):
            raise self.error(node.args[2], f"the tensor map of {name} is element 0 of a uint8 buffer of 128 "
                                           f"bytes, got {_describe(tmap)}")
        tensor, tile = (dst, src) if store else (src, dst)
        rank = len(tensor.buffer.shape)
        if not 1 <= rank <= 5 or len(tile.buffer.shape) < rank:
            where = "from the last axes of the source" if store else "into the last axes of the destination"
            raise self.error(node, f"{name} copies a box of 1 to 5 axes {where}; "
                                   f"{tensor.buffer.name} has {rank}, {tile.buffer.name} {len(tile.buffer.shape)}")
        if dst.buffer.dtype != src.buffer.dtype:
            raise self.error(node, f"{name} copies between buffers of one dtype; {dst.buffer.name} is "
                                   f"{dst.buffer.dtype}, {src.buffer.name} is {src.buffer.dtype}")
        coords = [self.to_index(self.eval_expr(a), a) for a in node.args[first_coord:]] or list(tensor.indices)
        if len(coords) != rank:
            raise self.error(node, f"{name} takes {rank} coordinates of {tensor.buffer.name}, got {len(coords)}")
        return dst, src, tmap, coords

    def call_ptx_tma_load(self, node: ast.Call) -> PrimExpr:
        """T.ptx_tma_load(dst, src, tensor_map, bars[i][, *coords]): TMA of src's box (coords: src's indices)."""
        if node.keywords or len(node.args) < 4:
            raise self.error(node, "T.ptx_tma_load takes (A_shared[s, 0, 0], A[y, x], tensor_map[0], bars[s])")
        bar = self._barrier(node, node.args[3], TMA_LOAD)
        dst, src, tmap, coords = self._tma_operands(node, "T.ptx_tma_load", False,
                                                    "T.ptx_tma_load(A_sh[s, 0, 0], A[y, x], tmap[0], bars[s])", 4)
        return Call(_dt.int32, TMA_LOAD, (dst, src, tmap, bar, *coords), span=self.span(node))

    def call_ptx_tma_store(self, node: ast.Call) -> PrimExpr:
        """T.ptx_tma_store(dst, src, tensor_map[, *coords]): TMA of src's box into dst at coords (dst's
        indices), committed and waited for (bulk wait_group 0)."""
        if node.keywords or len(node.args) < 3:
            raise self.error(node, "T.ptx_tma_store takes (C[y, x], C_shared[0, 0], tensor_map[0])")
        dst, src, tmap, coords = self._tma_operands(node, "T.ptx_tma_store", True,
                                                    "T.ptx_tma_store(C[y, x], C_sh[0, 0], tmap[0])", 3)
        return Call(_dt.int32, TMA_STORE, (dst, src, tmap, *coords), span=self.span(node))

    def call_ptx_wgmma(self, node: ast.Call) -> PrimExpr:
        """T.ptx_wgmma(D[t, 0], A_sh[s, 0, k], B_sh[s, 0, k], n, lane[, b_major="mn"]): wgmma m64nNk16
        (tdsl.ir.opaque_calls); with b_major="mn" B is read N-major from B_sh[s, 0, k, 0]."""
        usage = ('T.ptx_wgmma takes (acc[tx, 0], A_shared[s, 0, k], B_shared[s, 0, k], n, lane) and optionally '
                 'b_major="mn" (B N-major: B_shared[s, 0, k, 0], K rows of N columns)')
        if any(kw.arg != "b_major" for kw in node.keywords) or len(node.args) not in (5, 6):
            raise self.error(node, usage)
        b_major = "k"
        for kw in node.keywords:
            value = kw.value.value if isinstance(kw.value, ast.Constant) else None
            if value not in ("k", "mn"):
                raise self.error(kw.value, f'b_major of T.ptx_wgmma is "k" (B K-major) or "mn" (B N-major), got '
                                           f"{ast.unparse(kw.value)}")
            b_major = value
        d, a, b = (self.eval_expr(x) for x in node.args[:3])
        n = self.eval_expr(node.args[3])
        n = n.value if isinstance(n, IntImm) else n
        if isinstance(n, bool) or not isinstance(n, int) or n % 8 or not 8 <= n <= 256:
            raise self.error(node.args[3], f"wgmma m64nNk16 takes N a multiple of 8 in [8, 256], got {_describe(n)}")
        if not (isinstance(d, BufferLoad) and d.buffer.scope == "local" and d.buffer.dtype == _dt.float32):
            raise self.error(node.args[0], f"the accumulator of T.ptx_wgmma is an element of a local float32 buffer "
                                           f"(the thread's {n // 2} elements from it on), got {_describe(d)}")
        spans = []
        for what, op, arg, rows in (("A", a, node.args[1], 64), ("B", b, node.args[2], n)):
            if not (isinstance(op, BufferLoad) and op.buffer.scope == "shared" and len(op.buffer.shape) >= 2
                    and op.buffer.dtype in (_dt.float16, _dt.DataType.parse("bfloat16"))):
                raise self.error(arg, f"{what} of T.ptx_wgmma is an element of a shared float16/bfloat16 tile, got "
                                      f"{_describe(op)}")
            span = op.buffer.shape[-1]
            row_bytes = span.value * 2 if isinstance(span, IntImm) else None
            mn = what == "B" and b_major == "mn"
            if row_bytes not in (32, 64, 128):
                layout = ("B N-major: its rows are K rows of a swizzle span of N" if mn else
                          "wgmma reads K-major tiles whose rows are a swizzle span")
                raise self.error(arg, f"{what} of T.ptx_wgmma: the rows of {op.buffer.name} are {row_bytes} bytes; "
                                      f"{layout} (32, 64 or 128 bytes: 16, 32 or 64 halves), loaded by TMA with "
                                      "that swizzle")
            spans.append(row_bytes)
            height = op.buffer.shape[-2]
            if mn:
                self._check_mn_b(node, arg, op, n, row_bytes // 2)
            elif isinstance(height, IntImm) and height.value < rows:
                raise self.error(arg, f"{what} of T.ptx_wgmma needs {rows} rows, {op.buffer.name} has {height.value}")
        if a.buffer.dtype != b.buffer.dtype or (b_major == "k" and spans[0] != spans[1]):
            raise self.error(node, f"T.ptx_wgmma: A ({a.buffer.name}) and B ({b.buffer.name}) have one dtype" +
                             (" and one row length (swizzle)" if b_major == "k" else ""))
        lane = self.to_index(self.eval_expr(node.args[4]), node.args[4])
        args = [d, a, b, IntImm(n, _dt.int32), lane, IntImm(spans[0], _dt.int32)]   # (printed: implied by A's rows)
        if b_major == "mn":   # B's row bytes and the byte stride between its boxes of columns (implied by B_sh)
            b_shape = tuple(int(x.value) for x in b.buffer.shape)   # type: ignore[attr-defined]
            box = wgmma_box_axis(b_shape)
            stride = 1
            for ext in (b_shape[box + 1:] if box is not None else b_shape[-2:]):
                stride *= ext
            args += [IntImm(spans[1], _dt.int32), IntImm(stride * 2, _dt.int32)]
        return Call(_dt.int32, WGMMA, tuple(args), span=self.span(node))

    def _check_mn_b(self, node: ast.Call, arg: ast.expr, op: BufferLoad, n: int, span: int) -> None:
        """An N-major B: K rows (at least 16) of `span` columns, n // span boxes of them side by side."""
        if len(op.buffer.shape) < 3 or not all(isinstance(x, IntImm) for x in op.buffer.shape):
            raise self.error(arg, f"B of T.ptx_wgmma with b_major=\"mn\": {op.buffer.name} has constant axes (.., "
                                  "boxes, K rows, span), each box K rows of a swizzle span of N columns")
        shape = tuple(int(x.value) for x in op.buffer.shape)   # type: ignore[attr-defined]
        if shape[-2] < 16:
            raise self.error(arg, f"B of T.ptx_wgmma with b_major=\"mn\" needs 16 K rows, {op.buffer.name} has "
                                  f"{shape[-2]}")
        box = wgmma_box_axis(shape)
        boxes = shape[box] if box is not None else 1
        if n > span and (n % span or boxes * span < n):
            raise self.error(arg, f"B of T.ptx_wgmma with b_major=\"mn\": N = {n} is {n // span} boxes of {span} "
                                  f"columns, but {op.buffer.name} {shape} has {boxes}")

    def call_ptx_wgmma_fence(self, node: ast.Call) -> PrimExpr:
        """T.ptx_wgmma_fence(): wgmma.fence (before the first wgmma touching the accumulators)."""
        self._args(node, WGMMA_FENCE, ())
        return Call(_dt.int32, WGMMA_FENCE, (), span=self.span(node))

    def call_ptx_wgmma_commit_group(self, node: ast.Call) -> PrimExpr:
        """T.ptx_wgmma_commit_group(): the wgmmas issued so far form a group."""
        self._args(node, WGMMA_COMMIT_GROUP, ())
        return Call(_dt.int32, WGMMA_COMMIT_GROUP, (), span=self.span(node))

    def call_ptx_wgmma_wait_group(self, node: ast.Call) -> PrimExpr:
        """T.ptx_wgmma_wait_group(n): wait until at most n wgmma groups are pending."""
        (n_node,) = self._args(node, WGMMA_WAIT_GROUP, ("n",))
        n = self.eval_expr(n_node)
        n = n.value if isinstance(n, IntImm) else n
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise self.error(n_node, f"T.ptx_wgmma_wait_group takes one constant count >= 0, got {_describe(n)}")
        return Call(_dt.int32, WGMMA_WAIT_GROUP, (IntImm(n, _dt.int32),), span=self.span(node))

    def call_ptx_setmaxnreg(self, node: ast.Call) -> PrimExpr:
        """T.ptx_setmaxnreg(inc, count): setmaxnreg.inc (inc True) / .dec (False) to `count` registers per
        thread of the executing warpgroup (sm_90a)."""
        inc_node, count_node = self._args(node, SETMAXNREG, ("inc", "count"))
        inc = self.eval_expr(inc_node)
        inc = bool(inc.value) if isinstance(inc, IntImm) and inc.dtype.is_bool else inc
        if not isinstance(inc, bool):
            raise self.error(inc_node, f"the first argument of T.ptx_setmaxnreg is True (setmaxnreg.inc: raise the "
                                       f"warpgroup's registers) or False (.dec: lower them), got {_describe(inc)}")
        count = self.eval_expr(count_node)
        count = count.value if isinstance(count, IntImm) and not count.dtype.is_bool else count
        why = setmaxnreg_problem(count)
        if why is not None:
            raise self.error(count_node, f"T.ptx_setmaxnreg: {why}", "e.g. T.ptx_setmaxnreg(False, 40) for a producer "
                                                                     "warpgroup, T.ptx_setmaxnreg(True, 232) for consumers")
        return Call(_dt.int32, SETMAXNREG, (IntImm(int(inc), _dt.DataType.parse("bool")), IntImm(count, _dt.int32)),
                    span=self.span(node))
