"""Checking a candidate against the unscheduled function: random inputs, outputs, tolerances.

The oracle is the unscheduled function, built (its plain loops compile quickly and run fast
enough at tuning sizes). Inputs are random (floats uniform in [-1, 1), small integers) from a
seed; every buffer the function writes is compared, NaN where the reference has NaN and nowhere
else, within a tolerance by dtype: |x - ref| <= rtol * (|ref| + max|ref|).
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..ir import Buffer, BufferStore, IntImm, PrimFunc, Var
from ..ir.tree import walk as statements

RTOL = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-4, "float64": 1e-9}
"""Relative tolerance by dtype (integers and bools compare exactly)."""


def written_params(func: PrimFunc) -> list[int]:
    """Indices of the buffer parameters the function stores into."""
    stored = {id(node.buffer) for node in statements(func.body) if isinstance(node, BufferStore)}
    return [i for i, p in enumerate(func.params) if isinstance(p, Buffer) and id(p) in stored]


def check_tunable(func: PrimFunc) -> None:
    """Refuse, with an ArgumentError naming the parameter, what tuning cannot make inputs for."""
    from ..ir.specialize import shape_vars

    for p in func.params:
        if isinstance(p, Var):
            raise ArgumentError(f"tune: {func.name} has the scalar parameter {p.name!r}; tuning makes random "
                                "inputs for buffers of constant shape only (bind the scalar as a constant)")
        if not all(isinstance(s, IntImm) for s in p.shape):
            dims = list(shape_vars(func))
            example = ", ".join(f"{d!r}: [64, 1024]" for d in dims)
            raise ArgumentError(
                f"tune: parameter {p.name!r} of {func.name} has the symbolic shape ({_dims(p)}); tuning measures "
                f"constant shapes: tune it at the sizes you run, tdsl.tune({func.name}, sizes={{{example}}}) "
                f"(then tdsl.build({func.name}, database=...) picks the nearest size's schedule per call), or "
                f"tune one size, tdsl.tune({func.name}.specialize({', '.join(f'{d}=1024' for d in dims)}))")
    if not written_params(func):
        raise ArgumentError(f"tune: {func.name} writes none of its parameters; nothing to check or time")


def _dims(buf: Buffer) -> str:
    return ", ".join(str(s.value) if isinstance(s, IntImm) else getattr(s, "name", None) or str(s) for s in buf.shape)


def random_inputs(func: PrimFunc, seed: int) -> list[np.ndarray]:
    """One random array per parameter (outputs too: a function that reads them sees the same values)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for p in func.params:
        shape = tuple(int(s.value) for s in p.shape)  # type: ignore[union-attr]  # checked by check_tunable
        dt = p.dtype
        if dt.is_bool:
            arrays.append(rng.integers(0, 2, shape).astype(bool))
        elif dt.is_float:
            arrays.append(rng.uniform(-1.0, 1.0, shape).astype(dt.numpy))
        elif dt.is_uint:
            arrays.append(rng.integers(0, 8, shape).astype(dt.numpy))
        else:
            arrays.append(rng.integers(-4, 5, shape).astype(dt.numpy))
    return arrays


def _shape(buf: Buffer) -> tuple:
    return tuple(s.value if isinstance(s, IntImm) else getattr(s, "name", repr(s)) for s in buf.shape)


def signature_change(func: PrimFunc, candidate: PrimFunc) -> str | None:
    """What differs between the parameters of the unscheduled function and of a candidate (a
    `transform_layout` of a parameter changes its shape: the candidate then takes other arrays and
    cannot be checked against, or stand in for, the unscheduled function); None when they agree."""
    if len(func.params) != len(candidate.params):
        return f"the schedule changed the signature of {func.name} ({len(func.params)} parameters, now " \
               f"{len(candidate.params)})"
    for p, q in zip(func.params, candidate.params):
        if isinstance(p, Buffer) and isinstance(q, Buffer) and (_shape(p) != _shape(q) or p.dtype != q.dtype):
            return (f"the schedule changed the layout of parameter {p.name!r} from "
                    f"{_shape(p)} to {_shape(q)} (transform_layout "
                    "of a parameter); tuning compares with the unscheduled function, so re-lay out a copy "
                    f"instead: sch.cache_read(block, {p.name!r}, 'global'), then transform the copy")
    return None


def compare(func: PrimFunc, got: list[np.ndarray], want: list[np.ndarray]) -> str | None:
    """None when every written buffer matches; otherwise what differs, for the record's error."""
    for i in written_params(func):
        name, a, b = func.params[i].name, got[i], want[i]
        dtype = str(func.params[i].dtype)
        if dtype in RTOL:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            nan_a, nan_b = np.isnan(a64), np.isnan(b64)
            if (nan_a != nan_b).any():
                return f"wrong result: {name} has NaN at {int((nan_a != nan_b).sum())} elements where the " \
                       "unscheduled function has none (or the reverse)"
            keep = ~nan_b
            a64, b64 = a64[keep], b64[keep]
            if a64.size == 0:
                continue
            inf = np.isinf(b64)
            if (a64[inf] != b64[inf]).any():
                return f"wrong result: {name} differs at infinite reference values"
            a64, b64 = a64[~inf], b64[~inf]
            if a64.size == 0:
                continue
            rtol = RTOL[dtype]
            scale = float(np.abs(b64).max())
            err = np.abs(a64 - b64)
            bad = err > rtol * (np.abs(b64) + scale) + 1e-30
            if bad.any():
                return (f"wrong result: {name} differs at {int(bad.sum())} of {b64.size} elements "
                        f"(max abs error {float(err.max()):.3g}, reference scale {scale:.3g}, rtol {rtol})")
        elif not np.array_equal(a, b):
            return f"wrong result: {name} differs at {int((a != b).sum())} of {a.size} elements"
    return None
