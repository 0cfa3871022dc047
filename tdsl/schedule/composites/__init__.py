"""Steps built only from public primitives, above them: `auto_tensorize` (reindex, pad_einsum,
transform_layout, split, reorder, tensorize on a scratch schedule) and `library` (a generic
library intrinsic made concrete for a block, then tensorize)."""
