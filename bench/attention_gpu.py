"""Attention forward written as a user writes it for a GPU: float16/bfloat16 Q, K, V, float32
scores and softmax, one block per stage (bench/gpu_check.py, tests/auto/test_attention_gpu.py).

    func = attention_lowp_func(heads=2, seq=128, dim=64, dtype="float16", causal=True)
    ref = attention_lowp_ref(q, k, v, causal=True)      # float64 numpy

`scale_in` says where the 1/sqrt(dim) goes: "exp" (``T.exp((S - M) * c)``, as bench_auto's
float32 attention) or "block" (a block ``X = S * c`` before the mask and the max); `out` is the
output type ("float32", or the input type through a final cast block); `p_cast` rounds P to the
input type before P V (as a fused kernel does).
"""
from __future__ import annotations

import numpy as np

import tdsl


def attention_lowp_text(heads: int, seq: int, dim: int, dtype: str = "float16", causal: bool = False,
                        scale_in: str = "exp", out: str = "float32", p_cast: bool = False) -> str:
    scale = float(np.float32(1 / np.sqrt(dim)))
    b, s, d = heads, seq, dim
    lines = [
        "@T.prim_func",
        f'def attention(Q: T.Buffer(({b}, {s}, {d}), "{dtype}"), K: T.Buffer(({b}, {s}, {d}), "{dtype}"),',
        f'              V: T.Buffer(({b}, {s}, {d}), "{dtype}"), O: T.Buffer(({b}, {s}, {d}), "{out}")):',
        f'    S = T.alloc_buffer(({b}, {s}, {s}), "float32")',
        f'    M = T.alloc_buffer(({b}, {s}), "float32")',
        f'    E = T.alloc_buffer(({b}, {s}, {s}), "float32")',
        f'    L = T.alloc_buffer(({b}, {s}), "float32")',
        f'    P = T.alloc_buffer(({b}, {s}, {s}), "{dtype if p_cast else "float32"}")',
    ]
    if scale_in == "block":
        lines.append(f'    X = T.alloc_buffer(({b}, {s}, {s}), "float32")')
    if causal:
        lines.append(f'    Sm = T.alloc_buffer(({b}, {s}, {s}), "float32")')
    if out != "float32":
        lines.append(f'    Oacc = T.alloc_buffer(({b}, {s}, {d}), "float32")')
    acc = "Oacc" if out != "float32" else "O"
    lines += [
        f"    for b, i, j, k in T.grid({b}, {s}, {s}, {d}):",
        '        with T.block("qk"):',
        '            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])',
        "            with T.init():",
        "                S[vb, vi, vj] = T.float32(0)",
        '            S[vb, vi, vj] = S[vb, vi, vj] + T.cast(Q[vb, vi, vk], "float32") * T.cast(K[vb, vj, vk], "float32")',
    ]
    cur = "S"
    if scale_in == "block":
        lines += [f"    for b, i, j in T.grid({b}, {s}, {s}):",
                  '        with T.block("scale"):',
                  '            vb, vi, vj = T.axis.remap("SSS", [b, i, j])',
                  f"            X[vb, vi, vj] = S[vb, vi, vj] * T.float32({scale})"]
        cur = "X"
    if causal:
        lines += [f"    for b, i, j in T.grid({b}, {s}, {s}):",
                  '        with T.block("mask"):',
                  '            vb, vi, vj = T.axis.remap("SSS", [b, i, j])',
                  f'            Sm[vb, vi, vj] = T.if_then_else(vj <= vi, {cur}[vb, vi, vj], T.float32("-inf"))']
        cur = "Sm"
    exp_arg = f"({cur}[vb, vi, vj] - M[vb, vi]) * T.float32({scale})" if scale_in == "exp" else \
        f"{cur}[vb, vi, vj] - M[vb, vi]"
    norm = f'T.cast(E[vb, vi, vj] / L[vb, vi], "{dtype}")' if p_cast else "E[vb, vi, vj] / L[vb, vi]"
    p_load = 'T.cast(P[vb, vi, vk], "float32")' if p_cast else "P[vb, vi, vk]"
    lines += [
        f"    for b, i, j in T.grid({b}, {s}, {s}):",
        '        with T.block("max"):',
        '            vb, vi, vj = T.axis.remap("SSR", [b, i, j])',
        "            with T.init():",
        '                M[vb, vi] = T.min_value("float32")',
        f"            M[vb, vi] = T.max(M[vb, vi], {cur}[vb, vi, vj])",
        f"    for b, i, j in T.grid({b}, {s}, {s}):",
        '        with T.block("exp"):',
        '            vb, vi, vj = T.axis.remap("SSS", [b, i, j])',
        f"            E[vb, vi, vj] = T.exp({exp_arg})",
        f"    for b, i, j in T.grid({b}, {s}, {s}):",
        '        with T.block("sum"):',
        '            vb, vi, vj = T.axis.remap("SSR", [b, i, j])',
        "            with T.init():",
        "                L[vb, vi] = T.float32(0)",
        "            L[vb, vi] = L[vb, vi] + E[vb, vi, vj]",
        f"    for b, i, j in T.grid({b}, {s}, {s}):",
        '        with T.block("norm"):',
        '            vb, vi, vj = T.axis.remap("SSS", [b, i, j])',
        f"            P[vb, vi, vj] = {norm}",
        f"    for b, i, j, k in T.grid({b}, {s}, {d}, {s}):",
        '        with T.block("pv"):',
        '            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])',
        "            with T.init():",
        f"                {acc}[vb, vi, vj] = T.float32(0)",
        f'            {acc}[vb, vi, vj] = {acc}[vb, vi, vj] + {p_load} * T.cast(V[vb, vk, vj], "float32")',
    ]
    if out != "float32":
        lines += [f"    for b, i, j in T.grid({b}, {s}, {d}):",
                  '        with T.block("out"):',
                  '            vb, vi, vj = T.axis.remap("SSS", [b, i, j])',
                  f'            O[vb, vi, vj] = T.cast(Oacc[vb, vi, vj], "{out}")']
    return "\n".join(lines) + "\n"


def attention_lowp_func(heads: int, seq: int, dim: int, dtype: str = "float16", causal: bool = False,
                        **kw) -> tdsl.PrimFunc:
    """The function of `attention_lowp_text` (module docstring)."""
    return tdsl.parse(attention_lowp_text(heads, seq, dim, dtype, causal, **kw))


def attention_lowp_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False) -> np.ndarray:
    """softmax(Q K^T / sqrt(d) [causal]) V in float64."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v
