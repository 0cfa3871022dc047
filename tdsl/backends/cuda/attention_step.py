"""The fused attention kernel as a host step: `AttentionStep` launches tdsl's mma.sync kernel
(`flash_attention`) or, built for sm_90a, its wgmma + TMA kernel (`flash_attention_sm90`) between
the generated kernels -- on a GPU through the driver (its own NVRTC CUBIN for the device), emulated
through `emulator.raw.run_source`; `is_call` / `read_step` find the call in the lowered function.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from ...errors import TargetError
from ...ir import Buffer, BufferLoad, Call, Evaluate, FloatImm, IntImm, Stmt
from . import flash_attention_sm90 as hopper
from .flash_attention import THREADS, AttentionShape, kernel_source, scale_log2


@dataclass(frozen=True)
class AttentionStep:
    """The fused kernel as a host step: buffers Q, K, V (read) and O (written), flat; `sm90a`: the
    Hopper kernel (`flash_attention_sm90`: wgmma + TMA, Q, K, V read through tensor maps the step
    encodes before each launch) instead of the mma.sync one."""

    shape: AttentionShape
    scale: float
    q: Buffer
    k: Buffer
    v: Buffer
    o: Buffer
    sm90a: bool = False

    @property
    def name(self) -> str:
        return hopper.kernel_name(self.shape) if self.sm90a else self.shape.name

    @property
    def source(self) -> str:
        return hopper.kernel_source(self.shape) if self.sm90a else kernel_source(self.shape)

    @property
    def launch(self) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        """(grid, block, dynamic shared bytes) of the kernel's launch."""
        if self.sm90a:
            return hopper.grid(self.shape), (hopper.THREADS, 1, 1), hopper.dynamic_shared_bytes(self.shape)
        return self.shape.grid, (THREADS, 1, 1), 0

    def text(self) -> str:
        grid, block, dynamic = self.launch
        return (f"{self.name}<<<({grid[0]}, {grid[1]}), {block[0]}{f', {dynamic}' if dynamic else ''}>>>"
                f"({self.q.name}, {self.k.name}, {self.v.name}, {self.o.name}, scale={self.scale:g})"
                f"  # fused attention forward, {self.shape.bh} x {self.shape.seq} x {self.shape.dim}"
                + (", causal" if self.shape.causal else "") + (" (sm_90a: wgmma + TMA)" if self.sm90a else ""))

    def check_arch(self, arch: str | None) -> None:
        """TargetError when the build's architecture cannot run the kernel (the Hopper one: an sm_90 GPU,
        whose sm_90a CUBIN the step compiles itself)."""
        if self.sm90a and arch is not None and arch.removesuffix("a") != "sm_90":
            raise TargetError(f"{self.name}: the attention was scheduled for sm_90a (wgmma, TMA), but the kernel is "
                              f"built for {arch}; build with arch=\"sm_90a\", or auto_schedule for {arch}")

    def _tensor(self, array: np.ndarray) -> np.ndarray:
        return array.reshape(self.shape.bh, self.shape.seq, self.shape.dim)

    def run_emulated(self, arrays: dict, thread_orders: int = 3) -> None:
        """The kernel in the CPU emulator on host arrays (by buffer), O written in place; run
        under `thread_orders` (1-3: ascending, descending, shuffled) thread orders whose outputs
        must agree bit for bit."""
        from .emulator.raw import run_source
        from .sm90 import emulator_tensor_map

        if self.sm90a:   # tdsl's own tensor-map encoding, over the emulator's arrays
            inputs = [emulator_tensor_map(self._tensor(arrays[b]), hopper.tensor_box(), "128B")
                      for b in (self.q, self.k, self.v)]
        else:
            inputs = [arrays[b] for b in (self.q, self.k, self.v)]
        out = arrays[self.o]
        grid, block, dynamic = self.launch
        first = None
        for order in range(thread_orders):
            run_source(self.source, self.name, [*inputs, out, ctypes.c_float(scale_log2(self.scale))],
                       grid=grid, block=block, order=order, dynamic_shared=dynamic)
            got = out.view(np.uint8)
            if first is None:
                first = got.copy()
            elif not np.array_equal(first, got):
                raise TargetError(f"{self.name} (emulated): the output {self.o.name!r} differs between "
                                  f"thread orders 0 and {order} (a race in the fused kernel)")

    def run_gpu(self, ptrs: dict, stream: int) -> None:
        """The kernel on the GPU: device pointers `ptrs` (by buffer), on `stream` (compiled by
        NVRTC for the device's architecture on first use; the Hopper kernel for sm_90a, and its
        tensor maps encoded by the driver into a device buffer of the step's before the launch)."""
        from . import runtime

        arch = runtime.device_info().arch
        grid, block, dynamic = self.launch
        if self.sm90a:
            if arch.removesuffix("a") != "sm_90":
                raise TargetError(f"{self.name}: the Hopper attention kernel (wgmma, TMA) runs on sm_90 GPUs "
                                  f"(H100/H200), not on this {arch} device; schedule without arch=\"sm_90a\" "
                                  "for the mma.sync kernel")
            from .tensor_maps import encode_tiled

            arch = "sm_90a"
            maps, encoded = _map_buffer(self)
            key = tuple(ptrs[b] for b in (self.q, self.k, self.v))
            if encoded.get("ptrs") != key:   # (encoded again only when the tensors moved)
                raw = b"".join(encode_tiled(runtime._driver(), ptr, (self.shape.bh, self.shape.seq, self.shape.dim),
                                            self.shape.dtype, hopper.tensor_box(), "128B") for ptr in key)
                runtime.copy_to_device(maps.ptr, np.frombuffer(raw, np.uint8), stream=stream)
                encoded["ptrs"] = key
            inputs = [ctypes.c_void_p(maps.ptr + 128 * i) for i in range(3)]
        else:
            inputs = [ctypes.c_void_p(ptrs[b]) for b in (self.q, self.k, self.v)]
        module = _gpu_module(self.source, self.name, arch)
        runtime.launch(module, self.name, grid, block,
                       [*inputs, ctypes.c_void_p(ptrs[self.o]), ctypes.c_float(scale_log2(self.scale))], stream,
                       dynamic_shared=dynamic)


