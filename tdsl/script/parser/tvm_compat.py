"""TVMScript's lower-level constructs tdsl reads: `A.access_ptr`, `A.data`, T.tvm_access_ptr, T.address_of,
T.call_extern, T.Cast, T.Select, T.likely, T.Ramp, T.Broadcast, and TVM's warp-matrix builtins
(T.tvm_mma_sync & co., opaque calls)."""
from __future__ import annotations

import ast

from ... import dtypes as _dt
from ...ir.buffer import Buffer
from ...ir.expr import Broadcast, BufferLoad, Call, IntImm, PrimExpr, Ramp, StringImm, const
from ...ir.opaque_calls import WMMA_BUILTINS
from .common import _simplify
from .core import ParserCore
from .frames import _describe, _View


class TVMCallParser(ParserCore):
    def access_ptr(self, buf, node: ast.Call):
        """`A.access_ptr("r")` (TVM): a handle to the buffer's first element, or, with
        `offset=k`, to its k-th element in row-major order (a 1-d buffer, or k == 0)."""
        kw = {k.arg: k.value for k in node.keywords}
        args = list(node.args)
        names = ["access_mask", "ptr_type", "content_lanes", "offset", "extent"]
        for k, a in zip(names, args):
            kw[k] = a
        bad = [k for k in kw if k not in names]
        if bad:
            raise self.error(kw[bad[0]], f"unknown access_ptr argument '{bad[0]}'",
                             "access_ptr takes (access_mask, ptr_type, content_lanes, offset, extent)")
        if "ptr_type" in kw and self.const_str(kw["ptr_type"]) != "handle":
            raise self.error(kw["ptr_type"], "tdsl's access_ptr gives a handle", 'leave ptr_type out or use "handle"')
        if "content_lanes" in kw and self.eval_expr(kw["content_lanes"]) != 1:
            raise self.error(kw["content_lanes"], "tdsl's access_ptr has content_lanes=1",
                             "address a vector's first element with T.address_of(A[i])")
        offset = self.eval_expr(kw["offset"]) if "offset" in kw else 0
        return self._pointer(buf, offset, node)

    def call_tvm_access_ptr(self, node: ast.Call) -> PrimExpr:
        """`T.tvm_access_ptr(T.type_annotation(dtype="float16"), A.data, offset, extent, mask)` (TVM):
        the address of element `offset` of A's storage in row-major order (a view's data is its
        parent's, so `A0.elem_offset` names the view's first element): T.address_of of that
        element. `extent` and the access mask (1 read, 2 write, 3 both) are checked, not kept:
        region inference gives the call that receives the address the whole buffer, read or
        written as that call says (tdsl.ir.opaque_calls)."""
        kw = {k.arg: k.value for k in node.keywords}
        if set(kw) - {"dtype"} or len(node.args) != 5:
            raise self.error(node, "T.tvm_access_ptr takes (T.type_annotation(dtype), A.data, offset, extent, "
                                   'access_mask) and dtype="handle"')
        if "dtype" in kw and self.const_str(kw["dtype"]) != "handle":
            raise self.error(kw["dtype"], "T.tvm_access_ptr gives a handle", 'write dtype="handle" or leave it out')
        ann, data, offset_node, extent_node, mask_node = node.args
        if not (isinstance(ann, ast.Call) and self._t_name(ann.func) == "type_annotation"
                and len(ann.args) + len(ann.keywords) == 1):
            raise self.error(ann, "the first argument of T.tvm_access_ptr is the element type",
                             'write T.type_annotation(dtype="float16")')
        elem = self.parse_dtype(ann.args[0] if ann.args else ann.keywords[0].value)
        base = self.eval_expr(data.value) if isinstance(data, ast.Attribute) and data.attr == "data" else None
        if not isinstance(base, (Buffer, _View)):
            raise self.error(data, "the second argument of T.tvm_access_ptr is a buffer's data", "e.g. A.data")
        storage = base.parent if isinstance(base, _View) else base
        if elem != storage.dtype:
            raise self.error(ann, f"T.tvm_access_ptr of {storage.name} ({storage.dtype}) with element type {elem}",
                             f'tdsl addresses the buffer\'s own elements: T.type_annotation(dtype="{storage.dtype}")')
        extent = self.eval_expr(extent_node)
        if isinstance(extent, bool) or not (isinstance(extent, int) or isinstance(extent, PrimExpr)
                                            and extent.dtype.is_integer):
            raise self.error(extent_node, f"the extent of T.tvm_access_ptr is an integer, got {_describe(extent)}")
        mask = self.eval_expr(mask_node)
        if isinstance(mask, IntImm):
            mask = mask.value
        if isinstance(mask, bool) or mask not in (1, 2, 3):
            raise self.error(mask_node, f"the access mask of T.tvm_access_ptr is 1 (read), 2 (write) or 3 (both), "
                                        f"got {_describe(mask)}")
        offset = self.to_index(self.eval_expr(offset_node), offset_node)
        return self._storage_pointer(storage, offset, offset_node, node)

    def _storage_pointer(self, storage: Buffer, offset: PrimExpr, offset_node, node) -> PrimExpr:
        """T.address_of the element `offset` elements from the start of `storage`'s data."""
        if storage.strides:
            raise self.error(node, f"{storage.name} has explicit strides, so a flat offset into it does not name "
                                   "one element in tdsl", "address the element itself: T.address_of(A[i, j])")
        if storage.elem_offset is not None:
            offset = _simplify(offset - storage.elem_offset)
        indices: list[PrimExpr] = []
        inner = None
        for extent in reversed(storage.shape):  # row-major digits, innermost first
            digit = offset if inner is None else offset // inner
            indices.insert(0, _simplify(digit % extent) if len(indices) < storage.ndim - 1 else _simplify(digit))
            inner = extent if inner is None else inner * extent
        load = BufferLoad(storage, tuple(indices), span=self.span(offset_node))
        return Call(_dt.handle, "address_of", (load,), span=self.span(node))

    def _pointer(self, buf, offset, node) -> PrimExpr:
        """T.address_of the element `offset` (row-major) from the start of `buf` or of a view."""
        ndim = buf.ndim
        zero_offset = isinstance(offset, int) and offset == 0 or isinstance(offset, IntImm) and offset.value == 0
        if not zero_offset and ndim != 1:
            raise self.error(node, f"an offset into the {ndim}-d buffer {buf.name} is not expressible in tdsl",
                             "address the element itself: T.address_of(A[i, j])")
        first = [const(0, e.dtype if isinstance(e, PrimExpr) else _dt.int32) for e in buf.shape]
        if not zero_offset:
            first = [self.to_index(offset, node)]
        if isinstance(buf, _View):
            load = BufferLoad(buf.parent, buf.parent_indices(first), span=self.span(node))
        else:
            load = BufferLoad(buf, tuple(first), span=self.span(node))
        return Call(_dt.handle, "address_of", (load,), span=self.span(node))

    def call_Cast(self, node: ast.Call):
        if len(node.args) != 2:
            raise self.error(node, 'T.Cast takes ("dtype", value)')
        swapped = ast.Call(func=node.func, args=[node.args[1], node.args[0]], keywords=[])
        ast.copy_location(swapped, node)
        return self.call_cast(swapped)

    def call_Select(self, node):
        if len(node.args) != 3:
            raise self.error(node, "T.Select takes (cond, then, else)")
        c, t, f = (self.eval_expr(a) for a in node.args)
        return self.select("Select", c, t, f, node)

    def call_likely(self, node):
        """`T.likely(cond)`: TVM's branch hint; the condition itself."""
        if len(node.args) != 1:
            raise self.error(node, "T.likely takes one condition")
        return self.eval_expr(node.args[0])

    def call_call_extern(self, node):
        dtype_kw = [k.value for k in node.keywords if k.arg == "dtype"]
        if dtype_kw and node.args:  # TVM's other spelling: T.call_extern("name", *args, dtype="int32")
            empty = isinstance(dtype_kw[0], ast.Constant) and dtype_kw[0].value == ""  # TVM's "" is void
            dt = _dt.DataType.parse("void") if empty else self.parse_dtype(dtype_kw[0])
            name, rest = self.const_str(node.args[0]), node.args[1:]
        elif len(node.args) < 2 or node.keywords:
            raise self.error(node, 'T.call_extern takes ("dtype", "name", *args) or ("name", *args, dtype="dtype")')
        else:
            dt, name, rest = self.parse_dtype(node.args[0]), self.const_str(node.args[1]), node.args[2:]
        args = []
        for a in rest:
            v = self.eval_expr(a)
            if isinstance(v, str):
                args.append(StringImm(v))
            elif isinstance(v, Buffer):
                raise self.error(a, "pass a buffer element, not a buffer", "e.g. A[0, 0]")
            else:
                args.append(self.python_to_expr(v, a))
        return Call(dt, name, tuple(args), span=self.span(node))

    def call_wmma_builtin(self, node):
        """`T.tvm_mma_sync(C.data, ci, A.data, ai, ...)` and the other TVM warp-matrix builtins
        (tdsl.ir.opaque_calls): an opaque call over buffer addresses, kept as written."""
        name = self._t_name(node.func)
        arity = WMMA_BUILTINS[name][0]
        kw = {k.arg: k.value for k in node.keywords}
        if set(kw) - {"dtype"} or len(node.args) != arity:
            raise self.error(node, f"T.{name} takes {arity} arguments (and dtype=\"handle\")")
        args = []
        for a in node.args:
            v = self.eval_expr(a)
            args.append(StringImm(v) if isinstance(v, str) else self.python_to_expr(v, a))
        return Call(_dt.handle, name, tuple(args), span=self.span(node))

    call_tvm_fill_fragment = call_tvm_load_matrix_sync = call_tvm_store_matrix_sync = call_wmma_builtin
    call_tvm_mma_sync = call_tvm_bmma_sync = call_wmma_builtin

    def call_address_of(self, node):
        """`T.address_of(A[i, j])`: a handle to one element (TVM's tir.address_of)."""
        if len(node.args) != 1 or node.keywords:
            raise self.error(node, "T.address_of takes one buffer element", "e.g. T.address_of(A[i, 0])")
        load = self.eval_expr(node.args[0])
        if not isinstance(load, BufferLoad) or load.dtype.lanes != 1:
            raise self.error(node.args[0], f"T.address_of needs one buffer element, got {_describe(load)}",
                             "e.g. T.address_of(A[i, 0])")
        return Call(_dt.handle, "address_of", (load,), span=self.span(node))

    def call_Ramp(self, node):
        if len(node.args) != 3:
            raise self.error(node, "T.Ramp takes (base, stride, lanes)")
        base = self.to_index(self.eval_expr(node.args[0]), node.args[0])
        stride = self.coerce(self.eval_expr(node.args[1]), base.dtype, node.args[1], "the stride")
        lanes = self.eval_expr(node.args[2])
        if not isinstance(lanes, int) or lanes < 2:
            raise self.error(node.args[2], "lanes must be an integer constant >= 2")
        return Ramp(base, stride, lanes, span=self.span(node))

    def call_Broadcast(self, node):
        if len(node.args) != 2:
            raise self.error(node, "T.Broadcast takes (value, lanes)")
        value = self.python_to_expr(self.eval_expr(node.args[0]), node.args[0])
        lanes = self.eval_expr(node.args[1])
        if not isinstance(lanes, int) or lanes < 2:
            raise self.error(node.args[1], "lanes must be an integer constant >= 2")
        return Broadcast(value, lanes, span=self.span(node))
