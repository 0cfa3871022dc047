"""The sequential meaning of Hopper's asynchronous calls, as IR the interpreter runs in their
place: a TMA load is a box copy (zero outside the tensor), a TMA store one back (skipping the
elements outside the tensor), a wgmma is the thread's own
accumulators += A x B^T. Barrier waits and fences need nothing sequentially.

    T.ptx_tma_load(A_sh[0, 0], A[y, x], tmap[0], bar[0])
    ->  for tma_i0, tma_i1 in T.grid(64, 64): A_sh[tma_i0, tma_i1] = A[y + tma_i0, x + tma_i1]  (guarded)
"""
from __future__ import annotations

from ..dtypes import DataType, int32
from ..ir import Binary, BufferLoad, BufferStore, Call, Cast, FloatImm, For, IfThenElse, IntImm, PrimExpr, Stmt, Var
from ..ir.opaque_calls import wgmma_b_mn, wgmma_box_axis, wgmma_layout
from .runtime import InterpretError


def _box_copy(tile: BufferLoad, tensor: BufferLoad, coords: list, load: bool, what: str) -> Stmt:
    """Loops over the box (the tile's last len(coords) axes) copying between the tile at its
    indices and the tensor at `coords`; where the tensor's element is outside it, a load writes
    zero and a store writes nothing (as TMA does)."""
    rank = len(coords)
    box = [e.value for e in tile.buffer.shape[-rank:] if isinstance(e, IntImm)]
    if len(box) != rank:
        raise InterpretError(f"{what}: its last {rank} axes are the box, which needs constant sides, got "
                             f"{tile.buffer.shape}")
    idx = [Var(f"tma_i{d}", coords[d].dtype) for d in range(rank)]
    outer, base = tile.indices[:-rank], tile.indices[-rank:]
    at_tile = tuple(outer) + tuple(b + i for b, i in zip(base, idx))
    at = tuple(c + i for c, i in zip(coords, idx))
    if load:
        zero = FloatImm(0.0, tile.buffer.dtype) if tile.buffer.dtype.is_float else IntImm(0, tile.buffer.dtype)
        outside: Stmt | None = BufferStore(tile.buffer, zero, at_tile)
        body: Stmt = BufferStore(tile.buffer, BufferLoad(tensor.buffer, at), at_tile)
    else:
        outside = None
        body = BufferStore(tensor.buffer, BufferLoad(tile.buffer, at_tile), at)
    for a, extent in reversed(list(zip(at, tensor.buffer.shape))):
        inside = Binary("lt", a, extent) if isinstance(extent, PrimExpr) else Binary("lt", a, IntImm(extent, a.dtype))
        body = IfThenElse(Binary("ge", a, IntImm(0, a.dtype)), IfThenElse(inside, body, outside), outside)
    for i, extent in reversed(list(zip(idx, box))):
        body = For(i, IntImm(0, i.dtype), IntImm(extent, i.dtype), "serial", body)
    return body


def tma_load_as_copy(call: Call) -> Stmt:
    """T.ptx_tma_load(dst, src, tensor_map, bar, *coords) as loops copying the box (zero where it
    leaves the source tensor, as TMA fills out-of-bounds elements)."""
    dst, src, _, _, *coords = call.args
    assert isinstance(dst, BufferLoad) and isinstance(src, BufferLoad)
    return _box_copy(dst, src, coords, True, f"T.ptx_tma_load into {dst.buffer.name}")


def tma_store_as_copy(call: Call) -> Stmt:
    """T.ptx_tma_store(dst, src, tensor_map, *coords) as loops copying the box (src's last axes)
    into dst at coords, skipping the elements outside dst (as TMA does)."""
    dst, src, _, *coords = call.args
    assert isinstance(dst, BufferLoad) and isinstance(src, BufferLoad)
    return _box_copy(src, dst, coords, False, f"T.ptx_tma_store from {src.buffer.name}")


def wgmma_as_loops(call: Call) -> Stmt:
    """T.ptx_wgmma(D, A, B, n, lane) as the thread's own part: for each of its n / 2 accumulators
    (row, col) = wgmma_layout(lane, i), D[i] += sum over k < 16 of A[row, k] * B[col, k] (B
    N-major: B[k, col], see tdsl.ir.opaque_calls)."""
    d, a, b, n, lane = call.args[:5]
    assert isinstance(d, BufferLoad) and isinstance(a, BufferLoad) and isinstance(b, BufferLoad)
    assert isinstance(n, IntImm)
    i, k = Var("wgmma_i", int32), Var("wgmma_k", int32)
    row, col = wgmma_layout(lane, i)
    *d_outer, d_last = d.indices
    target = (*d_outer, d_last + i)

    def at(load: BufferLoad, r: PrimExpr) -> tuple:
        *outer, r0, k0 = load.indices
        return (*outer, r0 + r, k0 + k)

    def at_mn(load: BufferLoad, c: PrimExpr) -> tuple:
        """B N-major: column c, row k at (.., k0 + k, c0 + c % span), c // span along the box axis."""
        idx = list(load.indices)
        span = int(load.buffer.shape[-1].value)   # type: ignore[attr-defined]
        idx[-2], idx[-1] = idx[-2] + k, idx[-1] + c % span
        box = wgmma_box_axis(tuple(load.buffer.shape))
        if n.value > span and box is not None:
            idx[box] = idx[box] + c // span
        return tuple(idx)

    f32 = DataType("float", 32)
    b_at = at_mn(b, col) if wgmma_b_mn(call) is not None else at(b, col)
    product = Cast(f32, BufferLoad(a.buffer, at(a, row))) * Cast(f32, BufferLoad(b.buffer, b_at))
    body: Stmt = BufferStore(d.buffer, BufferLoad(d.buffer, target) + product, target)
    body = For(k, IntImm(0, int32), IntImm(16, int32), "serial", body)
    return For(i, IntImm(0, int32), IntImm(n.value // 2, int32), "serial", body)
