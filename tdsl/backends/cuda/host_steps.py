"""Host steps of a CUDA program: library calls the host makes between kernel launches.

A block tensorized with ``"cublas.sgemm"`` (`tdsl.intrinsics.cublas`) lowers to a
``T.call_extern("void", "tdsl_cublas_sgemm", transa, transb, m, n, k, alpha, &A[a0], lda,
&B[b0], ldb, beta, &C[c0], ldc)`` outside every kernel, possibly inside host loops (a batch).
`read_step` turns that statement into a `LibraryStep` (checked: constant shapes, operands that
stay inside their buffers, leading dimensions, dtypes), `split_kernels` puts it between the
kernels in program order (`HostPlan.steps`), codegen prints the call plan at the top of the
source (``kernel.source``) and the runtimes run it:

* on a GPU (`run_cublas`): ``cublasSgemm_v2`` / ``cublasDgemm_v2`` through one cuBLAS handle
  per process, set to the launch's stream, with the row-major product computed as the
  column-major C^T = op(B)^T op(A)^T (B first, m and n swapped); tdsl's driver runtime makes the
  device's primary context current, the one cuBLAS (a runtime-API library) uses. Not yet run
  on a real GPU;
* emulated (`run_emulated`): the same product with numpy (numpy's BLAS) on the host arrays,
  so ``emulate=True`` gives the whole program's results without a GPU.
"""
from __future__ import annotations

import ctypes
import itertools
from dataclasses import dataclass

import numpy as np

from ...errors import TargetError
from ...ir import Buffer, BufferLoad, Call, Evaluate, FloatImm, For, IntImm, PrimExpr, Stmt, Var, collect
from .plan import evaluate

CALLS = {"tdsl_cublas_sgemm": "sgemm", "tdsl_cublas_dgemm": "dgemm"}
DTYPES = {"sgemm": "float32", "dgemm": "float64"}


@dataclass(frozen=True)
class Operand:
    """A matrix operand: its (flat) buffer and its first element's offset (over the host loops)."""

    buffer: Buffer
    offset: PrimExpr
    rows: int          # as stored (row-major)
    cols: int
    ld: int            # row stride in elements


@dataclass(frozen=True)
class LibraryStep:
    """One GEMM the host runs: C = alpha op(A) op(B) + beta C (row-major), once per host loop point."""

    routine: str
    transa: bool
    transb: bool
    m: int
    n: int
    k: int
    alpha: float
    beta: float
    a: Operand
    b: Operand
    c: Operand
    loops: tuple[tuple[Var, int], ...] = ()

    @property
    def symbol(self) -> str:
        from ...intrinsics.cublas import SYMBOLS

        return SYMBOLS[self.routine]

    def text(self) -> str:
        """The call plan line (row-major operands; what cuBLAS receives in column-major order)."""
        from ...script.printer import message_text

        loops = "".join(f"for {v.name} in range({e}): " for v, e in self.loops)
        ops = "NT"
        def arg(o: Operand) -> str:
            return f"{o.buffer.name}+{message_text(o.offset)} ({o.rows}x{o.cols}, ld {o.ld})"
        return (f"{loops}{self.symbol}(handle, {ops[self.transb]}, {ops[self.transa]}, n={self.n}, m={self.m}, "
                f"k={self.k}, alpha={self.alpha:g}, B={arg(self.b)}, A={arg(self.a)}, beta={self.beta:g}, "
                f"C={arg(self.c)})  # row-major C[{self.m}x{self.n}] = op(A) op(B)")

    def points(self):
        """The host loop values, one dict per call."""
        ranges = [range(e) for _, e in self.loops]
        for combo in itertools.product(*ranges):
            yield {v: x for (v, _), x in zip(self.loops, combo)}


def is_library_call(stmt: Stmt) -> bool:
    """A host statement that is a library call (in host loops), as `read_step` takes it."""
    return any(c.op in CALLS for c in collect(stmt, Call))


