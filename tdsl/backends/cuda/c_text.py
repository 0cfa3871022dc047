"""C++ text for the CUDA code generator: the names it must not take (keywords, CUDA's own), the
device helper snippets a kernel may need (each emitted once, on demand), and infix printing with
C's precedence (as few parentheses as C needs).

    >>> infix("a + b", "*", "c")
    '(a + b) * c'
"""
from __future__ import annotations

KEYWORDS = set(["auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "bool", "true", "false", "class", "delete", "new", "template", "this", "typename", "namespace", "operator", "private", "public", "protected", "virtual", "friend", "using", "half", "nv_bfloat16", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "min", "max", "abs", "float2", "float4", "int2", "int4", "uint2", "uint4", "double2", "main"])

HELPERS = {
    "vec": """template <typename T, int N> struct alignas(sizeof(T) * N) tdsl_vec { T v[N]; };""",
    "floordiv": """template <typename T> __device__ __forceinline__ T tdsl_floordiv(T a, T b) {
  T q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}""",
    "floormod": """template <typename T> __device__ __forceinline__ T tdsl_floormod(T a, T b) {
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}""",
    # T.min/T.max propagate NaN as numpy and the CPU backend do (fmaxf/fminf drop it)
    "fmax": """template <typename T> __device__ __forceinline__ T tdsl_fmax(T a, T b) {
  return (a != a || b != b) ? a + b : fmax(a, b);
}""",
    "fmin": """template <typename T> __device__ __forceinline__ T tdsl_fmin(T a, T b) {
  return (a != a || b != b) ? a + b : fmin(a, b);
}""",
    # cp.async (PTX ISA 7.0, sm_80+; a plain copy before sm_80, where the waits have nothing to wait
    # for); the emulator's header defines these functions itself (include/cp_async.h)
    "cp_async": """#ifndef TDSL_CUDA_EMU_H
template <int N> __device__ __forceinline__ void tdsl_cp_async_copy(void* dst, const void* src) {
  if (N == 16) *(uint4*)dst = *(const uint4*)src;
  else if (N == 8) *(uint2*)dst = *(const uint2*)src;
  else *(unsigned*)dst = *(const unsigned*)src;
}
template <int N> __device__ __forceinline__ void tdsl_cp_async_ca(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\\n" :: "r"((unsigned)__cvta_generic_to_shared(dst)),
               "l"(src), "n"(N) : "memory");
#else
  tdsl_cp_async_copy<N>(dst, src);
#endif
}
__device__ __forceinline__ void tdsl_cp_async_cg16(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n" :: "r"((unsigned)__cvta_generic_to_shared(dst)),
               "l"(src) : "memory");
#else
  tdsl_cp_async_copy<16>(dst, src);
#endif
}
__device__ __forceinline__ void tdsl_cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void tdsl_cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\\n" :: "n"(N) : "memory");
#endif
}
#endif""",
}


# C's precedence, loosest first (& | ^ bind more loosely than ==)
PREC = {"||": 0, "&&": 1, "|": 2, "^": 3, "&": 4, "==": 5, "!=": 5, "<": 6, "<=": 6, ">": 6, ">=": 6, "<<": 7,
         ">>": 7, "+": 8, "-": 8, "*": 9, "/": 9, "%": 9}


def top_prec(code: str) -> int | None:
    """Precedence of the loosest infix operator outside brackets (infix operators are always
    printed with spaces around them); None for an atom."""
    depth, best, i = 0, None, 0
    while i < len(code):
        ch = code[i]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == " " and depth == 0:
            end = code.find(" ", i + 1)
            tok = code[i + 1:end] if end > 0 else ""
            if tok in PREC:
                best = PREC[tok] if best is None else min(best, PREC[tok])
                i = end
                continue
        i += 1
    return best


def atom(code: str) -> str:
    return code if top_prec(code) is None else f"({code})"


def infix(a: str, sym: str, b: str) -> str:
    p = PREC[sym]
    pa, pb = top_prec(a), top_prec(b)
    if pa is not None and pa < p:
        a = f"({a})"
    if pb is not None and pb <= p:
        b = f"({b})"
    if sym == "||":  # the usual warning-free spelling of a && b || c
        a = f"({a})" if pa == PREC["&&"] else a
        b = f"({b})" if pb == PREC["&&"] else b
    return f"{a} {sym} {b}"


def strip_parens(code: str) -> str:
    """Drop one pair of redundant outer parentheses."""
    if code.startswith("(") and code.endswith(")"):
        depth = 0
        for i, ch in enumerate(code):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(code) - 1:
                return code
        return code[1:-1]
    return code
