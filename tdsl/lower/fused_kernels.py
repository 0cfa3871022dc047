"""lower_fused_kernels (CUDA): a block annotated ``tdsl.fused_kernel`` becomes one kernel call.

`tdsl.auto_schedule(f, target="cuda")` wraps an attention chain (`tdsl.intrinsics.cuda_attention`)
in one block and annotates it; until lowering, that block still holds the user's blocks (the
interpreter and the CPU run them). This pass, the first of the CUDA pipeline, matches the wrapped
blocks again (strictly: anything that is not exactly the pattern is a TargetError naming the block
and what differed), replaces the block by

    T.evaluate(T.call_extern("void", "tdsl_flash_attention_fwd", T.address_of(Q[0, 0, 0]),
               T.address_of(K[0, 0, 0]), T.address_of(V[0, 0, 0]), T.address_of(O[0, 0, 0]),
               batch, seq, dim, causal, scale))

(``"tdsl_flash_attention_fwd_sm90a"`` for a block annotated with the Hopper kernel), drops the intermediates (the scores are never stored) and leaves a note (`kernel.notes`). The
CUDA backend runs that call as a host step between its kernels (`backends.cuda.attention_step`).
"""
from __future__ import annotations

import dataclasses

from ..dtypes import float32, handle, int32, void
from ..errors import TargetError
from ..ir import BlockRealize, Buffer, BufferLoad, Call, Evaluate, FloatImm, IntImm, PrimFunc, SeqStmt
from ..ir.attrs import INFO_NOTE
from ._util import add_notes


def _address(buf) -> Call:
    return Call(handle, "address_of", (BufferLoad(buf, tuple(IntImm(0, int32) for _ in buf.shape)),))


def lower_fused_kernels(func: PrimFunc) -> PrimFunc:
    """Replace annotated attention blocks by the fused kernel's call (module docstring)."""
    from ..intrinsics.cuda_attention import CALL_SM90A, FUSED_KERNEL, KERNELS, NoMatch, match_nests, root_parts

    stmts, allocs = root_parts(func)
    marked = [k for k, s in enumerate(stmts) if isinstance(s, BlockRealize)
              and any(key == FUSED_KERNEL for key, _ in s.block.annotations)]
    if not marked:
        return func
    params = [p for p in func.params if isinstance(p, Buffer)]
    new_stmts = list(stmts)
    dropped: set = set()
    notes = []
    for k in marked:
        block = stmts[k].block   # type: ignore[attr-defined]
        value = dict(block.annotations)[FUSED_KERNEL]
        if value not in KERNELS:
            raise TargetError(f"block {block.name!r}: unknown fused kernel {value!r} (known: "
                              f"{', '.join(map(repr, KERNELS))})")
        call_name = KERNELS[value]
        inner = list(block.body.seq) if isinstance(block.body, SeqStmt) else [block.body]
        try:
            m = match_nests(inner, params, allocs, [s for j, s in enumerate(stmts) if j != k])
        except NoMatch as exc:
            raise TargetError(f"block {block.name!r} is annotated {FUSED_KERNEL}={value!r}, but its blocks "
                              f"are not the attention forward the kernel computes: {exc}") from None
        call = Call(void, call_name, (_address(m.q), _address(m.k), _address(m.v), _address(m.out),
                                 IntImm(m.batch, int32), IntImm(m.seq, int32), IntImm(m.dim, int32),
                                 IntImm(int(m.causal), int32), FloatImm(m.scale, float32)))
        new_stmts[k] = Evaluate(call)
        dropped |= set(m.intermediates)
        how = ("fused FlashAttention-3 style kernel (sm_90a: wgmma + TMA, a producer warpgroup and two consumer "
               "warpgroups, online softmax)" if call_name == CALL_SM90A else
               "fused FlashAttention-2 kernel (mma.sync m16n8k16 + ldmatrix, cp.async double-buffered K/V, online "
               "softmax; auto_schedule with arch=\"sm_90a\" takes the wgmma kernel)")
        notes.append(f"{INFO_NOTE}blocks {', '.join(m.blocks)} (attention forward, {m.batch} x {m.seq} x {m.dim} {m.dtype}"
                     f"{', causal' if m.causal else ''}) run as tdsl's {how} {call_name}")
    root = func.root_block
    body = new_stmts[0] if len(new_stmts) == 1 else SeqStmt(tuple(new_stmts))
    assert root is not None
    new_root = dataclasses.replace(root, body=body, alloc_buffers=tuple(b for b in root.alloc_buffers
                                                                          if b not in dropped))
    assert isinstance(func.body, BlockRealize)
    func = dataclasses.replace(func, body=dataclasses.replace(func.body, block=new_root))
    return add_notes(func, notes)
