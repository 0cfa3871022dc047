"""TVM's asynchronous-copy builtins: T.ptx_cp_async, T.ptx_commit_group, T.ptx_wait_group.

``T.ptx_cp_async(A_sh[i, j], A[i, j], 16)`` (tdsl's spelling: destination element, source
element, bytes) or TVM's ``T.ptx_cp_async("float16", A_sh.data, shared_offset, A.data,
global_offset, 16)`` (offsets in elements of the buffers' storage, row-major)."""
from __future__ import annotations

import ast

from ... import dtypes as _dt
from ...ir.buffer import Buffer
from ...ir.expr import BufferLoad, Call, IntImm, PrimExpr
from ...ir.opaque_calls import COMMIT_GROUP, CP_ASYNC, WAIT_GROUP
from .expressions import ExpressionParser
from .frames import _describe, _View
from .tvm_compat import TVMCallParser

_SIZES = (4, 8, 16)


class AsyncCallParser(ExpressionParser, TVMCallParser):
    def call_ptx_cp_async(self, node: ast.Call) -> PrimExpr:
        """T.ptx_cp_async(dst, src, bytes) or TVM's (dtype, dst.data, dst_offset, src.data, src_offset, bytes)."""
        if node.keywords or len(node.args) not in (3, 6):
            raise self.error(node, "T.ptx_cp_async takes (A_shared[i], A[j], bytes) or TVM's (dtype, A_shared.data, "
                                   "shared_offset, A.data, global_offset, bytes)")
        if len(node.args) == 6:
            elem = self.parse_dtype(node.args[0])
            dst = self._data_element(node.args[1], node.args[2], elem, node)
            src = self._data_element(node.args[3], node.args[4], elem, node)
            size_node = node.args[5]
        else:
            dst, src = (self.eval_expr(a) for a in node.args[:2])
            for what, value, arg in (("destination", dst, node.args[0]), ("source", src, node.args[1])):
                if not isinstance(value, BufferLoad) or value.dtype.lanes != 1:
                    raise self.error(arg, f"the {what} of T.ptx_cp_async is one buffer element, got {_describe(value)}",
                                     "e.g. T.ptx_cp_async(A_shared[i, 0], A[i, 0], 16)")
            size_node = node.args[2]
        size = self.eval_expr(size_node)
        size = size.value if isinstance(size, IntImm) else size
        if isinstance(size, bool) or size not in _SIZES:
            got = size if isinstance(size, int) and not isinstance(size, bool) else _describe(size)
            raise self.error(size_node, f"cp.async copies 4, 8 or 16 bytes, got {got}")
        if dst.buffer.dtype != src.buffer.dtype:
            raise self.error(node, f"T.ptx_cp_async copies between buffers of one dtype; {dst.buffer.name} is "
                                   f"{dst.buffer.dtype}, {src.buffer.name} is {src.buffer.dtype}")
        if size % dst.buffer.dtype.itemsize:
            raise self.error(size_node, f"{size} bytes is not a whole number of {dst.buffer.dtype} elements")
        return Call(_dt.int32, CP_ASYNC, (dst, src, IntImm(size, _dt.int32)), span=self.span(node))

    def _data_element(self, data: ast.expr, offset_node: ast.expr, elem, node: ast.Call) -> BufferLoad:
        base = self.eval_expr(data.value) if isinstance(data, ast.Attribute) and data.attr == "data" else None
        if not isinstance(base, (Buffer, _View)):
            raise self.error(data, "T.ptx_cp_async's TVM form takes buffers' data", "e.g. A_shared.data")
        storage = base.parent if isinstance(base, _View) else base
        if elem != storage.dtype:
            raise self.error(node.args[0], f"T.ptx_cp_async of {storage.name} ({storage.dtype}) with element type "
                                           f"{elem}", f'write "{storage.dtype}"')
        offset = self.to_index(self.eval_expr(offset_node), offset_node)
        pointer = self._storage_pointer(storage, offset, offset_node, node)
        assert isinstance(pointer, Call) and isinstance(pointer.args[0], BufferLoad)
        return pointer.args[0]

    def call_ptx_commit_group(self, node: ast.Call) -> PrimExpr:
        """T.ptx_commit_group(): the copies issued since the last commit become one group."""
        if node.args or node.keywords:
            raise self.error(node, "T.ptx_commit_group takes no arguments")
        return Call(_dt.int32, COMMIT_GROUP, (), span=self.span(node))

    def call_ptx_wait_group(self, node: ast.Call) -> PrimExpr:
        """T.ptx_wait_group(n): wait until at most n of this thread's newest groups are pending."""
        n = self.eval_expr(node.args[0]) if len(node.args) == 1 and not node.keywords else None
        n = n.value if isinstance(n, IntImm) else n
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise self.error(node, f"T.ptx_wait_group takes one constant count >= 0, got {_describe(n)}",
                             "e.g. T.ptx_wait_group(1)")
        return Call(_dt.int32, WAIT_GROUP, (IntImm(n, _dt.int32),), span=self.span(node))
