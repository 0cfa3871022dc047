"""Random schedule steps, legal and illegal, through the public Schedule API only.

`random_step(sch, data, pool)` draws one primitive (the loop family always; the dataflow,
reduction, layout and blockize primitives when the Schedule has them) with random operands:
blocks and loops of the current function, but also handles from earlier steps (possibly
dead), wrong buffers, bad factors, unknown scopes and thread axes. The caller checks the
contract: either the step succeeds, or it raises `tdsl.ScheduleError` and the schedule is
left exactly as it was.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hypothesis import strategies as st

import tdsl
from tdsl.ir import Block, collect

LOOP_PRIMITIVES = ["split", "split", "fuse", "reorder", "parallel", "vectorize", "unroll", "bind", "annotate",
                   "unannotate", "undo"]
OPTIONAL_PRIMITIVES = ["cache_read", "cache_write", "set_scope", "compute_at", "reverse_compute_at",
                       "compute_inline", "reverse_compute_inline", "decompose_reduction", "rfactor",
                       "transform_layout", "storage_align", "blockize"]
AXES = ["blockIdx.x", "threadIdx.x", "threadIdx.y", "vthread.x", "blockIdx.q", "warp"]
SCOPES = ["global", "local", "shared", "bogus"]
BUFFERS = ["A", "B", "Out", "S0", "S1", "nope"]
INDEX_MAPS = [
    lambda i, j: (j, i),
    lambda i, j: (i, j // 2, j % 2),
    lambda i, j: (i * 2, j),           # not onto its bounding box: padding
    lambda i, j: (i + j,),             # not one-to-one in general: must be refused
    lambda i: (i // 2, i % 2),
    lambda i: (i,),
    lambda i: (0,),                    # many-to-one
]


# what the fuzzers ran in this process: (primitive, "applied" | "refused") -> count, and "sequences"
STEP_STATS: Counter = Counter()


def available_primitives(sch: tdsl.Schedule) -> list[str]:
    """The primitives this Schedule implements (the optional ones are checked with hasattr)."""
    return LOOP_PRIMITIVES + [p for p in OPTIONAL_PRIMITIVES if hasattr(sch, p)] + ["stale"]


def block_names(func) -> list[str]:
    """The names of the blocks of `func`, outer first, without the root."""
    return [b.name for b in collect(func.body, Block) if b.name != "root"]


@dataclass
class Pool:
    """Handles produced by earlier steps; after undo or structural changes some are dead."""

    loops: list = field(default_factory=list)
    blocks: list = field(default_factory=list)
    applied: list[str] = field(default_factory=list)  # primitives that succeeded, in order


def _pick_block(sch, data, pool: Pool):
    names = block_names(sch.func)
    if pool.blocks and data.draw(st.integers(0, 9), label="stale block?") == 0:
        return data.draw(st.sampled_from(pool.blocks), label="old block")
    if not names:
        return sch.get_block(data.draw(st.sampled_from(["root", "missing"]), label="name"))
    block = sch.get_block(data.draw(st.sampled_from(names), label="block"))
    pool.blocks.append(block)
    return block


def _pick_loops(sch, data, pool: Pool, block) -> list:
    loops = sch.get_loops(block)
    pool.loops.extend(loops)
    return loops


def _pick_loop(data, loops: list, pool: Pool):
    if not loops or (pool.loops and data.draw(st.integers(0, 7), label="foreign loop?") == 0):
        if not pool.loops:
            return None
        return data.draw(st.sampled_from(pool.loops), label="old loop")
    return data.draw(st.sampled_from(loops), label="loop")


def _factors(data) -> list:
    shape = data.draw(st.sampled_from(["none_first", "none_last", "two", "three", "bad"]), label="factors")
    f = data.draw(st.integers(1, 5), label="factor")
    if shape == "none_first":
        return [None, f]
    if shape == "none_last":
        return [f, None]
    if shape == "two":
        return [f, data.draw(st.integers(1, 5), label="factor2")]
    if shape == "three":
        return [None, f, data.draw(st.integers(1, 3), label="factor2")]
    return data.draw(st.sampled_from([[None, None], [0, None], [-2, None], [None], [None, 0]]), label="bad")


def _block_buffers(func, name: str) -> list:
    """The buffers block `name` reads or writes (for drawing operands that can be legal)."""
    blocks = [b for b in collect(func.body, Block) if b.name == name]
    if not blocks:
        return []
    regions = list(blocks[0].writes) + list(blocks[0].reads)
    return list({id(r.buffer): r.buffer for r in regions}.values())


def _buffer(data, sch=None, block=None):
    """A buffer operand: often one the block really touches, else an index or a name that may be wrong."""
    touched = _block_buffers(sch.func, getattr(block, "name", "")) if sch is not None else []
    how = data.draw(st.sampled_from(["touched", "touched", "index", "name"]), label="buffer how")
    if how == "touched" and touched:
        return data.draw(st.sampled_from(touched), label="buffer").name
    if how == "index":
        return data.draw(st.integers(-1, 3), label="buffer index")
    return data.draw(st.sampled_from(BUFFERS), label="buffer name")


def _index_map(data, sch, block, buffer):
    """A map whose arity usually matches the buffer's rank."""
    ranks = {b.name: b.ndim for b in _block_buffers(sch.func, getattr(block, "name", ""))}
    fitting = [m for m in INDEX_MAPS if m.__code__.co_argcount == ranks.get(buffer)]
    if fitting and data.draw(st.integers(0, 3), label="fitting map?") > 0:
        return data.draw(st.sampled_from(fitting), label="map")
    return data.draw(st.sampled_from(INDEX_MAPS), label="map")


