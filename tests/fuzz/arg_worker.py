"""Argument fuzzing worker, run in a subprocess by test_fuzz_arguments.py so a crash is caught.

    python tests/fuzz/arg_worker.py SEED COUNT

Builds a few corpus kernels for the CPU, then calls them COUNT times with randomly corrupted
arguments. Each call must either raise `tdsl.ArgumentError` or succeed with the reference
result. Before each call it prints `CASE <n> <description>` (flushed), so if the process dies
the parent knows which call killed it. At the end it prints one line `SUMMARY <json>`.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from corpus import CORPUS

import tdsl

KERNELS = ["add_symbolic", "row_sum_symbolic", "scale", "roll_int_shift", "matmul_i8", "compare_mask", "relu",
           "axpy_f64", "matvec_accumulate"]
NON_ARRAYS = [None, "A", {}, {"shape": (4,)}, [], [[1.0, 2.0]], (1, 2), 1, 2.5, True, b"\x00" * 64, object(),
              np.float32(1.0), np.array(1.0, "float32"), np.array([], "float32"), range(4), 1 + 2j, float("nan"),
              2 ** 70, -(2 ** 70), float("inf")]


class BrokenDLPack:
    """An object that claims DLPack support but fails in various ways."""

    def __init__(self, mode: str):
        self.mode = mode

    def __dlpack_device__(self):
        if self.mode == "device_raises":
            raise RuntimeError("no device")
        if self.mode == "gpu":
            return (2, 0)
        if self.mode == "junk_device":
            return ("x", None)
        return (1, 0)

    def __dlpack__(self, stream=None, **kwargs):
        if self.mode == "junk_capsule":
            return "not a capsule"
        raise BufferError("cannot export")


def _case(name: str):
    return next(c for c in CORPUS if c.name == name)


def _valid_args(case, rng: np.random.Generator, n: int | None) -> list:
    return (case.sizes(n) if case.symbolic and n is not None else case.inputs)(rng)


def _array_variants(a: np.ndarray, rng: np.random.Generator) -> list[tuple[str, object]]:
    """Ways to corrupt one array argument."""
    out: list[tuple[str, object]] = [
        ("float64", a.astype("float64") if a.dtype != np.float64 else a.astype("float32")),
        ("int32", a.astype("int32") if a.dtype != np.int32 else a.astype("int64")),
        ("bool", a.astype(bool)),
        ("big-endian", a.astype(a.dtype.newbyteorder(">"))),
        ("extra dim", a[None]),
        ("fewer dims", a.reshape(-1)[: max(1, a.size // 2)] if a.ndim > 1 else a.reshape(1, -1)),
        ("0-d", np.asarray(a.reshape(-1)[0]) if a.size else np.asarray(0, a.dtype)),
        ("bigger", np.zeros(tuple(s + 1 for s in a.shape), a.dtype)),
        ("empty", np.zeros((0,) + a.shape[1:], a.dtype)),
        ("huge (zero-stride view)", np.broadcast_to(np.zeros((1,) * a.ndim, a.dtype), (2 ** 31,) + a.shape[1:])),
        ("huge 2**40", np.broadcast_to(np.zeros((1,) * a.ndim, a.dtype), (2 ** 40,) + a.shape[1:])),
        ("object dtype", a.astype(object)),
        ("list", a.tolist()),
        ("matrix-like subclass", a.view(np.recarray) if a.dtype.names else np.ma.masked_array(a)),
        ("memoryview", memoryview(np.ascontiguousarray(a))),
    ]
    if a.ndim >= 1 and a.shape[0] > 1:
        reversed_ = a[::-1].copy()[::-1]  # same values, negative strides
        out.append(("negative strides", reversed_))
        doubled = np.repeat(a, 2, axis=0)[::2]
        out.append(("strided view", doubled))
    if a.ndim >= 2:
        out.append(("fortran order", np.asfortranarray(a)))
    readonly = a.copy()
    readonly.setflags(write=False)
    out.append(("read-only", readonly))
    raw = np.zeros(a.nbytes + 1, np.uint8)[1:].view(a.dtype).reshape(a.shape) if a.dtype.itemsize > 1 and a.size else a
    raw[...] = a
    out.append(("misaligned", raw))
    out += [(f"dlpack:{m}", BrokenDLPack(m)) for m in ("device_raises", "gpu", "junk_device", "junk_capsule", "raise")]
    return out


def _mutate(case, args: list, rng: np.random.Generator):
    """A corrupted call: (positional args, keyword args, description)."""
    kind = rng.choice(["array", "array", "array", "non_array", "count", "kwargs", "scalar", "symbolic", "omit",
                       "alias"])
    args = list(args)
    arrays = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    scalars = [i for i, a in enumerate(args) if not isinstance(a, np.ndarray)]
    if kind == "array":
        i = int(rng.choice(arrays))
        variants = _array_variants(args[i], rng)
        what, value = variants[int(rng.integers(len(variants)))]
        args[i] = value
        return args, {}, f"arg {i}: {what}"
    if kind == "non_array" or (kind == "scalar" and not scalars):
        i = int(rng.integers(len(args)))
        args[i] = NON_ARRAYS[int(rng.integers(len(NON_ARRAYS)))]
        return args, {}, f"arg {i}: {type(args[i]).__name__} {args[i]!r:.40}"
    if kind == "scalar":
        i = int(rng.choice(scalars))
        args[i] = [np.nan, np.inf, 2 ** 31, -(2 ** 31) - 1, 2 ** 64, True, "1", None, np.int64(7), np.float16(2),
                   np.array([1.0]), 1.5, -0.0][int(rng.integers(13))]
        return args, {}, f"scalar {i}: {args[i]!r}"
    if kind == "count":
        if rng.integers(2):
            return args[:-1 - int(rng.integers(len(args)))], {}, "too few"
        return args + [args[0]] * int(1 + rng.integers(2)), {}, "too many"
    if kind == "kwargs":
        if rng.integers(2):
            return args, {"bogus": args[0]}, "unknown keyword"
        i = int(rng.integers(len(args)))
        return args, {case.func.params[i].name: args[i]}, f"keyword {case.func.params[i].name} given twice"
    if kind == "symbolic" and case.symbolic:
        i = int(rng.choice(arrays))
        a = args[i]
        args[i] = np.zeros((a.shape[0] + 1,) + a.shape[1:], a.dtype)
        return args, {}, f"arg {i}: symbolic dimension mismatch"
    if kind == "omit":
        return [a for j, a in enumerate(args) if j not in case.outputs], {}, "outputs left out"
    if kind == "alias" and len(arrays) >= 2:
        i, j = int(arrays[0]), int(arrays[-1])
        if args[i].shape == args[j].shape and args[i].dtype == args[j].dtype:
            args[j] = args[i]
            return args, {}, f"arg {j} aliases arg {i}"
    return args, {}, "valid"


def _same_array(a, b) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def _coerced_scalar(param, value):
    """The value a scalar parameter may take for `value`, or None when it must be refused."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()  # a 0-d array is a scalar, as in numpy
    if not isinstance(value, (int, float, np.generic)) or isinstance(value, (np.str_, np.bytes_)):
        return None
    dt = np.dtype(str(param.dtype))
    try:
        with np.errstate(all="ignore"):
            coerced = dt.type(value)
    except (TypeError, ValueError, OverflowError):
        return None
    same = bool(np.isnan(coerced)) if dt.kind == "f" and np.isnan(float(value)) else coerced == value
    return coerced if same else None


