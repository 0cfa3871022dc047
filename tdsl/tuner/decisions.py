"""The design space's decisions as vectors, and an evolution scored by a model alone.

Preparing a candidate (replay, lowering, IR features) costs 0.1-1 s, so a round can afford to
prepare a few dozen. Scoring a candidate by its *decisions* costs microseconds, so a round can
score thousands, as MetaSchedule's evolutionary search does with its cost model: a population
of the fastest measured candidates is mutated for a few generations, each generation kept to
the children the model predicts fastest, and only the best predictions are prepared.

A candidate is `(sketch index, decisions)`; its vector (`DecisionSpace.encode`) is one slot per
sketch (one-hot), then every sketch's sampling steps side by side (the other sketches' slots
hold OTHER):

* `sample_perfect_tile` with n factors: log2 of each factor;
* `sample_categorical`: the index and, for a numeric candidate, log2(1 + |value|);
* `sample_compute_location`: the decision (-2 inline, -1 root, k the k-th legal loop).

A decision left to the replay (None: sampled anew) reads UNKNOWN.

    ds = DecisionSpace(sketches)
    ranked = evolve(ds, parents, model, rng, skip=lambda key: key in tried)
"""
from __future__ import annotations

import json
import math
import random
from collections.abc import Callable

import numpy as np

from . import space as space_mod

OTHER = -5.0      # a slot of another sketch
UNKNOWN = -9.0    # a decision left to the replay


class DecisionSpace:
    """The sketches' sampling steps, laid out as one fixed-length vector."""

    def __init__(self, sketches: list):
        self.sketches = list(sketches)
        self.structures = [space_mod.structure(t) for t in self.sketches]
        self.by_structure = {s: i for i, s in enumerate(self.structures)}
        self.layout: list[list[tuple[int, str, int, int]]] = []     # per sketch: (step, kind, offset, width)
        offset = len(self.sketches)
        for trace in self.sketches:
            slots = []
            for k in trace.decisions:
                ins = trace.instructions[k]
                width = (int(dict(ins.attrs).get("n", 1)) if ins.kind == "sample_perfect_tile"
                         else 2 if ins.kind == "sample_categorical" else 1)
                slots.append((k, ins.kind, offset, width))
                offset += width
            self.layout.append(slots)
        self.width = offset

    def sketch_of(self, trace_text: str) -> int | None:
        """The index of the sketch a (realized) trace belongs to, None for another structure."""
        return self.by_structure.get(space_mod.structure(space_mod.load(trace_text)))

    def key(self, sketch: int, decisions: dict) -> tuple:
        """(structure, decisions): what TaskState.candidate_key gives for the same proposal."""
        return (self.structures[sketch], json.dumps({str(k): v for k, v in decisions.items()}, sort_keys=True))

    def encode(self, sketch: int, decisions: dict) -> np.ndarray:
        v = np.full(self.width, OTHER)
        v[: len(self.sketches)] = 0.0
        v[sketch] = 1.0
        trace = self.sketches[sketch]
        for k, kind, offset, width in self.layout[sketch]:
            d = decisions.get(k, decisions.get(str(k)))
            if d is None:
                v[offset: offset + width] = UNKNOWN
            elif kind == "sample_perfect_tile":
                v[offset: offset + width] = [math.log2(max(1, int(f))) for f in list(d)[:width]]
            elif kind == "sample_categorical":
                cands = dict(trace.instructions[k].attrs).get("candidates", ())
                value = cands[d] if 0 <= d < len(cands) else None
                v[offset] = d
                v[offset + 1] = math.log2(1 + abs(value)) if isinstance(value, (int, float)) else d
            else:
                v[offset] = float(d)
        return v

    def matrix(self, items: list[tuple[int, dict]]) -> np.ndarray:
        return np.array([self.encode(s, d) for s, d in items], dtype=np.float64).reshape(len(items), self.width)

    # moves ----------------------------------------------------------------------------------
    def sample(self, sketch: int, rng: random.Random) -> dict:
        """Fresh decisions for a sketch, drawn as its replay would draw them: categorical by
        their weights, perfect tiles of the extent the sketch's own decision multiplies to;
        compute locations None (their legal loops are known only on replay)."""
        from ..schedule.sampling import random_perfect_tile

        trace = self.sketches[sketch]
        out: dict = {}
        for k, kind, _, _ in self.layout[sketch]:
            ins = trace.instructions[k]
            attrs = dict(ins.attrs)
            if kind == "sample_categorical":
                out[k] = rng.choices(range(len(attrs["probs"])), weights=attrs["probs"])[0]
            elif kind == "sample_perfect_tile" and isinstance(ins.decision, (list, tuple)):
                out[k] = random_perfect_tile(rng, math.prod(int(f) for f in ins.decision), int(attrs["n"]),
                                             int(attrs.get("max_innermost_factor", 16)))
            else:
                out[k] = None
        return out

    def mutate(self, sketch: int, decisions: dict, rng: random.Random, steps: int) -> dict | None:
        """`decisions` with `steps` of its sampling steps changed (space.mutate_decision)."""
        trace = self.sketches[sketch]
        keys = [k for k, *_ in self.layout[sketch]]
        rng.shuffle(keys)
        out, changed = dict(decisions), 0
        for k in keys:
            new = space_mod.mutate_decision(trace.instructions[k], decisions.get(k), rng)
            if new is not ... and new != decisions.get(k):
                out[k] = new
                changed += 1
                if changed >= steps:
                    break
        return out if changed else None

    @staticmethod
    def crossover(a: dict, b: dict, rng: random.Random) -> dict | None:
        child = {k: (a[k] if rng.random() < 0.5 else b.get(k)) for k in a}
        return child if child != a and child != b else None


