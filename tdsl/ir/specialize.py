"""`func.specialize(n=1024)`: a copy of a function with symbolic dimensions bound to constants.

    @T.prim_func
    def rowsum(A: T.Buffer(("n", 64), "float32"), B: T.Buffer(("n",), "float32")): ...
    rowsum.specialize(n=1024)      # A: T.Buffer((1024, 64)), B: T.Buffer((1024,)), loops of 1024

Every occurrence of the variable (buffer shapes, loop extents, block iterator domains, indices)
becomes the constant, and integer arithmetic on constants is folded (`n + 2` -> 1026), so the
copy has constant shapes. TVM's `PrimFunc.specialize` takes a dict of Var -> value; here the
dimensions are named by their names.
"""
from __future__ import annotations

from dataclasses import replace

from ..errors import ArgumentError
from .buffer import Buffer
from .expr import Binary, IntImm, Var
from .functor import IRMutator, free_vars

_FOLD = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b if b else None,
    "floormod": lambda a, b: a % b if b else None,
    "min": min,
    "max": max,
}


def shape_vars(func) -> dict[str, Var]:
    """The symbolic dimensions of `func`: the Vars in its parameters' shapes, by name, in order."""
    out: dict[str, Var] = {}
    for p in func.params:
        if isinstance(p, Buffer):
            for dim in p.shape:
                for v in sorted(free_vars(dim), key=lambda v: v.name):
                    out.setdefault(v.name, v)
    return out


class _Bind(IRMutator):
    def __init__(self, vmap: dict[Var, IntImm]):
        self.vmap = vmap
        self.bmap: dict[Buffer, Buffer] = {}

    def visit(self, node):
        out = super().visit(node)
        if isinstance(out, Binary) and isinstance(out.a, IntImm) and isinstance(out.b, IntImm) \
                and out.op in _FOLD and out.dtype.is_integer:
            value = _FOLD[out.op](out.a.value, out.b.value)
            if value is not None:
                return IntImm(value, out.dtype)
        return out

    def visit_Var(self, var):
        return self.vmap.get(var, var)

    def visit_buffer(self, buffer):
        if buffer not in self.bmap:
            shape = tuple(self.visit(s) for s in buffer.shape)
            strides = tuple(self.visit(s) for s in buffer.strides)
            off = None if buffer.elem_offset is None else self.visit(buffer.elem_offset)
            same = (all(a is b for a, b in zip(shape, buffer.shape)) and
                    all(a is b for a, b in zip(strides, buffer.strides)) and off is buffer.elem_offset)
            self.bmap[buffer] = buffer if same else buffer.with_(shape=shape, strides=strides, elem_offset=off)
        return self.bmap[buffer]


def specialize(func, sizes: dict[str, int]):
    """`func` with each symbolic dimension named in `sizes` bound to its value (see the module)."""
    dims = shape_vars(func)
    for name, value in sizes.items():
        if name not in dims:
            have = ", ".join(dims) if dims else "none: its shapes are constant"
            raise ArgumentError(f"specialize: {func.name} has no symbolic dimension {name!r} (it has {have})")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ArgumentError(f"specialize: dimension {name!r} of {func.name} must be a positive int, "
                                f"not {value!r}")
    vmap = {dims[name]: IntImm(int(value), dims[name].dtype) for name, value in sizes.items()}
    mutator = _Bind(vmap)
    params = tuple(mutator.visit_buffer(p) if isinstance(p, Buffer) else p for p in func.params)
    body = mutator.visit(func.body)
    return replace(func, params=params, body=body)