def _placement(case, given: int, total: int) -> list[int] | None:
    """Which parameters `given` positional arguments fill: all parameters in order, or the
    inputs only when exactly the outputs are left out; None when a non-output would be missing."""
    inputs = [k for k in range(total) if k not in case.outputs]
    placed = inputs if given == len(inputs) else list(range(given))
    missing = [k for k in range(total) if k not in placed]
    return placed if all(k in case.outputs for k in missing) else None


def _outputs(case, args: list, total: int, result) -> list:
    """The output arrays after an accepted call: the given ones, and the returned ones."""
    placed = _placement(case, len(args), total) if len(args) < total else list(range(total))
    returned = list(result) if isinstance(result, tuple) else [result]
    outs = []
    for k in case.outputs:
        outs.append(args[placed.index(k)] if k in placed else returned.pop(0))
    return outs


def _meaning(case, valid: list, args: list, kwargs: dict, what: str):
    """The arguments an accepted call stands for, or None when the call must be refused."""
    if kwargs or len(args) > len(valid):
        return None
    if len(args) < len(valid):
        placed = _placement(case, len(args), len(valid))
        if placed is None:
            return None
        for k, a in zip(placed, args):
            v = valid[k]
            if not (_same_array(a, v) if isinstance(v, np.ndarray) else _coerced_scalar(case.func.params[k], a) == v):
                return None
        return valid
    meant = []
    for k, (param, v, a) in enumerate(zip(case.func.params, valid, args)):
        earlier = [q for q in range(k) if args[q] is a and isinstance(a, np.ndarray)]
        if earlier:
            meant.append(valid[earlier[0]])  # aliased: the array holds the earlier argument's values
        elif isinstance(v, np.ndarray):
            if not _same_array(a, v):
                return None
            meant.append(v)
        else:
            c = _coerced_scalar(param, a)
            if c is None:
                return None
            meant.append(c)
    return meant