def evolve(space: DecisionSpace, parents: list[tuple[int, dict]], model, rng: random.Random,
           skip: Callable[[tuple], bool], want: int, fresh: int = 256, generations: int = 4,
           children: int = 256, keep: int = 64) -> list[tuple[int, dict]]:
    """Up to `want` new candidates, best predicted first, found as MetaSchedule's evolutionary
    search finds them: the first population is `parents` (the fastest measured candidates) and
    `fresh` random samples of the sketches; then `generations` rounds of `children` mutants and
    crossovers of the population, each round keeping the `keep` the model predicts fastest. A
    candidate for which `skip(space.key(...))` is true (measured, refused, pending) is never
    returned; every one returned was scored by `model`."""
    found: dict[tuple, tuple[float, int, dict]] = {}

    def score(items: list[tuple[int, dict]]) -> None:
        if items:
            for (s, d), value in zip(items, model.predict(space.matrix(items))):
                found[space.key(s, d)] = (float(value), s, d)

    samples, seen = [], set()
    for _ in range(fresh):
        s = rng.randrange(len(space.sketches))
        d = space.sample(s, rng)
        key = space.key(s, d)
        if key not in seen and not skip(key):
            seen.add(key)
            samples.append((s, d))
    score(samples)
    population = [(s, dict(d)) for s, d in parents] + [(s, d) for _, s, d in sorted(
        found.values(), key=lambda t: -t[0])[:keep]]
    for _ in range(generations if population else 0):
        kids: list[tuple[int, dict]] = []
        for _ in range(children * 3):
            if len(kids) >= children:
                break
            s, d = rng.choice(population)
            child = None
            if rng.random() < 0.2:
                mates = [m for ms, m in population if ms == s and m is not d]
                if mates:
                    child = space.crossover(d, rng.choice(mates), rng)
            if child is None:
                child = space.mutate(s, d, rng, steps=1 if rng.random() < 0.7 else 2)
            if child is None:
                continue
            key = space.key(s, child)
            if key in seen or skip(key):
                continue
            seen.add(key)
            kids.append((s, child))
        if not kids:
            break
        score(kids)
        # the next population: the best predicted so far, and some of the measured parents
        ranked = sorted(found.values(), key=lambda t: -t[0])[:keep]
        population = [(s, d) for _, s, d in ranked] + [(s, dict(d)) for s, d in parents[: max(1, keep // 4)]]
    best = sorted(found.values(), key=lambda t: -t[0])
    return [(s, d) for _, s, d in best[:want]]
