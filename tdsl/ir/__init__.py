"""The TensorIR data model: frozen nodes, traversal, structural equality."""
from .buffer import SCOPES, Buffer, BufferRegion
from .expr import (ARITH_OPS, BINARY_OPS, COMPARE_OPS, LOGIC_OPS, MATH_CALLS, Binary, Broadcast, BufferLoad,
                   Call, Cast, FloatImm, IntImm, Node, Not, PrimExpr, Ramp, Range, Select, StringImm, Var, as_expr,
                   binary, call, const, if_then_else, is_const, logical_and, logical_or, max_, min_)
from .functor import (IRMutator, IRVisitor, collect, free_vars, node_fields, post_order_visit, replace_buffers,
                      substitute, uses_var)
from .stmt import (FOR_KINDS, THREAD_TAGS, TRUE, Allocate, AnnotationDict, Block, BlockRealize, BufferStore, Evaluate,
                   For, IfThenElse, IterVar, LetStmt, PrimFunc, SeqStmt, Stmt, annotation_value, as_prim_func, flat_seq)
from .structural import assert_structural_equal, same_expr, structural_diff, structural_equal, structural_hash

__all__ = [name for name in dir() if not name.startswith("_")]
