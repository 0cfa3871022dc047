"""Tuning a function with symbolic dimensions at chosen sizes, and choosing a size's schedule.

    result = tdsl.tune(rowsum, sizes={"n": [64, 1024, 4096]})   # one task per size ("bucket")
    kernel = tdsl.build(rowsum, database="tuning.db")           # dispatches on the call's n

Each size is a constant-shape copy (`func.specialize(n=64)`, named `rowsum_n64`) tuned like any
other function; the database also remembers which symbolic function and sizes it stands for
(`Database.add_bucket`). A call picks the bucket nearest its sizes (by the ratio of each
dimension, `nearest`).
"""
from __future__ import annotations

import itertools
import math

from ..errors import ArgumentError
from ..ir.specialize import shape_vars


def bucket_name(func, sizes: dict[str, int]) -> str:
    """The name of the constant-shape copy of `func` at `sizes`: `rowsum_n64`, `mm_m64_n128`."""
    return func.name + "".join(f"_{k}{v}" for k, v in sizes.items())


def specialization(func, sizes: dict[str, int]):
    """`func.specialize(**sizes)`, renamed `bucket_name(func, sizes)`."""
    from dataclasses import replace

    return replace(func.specialize(**sizes), name=bucket_name(func, sizes))


def _size_list(name: str, values) -> list[int]:
    values = [values] if isinstance(values, int) and not isinstance(values, bool) else values
    try:
        out = sorted(set(values))
    except TypeError:
        out = None
    if not out or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in out):
        raise ArgumentError(f"tune: sizes[{name!r}] must be a list of positive ints (the sizes to tune "
                            f"for), not {values!r}")
    return out


def expand(funcs: list, sizes: dict | None) -> list[tuple]:
    """(function to tune, (symbolic function, sizes) or None) for each bucket of each function."""
    if sizes is None:
        return [(f, None) for f in funcs]
    if not isinstance(sizes, dict) or not sizes:
        raise ArgumentError(f"tune: sizes= must be a dict of dimension name -> sizes, e.g. "
                            f"sizes={{'n': [64, 1024]}}, not {sizes!r}")
    lists = {name: _size_list(name, values) for name, values in sizes.items()}
    out: list[tuple] = []
    used: set = set()
    for f in funcs:
        dims = list(shape_vars(f))
        if not dims:
            out.append((f, None))
            continue
        missing = [d for d in dims if d not in lists]
        if missing:
            raise ArgumentError(f"tune: {f.name} has the symbolic dimension(s) {', '.join(missing)} that "
                                f"sizes= does not give (it gives {', '.join(lists)}); add e.g. "
                                f"sizes={{{', '.join(repr(d) + ': [...]' for d in dims)}}}")
        used.update(dims)
        for combo in itertools.product(*(lists[d] for d in dims)):
            bucket = dict(zip(dims, combo))
            out.append((specialization(f, bucket), (f, bucket)))
    unknown = [name for name in lists if name not in used]
    if unknown:
        have = sorted({d for f in funcs for d in shape_vars(f)})
        raise ArgumentError(f"tune: sizes= names {', '.join(map(repr, unknown))}, which no tuned function has "
                            f"as a symbolic dimension (they have: {', '.join(have) or 'none'})")
    return out


def nearest(buckets: list[dict[str, int]], sizes: dict[str, int]) -> int:
    """The index of the bucket nearest `sizes`: the smallest sum over dimensions of |log(size /
    bucket size)| (ties: the larger bucket, whose tiles were chosen for more work)."""
    def distance(k: int):
        b = buckets[k]
        return (sum(abs(math.log(max(1, sizes[d]) / b[d])) for d in b), -sum(b.values()))
    return min(range(len(buckets)), key=distance)
