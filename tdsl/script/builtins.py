"""The `T.*` names of tdsl scripts, defined once: the T namespace, the parser and the docs read
this table.

`BUILTINS` maps each name tdsl understands to its role (what part of the parser handles it) and
a one-line meaning; `SYNONYMS` maps TVM spellings onto the tdsl name they stand for; `ABSENT`
maps TVMScript names tdsl does not have onto what a tdsl script writes instead, so that the
parser's error says both.
"""
from __future__ import annotations

from ..dtypes import SCALAR_NAMES
from ..ir.opaque_calls import WMMA_BUILTINS

MATH_NAMES = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "floor", "ceil", "pow", "exp2",
              "log2", "sin", "cos", "round", "trunc", "fma")

# name -> (role, meaning). Roles: "decorator", "annotation", "loop", "with", "decl" (block
# declarations), "stmt", "expr", "prelude" (function-level declarations).
BUILTINS: dict[str, tuple[str, str]] = {
    "prim_func": ("decorator", "parse the decorated function (private=, s_tir=, check_well_formed= are accepted)"),
    "Buffer": ("annotation", "a buffer parameter: T.Buffer(shape, dtype, strides=, offset=, scope=)"),
    "handle": ("annotation", "a parameter that T.match_buffer turns into a buffer"),
    "let": ("annotation", "x: T.let[T.int32] = value, a let binding with its type"),
    "match_buffer": ("prelude", ("A = T.match_buffer(a, shape, dtype): the buffer behind a T.handle; inside "
                                 "a block, a view of a region: T.match_buffer(A[vi, 0:16], (16,))")),
    "func_attr": ("prelude", "T.func_attr({...}): the function's attributes"),
    "grid": ("loop", "nested serial loops"),
    "serial": ("loop", "a serial loop"),
    "parallel": ("loop", "a parallel loop"),
    "vectorized": ("loop", "a vectorized loop"),
    "unroll": ("loop", "an unrolled loop"),
    "thread_binding": ("loop", "a loop bound to a GPU thread axis"),
    "block": ("with", "with T.block(name): a block"),
    "init": ("with", "with T.init(): the reduction initialisation of a block"),
    "axis": ("decl", "T.axis.spatial / T.axis.reduce / T.axis.remap: block iterators"),
    "where": ("decl", "the block's predicate"),
    "reads": ("decl", "the block's read regions"),
    "writes": ("decl", "the block's write regions"),
    "block_attr": ("decl", "the block's annotations"),
    "alloc_buffer": ("decl", "an intermediate buffer"),
    "allocate": ("stmt", "storage in lowered IR"),
    "evaluate": ("stmt", "an expression statement (an extern call)"),
    "LetStmt": ("with", "with T.LetStmt(value) as x: a let binding"),
    "meta_var": ("stmt", "a, b = T.meta_var(index_map(i, j)): names bound to the values a Python function of the "
                         "closure computes from tdsl expressions (no let binding: the names stand for the values)"),
    "min": ("expr", "minimum"), "max": ("expr", "maximum"),
    "if_then_else": ("expr", "lazy select"), "Select": ("expr", "eager select"),
    "cast": ("expr", "T.cast(x, dtype)"), "Cast": ("expr", "T.Cast(dtype, x)"),
    "likely": ("expr", "T.likely(cond): a branch hint, the condition itself"),
    "floordiv": ("expr", "floor division"), "floormod": ("expr", "floor modulo"),
    "bitwise_and": ("expr", "a & b: bitwise and of integers (or bools)"),
    "bitwise_or": ("expr", "a | b: bitwise or of integers (or bools)"),
    "bitwise_xor": ("expr", "a ^ b: bitwise exclusive or of integers (or bools)"),
    "bitwise_not": ("expr", "~a: every bit of an integer flipped (a ^ -1); `not` negates a bool"),
    "shift_left": ("expr", "a << b: bits moved up, 0 <= b < the bit width"),
    "shift_right": ("expr", "a >> b: arithmetic on signed, logical on unsigned types, 0 <= b < the bit width"),
    "max_value": ("expr", "the largest value of a dtype"), "min_value": ("expr", "the smallest value of a dtype"),
    "call_extern": ("expr", "a call to an external function"),
    "address_of": ("expr", "a handle to one buffer element"),
    "tvm_access_ptr": ("expr", "TVM's (T.type_annotation(dtype), A.data, offset, extent, mask): T.address_of of "
                               "element offset of A's storage (row-major)"),
    **{name: ("expr", "a TVM warp-matrix builtin over buffer addresses (A.data, A.access_ptr): an opaque "
                      "call, CUDA only (tdsl.ir.opaque_calls)") for name in WMMA_BUILTINS},
    "ptx_cp_async": ("expr", "T.ptx_cp_async(A_shared[i], A[j], bytes): an asynchronous copy of 4, 8 or 16 bytes "
                             "from global to shared memory (CUDA cp.async), complete at a later T.ptx_wait_group"),
    "ptx_commit_group": ("expr", "T.ptx_commit_group(): the cp.async copies issued since the last commit form a group"),
    "ptx_wait_group": ("expr", "T.ptx_wait_group(n): wait until at most n of the thread's newest groups are pending"),
    "ptx_init_barrier_thread_count": ("expr", "T.ptx_init_barrier_thread_count(bars[i], count): mbarrier.init "
                                              "(bars: a shared uint64 buffer), `count` arrivals complete a phase"),
    "ptx_arrive_barrier": ("expr", "T.ptx_arrive_barrier(bars[i]): mbarrier.arrive"),
    "ptx_arrive_barrier_expect_tx": ("expr", "T.ptx_arrive_barrier_expect_tx(bars[i], bytes): arrive and expect "
                                             "`bytes` of TMA transactions in this phase"),
    "ptx_wait_barrier": ("expr", "T.ptx_wait_barrier(bars[i], parity): wait for the barrier's phase of that parity"),
    "ptx_fence_proxy_async": ("expr", "T.ptx_fence_proxy_async(): order generic-proxy shared writes before TMA/wgmma"),
    "ptx_tma_load": ("expr", "T.ptx_tma_load(A_sh[s, 0, 0], A[y, x], tmap[0], bars[s]): a TMA box copy of A at "
                             "(y, x) into A_sh's last axes, completing on bars[s] (sm_90)"),
    "ptx_tma_store": ("expr", "T.ptx_tma_store(C[y, x], C_sh[0, 0], tmap[0]): a TMA box copy of C_sh's last axes "
                              "into C at (y, x) (outside C: not written), committed and waited for (sm_90)"),
    "ptx_wgmma": ("expr", "T.ptx_wgmma(acc[tx, 0], A_sh[s, 0, k], B_sh[s, 0, k], n, lane): wgmma m64nNk16, the "
                          "thread's n / 2 accumulators += A B^T (K-major tiles, rows a swizzle span; sm_90a)"),
    "ptx_wgmma_fence": ("expr", "T.ptx_wgmma_fence(): wgmma.fence before wgmmas touch the accumulators"),
    "ptx_wgmma_commit_group": ("expr", "T.ptx_wgmma_commit_group(): the wgmmas issued so far form a group"),
    "ptx_wgmma_wait_group": ("expr", "T.ptx_wgmma_wait_group(n): wait until at most n wgmma groups are pending"),
    "ptx_setmaxnreg": ("expr", "T.ptx_setmaxnreg(inc, count): setmaxnreg.inc (True) / .dec (False): the executing "
                               "warpgroup's registers per thread to count (a multiple of 8 in [24, 256]; sm_90a)"),
    "Ramp": ("expr", "a vector of base + k * stride"), "Broadcast": ("expr", "a vector of one value"),
    **{name: ("expr", "a math function") for name in MATH_NAMES},
    **{name: ("dtype", f"the {name} type: an annotation, a constant or a cast") for name in SCALAR_NAMES},
}

