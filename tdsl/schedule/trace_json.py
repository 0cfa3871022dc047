"""A trace as JSON data (for tuning databases), in the layout of TVM's `Trace.as_json`.

    [[[kind, inputs, attrs, outputs], ...], [[step, decision], ...]]

* `kind` is the Schedule method ("split", "sample_perfect_tile", ...);
* `inputs` and `outputs` name handles "b<k>" (blocks), "l<k>" (loops), "v<k>" (sampled values);
  an input string that is data, not a handle, is quoted as TVM does ('"C"');
* `attrs` is a list of [name, value] pairs (keyword arguments);
* other values: numbers, null, true/false and lists as they are; a dict (an annotation value)
  is {"dict": [[key, value], ...]}; an expression (a symbolic
  split factor) is {"expr": tree}, an index map {"index_map": [[params], [trees]]}, where a tree is
  ["var", name, dtype] | ["int", value, dtype] | ["float", value, dtype] | ["bin", op, a, b] |
  ["not", a] | ["select", c, t, f] | ["cast", dtype, v] | ["call", dtype, op, [args]];
* `decisions` gives the decision of each sampling step by its index in the instruction list.

`Trace(instructions_from_json(trace_to_json(t)))` prints and replays as `t` does.
"""
from __future__ import annotations

import json

from ..dtypes import DataType
from ..errors import ScheduleError
from ..ir import AnnotationDict, Binary, Call, Cast, FloatImm, IntImm, Not, PrimExpr, Select, Var
from .handles import BlockRV, LoopRV
from .instruction import Instruction
from .primitives.layout import IndexMap
from .values import ValueRV, value_rv


def _expr_to_json(e: PrimExpr):
    if isinstance(e, Var):
        return ["var", e.name, str(e.dtype)]
    if isinstance(e, IntImm):
        return ["int", int(e.value), str(e.dtype)]
    if isinstance(e, FloatImm):
        return ["float", float(e.value), str(e.dtype)]
    if isinstance(e, Binary):
        return ["bin", e.op, _expr_to_json(e.a), _expr_to_json(e.b)]
    if isinstance(e, Not):
        return ["not", _expr_to_json(e.a)]
    if isinstance(e, Select):
        return ["select", _expr_to_json(e.condition), _expr_to_json(e.true_value), _expr_to_json(e.false_value)]
    if isinstance(e, Cast):
        return ["cast", str(e.dtype), _expr_to_json(e.value)]
    if isinstance(e, Call):
        return ["call", str(e.dtype), e.op, [_expr_to_json(a) for a in e.args]]
    raise ScheduleError(f"trace.as_json: the expression {e!r} ({type(e).__name__}) has no JSON form")


def _expr_from_json(t, names: dict[str, Var]) -> PrimExpr:
    tag = t[0]
    if tag == "var":
        return names.setdefault(t[1], Var(t[1], DataType.parse(t[2])))
    if tag == "int":
        return IntImm(int(t[1]), DataType.parse(t[2]))
    if tag == "float":
        return FloatImm(float(t[1]), DataType.parse(t[2]))
    if tag == "bin":
        return Binary(t[1], _expr_from_json(t[2], names), _expr_from_json(t[3], names))
    if tag == "not":
        return Not(_expr_from_json(t[1], names))
    if tag == "select":
        cond, true_value, false_value = (_expr_from_json(x, names) for x in t[1:4])
        return Select(cond, true_value, false_value)
    if tag == "cast":
        return Cast(DataType.parse(t[1]), _expr_from_json(t[2], names))
    if tag == "call":
        return Call(DataType.parse(t[1]), t[2], tuple(_expr_from_json(a, names) for a in t[3]))
    raise ScheduleError(f"Trace.from_json: unknown expression tag {tag!r}")


def _index_map_to_json(m: IndexMap):
    import inspect

    params = [p.name for p in inspect.signature(m.fn).parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD]
    for dtype in ("int32", "int64"):  # int64 indices for a map over int64 dimensions
        try:
            result = m.fn(*[Var(n, DataType.parse(dtype)) for n in params])
            break
        except Exception as exc:  # noqa: BLE001 - a map that cannot be written down
            error = exc
    else:
        raise ScheduleError(f"trace.as_json: the index map {m!r} cannot be called on variables: {error}") from None
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    outs = [IntImm(o) if isinstance(o, int) else o for o in outs]
    data = [params, [_expr_to_json(o) for o in outs]]
    return {"index_map": data + ([dtype] if dtype != "int32" else [])}


def _retyped(tree, old: str, new: str):
    """An expression tree with its index constants and variables of type `old` made `new`."""
    if old == new or not isinstance(tree, list) or not tree:
        return tree
    if tree[0] in ("int", "var") and len(tree) == 3:
        return [tree[0], tree[1], new if tree[2] == old else tree[2]]
    return [tree[0]] + [_retyped(t, old, new) for t in tree[1:]]


