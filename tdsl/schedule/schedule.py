"""The Schedule facade: one short method per primitive, a trace, undo and diffs.

Each method checks its handles, runs the pure primitive on the current function and commits
the result only when the primitive succeeded: a refused step leaves the schedule untouched.
Adding a primitive = a pure function in `primitives/<family>.py` + one method calling
`self._apply(...)`, here or in the family's mixin (`dataflow_methods.py`, `tensorize_methods.py`).
"""
from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence

from ..errors import RemovedHandleError, ScheduleError
from ..ir import BlockRealize, For, PrimExpr, PrimFunc, Var
from ..ir.module import IRModule
from ..tracebacks import wrap_public_methods
from .dataflow_methods import DataflowMethods
from .diffs import Checkpoint, ScriptDiff, step_line
from .einsum_methods import EinsumMethods
from .handles import BlockRV, LoopRV, StmtSRef
from .primitives import annotate as _annotate
from .primitives import lookup as _lookup
from .primitives import loops as _loops
from .relayout_methods import RelayoutMethods
from .sampling import SamplingMethods, plain
from .tensorize_methods import TensorizeMethods
from .trace import Instruction, Trace
from .tree import ambiguous_block_error, find_block, find_loop, repeated_block_names, unique_names
from .tvm_spelling import absent_method, accept_tvm_spelling, check_schedule_options, true_flags

_SERIAL = itertools.count()