def _const(e, what: str, fname: str):
    if isinstance(e, (IntImm, FloatImm)):
        return e.value
    raise TargetError(f"function {fname!r}: the cuBLAS call's {what} is {e}, not a constant; the cublas.* "
                      "intrinsics are made for constant shapes")


def read_step(stmt: Stmt, fname: str) -> LibraryStep:
    """The LibraryStep of a host statement (`is_library_call`), checked (module docs)."""
    loops: list[tuple[Var, int]] = []
    while isinstance(stmt, For):
        if stmt.kind == "thread_binding" or not isinstance(stmt.extent, IntImm) or not (
                isinstance(stmt.min, IntImm) and stmt.min.value == 0):
            raise TargetError(f"function {fname!r}: the loop {stmt.loop_var.name} around a cuBLAS call must be a "
                              "host loop with a constant extent from 0 (a batch)")
        loops.append((stmt.loop_var, int(stmt.extent.value)))
        stmt = stmt.body
    if not (isinstance(stmt, Evaluate) and isinstance(stmt.value, Call) and stmt.value.op in CALLS):
        raise TargetError(f"function {fname!r}: a cuBLAS call must be alone in its host loops (found other "
                          "statements beside it); put the other statements in kernels")
    call = stmt.value
    routine = CALLS[call.op]
    args = list(call.args)
    if len(args) != 13:
        raise TargetError(f"function {fname!r}: {call.op} takes 13 arguments, got {len(args)}")
    ta, tb, m, n, k, alpha = (_const(args[i], w, fname) for i, w in enumerate(("transa", "transb", "m", "n", "k", "alpha")))
    beta = _const(args[10], "beta", fname)
    dtype = DTYPES[routine]

    def operand(ptr, ld, rows: int, cols: int, name: str) -> Operand:
        if not (isinstance(ptr, Call) and ptr.op == "address_of" and isinstance(ptr.args[0], BufferLoad)):
            raise TargetError(f"function {fname!r}: operand {name} of the cuBLAS call is not a buffer address")
        load = ptr.args[0]
        buf = load.buffer
        if str(buf.dtype) != dtype:
            raise TargetError(f"function {fname!r}: {routine} takes {dtype} matrices, but {name} is buffer "
                              f"{buf.name!r} of {buf.dtype}")
        ld_v = int(_const(ld, f"leading dimension of {name}", fname))
        if ld_v < cols:
            raise TargetError(f"function {fname!r}: {name} ({buf.name!r}) has row stride {ld_v} < its {cols} columns")
        return Operand(buf, load.indices[0], rows, cols, ld_v)

    a_rows, a_cols = (k, m) if ta else (m, k)
    b_rows, b_cols = (n, k) if tb else (k, n)
    step = LibraryStep(routine, bool(ta), bool(tb), int(m), int(n), int(k), float(alpha), float(beta),
                       operand(args[6], args[7], a_rows, a_cols, "A"), operand(args[8], args[9], b_rows, b_cols, "B"),
                       operand(args[11], args[12], int(m), int(n), "C"), tuple(loops))
    _check_bounds(step, fname)
    return step


def _offset(op: Operand, point: dict) -> int:
    return evaluate(op.offset, point)


def _check_bounds(step: LibraryStep, fname: str) -> None:
    """Every operand stays inside its buffer at every host loop point (constant-size buffers)."""
    for name, op in (("A", step.a), ("B", step.b), ("C", step.c)):
        size = op.buffer.shape[0]
        if not isinstance(size, IntImm):
            continue   # checked against the argument's size at call time
        for point in step.points():
            first = _offset(op, point)
            last = first + (op.rows - 1) * op.ld + op.cols
            if first < 0 or last > size.value:
                raise TargetError(f"function {fname!r}: the cuBLAS call's {name} ({op.buffer.name!r}) reads "
                                  f"elements {first}..{last - 1} of {size.value}")


