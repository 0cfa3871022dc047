"""The sampling names other rooms and older code import from here (kept as they were): the
sampled values live in `values.py`, the pure sampling logic in `primitives/sampling.py`, the
Schedule methods in `methods/sampling.py`."""
from .primitives.sampling import (
    INLINE,
    INLINE_DECISION,
    ROOT,
    ROOT_DECISION,
    check_perfect_tile,
    compute_location_candidates,
    divisors,
    random_perfect_tile,
)
from .values import FloatRV, IntRV, StrRV, ValueRV, plain, value_rv

__all__ = ["INLINE", "INLINE_DECISION", "ROOT", "ROOT_DECISION", "FloatRV", "IntRV", "StrRV", "ValueRV",
           "check_perfect_tile", "compute_location_candidates", "divisors", "plain", "random_perfect_tile",
           "value_rv"]