class Schedule(SamplingMethods, TensorizeMethods, DataflowMethods, EinsumMethods, RelayoutMethods):
    """Transforms a PrimFunc step by step. `sch.func` is the current function.

    Loops written with the same name in two nests are told apart as the printer shows them
    (`i`, `i_1`), so messages and traces use the names `sch.show()` prints.

    >>> sch = tdsl.Schedule(matmul)
    >>> i, j, k = sch.get_loops(sch.get_block("C"))
    >>> i0, i1 = sch.split(i, factors=[None, 32])

    `seed` seeds the random source of the sampling primitives (`sample_perfect_tile`, ...):
    the same seed samples the same decisions; None draws a fresh seed.
    """

    def __init__(self, func: PrimFunc | IRModule, seed: int | None = None, *, debug_mask: str | int = "none",
                 error_render_level: str = "detail", enable_check: bool = True):
        if isinstance(func, IRModule):
            func = func.func
        if not isinstance(func, PrimFunc):
            raise TypeError(f"tdsl.Schedule takes a PrimFunc (a @T.prim_func), not {type(func).__name__}")
        self._render = check_schedule_options(debug_mask, error_render_level, enable_check)
        self._func = unique_names(func)
        self._history: list[tuple[PrimFunc, int]] = []  # (function before, trace length before) per step
        self._trace: list[Instruction] = []
        self._live: set[int] = set()
        self._dead: set[int] = set()
        self._removed: set[tuple] = set()  # handles given to remove_rv: (serial, block name or id(loop var))
        self._rng = random.Random(seed)

    def __getattr__(self, name: str):
        # only reached for names the schedule does not have: TVM's get a pointer to tdsl's way
        raise absent_method(name)

    # state --------------------------------------------------------------------------------
    @property
    def func(self) -> PrimFunc:
        """The function as scheduled so far."""
        return self._func

    @property
    def mod(self) -> IRModule:
        """TVM's view of the function as scheduled so far: `sch.mod["main"]` is `sch.func`."""
        return IRModule({"main": self._func})

    @property
    def trace(self) -> Trace:
        """The steps so far; `print(sch.trace)` shows them as Python."""
        return Trace(list(self._trace))

    def copy(self) -> Schedule:
        """An independent schedule at the same point; handles of this one work on it too. Its
        random source starts where this one's is (reseed it with `copy.seed(n)` to sample apart)."""
        other = Schedule(self._func, error_render_level=self._render)
        other._history = list(self._history)
        other._trace = list(self._trace)
        other._live = set(self._live)
        other._dead = set(self._dead)
        other._removed = set(self._removed)
        other._rng.setstate(self._rng.getstate())
        return other

    def undo(self) -> None:
        """Go back one step; the handles that step (and later lookups) produced die."""
        if not self._history:
            raise ScheduleError("undo: there is no step to undo")
        func, length = self._history.pop()
        for ins in self._trace[length:]:
            self._live.discard(ins.serial)
            self._dead.add(ins.serial)
        del self._trace[length:]
        self._func = func

    # showing ------------------------------------------------------------------------------
    def checkpoint(self, name: str | None = None) -> Checkpoint:
        """Mark this point of the schedule: ``mark = sch.checkpoint("tiles")``; later
        ``sch.diff(since=mark)`` / ``sch.show(diff=mark)`` show what the steps since changed."""
        if name is not None and not isinstance(name, str):
            raise ScheduleError(f"checkpoint: the name must be a string, not {type(name).__name__}")
        steps = len(self._history)
        return Checkpoint(name if name is not None else f"step {steps}", steps, self._func, id(self._history))

    def _func_after(self, steps: int) -> PrimFunc:
        return self._history[steps][0] if steps < len(self._history) else self._func

    def _since(self, since) -> int:
        """The number of steps made before `since` (a Checkpoint, or how many steps back)."""
        if isinstance(since, Checkpoint):
            if since.owner != id(self._history):
                raise ScheduleError(f"diff: {since!r} belongs to another schedule (made by its checkpoint())")
            if since.steps > len(self._history) or self._func_after(since.steps) is not since.func:
                raise ScheduleError(f"diff: {since!r} no longer exists: the steps since then were undone "
                                    f"(this schedule has made {len(self._history)} steps)")
            return since.steps
        if isinstance(since, bool) or not isinstance(since, int) or since < 0:
            raise ScheduleError(f"diff: expected a checkpoint (sch.checkpoint()) or a number of steps >= 0, "
                                f"got {since!r}")
        return max(len(self._history) - since, 0)

    def step_lines(self, start: int = 0) -> list[str]:
        """The steps from number `start` on, one line each, with the names the script prints."""
        lines = []
        for k in range(start, len(self._history)):
            first = self._history[k][1]
            if first < len(self._trace):
                ins = self._trace[first]
                lines.append(step_line(ins.kind, ins.inputs, ins.attrs, ins.outputs))
        return lines

    def diff(self, since: Checkpoint | int | None = None) -> ScriptDiff:
        """What steps changed, as a unified diff of the script headed by the steps:
        the last step (default), the steps since a checkpoint (``since=mark``) or the last
        `since` steps (``since=3``)."""
        start = self._since(1 if since is None else since)
        before = self._func_after(start)
        return ScriptDiff(before.script(), self._func.script(), self.step_lines(start), self._func.name)

    def show(self, diff: bool | int | Checkpoint = False, style: str | None = None) -> None:
        """Show the function: highlighted in a terminal, HTML in a notebook. ``diff=True``: what
        the last step changed; ``diff=3``: the last three steps; ``diff=mark``: since a checkpoint."""
        if diff is True:
            self.diff().show()
        elif diff is False or diff is None:
            from ..script.highlight import display_html

            if not display_html(self):
                self._func.show(style=style)
        else:
            self.diff(since=diff).show()

    def __repr__(self) -> str:
        n = len(self._history)
        return f"# Schedule of {self._func.name}, {n} step{'s' if n != 1 else ''}\n{self._func.script()}"

    def _repr_html_(self) -> str:
        from ..script.html import script_html

        n = len(self._history)
        last = self.step_lines(n - 1) if n else []
        head = f"# Schedule of {self._func.name}, {n} step{'s' if n != 1 else ''}"
        return script_html(self._func.script(), [head + (f"; last: {last[0]}" if last else "")])

    # machinery ----------------------------------------------------------------------------
    def _resolve(self, x, primitive: str):
        """A handle's identity (block name / loop Var), after checking the handle is alive here."""
        if isinstance(x, (BlockRV, LoopRV)):
            if x.serial not in self._live:
                why = ("the step that made it was undone" if x.serial in self._dead
                       else "it belongs to another schedule (replay with trace.apply)")
                raise ScheduleError(f"{primitive}: the handle {x!r} is no longer valid: {why}")
            if (x.serial, x.name if isinstance(x, BlockRV) else id(x.var)) in self._removed:
                raise RemovedHandleError(f"{primitive}: the handle {x!r} was removed with sch.remove_rv; look the "
                                         "block or loop up again")
            return x.name if isinstance(x, BlockRV) else x.var
        if isinstance(x, (list, tuple)):
            return [self._resolve(v, primitive) for v in x]
        return plain(x)

    def _expect(self, primitive: str, x, kinds: tuple[type, ...], what: str) -> None:
        if isinstance(x, str) and BlockRV in kinds:
            # a block may be named by its name, as in TVM (sch.compute_at("B", loop))
            _lookup.get_block(self._func, x)
            return
        if not isinstance(x, kinds):
            shown = repr(x) if isinstance(x, (BlockRV, LoopRV, str, int)) else type(x).__name__
            raise ScheduleError(f"{primitive}: expected {what}, got {shown}")

    def _wrap(self, result, serial: int):
        if result is None:
            return (), "none", None
        if isinstance(result, (str, Var)):
            h = self._handle(result, serial)
            return (h,), "one", h
        handles = [self._handle(r, serial) for r in result]
        return tuple(handles), "list", handles

    @staticmethod
    def _handle(identity, serial: int):
        return BlockRV(identity, serial) if isinstance(identity, str) else LoopRV(identity, serial)

    def _apply(self, kind: str, fn: Callable, inputs: Sequence, attrs: dict | None = None, *, step: bool = True):
        """Run pure primitive `fn` on the current function; commit and record it only on success."""
        attrs = attrs or {}
        if isinstance(attrs.get("buffer"), list):  # ["read", 0] (a trace read back from JSON) is ("read", 0)
            attrs = {**attrs, "buffer": tuple(attrs["buffer"])}
        resolved = [self._resolve(x, kind) for x in inputs]
        new_func, result = fn(self._func, *resolved, **{k: self._resolve(v, kind) for k, v in attrs.items()})
        _refuse_repeated_names(kind, new_func, result)
        serial = next(_SERIAL)
        outputs, shape, wrapped = self._wrap(result, serial)
        if step:
            self._history.append((self._func, len(self._trace)))
        self._trace.append(Instruction(kind, tuple(inputs), tuple(attrs.items()), outputs, shape, serial))
        self._live.add(serial)
        self._func = new_func
        return wrapped

    # lookup -------------------------------------------------------------------------------
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

    # loops --------------------------------------------------------------------------------
    def split(self, loop: LoopRV, factors: Sequence[int | PrimExpr | None], *,
              preserve_unit_iters: bool = False, disable_predication: bool = False) -> list[LoopRV]:
        """Split a loop into one loop per factor, outer to inner; one factor may be None (inferred).
        A factor product above the extent (a None on a non-dividing extent) adds a T.where predicate;
        `disable_predication=True` (TVM) is refused then, and changes nothing otherwise.
        `preserve_unit_iters=True` keeps a new loop of extent 1 in the block bindings (TVM's
        default form `vi = i_0 * 16 + i_1`); tdsl's default folds it (`vi = i_1`).

        Before::

            @T.prim_func
            def before(A: T.Buffer((100,), "float32"), B: T.Buffer((100,), "float32")):
                for i in range(100):
                    with T.block("B"):
                        vi = T.axis.spatial(100, i)
                        B[vi] = A[vi] * T.float32(2)

        Call::

            sch = tdsl.Schedule(before)
            (i,) = sch.get_loops(sch.get_block("B"))
            i_0, i_1 = sch.split(i, factors=[None, 32])

        After::

            @T.prim_func
            def after(A: T.Buffer((100,), "float32"), B: T.Buffer((100,), "float32")):
                for i_0, i_1 in T.grid(4, 32):
                    with T.block("B"):
                        vi = T.axis.spatial(100, i_0 * 32 + i_1)
                        T.where(i_0 * 32 + i_1 < 100)
                        B[vi] = A[vi] * T.float32(2)
        """
        self._expect("split", loop, (LoopRV,), "a loop handle (from sch.get_loops)")
        if not isinstance(factors, (list, tuple)):
            raise ScheduleError(f"split: factors must be a list such as [None, 32], not {type(factors).__name__}")
        attrs = {"factors": list(factors), **true_flags("split", disable_predication=disable_predication,
                                                         preserve_unit_iters=preserve_unit_iters)}
        return self._apply("split", _loops.split, [loop], attrs)

    def add_unit_loop(self, block_or_loop: BlockRV | LoopRV) -> LoopRV:
        """Put a loop of extent 1 directly above a block or a loop (TVM's add_unit_loop); returns it.

        Before::

            @T.prim_func
            def before(A: T.Buffer((), "int32"), C: T.Buffer((), "int32")):
                with T.block("C"):
                    C[()] = A[()] + 1

        Call::

            sch = tdsl.Schedule(before)
            u = sch.add_unit_loop(sch.get_block("C"))

        After::

            @T.prim_func
            def after(A: T.Buffer((), "int32"), C: T.Buffer((), "int32")):
                for u in range(1):
                    with T.block("C"):
                        C[()] = A[()] + 1
        """
        self._expect("add_unit_loop", block_or_loop, (BlockRV, LoopRV), "a block or loop handle")
        return self._apply("add_unit_loop", _loops.add_unit_loop, [block_or_loop])

    def fuse(self, *loops: LoopRV, preserve_unit_iters: bool = True) -> LoopRV:
        """Fuse adjacent, perfectly nested loops (outer to inner) into one. TVM's
        `preserve_unit_iters` changes nothing here: either way a fused loop of extent 1 leaves
        its iterator's binding at 0 (`vj = T.axis.spatial(1, 0)`), as TVM's fuse does.

        Before::

            @T.prim_func
            def before(A: T.Buffer((16, 8), "float32"), B: T.Buffer((16, 8), "float32")):
                for i, j in T.grid(16, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vi, vj] = A[vi, vj] + T.float32(1)

        Call::

            sch = tdsl.Schedule(before)
            i, j = sch.get_loops(sch.get_block("B"))
            i_j_fused = sch.fuse(i, j)

        After::

            @T.prim_func
            def after(A: T.Buffer((16, 8), "float32"), B: T.Buffer((16, 8), "float32")):
                for i_j_fused in range(128):
                    with T.block("B"):
                        vi = T.axis.spatial(16, i_j_fused // 8)
                        vj = T.axis.spatial(8, i_j_fused % 8)
                        B[vi, vj] = A[vi, vj] + T.float32(1)
        """
        for x in loops:
            self._expect("fuse", x, (LoopRV,), "loop handles")
        true_flags("fuse", preserve_unit_iters=preserve_unit_iters)   # checked; the same result either way
        return self._apply("fuse", _loops.fuse, list(loops))

    def reorder(self, *loops: LoopRV) -> None:
        """Reorder loops of one perfect nest; the named loops take each other's places, the loops
        between them that are not named stay where they are.

        Before::

            @T.prim_func
            def before(A: T.Buffer((16, 8), "float32"), B: T.Buffer((8, 16), "float32")):
                for i, j in T.grid(16, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vj, vi] = A[vi, vj]

        Call::

            sch = tdsl.Schedule(before)
            i, j = sch.get_loops(sch.get_block("B"))
            sch.reorder(j, i)

        After::

            @T.prim_func
            def after(A: T.Buffer((16, 8), "float32"), B: T.Buffer((8, 16), "float32")):
                for j, i in T.grid(8, 16):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vj, vi] = A[vi, vj]
        """
        for x in loops:
            self._expect("reorder", x, (LoopRV,), "loop handles")
        return self._apply("reorder", _loops.reorder, list(loops))

    def parallel(self, loop: LoopRV) -> None:
        """Run a loop's iterations on all CPU cores; its blocks must not carry a dependence over it.

        Before::

            @T.prim_func
            def before(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
                for i in range(64):
                    with T.block("B"):
                        vi = T.axis.spatial(64, i)
                        B[vi] = A[vi] + T.float32(1)

        Call::

            sch = tdsl.Schedule(before)
            (i,) = sch.get_loops(sch.get_block("B"))
            sch.parallel(i)

        After::

            @T.prim_func
            def after(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
                for i in T.parallel(64):
                    with T.block("B"):
                        vi = T.axis.spatial(64, i)
                        B[vi] = A[vi] + T.float32(1)
        """
        self._expect("parallel", loop, (LoopRV,), "a loop handle")
        return self._apply("parallel", _loops.parallel, [loop])

    def vectorize(self, loop: LoopRV) -> None:
        """Run a loop's iterations as SIMD lanes; same legality as parallel.

        Before::

            @T.prim_func
            def before(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4, 16), "float32")):
                for i, j in T.grid(4, 16):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        B[vi, vj] = A[vi, vj] * T.float32(3)

        Call::

            sch = tdsl.Schedule(before)
            i, j = sch.get_loops(sch.get_block("B"))
            sch.vectorize(j)

        After::

            @T.prim_func
            def after(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4, 16), "float32")):
                for i in range(4):
                    for j in T.vectorized(16):
                        with T.block("B"):
                            vi, vj = T.axis.remap("SS", [i, j])
                            B[vi, vj] = A[vi, vj] * T.float32(3)
        """
        self._expect("vectorize", loop, (LoopRV,), "a loop handle")
        return self._apply("vectorize", _loops.vectorize, [loop])

    def unroll(self, loop: LoopRV) -> None:
        """Unroll a loop (always legal).

        Before::

            @T.prim_func
            def before(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
                for i in range(4):
                    with T.block("B"):
                        vi = T.axis.spatial(4, i)
                        B[vi] = A[vi] - T.float32(1)

        Call::

            sch = tdsl.Schedule(before)
            (i,) = sch.get_loops(sch.get_block("B"))
            sch.unroll(i)

        After::

            @T.prim_func
            def after(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
                for i in T.unroll(4):
                    with T.block("B"):
                        vi = T.axis.spatial(4, i)
                        B[vi] = A[vi] - T.float32(1)
        """
        self._expect("unroll", loop, (LoopRV,), "a loop handle")
        return self._apply("unroll", _loops.unroll, [loop])

    def bind(self, loop: LoopRV, thread_axis: str) -> None:
        """Bind a loop to a GPU thread axis: blockIdx.x/y/z, threadIdx.x/y/z or vthread.x/y/z.

        Before::

            @T.prim_func
            def before(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
                for i in range(256):
                    with T.block("B"):
                        vi = T.axis.spatial(256, i)
                        B[vi] = A[vi] * A[vi]

        Call::

            sch = tdsl.Schedule(before)
            (i,) = sch.get_loops(sch.get_block("B"))
            bx, tx = sch.split(i, factors=[None, 64])
            sch.bind(bx, "blockIdx.x")
            sch.bind(tx, "threadIdx.x")

        After::

            @T.prim_func
            def after(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
                for i_0 in T.thread_binding(4, thread="blockIdx.x"):
                    for i_1 in T.thread_binding(64, thread="threadIdx.x"):
                        with T.block("B"):
                            vi = T.axis.spatial(256, i_0 * 64 + i_1)
                            B[vi] = A[vi] * A[vi]
        """
        self._expect("bind", loop, (LoopRV,), "a loop handle")
        return self._apply("bind", _loops.bind, [loop], {"thread_axis": thread_axis})

    # annotations --------------------------------------------------------------------------
    def annotate(self, block_or_loop: BlockRV | LoopRV, key: str, value: float | str | bool) -> None:
        """Attach `key = value` to a block (T.block_attr) or a loop (annotations=).

        Before::

            @T.prim_func
            def before(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
                for i in range(8):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        B[vi] = A[vi]

        Call::

            sch = tdsl.Schedule(before)
            b = sch.get_block("B")
            (i,) = sch.get_loops(b)
            sch.annotate(b, "note", "copy")
            sch.annotate(i, "pragma_unroll", 2)

        After::

            @T.prim_func
            def after(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
                for i in T.serial(8, annotations={"pragma_unroll": 2}):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        T.block_attr({"note": "copy"})
                        B[vi] = A[vi]
        """
        self._expect("annotate", block_or_loop, (BlockRV, LoopRV), "a block or loop handle")
        return self._apply("annotate", _annotate.annotate, [block_or_loop], {"key": key, "value": value})

    def unannotate(self, block_or_loop: BlockRV | LoopRV, key: str) -> None:
        """Remove annotation `key` from a block or a loop.

        Before::

            @T.prim_func
            def before(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
                for i in T.serial(8, annotations={"pragma_unroll": 2}):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        B[vi] = A[vi]

        Call::

            sch = tdsl.Schedule(before)
            (i,) = sch.get_loops(sch.get_block("B"))
            sch.unannotate(i, "pragma_unroll")

        After::

            @T.prim_func
            def after(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
                for i in range(8):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        B[vi] = A[vi]
        """
        self._expect("unannotate", block_or_loop, (BlockRV, LoopRV), "a block or loop handle")
        return self._apply("unannotate", _annotate.unannotate, [block_or_loop], {"key": key})


accept_tvm_spelling(Schedule)
wrap_public_methods(Schedule)


def _refuse_repeated_names(primitive: str, func: PrimFunc, result) -> None:
    """A lookup (get_child_blocks, get_consumers, ...) cannot hand out a handle to a block whose
    name several blocks have: the handle would stand for all of them."""
    repeated = repeated_block_names(func)
    if not repeated:
        return
    names = [result] if isinstance(result, str) else [r for r in result or () if isinstance(r, str)] \
        if isinstance(result, (list, tuple)) else []
    for name in names:
        if name in repeated:
            raise ambiguous_block_error(func, name, primitive)