_MAPS: dict = {}


def _map_buffer(step: AttentionStep):
    """(the device buffer of the step's three tensor maps, what they were encoded for): one per
    step, kept; maps encoded for other tensors are rewritten on the call's stream, after the
    launches before it."""
    from . import runtime

    key = id(step)
    if key not in _MAPS or _MAPS[key][0] is not step:
        _MAPS[key] = (step, runtime.device_array((3 * 128,), "uint8", zero=False), {})
    return _MAPS[key][1], _MAPS[key][2]


@functools.cache
def _gpu_module(source: str, name: str, arch: str):
    from . import runtime
    from .nvrtc import compile_cuda

    return runtime.Module(compile_cuda(source, arch, name=f"{name}.cu").cubin, [name])


# ------------------------------------------------------------------------------- reading the call

def is_call(stmt: Stmt) -> bool:
    """A host statement that is the fused kernel's call (`tdsl.lower.fused_kernels`)."""
    from ...intrinsics.cuda_attention import KERNELS

    return isinstance(stmt, Evaluate) and isinstance(stmt.value, Call) and stmt.value.op in KERNELS.values()


def read_step(stmt: Stmt, fname: str) -> AttentionStep:
    """The AttentionStep of the call (checked: constant arguments, whole buffers of the right types)."""
    call = stmt.value   # type: ignore[attr-defined]
    args = list(call.args)
    if len(args) != 9 or not all(isinstance(a, (IntImm, FloatImm)) for a in args[4:]):
        raise TargetError(f"function {fname!r}: the fused attention call takes 4 buffer addresses and 5 constants")
    bufs = []
    for a, what in zip(args[:4], ("Q", "K", "V", "O")):
        if not (isinstance(a, Call) and a.op == "address_of" and isinstance(a.args[0], BufferLoad)
                and all(isinstance(i, IntImm) and i.value == 0 for i in a.args[0].indices)):
            raise TargetError(f"function {fname!r}: operand {what} of the fused attention call is not the address "
                              "of a buffer's first element")
        bufs.append(a.args[0].buffer)
    bh, seq, dim, causal = (int(a.value) for a in args[4:8])
    shape = AttentionShape(bh, seq, dim, str(bufs[0].dtype), str(bufs[3].dtype), bool(causal))
    shape.check()
    elems = bh * seq * dim
    for b, what in zip(bufs, "QKVO"):
        size = 1
        for x in b.shape:
            size *= int(x.value) if isinstance(x, IntImm) else -1
        want = shape.out if what == "O" else shape.dtype
        if size != elems or str(b.dtype) != want:
            raise TargetError(f"function {fname!r}: {what} of the fused attention call is {b.name!r} "
                              f"({b.dtype}, {size} elements), not {elems} elements of {want}")
    from ...intrinsics.cuda_attention import CALL_SM90A

    q, k, v, o = bufs
    return AttentionStep(shape, float(args[8].value), q, k, v, o, sm90a=call.op == CALL_SM90A)
