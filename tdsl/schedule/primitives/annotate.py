"""annotate / unannotate: attach or remove a key-value pair on a block or a loop."""
from __future__ import annotations

import dataclasses

from ...ir import PrimFunc, Var
from ...ir.tree import replace_at
from ..errors import block_name, loop_name, schedule_error
from ..tree import find_block, find_loop

_VALUE_TYPES = (bool, int, float, str)


def _target(func: PrimFunc, target: str | Var, primitive: str):
    """The annotated node (a For or a Block), its path, and how to name it."""
    if isinstance(target, Var):
        loop, path = find_loop(func, target, primitive)
        return loop, path, loop_name(target), {"loops": (target,)}
    realize, path = find_block(func, target, primitive)
    return realize.block, path + (realize,), block_name(target), {"blocks": (target,)}


def annotate(func: PrimFunc, target: str | Var, key: str, value) -> tuple[PrimFunc, None]:
    """Set annotation `key` to `value` on a block or a loop (replacing an earlier value)."""
    node, path, what, culprit = _target(func, target, "annotate")
    if not isinstance(key, str) or not key:
        raise schedule_error(func, "annotate", f"annotation key {key!r} on {what} is not a non-empty string",
                             rule="annotation keys are strings", **culprit)
    if not isinstance(value, _VALUE_TYPES):
        raise schedule_error(func, "annotate", f"annotation {key!r} on {what} has a {type(value).__name__} value",
                             rule="annotation values are int, float, str or bool", **culprit)
    keys = [k for k, _ in node.annotations]
    if key in keys:  # a new value keeps the key's place
        pairs = tuple((k, value if k == key else v) for k, v in node.annotations)
    else:
        pairs = (*node.annotations, (key, value))
    return replace_at(func, path, node, dataclasses.replace(node, annotations=pairs)), None


def unannotate(func: PrimFunc, target: str | Var, key: str) -> tuple[PrimFunc, None]:
    """Remove annotation `key` from a block or a loop."""
    node, path, what, culprit = _target(func, target, "unannotate")
    keys = [k for k, _ in node.annotations]
    if key not in keys:
        listed = ", ".join(repr(k) for k in keys) or "none"
        raise schedule_error(func, "unannotate", f"{what} has no annotation {key!r}; its annotations are {listed}",
                             rule="only an existing annotation can be removed", **culprit)
    pairs = tuple((k, v) for k, v in node.annotations if k != key)
    return replace_at(func, path, node, dataclasses.replace(node, annotations=pairs)), None
