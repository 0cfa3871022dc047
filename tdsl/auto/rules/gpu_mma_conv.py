"""`GPUMmaConv`: fp16 / bf16 conv2d (and other convolution-like blocks) as an implicit GEMM on the
tensor cores (sm_80), the way TVM's MetaSchedule tensorizes them.

A block ``Out[..] += f32(X[..]) * f32(W[..])`` whose iterators each play one GEMM role:

* M: spatial iterators of the output and the data, not the filter (n, oh, ow),
* N: one spatial iterator of the output and the filter, not the data (the output channel),
* K: reduction iterators of the data and the filter (rc, ry, rx),

with the filter indexed by plain iterators and the block not a GEMM that `GPUMmaTiling` takes
as it is (a 1x1 convolution, a batched GEMM whose rows are too few for a tile, fuses its M
iterators instead), becomes the GEMM ``C[m, n] += A[m, k] * B[k, n]``
(or ``B[n, k]``), so the GEMM's tiling (`gpu_mma.tile_mma`) applies unchanged:

0. NCHW data that a padding block writes is written channels last instead (`transform_layout`
   of the padded buffer), and a filter whose channel is not its last index (OIHW) is copied
   channels last by a small kernel (`cache_read(..., "global")` + `transform_layout`);
1. `transform_block_layout` fuses the M iterators (in the output's order) into m and the K
   iterators into k; the data's innermost iterator (NHWC: rc) is k's innermost, so that 8
   consecutive k are 16 contiguous bytes of the data (data with no such index: the filter's
   order, and A's tile is copied element by element);
2. `reindex_cache_read` stages the data and the filter in shared memory as the GEMM's A[m, k]
   and B tiles: the copy into A's tile is the im2col gather, done on the fly (implicit GEMM:
   no im2col buffer in global memory); `reindex_cache_write` gives the output a shared tile
   C[m, n] that the accumulators are stored to (mma_store_16x16_f32_shared_) and the block's
   threads copy out to the output's own layout (NHWC: 16 bytes per thread);
3. `tile_mma`: warps, swizzled tiles, ldmatrix, mma.sync, cp.async software pipeline.

Padding stays its own kernel: `AutoInline` leaves a padding block that feeds such a conv (so the
data copies are plain 16-byte cp.async; a guarded read would need cp.async's zero fill). The
block tile is 64 x 64 or 64 x 32 (the output tile in shared memory must fit beside the
double-buffered operand tiles). A convolution that does not fit (m = N * OH * OW or the output
channels not multiples of the tile, k not of 32) is left to the SIMT rules with a note in
`kernel.notes` saying why.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ...ir import Binary, BufferLoad, Call, Cast, Var, free_vars
from ...schedule import Schedule
from ..analysis import BlockInfo, Iter, block_info, consumers, writer_of
from .base import Rule
from .gpu_mma import _DTYPES, CONFIGS, K_TILES, fitting_configs, gemm_roles, misfit, note, tile_mma

# the block tiles conv2d may use: the fp32 output tile (bm x bn x 4 bytes) sits in shared
# memory beside two stages of the operand tiles
CONV_CONFIGS = tuple(c for c in CONFIGS if c[0] * c[1] <= 64 * 64)
FLOAT_DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class ConvRoles:
    """A convolution-like block seen as a GEMM: the iterators fused into m, n and k (k's
    innermost last), the operands, and how each is laid out."""

    m: tuple[Iter, ...]
    n: Iter
    k: tuple[Iter, ...]
    data: Any           # Buffers
    filter: Any
    out: Any
    trans_b: bool       # the filter's last index is a k iterator (B[n, k])
    a_contiguous: bool  # 16-byte pieces of A's rows are contiguous in the data
    b_contiguous: bool  # ... of B's rows in the filter
    out_n_last: bool    # the output's last index is n (NHWC): copied out along n
    guarded: bool = False   # the data is read through T.if_then_else (padding inlined)

    def extents(self) -> tuple[int, int, int]:
        prod = (lambda its: _product(it.extent for it in its))
        return prod(self.m), self.n.extent or 0, prod(self.k)


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v or 0
    return out


def _load(e) -> tuple[BufferLoad | None, bool]:
    """The operand's load, and whether it is guarded (``T.if_then_else(cond, X[..], 0)``: padding
    inlined into the block)."""
    while isinstance(e, Cast):
        e = e.value
    guarded = isinstance(e, Call) and e.op == "if_then_else" and len(e.args) == 3
    if guarded:
        e = e.args[1]
        while isinstance(e, Cast):
            e = e.value
    return (e if isinstance(e, BufferLoad) else None), guarded


def conv_roles(info: BlockInfo) -> ConvRoles | None:
    """The roles when the block is a convolution-like multiply-accumulate (module docstring) of
    fp16 / bf16 operands into fp32 that `GPUMmaTiling` does not take as a GEMM, else None."""
    store = info.store
    if store is None or not isinstance(store.value, Binary) or store.value.op != "add" or not info.reduction:
        return None
    if _fitting_gemm(info):
        return None      # GPUMmaTiling's
    acc, prod = store.value.a, store.value.b
    if not (isinstance(acc, BufferLoad) and acc.buffer is store.buffer):
        acc, prod = prod, acc
    if not (isinstance(acc, BufferLoad) and acc.buffer is store.buffer and isinstance(prod, Binary)
            and prod.op == "mul" and all(x is y for x, y in zip(acc.indices, store.indices))):
        return None
    (x, x_guard), (y, y_guard) = _load(prod.a), _load(prod.b)
    if x is None or y is None or x.buffer is y.buffer or str(store.buffer.dtype) != "float32":
        return None
    if str(x.buffer.dtype) not in FLOAT_DTYPES or x.buffer.dtype != y.buffer.dtype:
        return None
    by_var = {id(it.var): it for it in info.iters}
    out_iters = [by_var.get(id(e)) if isinstance(e, Var) else None for e in store.indices]
    if any(it is None or it.kind != "S" for it in out_iters) or len(out_iters) != len(info.spatial):
        return None
    plain = (lambda load: all(isinstance(e, Var) and id(e) in by_var for e in load.indices))
    # the filter: the operand indexed by plain iterators, using a spatial iterator the other lacks
    for data, filt in ((x, y), (y, x)):
        if not plain(filt):
            continue
        roles = _assign(info, out_iters, data, filt, by_var)   # type: ignore[arg-type]
        if roles is not None and not (y_guard if filt is y else x_guard):
            return replace(roles, guarded=x_guard if data is x else y_guard)
    return None


def _uses(load: BufferLoad) -> set[int]:
    out: set[int] = set()
    for e in load.indices:
        out |= {id(v) for v in free_vars(e)}
    return out


def _assign(info: BlockInfo, out_iters: list[Iter], data: BufferLoad, filt: BufferLoad, by_var) -> ConvRoles | None:
    in_data, in_filt = _uses(data), _uses(filt)
    m = [it for it in out_iters if id(it.var) in in_data and id(it.var) not in in_filt]
    n = [it for it in out_iters if id(it.var) in in_filt and id(it.var) not in in_data]
    k_filt = [by_var[id(e)] for e in filt.indices if by_var[id(e)].kind == "R"]
    if len(n) != 1 or not m or len(m) + 1 != len(out_iters) or len(k_filt) != len(info.reduction) \
            or any(id(it.var) not in in_data for it in k_filt):
        return None
    # plain indices and one M iterator: a GEMM, GPUMmaTiling's (several M iterators, such as a
    # 1x1 convolution's n, h, w, fuse into one m)
    if all(isinstance(e, Var) for e in data.indices) and len(m) == 1:
        return None
    last_data = data.indices[-1]
    inner = by_var.get(id(last_data)) if isinstance(last_data, Var) else None
    per_copy = _DTYPES[str(data.buffer.dtype)][4]
    if inner is not None and inner.kind == "R":
        k = [it for it in k_filt if it is not inner] + [inner]      # NHWC: rc innermost
        a_contiguous = (inner.extent or 0) % per_copy == 0
    else:
        k = k_filt                                                   # NCHW: the filter's order
        a_contiguous = False
    last_filt = by_var[id(filt.indices[-1])]
    trans_b = last_filt.kind == "R"
    if trans_b:
        # B[n, k] rows are contiguous where k's trailing iterators are the filter's trailing dims
        # in order, over at least one 16-byte piece
        tail: list[Iter] = []
        size = 1
        for e in reversed(filt.indices):
            it = by_var[id(e)]
            if it.kind != "R" or size % per_copy == 0:
                break
            tail.insert(0, it)
            size *= it.extent or 0
        b_contiguous = size % per_copy == 0 and k[-len(tail):] == tail
    else:
        b_contiguous = last_filt is n[0]
    return ConvRoles(tuple(m), n[0], tuple(k), data.buffer, filt.buffer, info.store.buffer,  # type: ignore[union-attr]
                     trans_b, a_contiguous, b_contiguous, out_iters[-1] is n[0])


def conv_misfit(roles: ConvRoles) -> str | None:
    """Why the convolution does not fit the mma tiles, or None."""
    m, n, k = roles.extents()
    dt = str(roles.data.dtype)
    k_step = K_TILES * _DTYPES[dt][3]
    if not m or not n or not k:
        return "its extents are not constants"
    if k % k_step:
        return f"the reduction (k = {k}) is not a multiple of the k step ({k_step})"
    if not _configs(m, n, dt):
        tiles = ", ".join(f"{bm} x {bn}" for bm, bn, _, _ in CONV_CONFIGS)
        return f"the implicit GEMM's m x n = {m} x {n} is not a multiple of a block tile ({tiles})"
    if roles.guarded:
        return (f"it reads {roles.data.name!r} through T.if_then_else (padding inside the block), which the "
                "copy into shared memory cannot keep; write the padding as its own block (a padded copy of "
                f"{roles.data.name!r}) and auto_schedule keeps it apart")
    return None


def _configs(m: int, n: int, dt: str) -> list:
    return [c for c in fitting_configs(m, n, dt) if c in CONV_CONFIGS]


def _fitting_gemm(info: BlockInfo) -> bool:
    """Whether `GPUMmaTiling` puts the block on the tensor cores as a (batched) GEMM."""
    gemm = gemm_roles(info, max_batch=4)
    if gemm is None:
        return False
    dt = str(gemm.a.dtype)
    return dt in _DTYPES and str(gemm.b.dtype) == dt and str(gemm.c.dtype) == _DTYPES[dt][1] \
        and misfit(gemm, dt) is None


def feeds_mma(sch: Schedule, block: str) -> bool:
    """Whether `block` is read by a GEMM that `GPUMmaTiling` or a convolution that `GPUMmaConv`
    puts on the tensor cores, as an operand (AutoInline then keeps it as its own kernel: a padding
    stays a padded copy, attention's softmax writes P for the P V GEMM)."""
    for consumer in consumers(sch.func, block):
        info = block_info(sch.func, consumer)
        if not (info.simple_bindings and info.constant_extents and info.top_level):
            continue
        if _fitting_gemm(info):
            return True
        roles = conv_roles(info)
        if roles is not None and conv_misfit(roles) is None:
            return True
    return False


def _map(params: list[str], outputs: list[str]):
    """An index map with named parameters, from text (the trace prints it as Python)."""
    return eval(f"lambda {', '.join(params)}: ({', '.join(outputs)},)")


def _channel_dim(load: BufferLoad, it: Iter) -> int | None:
    """The dimension of `load` indexed by the plain iterator `it`."""
    for d, e in enumerate(load.indices):
        if e is it.var:
            return d
    return None


def _channels_last(s: Schedule, block: str, roles: ConvRoles) -> ConvRoles:
    """NCHW data that a padding block writes: that block writes it channels last instead (its
    own kernel already, so the layout costs nothing), and an OIHW filter is copied channels last
    by a small kernel of its own; then every operand tile comes in by 16-byte cp.async. Other
    layouts stay as they are (their copies element by element)."""
    if roles.a_contiguous:
        return roles
    info = block_info(s.func, block)
    store = info.store
    assert store is not None
    loads = [ld for ld in (_load(e)[0] for e in _products(store.value)) if ld is not None]
    data = next(ld for ld in loads if ld.buffer is roles.data)
    filt = next(ld for ld in loads if ld.buffer is roles.filter)
    writer = writer_of(s.func, roles.data)
    channel = next((it for it in roles.k if _channel_dim(data, it) is not None and _channel_dim(filt, it) is not None
                    and (it.extent or 0) % _DTYPES[str(roles.data.dtype)][4] == 0), None)
    if writer is None or roles.data in info.params or channel is None:
        return roles
    writer_info = block_info(s.func, writer)
    if not writer_info.is_spatial or writer_info.writes_output:
        return roles

    def last(dim: int, rank: int):
        names = [f"v{d}" for d in range(rank)]
        return _map(names, [names[d] for d in range(rank) if d != dim] + [names[dim]])

    d_dim, f_dim = _channel_dim(data, channel), _channel_dim(filt, channel)
    assert d_dim is not None and f_dim is not None
    s.transform_layout(s.get_block(writer), roles.data.name, last(d_dim, len(data.indices)))
    _loops_in_store_order(s, writer)   # its writes coalesced (its reads are the transpose's strided side)
    if f_dim != len(filt.indices) - 1:
        copy = s.cache_read(s.get_block(block), roles.filter.name, "global")
        s.transform_layout(copy, roles.filter.name + "_global", last(f_dim, len(filt.indices)))
        loops = s.get_loops(copy)
        bx, tx = s.split(s.fuse(*loops) if len(loops) > 1 else loops[0], [None, 128])
        s.bind(bx, "blockIdx.x")
        s.bind(tx, "threadIdx.x")
    new = conv_roles(block_info(s.func, block))
    assert new is not None, "a convolution stays one when its operands change layout"
    return new


def _loops_in_store_order(s: Schedule, block: str) -> None:
    """Reorder `block`'s loops as its store's indices (each a plain iterator) run."""
    info = block_info(s.func, block)
    by_var = {id(it.var): it for it in info.iters}
    handles = {id(h.var): h for h in s.get_loops(s.get_block(block))}
    assert info.store is not None
    order = []
    for e in info.store.indices:
        it = by_var.get(id(e))
        if it is None or it.loop is None or id(it.loop) not in handles:
            return
        order.append(handles[id(it.loop)])
    if len(order) == len(handles):
        s.reorder(*order)


def _products(value) -> tuple:
    """The two factors of ``acc + a * b``."""
    acc, prod = value.a, value.b
    if not isinstance(prod, Binary):
        acc, prod = prod, acc
    return (prod.a, prod.b)


class GPUMmaConv(Rule):
    """fp16 / bf16 convolutions -> implicit GEMM on mma.sync (see the module docstring)."""

    name = "mma-conv-gpu"

    def alternatives(self, sch: Schedule, block: str) -> list:
        if not self.hw.is_gpu:
            return []
        info = block_info(sch.func, block)
        if not info.simple_bindings or not info.constant_extents or not info.top_level:
            return []
        roles = conv_roles(info)
        if roles is None:
            return []
        why = conv_misfit(roles)
        if why is not None and gemm_roles(info, max_batch=4) is not None:
            return []     # a (batched) GEMM off the tiles either way: GPUMmaTiling says why
        if why is not None:
            return [lambda s: note(s, block, f"convolution block {block!r} is not on the tensor cores "
                                             f"(mma.sync): {why}")]
        return [lambda s: self._tile(s, block, roles)]

    def _tile(self, s: Schedule, block: str, roles: ConvRoles) -> None:
        roles = _channels_last(s, block, roles)
        info = block_info(s.func, block)
        names = [f"v{p}" for p in range(len(info.iters))]
        name = {id(it.var): names[p] for p, it in enumerate(info.iters)}

        def fused(its) -> str:     # row-major: ((a * B + b) * C + c)
            text = name[id(its[0].var)]
            for it in its[1:]:
                text = f"{f'({text})' if '+' in text else text} * {it.extent} + {name[id(it.var)]}"
            return text

        c = s.get_block(block)
        s.transform_block_layout(c, _map(names, [fused(roles.m), fused((roles.n,)), fused(roles.k)]))
        a_sh = s.reindex_cache_read(c, roles.data.name, "shared", lambda m, n, k: (m, k))
        b_sh = s.reindex_cache_read(c, roles.filter.name, "shared",
                                    (lambda m, n, k: (n, k)) if roles.trans_b else (lambda m, n, k: (k, n)))
        out = s.reindex_cache_write(c, 0, "shared", lambda m, n, k: (m, n))
        gemm = gemm_roles(block_info(s.func, block))
        assert gemm is not None, "a convolution made a GEMM by transform_block_layout and reindexing"
        m, n, _ = roles.extents()
        dt = str(roles.data.dtype)
        _, bj, warps_m, warps_n = tile_mma(self, s, block, gemm, _configs(m, n, dt), dt, staged=(a_sh, b_sh),
                                           vectorized=(roles.a_contiguous, roles.b_contiguous))
        # the output tile: shared -> the output's own layout, by the whole block, along the
        # output's unit-stride axis (NHWC: n, 16 bytes per thread; NCHW: m)
        s.reverse_compute_at(out, bj)
        # rows 8 floats apart in the banks: the accumulators' 8-byte stores (4 rows of 32 bytes
        # per phase) meet no bank twice
        writer = writer_of(s.func, gemm.c)
        assert writer is not None
        s.storage_align(s.get_block(writer), gemm.c.name, 0, 32, 8)
        rows, cols = s.get_loops(out)[-2:]
        if roles.out_n_last:
            cols, vec = s.split(cols, [None, 4])
            _, tz, ty, tx = s.split(s.fuse(rows, cols), [None, warps_m, warps_n, 32])
            s.vectorize(vec)
        else:
            s.reorder(cols, rows)
            _, tz, ty, tx = s.split(s.fuse(cols, rows), [None, warps_m, warps_n, 32])
        s.bind(tz, "threadIdx.z")
        s.bind(ty, "threadIdx.y")
        s.bind(tx, "threadIdx.x")
