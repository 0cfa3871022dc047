"""TVM's spellings of schedule calls: keyword names, constructor options, error render levels.

A TensorIR schedule ports unchanged when it passes arguments by TVM's names:

    sch.annotate(loop, ann_key="pragma_unroll", ann_val=4)    # = sch.annotate(loop, "pragma_unroll", 4)
    sch.set_scope(block, buffer_index=0, storage_scope="shared")
    sch.tensorize(loop, tensor_intrin="dot_4")

`TVM_KEYWORDS` is the one table: method -> {TVM's name: tdsl's name}. The trace records tdsl's
names, so a trace prints, replays and exports the same whichever spelling the call used.

`Schedule(func, debug_mask="all", error_render_level="fast", enable_check=True)` takes TVM's
options. tdsl checks every step in full whatever `debug_mask` / `enable_check` say (a step is
verified before it is committed); `error_render_level` shortens messages as TVM does:
"detail" (tdsl's whole message: rule, fix and the marked program), "fast" (the first line),
"none" (the primitive's name and "(not rendered)").
"""
from __future__ import annotations

import functools
import types

from ..errors import ScheduleError
from ..tracebacks import PASSTHROUGH

TVM_KEYWORDS: dict[str, dict[str, str]] = {
    "__init__": {"mod": "func"},
    "annotate": {"ann_key": "key", "ann_val": "value"},
    "unannotate": {"ann_key": "key"},
    "set_scope": {"buffer_index": "buffer", "storage_scope": "scope"},
    "storage_align": {"buffer_index": "buffer"},
    "blockize": {"target": "loop"},
    "tensorize": {"tensor_intrin": "intrin_name"},
    "seed": {"seed": "value"},
    "get": {"rand_var_or_sref": "rv"},
    "remove_rv": {"rand_var": "rv"},
}

RENDER_LEVELS = ("detail", "fast", "none")

# TVM's schedule methods tdsl does not have: what a TVM user writes in tdsl instead
ABSENT_METHODS: dict[str, str] = {
    "cache_inplace": "tdsl has no in-place cache: keep the block on the buffer, or cache_read it for a reading "
                     "block (sch.cache_read(block, i, scope, consumer_blocks=[block]))",
    "cache_index": "tdsl has no index cache: lowering simplifies and hoists index arithmetic itself",
    "read_at": "sch.cache_read(block, i, scope), then sch.compute_at(<the copy block>, loop)",
    "write_at": "sch.cache_write(block, i, scope), then sch.reverse_compute_at(<the copy block>, loop)",
    "merge": "place one loop nest under the other's loops with sch.compute_at / sch.reverse_compute_at",
    "loop_partition": "sch.split(loop, factors) (a tail that does not divide gets a T.where)",
    "reorder_block_iter_var": "sch.transform_block_layout(block, lambda i, j: (j, i)) permutes a block's iterators",
    "fuse_reduction_epilogue": "sch.reverse_compute_at(epilogue, <a spatial loop of the reduction>)",
    "decompose_padding": "sch.transform_layout(..., pad_value=v) writes the padding in its own block",
    "can_decompose_padding": "sch.transform_layout(..., pad_value=v) writes the padding in its own block",
    "rolling_buffer": "tdsl has no rolling buffers: compute_at the producer and size the buffer by hand",
    "unsafe_set_dtype": "declare the buffer with the dtype you want (T.alloc_buffer(shape, dtype))",
    "unsafe_hide_buffer_access": "declare the block's accesses with T.reads / T.writes",
    "annotate_buffer_access": "declare the block's accesses with T.reads / T.writes",
    "sample_partitioned_tile": "sch.sample_perfect_tile(loop, n)",
    "enter_postproc": "tdsl has no post-processing steps; nothing needs marking",
    "state": "tdsl has no schedule state object: sch.func is the function, sch.trace the steps",
    "func_working_on": "a tdsl schedule has one function: sch.func",
}


def absent_method(name: str) -> AttributeError:
    """The AttributeError for `sch.<name>`: for a TVM method tdsl does not have, what to write."""
    if name in ABSENT_METHODS:
        return AttributeError(f"Schedule.{name} is a TVM schedule method tdsl does not have; "
                              f"in tdsl: {ABSENT_METHODS[name]}")
    return AttributeError(f"'Schedule' object has no attribute {name!r}")


def true_flags(primitive: str, **flags) -> dict:
    """TVM's boolean options of a step as trace attributes: each must be True or False, and only
    the True ones are recorded (False is the default of every flag recorded this way)."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ScheduleError(f"{primitive}: {name} must be True or False, not {value!r}")
    return {name: True for name, value in flags.items() if value}


def check_schedule_options(debug_mask, error_render_level, enable_check) -> str:
    """Check TVM's Schedule options; the render level to keep."""
    if not (isinstance(debug_mask, int) and not isinstance(debug_mask, bool)) and debug_mask not in ("all", "none"):
        raise ValueError(f"Schedule(debug_mask={debug_mask!r}): TVM's debug_mask is \"all\", \"none\" or an int "
                         "(tdsl verifies every step either way)")
    if error_render_level not in RENDER_LEVELS:
        raise ValueError(f"Schedule(error_render_level={error_render_level!r}): one of "
                         f"{', '.join(repr(x) for x in RENDER_LEVELS)}")
    if not isinstance(enable_check, bool):
        raise ValueError(f"Schedule(enable_check={enable_check!r}): True or False (tdsl checks every step either way)")
    return error_render_level


def _rendered(err: ScheduleError, level: str) -> ScheduleError:
    text = str(err)
    primitive = getattr(err, "primitive", None) or text.split(":", 1)[0]
    short = ScheduleError(text.split("\n", 1)[0] if level == "fast" else f"{primitive}: ScheduleError: (not rendered)")
    short.__dict__.update(err.__dict__)
    return short


def _spelled(method, names: dict[str, str]):
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        for tvm_name, own in names.items():
            if tvm_name in kwargs:
                if own in kwargs:
                    raise TypeError(f"Schedule.{method.__name__}() got both {own}= and TVM's name for it, "
                                    f"{tvm_name}=; pass one")
                kwargs[own] = kwargs.pop(tvm_name)
        level = getattr(self, "_render", "detail")
        if level == "detail":
            return method(self, *args, **kwargs)
        try:
            return method(self, *args, **kwargs)
        except ScheduleError as err:
            raise _rendered(err, level) from None

    PASSTHROUGH.add(call.__code__)  # type: ignore[attr-defined]
    return call


def accept_tvm_spelling(cls: type) -> type:
    """Every public method of `cls` takes TVM's keyword names (`TVM_KEYWORDS`) and renders its
    errors at the schedule's `error_render_level`."""
    for name in dir(cls):
        if name.startswith("_") and name != "__init__":
            continue
        raw = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
        if isinstance(raw, types.FunctionType):
            setattr(cls, name, _spelled(raw, TVM_KEYWORDS.get(name, {})))
    missing = set(TVM_KEYWORDS) - set(dir(cls))
    assert not missing, f"TVM_KEYWORDS names methods Schedule does not have: {missing}"
    return cls
