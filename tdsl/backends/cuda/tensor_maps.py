"""The call path's TMA tensor maps: the maps a function records (`tdsl.ir.tensor_maps`) encoded
before its launches, into the 128-byte buffers its kernels read them from.

* on a GPU (`fill_device`): the driver's ``cuTensorMapEncodeTiled`` (cuda-python's
  ``cuda.bindings.driver``) with the tensor's device address, its sizes and byte strides
  innermost first, the box innermost first, unit element strides, no interleave, the swizzle,
  128-byte L2 promotion and zero fill outside the tensor; the 128 bytes are copied into the map's
  device buffer (a CUtensorMap may live in global memory: TMA takes its generic address).
* in the emulator (`fill_emulated`): tdsl's own encoding, `sm90.emulator_tensor_map`, over the
  array the emulated kernels use.
* exported (`kernel.export`, export.py): the C launcher calls ``cuTensorMapEncodeTiled`` itself
  with the same arguments (`tiled_arguments`) and copies the map into its device buffer on the
  launch's stream.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import TargetError
from ...ir import BlockRealize, Buffer, IntImm, PrimFunc, collect
from ...ir.tensor_maps import TensorMapSpec, tensor_maps

# cuda.bindings.driver.CUtensorMapDataType by tdsl dtype (CUDA driver API: CU_TENSOR_MAP_DATA_TYPE_*)
DATA_TYPES = {"uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "int32": "INT32", "uint64": "UINT64",
              "int64": "INT64", "float16": "FLOAT16", "float32": "FLOAT32", "float64": "FLOAT64",
              "bfloat16": "BFLOAT16"}
SWIZZLES = {"none": "NONE", "32B": "32B", "64B": "64B", "128B": "128B"}


@dataclass(frozen=True)
class Binding:
    """One tensor map of a build: its spec, the plan's buffers (map, tensor) and the tensor's n-d
    shape and dtype."""

    spec: TensorMapSpec
    map: Buffer
    tensor: Buffer
    shape: tuple[int, ...]
    dtype: str


def resolve(func: PrimFunc, plan) -> list[Binding]:
    """The tensor maps of scheduled function `func` bound to lowered `plan`'s buffers (its flat
    parameters and workspaces, by name); TargetError when one names no such buffer or the box
    does not fit the tensor."""
    specs = tensor_maps(func)
    if not specs:
        return []
    nd = {b.name: b for b in func.params if isinstance(b, Buffer)}
    for r in collect(func.body, BlockRealize):
        nd.update({b.name: b for b in r.block.alloc_buffers if b.scope == "global"})
    flat = {b.name: b for b in [*plan.func.buffer_params, *plan.workspaces]}
    out = []
    for spec in specs:
        where = f"tensor map {spec.map!r} (function attribute tdsl.tensor_map:{spec.map})"
        for name in (spec.map, spec.tensor):
            if name not in nd or name not in flat:
                raise TargetError(f"{where}: no parameter or function-level global buffer {name!r}")
        m, t = nd[spec.map], nd[spec.tensor]
        if str(m.dtype) != "uint8" or [getattr(s, "value", None) for s in m.shape] != [128]:
            raise TargetError(f"{where}: {spec.map} must be a uint8 buffer of 128 elements")
        if spec.map not in {w.name for w in plan.workspaces}:
            raise TargetError(f"{where}: {spec.map} must be allocated by the function (T.alloc_buffer), not passed")
        if not all(isinstance(s, IntImm) for s in t.shape):
            raise TargetError(f"{where}: {spec.tensor} needs a constant shape")
        shape = tuple(int(s.value) for s in t.shape if isinstance(s, IntImm))
        if len(spec.box) != len(shape) or not 1 <= len(shape) <= 5:
            raise TargetError(f"{where}: box {spec.box} for {spec.tensor} of shape {shape}")
        if str(t.dtype) not in DATA_TYPES:
            raise TargetError(f"{where}: TMA has no data type for {t.dtype}")
        out.append(Binding(spec, flat[spec.map], flat[spec.tensor], shape, str(t.dtype)))
    return out


def fill_emulated(bindings: list[Binding], arrays: dict) -> None:
    """Encode each map with tdsl's encoding over the emulator's array of its tensor."""
    from .sm90 import emulator_tensor_map

    for b in bindings:
        tensor = arrays[b.tensor].reshape(b.shape)
        arrays[b.map][:] = emulator_tensor_map(tensor, b.spec.box, b.spec.swizzle)


@dataclass(frozen=True)
class TiledArguments:
    """What `cuTensorMapEncodeTiled` takes for a C-contiguous tensor, besides its address: the
    enum names (`CU_TENSOR_MAP_DATA_TYPE_<data_type>`, `CU_TENSOR_MAP_SWIZZLE_<swizzle>`), the
    sizes and box innermost first and the byte strides of dimensions 1 .. rank-1. The call path
    and the exported launcher (export.py) both encode from it."""

    data_type: str
    rank: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: str


def tiled_arguments(shape: tuple[int, ...], dtype: str, box: tuple[int, ...], swizzle: str) -> TiledArguments:
    """The encoding's arguments for `shape` and `box` given outermost first (the tensor's axis order).

        tiled_arguments((256, 128), "float16", (128, 64), "128B")
        # TiledArguments("FLOAT16", 2, dims=(128, 256), strides=(256,), box=(64, 128), swizzle="128B")
    """
    itemsize = np.dtype("uint16" if dtype == "bfloat16" else dtype).itemsize
    dims = tuple(reversed(shape))                      # innermost first
    strides = []
    step = itemsize
    for d in dims[:-1]:                                # bytes, for dimensions 1 .. rank-1
        step *= d
        strides.append(step)
    return TiledArguments(DATA_TYPES[dtype], len(shape), dims, tuple(strides), tuple(reversed(box)),
                          SWIZZLES[swizzle])


def encode_tiled(driver, ptr: int, shape: tuple[int, ...], dtype: str, box: tuple[int, ...], swizzle: str) -> bytes:
    """The driver's 128-byte tiled tensor map over the C-contiguous tensor of `shape` at device
    address `ptr` (box in the tensor's axis order, outermost first): element strides of 1, no
    interleave, 128-byte L2 promotion, zero fill outside the tensor."""
    from .runtime import check

    a = tiled_arguments(shape, dtype, box, swizzle)
    tmap = check(driver.cuTensorMapEncodeTiled(
        getattr(driver.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{a.data_type}"), a.rank, ptr,
        list(a.dims), list(a.strides), list(a.box), [1] * a.rank,
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(driver.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{a.swizzle}"),
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
    words = np.array([int(w) for w in tmap.opaque], np.uint64)
    if words.nbytes != 128:
        raise TargetError(f"cuTensorMapEncodeTiled returned {words.nbytes} bytes, not 128")
    return words.tobytes()


def fill_device(bindings: list[Binding], ptrs: dict, stream: int) -> None:
    """Encode each map with the driver over its tensor's device memory and copy it into the map's
    device buffer."""
    from .runtime import _driver, copy_to_device

    driver = _driver()
    for b in bindings:
        raw = encode_tiled(driver, ptrs[b.tensor], b.shape, b.dtype, b.spec.box, b.spec.swizzle)
        copy_to_device(ptrs[b.map], np.frombuffer(raw, np.uint8), stream=stream)
