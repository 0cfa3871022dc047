"""Looking things up: handles for blocks and loops, and what they stand for.

The facade methods of one family (a part of `Schedule` on `ScheduleBase`); the semantics and
the legality rules are in `tdsl.schedule.primitives.lookup`.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import BlockRealize, For
from ..base import ScheduleBase
from ..handles import BlockRV, LoopRV, StmtSRef
from ..primitives import lookup as _lookup
from ..tree import find_block, find_loop


class LookupMethods(ScheduleBase):
    """get, get_sref, get_block, get_sblock, work_on, remove_rv, get_output_blocks, get_loops,
    get_child_blocks, get_producers, get_consumers."""

    def get(self, rv: BlockRV | LoopRV):
        """The statement a handle stands for in the current function (TVM's `sch.get`): the
        `Block` of a block handle, the `For` of a loop handle. ``sch.get(b).name == "C"``."""
        self._expect("get", rv, (BlockRV, LoopRV), "a block or loop handle")
        ident = self._resolve(rv, "get")
        if isinstance(ident, str):
            return find_block(self._func, ident, "get")[0].block
        return find_loop(self._func, ident, "get")[0]

    def get_sref(self, rv: BlockRV | LoopRV) -> StmtSRef:
        """TVM's reference to the statement a handle stands for, with `.stmt` (what `sch.get(rv)`
        gives) and `.parent` (the enclosing loop or block, up to the root block)."""
        self._expect("get_sref", rv, (BlockRV, LoopRV), "a block or loop handle")
        ident = self._resolve(rv, "get_sref")
        stmt, path = (find_block(self._func, ident, "get_sref") if isinstance(ident, str)
                      else find_loop(self._func, ident, "get_sref"))
        ref = None
        for node in path:
            if isinstance(node, (For, BlockRealize)):
                ref = StmtSRef(node.block if isinstance(node, BlockRealize) else node, ref)
        return StmtSRef(stmt.block if isinstance(stmt, BlockRealize) else stmt, ref)

    def get_block(self, name: str) -> BlockRV:
        """The block called `name`: ``b = sch.get_block("C")``."""
        return self._apply("get_block", _lookup.get_block, [name], step=False)

    def get_sblock(self, name: str, func_name: str | None = None) -> BlockRV:
        """TVM's name for get_block (`func_name`, if given, must name this function or be "main")."""
        self._check_func_name("get_sblock", func_name)
        return self.get_block(name)

    def work_on(self, func_name: str) -> None:
        """TVM's choice of the function to schedule in a module: a tdsl schedule has one
        function, so `func_name` must be its name (or "main")."""
        self._check_func_name("work_on", func_name)

    def _check_func_name(self, primitive: str, func_name: str | None) -> None:
        if func_name is not None and func_name not in ("main", self._func.name):
            raise ScheduleError(f"{primitive}: this schedule works on function {self._func.name!r}, not "
                                f"{func_name!r} (a tdsl schedule holds one function; make one Schedule per "
                                "function)")

    def remove_rv(self, rv: BlockRV | LoopRV) -> None:
        """Forget a handle (TVM's remove_rv): using it afterwards raises ScheduleError. The
        function is unchanged and the handle's block or loop stays."""
        self._expect("remove_rv", rv, (BlockRV, LoopRV), "a block or loop handle")
        self._resolve(rv, "remove_rv")
        self._removed.add((rv.serial, rv.name if isinstance(rv, BlockRV) else id(rv.var)))

    def get_output_blocks(self, scope_block: BlockRV | str = "root") -> list[BlockRV]:
        """The blocks under `scope_block` (default: the root block; any depth) that write a parameter of
        the function, in program order."""
        if isinstance(scope_block, str):
            scope_block = self.get_block(scope_block)
        self._expect("get_output_blocks", scope_block, (BlockRV,), "a block handle")
        return self._apply("get_output_blocks", _lookup.get_output_blocks, [scope_block], step=False)

    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        """The loops around `block` (up to its enclosing block), outer to inner:
        ``i, j, k = sch.get_loops(b)``."""
        self._expect("get_loops", block, (BlockRV,), "a block handle (from sch.get_block)")
        return self._apply("get_loops", _lookup.get_loops, [block], step=False)

    def get_child_blocks(self, block_or_loop: BlockRV | LoopRV) -> list[BlockRV]:
        """The blocks directly under a block or a loop, in program order."""
        self._expect("get_child_blocks", block_or_loop, (BlockRV, LoopRV), "a block or loop handle")
        return self._apply("get_child_blocks", _lookup.get_child_blocks, [block_or_loop], step=False)

    def get_producers(self, block: BlockRV) -> list[BlockRV]:
        """The blocks of the same scope that write what `block` reads, before it."""
        self._expect("get_producers", block, (BlockRV,), "a block handle")
        return self._apply("get_producers", _lookup.get_producers, [block], step=False)

    def get_consumers(self, block: BlockRV) -> list[BlockRV]:
        """The blocks of the same scope that read what `block` writes, after it."""
        self._expect("get_consumers", block, (BlockRV,), "a block handle")
        return self._apply("get_consumers", _lookup.get_consumers, [block], step=False)