def main(seed: int, count: int) -> int:
    rng = np.random.default_rng(seed)
    kernels = {name: tdsl.build(_case(name).func, target="cpu") for name in KERNELS}
    stats: dict[str, int] = {}
    failures: list[str] = []
    for n in range(count):
        name = KERNELS[int(rng.integers(len(KERNELS)))]
        case = _case(name)
        size = int(rng.choice([0, 1, 3, 7])) if case.symbolic else None
        valid = _valid_args(case, rng, size)
        args, kwargs, what = _mutate(case, [a.copy() if isinstance(a, np.ndarray) else a for a in valid], rng)
        label = f"{name}: {what}"
        print(f"CASE {n} {label}", flush=True)
        meant = _meaning(case, valid, args, kwargs, what)
        try:
            result = kernels[name](*args, **kwargs)
        except tdsl.ArgumentError as err:
            stats["ArgumentError"] = stats.get("ArgumentError", 0) + 1
            if not str(err).strip():
                failures.append(f"{label}: ArgumentError without a message")
            continue
        except Exception as err:  # noqa: BLE001 - anything else is a finding
            stats[type(err).__name__] = stats.get(type(err).__name__, 0) + 1
            failures.append(f"{label}: {type(err).__name__}: {err}"[:300])
            continue
        stats["accepted"] = stats.get("accepted", 0) + 1
        if meant is None:
            failures.append(f"{label}: accepted arguments it should refuse")
            continue
        want = case.reference(*[m.copy() if isinstance(m, np.ndarray) else m for m in meant])
        outs = _outputs(case, args, len(valid), result)
        problem = _compare(case, outs, want)
        if problem:
            failures.append(f"{label}: accepted but {problem}")
    print("SUMMARY " + json.dumps({"stats": stats, "failures": failures}), flush=True)
    return 0


def _compare(case, outs, want) -> str | None:
    """None when the outputs match the reference, else what differs."""
    for got, w in zip(outs, want):
        got, w = np.asarray(got), np.asarray(w)
        if got.shape != w.shape:
            return f"output shape {got.shape} != {w.shape}"
        if got.dtype.kind in "iub":
            if not np.array_equal(got, w):
                return "wrong values"
        elif not np.allclose(got.astype(np.float64), w.astype(np.float64), rtol=case.rtol * 10, atol=case.atol * 10,
                             equal_nan=True):
            return "wrong values"
    return None


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