def _index_map_from_json(data) -> IndexMap:
    from ..ir import substitute

    params, trees = data[0], data[1]
    recorded = data[2] if len(data) > 2 else "int32"

    def fn(*indices):
        # the map was written down over `recorded` indices; called over others (int64 dimensions
        # where the recording used int32 ones), its index constants take their type
        idx = [i if isinstance(i, PrimExpr) else IntImm(i) for i in indices]
        actual = str(idx[0].dtype) if idx else recorded
        dt = DataType.parse(actual if actual in ("int32", "int64") else recorded)
        names: dict[str, Var] = {}
        formals = [names.setdefault(p, Var(p, dt)) for p in params]
        outputs = [_expr_from_json(_retyped(t, recorded, str(dt)), names) for t in trees]
        return tuple(substitute(o, dict(zip(formals, idx))) for o in outputs)

    # a signature with the recorded names, so that printing and arity checks see them
    src = f"lambda {', '.join(params)}: _fn({', '.join(params)})"
    return IndexMap(eval(src, {"_fn": fn}))


def _value_to_json(x, names: dict[int, str]):
    if isinstance(x, (BlockRV, LoopRV) + ValueRV):
        if id(x) in names:
            return names[id(x)]
        if isinstance(x, ValueRV):
            return _value_to_json(x._plain(), names)
        raise ScheduleError(f"trace.as_json: the handle {x!r} was not made by an earlier step of the trace")
    if x is None or isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, str):
        return json.dumps(x)
    if isinstance(x, (dict, AnnotationDict)):  # an annotation value
        return {"dict": [[k, _value_to_json(v, names)] for k, v in (x.items() if isinstance(x, dict) else x)]}
    if isinstance(x, (list, tuple)):
        return [_value_to_json(v, names) for v in x]
    if isinstance(x, PrimExpr):
        return {"expr": _expr_to_json(x)}
    if isinstance(x, IndexMap) or callable(x):
        return _index_map_to_json(x if isinstance(x, IndexMap) else IndexMap(x))
    raise ScheduleError(f"trace.as_json: the argument {x!r} ({type(x).__name__}) has no JSON form")


def trace_to_json(trace) -> list:
    """[instructions, decisions] for `trace` (see the module docstring)."""
    names: dict[int, str] = {}
    insts, decisions = [], []
    for k, ins in enumerate(trace.instructions):
        inputs = [_value_to_json(x, names) for x in ins.inputs]
        attrs = [[key, _value_to_json(v, names)] for key, v in ins.attrs]
        outs = []
        for h in ins.outputs:
            prefix = "b" if isinstance(h, BlockRV) else "l" if isinstance(h, LoopRV) else "v"
            names[id(h)] = f"{prefix}{len(names)}"
            outs.append(names[id(h)])
        insts.append([ins.kind, inputs, attrs, outs])
        if ins.is_sampling:
            decisions.append([k, ins.decision])
    return [insts, decisions]


def _value_from_json(x, handles: dict[str, object]):
    if isinstance(x, str):
        if len(x) >= 2 and x[0] == '"' and x[-1] == '"':
            return json.loads(x)
        if x not in handles:
            raise ScheduleError(f"Trace.from_json: {x!r} is neither a handle made by an earlier step nor a "
                                "quoted string")
        return handles[x]
    if isinstance(x, list):
        return [_value_from_json(v, handles) for v in x]
    if isinstance(x, dict):
        if "expr" in x:
            return _expr_from_json(x["expr"], {})
        if "index_map" in x:
            return _index_map_from_json(x["index_map"])
        if "dict" in x:
            return {k: _value_from_json(v, handles) for k, v in x["dict"]}
        raise ScheduleError(f"Trace.from_json: unknown value {x!r}")
    return x


_LIST_INPUTS = {"reorder", "fuse"}  # methods taking *loops: their inputs were a tuple


def _outputs(kind: str, names: list[str], decision, attrs: dict, serial: int):
    """Placeholder handles standing for the recorded outputs (sampled values get their values)."""
    out: list = []
    for k, n in enumerate(names):
        if n.startswith("b"):
            out.append(BlockRV(n, serial))
        elif n.startswith("l"):
            out.append(LoopRV(Var(n), serial))
        elif kind == "sample_perfect_tile":
            out.append(value_rv(int(decision[k]), serial))
        elif kind == "sample_categorical":
            out.append(value_rv(attrs["candidates"][decision], serial))
        else:
            out.append(value_rv(0, serial))
    return out


def instructions_from_json(data) -> list[Instruction]:
    """The steps of `trace_to_json` data (or of its JSON text); `Trace.from_json` makes them a Trace."""
    if isinstance(data, (str, bytes)):
        data = json.loads(data)
    try:
        insts, decision_list = data
        decisions = {int(k): d for k, d in decision_list}
        handles: dict[str, object] = {}
        steps = []
        for k, (kind, inputs, attrs, outs) in enumerate(insts):
            ins_inputs = tuple(_value_from_json(x, handles) for x in inputs)
            ins_attrs = {key: _value_from_json(v, handles) for key, v in attrs}
            decision = decisions.get(k)
            produced = _outputs(kind, outs, decision, ins_attrs, -1 - k)
            handles.update(zip(outs, produced))
            shape = "none" if not outs else "list" if kind in LIST_OUTPUT else "one"
            steps.append(Instruction(kind, ins_inputs, tuple(ins_attrs.items()), tuple(produced), shape, -1 - k,
                                     decision))
    except ScheduleError:
        raise
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise ScheduleError(f"Trace.from_json: not a trace's JSON ({type(exc).__name__}: {exc})") from None
    return steps


LIST_OUTPUT = {"get_loops", "get_child_blocks", "get_producers", "get_consumers", "split", "sample_perfect_tile"}
"""The Schedule methods that return a list of handles (the others return one handle or none)."""
