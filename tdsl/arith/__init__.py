"""What the schedule and lowering need to prove things: the index simplifier, integer bounds,
symbolic relaxation over loop ranges, affine forms and block region inference.

`ranges` arguments are always `dict[Var, Range] | None`.
"""
from .region import infer_block_regions, region_covers, region_union
from .relax import linear_form, relax
from .simplify import const_bound, prove, simplify

__all__ = [
           "const_bound",
           "infer_block_regions",
           "linear_form",
           "prove",
           "region_covers",
           "region_union",
           "relax",
           "simplify",
]
