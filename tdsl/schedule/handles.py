"""Handles: BlockRV and LoopRV (and StmtSRef, TVM's reference to a statement in place).

The pure primitives name things by stable identities: a block by its name (unique in a
function), a loop by its loop `Var` object (primitives that keep a loop keep its Var). The
Schedule wraps those identities in handles that also remember the trace step that made them,
so that a handle of an undone step is refused.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Var


@dataclass(frozen=True, eq=False)
class BlockRV:
    """A handle to a block, followed by its name."""

    name: str
    serial: int

    def __repr__(self) -> str:
        return f'Block("{self.name}")'


@dataclass(frozen=True, eq=False)
class LoopRV:
    """A handle to a loop, followed by the identity of its loop variable."""

    var: Var
    serial: int

    @property
    def name(self) -> str:
        return self.var.name

    def __repr__(self) -> str:
        return f"Loop({self.var.name})"


@dataclass(frozen=True, eq=False)
class StmtSRef:
    """TVM's `sch.get_sref(rv)`: the statement a handle stands for now (`stmt`, a Block or For)
    and the reference of the loop or block around it (`parent`, None for the root block). A
    snapshot: it does not follow later steps."""

    stmt: object
    parent: StmtSRef | None

    def same_as(self, other) -> bool:
        return self is other

