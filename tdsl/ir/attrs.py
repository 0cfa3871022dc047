"""The keys of function attributes and block/loop annotations that tdsl's rooms share: one name
for each, and the two helpers that read and set a function attribute.

Function attributes (`PrimFunc.attrs`):

* `FLAT_PARAMS` ("tdsl.flat_params"): set by lowering (flatten_buffers): the original n-d
  parameter Buffers, in the order of `func.buffer_params`; codegen, the kernels and the
  interpreter bind dimensions and check arguments against them.
* `LOWER_NOTES` ("tdsl.lower_notes"): a tuple of notes lowering left (a loop left scalar, why).
* `NONTEMPORAL_BUFFERS` ("tdsl.nontemporal_buffers"): set by convert_blocks: names of the
  buffers written by blocks annotated `NONTEMPORAL`; the CPU codegen streams their stores.
* `SWIZZLED_BUFFERS` ("tdsl.swizzled_buffers"): set by convert_blocks: names of the shared
  buffers written by blocks annotated `SWIZZLE`; the CUDA pass `swizzle_shared` XORs their
  16-byte chunks (tdsl.lower.gpu_swizzle).
* `CUDA_PRELUDE` ("tdsl.cuda_prelude"): CUDA source the tensor intrinsics' device functions
  need, set by the lowering pass that swaps intrinsics in; emitted at the top of the kernel.

Block annotations:

* `TENSOR_INTRIN` ("tdsl.tensor_intrin"): the intrinsic a tensorized block is computed by.
* `LOWER_NOTE` ("tdsl.lower_note"), on a block (a tensorized one or any other): a note lowering
  adds to the function's `LOWER_NOTES` (kernel.notes), e.g. an auto rule saying which unit the
  CPU lacks, or why a GEMM is not on the sm_90a wgmma pipeline; a list of notes where several
  rules said something of the block (`add_note`, read back by `note_texts`).
* `NONTEMPORAL` ("tdsl.nontemporal"): truthy: write this block's outputs with streaming stores
  (a hint; results are the same).
* `SWIZZLE` ("tdsl.swizzle"): truthy: lay the shared buffer this block writes out with its
  16-byte chunks XOR-swizzled by row (ldmatrix reads free of bank conflicts; same results).

Loop annotations set by schedules:

* `AUTO_UNROLL` ("pragma_auto_unroll_max_step", TVM's name): lowering's `unroll` unrolls the
  serial loops of constant extent inside whose nest has at most that many iterations.
* `AUTO_SCHEDULED` ("auto.scheduled", a block annotation): tdsl.auto's rules mark the blocks
  they scheduled so that later rules leave them alone; no meaning for lowering.

Loop annotations (internal to lowering):

* `VECTORIZE_BLOCKS` ("tdsl.vectorize.blocks"): the blocks a vectorized loop encloses, kept by
  convert_blocks until vectorize reads them for its notes ("loop j in block C").
"""
from __future__ import annotations

from typing import Any

from .functor import replace_fields
from .stmt import PrimFunc

FLAT_PARAMS = "tdsl.flat_params"
LOWER_NOTES = "tdsl.lower_notes"
INFO_NOTE = "info: "   # a LOWER_NOTES entry that only says what ran (no PerformanceWarning for it)
NONTEMPORAL_BUFFERS = "tdsl.nontemporal_buffers"
CUDA_PRELUDE = "tdsl.cuda_prelude"
TENSOR_INTRIN = "tdsl.tensor_intrin"
LOWER_NOTE = "tdsl.lower_note"
NONTEMPORAL = "tdsl.nontemporal"
SWIZZLE = "tdsl.swizzle"
SWIZZLED_BUFFERS = "tdsl.swizzled_buffers"
VECTORIZE_BLOCKS = "tdsl.vectorize.blocks"
AUTO_UNROLL = "pragma_auto_unroll_max_step"
AUTO_SCHEDULED = "auto.scheduled"


def get_attr(func: PrimFunc, key: str, default: Any = None) -> Any:
    """The value of function attribute `key`, or `default`."""
    for k, v in func.attrs:
        if k == key:
            return v
    return default


def set_attr(func: PrimFunc, key: str, value: Any) -> PrimFunc:
    """`func` with attribute `key` set to `value` (replacing an earlier value)."""
    attrs = tuple((k, v) for k, v in func.attrs if k != key) + ((key, value),)
    return replace_fields(func, attrs=attrs)


def note_texts(value) -> list[str]:
    """The notes a `LOWER_NOTE` annotation holds (one string, or a list of them)."""
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def with_note(annotations, text: str):
    """The `LOWER_NOTE` value for a block whose annotations are `annotations` once `text` is
    added: the text alone, or the notes already there followed by it (each once)."""
    old = [n for k, v in annotations if k == LOWER_NOTE for n in note_texts(v)]
    notes = list(dict.fromkeys([*old, text]))
    return notes[0] if len(notes) == 1 else notes