def plan_text(steps) -> str:
    """The call plan as source comments (empty without host steps)."""
    if not steps:
        return ""
    lines = ["// host steps (cuBLAS calls or tdsl's fused kernels, between the kernel launches, on the launch's stream):"]
    for before, step in steps:
        lines.append(f"//   before launch {before}: {step.text()}")
    return "\n".join(lines)


def _view(arr: np.ndarray, op: Operand, point: dict) -> np.ndarray:
    start = _offset(op, point)
    flat = arr.reshape(-1)
    return np.lib.stride_tricks.as_strided(flat[start:], shape=(op.rows, op.cols),
                                           strides=(op.ld * flat.itemsize, flat.itemsize))


def run_emulated(step: LibraryStep, arrays: dict) -> None:
    """The step on host arrays (by buffer) with numpy's BLAS: the emulator's stand-in for cuBLAS
    (another kind of step, a fused kernel, runs itself in the emulator: `step.run_emulated`)."""
    if not isinstance(step, LibraryStep):
        step.run_emulated(arrays)
        return
    for point in step.points():
        a = _view(arrays[step.a.buffer], step.a, point)
        b = _view(arrays[step.b.buffer], step.b, point)
        c = _view(arrays[step.c.buffer], step.c, point)
        prod = (a.T if step.transa else a) @ (b.T if step.transb else b)
        c[...] = step.alpha * prod + (step.beta * c if step.beta else 0)


# -- on a GPU: cuBLAS on the launch's stream ------------------------------------------------------

_HANDLE: list = []


def _handle(lib) -> ctypes.c_void_p:
    if not _HANDLE:
        handle = ctypes.c_void_p()
        status = lib.cublasCreate_v2(ctypes.byref(handle))
        if status != 0:
            raise TargetError(f"cublasCreate failed with status {status} (no GPU, or a driver/cuBLAS mismatch)")
        _HANDLE.append(handle)
    return _HANDLE[0]


def run_cublas(step: LibraryStep, ptrs: dict, stream: int) -> None:
    """The step through cuBLAS on `stream` with device pointers `ptrs` (by buffer) (a fused
    kernel's step launches itself: `step.run_gpu`)."""
    if not isinstance(step, LibraryStep):
        step.run_gpu(ptrs, stream)
        return
    from ...intrinsics.cublas import find_library

    _, lib = find_library()
    handle = _handle(lib)
    status = lib.cublasSetStream_v2(handle, ctypes.c_void_p(stream))
    if status != 0:
        raise TargetError(f"cublasSetStream failed with status {status}")
    scalar = ctypes.c_float if step.routine == "sgemm" else ctypes.c_double
    itemsize = 4 if step.routine == "sgemm" else 8
    fn = getattr(lib, step.symbol)
    alpha, beta = scalar(step.alpha), scalar(step.beta)
    op_n, op_t = 0, 1          # CUBLAS_OP_N, CUBLAS_OP_T
    for point in step.points():
        addr = {name: ptrs[op.buffer] + _offset(op, point) * itemsize
                for name, op in (("a", step.a), ("b", step.b), ("c", step.c))}
        # row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T
        status = fn(handle, op_t if step.transb else op_n, op_t if step.transa else op_n,
                    ctypes.c_int(step.n), ctypes.c_int(step.m), ctypes.c_int(step.k), ctypes.byref(alpha),
                    ctypes.c_void_p(addr["b"]), ctypes.c_int(step.b.ld), ctypes.c_void_p(addr["a"]),
                    ctypes.c_int(step.a.ld), ctypes.byref(beta), ctypes.c_void_p(addr["c"]), ctypes.c_int(step.c.ld))
        if status != 0:
            raise TargetError(f"{step.symbol} failed with status {status}")


def run_steps(steps, before: int, run) -> None:
    """Run (`run(step)`) the host steps placed before launch number `before`."""
    for at, step in steps:
        if at == before:
            run(step)