def random_step(sch: tdsl.Schedule, data, pool: Pool, primitives: list[str]) -> str:
    """Apply one random step; returns its primitive name. May raise tdsl.ScheduleError."""
    kind = data.draw(st.sampled_from(primitives), label="primitive")
    if kind == "undo":
        sch.undo()
        return kind
    block = _pick_block(sch, data, pool)
    loops = _pick_loops(sch, data, pool, block) if kind != "stale" else []
    loop = _pick_loop(data, loops, pool)
    if kind == "stale":
        if loop is not None:
            sch.split(loop, factors=[None, 2])
        else:
            sch.parallel(sch.get_loops(block)[0]) if sch.get_loops(block) else sch.get_block("no_such_block")
    elif kind in ("compute_inline", "reverse_compute_inline"):
        getattr(sch, kind)(block)
    elif kind in ("cache_read", "cache_write", "set_scope"):
        buffer = _buffer(data, sch, block)
        pool.blocks.append(getattr(sch, kind)(block, buffer, data.draw(st.sampled_from(SCOPES), label="scope")))
    elif kind == "transform_layout":
        buffer = _buffer(data, sch, block)
        params = sch.func.params
        sch.transform_layout(block, buffer, _index_map(data, sch, block, buffer))
        if any(a is not b for a, b in zip(params, sch.func.params)):
            # a parameter's new layout changes the signature: the sequence could no longer be
            # compared with the unscheduled function on the same arrays (tested on its own)
            sch.undo()
    elif kind == "storage_align":
        sch.storage_align(block, _buffer(data, sch, block), data.draw(st.sampled_from([0, 0, -1, 1, 2]), label="axis"),
                          data.draw(st.sampled_from([0, 4, 8, 16, 3]), label="align factor"),
                          data.draw(st.integers(-1, 5), label="offset"))
    elif loop is None:
        sch.get_block("no_such_block")  # nothing to act on: exercise the lookup error instead
    elif kind == "split":
        pool.loops.extend(sch.split(loop, factors=_factors(data)))
    elif kind == "fuse":
        start = loops.index(loop) if loop in loops else 0
        count = data.draw(st.integers(1, 3), label="count")
        chosen = loops[start:start + count] if data.draw(st.booleans(), label="adjacent?") \
            else data.draw(st.permutations(loops), label="order")[:count]
        pool.loops.append(sch.fuse(*(chosen or [loop])))
    elif kind == "reorder":
        order = data.draw(st.permutations(loops + [loop]), label="order")
        sch.reorder(*order[:data.draw(st.integers(1, len(order)), label="count")])
    elif kind == "bind":
        sch.bind(loop, data.draw(st.sampled_from(AXES), label="axis"))
    elif kind == "annotate":
        value = data.draw(st.one_of(st.integers(-2, 2), st.text("ab", max_size=2), st.booleans(),
                                    st.sampled_from([0.5])), label="value")
        sch.annotate(data.draw(st.sampled_from([block, loop]), label="target"),
                     data.draw(st.sampled_from(["pragma", "k"]), label="key"), value)
    elif kind == "unannotate":
        sch.unannotate(data.draw(st.sampled_from([block, loop]), label="target"),
                       data.draw(st.sampled_from(["pragma", "k"]), label="key"))
    elif kind in ("compute_at", "reverse_compute_at"):
        other = sch.get_block(data.draw(st.sampled_from(block_names(sch.func)), label="other block"))
        target = data.draw(st.sampled_from(_pick_loops(sch, data, pool, other) or [loop]), label="target loop")
        getattr(sch, kind)(block, target)
    elif kind == "decompose_reduction":
        pool.blocks.append(sch.decompose_reduction(block, loop))
    elif kind == "rfactor":
        pool.blocks.append(sch.rfactor(loop, data.draw(st.integers(0, 2), label="factor axis")))
    elif kind == "blockize":
        pool.blocks.append(sch.blockize(loop))
    else:
        getattr(sch, kind)(loop)
    return kind


def run_sequence(sch: tdsl.Schedule, data, n_steps: int, primitives: list[str] | None = None) -> Pool:
    """Apply `n_steps` random steps, checking after each refused one that nothing changed:
    same function object, and no trace entry but the lookups the step made."""
    pool = Pool()
    primitives = primitives or available_primitives(sch)
    STEP_STATS["sequences"] += 1
    for _ in range(n_steps):
        before, trace_before = sch.func, list(sch.trace)
        try:
            kind = random_step(sch, data, pool, primitives)
        except tdsl.ScheduleError as err:
            assert sch.func is before, f"a refused step changed the function: {err}"
            after = list(sch.trace)
            assert after[:len(trace_before)] == trace_before, f"a refused step rewrote the trace: {err}"
            extra = [ins.kind for ins in after[len(trace_before):]]
            assert all(k.startswith("get_") for k in extra), f"a refused step left {extra} in the trace: {err}"
            assert str(err).strip(), "a ScheduleError without a message"
            STEP_STATS["refused"] += 1
            continue
        pool.applied.append(kind)
        STEP_STATS[kind] += 1
        STEP_STATS["applied"] += 1
    return pool