# TVM spelling -> tdsl name
SYNONYMS: dict[str, str] = {
    "sblock": "block",
    "sblock_alloc_buffer": "alloc_buffer",
    "sblock_attr": "block_attr",
}

# TVMScript names tdsl does not have -> what a tdsl script writes instead
ABSENT: dict[str, str] = {
    "decl_buffer": "declare the buffer with T.alloc_buffer(shape, dtype) at the top of a block",
    "Ptr": "use a buffer parameter, T.Buffer(shape, dtype)",
    "launch_thread": 'loops bound to thread axes: for tx in T.thread_binding(32, thread="threadIdx.x")',
    "env_thread": 'loops bound to thread axes: for tx in T.thread_binding(32, thread="threadIdx.x")',
    "attr": "annotations on loops (T.serial(n, annotations={...})) or blocks (T.block_attr({...}))",
    "Assert": "if c: ... (tdsl has no assertions in kernels)",
    "assume": "nothing: tdsl has no assumptions; a T.where or an if states a condition",
    "type_annotation": "T.address_of(A[i, j]) for a pointer argument",
    "call_intrin": 'T.call_extern("dtype", "name", ...)',
    "call_pure_extern": 'T.call_extern("dtype", "name", ...)',
    "call_llvm_intrin": 'T.call_extern("dtype", "llvm.name", ...)',
    "call_llvm_pure_intrin": 'T.call_extern("dtype", "llvm.name", ...)',
    "buffer_store": "a store statement: A[i, j] = value",
    "BufferStore": "a store statement: A[i, j] = value",
    "BufferLoad": "a load: A[i, j]",
    "bind": "a let binding: x = value",
    "realize": "T.alloc_buffer and blocks",
    "prefetch": 'T.evaluate(T.call_extern("void", "llvm.prefetch.p0", T.address_of(A[i]), 0, 3, 1))',
    "tvm_thread_allreduce": "sch.rfactor and sch.bind on the reduction loop",
    "tvm_storage_sync": "nothing: the CUDA backend inserts the barriers a shared buffer needs",
    "reinterpret": "T.cast (a value conversion; tdsl has no bit reinterpretation)",
    "boolean": 'T.bool',
    "vscale": "a fixed vector length",
    "comm_reducer": "a reduction block: with T.init() and C[i] = C[i] + x (argmax / argmin: two stores in "
                    "T.init, two T.let bindings of T.Select, two stores)",
}


def resolve(name: str) -> str:
    """The tdsl name a T attribute stands for (a synonym resolves to its tdsl name)."""
    return SYNONYMS.get(name, name)


def absent_message(name: str) -> tuple[str, str]:
    """(message, hint) for a `T.<name>` tdsl does not have."""
    hint = ABSENT.get(name)
    if hint is None:
        known = ", ".join(sorted(n for n, (role, _) in BUILTINS.items() if role == "expr"))
        return f"T.{name} is not part of tdsl", f"the T functions for expressions are: {known}"
    return f"T.{name} (TVMScript) is not part of tdsl", f"tdsl writes instead: {hint}"


def names_by_role(role: str) -> list[str]:
    return [n for n, (r, _) in BUILTINS.items() if r == role]


def markdown_table() -> str:
    """The table of T names, for the docs."""
    rows = ["| name | role | meaning |", "|---|---|---|"]
    rows += [f"| `T.{n}` | {r} | {m} |" for n, (r, m) in BUILTINS.items() if r != "dtype"]
    rows += [f"| `T.{n}` | synonym | `T.{t}` |" for n, t in SYNONYMS.items()]
    return "\n".join(rows)
