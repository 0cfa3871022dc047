"""What the schedule and lowering need to prove things: the index simplifier, integer bounds,
symbolic relaxation over loop ranges, affine forms, block region inference, and the integer
evaluator (`eval_int`) for expressions whose variables are bound.

`ranges` arguments are always `dict[Var, Range] | None`.
"""
from .evaluate import EvalError, eval_array, eval_int
from .region import infer_block_regions, region_covers, region_union
from .relax import linear_form, relax
from .simplify import const_bound, prove, simplify

__all__ = [
           "EvalError",
           "const_bound",
           "eval_array",
           "eval_int",
           "infer_block_regions",
           "linear_form",
           "prove",
           "region_covers",
           "region_union",
           "relax",
           "simplify",
]
